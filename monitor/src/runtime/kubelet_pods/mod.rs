//! Pods a kubelet runs (`monitor.podList`, with `runPods: false`): the agent neither
//! starts nor owns them. They come from a PodList file that something else keeps up to
//! date (`kubectl get pods -o json`, the kubelet's own `/pods`), read again whenever it
//! changes, and each is found by its UID under the kubelet's cgroup tree
//! ([`naming::KubeletTree`]). A listed pod without a cgroup, and a pod cgroup no listed
//! pod claims, are reported once each, never guessed at.
//!
//! Evicting such a pod kills it through its cgroup (SIGTERM, the grace period, SIGKILL;
//! `cgroup.kill` where the kernel has it), as oomd does: only the API server can mark it
//! evicted, so the kubelet sees its containers exit and restarts them by the pod's
//! restart policy. Nothing else here writes to a cgroup: no limits, no `memory.high`, no
//! cleanup (the cgroups are the kubelet's to remove), and no garbage collection (the
//! kubelet collects its own images and containers).
pub(crate) mod naming;

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal as UnixSignal;

use self::naming::KubeletTree;
use super::cgroups::{CgroupTree, Controller, PodCgroup};
use super::port::{
    ActivePods, BoxFuture, ConditionsSink, EvictionOutcome, KillSwitch, NodeReclaim, PodKiller,
    StatsNeeds,
};
use crate::events::EventReason;
use crate::observe::CgroupLayout;
use crate::policy::eviction::{EvictionDecision, ReclaimResult};
use crate::policy::pod::{Pod, parse_pod_list};
use crate::policy::signal::Signal;
use crate::policy::stats::{ContainerStats, PodStats, PodWithStats};
use crate::policy::types::{NodeConditionType, QosClass, Resource};
use crate::state::SharedState;

/// A pod list larger than this is refused (a thousand pods in JSON take a few MiB).
const MAX_POD_LIST_BYTES: u64 = 64 << 20;

/// How often an eviction looks whether the pod's processes are gone.
const EXIT_POLL: Duration = Duration::from_millis(20);

/// The pods of a pod list, on the kubelet's cgroup tree.
#[derive(Clone)]
pub(crate) struct KubeletPods {
    inner: Arc<Inner>,
}

struct Inner {
    file: PathBuf,
    naming: KubeletTree,
    /// Read and kill only: nothing here creates or removes a cgroup.
    tree: CgroupTree,
    state: SharedState,
    listed: Mutex<Listed>,
}

/// The pod list as last read, and what was already reported about it.
#[derive(Default)]
struct Listed {
    /// The file's version when it was read ([`super::manifests::file_version`]).
    stamp: Option<[i64; 6]>,
    pods: Vec<Arc<Pod>>,
    /// Pod key -> its cgroup, as found at the last pass.
    cgroups: HashMap<String, PodCgroup>,
    /// Pod key -> raised by the hot path's kill switch as it fires: the eviction it books
    /// then waits for the processes to go instead of signalling them again.
    hot_killed: HashMap<String, Arc<AtomicBool>>,
    /// The last error read from the file (said once until it changes).
    error: Option<String>,
    /// Pods already reported without a cgroup, and cgroups already reported without a
    /// pod (each said once, again after it was resolved and came back).
    missing: BTreeSet<String>,
    unlisted: BTreeSet<String>,
}

impl KubeletPods {
    pub(crate) fn new(
        file: &Path,
        naming: KubeletTree,
        layout: &CgroupLayout,
        state: SharedState,
    ) -> anyhow::Result<KubeletPods> {
        let tree = CgroupTree::new(layout, "")?;
        let pods = KubeletPods {
            inner: Arc::new(Inner {
                file: file.to_path_buf(),
                naming,
                tree,
                state,
                listed: Mutex::new(Listed::default()),
            }),
        };
        // A pod list that cannot be read at start is said at once; the agent runs on
        // and reads it again when it changes.
        pods.inner.refresh(&mut pods.inner.lock());
        Ok(pods)
    }

    /// The kubelet's pods cgroup (node allocatable), relative to the memory root.
    pub(crate) fn pods_cgroup(&self) -> String {
        self.inner.naming.pods_cgroup()
    }

    /// How many pods the list holds now.
    pub(crate) fn listed(&self) -> usize {
        self.inner.lock().pods.len()
    }
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, Listed> {
        self.listed.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reads the file again if it changed since the last read.
    fn refresh(&self, listed: &mut Listed) {
        let stamp = super::manifests::file_version(&self.file);
        if stamp.is_some() && stamp == listed.stamp {
            return;
        }
        match read_pod_list(&self.file) {
            Ok(pods) => {
                tracing::info!(
                    file = %self.file.display(),
                    pods = pods.len(),
                    "pod list read"
                );
                listed.pods = pods.into_iter().map(Arc::new).collect();
                listed.stamp = stamp;
                listed.error = None;
            }
            Err(err) => {
                // Kept: the pods as last read. Read again at every pass until it reads.
                listed.stamp = None;
                if listed.error.as_deref() != Some(err.as_str()) {
                    self.state.event(
                        EventReason::PodListUnreadable,
                        "node",
                        format!(
                            "{err}; the {} pod(s) read before stay in use",
                            listed.pods.len()
                        ),
                    );
                    listed.error = Some(err);
                }
            }
        }
    }

    /// The listed pods that run (not Succeeded or Failed), each with its cgroup; says
    /// which listed pods have none and which pod cgroups no pod claims.
    fn running(&self, listed: &mut Listed) -> Vec<(Arc<Pod>, PodCgroup)> {
        let memory = |relative: &str| self.tree.dir(Controller::Memory, relative);
        let mut found = Vec::new();
        let mut missing = BTreeSet::new();
        for pod in &listed.pods {
            if matches!(pod.status.phase.as_deref(), Some("Succeeded" | "Failed")) {
                continue;
            }
            let uid = &pod.metadata.uid;
            let qos = pod.qos_class();
            let relative = self.naming.pod(qos, uid);
            if memory(&relative).is_some_and(|dir| dir.is_dir()) {
                found.push((
                    pod.clone(),
                    PodCgroup {
                        uid: uid.clone(),
                        qos,
                        relative,
                    },
                ));
            } else if pod.status.phase.as_deref() != Some("Pending") {
                // A pending pod's cgroup may not be made yet: only a running one is
                // missing it.
                missing.insert(pod.key());
            }
        }
        for key in missing.difference(&listed.missing) {
            self.state.event(
                EventReason::PodCgroupMissing,
                key,
                "listed, but no cgroup of it is under the kubelet's tree: not ranked, not protected",
            );
        }
        listed.missing = missing;
        let claimed: BTreeSet<&str> = found.iter().map(|(_, c)| c.uid.as_str()).collect();
        let listed_uids: BTreeSet<&str> = listed
            .pods
            .iter()
            .map(|p| p.metadata.uid.as_str())
            .collect();
        let unlisted: BTreeSet<String> = [
            QosClass::Guaranteed,
            QosClass::Burstable,
            QosClass::BestEffort,
        ]
        .into_iter()
        .filter_map(|qos| memory(&self.naming.tier(qos)))
        .flat_map(|dir| std::fs::read_dir(dir).into_iter().flatten().flatten())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| self.naming.uid_of(&e.file_name().to_string_lossy()))
        .filter(|uid| !claimed.contains(uid.as_str()) && !listed_uids.contains(uid.as_str()))
        .collect();
        for uid in unlisted.difference(&listed.unlisted) {
            self.state.event(
                EventReason::UnlistedPodCgroup,
                "node",
                format!("a pod cgroup of uid {uid} is under the kubelet's tree, but no listed pod has that uid: left alone"),
            );
        }
        listed.unlisted = unlisted;
        listed.cgroups = found
            .iter()
            .map(|(pod, cgroup)| (pod.key(), cgroup.clone()))
            .collect();
        let Listed {
            cgroups,
            hot_killed,
            ..
        } = listed;
        hot_killed.retain(|key, _| cgroups.contains_key(key));
        found
    }

    fn cgroup_of(&self, pod_key: &str) -> Option<PodCgroup> {
        self.lock().cgroups.get(pod_key).cloned()
    }

    /// SIGTERM, up to the grace period for the processes to go, SIGKILL, and up to the
    /// kill timeout for them to be gone.
    fn evict(&self, decision: &EvictionDecision) -> EvictionOutcome {
        let Some(cgroup) = self.cgroup_of(&decision.pod_key) else {
            return EvictionOutcome::AlreadyGone;
        };
        if self.tree.pids(&cgroup).is_empty() {
            return EvictionOutcome::AlreadyGone;
        }
        let started = Instant::now();
        let hot_killed = self
            .lock()
            .hot_killed
            .get(&decision.pod_key)
            .is_some_and(|flag| flag.swap(false, Ordering::SeqCst));
        if hot_killed && self.wait_gone(&cgroup, started + decision.kill_timeout.max(EXIT_POLL)) {
            return EvictionOutcome::Evicted;
        }
        if decision.grace_period_seconds > 0 && !hot_killed {
            if let Err(err) = self.tree.signal(&cgroup, UnixSignal::SIGTERM) {
                tracing::warn!(pod = %decision.pod_key, "SIGTERM: {err}");
            }
            let grace = Duration::from_secs(decision.grace_period_seconds.unsigned_abs());
            if self.wait_gone(&cgroup, started + grace.min(decision.kill_timeout)) {
                return EvictionOutcome::Evicted;
            }
        }
        if let Err(err) = self.tree.signal(&cgroup, UnixSignal::SIGKILL) {
            return EvictionOutcome::KillFailed(err.to_string());
        }
        let deadline = started + decision.kill_timeout.max(EXIT_POLL);
        if self.wait_gone(&cgroup, deadline) {
            EvictionOutcome::Evicted
        } else {
            EvictionOutcome::TimedOut {
                alive: self.tree.pids(&cgroup).len(),
            }
        }
    }

    /// Whether the pod's cgroups hold no process by `deadline`.
    fn wait_gone(&self, cgroup: &PodCgroup, deadline: Instant) -> bool {
        loop {
            if self.tree.pids(cgroup).is_empty() {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(EXIT_POLL);
        }
    }
}

impl ActivePods for KubeletPods {
    fn active_pods(&self, needs: StatsNeeds) -> Vec<PodWithStats> {
        let running = {
            let mut listed = self.inner.lock();
            self.inner.refresh(&mut listed);
            self.inner.running(&mut listed)
        };
        let pods = running
            .into_iter()
            .map(|(pod, cgroup)| {
                let stats = PodStats {
                    memory_working_set_bytes: self.inner.tree.pod_working_set(&cgroup).ok(),
                    containers: pod
                        .spec
                        .containers
                        .iter()
                        .map(|c| ContainerStats {
                            name: c.name.clone(),
                            ..ContainerStats::default()
                        })
                        .collect(),
                    process_count: needs.processes.then(|| self.inner.tree.task_count(&cgroup)),
                    ..PodStats::default()
                };
                PodWithStats { pod, stats }
            })
            .collect();
        self.inner.tree.sweep_open_files();
        pods
    }

    fn memory_cgroups(&self) -> Vec<(Arc<Pod>, std::path::PathBuf)> {
        let mut listed = self.inner.lock();
        self.inner.refresh(&mut listed);
        self.inner
            .running(&mut listed)
            .into_iter()
            .map(|(pod, cgroup)| (pod, self.inner.tree.pod_memory_dir(&cgroup)))
            .collect()
    }
}

impl PodKiller for KubeletPods {
    fn evict(&self, decision: &EvictionDecision) -> BoxFuture<EvictionOutcome> {
        let inner = self.inner.clone();
        let decision = decision.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || inner.evict(&decision))
                .await
                .unwrap_or_else(|err| EvictionOutcome::KillFailed(err.to_string()))
        })
    }

    fn kill_switch(&self, pod_key: &str) -> Option<KillSwitch> {
        let cgroup = self.inner.cgroup_of(pod_key)?;
        let path = self.inner.tree.kill_file(&cgroup)?;
        let switch = KillSwitch::open(pod_key, &path).ok()?;
        let flag = self
            .inner
            .lock()
            .hot_killed
            .entry(pod_key.to_string())
            .or_default()
            .clone();
        Some(
            switch
                .with_memory(self.inner.tree.pod_memory_reader(&cgroup))
                .with_evicting_flag(flag),
        )
    }

    fn processes_left(&self, pod_key: &str) -> Option<usize> {
        let cgroup = self.inner.cgroup_of(pod_key)?;
        Some(self.inner.tree.pids(&cgroup).len())
    }
}

impl NodeReclaim for KubeletPods {
    /// The kubelet collects its own dead containers and images.
    fn reclaim(&self, _resource: Resource, _signal: Signal) -> ReclaimResult {
        ReclaimResult::default()
    }
}

impl ConditionsSink for KubeletPods {
    /// The kubelet admits its own pods.
    fn conditions_changed(&self, _conditions: &[NodeConditionType]) {}
}

/// The pods of a PodList file; the error names the file (and, from the parser, the
/// field or the line).
fn read_pod_list(path: &Path) -> Result<Vec<Pod>, String> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut text = String::new();
    file.take(MAX_POD_LIST_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if text.len() as u64 > MAX_POD_LIST_BYTES {
        return Err(format!(
            "{}: larger than {} MiB",
            path.display(),
            MAX_POD_LIST_BYTES >> 20
        ));
    }
    let pods = parse_pod_list(&text, &path.display().to_string()).map_err(|e| e.to_string())?;
    // The uid becomes part of a cgroup path, which the agent kills through: anything but
    // a Kubernetes UID (letters, digits, '-') could lead out of the kubelet's tree.
    if let Some(pod) = pods.iter().find(|p| !naming::is_uid(&p.metadata.uid)) {
        return Err(format!(
            "{}: pod {}: metadata.uid {:?} is not a UID of letters, digits and '-' (its cgroup is named by it)",
            path.display(),
            pod.key(),
            pod.metadata.uid
        ));
    }
    Ok(pods)
}

#[cfg(test)]
mod tests;
