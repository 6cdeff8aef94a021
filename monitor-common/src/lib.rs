//! Records and constants shared by the kernel-side programs (`monitor-ebpf`) and the
//! agent (`monitor`). Everything here is `#[repr(C)]` and `Copy` so both sides agree on
//! the byte layout of what crosses the BPF ring buffer.
#![no_std]

/// Name of the BPF ring buffer every program writes its [`PressureEvent`]s into.
pub const EVENTS_MAP: &str = "PRESSURE_EVENTS";
/// Name of the per-CPU array that counts events per [`EventKind`]: index `2 * kind` holds
/// events emitted, `2 * kind + 1` events suppressed by the in-kernel rate limit; then
/// the failures ([`COUNTER_RING_FULL`], [`COUNTER_RATE_MAP_FAILED`],
/// [`COUNTER_READ_FAILED`]).
pub const COUNTERS_MAP: &str = "PRESSURE_COUNTERS";
/// [`COUNTERS_MAP`] index: ring-buffer reservations that failed (the record was dropped).
pub const COUNTER_RING_FULL: u32 = 2 * KIND_COUNT;
/// [`COUNTERS_MAP`] index: inserts into the rate limiter's map that failed (that
/// (cgroup, kind) goes unlimited until one succeeds).
pub const COUNTER_RATE_MAP_FAILED: u32 = 2 * KIND_COUNT + 1;
/// [`COUNTERS_MAP`] index: reads of a trace record or of kernel memory that failed where
/// they should not (a wrong offset from tracefs or BTF, most likely).
pub const COUNTER_READ_FAILED: u32 = 2 * KIND_COUNT + 2;
/// Number of slots in [`COUNTERS_MAP`].
pub const COUNTER_SLOTS: u32 = 2 * KIND_COUNT + 3;
/// A failure counted in [`COUNTERS_MAP`] is logged (aya-log) the first time it happens on
/// a CPU and then once per this many on that CPU, so a failure that repeats at the rate
/// of a hot tracepoint costs a counter increment, not a log record, per hit.
pub const LOG_EVERY: u64 = 1024;

/// Targets of the programs' log records (aya-log), one per program. The agent forwards a
/// record into `tracing` under the same target, so `RUST_LOG=monitor_ebpf=debug` selects
/// them all.
pub const LOG_TARGETS: [&str; 8] = [
    "monitor_ebpf::memcg_reclaim",
    "monitor_ebpf::direct_reclaim",
    "monitor_ebpf::kswapd_wake",
    "monitor_ebpf::oom_victim",
    "monitor_ebpf::kill_signal",
    "monitor_ebpf::crossing_charge",
    "monitor_ebpf::crossing_lruvec",
    "monitor_ebpf::crossing_counter",
];
pub const LOG_TARGET_MEMCG_RECLAIM: &str = LOG_TARGETS[0];
pub const LOG_TARGET_DIRECT_RECLAIM: &str = LOG_TARGETS[1];
pub const LOG_TARGET_KSWAPD_WAKE: &str = LOG_TARGETS[2];
pub const LOG_TARGET_OOM_VICTIM: &str = LOG_TARGETS[3];
pub const LOG_TARGET_KILL_SIGNAL: &str = LOG_TARGETS[4];
pub const LOG_TARGET_CROSSING_CHARGE: &str = LOG_TARGETS[5];
pub const LOG_TARGET_CROSSING_LRUVEC: &str = LOG_TARGETS[6];
pub const LOG_TARGET_CROSSING_COUNTER: &str = LOG_TARGETS[7];

/// Name of the LRU hash map that remembers when each (cgroup, kind) last emitted.
pub const LAST_EMIT_MAP: &str = "LAST_EMIT";
/// Size of the ring buffer in bytes (a power of two, a multiple of the page size).
/// 256 KiB holds 8192 records: far more than the rate limit lets through between wakes.
pub const EVENTS_RING_BYTES: u32 = 256 * 1024;
/// How many (cgroup, kind) pairs the rate limiter tracks before evicting the oldest.
pub const LAST_EMIT_ENTRIES: u32 = 4096;
/// Globals the agent may set when it loads the object (`EbpfLoader::set_global`).
pub const GLOBAL_MIN_INTERVAL_NS: &str = "MIN_INTERVAL_NS";
pub const GLOBAL_MARK_VICTIM_PID_OFFSET: &str = "MARK_VICTIM_PID_OFFSET";
/// Globals of the `signal:signal_generate` program: offsets of `sig` and `pid` in its
/// record (from tracefs), and the agent's own process id (only its kills are recorded).
pub const GLOBAL_SIGNAL_SIG_OFFSET: &str = "SIGNAL_SIG_OFFSET";
pub const GLOBAL_SIGNAL_PID_OFFSET: &str = "SIGNAL_PID_OFFSET";
pub const GLOBAL_AGENT_TGID: &str = "AGENT_TGID";
/// The offsets on the kernels we know.
pub const DEFAULT_SIGNAL_SIG_OFFSET: u32 = 8;
pub const DEFAULT_SIGNAL_PID_OFFSET: u32 = 36;

/// Default in-kernel rate limit: one record per (cgroup, kind) per millisecond. A reclaim
/// storm fires these tracepoints tens of thousands of times a second; the agent only
/// needs to be woken, and a synchronize takes about a millisecond anyway.
pub const DEFAULT_MIN_INTERVAL_NS: u64 = 1_000_000;
/// Offset of `pid` in the `oom:mark_victim` trace record on the kernels we know (the
/// 8-byte common header comes first). The agent reads the real offset from tracefs.
pub const DEFAULT_MARK_VICTIM_PID_OFFSET: u32 = 8;

/// The memory-pressure events the kernel-side programs report.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// `vmscan:mm_vmscan_memcg_reclaim_begin`: a cgroup hit its limit (or high) and reclaims.
    MemcgReclaim = 0,
    /// `vmscan:mm_vmscan_direct_reclaim_begin`: an allocation stalls in direct reclaim.
    DirectReclaim = 1,
    /// `vmscan:mm_vmscan_wakeup_kswapd`: the allocator woke kswapd (a zone fell below its
    /// low watermark): the earliest node-level sign of pressure.
    KswapdWake = 2,
    /// `oom:mark_victim`: the OOM killer chose a victim (we were too late, or a limit
    /// was hit with nothing to reclaim).
    OomVictim = 3,
    /// The crossing detector saw a memory cgroup's usage reach a level the agent armed
    /// in [`LEVELS_MAP`]: the record carries the usage it read and the level.
    Crossing = 4,
    /// `signal:signal_generate`: the agent's own process sent SIGKILL (the hot path's
    /// `cgroup.kill`, or a kill of the normal path): the kernel's stamp of a kill. `pid`
    /// is the target.
    KillSignal = 5,
}

/// Number of [`EventKind`] variants.
pub const KIND_COUNT: u32 = 6;

impl EventKind {
    pub const ALL: [EventKind; KIND_COUNT as usize] = [
        EventKind::MemcgReclaim,
        EventKind::DirectReclaim,
        EventKind::KswapdWake,
        EventKind::OomVictim,
        EventKind::Crossing,
        EventKind::KillSignal,
    ];

    pub fn from_u32(raw: u32) -> Option<Self> {
        match raw {
            0 => Some(Self::MemcgReclaim),
            1 => Some(Self::DirectReclaim),
            2 => Some(Self::KswapdWake),
            3 => Some(Self::OomVictim),
            4 => Some(Self::Crossing),
            5 => Some(Self::KillSignal),
            _ => None,
        }
    }

    /// Stable lower-case name used in logs and metrics.
    pub fn name(self) -> &'static str {
        match self {
            Self::MemcgReclaim => "memcg_reclaim",
            Self::DirectReclaim => "direct_reclaim",
            Self::KswapdWake => "kswapd_wake",
            Self::OomVictim => "oom_victim",
            Self::Crossing => "crossing",
            Self::KillSignal => "kill_signal",
        }
    }
}

/// One record in the ring buffer.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PressureEvent {
    /// An [`EventKind`] as `u32`.
    pub kind: u32,
    /// Thread-group id (the process id userspace knows) of the task the event concerns:
    /// the allocating task for reclaim events, the victim for `OomVictim`.
    pub pid: u32,
    /// `bpf_ktime_get_ns()`: CLOCK_MONOTONIC nanoseconds, comparable with userspace
    /// `clock_gettime(CLOCK_MONOTONIC)`.
    pub timestamp_ns: u64,
    /// For reclaim and OOM records, `bpf_get_current_cgroup_id()`: the cgroup v2 id (the
    /// inode number of the cgroup's directory in the unified hierarchy) of the current
    /// task. For [`EventKind::Crossing`], the id of the memory cgroup whose level was
    /// reached (the inode number of its directory in the hierarchy that holds the memory
    /// controller, v1 or v2).
    pub cgroup_id: u64,
    /// How many events of this (cgroup, kind) the rate limit suppressed before this one.
    pub suppressed: u32,
    /// [`EventKind::Crossing`]: the flags ([`LEVEL_HARD`], [`LEVEL_EARLY`]) of the level
    /// that was reached.
    pub level_flags: u32,
    /// [`EventKind::Crossing`]: the cgroup's charged memory (`page_counter` usage, as
    /// memory.current / memory.usage_in_bytes show it) when the program saw the crossing.
    pub usage_bytes: u64,
    /// [`EventKind::Crossing`]: the armed level that usage reached.
    pub level_bytes: u64,
}

/// Size of a [`PressureEvent`] in bytes.
pub const PRESSURE_EVENT_SIZE: usize = core::mem::size_of::<PressureEvent>();

/// Name of the hash map of armed crossing levels, keyed by memory cgroup id (`u64`).
pub const LEVELS_MAP: &str = "CROSSING_LEVELS";
/// How many memory cgroups can carry levels at once.
pub const LEVELS_ENTRIES: u32 = 64;
/// Name of the one-entry array holding the depths at which levels are armed (see
/// [`ArmedDepths`]).
pub const DEPTHS_MAP: &str = "ARMED_DEPTHS";
/// At most this many distinct depths are told to the detector; with more it walks.
pub const ARMED_DEPTHS_MAX: usize = 4;

/// The depths in the cgroup hierarchy (the root is 0) of the cgroups that carry levels.
/// With them the detector goes from the charged cgroup straight to its ancestors at
/// those depths (`struct cgroup`'s `ancestors[]`), where it otherwise walks up every
/// ancestor with three reads and a map lookup each. `count` 0: not known (not written
/// yet, more than [`ARMED_DEPTHS_MAX`] depths, or one the agent could not tell); the
/// detector then walks.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ArmedDepths {
    pub count: u32,
    pub depths: [u32; ARMED_DEPTHS_MAX],
}

/// A depth beyond any cgroup tree the kernel builds; deeper ones are not told.
pub const DEPTH_LIMIT: u32 = 64;

impl ArmedDepths {
    /// The depths of cgroups carrying levels, each told once; unknown when one is `None`,
    /// too deep, or they are more than [`ARMED_DEPTHS_MAX`].
    pub fn of(depths: impl IntoIterator<Item = Option<u32>>) -> ArmedDepths {
        let mut out = ArmedDepths::default();
        for depth in depths {
            let Some(depth) = depth.filter(|d| *d < DEPTH_LIMIT) else {
                return ArmedDepths::default();
            };
            let count = out.count as usize;
            if out.depths[..count].contains(&depth) {
                continue;
            }
            if count == ARMED_DEPTHS_MAX {
                return ArmedDepths::default();
            }
            out.depths[count] = depth;
            out.count += 1;
        }
        out
    }

    /// Both sets (unknown if either is, or together they are too many).
    pub fn union(self, other: ArmedDepths) -> ArmedDepths {
        if self.count == 0 || other.count == 0 {
            return ArmedDepths::default();
        }
        ArmedDepths::of(self.told().iter().chain(other.told()).map(|d| Some(*d)))
    }

    /// The depths told (none when unknown).
    pub fn told(&self) -> &[u32] {
        &self.depths[..(self.count as usize).min(ARMED_DEPTHS_MAX)]
    }
}

/// Levels per cgroup: hard and soft thresholds of the node and of allocatable, an early
/// level below each hard one, and memory relief's level above each signal's thresholds.
pub const LEVELS_PER_CGROUP: usize = 8;
/// How many ancestors (the charged cgroup included) the detector looks at. A pod's
/// container sits four or five levels below the memory root on a kubelet node.
pub const MAX_CGROUP_DEPTH: u32 = 12;

/// [`ArmedLevel::state`]: the slot is not in use.
pub const LEVEL_EMPTY: u32 = 0;
/// Armed: the first usage at or above the level fires it (one record) and moves it to
/// [`LEVEL_FIRED`].
pub const LEVEL_ARMED: u32 = 1;
/// Fired; stays silent until the agent arms it again after its synchronize. (An early
/// level goes to [`LEVEL_WAIT_BELOW`] instead: it fires again on the next way up.)
pub const LEVEL_FIRED: u32 = 2;
/// Armed while usage was already above the level: silent until usage falls below
/// [`ArmedLevel::rearm_below_bytes`], then [`LEVEL_ARMED`] (hysteresis: a usage that
/// hovers around the level does not flood the ring).
pub const LEVEL_WAIT_BELOW: u32 = 3;
/// [`ArmedLevel::flags`]: the level belongs to a hard eviction threshold.
pub const LEVEL_HARD: u32 = 1;
/// [`ArmedLevel::flags`]: an early level, a little below a hard one. Its record is a head
/// start (the agent watches the cgroup's counter closely and kills at the hard level
/// itself), never a crossing of its own. Once fired it waits for usage to fall below
/// [`ArmedLevel::rearm_below_bytes`] and then arms again by itself, so every rise through
/// it is told, as the memcg v1 eventfd tells every crossing.
pub const LEVEL_EARLY: u32 = 2;

/// One usage level on one memory cgroup.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ArmedLevel {
    /// Fires when the cgroup's usage is at or above this many bytes.
    pub level_bytes: u64,
    /// In [`LEVEL_WAIT_BELOW`], usage must fall below this to re-arm.
    pub rearm_below_bytes: u64,
    /// One of the `LEVEL_*` states.
    pub state: u32,
    /// [`LEVEL_HARD`] or 0.
    pub flags: u32,
}

/// The value of [`LEVELS_MAP`]: the levels of one cgroup.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ArmedLevels {
    pub levels: [ArmedLevel; LEVELS_PER_CGROUP],
}

/// Global holding the kernel structure offsets the detector reads (see [`MemcgLayout`]).
pub const GLOBAL_MEMCG_LAYOUT: &str = "MEMCG_LAYOUT";
/// Global: the `try_charge_memcg` program looks once this many pages were charged on a CPU.
pub const GLOBAL_SAMPLE_EVERY_CHARGE: &str = "SAMPLE_EVERY_CHARGE";
/// Global: the `mod_memcg_lruvec_state` program looks once its hits moved the counters by
/// this many units (pages, mostly) on a CPU.
pub const GLOBAL_SAMPLE_EVERY_LRUVEC: &str = "SAMPLE_EVERY_LRUVEC";
/// Default sampling of the charge program: a look per 16 pages (64 KiB) charged.
pub const DEFAULT_SAMPLE_EVERY_CHARGE: u32 = 16;
/// Default sampling of the tracepoint program: a look per 64 units; the tracepoint moves
/// about five page counts per 4 KiB page charged, so about one look per 50 KiB.
pub const DEFAULT_SAMPLE_EVERY_LRUVEC: u32 = 64;

/// Byte offsets in kernel structures, read by the agent from the running kernel's BTF
/// and handed to the detector as a global (there are no CO-RE relocations from Rust).
/// All zero means "not set": the programs then do nothing.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemcgLayout {
    /// `struct mem_cgroup` → `css.cgroup` (a `struct cgroup *`).
    pub memcg_css_cgroup: u32,
    /// `struct mem_cgroup` → `memory` (the embedded `struct page_counter`).
    pub memcg_memory: u32,
    /// `struct page_counter` → `usage` (an `atomic_long_t`, in pages).
    pub counter_usage: u32,
    /// `struct page_counter` → `parent` (a `struct page_counter *`).
    pub counter_parent: u32,
    /// `struct cgroup` → `kn` (a `struct kernfs_node *`).
    pub cgroup_kn: u32,
    /// `struct kernfs_node` → `id` (`u64`, the directory's inode number).
    pub kn_id: u32,
    /// log2 of the page size.
    pub page_shift: u32,
    /// `struct cgroup` → `subsys[memory_cgrp_id]` (the cgroup's memory css, a pointer
    /// equal to its `struct mem_cgroup`, whose css comes first). The page counter program
    /// uses it to tell a memory cgroup's `memory` counter from the other page counters
    /// (swap, kmem, hugetlb); 0 when the kernel's BTF does not give it (that program then
    /// does nothing).
    pub cgroup_memory_css: u32,
    /// `struct cgroup` → `level` (an `int`, the depth below the hierarchy's root) and
    /// `ancestors` (`struct cgroup *[]`, indexed by depth), for [`ArmedDepths`]; 0 when
    /// the BTF does not give them (the detector then walks every ancestor).
    pub cgroup_level: u32,
    pub cgroup_ancestors: u32,
}

/// Global: where the pods cgroup sits in the cgroup v2 hierarchy (see [`PodsPath`]).
pub const GLOBAL_PODS_PATH: &str = "PODS_PATH";
/// The deepest pods cgroup the filter of [`PodsPath`] knows (levels below the root).
pub const PODS_PATH_MAX: usize = 8;

/// The cgroup v2 ids of the pods cgroup and of each of its ancestors, root first:
/// `ids[i]` is the ancestor at level `i`, `ids[level]` the pods cgroup itself. A memcg
/// reclaim record of a task neither in the pods tree nor in a cgroup on that path (a
/// service reclaiming at its own limit) is dropped in the kernel: nothing the agent
/// decides depends on it. `level` 0 means no filter.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PodsPath {
    pub ids: [u64; PODS_PATH_MAX],
    pub level: u32,
    pub _pad: u32,
}

impl PodsPath {
    /// Whether a task in cgroup `cgroup_id`, whose ancestor at the pods cgroup's level is
    /// `ancestor_at_pods_level` (0 when its cgroup is shallower), concerns the pods:
    /// in their tree, or on the path from the root to it.
    #[inline(always)]
    pub fn concerns_pods(&self, cgroup_id: u64, ancestor_at_pods_level: u64) -> bool {
        let level = self.level as usize;
        if level == 0 || level >= PODS_PATH_MAX {
            return true;
        }
        if ancestor_at_pods_level == self.ids[level] {
            return true;
        }
        let mut i = 0;
        while i < PODS_PATH_MAX {
            if i < level && self.ids[i] == cgroup_id {
                return true;
            }
            i += 1;
        }
        false
    }
}

/// Key of the rate limiter's map.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateKey {
    pub cgroup_id: u64,
    pub kind: u32,
    pub _pad: u32,
}

/// Value of the rate limiter's map.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateState {
    pub last_emit_ns: u64,
    pub suppressed: u32,
    pub _pad: u32,
}

#[cfg(feature = "user")]
mod user {
    // SAFETY: plain-old-data records: `#[repr(C)]`, only integer fields, explicit padding.
    unsafe impl aya::Pod for super::PressureEvent {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::RateKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::RateState {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::ArmedLevels {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::MemcgLayout {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::PodsPath {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::ArmedDepths {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_layout_has_no_hidden_padding() {
        assert_eq!(PRESSURE_EVENT_SIZE, 48);
        assert_eq!(core::mem::size_of::<ArmedLevel>(), 24);
        assert_eq!(core::mem::size_of::<ArmedLevels>(), 24 * LEVELS_PER_CGROUP);
        assert_eq!(core::mem::size_of::<MemcgLayout>(), 40);
        assert_eq!(core::mem::size_of::<ArmedDepths>(), 20);
        assert_eq!(core::mem::size_of::<RateKey>(), 16);
        assert_eq!(core::mem::size_of::<RateState>(), 16);
    }

    #[test]
    fn armed_depths_are_told_once_each_and_unknown_past_what_the_detector_takes() {
        // Levels on the root (0) and twice on the pods cgroup (2).
        let depths = ArmedDepths::of([Some(0), Some(2), Some(2)]);
        assert_eq!(depths.told(), &[0, 2]);
        // Unknown: a depth not told, one too deep, more depths than the detector takes.
        for unknown in [
            ArmedDepths::of([Some(1), None]),
            ArmedDepths::of([Some(DEPTH_LIMIT)]),
            ArmedDepths::of([Some(1), Some(2), Some(3), Some(4), Some(5)]),
            depths.union(ArmedDepths::default()),
        ] {
            assert_eq!(unknown.count, 0);
            assert!(unknown.told().is_empty());
        }
        assert_eq!(
            depths.union(ArmedDepths::of([Some(3), Some(2)])).told(),
            &[0, 2, 3]
        );
        assert_eq!(
            ArmedDepths::of([Some(1), Some(2), Some(3), Some(4)]).told(),
            &[1, 2, 3, 4]
        );
        // A count the agent never writes reads no further than the array.
        let odd = ArmedDepths {
            count: 9,
            depths: [1, 2, 3, 4],
        };
        assert_eq!(odd.told(), &[1, 2, 3, 4]);
    }

    #[test]
    fn kinds_round_trip() {
        for kind in EventKind::ALL {
            assert_eq!(EventKind::from_u32(kind as u32), Some(kind));
        }
        assert_eq!(EventKind::from_u32(KIND_COUNT), None);
    }
}
