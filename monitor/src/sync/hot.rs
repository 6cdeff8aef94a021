//! The hot kill path: a hard memory threshold's crossing answered before any synchronize.
//!
//! After every synchronize the eviction pass arms the hot path with its candidates: the
//! first [`CANDIDATES`] pods the kubelet's memory ranking would evict on the stats just
//! read, each with its `cgroup.kill` already open ([`KillSwitch`]). When a kernel notifier
//! of a hard threshold fires (memcg v1 eventfd, cgroup v2 memory.events, the eBPF
//! detector), its source calls [`HotPath::hard_crossing`] before it even queues its wake.
//! The crossing is confirmed against the kernel's own numbers (the level's cgroup usage
//! and page cache: a v1 notifier also fires on the way down, memory.events for other
//! counters). Then the victim is picked afresh: each candidate's usage is read again (one
//! `pread` of a file kept open), its working set taken as that usage less the inactive
//! page cache it had at the synchronize, and the policy's own ranking
//! ([`crate::policy::eviction::hard_eviction`]) runs on those working sets. A pod that freed
//! its memory since the synchronize is not killed while another holds more. The reads go
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
//! until the next synchronize re-arms the levels; and where only one CPU is usable the
//! watch never spins.
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::clock::monotonic_ns;
use crate::notify::memcg::{ArmedThreshold, ThresholdSpec};
use crate::notify::{CrossingHook, WakeSource};
use crate::observe::{CgroupReader, CgroupVersion, OpenFiles};
use crate::policy::eviction::{
    EvictionConfig, EvictionDecision, SyncInput, hard_eviction_of, hard_eviction_victim,
};
use crate::policy::rank::{MemoryRankKey, memory_rank_key_at, memory_request_milli};
use crate::policy::signal::{Observations, Signal, SignalObservation};
use crate::policy::stats::PodWithStats;
use crate::policy::types::FsLayout;
use crate::runtime::port::KillSwitch;
use crate::state::SharedState;

/// Files the levels keep open (two per cgroup with a level).
const LEVEL_FILES_KEPT: usize = 8;

/// How many of the ranking's first pods the hot path holds ready and reads again at a
/// crossing. One usage read costs about 2 µs on the hosts measured; the kubelet's own
/// pick rests on stats up to a housekeeping interval old.
pub const CANDIDATES: usize = 16;

/// One level whose crossing calls for a kill, on the cgroup's working set (usage
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
    /// The eviction threshold the level stands for.
    threshold: Option<ArmedThreshold>,
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

/// A level found reached, with the working set that reached it.
#[derive(Clone, Copy, Debug)]
struct Crossing {
    threshold: Option<ArmedThreshold>,
    level_working_set: u64,
    working_set: u64,
}

impl Crossing {
    /// The signal as it stood when the crossing was read: the level is where the
    /// signal's available equals the threshold's quantity, so every byte of working set
    /// past it is a byte less available.
    fn observations(&self) -> Observations {
        let Some(t) = self.threshold else {
            return Observations::new();
        };
        let past = self.working_set.saturating_sub(self.level_working_set);
        let available = i64::try_from(t.quantity_bytes).unwrap_or(i64::MAX)
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
/// ([`HotPath::hard_approach`]), and how often it reads the usage meanwhile.
pub const APPROACH_WINDOW: Duration = Duration::from_millis(50);
pub const APPROACH_POLL: Duration = Duration::from_micros(25);
/// For the first part of a watch the thread reads without sleeping: a fast allocator
/// covers the early margin in well under a millisecond, and a thread woken from a sleep
/// may wait for the CPU's current task to leave the kernel (on a kernel built without
/// preemption, 250–700 µs was seen). Never where only one CPU is usable: the spin would
/// keep the allocating task itself from running.
pub const APPROACH_SPIN: Duration = Duration::from_millis(10);
/// After a watch that ran out its window, an early notifier starts no new one for this
/// long; the notifiers at the levels themselves still tell.
pub const APPROACH_REST: Duration = Duration::from_millis(100);
/// The most CPU time the watches may use at once, and how fast that allowance comes
/// back: 10 ms in a burst, 2 % of one CPU over time.
pub const WATCH_BUDGET: Duration = Duration::from_millis(10);
pub const WATCH_REFILL_PER_SEC: Duration = Duration::from_millis(20);
/// Watches one early notifier may start within [`FLAP_WINDOW`] between two armings: a
/// workload whose usage moves across the early level and back fires it again and again,
/// and is then rested until the next synchronize. Fires further apart (a node whose usage
/// wanders near a level now and then) never add up to a rest.
pub const EARLY_FIRES_PER_ARMING: u32 = 3;
pub const FLAP_WINDOW: Duration = Duration::from_secs(1);

/// A kill the hot path carried out, for the next synchronize to account for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HotKill {
    /// Worded at the kill, on the working sets read then.
    pub decision: EvictionDecision,
    /// The source whose notifier fired the kill.
    pub source: WakeSource,
    /// CLOCK_MONOTONIC ns when the source told the hot path, and when the kill was written.
    pub detected_ns: u64,
    pub killed_ns: u64,
    /// The crossing: the level's working set, and the working set read at the kill.
    pub level_bytes: u64,
    pub working_set_bytes: u64,
    /// The victim's working set as read at the kill (usage less its page cache at the
    /// last synchronize).
    pub victim_working_set_bytes: u64,
    /// The crossed signal's available at the kill (`None` for a level without its
    /// threshold).
    pub signal_available: Option<i64>,
    /// How many candidates' usage was read to pick the victim.
    pub candidates_read: usize,
}

/// What the eviction pass hands the hot path after a synchronize.
#[derive(Clone, Debug)]
pub struct Candidates {
    /// The ranking's first pods, with the stats just read, most evictable first.
    pub pods: Vec<PodWithStats>,
    pub fs_layout: FsLayout,
    pub config: Arc<EvictionConfig>,
}

/// A pod the hot path may kill.
#[derive(Debug)]
struct Candidate {
    pod: PodWithStats,
    /// Its memory request (milli-bytes) and priority, as the ranking compares them.
    request_milli: i128,
    priority: i32,
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

#[derive(Debug, Default)]
struct Armed {
    levels: Vec<Level>,
    candidates: Vec<Candidate>,
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

/// The watches' CPU allowance (a token bucket of thread CPU time).
#[derive(Debug)]
struct WatchBudget {
    left_ns: u64,
    refilled_at_ns: u64,
}

impl WatchBudget {
    fn full() -> WatchBudget {
        WatchBudget {
            left_ns: WATCH_BUDGET.as_nanos() as u64,
            refilled_at_ns: monotonic_ns(),
        }
    }

    /// What is left now.
    fn refill(&mut self, now_ns: u64) -> u64 {
        let elapsed = now_ns.saturating_sub(self.refilled_at_ns);
        let gained = u128::from(elapsed) * WATCH_REFILL_PER_SEC.as_nanos() / 1_000_000_000;
        self.left_ns = (self.left_ns + u64::try_from(gained).unwrap_or(u64::MAX))
            .min(WATCH_BUDGET.as_nanos() as u64);
        self.refilled_at_ns = now_ns;
        self.left_ns
    }
}

/// The calling thread's CPU time, ns.
fn thread_cpu_ns() -> u64 {
    match nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID) {
        Ok(ts) => {
            u64::try_from(ts.tv_sec()).unwrap_or(0) * 1_000_000_000
                + u64::try_from(ts.tv_nsec()).unwrap_or(0)
        }
        Err(_) => 0,
    }
}

/// Whether this process may run on more than one CPU now.
fn more_than_one_cpu() -> bool {
    std::thread::available_parallelism().is_ok_and(|n| n.get() > 1)
}

/// Shared between the eviction pass (which arms it) and the sources (which fire it).
#[derive(Debug)]
pub struct HotPath {
    armed: Mutex<Armed>,
    state: SharedState,
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
    /// Where the ring reader hands its watches (see [`HotPath::start_watcher`]); `None`:
    /// every source watches on its own thread.
    watcher: Mutex<Option<std::sync::mpsc::Sender<WatchRequest>>>,
}

/// A watch the ring reader hands over instead of running it itself.
#[derive(Clone, Copy, Debug)]
struct WatchRequest {
    source: WakeSource,
    margin: u64,
    told_ns: u64,
}

/// Name of the thread that runs the ring reader's watches.
pub const WATCHER_THREAD: &str = "monitor-watch";

impl HotPath {
    pub fn new(state: SharedState) -> HotPath {
        HotPath {
            armed: Mutex::new(Armed::default()),
            state,
            open: Arc::new(OpenFiles::with_budget(LEVEL_FILES_KEPT)),
            candidate_files: Arc::new(OpenFiles::with_budget(2 * CANDIDATES)),
            last_watch_end_ns: std::sync::atomic::AtomicU64::new(0),
            budget: Mutex::new(WatchBudget::full()),
            spin: more_than_one_cpu(),
            watch_cpu_ns: std::sync::atomic::AtomicU64::new(0),
            watcher: Mutex::new(None),
        }
    }

    /// Starts the thread that runs the watches the eBPF ring reader would otherwise run
    /// itself (a watch lasts up to [`APPROACH_WINDOW`], and meanwhile crossing and OOM
    /// records would wait in the ring). It runs at the memcg notifier's real-time
    /// priority where the kernel permits it; returns what it got. The thread ends when
    /// the hot path is dropped.
    pub fn start_watcher(self: &Arc<Self>) -> std::io::Result<String> {
        let (tx, rx) = std::sync::mpsc::channel::<WatchRequest>();
        let (got_tx, got_rx) = std::sync::mpsc::channel();
        let hot = Arc::downgrade(self);
        std::thread::Builder::new()
            .name(WATCHER_THREAD.into())
            .spawn(move || {
                let _ = got_tx.send(crate::notify::realtime::realtime_priority(
                    crate::notify::realtime::PRIORITY,
                ));
                while let Ok(request) = rx.recv() {
                    let Some(hot) = hot.upgrade() else { return };
                    hot.watch(request.source, request.margin, request.told_ns);
                }
            })?;
        *self.watcher.lock().unwrap_or_else(|p| p.into_inner()) = Some(tx);
        Ok(got_rx.recv().unwrap_or_default())
    }

    /// Runs a watch here, or hands it to the watcher thread when `source` is the ring
    /// reader and the thread runs.
    fn watch_from(&self, source: WakeSource, margin: u64, told_ns: u64) -> bool {
        if source == WakeSource::Ebpf
            && let Some(tx) = self
                .watcher
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .as_ref()
            && tx
                .send(WatchRequest {
                    source,
                    margin,
                    told_ns,
                })
                .is_ok()
        {
            return false;
        }
        self.watch(source, margin, told_ns)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Armed> {
        self.armed
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The watches' CPU time since start.
    pub fn watch_cpu(&self) -> Duration {
        Duration::from_nanos(self.watch_cpu_ns.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// The hard levels armed with the kernel notifiers (from the same specs), read to
    /// confirm a crossing. A spec's usage level includes the cgroup's inactive page cache
    /// when it was armed (`inactive_file_at(cgroup)`); the working set level is without.
    /// Setting them also ends an early notifier's rest (see [`EARLY_FIRES_PER_ARMING`]).
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
                threshold: s.threshold,
            })
            .collect();
        let old = {
            let mut armed = self.lock();
            armed.early_fires.clear();
            std::mem::replace(&mut armed.levels, levels)
        };
        drop(old);
    }

    /// The pods to pick the next victim from; `None` disarms. Candidates armed now keep
    /// their open switches; others get theirs from `open` (no switch: not a candidate).
    /// While a kill is queued and not yet taken by a synchronize, nothing is armed: that
    /// kill is an eviction under way.
    pub fn arm(&self, candidates: Option<Candidates>, open: impl Fn(&str) -> Option<KillSwitch>) {
        let Some(candidates) = candidates else {
            let old = std::mem::take(&mut self.lock().candidates);
            drop(old);
            return;
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
    pub fn armed_pods(&self) -> Vec<String> {
        self.lock()
            .candidates
            .iter()
            .map(|c| c.pod.pod.key())
            .collect()
    }

    /// The first candidate armed now.
    pub fn armed_pod(&self) -> Option<String> {
        self.armed_pods().into_iter().next()
    }

    /// The kills the hot path carried out since the last call, oldest first.
    pub fn take_fired(&self) -> Vec<HotKill> {
        std::mem::take(&mut self.lock().fired)
    }

    /// A hard level reached now, by the kernel's own counters; if none, the working set
    /// and level nearest to it (for the log).
    fn crossed(levels: &[Level]) -> Result<Crossing, Option<(u64, u64)>> {
        let mut nearest: Option<(u64, u64)> = None;
        for level in levels {
            let Some(ws) = level.working_set_now() else {
                continue;
            };
            if ws >= level.working_set {
                return Ok(Crossing {
                    threshold: level.threshold,
                    level_working_set: level.working_set,
                    working_set: ws,
                });
            }
            if nearest.is_none_or(|(w, l)| l - w > level.working_set - ws) {
                nearest = Some((ws, level.working_set));
            }
        }
        Err(nearest)
    }

    /// The victim for `crossing`, by the policy's ranking on the candidates' working
    /// sets read now: its index among the candidates, its working set, and what the
    /// eviction is worded from after the kill ([`Pick::decision`]).
    fn pick(armed: &Armed, crossing: &Crossing) -> Option<Pick> {
        let config = armed.config.clone()?;
        let signal = match crossing.threshold {
            Some(t) => t.signal,
            None => [Signal::MemoryAvailable, Signal::AllocatableMemoryAvailable]
                .into_iter()
                .find(|s| {
                    config
                        .thresholds
                        .iter()
                        .any(|t| t.signal == *s && t.is_hard())
                })?,
        };
        if !config
            .thresholds
            .iter()
            .any(|t| t.signal == signal && t.is_hard())
        {
            return None;
        }
        // Read in the order of the last ranking, and only as far as needed: once, for
        // every candidate not read, what its parent's usage leaves beyond its siblings
        // read could not make it rank before the first so far, the rest cannot change the
        // pick (a key only falls as the working set grows, and of equal keys the earlier
        // candidate goes first). Each parent's usage is read once, when first needed.
        let mut bounds = Bounds::new(&armed.holders);
        let mut read = Vec::with_capacity(armed.candidates.len());
        let mut pods = Vec::with_capacity(armed.candidates.len());
        let mut first: Option<MemoryRankKey> = None;
        for (index, candidate) in armed.candidates.iter().enumerate() {
            if let Some(first) = first
                && armed.candidates[index..].iter().all(|other| {
                    bounds
                        .left_for(other)
                        .is_some_and(|left| first <= other.key_at(left))
                })
            {
                break;
            }
            // A candidate whose cgroup cannot be read is gone: nobody to kill there.
            let Some((usage, working_set)) = candidate.usage_now() else {
                continue;
            };
            bounds.note_read(candidate, usage);
            let key = candidate.key_at(working_set);
            first = Some(first.map_or(key, |f| f.min(key)));
            let mut pod = candidate.pod.clone();
            pod.stats.memory_working_set_bytes = Some(working_set);
            read.push((index, working_set));
            pods.push(pod);
        }
        let input = SyncInput {
            observations: crossing.observations(),
            pods,
            fs_layout: armed.fs_layout,
        };
        let position = hard_eviction_victim(&input, signal)?;
        let (index, working_set) = read[position];
        Some(Pick {
            index,
            position,
            working_set,
            input,
            signal,
            config,
        })
    }
}

/// What the candidates' parents hold beyond the candidates read so far, during one pick.
struct Bounds<'a> {
    holders: &'a [CgroupReader],
    /// Per holder: its usage (read when first needed; `None` inside if it failed).
    usage: Vec<Option<Option<u64>>>,
    /// Per holder: the usage of its candidates read.
    read: Vec<u64>,
}

impl<'a> Bounds<'a> {
    fn new(holders: &'a [CgroupReader]) -> Bounds<'a> {
        Bounds {
            holders,
            usage: vec![None; holders.len()],
            read: vec![0; holders.len()],
        }
    }

    fn note_read(&mut self, candidate: &Candidate, usage: u64) {
        if let Some(read) = candidate.holder.and_then(|h| self.read.get_mut(h)) {
            *read = read.saturating_add(usage);
        }
    }

    /// The most memory `candidate` (not read) can hold now; `None` if unknown.
    fn left_for(&mut self, candidate: &Candidate) -> Option<u64> {
        let h = candidate.holder?;
        let holder = self.holders.get(h)?;
        let usage = *self.usage[h].get_or_insert_with(|| holder.usage_bytes("").ok());
        Some(usage?.saturating_sub(self.read[h]))
    }
}

/// The hot path's choice at a crossing.
struct Pick {
    /// Among the candidates, and among the pods of `input`.
    index: usize,
    position: usize,
    /// The victim's working set as read.
    working_set: u64,
    /// The candidates and the signal as read at the crossing.
    input: SyncInput,
    signal: Signal,
    config: Arc<EvictionConfig>,
}

impl Pick {
    /// The eviction, in the kubelet's words, on the numbers read at the crossing (worded
    /// after the kill: the message costs a few microseconds).
    fn decision(&self) -> Option<EvictionDecision> {
        hard_eviction_of(&self.config, &self.input, self.signal, self.position)
    }
}

/// Reaps the killed victim's memory (`process_mrelease`) on a thread of its own, if the
/// victim has not freed it by itself [`REAP_AFTER`] the kill: the reap unmaps the memory
/// from the calling thread and takes as long as freeing it does (60-90 ms for the bench's
/// hog of about 370 MiB), and a notifier thread must not be deaf, nor its wake for the
/// booking held back, that long. Logs how long it took.
fn reap(victim: Candidate, pod: String, killed_ns: u64) {
    let spawned = std::thread::Builder::new()
        .name(REAPER_THREAD.into())
        .spawn(move || {
            std::thread::sleep(REAP_AFTER);
            let reaped = victim.switch.release_memory();
            tracing::info!(
                pod = %pod,
                reaped,
                reap_us = monotonic_ns().saturating_sub(killed_ns) / 1000,
                "hot path: victim's memory reaped"
            );
        });
    if let Err(err) = spawned {
        // The victim still exits and frees its memory itself, only later.
        tracing::warn!("hot path: no thread to reap the victim's memory: {err}");
    }
}

/// How long a killed victim has to free its memory by itself before it is reaped (as the
/// kernel's OOM reaper waits before it reaps). A reap started at the kill races the
/// victim's exit over the same memory: in the bench's race beside 110 pods the working set
/// then came back under the threshold only when the whole reap ended (60-90 ms) in half
/// the trials; left to exit by itself, SIGKILL->freed was 7.8 / 14.5 ms p50 / p99. The reap
/// stays for a victim that cannot exit (blocked in the kernel, frozen).
pub const REAP_AFTER: Duration = Duration::from_millis(20);

/// Name of the thread that reaps a killed victim's memory.
pub const REAPER_THREAD: &str = "monitor-reaper";

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
            self.watch_from(source, 0, told_ns);
        }
    }

    /// An early notifier fired a little below a hard level (its kernel check is coarser
    /// than the headroom wants): watch the usage closely, for a bounded time and CPU,
    /// and kill the moment a level is reached. The notifier at the level itself stays
    /// armed, so a crossing after the window (or after usage fell back) is still heard.
    fn hard_approach(&self, source: WakeSource, margin: u64, level: u64) -> bool {
        use std::sync::atomic::Ordering;
        let now_ns = monotonic_ns();
        let rest_ns = APPROACH_REST.as_nanos() as u64;
        let last = self.last_watch_end_ns.load(Ordering::Relaxed);
        if last != 0 && now_ns < last.saturating_add(rest_ns) {
            return false;
        }
        {
            let mut armed = self.lock();
            let window_ns = FLAP_WINDOW.as_nanos() as u64;
            let fires = armed.early_fires.entry(level).or_default();
            if fires.len() >= EARLY_FIRES_PER_ARMING as usize {
                // Rested until the levels are set again, however long ago it flapped.
                return false;
            }
            fires.retain(|at| now_ns.saturating_sub(*at) < window_ns);
            fires.push(now_ns);
            if fires.len() == EARLY_FIRES_PER_ARMING as usize {
                tracing::debug!(source = %source, level, "hot path: an early notifier keeps firing; resting it until the next synchronize");
            }
        }
        self.watch_from(source, margin, now_ns)
    }
}

impl HotPath {
    /// Reads every level's usage, back to back for [`APPROACH_SPIN`] (where more than
    /// one CPU is usable) and then every [`APPROACH_POLL`], for up to
    /// [`APPROACH_WINDOW`] and while the CPU budget lasts: at a level's usage, the working
    /// set is checked and the victim killed once it is there too. Stops when usage is
    /// `margin` or more below every level. Whether it killed.
    fn watch(&self, source: WakeSource, margin: u64, told_ns: u64) -> bool {
        let levels = {
            let armed = self.lock();
            if armed.candidates.is_empty() {
                return false;
            }
            armed.levels.clone()
        };
        let allowance = {
            let mut budget = self.budget.lock().unwrap_or_else(|p| p.into_inner());
            budget.refill(monotonic_ns())
        };
        if allowance == 0 {
            tracing::debug!(source = %source, "hot path: watch skipped, its CPU budget is spent");
            return false;
        }
        let cpu_start = thread_cpu_ns();
        let killed = self.watch_levels(source, margin, told_ns, &levels, cpu_start, allowance);
        let used = thread_cpu_ns().saturating_sub(cpu_start);
        self.watch_cpu_ns
            .fetch_add(used, std::sync::atomic::Ordering::Relaxed);
        let mut budget = self.budget.lock().unwrap_or_else(|p| p.into_inner());
        budget.refill(monotonic_ns());
        budget.left_ns = budget.left_ns.saturating_sub(used);
        killed
    }

    fn watch_levels(
        &self,
        source: WakeSource,
        margin: u64,
        told_ns: u64,
        levels: &[Level],
        cpu_start: u64,
        allowance: u64,
    ) -> bool {
        let started = std::time::Instant::now();
        let spin_until = started
            + if self.spin {
                APPROACH_SPIN
            } else {
                Duration::ZERO
            };
        let until = started + APPROACH_WINDOW;
        let mut looks = 0u32;
        loop {
            let (mut reached, mut all_below) = (false, true);
            for level in levels {
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
            looks += 1;
            // The thread's CPU clock costs a system call (less than a read of a level):
            // looked at every 8 reads while spinning and after every read once the watch
            // sleeps between them, so a watch overruns its allowance by a few reads at most.
            let now = std::time::Instant::now();
            let check = looks.is_multiple_of(8) || now >= spin_until;
            if check && thread_cpu_ns().saturating_sub(cpu_start) >= allowance {
                tracing::debug!(source = %source, told_ns, "hot path: watch ended, its CPU budget is spent");
                self.last_watch_end_ns
                    .store(monotonic_ns(), std::sync::atomic::Ordering::Relaxed);
                return false;
            }
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

    /// Kills the victim picked on fresh working sets if a hard level is reached now.
    /// `watched_from_ns`: when the notifier that started a watch told the hot path (for
    /// the log).
    fn kill_if_crossed(
        &self,
        source: WakeSource,
        detected_ns: u64,
        watched_from_ns: Option<u64>,
    ) -> Look {
        let mut armed = self.lock();
        if armed.candidates.is_empty() {
            tracing::debug!(source = %source, detected_ns, "hot path: told, but no victim is armed");
            return Look::Disarmed;
        }
        let locked_ns = monotonic_ns();
        let crossing = match Self::crossed(&armed.levels) {
            Ok(crossing) => crossing,
            Err(nearest) => {
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
        };
        let confirmed_ns = monotonic_ns();
        let Some(pick) = Self::pick(&armed, &crossing) else {
            tracing::debug!(source = %source, detected_ns, "hot path: a level is reached, but no candidate is left to kill");
            return Look::Disarmed;
        };
        let (index, victim_working_set) = (pick.index, pick.working_set);
        let picked_ns = monotonic_ns();
        let fired = armed.candidates[index].switch.fire();
        let killed_ns = monotonic_ns();
        let decision = pick.decision();
        match (fired, decision) {
            (Ok(()), Some(decision)) => {
                // Disarmed until a synchronize has booked this kill and it has ended.
                let mut candidates = std::mem::take(&mut armed.candidates);
                let victim = candidates.swap_remove(index);
                let path = victim.switch.path.clone();
                armed.fired.push(HotKill {
                    decision: decision.clone(),
                    source,
                    detected_ns,
                    killed_ns,
                    level_bytes: crossing.level_working_set,
                    working_set_bytes: crossing.working_set,
                    victim_working_set_bytes: victim_working_set,
                    signal_available: crossing
                        .threshold
                        .and_then(|t| crossing.observations().get(&t.signal).map(|o| o.available)),
                    candidates_read: pick.input.pods.len(),
                });
                drop(armed);
                drop(candidates);
                reap(victim, decision.pod_key.clone(), killed_ns);
                tracing::info!(
                    pod = %decision.pod_key,
                    source = %source,
                    detected_ns,
                    at_ns = killed_ns,
                    watched_from_ns = watched_from_ns.unwrap_or(0),
                    // Where the time from the look to the kill went: the lock, the
                    // confirmation (the levels' reads), the pick (the candidates' reads
                    // and the ranking) and the write (the kernel signals every process
                    // of the cgroup in it).
                    lock_us = locked_ns.saturating_sub(detected_ns) / 1000,
                    confirm_us = confirmed_ns.saturating_sub(locked_ns) / 1000,
                    pick_us = picked_ns.saturating_sub(confirmed_ns) / 1000,
                    candidates_read = pick.input.pods.len(),
                    write_us = killed_ns.saturating_sub(picked_ns) / 1000,
                    level_bytes = crossing.level_working_set,
                    working_set_bytes = crossing.working_set,
                    victim_working_set_bytes = victim_working_set,
                    "hot path: cgroup.kill written"
                );
                self.state.event(
                    crate::events::EventReason::HotKill,
                    &decision.pod_key,
                    format!(
                        "hard memory threshold crossed ({source}): working set {} at a level of {}; killed through {} in {} µs, the pod's working set read then {}. {}",
                        crossing.working_set,
                        crossing.level_working_set,
                        path.display(),
                        killed_ns.saturating_sub(detected_ns) / 1000,
                        victim_working_set,
                        decision.message.trim_end()
                    ),
                );
                Look::Killed
            }
            (Err(err), _) => {
                // The normal path evicts at the synchronize this wake causes.
                tracing::warn!(
                    pod = %armed.candidates[index].switch.pod_key,
                    "hot path: writing {} failed: {err}",
                    armed.candidates[index].switch.path.display()
                );
                Look::NotReached
            }
            (Ok(()), None) => {
                // Cannot happen: the pick checked that the signal has a hard threshold.
                tracing::error!(
                    pod = %armed.candidates[index].switch.pod_key,
                    "hot path: killed, but the policy words no eviction for it"
                );
                Look::Killed
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::policy::stats::PodStats;

    /// hard memory.available<100 bytes in the fixture's scale; the levels below carry it.
    const KUBELET: &str = "evictionHard: {memory.available: 1Gi}\n";

    fn config() -> Arc<EvictionConfig> {
        let (kubelet, _) = crate::config::kubelet::load_kubelet_config(KUBELET, "kubelet.yaml")
            .expect("test config");
        Arc::new(kubelet.eviction)
    }

    /// A fake memory cgroup for the level (its usage and memory.stat), and fake pod
    /// cgroups (a usage file and a `cgroup.kill` each), in a temp dir.
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
            let hot = HotPath::new(SharedState::default());
            hot.set_levels(
                CgroupVersion::V1,
                &[
                    ThresholdSpec {
                        cgroup: dir.path().to_path_buf(),
                        usage_bytes: level,
                        hard: true,
                        passed_when_armed: false,
                        threshold: Some(ArmedThreshold {
                            signal: Signal::MemoryAvailable,
                            quantity_bytes: 1 << 30,
                            capacity_bytes: 8 << 30,
                        }),
                    },
                    // Soft levels never arm the hot path.
                    ThresholdSpec {
                        cgroup: dir.path().to_path_buf(),
                        usage_bytes: 50,
                        hard: false,
                        passed_when_armed: false,
                        threshold: None,
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
            f.set_level(1000, 300);
            f.arm("default/a");
            f
        }

        /// Sets one hard usage level, armed with `inactive` of page cache, as a
        /// synchronize does.
        fn set_level(&self, usage_bytes: u64, inactive: u64) {
            self.hot.set_levels(
                CgroupVersion::V1,
                &[ThresholdSpec {
                    cgroup: self.dir.path().to_path_buf(),
                    usage_bytes,
                    hard: true,
                    passed_when_armed: false,
                    threshold: None,
                }],
                |_| inactive,
            );
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

        fn pod_dir(&self, key: &str) -> std::path::PathBuf {
            let dir = self.dir.path().join("pods").join(key.replace('/', "_"));
            std::fs::create_dir_all(&dir).expect("pod dir");
            dir
        }

        /// Sets the usage of the fake pods' parent cgroup.
        fn set_parent_usage(&self, bytes: u64) {
            let dir = self.dir.path().join("pods");
            std::fs::create_dir_all(&dir).expect("pods dir");
            std::fs::write(dir.join("memory.usage_in_bytes"), format!("{bytes}\n"))
                .expect("parent usage");
        }

        /// Sets a pod's usage (its fake cgroup's memory.usage_in_bytes).
        fn set_pod_usage(&self, key: &str, bytes: u64) {
            std::fs::write(
                self.pod_dir(key).join("memory.usage_in_bytes"),
                format!("{bytes}\n"),
            )
            .expect("pod usage");
        }

        /// Arms `pods` (key, working set at the synchronize; usage the same: no page
        /// cache), ranked as given by the caller.
        fn arm_pods(&self, pods: &[(&str, u64)]) {
            let stats = pods
                .iter()
                .map(|(key, ws)| {
                    self.set_pod_usage(key, *ws);
                    let name = key.split('/').nth(1).expect("ns/name");
                    PodWithStats {
                        pod: Arc::new(crate::policy::testing::pod(name, "", "")),
                        stats: PodStats {
                            memory_working_set_bytes: Some(*ws),
                            ..PodStats::default()
                        },
                    }
                })
                .collect();
            self.hot.arm(
                Some(Candidates {
                    pods: stats,
                    fs_layout: FsLayout::Shared,
                    config: config(),
                }),
                |key| {
                    let dir = self.pod_dir(key);
                    let kill = dir.join("cgroup.kill");
                    if !kill.exists() {
                        std::fs::write(&kill, "").expect("kill file");
                    }
                    Some(
                        KillSwitch::open(key, &kill)
                            .ok()?
                            .with_memory(CgroupReader::new(CgroupVersion::V1, dir)),
                    )
                },
            );
        }

        fn arm(&self, pod: &str) {
            self.arm_pods(&[(pod, 500)]);
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

        fn killed(&self, pod: &str) -> String {
            std::fs::read_to_string(self.pod_dir(pod).join("cgroup.kill")).unwrap_or_default()
        }

        fn fired(&self) -> Vec<String> {
            self.hot
                .take_fired()
                .into_iter()
                .map(|k| k.decision.pod_key)
                .collect()
        }
    }

    #[test]
    fn a_confirmed_crossing_kills_the_armed_pod_once() {
        let f = Fixture::new(1000);
        f.arm("default/big");
        // The notifier fires on the way down too: below the level nothing happens.
        f.hot.hard_crossing(WakeSource::MemcgThreshold);
        assert_eq!(
            f.killed("default/big"),
            "",
            "usage 100 is under the level 1000"
        );
        assert!(f.hot.take_fired().is_empty());
        f.set_usage(1000);
        f.hot.hard_crossing(WakeSource::MemcgThreshold);
        assert_eq!(f.killed("default/big"), "1", "one write to cgroup.kill");
        let fired = f.hot.take_fired();
        assert_eq!(fired.len(), 1);
        assert_eq!(fired[0].decision.pod_key, "default/big");
        assert!(fired[0].killed_ns >= fired[0].detected_ns);
        // Disarmed by the kill: another crossing kills nobody until the next synchronize.
        f.hot.hard_crossing(WakeSource::MemcgThreshold);
        assert_eq!(f.killed("default/big"), "1");
        assert!(f.hot.take_fired().is_empty());
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
    fn the_victim_is_picked_on_the_working_sets_read_at_the_crossing() {
        let f = Fixture::new(1000);
        // Ranked at the synchronize: a (900) before b (100).
        f.arm_pods(&[("default/a", 900), ("default/b", 100)]);
        assert_eq!(f.hot.armed_pods(), vec!["default/a", "default/b"]);
        // Since then a freed its memory and b grew: b is the pick now.
        f.set_pod_usage("default/a", 10);
        f.set_pod_usage("default/b", 800);
        f.set_usage(1000);
        f.hot.hard_crossing(WakeSource::Ebpf);
        assert_eq!(f.killed("default/a"), "", "a holds nothing any more");
        assert_eq!(f.killed("default/b"), "1");
        let fired = f.hot.take_fired();
        assert_eq!(fired.len(), 1);
        let kill = &fired[0];
        assert_eq!(kill.decision.pod_key, "default/b");
        assert_eq!(kill.victim_working_set_bytes, 800);
        // The message names the threshold crossed and the signal at the crossing: the
        // level reached exactly, so available is the threshold's quantity.
        assert!(
            kill.decision
                .message
                .contains("Threshold quantity: 1Gi, available: 1Gi."),
            "{}",
            kill.decision.message
        );
        assert_eq!(kill.signal_available, Some(1 << 30));
    }

    #[test]
    fn candidates_are_read_only_while_the_memory_left_could_change_the_pick() {
        let f = Fixture::new(1000);
        // The candidates' parent cgroup says 600 in all.
        f.set_parent_usage(600);
        f.arm_pods(&[("default/a", 500), ("default/b", 60), ("default/c", 40)]);
        // c's file says 900, more than the holder leaves after a (100): trusting the
        // holder, neither b nor c could outrank a, so c is not even read.
        f.set_pod_usage("default/c", 900);
        f.set_usage(1000);
        f.hot.hard_crossing(WakeSource::Ebpf);
        assert_eq!(
            f.killed("default/a"),
            "1",
            "a ranks first on what could be read"
        );
        assert_eq!(f.killed("default/c"), "");
        let fired = f.hot.take_fired();
        assert_eq!(fired[0].decision.pod_key, "default/a");
        assert_eq!(fired[0].candidates_read, 1, "only a was read");

        // With room for c to have grown (the holder says 1500), c is read and killed.
        let f = Fixture::new(1000);
        f.set_parent_usage(600);
        f.arm_pods(&[("default/a", 500), ("default/b", 60), ("default/c", 40)]);
        f.set_parent_usage(1500);
        f.set_pod_usage("default/c", 900);
        f.set_usage(1000);
        f.hot.hard_crossing(WakeSource::Ebpf);
        assert_eq!(f.killed("default/a"), "");
        assert_eq!(f.killed("default/c"), "1", "c grew past a");
    }

    #[test]
    fn a_kill_not_yet_taken_keeps_the_hot_path_disarmed() {
        let f = Fixture::new(1000);
        f.arm("default/a");
        f.set_usage(1000);
        f.hot.hard_crossing(WakeSource::Ebpf);
        // A synchronize that started before the kill arms again before it took the kill:
        // the kill is an eviction under way, so nothing is armed.
        f.arm_pods(&[("default/b", 500)]);
        assert!(f.hot.armed_pods().is_empty());
        f.hot.hard_crossing(WakeSource::Ebpf);
        assert_eq!(f.fired(), vec!["default/a"], "one kill, booked once");
        f.arm("default/b");
        f.hot.hard_crossing(WakeSource::Ebpf);
        assert_eq!(f.fired(), vec!["default/b"]);
    }

    #[test]
    fn nothing_is_killed_when_disarmed_or_without_a_hard_level() {
        let f = Fixture::new(1000);
        f.set_usage(5000);
        f.hot.hard_crossing(WakeSource::MemcgThreshold);
        assert!(f.fired().is_empty(), "no victim armed");
        f.arm("default/a");
        f.hot.arm(None, |_| None);
        f.hot.hard_crossing(WakeSource::MemcgThreshold);
        assert_eq!(f.killed("default/a"), "", "disarmed");
        // Only soft levels: the soft spec's 50 is exceeded, but it does not count.
        let f = Fixture::new(u64::MAX);
        f.set_usage(5000);
        f.arm("default/a");
        f.hot.hard_crossing(WakeSource::MemcgThreshold);
        assert_eq!(f.killed("default/a"), "");
        assert_eq!(f.hot.armed_pod().as_deref(), Some("default/a"));
    }

    #[test]
    fn page_cache_alone_past_the_usage_level_kills_nobody() {
        let f = Fixture::with_page_cache_at_arming();
        // Usage past the level, but 500 of it reclaimable cache: working set 600 < 700.
        f.set_usage(1100);
        f.set_inactive(500);
        f.hot.hard_crossing(WakeSource::MemcgThreshold);
        assert_eq!(
            f.killed("default/a"),
            "",
            "a false alarm costs a read, never a kill"
        );
        // The working set itself reaches 700.
        f.set_inactive(400);
        f.hot.hard_crossing(WakeSource::MemcgThreshold);
        assert_eq!(f.killed("default/a"), "1");
    }

    #[test]
    fn an_early_notifier_is_followed_by_a_close_watch_that_kills_at_the_level() {
        let f = Fixture::new(1000);
        f.arm("default/a");
        // Under the early level (1000 − 100): it fired on the way down; no watch.
        f.set_usage(850);
        let started = std::time::Instant::now();
        assert!(!f.hot.hard_approach(WakeSource::MemcgThreshold, 100, 1));
        assert!(
            started.elapsed() < APPROACH_WINDOW,
            "no watch below the early level"
        );
        // Between the early level and the level: watched until the level is reached.
        f.set_usage(950);
        let raise = f.rewrite_later("memory.usage_in_bytes", "1000\n");
        assert!(f.hot.hard_approach(WakeSource::MemcgThreshold, 100, 1));
        raise.join().expect("raise");
        assert_eq!(f.fired(), vec!["default/a"]);
    }

    #[test]
    fn a_watch_that_sees_no_crossing_ends_by_its_window_or_its_budget() {
        let f = Fixture::new(1000);
        f.arm("default/a");
        f.set_usage(950);
        let started = std::time::Instant::now();
        assert!(!f.hot.hard_approach(WakeSource::MemcgThreshold, 100, 1));
        assert!(started.elapsed() >= APPROACH_SPIN.min(WATCH_BUDGET));
        assert_eq!(f.killed("default/a"), "", "never reached: nobody killed");
        let used = f.hot.watch_cpu();
        assert!(
            used <= WATCH_BUDGET + Duration::from_millis(5),
            "the watch kept to its budget: {used:?}"
        );
        assert_eq!(
            f.hot.armed_pod().as_deref(),
            Some("default/a"),
            "still armed"
        );
        // Right after, an early notifier starts no new watch, even at the level: the
        // notifier at the level tells instead.
        f.set_usage(1000);
        let started = std::time::Instant::now();
        assert!(!f.hot.hard_approach(WakeSource::MemcgThreshold, 100, 1));
        assert!(started.elapsed() < APPROACH_SPIN, "resting");
        f.hot.hard_crossing(WakeSource::MemcgThreshold);
        assert_eq!(f.killed("default/a"), "1");
        f.hot.take_fired();
        f.arm("default/b");
        // Disarmed: no watch at all.
        f.hot.arm(None, |_| None);
        assert!(!f.hot.hard_approach(WakeSource::MemcgThreshold, 100, 1));
    }

    #[test]
    fn an_early_notifier_that_keeps_firing_rests_until_the_levels_are_set_again() {
        let f = Fixture::new(1000);
        f.arm("default/a");
        // Usage above the early level then back below it, again and again: each watch
        // ends at once (under every early level), and each counts.
        f.set_usage(850);
        for _ in 0..EARLY_FIRES_PER_ARMING {
            assert!(!f.hot.hard_approach(WakeSource::MemcgThreshold, 100, 1));
        }
        assert_eq!(
            f.hot.lock().early_fires[&1].len(),
            EARLY_FIRES_PER_ARMING as usize
        );
        // Another early notifier is not rested by this one's flapping.
        f.set_usage(850);
        assert!(!f.hot.hard_approach(WakeSource::MemcgThreshold, 100, 2));
        assert_eq!(f.hot.lock().early_fires[&2].len(), 1);
        // Rested: even at the level, no watch (the exact notifier still tells).
        f.set_usage(1000);
        assert!(!f.hot.hard_approach(WakeSource::MemcgThreshold, 100, 1));
        assert_eq!(f.killed("default/a"), "");
        // Still rested once its fires are older than the window: the rest lasts until
        // the next synchronize, not a window.
        for at in f.hot.lock().early_fires.get_mut(&1).expect("fires") {
            *at = 0;
        }
        assert!(!f.hot.hard_approach(WakeSource::MemcgThreshold, 100, 1));
        assert_eq!(f.killed("default/a"), "");
        // The next synchronize sets the levels again: watched once more.
        f.set_level(1000, 0);
        assert!(f.hot.hard_approach(WakeSource::MemcgThreshold, 100, 1));
        assert_eq!(f.fired(), vec!["default/a"]);
    }

    #[test]
    fn the_watch_budget_refills_at_its_rate_and_caps_at_its_size() {
        let mut budget = WatchBudget {
            left_ns: 0,
            refilled_at_ns: 0,
        };
        // 100 ms at 20 ms/s: 2 ms back.
        assert_eq!(budget.refill(100_000_000), 2_000_000);
        // Never past the burst.
        assert_eq!(
            budget.refill(100_000_000_000),
            WATCH_BUDGET.as_nanos() as u64
        );
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
        assert_eq!(
            f.killed("default/a"),
            "1",
            "killed once the working set reached 700"
        );
        let fired = f.hot.take_fired();
        assert!(fired[0].detected_ns > 0);
    }

    #[test]
    fn re_arming_another_pod_replaces_the_victim() {
        let f = Fixture::new(10);
        f.arm("default/a");
        f.arm("default/b");
        f.set_usage(10);
        f.hot.hard_crossing(WakeSource::MemoryEvents);
        assert_eq!(f.fired(), vec!["default/b"]);
    }

    #[test]
    fn the_ring_readers_watch_runs_on_the_watcher_thread_and_the_reader_returns_at_once() {
        let mut f = Fixture::with_page_cache_at_arming();
        // The watcher runs at real-time priority when the tests run as root: spinning, it
        // could keep this thread (which rewrites the statistics) off both CPUs of a small
        // machine until its budget is spent. Sleeping between looks, it cannot.
        f.hot.spin = false;
        let hot = Arc::new(f.hot);
        hot.start_watcher().expect("watcher thread");
        // The usage level is reached, the working set not yet: a watch is needed.
        std::fs::write(f.dir.path().join("memory.usage_in_bytes"), "1000\n").expect("usage");
        std::fs::write(
            f.dir.path().join("memory.stat"),
            "cache 1\ntotal_inactive_file 400\n",
        )
        .expect("stat");
        // Handed over: an inline watch would have run out its window before returning,
        // with the working set short throughout, and killed nobody.
        hot.hard_crossing(WakeSource::Ebpf);
        assert!(hot.take_fired().is_empty(), "not reached yet");
        // The watcher kills once the working set gets there (rewritten in place).
        {
            use std::io::Write;
            std::fs::OpenOptions::new()
                .write(true)
                .open(f.dir.path().join("memory.stat"))
                .and_then(|mut file| file.write_all(b"cache 1\ntotal_inactive_file 200\n"))
                .expect("rewrite");
        }
        let deadline = std::time::Instant::now() + APPROACH_WINDOW * 2;
        let mut fired = Vec::new();
        while fired.is_empty() && std::time::Instant::now() < deadline {
            fired = hot.take_fired();
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(fired.len(), 1, "killed by the watcher thread");
        assert_eq!(fired[0].decision.pod_key, "default/a");
    }
}
