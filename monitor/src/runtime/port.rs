//! What the synchronize loop needs from a pod runtime, one small trait per job, so that a
//! runtime (the agent's own process runtime today; a container runtime tomorrow) plugs in
//! without the policy or the loop knowing which:
//!
//! | port | job | blocking? |
//! |---|---|---|
//! | [`ActivePods`] | the pods that may be evicted, with stats read now | reads cgroupfs, quick |
//! | [`PodKiller`] | carry out one eviction, report how it ended | async, up to the kill timeout |
//! | [`NodeReclaim`] | node-level reclaim: dead containers, unused images | deletes files: run off the async workers |
//! | [`ConditionsSink`] | hear the node conditions (admission reads them) | no |
//!
//! [`Ports`] bundles one of each; [`Ports::none`] is a node without pods.
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use super::sys::{CgroupKill, PidFd};
use crate::policy::eviction::{EvictionDecision, ReclaimResult};
use crate::policy::signal::Signal;
use crate::policy::stats::PodWithStats;
use crate::policy::types::{NodeConditionType, Resource};

/// A boxed future a port returns.
pub(crate) type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// How an eviction ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum EvictionOutcome {
    /// The pod was running; its processes are gone and its cgroups removed.
    Evicted,
    /// No such running pod (it finished, was removed, or another eviction got it first):
    /// nothing was signalled.
    AlreadyGone,
    /// Processes were still alive when the kill timeout ran out.
    TimedOut { alive: usize },
    /// The kill itself failed (a cgroup could not be read or signalled).
    KillFailed(String),
}

impl EvictionOutcome {
    /// The name used in metrics labels, events and the API.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            EvictionOutcome::Evicted => "evicted",
            EvictionOutcome::AlreadyGone => "already_gone",
            EvictionOutcome::TimedOut { .. } => "timed_out",
            EvictionOutcome::KillFailed(_) => "kill_failed",
        }
    }

    /// The pod is not running any more: nothing left to retry.
    pub(crate) fn is_final(&self) -> bool {
        matches!(
            self,
            EvictionOutcome::Evicted | EvictionOutcome::AlreadyGone
        )
    }
}

impl std::fmt::Display for EvictionOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EvictionOutcome::Evicted => f.write_str("evicted"),
            EvictionOutcome::AlreadyGone => f.write_str("already gone"),
            EvictionOutcome::TimedOut { alive } => {
                write!(f, "{alive} process(es) still alive after the kill timeout")
            }
            EvictionOutcome::KillFailed(err) => write!(f, "kill failed: {err}"),
        }
    }
}

/// Which pod stats the policy will read at a pass. Reading a pod's stats is the cost of a
/// synchronize that grows with pods, so a runtime reads only these (what is not read is
/// `None`, which the policy treats as the kubelet treats a missing stat).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct StatsNeeds {
    /// Process counts: only the pid.available ranking reads them.
    pub(crate) processes: bool,
    /// Disk usage of every pod's logs, volumes and writable layers: a disk signal's
    /// ranking. A pass asks for it only while a disk threshold is met or near.
    pub(crate) disk: bool,
    /// The same for the pods with a local storage limit (an ephemeral-storage limit or an
    /// emptyDir sizeLimit), which local storage isolation checks at every pass.
    pub(crate) local_storage_limits: bool,
    /// Each container's memory: the memory eviction message names containers. Read only
    /// for the pods a memory eviction would pick ([`ActivePods::add_container_memory`]),
    /// never for every pod.
    pub(crate) container_memory: bool,
}

impl StatsNeeds {}

/// The pods that may be evicted, with their usage.
pub(crate) trait ActivePods: Send + Sync {
    /// Running pods, not already being stopped, with the stats in `needs` read NOW
    /// (containers' memory aside: see [`ActivePods::add_container_memory`]).
    fn active_pods(&self, needs: StatsNeeds) -> Vec<PodWithStats>;

    /// Reads each container's memory working set of `pod` NOW into its stats. A pass reads
    /// them only for the pod a memory eviction would pick, whose message names them.
    fn add_container_memory(&self, pod: &mut PodWithStats) {
        let _ = pod;
    }

    /// The running pods (not being stopped) with the directories of their memory
    /// cgroups, where memory relief reads their page cache and writes `memory.reclaim`.
    /// No stats are read.
    fn memory_cgroups(&self) -> Vec<(Arc<crate::policy::pod::Pod>, std::path::PathBuf)> {
        Vec::new()
    }
}

/// A pod's kill, prepared in advance: an open `cgroup.kill` of the pod's cgroup (cgroup v2,
/// or the unified hierarchy beside a v1 memory controller; Linux 5.14+). Writing "1" kills
/// every process of the cgroup's subtree at once, forks included, and cannot reach a
/// process outside it (no pid is read, so no pid can be reused under us).
///
/// It also holds pidfds of the processes the pod had when it was armed. The kill signals
/// them first, before the write (see [`KillSwitch::fire`]); after the kill,
/// `process_mrelease(2)` (Linux 5.15+) frees their memory at once instead of waiting for
/// each to run its exit (Android's lmkd does the same). A pidfd names one process for
/// good, and the call only reaps a process that is already dying.
#[derive(Debug)]
pub(crate) struct KillSwitch {
    pub(crate) pod_key: String,
    pub(crate) path: std::path::PathBuf,
    kill: CgroupKill,
    pidfds: Vec<PidFd>,
    /// Reads the pod's memory cgroup: the hot path looks at its usage at the crossing.
    pub(crate) memory: Option<crate::observe::CgroupReader>,
    /// Set just before the kill is written, so that the runtime never restarts a
    /// container of this pod, even when it sees the exit before the eviction is booked.
    pub(crate) evicting: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
}

/// Processes of one pod whose pidfds a switch keeps (more are killed, not reaped early).
const MAX_PIDFDS: usize = 64;

impl KillSwitch {
    /// Opens `path` (a `cgroup.kill` file) for writing, and pidfds of the processes in
    /// its cgroup and the cgroup's children (the containers).
    pub(crate) fn open(pod_key: &str, path: &std::path::Path) -> std::io::Result<KillSwitch> {
        let kill = CgroupKill::open(path)?;
        let pidfds = path.parent().map(open_pidfds).unwrap_or_default();
        Ok(KillSwitch {
            pod_key: pod_key.to_string(),
            path: path.to_path_buf(),
            kill,
            pidfds,
            memory: None,
            evicting: None,
        })
    }

    /// With the pod's memory cgroup (see [`KillSwitch::memory`]).
    pub(crate) fn with_memory(mut self, memory: crate::observe::CgroupReader) -> Self {
        self.memory = Some(memory);
        self
    }

    /// With the runtime's flag for "this pod is being evicted" (see
    /// [`KillSwitch::evicting`]).
    pub(crate) fn with_evicting_flag(
        mut self,
        evicting: std::sync::Arc<std::sync::atomic::AtomicBool>,
    ) -> Self {
        self.evicting = Some(evicting);
        self
    }

    /// Kills the pod: the runtime's flag is raised, SIGKILL goes to each process the
    /// switch holds a pidfd of, then `cgroup.kill` is written for every process the
    /// cgroup holds now (forks, and processes started since the pidfds were opened).
    ///
    /// The pidfds go first because they are the fast part: a `pidfd_send_signal` costs
    /// a few microseconds, while the `cgroup.kill` write takes the cgroup lock and walks
    /// the subtree's tasks (55-142 µs under the bench's race). A pidfd names one process
    /// for good, one the pod held when it was opened (at the arming, listed in the pod's
    /// `cgroup.procs` before and after the opening): an exited process is not signalled,
    /// and a reused pid is never reached. The write's result decides: a pod whose
    /// `cgroup.kill` could not be written is left to the eviction loop.
    pub(crate) fn fire(&self) -> std::io::Result<()> {
        if let Some(evicting) = &self.evicting {
            evicting.store(true, std::sync::atomic::Ordering::SeqCst);
        }
        for pidfd in &self.pidfds {
            // ESRCH (exited) and EPERM alike: the cgroup.kill below reaches what is left.
            let _ = pidfd.send(nix::sys::signal::Signal::SIGKILL);
        }
        self.kill.fire()
    }

    /// Signal 0 through each pidfd: the permission and existence checks a kill's
    /// signal starts with, nothing sent. A watch runs it so that the kill's first system
    /// call finds its code warm (see the hot path's rehearsal). How many processes exist.
    pub(crate) fn rehearse(&self) -> usize {
        self.pidfds.iter().filter(|fd| fd.exists()).count()
    }

    /// After [`KillSwitch::fire`]: raises the killed processes' threads to nice -20, so
    /// that their exits, which free their memory, get the CPU first. How many threads.
    pub(crate) fn hasten_exit(&self) -> usize {
        self.pidfds.iter().map(|fd| fd.hasten_exit()).sum()
    }

    /// After [`KillSwitch::fire`]: frees the memory of the killed processes now. Returns
    /// how many were reaped (0 where the kernel lacks process_mrelease).
    pub(crate) fn release_memory(&self) -> usize {
        self.pidfds.iter().filter(|fd| fd.release_memory()).count()
    }
}

/// pidfds of the processes listed in `dir/cgroup.procs` and its children's.
fn open_pidfds(dir: &std::path::Path) -> Vec<PidFd> {
    let mut dirs = vec![dir.to_path_buf()];
    if let Ok(entries) = std::fs::read_dir(dir) {
        dirs.extend(
            entries
                .flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| e.path()),
        );
    }
    let listed = |dir: &std::path::Path| -> Vec<libc::pid_t> {
        std::fs::read_to_string(dir.join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    };
    let mut fds = Vec::new();
    for dir in dirs {
        let opened: Vec<PidFd> = listed(&dir)
            .into_iter()
            .take(MAX_PIDFDS.saturating_sub(fds.len()))
            .filter_map(|pid| PidFd::open(pid).ok().flatten())
            .collect();
        // A listed process may have exited and its pid gone to a process elsewhere
        // before it was opened. Listed again after the opening while its pidfd's process
        // still lives, the pid is that process's: it is in this cgroup.
        let again = listed(&dir);
        fds.extend(
            opened
                .into_iter()
                .filter(|fd| again.contains(&fd.pid()) && fd.exists()),
        );
    }
    fds
}

impl KillSwitch {
    /// Opens pidfds of the processes the pod holds now, for [`KillSwitch::release_memory`]
    /// (a switch kept from an earlier arming knew the processes of then: a container
    /// started or restarted since is not among them).
    pub(crate) fn refresh_processes(&mut self) {
        if let Some(dir) = self.path.parent() {
            self.pidfds = open_pidfds(dir);
        }
    }

    /// Whether its processes may not be the pod's any more: none known, or one exited.
    pub(crate) fn processes_stale(&self) -> bool {
        self.pidfds.is_empty() || self.pidfds.iter().any(|fd| !fd.exists())
    }
}

/// Carries out evictions.
pub(crate) trait PodKiller: Send + Sync {
    /// Marks the pod evicted (never restarted, never evicted twice), sends SIGTERM, then
    /// SIGKILL after the decision's grace period, and resolves once the pod is gone or
    /// the kill timeout ran out. Called again for a pod whose earlier kill failed, it
    /// kills what is left.
    fn evict(&self, decision: &EvictionDecision) -> BoxFuture<EvictionOutcome>;

    /// A prepared kill of this running pod, for the hot path; `None` where the runtime
    /// has none (no cgroup.kill here, or no such pod).
    fn kill_switch(&self, _pod_key: &str) -> Option<KillSwitch> {
        None
    }

    /// How many processes the pod's cgroups hold now; `None` where the runtime cannot
    /// tell. The eviction loop asks before it books an eviction done: a pod whose
    /// processes are still there is not evicted, whatever an attempt answered.
    fn processes_left(&self, _pod_key: &str) -> Option<usize> {
        None
    }
}

/// Node-level reclaim (the kubelet's container and image garbage collection on the
/// eviction path).
pub(crate) trait NodeReclaim: Send + Sync {
    /// Frees `resource` on the filesystem of `signal` and reports how much. Blocking: it
    /// deletes files; the loop calls it on a blocking thread.
    fn reclaim(&self, resource: Resource, signal: Signal) -> ReclaimResult;
}

/// Hears the node conditions after every synchronize.
pub(crate) trait ConditionsSink: Send + Sync {
    fn conditions_changed(&self, conditions: &[NodeConditionType]);
}

/// One port of each kind.
#[derive(Clone)]
pub struct Ports {
    pub(crate) pods: Arc<dyn ActivePods>,
    pub(crate) killer: Arc<dyn PodKiller>,
    pub(crate) reclaim: Arc<dyn NodeReclaim>,
    pub(crate) conditions: Arc<dyn ConditionsSink>,
}

impl Ports {
    /// Every port served by one runtime.
    pub(crate) fn of<R>(runtime: Arc<R>) -> Ports
    where
        R: ActivePods + PodKiller + NodeReclaim + ConditionsSink + 'static,
    {
        Ports {
            pods: runtime.clone(),
            killer: runtime.clone(),
            reclaim: runtime.clone(),
            conditions: runtime,
        }
    }

    /// No pods here: the decision chain still runs (thresholds, conditions), nothing is
    /// ever evicted or reclaimed.
    pub fn none() -> Ports {
        Ports::of(Arc::new(NoPods))
    }
}

/// A node without pods.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct NoPods;

impl ActivePods for NoPods {
    fn active_pods(&self, _needs: StatsNeeds) -> Vec<PodWithStats> {
        Vec::new()
    }
}

impl PodKiller for NoPods {
    fn evict(&self, _decision: &EvictionDecision) -> BoxFuture<EvictionOutcome> {
        Box::pin(async { EvictionOutcome::AlreadyGone })
    }
}

impl NodeReclaim for NoPods {
    fn reclaim(&self, _resource: Resource, _signal: Signal) -> ReclaimResult {
        ReclaimResult::default()
    }
}

impl ConditionsSink for NoPods {
    fn conditions_changed(&self, _conditions: &[NodeConditionType]) {}
}
