//! The hot kill path: a hard memory threshold's crossing answered before any synchronize.
//!
//! After every synchronize the eviction pass arms the hot path with its candidates: the
//! first [`CANDIDATES`] pods the kubelet's memory ranking would evict on the stats just
//! read, each with its `cgroup.kill` already open ([`KillSwitch`]). When a kernel notifier
//! of a hard threshold fires (memcg v1 eventfd, cgroup v2 memory.events, the eBPF
//! detector), its source calls [`HotPath::hard_crossing`] before it even queues its wake.
//! The crossing is confirmed against the kernel's own numbers (the level's cgroup usage,
//! then, if that reaches the level, its page cache: a v1 notifier also fires on the way down, memory.events for other
//! counters); a memory.available level on the node's own (meminfo on cgroup v2, the root
//! memory cgroup on v1), even where its notifier rides on the pods cgroup. Then the victim is picked afresh: each candidate's usage is read again (one
//! `pread` of a file kept open), its working set taken as that usage less the inactive
//! page cache it had at the synchronize, and the victim is the first by the policy's own
//! memory key on those working sets, critical pods left out (the pods' copies for the
//! eviction's wording are made after the kill, where the policy's full ranking,
//! [`crate::policy::eviction::hard_eviction_victim`], is checked against the pick). A pod
//! that freed its memory since the synchronize is not killed while another holds more. The reads go
//! in the last ranking's order and stop early: a candidate's parent cgroup (its QoS
//! class's) less its siblings read bounds what a candidate not read can hold, and once
//! even that could not rank one of them first, the pick is made (most often after the
//! first candidate and its parents: the pod that drove the crossing holds most of it).
//! The victim is
//! killed by one write; its eviction message names the threshold that was crossed and the
//! signal as seen at the crossing.
//!
//! What the kill trusts from the last synchronize: which pods are candidates (a pod ranked
//! below the first [`CANDIDATES`] then, and grown past them since, is not seen until the
//! next synchronize), their requests and priorities, and their inactive page cache.
//!
//! Every kill is queued for the next synchronize, which books it as an eviction under way
//! (record, events, cgroup removal) and never evicts twice for that crossing. After a
//! kill the hot path is disarmed until a synchronize re-arms it, which it does only once
//! the eviction has ended (the kubelet waits for the pod's cleanup before it evicts again).
//!
//! Only immediate evictions take this path (a hard threshold with a grace period of 0);
//! soft thresholds, disk and pid signals, and a 1 s hard grace period keep the normal one.
//!
//! CPU: a watch (after an early notifier, or a crossing short of its working set) reads
//! in a loop. All watches draw on one budget of the notifier thread's CPU time
//! ([`WATCH_BUDGET`], refilled at [`WATCH_REFILL_PER_SEC`]), whatever ends them; an early
//! notifier that fired [`EARLY_FIRES_PER_ARMING`] times without a kill is not watched again
//! until the next synchronize re-arms the levels; where only one CPU is usable the
//! watch never spins; a spinning watch whose levels' usage stands still leaves its CPU,
//! where the allocator may be waiting behind it ([`WATCH_STILL`]), and once it has moved
//! [`WATCH_MOVES`] times sleeps between its looks until the usage moves; a watch of the
//! node's level, told from megabytes away (see [`NODE_EARLY_MARGIN`]), sleeps between
//! its reads of the node as long as the node's rise allows ([`WATCH_PACE_MAX`] at most);
//! a watch of a cgroup's level whose usage creeps ([`WATCH_CREEP`]) sleeps between its
//! looks until it is near the level, as long as the fastest rise it allows for leaves it
//! ([`WATCH_PACE_NEAR_MAX`] at most).
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::clock::monotonic_ns;
use crate::notify::detector::NODE_EARLY_MARGIN;
use crate::notify::memcg::{ArmedThreshold, ThresholdSpec};
use crate::notify::{CrossingHook, WakeSource};
use crate::observe::{CgroupReader, CgroupVersion, MemoryCounter, OpenFiles, Toward};
use crate::policy::eviction::{
    EvictionConfig, EvictionDecision, SyncInput, hard_eviction_of, hard_eviction_victim,
};
use crate::policy::rank::{MemoryRankKey, memory_rank_key_at, memory_request_milli};
use crate::policy::signal::{Observations, Signal, SignalObservation};
use crate::policy::stats::PodWithStats;
use crate::policy::types::FsLayout;
use crate::runtime::port::KillSwitch;

/// Files the levels keep open (two per cgroup with a level).
const LEVEL_FILES_KEPT: usize = 8;

/// How many of the ranking's first pods the hot path holds ready and reads again at a
/// crossing. One usage read costs about 2 µs on the hosts measured; the kubelet's own
/// pick rests on stats up to a housekeeping interval old.
pub(crate) const CANDIDATES: usize = 16;

/// One level whose crossing calls for a kill, on the working set (usage minus
/// inactive_file, as the signals count it) of the counter its signal is computed from: a
/// notifier armed on usage also fires when page cache alone grows, and that must cost a
/// read, never a kill.
#[derive(Clone, Debug)]
struct Level {
    /// The counter the level is confirmed on: the cgroup of an allocatableMemory level, the
    /// node's own for a memory.available level (where the hot path has it), whichever
    /// cgroup the notifier that tells of it is armed on.
    counter: MemoryCounter,
    /// The working set at which the threshold is met.
    working_set: u64,
    /// The usage the notifiers are armed at (the working set level plus the inactive
    /// page cache when armed): below it, the working set cannot be at its level unless
    /// page cache shrank, which the exact notifier then reports.
    usage: u64,
    /// The eviction threshold the level stands for.
    threshold: Option<ArmedThreshold>,
    /// How far below `usage` a watch keeps watching, at least, whatever margin it was
    /// started with: the node's levels are told by a notifier on another counter, which
    /// may fire that far off ([`NODE_EARLY_MARGIN`]); 0 for the others.
    watch_margin: u64,
}

impl Level {
    /// The cgroup's usage now: one read.
    fn usage_now(&self) -> Option<u64> {
        self.counter.usage_bytes().ok()
    }

    /// What a watch compares, read once, and the value it compares it with: a cgroup's
    /// usage with the usage level (its working set would cost a memory.stat read); the
    /// node's working set with the working set level, since meminfo holds both numbers in
    /// one read and, under reclaim, its page cache moves while the working set does not.
    fn watched_now(&self) -> Option<(u64, u64)> {
        match &self.counter {
            MemoryCounter::Meminfo { .. } => match self.counter.working_set_toward(0).ok()? {
                Toward::WorkingSet(working_set) => Some((working_set, self.working_set)),
                Toward::Short(_) => None,
            },
            MemoryCounter::Cgroup(_) => Some((self.usage_now()?, self.usage)),
        }
    }

    /// The same level, its files read through `files`.
    fn reading_through(&self, files: Arc<OpenFiles>) -> Level {
        Level {
            counter: self.counter.clone().keeping_open(files),
            ..self.clone()
        }
    }

    /// Reads each of its files once (usage and memory.stat, or meminfo), so that their
    /// descriptors are open before a watch or a confirmation needs them.
    fn read_once(&self) {
        let _ = self.counter.working_set_toward(0);
    }

    /// Lowers its usage level to its working set level plus the page cache its cgroup
    /// holds now, where that is lower (a cgroup's: one memory.stat read).
    /// The usage level armed at the synchronize holds the page cache of then; page cache
    /// reclaimed since leaves it above the usage at which the working set reaches its
    /// level, and a watch comparing usage with it looked past the crossing (the host race
    /// beside 1000 pods once armed 100 MiB of page cache that was gone at the crossing).
    /// Page cache grown since keeps the armed level: the watch then confirms the working
    /// set at every look from there.
    fn lower_to_page_cache_now(&mut self) {
        if let MemoryCounter::Cgroup(reader) = &self.counter
            && let Ok(Some(inactive)) = reader.inactive_file_bytes("")
        {
            self.usage = self.usage.min(self.working_set.saturating_add(inactive));
        }
    }
}

/// A level found reached, with the working set that reached it.
#[derive(Clone, Copy, Debug)]
struct Crossing {
    /// The level's index among the armed levels.
    level: usize,
    threshold: Option<ArmedThreshold>,
    level_working_set: u64,
    working_set: u64,
}

impl Crossing {
    /// The signal as it stood when the crossing was read: the level is the first working
    /// set at which the signal's available is below the threshold's quantity (one byte
    /// past capacity less quantity), and every byte past it is a byte less available.
    fn observations(&self) -> Observations {
        let Some(t) = self.threshold else {
            return Observations::new();
        };
        let past = self.working_set.saturating_sub(self.level_working_set);
        let available = i64::try_from(t.quantity_bytes).unwrap_or(i64::MAX)
            - 1
            - i64::try_from(past).unwrap_or(i64::MAX);
        Observations::from([(
            t.signal,
            SignalObservation {
                available,
                capacity: i64::try_from(t.capacity_bytes).unwrap_or(i64::MAX),
                time: Duration::ZERO,
            },
        )])
    }
}

/// How long the hot path watches a level after an early notifier fired below it
/// ([`HotPath::early_crossing`]), and how often it reads the usage meanwhile.
pub(crate) const WATCH_WINDOW: Duration = Duration::from_millis(50);
pub(crate) const WATCH_POLL: Duration = Duration::from_micros(25);
/// For the first part of a watch the thread reads without sleeping: a fast allocator
/// covers the early margin in well under a millisecond, and a thread woken from a sleep
/// may wait for the CPU's current task to leave the kernel (on a kernel built without
/// preemption, 250–700 µs was seen). Never where only one CPU is usable: the spin would
/// keep the allocating task itself from running.
pub(crate) const WATCH_SPIN: Duration = Duration::from_millis(10);
/// How long the levels' usage may stand still while a watch spins before the watch
/// leaves its CPU, and how many times one watch may (see `watch::CpuMoves`). An
/// allocator at a few hundred MiB/s moves a cgroup's usage by a charge batch (64 pages
/// per CPU) every millisecond or so; one held off its CPU by the watch does not move it.
/// After its moves, a watch whose usage stands still sleeps [`WATCH_POLL`] between looks.
pub(crate) const WATCH_STILL: Duration = Duration::from_micros(500);
pub(crate) const WATCH_MOVES: u32 = 2;
/// How far below a level the watch a hard notifier starts (one with no margin) keeps
/// looking: a hard notifier may tell a page or a charge batch short of the level (the
/// kernel's notifiers compare usage in pages, the kubelet's level is one byte past
/// capacity less quantity), and a watch that ended at its first look below the level
/// left the kill to the next notifier's record, hundreds of microseconds later (with the
/// usage level lowered to today's page cache, see `Level::lower_to_page_cache_now`). One
/// charge batch of 64 pages.
pub(crate) const WATCH_SLACK: u64 = 64 * 4096;
/// The longest a watch sleeps between two looks at the node's level, which it paces by
/// the node's rise (see `watch::pace_ns`): a burst faster than the rise seen so far is
/// seen at most this late.
pub(crate) const WATCH_PACE_MAX: Duration = Duration::from_millis(2);
/// A watch of a cgroup's level whose usage creeps (at its rise so far, more than
/// [`WATCH_CREEP`] from the level) sleeps between looks until it is within
/// [`WATCH_SPIN_NEAR`] bytes of it or rises faster: half the time an allocator rising at
/// [`WATCH_FASTEST_RISE`] (bytes a second) would take to get there, and at most
/// [`WATCH_PACE_NEAR_MAX`] (see `watch::pace_ns`). A usage that creeps is one whose
/// allocator is short of CPU, and a watch spinning at real-time priority takes a whole
/// CPU from it: beside 1000 pods on a two-CPU host, with every watch spinning, most
/// allocators took 4-7 ms over an early margin (192 pages a CPU) they crossed in 1.3-2.3
/// ms once creeping watches slept, and one watch in 20 spent its whole allowance before
/// the level came. A fast rise is spun over as before: on that host a watch
/// that slept while the allocator rose at full speed saw the level up to 280 µs late
/// (its first reads and rehearsal after a sleep were slow). The rise assumed is faster
/// than one thread faulting pages in (1-3 GB/s on the hosts measured), so a sleep ends
/// well before the level; a burst faster still is seen at most [`WATCH_PACE_NEAR_MAX`]
/// late. Two charge batches: within them the watch spins.
pub(crate) const WATCH_CREEP: Duration = Duration::from_millis(2);
pub(crate) const WATCH_SPIN_NEAR: u64 = 2 * 64 * 4096;
pub(crate) const WATCH_FASTEST_RISE: u64 = 4 << 30;
pub(crate) const WATCH_PACE_NEAR_MAX: Duration = Duration::from_micros(100);
/// How often a watch runs the kill's path short of the kill (`HotPath::rehearse`). Code
/// the kernel and the agent have not run for a few milliseconds is slow to run again:
/// on the hosts measured, a system call not made for 10 ms took 10-25 µs instead of 1,
/// and a kill runs a handful of them (the levels' memory.stat, the candidates' usage,
/// the signal) the first time in as long as the watch has been looking. A rehearsal
/// costs 10-40 µs of the watch's CPU time there; where one takes longer, the next waits
/// ten times as long as it took (`watch::rehearse_due`).
pub(crate) const WATCH_REHEARSE: Duration = Duration::from_micros(250);
/// After a watch that ran out its window, an early notifier starts no new one for this
/// long; the notifiers at the levels themselves still tell.
pub(crate) const WATCH_REST: Duration = Duration::from_millis(100);
/// The most CPU time the watches may use at once, and how fast that allowance comes
/// back: 10 ms in a burst, 2 % of one CPU over time.
pub(crate) const WATCH_BUDGET: Duration = Duration::from_millis(10);
pub(crate) const WATCH_REFILL_PER_SEC: Duration = Duration::from_millis(20);
/// The part of [`WATCH_BUDGET`] a watch started by an early notifier leaves to the watch
/// a hard notifier starts when its level is not quite reached. An early watch may start
/// megabytes below the node's level and spend its allowance on the way; the hard record
/// that follows, a fraction of a MiB short, then found nothing left and the kill waited
/// for the next record (17 ms in the cgroup v2 VM).
pub(crate) const WATCH_HARD_RESERVE: Duration = Duration::from_millis(3);
/// Watches one early notifier may start within [`FLAP_WINDOW`] between two armings: a
/// workload whose usage moves across the early level and back fires it again and again,
/// and is then rested until the next synchronize. Fires further apart (a node whose usage
/// wanders near a level now and then) never add up to a rest.
pub(crate) const EARLY_FIRES_PER_ARMING: u32 = 3;
pub(crate) const FLAP_WINDOW: Duration = Duration::from_secs(1);

/// A kill the hot path carried out, for the next synchronize to account for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct HotKill {
    /// Worded at the kill, on the working sets read then.
    pub(crate) decision: EvictionDecision,
    /// The source whose notifier fired the kill.
    pub(crate) source: WakeSource,
    /// CLOCK_MONOTONIC ns when the source told the hot path, and when the kill was written.
    pub(crate) detected_ns: u64,
    pub(crate) killed_ns: u64,
    /// The crossing: the level's working set, and the working set read at the kill.
    pub(crate) level_bytes: u64,
    pub(crate) working_set_bytes: u64,
    /// The victim's working set as read at the kill (usage less its page cache at the
    /// last synchronize).
    pub(crate) victim_working_set_bytes: u64,
    /// The crossed signal's available at the kill (`None` for a level without its
    /// threshold).
    pub(crate) signal_available: Option<i64>,
    /// How many candidates' usage was read to pick the victim.
    pub(crate) candidates_read: usize,
    /// The file the kill was written to (in shadow mode: would have been).
    pub(crate) path: std::path::PathBuf,
    /// Shadow mode: the kill was decided, not written.
    pub(crate) shadow: bool,
}

/// What the eviction pass hands the hot path after a synchronize.
#[derive(Clone, Debug)]
pub(crate) struct Candidates {
    /// The ranking's first pods, with the stats just read, most evictable first.
    pub(crate) pods: Vec<PodWithStats>,
    pub(crate) fs_layout: FsLayout,
    pub(crate) config: Arc<EvictionConfig>,
}

/// A pod the hot path may kill.
#[derive(Debug)]
struct Candidate {
    pod: PodWithStats,
    /// Its memory request (milli-bytes) and priority, as the ranking compares them.
    request_milli: i128,
    priority: i32,
    /// Whether the policy never evicts it for pressure (static, mirror, system-critical).
    critical: bool,
    /// Its inactive page cache when armed (usage then less the synchronize's working set).
    inactive_file: u64,
    /// Its parent among [`Armed::holders`], if that can be read.
    holder: Option<usize>,
    switch: KillSwitch,
}

impl Candidate {
    fn new(pod: PodWithStats, switch: KillSwitch) -> Candidate {
        Candidate {
            request_milli: memory_request_milli(&pod.pod),
            priority: pod.pod.priority(),
            critical: pod.pod.is_critical(),
            pod,
            inactive_file: 0,
            holder: None,
            switch,
        }
    }

    /// Its usage and working set now: usage read now, and that less the page cache it had
    /// when armed. `None` when its cgroup cannot be read (the pod is gone).
    fn usage_now(&self) -> Option<(u64, u64)> {
        let usage = self.switch.memory.as_ref()?.usage_bytes("").ok()?;
        Some((usage, usage.saturating_sub(self.inactive_file)))
    }

    /// Its ranking key were its working set `bytes`.
    fn key_at(&self, bytes: u64) -> MemoryRankKey {
        memory_rank_key_at(self.request_milli, self.priority, bytes)
    }
}

/// Why the hot path holds no candidate: said when a notifier tells it of a crossing
/// then, so that a kill left to a synchronize is explained in the log.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Unarmed {
    /// No synchronize has ranked the pods since the agent started.
    #[default]
    NotYet,
    /// The last synchronize found no pod to rank, or no hard memory threshold that
    /// evicts at once.
    NoVictim,
    /// An eviction is under way (its cleanup is awaited before the next one).
    EvictionUnderWay,
    /// Evictions for a memory signal are paced: the next one waits for the interval.
    Paced,
    /// No candidate's kill switch could be opened (their cgroups are gone).
    NoSwitch,
    /// The hot path killed; the candidates come back with the synchronize that books it.
    Killed,
}

impl Unarmed {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Unarmed::NotYet => "no synchronize has ranked the pods yet",
            Unarmed::NoVictim => "the last synchronize found no pod to evict at once",
            Unarmed::EvictionUnderWay => "an eviction is under way",
            Unarmed::Paced => "evictions for memory are paced",
            Unarmed::NoSwitch => "no candidate's cgroup could be opened",
            Unarmed::Killed => "the last kill is not booked yet",
        }
    }
}

#[derive(Debug, Default)]
struct Armed {
    levels: Vec<Level>,
    candidates: Vec<Candidate>,
    /// Why `candidates` is empty, when it is.
    unarmed: Unarmed,
    /// The candidates' parent cgroups (their QoS classes'): what a parent's usage leaves
    /// beyond its candidates read bounds the working set of those not read.
    holders: Vec<CgroupReader>,
    fs_layout: FsLayout,
    config: Option<Arc<EvictionConfig>>,
    /// Kills not yet taken by a synchronize, oldest first.
    fired: Vec<HotKill>,
    /// Per early notifier (its key): when it started its last watches without a kill,
    /// since the levels were last set.
    early_fires: HashMap<u64, Vec<u64>>,
}

/// Shared between the eviction pass (which arms it) and the sources (which fire it).
#[derive(Debug)]
pub(crate) struct HotPath {
    armed: Mutex<Armed>,
    /// The levels' usage and memory.stat files, kept open: a confirmation is two preads.
    /// The levels sit on the root and the pods cgroup, so the set stays a few files.
    open: Arc<OpenFiles>,
    /// The candidates' usage files, kept open; swept at every arming.
    candidate_files: Arc<OpenFiles>,
    /// CLOCK_MONOTONIC ns when the last watch ran out its window (0: never).
    last_watch_end_ns: std::sync::atomic::AtomicU64,
    budget: Mutex<WatchBudget>,
    /// Whether a watch may spin (more than one CPU usable).
    spin: bool,
    /// The watches' CPU time so far (ns), for the agent's metrics and the bench.
    watch_cpu_ns: std::sync::atomic::AtomicU64,
    /// How many times the watches rehearsed the kill (see [`HotPath::rehearse`]).
    rehearsals: std::sync::atomic::AtomicU64,
    /// Whether a watch runs now (on any thread): one at a time.
    watching: std::sync::atomic::AtomicBool,
    /// A hard notifier that fired while a watch ran, left to that watch (its source and
    /// when it told): the watch looks once more as it ends (see `hard_crossing`).
    hard_told: Mutex<Option<(WakeSource, u64)>>,
    /// Where the ring reader hands its watches (see [`HotPath::start_watcher`]); `None`:
    /// every source watches on its own thread.
    watcher: Mutex<Option<std::sync::mpsc::Sender<WatchRequest>>>,
    /// Shadow mode: everything runs, the kill is decided and booked, nothing is written.
    shadow: bool,
    /// The node's memory counter and the memory root it stands for: memory.available
    /// levels are confirmed on it, whichever cgroup their notifier is armed on.
    node: Option<(MemoryCounter, std::path::PathBuf)>,
}

/// A watch the ring reader hands over instead of running it itself.
#[derive(Clone, Copy, Debug)]
enum WatchRequest {
    /// Watch the levels after a notifier told at `told_ns`.
    Watch {
        source: WakeSource,
        margin: u64,
        told_ns: u64,
    },
    /// The levels were set again: read each once, so that a watch's first look finds its
    /// descriptors open and its code paths warm.
    Prime,
}

/// Name of the thread that runs the ring reader's watches.
pub(crate) const WATCHER_THREAD: &str = "monitor-watch";

impl HotPath {
    pub(crate) fn new() -> HotPath {
        HotPath {
            armed: Mutex::new(Armed::default()),
            open: Arc::new(OpenFiles::with_budget(LEVEL_FILES_KEPT)),
            candidate_files: Arc::new(OpenFiles::with_budget(2 * CANDIDATES)),
            last_watch_end_ns: std::sync::atomic::AtomicU64::new(0),
            budget: Mutex::new(WatchBudget::full()),
            spin: more_than_one_cpu(),
            watch_cpu_ns: std::sync::atomic::AtomicU64::new(0),
            rehearsals: std::sync::atomic::AtomicU64::new(0),
            watching: std::sync::atomic::AtomicBool::new(false),
            hard_told: Mutex::new(None),
            watcher: Mutex::new(None),
            shadow: false,
            node: None,
        }
    }

    /// Confirms memory.available levels on the node's own `counter` (that of the memory
    /// hierarchy rooted at `memory_root`), read at the crossing. Without it they are
    /// confirmed on the cgroup their notifier is armed on. The crossing detector arms the
    /// node's levels on the pods cgroup, offset by what the rest of the node held at the
    /// last synchronize; when the rest has shrunk since, the pods reach that level while
    /// the node is still above its threshold, and a kill there would be one the kubelet
    /// never makes.
    pub(crate) fn confirming_node_on(
        mut self,
        counter: MemoryCounter,
        memory_root: std::path::PathBuf,
    ) -> HotPath {
        self.node = Some((counter, memory_root));
        self
    }

    /// A hot path that decides its kills as usual and writes none (shadow mode): each
    /// is booked as the kill it would have been, and the path stays disarmed until the
    /// next synchronize, as after a kill.
    pub(crate) fn shadow() -> HotPath {
        HotPath {
            shadow: true,
            ..HotPath::new()
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Armed> {
        self.armed
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The watches' CPU time since start.
    pub(crate) fn watch_cpu(&self) -> Duration {
        Duration::from_nanos(self.watch_cpu_ns.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// The hard levels armed with the kernel notifiers (from the same specs), read to
    /// confirm a crossing. A spec's usage level includes the cgroup's inactive page cache
    /// when it was armed (`inactive_file_at(cgroup)`); the working set level is without.
    /// Setting them also ends an early notifier's rest (see [`EARLY_FIRES_PER_ARMING`]).
    pub(crate) fn set_levels(
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
            .map(|s| match (&self.node, s.threshold) {
                // The node's own level: the first working set at which its available is
                // below the threshold's quantity, whichever cgroup the notifier rides on.
                (Some((node, root)), Some(t)) if t.signal == Signal::MemoryAvailable => {
                    let working_set = t.capacity_bytes.saturating_sub(t.quantity_bytes) + 1;
                    Level {
                        counter: node.clone().keeping_open(self.open.clone()),
                        working_set,
                        usage: working_set.saturating_add(inactive_file_at(root)),
                        threshold: s.threshold,
                        watch_margin: NODE_EARLY_MARGIN,
                    }
                }
                _ => Level {
                    counter: MemoryCounter::Cgroup(CgroupReader::new(version, s.cgroup.clone()))
                        .keeping_open(self.open.clone()),
                    working_set: s.usage_bytes.saturating_sub(inactive_file_at(&s.cgroup)),
                    usage: s.usage_bytes,
                    threshold: s.threshold,
                    watch_margin: 0,
                },
            })
            .collect();
        // Each level's files read once now, through the descriptors a confirmation keeps,
        // and those of levels gone closed: the first confirmation otherwise opened its
        // memory.stat (a path walk through kernfs) between the crossing and the kill.
        for level in &levels {
            level.read_once();
        }
        self.open.sweep();
        let old = {
            let mut armed = self.lock();
            armed.early_fires.clear();
            std::mem::replace(&mut armed.levels, levels)
        };
        drop(old);
        if let Some(tx) = self
            .watcher
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
        {
            let _ = tx.send(WatchRequest::Prime);
        }
    }

    /// Why nothing is armed now; `None` while a victim is.
    #[cfg(test)]
    pub(crate) fn unarmed(&self) -> Option<Unarmed> {
        let armed = self.lock();
        armed.candidates.is_empty().then_some(armed.unarmed)
    }

    /// The pods to pick the next victim from; `Err` disarms, saying why. Candidates
    /// armed now keep their open switches; others get theirs from `open` (no switch: not
    /// a candidate). While a kill is queued and not yet taken by a synchronize, nothing
    /// is armed: that kill is an eviction under way.
    pub(crate) fn arm(
        &self,
        candidates: Result<Candidates, Unarmed>,
        open: impl Fn(&str) -> Option<KillSwitch>,
    ) {
        let candidates = match candidates {
            Ok(candidates) => candidates,
            Err(why) => {
                let old = {
                    let mut armed = self.lock();
                    armed.unarmed = why;
                    std::mem::take(&mut armed.candidates)
                };
                drop(old);
                return;
            }
        };
        let kept: Vec<String> = self
            .lock()
            .candidates
            .iter()
            .map(|c| c.pod.pod.key())
            .collect();
        // Switches of new candidates are opened before the lock is taken (see set_levels).
        let mut opened: HashMap<String, KillSwitch> = candidates
            .pods
            .iter()
            .map(|p| p.pod.key())
            .filter(|key| !kept.contains(key))
            .filter_map(|key| {
                let switch = open(&key)?;
                let memory = switch.memory.clone()?;
                let memory = memory.keeping_open(self.candidate_files.clone());
                Some((key, switch.with_memory(memory)))
            })
            .collect();
        let old = {
            let mut armed = self.lock();
            if !armed.fired.is_empty() {
                return;
            }
            let mut previous: HashMap<String, Candidate> = std::mem::take(&mut armed.candidates)
                .into_iter()
                .map(|c| (c.pod.pod.key(), c))
                .collect();
            for pod in candidates.pods {
                let key = pod.pod.key();
                let switch = match previous.remove(&key) {
                    Some(candidate) => {
                        // Its processes as of its first arming: a container started or
                        // restarted since would not be reaped after the kill. One signal-0
                        // per process when nothing changed.
                        let mut switch = candidate.switch;
                        if switch.processes_stale() {
                            switch.refresh_processes();
                        }
                        switch
                    }
                    None => match opened.remove(&key) {
                        Some(switch) => switch,
                        None => continue,
                    },
                };
                armed.candidates.push(Candidate::new(pod, switch));
            }
            armed.unarmed = if armed.candidates.is_empty() {
                Unarmed::NoSwitch
            } else {
                Unarmed::default()
            };
            armed.fs_layout = candidates.fs_layout;
            armed.config = Some(candidates.config);
            previous
        };
        drop(old);
        self.note_page_cache();
    }

    /// Reads each candidate's usage once after arming: less the working set its stats
    /// say, the page cache it holds (a working set read at the kill is usage less this).
    fn note_page_cache(&self) {
        // One per candidate, in their order.
        let readers: Vec<(String, Option<u64>, Option<CgroupReader>)> = self
            .lock()
            .candidates
            .iter()
            .map(|c| {
                (
                    c.pod.pod.key(),
                    c.pod.stats.memory_working_set_bytes,
                    c.switch.memory.clone(),
                )
            })
            .collect();
        let roots: Vec<Option<&CgroupReader>> = readers
            .iter()
            .map(|(_, _, reader)| reader.as_ref())
            .collect();
        let (holders, holder_of) = self.holders_of(&roots);
        let inactive: HashMap<String, u64> = readers
            .into_iter()
            .filter_map(|(key, working_set, reader)| {
                let usage = reader?.usage_bytes("").ok()?;
                Some((key, usage.saturating_sub(working_set.unwrap_or(usage))))
            })
            .collect();
        self.candidate_files.sweep();
        let mut armed = self.lock();
        // The candidates did not change since `readers` was taken: a synchronize arms
        // them, and only the synchronize loop arms.
        for (candidate, holder) in armed.candidates.iter_mut().zip(holder_of) {
            if let Some(bytes) = inactive.get(&candidate.pod.pod.key()) {
                candidate.inactive_file = *bytes;
            }
            candidate.holder = holder;
        }
        armed.holders = holders;
    }

    /// Readers of the parents of the candidates' cgroups (`pods`: each candidate's reader),
    /// their usage files opened by a first read, and each candidate's parent among them. A
    /// parent that cannot be read is left out: its candidates are always read.
    fn holders_of(
        &self,
        pods: &[Option<&CgroupReader>],
    ) -> (Vec<CgroupReader>, Vec<Option<usize>>) {
        let mut holders: Vec<CgroupReader> = Vec::new();
        let holder_of = pods
            .iter()
            .map(|pod| {
                let pod = (*pod)?;
                let parent = pod.root().parent()?;
                if let Some(known) = holders.iter().position(|h| h.root() == parent) {
                    return Some(known);
                }
                let reader = CgroupReader::new(pod.version(), parent)
                    .keeping_open(self.candidate_files.clone());
                reader.usage_bytes("").ok()?;
                holders.push(reader);
                Some(holders.len() - 1)
            })
            .collect();
        (holders, holder_of)
    }

    /// The candidates armed now, most evictable first at the last synchronize.
    #[cfg(test)]
    pub(crate) fn armed_pods(&self) -> Vec<String> {
        self.lock()
            .candidates
            .iter()
            .map(|c| c.pod.pod.key())
            .collect()
    }

    /// The first candidate armed now.
    #[cfg(test)]
    pub(crate) fn armed_pod(&self) -> Option<String> {
        self.armed_pods().into_iter().next()
    }

    /// The kills the hot path carried out since the last call, oldest first.
    pub(crate) fn take_fired(&self) -> Vec<HotKill> {
        std::mem::take(&mut self.lock().fired)
    }

    /// A hard level reached now, by the kernel's own counters; if none, the working set
    /// and level nearest to it (for the log). `first`: the level a watch saw reached (its
    /// index), read before the others: each read of a level not reached (tens of
    /// microseconds for the node's meminfo under pressure) would delay the kill.
    fn crossed(levels: &[Level], first: Option<usize>) -> Result<Crossing, Option<(u64, u64)>> {
        let mut nearest: Option<(u64, u64)> = None;
        let mut note = |ws: u64, level: u64| {
            if nearest.is_none_or(|(w, l)| l - w > level - ws) {
                nearest = Some((ws, level));
            }
        };
        let first = first.filter(|&i| i < levels.len());
        let order = first
            .into_iter()
            .chain((0..levels.len()).filter(|&i| Some(i) != first));
        for (index, level) in order.map(|i| (i, &levels[i])) {
            let ws = match level.counter.working_set_toward(level.working_set) {
                Ok(Toward::WorkingSet(ws)) => ws,
                Ok(Toward::Short(usage)) => {
                    note(usage, level.working_set);
                    continue;
                }
                Err(_) => continue,
            };
            if ws >= level.working_set {
                return Ok(Crossing {
                    level: index,
                    threshold: level.threshold,
                    level_working_set: level.working_set,
                    working_set: ws,
                });
            }
            note(ws, level.working_set);
        }
        Err(nearest)
    }
}

mod kill;
mod watch;

use watch::{WatchBudget, more_than_one_cpu};

#[cfg(test)]
mod tests;
