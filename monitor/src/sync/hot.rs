//! The hot kill path: a hard memory threshold's crossing answered before any synchronize.
//!
//! After every synchronize the eviction pass arms a victim: the pod the policy would evict
//! if a hard memory threshold were met now, ranked on the stats just read, with its
//! `cgroup.kill` already open ([`KillSwitch`]). When a kernel notifier of a hard threshold
//! fires (memcg v1 eventfd, cgroup v2 memory.events), its source calls
//! [`HotPath::hard_crossing`] before it even queues its wake. The crossing is confirmed
//! against the kernel's own number (one read of the cgroup's usage: a v1 notifier also
//! fires on the way down, memory.events for other counters), and the victim is killed by
//! one write. The synchronize that the same wake causes then carries out the eviction's
//! bookkeeping (record, events, cgroup removal) as for any other, and never evicts twice
//! for that crossing: the killed pod counts as an eviction under way.
//!
//! Only immediate evictions take this path (a hard threshold with a grace period of 0);
//! soft thresholds, disk and pid signals, and a 1 s hard grace period keep the normal one.
use std::sync::{Arc, Mutex};

use crate::clock::monotonic_ns;
use crate::notify::memcg::ThresholdSpec;
use crate::notify::{CrossingHook, WakeSource};
use crate::observe::{CgroupReader, CgroupVersion, OpenFiles};
use crate::policy::eviction::EvictionDecision;
use crate::runtime::port::KillSwitch;
use crate::state::SharedState;

/// Files the levels keep open (two per cgroup with a level).
const LEVEL_FILES_KEPT: usize = 8;

/// One level whose crossing calls for the armed kill, on the cgroup's working set (usage
/// minus inactive_file, as the signals count it): a notifier armed on usage also fires
/// when page cache alone grows, and that must cost a read, never a kill.
#[derive(Clone, Debug)]
struct Level {
    /// Reads the cgroup whose level this is (the reader's root is the cgroup itself).
    cgroup: CgroupReader,
    /// The working set at which the threshold is met.
    working_set: u64,
    /// The usage the notifiers are armed at (the working set level plus the inactive
    /// page cache when armed): below it, the working set cannot be at its level unless
    /// page cache shrank, which the exact notifier then reports.
    usage: u64,
}

impl Level {
    /// The cgroup's working set now, by the kernel's own counters.
    fn working_set_now(&self) -> Option<u64> {
        self.cgroup.working_set_bytes("").ok()
    }

    /// The cgroup's usage now: one read.
    fn usage_now(&self) -> Option<u64> {
        self.cgroup.usage_bytes("").ok()
    }
}

/// How long the hot path watches a level after an early notifier fired below it
/// ([`HotPath::hard_approach`]), and how often it reads the usage meanwhile.
pub const APPROACH_WINDOW: std::time::Duration = std::time::Duration::from_millis(50);
pub const APPROACH_POLL: std::time::Duration = std::time::Duration::from_micros(25);
/// For the first part of a watch the thread reads without sleeping: a fast allocator
/// covers the early margin in well under a millisecond, and a thread woken from a sleep
/// may wait for the CPU's current task to leave the kernel (on a kernel built without
/// preemption, 250–700 µs was seen).
pub const APPROACH_SPIN: std::time::Duration = std::time::Duration::from_millis(10);
/// After a watch that ran out its window, an early notifier starts no new one for this long
/// (usage hovering near the early level would fire it again and again); the notifiers
/// at the levels themselves still tell. This bounds the spinning to a tenth of a CPU.
pub const APPROACH_REST: std::time::Duration = std::time::Duration::from_millis(100);

/// A kill the hot path carried out, for the next synchronize to account for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HotKill {
    pub decision: EvictionDecision,
    /// The source whose notifier fired the kill.
    pub source: WakeSource,
    /// CLOCK_MONOTONIC ns when the source told the hot path, and when the kill was written.
    pub detected_ns: u64,
    pub killed_ns: u64,
}

#[derive(Debug, Default)]
struct Armed {
    levels: Vec<Level>,
    victim: Option<(EvictionDecision, KillSwitch)>,
    fired: Option<HotKill>,
}

/// Shared between the eviction pass (which arms it) and the sources (which fire it).
#[derive(Debug)]
pub struct HotPath {
    armed: Mutex<Armed>,
    state: SharedState,
    /// The levels' usage and memory.stat files, kept open: a confirmation is two preads.
    /// The levels sit on the root and the pods cgroup, so the set stays a few files.
    open: Arc<OpenFiles>,
    /// CLOCK_MONOTONIC ns when the last watch ran out its window (0: never).
    last_watch_end_ns: std::sync::atomic::AtomicU64,
}

impl HotPath {
    pub fn new(state: SharedState) -> HotPath {
        HotPath {
            armed: Mutex::new(Armed::default()),
            state,
            open: Arc::new(OpenFiles::with_budget(LEVEL_FILES_KEPT)),
            last_watch_end_ns: std::sync::atomic::AtomicU64::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Armed> {
        self.armed
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The hard levels armed with the kernel notifiers (from the same specs), read to
    /// confirm a crossing. A spec's usage level includes the cgroup's inactive page cache
    /// when it was armed (`inactive_file_at(cgroup)`); the working set level is without.
    pub fn set_levels(
        &self,
        version: CgroupVersion,
        specs: &[ThresholdSpec],
        inactive_file_at: impl Fn(&std::path::Path) -> u64,
    ) {
        // Built before the lock is taken: a source's thread waits on it, at real-time
        // priority, and this one may be preempted while holding it.
        let levels: Vec<Level> = specs
            .iter()
            .filter(|s| s.hard)
            .map(|s| Level {
                cgroup: CgroupReader::new(version, s.cgroup.clone())
                    .keeping_open(self.open.clone()),
                working_set: s.usage_bytes.saturating_sub(inactive_file_at(&s.cgroup)),
                usage: s.usage_bytes,
            })
            .collect();
        let old = std::mem::replace(&mut self.lock().levels, levels);
        drop(old);
    }

    /// The pod to kill at the next crossing; `None` disarms. Re-arming the pod armed now
    /// keeps its open switch; another pod's switch comes from `open` (no switch: disarmed).
    pub fn arm(
        &self,
        victim: Option<EvictionDecision>,
        open: impl FnOnce(&str) -> Option<KillSwitch>,
    ) {
        let armed_pod = self.armed_pod();
        match victim {
            None => drop(self.lock().victim.take()),
            // Same pod: it keeps its switch; the wording of the decision follows the
            // fresh stats.
            Some(decision) if armed_pod.as_ref() == Some(&decision.pod_key) => {
                let mut armed = self.lock();
                if let Some((current, _)) = armed.victim.as_mut() {
                    *current = decision;
                }
            }
            // Another pod: its switch is opened before the lock is taken (see set_levels).
            Some(decision) => {
                let next = open(&decision.pod_key).map(|switch| (decision, switch));
                let old = std::mem::replace(&mut self.lock().victim, next);
                drop(old);
            }
        }
    }

    /// The pod armed now.
    pub fn armed_pod(&self) -> Option<String> {
        self.lock().victim.as_ref().map(|(d, _)| d.pod_key.clone())
    }

    /// The kill the hot path carried out since the last call, if any.
    pub fn take_fired(&self) -> Option<HotKill> {
        self.lock().fired.take()
    }

    /// Whether any armed level is reached now, by the kernel's own counters; if not, the
    /// working set and level nearest to it (for the log).
    fn crossed(levels: &[Level]) -> Result<(), Option<(u64, u64)>> {
        let mut nearest: Option<(u64, u64)> = None;
        for level in levels {
            let Some(ws) = level.working_set_now() else {
                continue;
            };
            if ws >= level.working_set {
                return Ok(());
            }
            if nearest.is_none_or(|(w, l)| l - w > level.working_set - ws) {
                nearest = Some((ws, level.working_set));
            }
        }
        Err(nearest)
    }
}

/// What one look at the levels found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Look {
    Killed,
    /// No hard level reached by the working set (or the kill could not be written).
    NotReached,
    /// Nobody to kill.
    Disarmed,
}

impl CrossingHook for HotPath {
    /// A notifier at a hard level fired. If its usage is there but the working set is not
    /// quite (page cache grew since the level was armed, or the kernel's statistics lag
    /// its usage counter), the level is watched as after an early notifier: the
    /// notifier will not fire again for it.
    fn hard_crossing(&self, source: WakeSource) {
        let told_ns = monotonic_ns();
        if self.kill_if_crossed(source, told_ns, None) == Look::NotReached {
            self.watch(source, 0, told_ns);
        }
    }

    /// An early notifier fired a little below a hard level (its kernel check is coarser
    /// than the headroom wants): watch the usage closely, for a bounded time, and kill
    /// the moment a level is reached. The notifier at the level itself stays armed, so
    /// a crossing after the window (or after usage fell back) is still heard.
    fn hard_approach(&self, source: WakeSource, margin: u64) -> bool {
        use std::sync::atomic::Ordering;
        let now_ns = monotonic_ns();
        let rest_ns = APPROACH_REST.as_nanos() as u64;
        let last = self.last_watch_end_ns.load(Ordering::Relaxed);
        if last != 0 && now_ns < last.saturating_add(rest_ns) {
            return false;
        }
        self.watch(source, margin, now_ns)
    }
}

impl HotPath {
    /// Reads every level's usage, back to back for [`APPROACH_SPIN`] and then every
    /// [`APPROACH_POLL`], for up to [`APPROACH_WINDOW`]:
    /// at a level's usage, the working set is checked and the victim killed once it is
    /// there too. Stops when usage is `margin` or more below every level. Whether it
    /// killed.
    fn watch(&self, source: WakeSource, margin: u64, told_ns: u64) -> bool {
        let levels = {
            let armed = self.lock();
            if armed.victim.is_none() {
                return false;
            }
            armed.levels.clone()
        };
        let started = std::time::Instant::now();
        let (spin_until, until) = (started + APPROACH_SPIN, started + APPROACH_WINDOW);
        loop {
            let (mut reached, mut all_below) = (false, true);
            for level in &levels {
                let Some(usage) = level.usage_now() else {
                    continue;
                };
                reached |= usage >= level.usage;
                all_below &= usage < level.usage.saturating_sub(margin);
            }
            // After the reads: the moment the crossing was seen.
            let now_ns = monotonic_ns();
            if reached {
                match self.kill_if_crossed(source, now_ns, Some(told_ns)) {
                    Look::Killed => return true,
                    Look::Disarmed => return false,
                    Look::NotReached => {}
                }
            } else if all_below {
                // Under every early level: it fired on the way down, or usage fell back.
                return false;
            }
            let now = std::time::Instant::now();
            if now >= until {
                tracing::debug!(source = %source, told_ns, "hot path: watched a level, not reached within the window");
                self.last_watch_end_ns
                    .store(monotonic_ns(), std::sync::atomic::Ordering::Relaxed);
                return false;
            }
            if now < spin_until {
                std::hint::spin_loop();
            } else {
                std::thread::sleep(APPROACH_POLL);
            }
        }
    }

    /// Kills the armed victim if a hard level is reached now. `watched_from_ns`: when the
    /// notifier that started a watch told the hot path (for the log).
    fn kill_if_crossed(
        &self,
        source: WakeSource,
        detected_ns: u64,
        watched_from_ns: Option<u64>,
    ) -> Look {
        let mut armed = self.lock();
        if armed.victim.is_none() {
            tracing::debug!(source = %source, detected_ns, "hot path: told, but no victim is armed");
            return Look::Disarmed;
        }
        if let Err(nearest) = Self::crossed(&armed.levels) {
            if watched_from_ns.is_some() {
                // A watch looks again shortly; its log line comes at its end.
                return Look::NotReached;
            }
            // A notifier armed on usage also fires for page cache, and on the way down.
            let (working_set, level) = nearest.unwrap_or_default();
            tracing::debug!(
                source = %source,
                detected_ns,
                working_set,
                level,
                "hot path: told, but no hard level is reached"
            );
            return Look::NotReached;
        }
        let Some((decision, switch)) = armed.victim.take() else {
            return Look::Disarmed;
        };
        match switch.fire() {
            Ok(()) => {
                let killed_ns = monotonic_ns();
                let reaped = switch.release_memory();
                tracing::info!(
                    pod = %decision.pod_key,
                    source = %source,
                    detected_ns,
                    at_ns = killed_ns,
                    watched_from_ns = watched_from_ns.unwrap_or(0),
                    reaped,
                    "hot path: cgroup.kill written"
                );
                armed.fired = Some(HotKill {
                    decision: decision.clone(),
                    source,
                    detected_ns,
                    killed_ns,
                });
                drop(armed);
                self.state.event(
                    "Normal",
                    "HotKill",
                    &decision.pod_key,
                    format!(
                        "hard memory threshold crossed ({source}): killed through {} in {} µs",
                        switch.path.display(),
                        killed_ns.saturating_sub(detected_ns) / 1000
                    ),
                );
                Look::Killed
            }
            Err(err) => {
                // The normal path evicts at the synchronize this wake causes.
                tracing::warn!(
                    pod = %decision.pod_key,
                    "hot path: writing {} failed: {err}",
                    switch.path.display()
                );
                Look::NotReached
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::policy::eviction::EvictionReason;
    use crate::policy::signal::Signal;
    use crate::policy::types::Resource;

    fn decision(pod: &str) -> EvictionDecision {
        EvictionDecision {
            pod_key: pod.into(),
            signal: Some(Signal::MemoryAvailable),
            resource: Resource::Memory,
            reason: EvictionReason::Threshold,
            grace_period_seconds: 0,
            immediate: true,
            kill_timeout: Duration::from_secs(2),
            message: "The node was low on resource: memory. ".into(),
        }
    }

    /// A fake memory cgroup (its usage file) and a fake `cgroup.kill`, in a temp dir.
    struct Fixture {
        dir: tempfile::TempDir,
        hot: HotPath,
    }

    impl Fixture {
        fn new(level: u64) -> Fixture {
            let dir = tempfile::tempdir().expect("tempdir");
            std::fs::write(dir.path().join("memory.usage_in_bytes"), "100\n").expect("usage");
            std::fs::write(dir.path().join("memory.stat"), "total_inactive_file 0\n")
                .expect("stat");
            std::fs::write(dir.path().join("cgroup.kill"), "").expect("kill file");
            let hot = HotPath::new(SharedState::default());
            hot.set_levels(
                CgroupVersion::V1,
                &[
                    ThresholdSpec {
                        cgroup: dir.path().to_path_buf(),
                        usage_bytes: level,
                        hard: true,
                        passed_when_armed: false,
                    },
                    // Soft levels never arm the hot path.
                    ThresholdSpec {
                        cgroup: dir.path().to_path_buf(),
                        usage_bytes: 50,
                        hard: false,
                        passed_when_armed: false,
                    },
                ],
                |_| 0,
            );
            Fixture { dir, hot }
        }

        /// A usage level of 1000 armed when 300 of it was inactive page cache (the
        /// threshold is met at a working set of 700), with default/a armed.
        fn with_page_cache_at_arming() -> Fixture {
            let f = Fixture::new(0);
            f.hot.set_levels(
                CgroupVersion::V1,
                &[ThresholdSpec {
                    cgroup: f.dir.path().to_path_buf(),
                    usage_bytes: 1000,
                    hard: true,
                    passed_when_armed: false,
                }],
                |_| 300,
            );
            f.arm("default/a");
            f
        }

        /// Writes `text` over the start of `file` 5 ms from now, in place: a watch
        /// reading meanwhile never sees the file truncated.
        fn rewrite_later(&self, file: &str, text: &'static str) -> std::thread::JoinHandle<()> {
            let path = self.dir.path().join(file);
            std::thread::spawn(move || {
                use std::io::Write;
                std::thread::sleep(Duration::from_millis(5));
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .and_then(|mut f| f.write_all(text.as_bytes()))
                    .expect("rewrite");
            })
        }

        fn arm(&self, pod: &str) {
            let path = self.dir.path().join("cgroup.kill");
            self.hot
                .arm(Some(decision(pod)), |pod| KillSwitch::open(pod, &path).ok());
            assert_eq!(self.hot.armed_pod().as_deref(), Some(pod));
        }

        fn set_usage(&self, bytes: u64) {
            std::fs::write(
                self.dir.path().join("memory.usage_in_bytes"),
                format!("{bytes}\n"),
            )
            .expect("usage");
        }

        fn set_inactive(&self, bytes: u64) {
            std::fs::write(
                self.dir.path().join("memory.stat"),
                format!("cache 1\ntotal_inactive_file {bytes}\n"),
            )
            .expect("stat");
        }

        fn killed(&self) -> String {
            std::fs::read_to_string(self.dir.path().join("cgroup.kill")).expect("kill file")
        }
    }

    #[test]
    fn a_confirmed_crossing_kills_the_armed_pod_once() {
        let f = Fixture::new(1000);
        f.arm("default/big");
        // The notifier fires on the way down too: below the level nothing happens.
        f.hot.hard_crossing(WakeSource::MemcgThreshold);
        assert_eq!(f.killed(), "", "usage 100 is under the level 1000");
        assert!(f.hot.take_fired().is_none());
        f.set_usage(1000);
        f.hot.hard_crossing(WakeSource::MemcgThreshold);
        assert_eq!(f.killed(), "1", "one write to cgroup.kill");
        let fired = f.hot.take_fired().expect("a hot kill");
        assert_eq!(fired.decision.pod_key, "default/big");
        assert!(fired.killed_ns >= fired.detected_ns);
        // Disarmed by the kill: another crossing kills nobody until the next synchronize.
        f.hot.hard_crossing(WakeSource::MemcgThreshold);
        assert_eq!(f.killed(), "1");
        assert!(f.hot.take_fired().is_none());
        assert!(f.hot.armed_pod().is_none());
        let events = f.hot.state.read().events;
        assert!(
            events
                .iter()
                .any(|e| e.reason == "HotKill" && e.object == "default/big"),
            "{events:?}"
        );
    }

    #[test]
    fn nothing_is_killed_when_disarmed_or_without_a_hard_level() {
        let f = Fixture::new(1000);
        f.set_usage(5000);
        f.hot.hard_crossing(WakeSource::MemcgThreshold);
        assert_eq!(f.killed(), "", "no victim armed");
        f.arm("default/a");
        f.hot.arm(None, |_| None);
        f.hot.hard_crossing(WakeSource::MemcgThreshold);
        assert_eq!(f.killed(), "", "disarmed");
        // Only soft levels: the soft spec's 50 is exceeded, but it does not count.
        let f = Fixture::new(u64::MAX);
        f.set_usage(5000);
        f.arm("default/a");
        f.hot.hard_crossing(WakeSource::MemcgThreshold);
        assert_eq!(f.killed(), "");
        assert_eq!(f.hot.armed_pod().as_deref(), Some("default/a"));
    }

    #[test]
    fn page_cache_alone_past_the_usage_level_kills_nobody() {
        let f = Fixture::with_page_cache_at_arming();
        // Usage past the level, but 500 of it reclaimable cache: working set 600 < 700.
        f.set_usage(1100);
        f.set_inactive(500);
        f.hot.hard_crossing(WakeSource::MemcgThreshold);
        assert_eq!(f.killed(), "", "a false alarm costs a read, never a kill");
        // The working set itself reaches 700.
        f.set_inactive(400);
        f.hot.hard_crossing(WakeSource::MemcgThreshold);
        assert_eq!(f.killed(), "1");
    }

    #[test]
    fn an_early_notifier_is_followed_by_a_close_watch_that_kills_at_the_level() {
        let f = Fixture::new(1000);
        f.arm("default/a");
        // Under the early level (1000 − 100): it fired on the way down; no watch.
        f.set_usage(850);
        let started = std::time::Instant::now();
        assert!(!f.hot.hard_approach(WakeSource::MemcgThreshold, 100));
        assert!(
            started.elapsed() < APPROACH_WINDOW,
            "no watch below the early level"
        );
        // Between the early level and the level: watched until the level is reached.
        f.set_usage(950);
        let raise = f.rewrite_later("memory.usage_in_bytes", "1000\n");
        assert!(f.hot.hard_approach(WakeSource::MemcgThreshold, 100));
        raise.join().expect("raise");
        assert_eq!(f.killed(), "1");
        let fired = f.hot.take_fired().expect("a hot kill");
        assert_eq!(fired.decision.pod_key, "default/a");
    }

    #[test]
    fn a_watch_that_sees_no_crossing_ends_with_its_window() {
        let f = Fixture::new(1000);
        f.arm("default/a");
        f.set_usage(950);
        let started = std::time::Instant::now();
        assert!(!f.hot.hard_approach(WakeSource::MemcgThreshold, 100));
        assert!(started.elapsed() >= APPROACH_WINDOW);
        assert_eq!(f.killed(), "", "never reached: nobody killed");
        assert_eq!(
            f.hot.armed_pod().as_deref(),
            Some("default/a"),
            "still armed"
        );
        // Right after, an early notifier starts no new watch, even at the level: the
        // notifier at the level tells instead.
        f.set_usage(1000);
        let started = std::time::Instant::now();
        assert!(!f.hot.hard_approach(WakeSource::MemcgThreshold, 100));
        assert!(started.elapsed() < APPROACH_SPIN, "resting");
        f.hot.hard_crossing(WakeSource::MemcgThreshold);
        assert_eq!(f.killed(), "1");
        f.arm("default/b");
        // Disarmed: no watch at all.
        f.hot.arm(None, |_| None);
        assert!(!f.hot.hard_approach(WakeSource::MemcgThreshold, 100));
    }

    #[test]
    fn a_crossing_short_of_the_working_set_is_watched_until_it_gets_there() {
        let f = Fixture::with_page_cache_at_arming();
        // The usage level is reached, the working set not yet (400 of page cache).
        f.set_usage(1000);
        f.set_inactive(400);
        // Same length as before: the file is rewritten in place.
        let shrink = f.rewrite_later("memory.stat", "cache 1\ntotal_inactive_file 200\n");
        f.hot.hard_crossing(WakeSource::Ebpf);
        shrink.join().expect("shrink");
        assert_eq!(f.killed(), "1", "killed once the working set reached 700");
        let fired = f.hot.take_fired().expect("a hot kill");
        assert!(fired.detected_ns > 0);
    }

    #[test]
    fn re_arming_another_pod_replaces_the_victim() {
        let f = Fixture::new(10);
        f.arm("default/a");
        f.arm("default/b");
        f.set_usage(10);
        f.hot.hard_crossing(WakeSource::MemoryEvents);
        assert_eq!(
            f.hot.take_fired().map(|k| k.decision.pod_key).as_deref(),
            Some("default/b")
        );
    }
}
