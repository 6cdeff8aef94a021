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

use crate::policy::eviction::{EvictionDecision, ReclaimResult};
use crate::policy::signal::Signal;
use crate::policy::stats::PodWithStats;
use crate::policy::types::{NodeConditionType, Resource};

/// A boxed future a port returns.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// How an eviction ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EvictionOutcome {
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
    pub fn name(&self) -> &'static str {
        match self {
            EvictionOutcome::Evicted => "evicted",
            EvictionOutcome::AlreadyGone => "already_gone",
            EvictionOutcome::TimedOut { .. } => "timed_out",
            EvictionOutcome::KillFailed(_) => "kill_failed",
        }
    }

    /// The pod is not running any more: nothing left to retry.
    pub fn is_final(&self) -> bool {
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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatsNeeds {
    /// Process counts: only the pid.available ranking reads them.
    pub processes: bool,
    /// Disk usage of logs and volumes: disk signals and local storage limits.
    pub disk: bool,
    /// Each container's memory: the memory eviction message names containers.
    pub container_memory: bool,
}

impl StatsNeeds {
    /// Everything.
    pub const ALL: StatsNeeds = StatsNeeds {
        processes: true,
        disk: true,
        container_memory: true,
    };
}

/// The pods that may be evicted, with their usage.
pub trait ActivePods: Send + Sync {
    /// Running pods, not already being stopped, with the stats in `needs` read NOW.
    fn active_pods(&self, needs: StatsNeeds) -> Vec<PodWithStats>;
}

/// A pod's kill, prepared in advance: an open `cgroup.kill` of the pod's cgroup (cgroup v2,
/// or the unified hierarchy beside a v1 memory controller; Linux 5.14+). Writing "1" kills
/// every process of the cgroup's subtree at once, forks included, and cannot reach a
/// process outside it (no pid is read, so no pid can be reused under us).
#[derive(Debug)]
pub struct KillSwitch {
    pub pod_key: String,
    pub path: std::path::PathBuf,
    file: std::fs::File,
}

impl KillSwitch {
    /// Opens `path` (a `cgroup.kill` file) for writing.
    pub fn open(pod_key: &str, path: &std::path::Path) -> std::io::Result<KillSwitch> {
        let file = std::fs::OpenOptions::new().write(true).open(path)?;
        Ok(KillSwitch {
            pod_key: pod_key.to_string(),
            path: path.to_path_buf(),
            file,
        })
    }

    /// Kills the pod: one write.
    pub fn fire(&self) -> std::io::Result<()> {
        use std::io::Write;
        (&self.file).write_all(b"1")
    }
}

/// Carries out evictions.
pub trait PodKiller: Send + Sync {
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
}

/// Node-level reclaim (the kubelet's container and image garbage collection on the
/// eviction path).
pub trait NodeReclaim: Send + Sync {
    /// Frees `resource` on the filesystem of `signal` and reports how much. Blocking: it
    /// deletes files; the loop calls it on a blocking thread.
    fn reclaim(&self, resource: Resource, signal: Signal) -> ReclaimResult;
}

/// Hears the node conditions after every synchronize.
pub trait ConditionsSink: Send + Sync {
    fn conditions_changed(&self, conditions: &[NodeConditionType]);
}

/// One port of each kind.
#[derive(Clone)]
pub struct Ports {
    pub pods: Arc<dyn ActivePods>,
    pub killer: Arc<dyn PodKiller>,
    pub reclaim: Arc<dyn NodeReclaim>,
    pub conditions: Arc<dyn ConditionsSink>,
}

impl Ports {
    /// Every port served by one runtime.
    pub fn of<R>(runtime: Arc<R>) -> Ports
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
pub struct NoPods;

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
