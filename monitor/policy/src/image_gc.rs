//! Image garbage collection: which unused container images to delete, and when.
//!
//! kubelet: pkg/kubelet/images/image_gc_manager.go. The manager there reads the runtime
//! and the clock itself; here the caller passes what the runtime listed and `now`, keeps
//! an [`ImageGcState`] across calls, deletes the images a plan names, and then calls
//! [`ImageGcState::remove`] for the ones it deleted.
//!
//! Three entry points, each returning image ids in deletion order and the bytes they free:
//! - [`images_to_free`]: the periodic collection by disk usage (high/low thresholds);
//! - [`free_all_eligible`]: the eviction manager's node-level reclaim (DeleteUnusedImages);
//! - [`free_old_images`]: removal of images unused for longer than the maximum age.
//!
//! [`garbage_collect`] runs the periodic collection as the kubelet does (age, then space).
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::pod::Pod;
use super::types::Time;

/// When and how much to collect (the KubeletConfiguration imageGC* keys).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImageGcPolicy {
    /// `imageGCHighThresholdPercent`: disk usage at or above this triggers collection.
    pub high_threshold_percent: i32,
    /// `imageGCLowThresholdPercent`: collection frees down to this usage.
    pub low_threshold_percent: i32,
    /// `imageMinimumGCAge`: images detected more recently than this are kept.
    pub min_age: Duration,
    /// `imageMaximumGCAge`: unused images older than this are removed whatever the
    /// usage; `None` disables it.
    pub max_age: Option<Duration>,
}

impl Default for ImageGcPolicy {
    /// The kubelet's defaults: 85 % / 80 %, 2 minutes, no maximum age.
    fn default() -> Self {
        ImageGcPolicy {
            high_threshold_percent: 85,
            low_threshold_percent: 80,
            min_age: Duration::from_secs(120),
            max_age: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImageGcError {
    #[error("imageGCHighThresholdPercent: {0} must be in the range [0, 100]")]
    HighThreshold(i32),
    #[error("imageGCLowThresholdPercent: {0} must be in the range [0, 100]")]
    LowThreshold(i32),
    #[error(
        "imageGCLowThresholdPercent {low} can not be higher than imageGCHighThresholdPercent {high}"
    )]
    LowAboveHigh { low: i32, high: i32 },
    #[error("imageMaximumGCAge {max:?} must be greater than imageMinimumGCAge {min:?}")]
    MaxAgeNotAboveMinAge { max: Duration, min: Duration },
    /// The image filesystem reported no capacity (the kubelet's InvalidDiskCapacity).
    #[error("invalid capacity 0 on image filesystem")]
    InvalidCapacity,
}

impl ImageGcPolicy {
    /// The image GC manager's checks (NewImageGCManager), plus the configuration's rule
    /// that a maximum age must exceed the minimum age.
    pub fn validate(&self) -> Result<(), ImageGcError> {
        if !(0..=100).contains(&self.high_threshold_percent) {
            return Err(ImageGcError::HighThreshold(self.high_threshold_percent));
        }
        if !(0..=100).contains(&self.low_threshold_percent) {
            return Err(ImageGcError::LowThreshold(self.low_threshold_percent));
        }
        if self.low_threshold_percent > self.high_threshold_percent {
            return Err(ImageGcError::LowAboveHigh {
                low: self.low_threshold_percent,
                high: self.high_threshold_percent,
            });
        }
        if let Some(max) = self.max_age.filter(|max| *max <= self.min_age) {
            return Err(ImageGcError::MaxAgeNotAboveMinAge {
                max,
                min: self.min_age,
            });
        }
        Ok(())
    }
}

/// An image as the runtime lists it (CRI ListImages).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Image {
    pub id: String,
    pub repo_tags: Vec<String>,
    pub size_bytes: i64,
    /// Pinned by the runtime (e.g. the sandbox image): never collected.
    pub pinned: bool,
}

/// What the collector knows about one image.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImageRecord {
    pub id: String,
    pub repo_tags: Vec<String>,
    pub size_bytes: i64,
    pub pinned: bool,
    /// When the image was first listed.
    pub first_detected: Time,
    /// When a container was last seen using it; `Time::ZERO` (the origin) when never,
    /// which sorts it first, as the kubelet's zero time does.
    pub last_used: Time,
}

impl ImageRecord {
    fn matches(&self, ids: &BTreeSet<String>) -> bool {
        ids.contains(&self.id) || self.repo_tags.iter().any(|tag| ids.contains(tag))
    }
}

/// The collector's memory between calls (the manager's imageRecords).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImageGcState {
    records: BTreeMap<String, ImageRecord>,
    in_use: BTreeSet<String>,
}

impl ImageGcState {
    pub fn new() -> Self {
        Self::default()
    }

    /// The collector's memory as an earlier run left it (first detected and last used
    /// times survive an agent restart); nothing is in use until the next detect.
    pub fn from_records(records: impl IntoIterator<Item = ImageRecord>) -> Self {
        ImageGcState {
            records: records.into_iter().map(|r| (r.id.clone(), r)).collect(),
            in_use: BTreeSet::new(),
        }
    }

    /// Recorded times after `now` count as `now`: a clock stepped back, a state directory
    /// copied from another node or a bad write would otherwise leave an image that never
    /// ages (never past the maximum age, never ahead of the others under disk pressure).
    /// Returns the ids of the records brought back, in id order, for the caller to
    /// report and persist; an empty list when every time was at or before `now`.
    pub fn clamp_future_times(&mut self, now: Time) -> Vec<String> {
        let mut clamped = Vec::new();
        for record in self.records.values_mut() {
            if record.first_detected > now || record.last_used > now {
                record.first_detected = record.first_detected.min(now);
                record.last_used = record.last_used.min(now);
                clamped.push(record.id.clone());
            }
        }
        clamped
    }

    /// Takes in the runtime's current image list (detectImages): new images are first
    /// detected `now`; images used by a container or by a pod sandbox are last used
    /// `now`; sizes and pinning are refreshed; images no longer listed are forgotten.
    ///
    /// `in_use_ids` and `sandbox_ids` may name an image by id or by one of its repo tags
    /// (the kubelet compares ids only; pod specs name images by tag). The kubelet of old
    /// kept the sandbox image by marking it in use, as done here; runtimes now pin it.
    pub fn detect(
        &mut self,
        images: &[Image],
        in_use_ids: &BTreeSet<String>,
        sandbox_ids: &BTreeSet<String>,
        now: Time,
    ) {
        let mut current = BTreeSet::new();
        self.in_use.clear();
        for image in images {
            current.insert(image.id.clone());
            let record = self
                .records
                .entry(image.id.clone())
                .or_insert_with(|| ImageRecord {
                    id: image.id.clone(),
                    first_detected: now,
                    ..ImageRecord::default()
                });
            record.repo_tags = image.repo_tags.clone();
            record.size_bytes = image.size_bytes;
            record.pinned = image.pinned;
            if record.matches(in_use_ids) || record.matches(sandbox_ids) {
                record.last_used = now;
                self.in_use.insert(image.id.clone());
            }
        }
        self.records.retain(|id, _| current.contains(id));
    }

    pub fn record(&self, id: &str) -> Option<&ImageRecord> {
        self.records.get(id)
    }

    pub fn records(&self) -> impl Iterator<Item = &ImageRecord> {
        self.records.values()
    }

    /// Whether the last [`ImageGcState::detect`] saw the image in use.
    pub fn is_in_use(&self, id: &str) -> bool {
        self.in_use.contains(id)
    }

    /// Forgets images the caller has deleted (the manager does this in freeImage).
    pub fn remove<S: AsRef<str>>(&mut self, ids: &[S]) {
        for id in ids {
            self.records.remove(id.as_ref());
            self.in_use.remove(id.as_ref());
        }
    }

    /// Unused, unpinned images, least recently used first, then earliest detected
    /// (imagesInEvictionOrder; the id breaks remaining ties so the order is stable).
    fn eviction_order(&self) -> Vec<&ImageRecord> {
        let mut images: Vec<&ImageRecord> = self
            .records
            .values()
            .filter(|r| !r.pinned && !self.in_use.contains(&r.id))
            .collect();
        images.sort_by(|a, b| {
            (a.last_used, a.first_detected, &a.id).cmp(&(b.last_used, b.first_detected, &b.id))
        });
        images
    }
}

/// The image ids a container of one of `pods` uses, among `images`: an image is used when
/// a container's status image id or image, or its spec image, equals the image's id or
/// one of its repo tags. Feed the result to [`ImageGcState::detect`].
pub fn images_in_use(pods: &[Pod], images: &[Image]) -> BTreeSet<String> {
    images
        .iter()
        .filter(|image| {
            pods.iter().any(|pod| {
                pod.uses_image(&image.id) || image.repo_tags.iter().any(|tag| pod.uses_image(tag))
            })
        })
        .map(|image| image.id.clone())
        .collect()
}

/// Images chosen for deletion, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImageGcPlan {
    pub images: Vec<String>,
    pub bytes_freed: i64,
}

/// Frees unused images old enough to go, in eviction order, until `bytes_to_free` is
/// reached (freeSpace): an image used at `now` or later, or detected less than
/// `min_age` ago, is skipped.
fn free_space(
    policy: &ImageGcPolicy,
    state: &ImageGcState,
    bytes_to_free: i64,
    now: Time,
) -> ImageGcPlan {
    let mut plan = ImageGcPlan::default();
    for image in state.eviction_order() {
        if image.last_used >= now && image.last_used != Time::ZERO {
            continue;
        }
        if now.saturating_sub(image.first_detected) < policy.min_age {
            continue;
        }
        plan.images.push(image.id.clone());
        plan.bytes_freed = plan.bytes_freed.saturating_add(image.size_bytes.max(0));
        if plan.bytes_freed >= bytes_to_free {
            break;
        }
    }
    plan
}

/// The collection by disk usage of the image filesystem.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SpaceCollection {
    /// Usage in whole percent, as the kubelet computes it (rounded up).
    pub usage_percent: i64,
    /// Bytes to free to get down to the low threshold; 0 below the high threshold.
    pub bytes_to_free: i64,
    pub plan: ImageGcPlan,
}

impl SpaceCollection {
    /// Collection was needed but the eligible images free less than required (the
    /// kubelet then reports FreeDiskSpaceFailed).
    pub fn is_short(&self) -> bool {
        self.plan.bytes_freed < self.bytes_to_free
    }
}

/// The periodic collection by disk usage (GarbageCollect after the age pass): when usage
/// reaches the high threshold, free `capacity × (100 − low)% − available` bytes.
/// `fs_available` above `fs_capacity` counts as full capacity; a capacity of 0 is an error.
pub fn images_to_free(
    policy: &ImageGcPolicy,
    state: &ImageGcState,
    fs_capacity: i64,
    fs_available: i64,
    now: Time,
) -> Result<SpaceCollection, ImageGcError> {
    if fs_capacity <= 0 {
        return Err(ImageGcError::InvalidCapacity);
    }
    let capacity = i128::from(fs_capacity);
    let available = i128::from(fs_available.clamp(0, fs_capacity));
    let usage_percent = (100 - available * 100 / capacity) as i64;
    if usage_percent < i64::from(policy.high_threshold_percent) {
        return Ok(SpaceCollection {
            usage_percent,
            ..SpaceCollection::default()
        });
    }
    let low = i128::from(policy.low_threshold_percent.clamp(0, 100));
    let bytes_to_free = (capacity * (100 - low) / 100 - available).max(0) as i64;
    let plan = free_space(policy, state, bytes_to_free, now);
    Ok(SpaceCollection {
        usage_percent,
        bytes_to_free,
        plan,
    })
}

/// Every eligible unused image, regardless of thresholds: the eviction manager's
/// node-level reclaim (DeleteUnusedImages). In-use, sandbox and pinned images are kept,
/// and so are images younger than the minimum age: the kubelet applies `min_age` here too.
pub fn free_all_eligible(policy: &ImageGcPolicy, state: &ImageGcState, now: Time) -> ImageGcPlan {
    free_space(policy, state, i64::MAX, now)
}

/// Unused images not used for longer than `max_age` (freeOldImages), in eviction order.
/// Nothing is removed until the collector itself has been running (`began_gc`) for
/// longer than `max_age`, since images unused before it started look never used. The
/// minimum age does not apply.
pub fn free_old_images(
    policy: &ImageGcPolicy,
    state: &ImageGcState,
    now: Time,
    began_gc: Time,
) -> ImageGcPlan {
    let mut plan = ImageGcPlan::default();
    let Some(max_age) = policy.max_age.filter(|age| !age.is_zero()) else {
        return plan;
    };
    if now.saturating_sub(began_gc) <= max_age {
        return plan;
    }
    for image in state.eviction_order() {
        if now.saturating_sub(image.last_used) > max_age {
            plan.images.push(image.id.clone());
            plan.bytes_freed = plan.bytes_freed.saturating_add(image.size_bytes.max(0));
        }
    }
    plan
}

/// One periodic collection (GarbageCollect): first the images past the maximum age, then
/// by disk usage among the rest.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GarbageCollection {
    pub by_age: ImageGcPlan,
    pub by_space: SpaceCollection,
}

impl GarbageCollection {
    /// All images to delete, in order.
    pub fn images(&self) -> impl Iterator<Item = &String> {
        self.by_age.images.iter().chain(&self.by_space.plan.images)
    }

    pub fn bytes_freed(&self) -> i64 {
        self.by_age
            .bytes_freed
            .saturating_add(self.by_space.plan.bytes_freed)
    }
}

/// The periodic collection. The kubelet re-reads filesystem stats after the age pass;
/// here the bytes that pass frees are credited to `fs_available` instead.
pub fn garbage_collect(
    policy: &ImageGcPolicy,
    state: &ImageGcState,
    fs_capacity: i64,
    fs_available: i64,
    now: Time,
    began_gc: Time,
) -> Result<GarbageCollection, ImageGcError> {
    let by_age = free_old_images(policy, state, now, began_gc);
    let mut remaining = state.clone();
    remaining.remove(&by_age.images);
    let available = fs_available.saturating_add(by_age.bytes_freed);
    let by_space = images_to_free(policy, &remaining, fs_capacity, available, now)?;
    Ok(GarbageCollection { by_age, by_space })
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;

    const MIN: Duration = Duration::from_secs(60);
    const GB: i64 = 1_000_000_000;

    fn at(minutes: u64) -> Time {
        MIN * minutes as u32
    }

    fn policy() -> ImageGcPolicy {
        ImageGcPolicy {
            high_threshold_percent: 90,
            low_threshold_percent: 80,
            min_age: at(2),
            max_age: None,
        }
    }

    fn image(id: &str, gb: i64) -> Image {
        Image {
            id: id.into(),
            repo_tags: vec![format!("{id}:latest")],
            size_bytes: gb * GB,
            pinned: false,
        }
    }

    fn set(ids: &[&str]) -> BTreeSet<String> {
        ids.iter().map(|s| s.to_string()).collect()
    }

    /// a, b, c detected at 0; b used at 5, c used at 3; d detected at 9 (too young at 10);
    /// e pinned; f is the sandbox image; g is in use now.
    fn state() -> ImageGcState {
        let mut state = ImageGcState::new();
        let base = [image("a", 1), image("b", 2), image("c", 3)];
        state.detect(&base, &set(&[]), &set(&[]), at(0));
        state.detect(&base, &set(&["c:latest"]), &set(&[]), at(3));
        state.detect(&base, &set(&["b"]), &set(&[]), at(5));
        let all = [
            image("a", 1),
            image("b", 2),
            image("c", 3),
            image("d", 4),
            Image {
                pinned: true,
                ..image("e", 5)
            },
            image("f", 6),
            image("g", 7),
        ];
        state.detect(&all, &set(&[]), &set(&[]), at(9));
        state.detect(&all, &set(&["g"]), &set(&["f"]), at(10));
        state
    }

    #[test]
    fn detect_tracks_first_detected_and_last_used() {
        let state = state();
        let times = |id: &str| {
            let r = state.record(id).unwrap_or_else(|| panic!("{id} tracked"));
            (r.first_detected, r.last_used)
        };
        assert_eq!(times("a"), (at(0), Time::ZERO));
        assert_eq!(times("b"), (at(0), at(5)));
        assert_eq!(times("c"), (at(0), at(3)), "matched by repo tag");
        assert_eq!(times("d"), (at(9), Time::ZERO));
        assert_eq!(times("f"), (at(9), at(10)), "sandbox counts as used");
        assert!(state.is_in_use("g") && state.is_in_use("f") && !state.is_in_use("b"));
    }

    #[test]
    fn detect_forgets_images_gone_from_the_runtime() {
        let mut state = state();
        state.detect(&[image("a", 1)], &set(&[]), &set(&[]), at(11));
        assert_eq!(
            state.records().map(|r| r.id.as_str()).collect::<Vec<_>>(),
            ["a"]
        );
        assert_eq!(
            state.record("a").map(|r| r.first_detected),
            Some(at(0)),
            "kept its history"
        );
    }

    #[rstest]
    // capacity 100 GB: usage 89 % is under the high threshold.
    #[case::below_high(100 * GB, 11 * GB, 89, 0, &[])]
    // usage 90 %: free down to 80 % usage, 100 GB × 20 % − 10 GB = 10 GB.
    #[case::at_high(100 * GB, 10 * GB, 90, 10 * GB, &["a", "d", "c", "b"])]
    #[case::needs_little_less(100 * GB, 10 * GB + 1, 90, 10 * GB - 1, &["a", "d", "c", "b"])]
    #[case::stops_once_enough(20 * GB, GB, 95, 3 * GB, &["a", "d"])]
    #[case::available_above_capacity_is_clamped(10 * GB, 20 * GB, 0, 0, &[])]
    fn frees_down_to_the_low_threshold(
        #[case] capacity: i64,
        #[case] available: i64,
        #[case] usage: i64,
        #[case] to_free: i64,
        #[case] expected: &[&str],
    ) {
        let mut p = policy();
        p.min_age = Duration::ZERO;
        let gc = images_to_free(&p, &state(), capacity, available, at(10))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((gc.usage_percent, gc.bytes_to_free), (usage, to_free));
        assert_eq!(
            gc.plan.images, expected,
            "LRU: a, d (never used; detected 0, 9), c (used 3), b (used 5)"
        );
    }

    #[test]
    fn lru_puts_never_used_images_first_by_detection() {
        let mut p = policy();
        p.min_age = Duration::ZERO;
        let gc = free_all_eligible(&p, &state(), at(10));
        assert_eq!(gc.images, ["a", "d", "c", "b"]);
        assert_eq!(gc.bytes_freed, 10 * GB);
    }

    #[test]
    fn min_age_keeps_young_images() {
        let gc = images_to_free(&policy(), &state(), 100 * GB, 0, at(10))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            gc.plan.images,
            ["a", "c", "b"],
            "d was detected 1 minute ago"
        );
        assert!(gc.is_short(), "20 GB wanted, 6 GB eligible");
        assert_eq!((gc.bytes_to_free, gc.plan.bytes_freed), (20 * GB, 6 * GB));
    }

    #[test]
    fn eviction_path_ignores_thresholds_but_not_min_age() {
        let plan = free_all_eligible(&policy(), &state(), at(10));
        assert_eq!(plan.images, ["a", "c", "b"]);
        assert_eq!(plan.bytes_freed, 6 * GB);
        let later = free_all_eligible(&policy(), &state(), at(11));
        assert_eq!(
            later.images,
            ["a", "d", "c", "b"],
            "d is 2 minutes old at 11"
        );
    }

    #[rstest]
    #[case::disabled(None, at(100), at(0), &[])]
    #[case::collector_too_young(Some(at(4)), at(4), at(0), &[])]
    #[case::unused_over_four_minutes(Some(at(4)), at(10), at(0), &["a", "d", "c", "b"])]
    #[case::unused_over_six_minutes(Some(at(6)), at(10), at(0), &["a", "d", "c"])]
    #[case::counts_from_collector_start(Some(at(6)), at(10), at(5), &[])]
    fn removes_images_past_max_age(
        #[case] max_age: Option<Time>,
        #[case] now: Time,
        #[case] began: Time,
        #[case] expected: &[&str],
    ) {
        let p = ImageGcPolicy {
            max_age,
            ..policy()
        };
        assert_eq!(
            free_old_images(&p, &state(), now, began).images,
            expected,
            "in use: f, g; pinned: e"
        );
    }

    #[test]
    fn garbage_collect_runs_age_then_space_and_credits_the_age_pass() {
        let p = ImageGcPolicy {
            max_age: Some(at(6)),
            min_age: Duration::ZERO,
            ..policy()
        };
        // 100 GB, 9 GB free (91 %): the age pass frees a, d, c (8 GB) → 17 GB free, 83 %.
        let gc = garbage_collect(&p, &state(), 100 * GB, 9 * GB, at(10), at(0))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(gc.by_age.images, ["a", "d", "c"]);
        assert_eq!(
            (gc.by_space.usage_percent, gc.by_space.bytes_to_free),
            (83, 0)
        );
        // Full disk: 8 GB free after the age pass (92 %), 12 GB wanted, only b (2 GB) left.
        let gc = garbage_collect(&p, &state(), 100 * GB, 0, at(10), at(0))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(gc.images().collect::<Vec<_>>(), ["a", "d", "c", "b"]);
        assert_eq!(gc.by_space.bytes_to_free, 12 * GB);
        assert!(gc.by_space.is_short());
        assert_eq!(gc.bytes_freed(), 10 * GB);
    }

    #[rstest]
    // (first detected, last used) at now 10 → after the clamp, and whether it was clamped.
    #[case::both_in_the_past((at(1), at(5)), (at(1), at(5)), false)]
    #[case::never_used((at(1), Time::ZERO), (at(1), Time::ZERO), false)]
    #[case::exactly_now((at(10), at(10)), (at(10), at(10)), false)]
    #[case::used_in_the_future((at(1), at(500)), (at(1), at(10)), true)]
    #[case::detected_in_the_future((at(11), Time::ZERO), (at(10), Time::ZERO), true)]
    #[case::both_in_the_future((at(400), at(500)), (at(10), at(10)), true)]
    fn recorded_times_after_now_count_as_now(
        #[case] recorded: (Time, Time),
        #[case] expected: (Time, Time),
        #[case] clamped: bool,
    ) {
        let record = ImageRecord {
            id: "x".into(),
            first_detected: recorded.0,
            last_used: recorded.1,
            ..ImageRecord::default()
        };
        let mut state = ImageGcState::from_records([record]);
        let ids = state.clamp_future_times(at(10));
        assert_eq!(
            ids,
            if clamped {
                vec!["x".to_string()]
            } else {
                vec![]
            }
        );
        let r = state.record("x").unwrap_or_else(|| panic!("x kept"));
        assert_eq!((r.first_detected, r.last_used), expected);
    }

    #[test]
    fn an_image_used_in_the_future_ages_from_now_once_clamped() {
        // Last used "in 2100": without the clamp it is never old and never freed.
        let year_2100 = Duration::from_secs(4_102_444_800);
        let record = ImageRecord {
            id: "future".into(),
            repo_tags: vec!["future:latest".into()],
            size_bytes: GB,
            first_detected: year_2100,
            last_used: year_2100,
            ..ImageRecord::default()
        };
        let p = ImageGcPolicy {
            max_age: Some(at(60)),
            ..policy()
        };
        let listed = [image("future", 1)];
        let unclamped = {
            let mut s = ImageGcState::from_records([record.clone()]);
            s.detect(&listed, &set(&[]), &set(&[]), at(10));
            s
        };
        assert!(
            free_old_images(&p, &unclamped, at(1000), at(0))
                .images
                .is_empty()
        );
        assert!(
            free_all_eligible(&p, &unclamped, at(1000))
                .images
                .is_empty()
        );

        let mut state = ImageGcState::from_records([record]);
        assert_eq!(state.clamp_future_times(at(10)), ["future"]);
        state.detect(&listed, &set(&[]), &set(&[]), at(10));
        assert!(free_old_images(&p, &state, at(70), at(0)).images.is_empty());
        assert_eq!(
            free_old_images(&p, &state, at(71), at(0)).images,
            ["future"]
        );
        assert!(
            free_all_eligible(&p, &state, at(11)).images.is_empty(),
            "min age"
        );
        assert_eq!(free_all_eligible(&p, &state, at(12)).images, ["future"]);
    }

    #[test]
    fn zero_capacity_is_an_error() {
        assert_eq!(
            images_to_free(&policy(), &state(), 0, 0, at(10)),
            Err(ImageGcError::InvalidCapacity)
        );
    }

    #[test]
    fn remove_forgets_deleted_images() {
        let mut state = state();
        let plan = free_all_eligible(&policy(), &state, at(10));
        state.remove(&plan.images);
        assert!(
            free_all_eligible(&policy(), &state, at(10))
                .images
                .is_empty()
        );
        assert!(state.record("g").is_some() && state.record("d").is_some());
    }

    #[rstest]
    #[case::defaults(ImageGcPolicy::default(), None)]
    #[case::equal_thresholds(ImageGcPolicy { high_threshold_percent: 80, ..ImageGcPolicy::default() }, None)]
    #[case::high_over_100(ImageGcPolicy { high_threshold_percent: 101, ..ImageGcPolicy::default() },
        Some("imageGCHighThresholdPercent: 101 must be in the range [0, 100]"))]
    #[case::low_negative(ImageGcPolicy { low_threshold_percent: -1, ..ImageGcPolicy::default() },
        Some("imageGCLowThresholdPercent: -1 must be in the range [0, 100]"))]
    #[case::low_above_high(ImageGcPolicy { high_threshold_percent: 70, ..ImageGcPolicy::default() },
        Some("imageGCLowThresholdPercent 80 can not be higher than imageGCHighThresholdPercent 70"))]
    #[case::max_age_not_above_min(ImageGcPolicy { max_age: Some(Duration::from_secs(120)), ..ImageGcPolicy::default() },
        Some("imageMaximumGCAge 120s must be greater than imageMinimumGCAge 120s"))]
    #[case::max_age_ok(ImageGcPolicy { max_age: Some(Duration::from_secs(3600)), ..ImageGcPolicy::default() }, None)]
    fn validates(#[case] policy: ImageGcPolicy, #[case] error: Option<&str>) {
        assert_eq!(
            policy.validate().err().map(|e| e.to_string()).as_deref(),
            error
        );
    }

    #[test]
    fn images_in_use_matches_ids_and_tags() {
        let pods = crate::pod::parse_pod_list(
            r#"{"items":[{"metadata":{"name":"p"},"spec":{"containers":[{"name":"c","image":"b:latest"}]},
               "status":{"containerStatuses":[{"name":"c","imageID":"a"}]}}]}"#,
            "pods.json",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            images_in_use(&pods, &[image("a", 1), image("b", 1), image("c", 1)]),
            set(&["a", "b"])
        );
    }
}
