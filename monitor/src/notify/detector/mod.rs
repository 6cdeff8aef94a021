//! The userspace half of the in-kernel crossing detector (`monitor-ebpf`'s
//! `programs/crossing.rs`): the choice of attach point, and the map of armed levels,
//! rewritten after every synchronize. The kernel structure offsets it needs, read from
//! the running kernel's BTF, and the cgroup depths it walks by are in [`layout`].
//!
//! Levels are byte values of a memory cgroup's charged memory (its `page_counter`
//! usage: memory.current on v2, memory.usage_in_bytes below the root on v1), keyed by
//! the cgroup's id, the inode number of its directory.
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use aya::maps::{Array, HashMap, MapData};
use monitor_common::{
    ArmedDepths, ArmedLevel, ArmedLevels, LEVEL_ARMED, LEVEL_EARLY, LEVEL_EMPTY, LEVEL_HARD,
    LEVEL_WAIT_BELOW, LEVELS_PER_CGROUP,
};

use super::memcg::ThresholdSpec;
use crate::policy::signal::Signal;

mod layout;
pub(crate) use layout::{CgroupDepths, VMLINUX_BTF, memcg_layout};

/// Where the detector runs, in the order they are tried.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AttachPoint {
    /// `fexit` on `page_counter_try_charge`: once per charge batch (64 pages), every
    /// call looked at; needs BPF trampolines.
    CounterFexit,
    /// `fexit` on `try_charge_memcg`: once per charge (a page or a folio), sampled;
    /// needs BPF trampolines.
    ChargeFexit,
    /// `tp_btf` on `memcg:mod_memcg_lruvec_state`, sampled.
    LruvecTracepoint,
}

impl AttachPoint {
    pub const ALL: [AttachPoint; 3] = [
        AttachPoint::CounterFexit,
        AttachPoint::ChargeFexit,
        AttachPoint::LruvecTracepoint,
    ];

    /// The program's name in the object.
    pub fn program(self) -> &'static str {
        match self {
            AttachPoint::CounterFexit => "crossing_counter",
            AttachPoint::ChargeFexit => "crossing_charge",
            AttachPoint::LruvecTracepoint => "crossing_lruvec",
        }
    }

    /// The kernel function or BTF tracepoint it attaches to.
    pub(crate) fn target(self) -> &'static str {
        match self {
            AttachPoint::CounterFexit => "page_counter_try_charge",
            AttachPoint::ChargeFexit => "try_charge_memcg",
            AttachPoint::LruvecTracepoint => "mod_memcg_lruvec_state",
        }
    }

    /// How it shows in logs and settings: `fexit/try_charge_memcg`.
    pub fn name(self) -> &'static str {
        match self {
            AttachPoint::CounterFexit => "fexit/page_counter_try_charge",
            AttachPoint::ChargeFexit => "fexit/try_charge_memcg",
            AttachPoint::LruvecTracepoint => "tp_btf/mod_memcg_lruvec_state",
        }
    }

    pub(crate) fn parse(text: &str) -> Option<AttachPoint> {
        AttachPoint::ALL.into_iter().find(|a| a.name() == text)
    }
}

/// How far below a memory.available level its early level is armed, at least. The
/// node's level rides on the pods cgroup, offset by what the rest of the node held at the
/// synchronize, and under reclaim the node's working set drifts from the pods' usage (the
/// kernel's LRU aging moves page cache in and out of the working set, and pages on the
/// per-CPU free lists are not counted free): in the cgroup v2 VM, with a hog at about
/// 400 MiB/s, the node reached its threshold 4-7 MiB before or after the pods cgroup
/// reached the level armed 30 ms earlier. The hot path confirms the level on the node
/// itself and watches the node from this far below, inside its CPU budget.
pub(crate) const NODE_EARLY_MARGIN: u64 = 8 << 20;

/// The early margin of `spec`'s level: `margin` (0: no early levels), widened to
/// [`NODE_EARLY_MARGIN`] for the node's memory.available levels.
fn early_margin_of(spec: &ThresholdSpec, margin: u64) -> u64 {
    let node = spec
        .threshold
        .is_some_and(|t| t.signal == Signal::MemoryAvailable);
    if margin != 0 && node {
        margin.max(NODE_EARLY_MARGIN)
    } else {
        margin
    }
}

/// The levels to write, per cgroup directory: hard thresholds first, then soft ones,
/// then the early levels, then memory relief's levels, each group lowest first, at most [`LEVELS_PER_CGROUP`] per
/// cgroup (more are left out and counted in the second value). A level the observation
/// had already passed waits for usage to fall below it by `hysteresis(level)` before it
/// arms.
///
/// With an `early_margin`, each hard level not yet passed gets an early level that much
/// below it ([`LEVEL_EARLY`]; [`NODE_EARLY_MARGIN`] at least for the node's): a head
/// start for the hot path, which then watches the counter itself. `usage_of` gives a cgroup's usage now: an early level usage is already
/// above waits below it (it tells a rise, as the memcg v1 eventfd does, not a level).
pub(crate) fn levels_by_cgroup(
    specs: &[ThresholdSpec],
    early_margin: u64,
    usage_of: impl Fn(&Path) -> Option<u64>,
) -> (Vec<(PathBuf, ArmedLevels)>, usize) {
    // (order, cgroup, level): 0 hard, 1 soft, 2 early, 3 relief.
    let mut wanted: Vec<(u8, &Path, ArmedLevel)> = Vec::new();
    for spec in specs {
        // Relief's levels come last: they must never take an early level's slot.
        let relief = spec.threshold.is_some_and(|t| t.relief);
        wanted.push((
            match (spec.hard, relief) {
                (true, _) => 0,
                (false, false) => 1,
                (false, true) => 3,
            },
            &spec.cgroup,
            ArmedLevel {
                level_bytes: spec.usage_bytes,
                rearm_below_bytes: spec
                    .usage_bytes
                    .saturating_sub(hysteresis(spec.usage_bytes)),
                state: if spec.passed_when_armed {
                    LEVEL_WAIT_BELOW
                } else {
                    LEVEL_ARMED
                },
                flags: if spec.hard { LEVEL_HARD } else { 0 },
            },
        ));
        let margin = early_margin_of(spec, early_margin);
        if margin == 0 || !spec.hard || spec.passed_when_armed {
            continue;
        }
        let Some(early) = spec.usage_bytes.checked_sub(margin).filter(|b| *b > 0) else {
            continue;
        };
        let above = usage_of(&spec.cgroup).is_some_and(|usage| usage >= early);
        wanted.push((
            2,
            &spec.cgroup,
            ArmedLevel {
                level_bytes: early,
                rearm_below_bytes: early.saturating_sub(hysteresis(early)),
                state: if above { LEVEL_WAIT_BELOW } else { LEVEL_ARMED },
                flags: LEVEL_EARLY,
            },
        ));
    }
    wanted.sort_by_key(|(order, _, level)| (*order, level.level_bytes));
    let mut out: Vec<(PathBuf, ArmedLevels)> = Vec::new();
    let mut left_out = 0;
    for (_, cgroup, level) in wanted {
        let index = match out.iter().position(|(c, _)| c == cgroup) {
            Some(index) => index,
            None => {
                out.push((cgroup.to_path_buf(), ArmedLevels::default()));
                out.len() - 1
            }
        };
        let levels = &mut out[index].1.levels;
        if levels.iter().any(|l| l.state != LEVEL_EMPTY && *l == level) {
            continue;
        }
        match levels.iter_mut().find(|l| l.state == LEVEL_EMPTY) {
            Some(slot) => *slot = level,
            None => left_out += 1,
        }
    }
    (out, left_out)
}

/// How far below a level usage must fall before a level it had passed arms again: one
/// memcg charge batch (64 pages), or 1/128 of the level when that is more.
pub(crate) fn hysteresis(level_bytes: u64) -> u64 {
    (64 * 4096u64).max(level_bytes / 128)
}

/// Writes the depths the detector looks at; after a failed write it walks every ancestor.
fn set_depths(array: &mut Array<MapData, ArmedDepths>, depths: ArmedDepths) {
    if let Err(err) = array.set(0, depths, 0) {
        tracing::warn!("crossing detector: writing the armed depths: {err}");
        let _ = array.set(0, ArmedDepths::default(), 0);
    }
}

/// The inode number of a cgroup directory: the id the kernel gives the cgroup.
pub fn cgroup_id(dir: &Path) -> std::io::Result<u64> {
    Ok(std::fs::metadata(dir)?.ino())
}

/// The running detector: where it attached and the map of levels.
pub struct Detector {
    pub attach: AttachPoint,
    levels: Mutex<HashMap<MapData, u64, ArmedLevels>>,
    /// The depths of the armed cgroups, for the kernel's walk (`None`: an object without
    /// the map, whose walk looks up every ancestor).
    depths: Mutex<Option<Array<MapData, ArmedDepths>>>,
    cgroup_depths: CgroupDepths,
    /// How far below each hard level an early level is armed (0: none). Set by the agent
    /// when the hot path runs and no memcg v1 eventfd arms early thresholds already.
    /// Shared with the ring reader, which hands it to the hot path with an early record.
    early_margin: Arc<AtomicU64>,
    /// The ids written last time, to delete those no longer armed.
    written: Mutex<Vec<u64>>,
    /// How many levels the last arming left out, so that a lasting overflow is said once
    /// rather than at every synchronize.
    left_out: AtomicUsize,
}

/// What to say about levels left out, given how many the arming before left out: a
/// warning (`true`) when the count changes to a non-zero one, a note when it falls back
/// to zero, nothing while it stays.
fn left_out_change(before: usize, now: usize) -> Option<(bool, String)> {
    match (before, now) {
        (b, n) if b == n => None,
        (_, 0) => Some((
            false,
            "crossing detector: every level armed again".to_string(),
        )),
        (_, n) => Some((
            true,
            format!(
                "crossing detector: {n} level(s) left out, at most {LEVELS_PER_CGROUP} per cgroup"
            ),
        )),
    }
}

impl Detector {
    pub(crate) fn new(
        attach: AttachPoint,
        levels: HashMap<MapData, u64, ArmedLevels>,
        depths: Option<Array<MapData, ArmedDepths>>,
        cgroup_depths: CgroupDepths,
    ) -> Detector {
        Detector {
            attach,
            levels: Mutex::new(levels),
            depths: Mutex::new(depths),
            cgroup_depths,
            early_margin: Arc::default(),
            written: Mutex::new(Vec::new()),
            left_out: AtomicUsize::new(0),
        }
    }

    /// Arms an early level `margin` bytes below each hard level from the next
    /// [`Detector::arm`] on (0: none).
    pub fn set_early_margin(&self, margin: u64) {
        self.early_margin.store(margin, Ordering::Relaxed);
    }

    /// The margin, shared (the ring reader reads it at each early record).
    pub(crate) fn early_margin_cell(&self) -> Arc<AtomicU64> {
        self.early_margin.clone()
    }

    /// The margin of the early levels (0: none armed).
    pub fn early_margin(&self) -> u64 {
        self.early_margin.load(Ordering::Relaxed)
    }

    /// Arms `specs`, replacing every level armed before: called after every synchronize,
    /// so a fired level arms again (or waits below, when the synchronize found it passed).
    /// Early levels (see [`Detector::set_early_margin`]) all arm: see
    /// [`Detector::arm_seen`] to have those usage is already past wait below.
    pub fn arm(&self, specs: &[ThresholdSpec]) {
        self.arm_seen(specs, |_| None);
    }

    /// [`Detector::arm`], with each cgroup's usage as the synchronize observed it
    /// (`usage_of`; `None` where it did not): an early level that usage is already past
    /// waits below it.
    pub(crate) fn arm_seen(
        &self,
        specs: &[ThresholdSpec],
        usage_of: impl Fn(&Path) -> Option<u64>,
    ) {
        let (by_cgroup, left_out) = levels_by_cgroup(specs, self.early_margin(), usage_of);
        match left_out_change(self.left_out.swap(left_out, Ordering::Relaxed), left_out) {
            Some((true, message)) => tracing::warn!("{message}"),
            Some((false, message)) => tracing::info!("{message}"),
            None => {}
        }
        let mut map = self.levels.lock().unwrap_or_else(|p| p.into_inner());
        let mut written = self.written.lock().unwrap_or_else(|p| p.into_inner());
        let mut depths = self.depths.lock().unwrap_or_else(|p| p.into_inner());
        // While the levels change, the detector looks at the depths of both the old and
        // the new ones; then at the new ones alone.
        let new_depths = ArmedDepths::of(
            by_cgroup
                .iter()
                .map(|(dir, _)| self.cgroup_depths.depth(dir)),
        );
        // Most synchronizes arm the same cgroups: the depths are written only when
        // they change.
        let mut changed = depths.as_mut().and_then(|array| {
            let old = array.get(&0, 0).unwrap_or_default();
            (old != new_depths).then(|| {
                set_depths(array, old.union(new_depths));
                array
            })
        });
        let mut now = Vec::with_capacity(by_cgroup.len());
        for (dir, levels) in by_cgroup {
            match cgroup_id(&dir) {
                Ok(id) => match map.insert(id, levels, 0) {
                    Ok(()) => now.push(id),
                    Err(err) => {
                        tracing::warn!("crossing detector: arming {}: {err}", dir.display())
                    }
                },
                Err(err) => {
                    tracing::warn!("crossing detector: cgroup {}: {err}", dir.display())
                }
            }
        }
        for id in written.iter().filter(|id| !now.contains(id)) {
            let _ = map.remove(id);
        }
        *written = now;
        if let Some(array) = changed.as_mut() {
            set_depths(array, new_depths);
        }
    }

    /// The depths the detector looks at now (tests, status); `None` without the map.
    pub fn armed_depths(&self) -> Option<ArmedDepths> {
        let depths = self.depths.lock().unwrap_or_else(|p| p.into_inner());
        depths.as_ref().and_then(|array| array.get(&0, 0).ok())
    }

    /// The levels armed on a cgroup now, as the kernel holds them (tests, status).
    pub fn armed(&self, dir: &Path) -> Option<ArmedLevels> {
        let id = cgroup_id(dir).ok()?;
        let map = self.levels.lock().unwrap_or_else(|p| p.into_inner());
        map.get(&id, 0).ok()
    }
}

#[cfg(test)]
mod tests {
    #[rstest::rstest]
    #[case::none_before_none_now(0, 0, None)]
    #[case::first_overflow(0, 2, Some(true))]
    #[case::overflow_lasts(2, 2, None)]
    #[case::overflow_grows(2, 3, Some(true))]
    #[case::overflow_ends(3, 0, Some(false))]
    fn a_lasting_overflow_of_levels_is_said_once(
        #[case] before: usize,
        #[case] now: usize,
        #[case] warns: Option<bool>,
    ) {
        let said = super::left_out_change(before, now);
        assert_eq!(said.as_ref().map(|(warn, _)| *warn), warns);
        if let Some((true, message)) = said {
            assert!(
                message.contains(&format!("{now} level(s) left out")),
                "{message}"
            );
        }
    }

    use super::*;

    fn spec(cgroup: &str, usage_bytes: u64, hard: bool, passed: bool) -> ThresholdSpec {
        ThresholdSpec {
            cgroup: cgroup.into(),
            usage_bytes,
            hard,
            passed_when_armed: passed,
            threshold: None,
        }
    }

    #[test]
    fn levels_group_by_cgroup_hard_first_and_passed_ones_wait_below() {
        let specs = vec![
            spec("/pods", 900 << 20, false, false),
            spec("/pods", 1000 << 20, true, false),
            spec("/pods", 800 << 20, true, true),
            spec("/other", 10 << 20, true, false),
        ];
        let (out, left_out) = levels_by_cgroup(&specs, 0, |_| None);
        assert_eq!(left_out, 0);
        assert_eq!(out.len(), 2);
        let (dir, pods) = &out[0];
        assert_eq!(dir, Path::new("/other"));
        assert_eq!(pods.levels[0].level_bytes, 10 << 20);
        let pods = &out[1].1.levels;
        assert_eq!(
            pods.iter().map(|l| l.level_bytes).collect::<Vec<_>>(),
            vec![800 << 20, 1000 << 20, 900 << 20, 0, 0, 0, 0, 0]
        );
        assert_eq!(pods[0].state, LEVEL_WAIT_BELOW);
        assert_eq!(pods[0].rearm_below_bytes, (800 << 20) - (800 << 20) / 128);
        assert_eq!(pods[1].state, LEVEL_ARMED);
        assert_eq!(pods[1].flags, LEVEL_HARD);
        assert_eq!(pods[2].flags, 0);
        assert_eq!(pods[3].state, LEVEL_EMPTY);
    }

    #[test]
    fn levels_beyond_the_slots_are_counted_and_soft_ones_go_first() {
        let mut specs: Vec<ThresholdSpec> = (1..=LEVELS_PER_CGROUP as u64)
            .map(|i| spec("/pods", i << 20, false, false))
            .collect();
        specs.push(spec("/pods", 50 << 20, true, false));
        let (out, left_out) = levels_by_cgroup(&specs, 0, |_| None);
        assert_eq!(left_out, 1);
        let levels = &out[0].1.levels;
        assert_eq!(levels[0].level_bytes, 50 << 20, "the hard level is kept");
        assert!(
            levels
                .iter()
                .all(|l| l.level_bytes != (LEVELS_PER_CGROUP as u64) << 20)
        );
    }

    #[test]
    fn hard_levels_get_an_early_level_below_them_that_waits_when_usage_is_past_it() {
        let margin = 4 << 20;
        let specs = vec![
            spec("/pods", 100 << 20, true, false),
            spec("/pods", 90 << 20, false, false),
            // Passed already: the synchronize at hand acts; no head start to give.
            spec("/pods", 80 << 20, true, true),
            // Usage (see below) is between this one's early level and the level.
            spec("/other", 50 << 20, true, false),
            // Too low for the margin.
            spec("/small", 2 << 20, true, false),
        ];
        let usage = |dir: &Path| match dir.to_str() {
            Some("/other") => Some(47 << 20),
            _ => Some(1 << 20),
        };
        let (out, left_out) = levels_by_cgroup(&specs, margin, usage);
        assert_eq!(left_out, 0);
        let of = |dir: &str| &out.iter().find(|(c, _)| c == Path::new(dir)).unwrap().1;
        let pods = of("/pods").levels;
        assert_eq!(
            pods.iter()
                .map(|l| (l.level_bytes >> 20, l.flags, l.state))
                .collect::<Vec<_>>(),
            vec![
                (80, LEVEL_HARD, LEVEL_WAIT_BELOW),
                (100, LEVEL_HARD, LEVEL_ARMED),
                (90, 0, LEVEL_ARMED),
                (96, LEVEL_EARLY, LEVEL_ARMED),
                (0, 0, LEVEL_EMPTY),
                (0, 0, LEVEL_EMPTY),
                (0, 0, LEVEL_EMPTY),
                (0, 0, LEVEL_EMPTY),
            ]
        );
        assert_eq!(pods[3].rearm_below_bytes, (96 << 20) - (96 << 20) / 128);
        let other = of("/other").levels;
        assert_eq!(other[1].level_bytes, 46 << 20);
        assert_eq!(other[1].flags, LEVEL_EARLY);
        assert_eq!(other[1].state, LEVEL_WAIT_BELOW, "usage is past it already");
        assert!(of("/small").levels.iter().all(|l| l.flags != LEVEL_EARLY));
        // Without a margin (no hot path, or the memcg eventfd arms early ones): none.
        let (out, _) = levels_by_cgroup(&specs, 0, usage);
        assert!(
            out.iter()
                .all(|(_, levels)| levels.levels.iter().all(|l| l.flags != LEVEL_EARLY))
        );
    }

    #[test]
    fn the_nodes_levels_get_the_wider_early_margin() {
        let with = |signal| ThresholdSpec {
            threshold: Some(super::super::memcg::ArmedThreshold {
                signal,
                quantity_bytes: 100 << 20,
                capacity_bytes: 1 << 30,
                relief: false,
            }),
            ..spec("/pods", 500 << 20, true, false)
        };
        let specs = [
            with(Signal::MemoryAvailable),
            with(Signal::AllocatableMemoryAvailable),
        ];
        let early = |margin| {
            let (out, _) = levels_by_cgroup(&specs, margin, |_| Some(0));
            let mut early: Vec<u64> = out[0]
                .1
                .levels
                .iter()
                .filter(|l| l.flags == LEVEL_EARLY)
                .map(|l| (500 << 20) - l.level_bytes)
                .collect();
            early.sort();
            early
        };
        // The pods' own level keeps the margin; the node's rides on the pods cgroup and
        // gets NODE_EARLY_MARGIN.
        assert_eq!(early(1 << 20), vec![1 << 20, NODE_EARLY_MARGIN]);
        // A margin wider than it stands for both.
        assert_eq!(early(16 << 20), vec![16 << 20]);
        // No early levels at all: none for the node either.
        assert!(early(0).is_empty());
    }

    #[test]
    fn early_levels_are_the_first_left_out_when_slots_run_short() {
        let mut specs: Vec<ThresholdSpec> = (1..=LEVELS_PER_CGROUP as u64 - 1)
            .map(|i| spec("/pods", (i * 100) << 20, false, false))
            .collect();
        specs.push(spec("/pods", 1000 << 20, true, false));
        specs.push(spec("/pods", 2000 << 20, true, false));
        let (out, left_out) = levels_by_cgroup(&specs, 1 << 20, |_| Some(0));
        // The two hard levels and all but one soft level fill the slots; the last soft
        // level and both early levels are left out.
        assert_eq!(left_out, 3);
        assert!(out[0].1.levels.iter().all(|l| l.flags != LEVEL_EARLY));
        assert_eq!(out[0].1.levels[0].level_bytes, 1000 << 20);
    }

    #[test]
    fn small_levels_get_one_charge_batch_of_hysteresis() {
        assert_eq!(hysteresis(1 << 20), 64 * 4096);
        assert_eq!(hysteresis(1 << 30), (1 << 30) / 128);
    }
}
