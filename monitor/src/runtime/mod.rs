//! The agent's own pod runtime: pods from manifest files (as the kubelet runs static
//! pods), each container a process in the QoS cgroup hierarchy, with restart policies,
//! admission, eviction and adoption across agent restarts.
//!
//! Unlike kubelet static pods, manifests here are ordinary, evictable pods: a pod is
//! critical only by priority (≥ 2 000 000 000) or by declaring itself a static/mirror pod
//! through the kubelet's annotations. There are no images: a container's `command` is an
//! executable on this host. Init containers are not run.
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;

use crate::events::EventReason;
use crate::observe::CgroupLayout;
use crate::policy::eviction::{EvictionDecision, ReclaimResult};
use crate::policy::signal::Signal;
use crate::policy::stats::{ContainerStats, PodStats, PodWithStats};
use crate::policy::types::{NodeConditionType, Resource};
use crate::state::SharedState;

mod adopt;
pub mod cgroups;
pub mod cleanup;
pub(crate) mod container;
pub mod cri;
mod exit_status;
pub mod inherited;
pub(crate) mod kubelet_pods;
mod lifecycle;
pub(crate) mod logs;
pub(crate) mod manifests;
pub mod port;
mod reclaim;
pub mod scope;
mod shared;
pub mod store;
mod sys;

pub use lifecycle::has_cap_sys_resource;
pub(crate) use shared::RuntimeConfig;

use cgroups::{CgroupTree, PodCgroup};
use port::{
    ActivePods, BoxFuture, ConditionsSink, EvictionOutcome, KillSwitch, NodeReclaim, PodKiller,
    StatsNeeds,
};
use shared::{Inner, Shared};
use store::{PodRecord, StateStore};

/// The runtime. Cheap to clone; every clone drives the same pods.
#[derive(Clone)]
pub(crate) struct LocalRuntime {
    shared: Arc<Shared>,
    /// The supervisor's inputs until [`LocalRuntime::run_pods`] starts it.
    pending: Arc<Mutex<Option<Supervisor>>>,
}

type Supervisor = (
    mpsc::UnboundedReceiver<shared::Exit>,
    mpsc::UnboundedReceiver<()>,
);

#[derive(Debug, thiserror::Error)]
pub(crate) enum RuntimeError {
    #[error(transparent)]
    Cgroup(#[from] cgroups::CgroupError),
    #[error(transparent)]
    Store(#[from] store::StoreError),
    #[error(transparent)]
    Cri(#[from] cri::CriError),
}

impl LocalRuntime {
    /// Creates the cgroup hierarchy, adopts the pods of an earlier run, and starts the
    /// supervisor (manifest watching, restarts). Must run inside a tokio runtime.
    pub(crate) fn start(
        config: RuntimeConfig,
        layout: &CgroupLayout,
        state: SharedState,
    ) -> Result<Self, RuntimeError> {
        let tree = CgroupTree::new(layout, &config.cgroup_root)?;
        tree.ensure_qos_hierarchy(config.pods_memory_limit)?;
        let store = StateStore::open(&config.state_dir)?;
        let cri = match &config.cri_socket {
            Some(socket) => {
                let ownership = cri::Ownership::for_agent(
                    &config.cgroup_root,
                    &config.state_dir,
                    &config.log_dir,
                );
                let (cri, warning) =
                    cri::CriRuntime::new(socket, &config.state_dir, config.image_gc, ownership)?;
                if let Some(warning) = warning {
                    state.event(EventReason::ImageRecordsUnreadable, "node", warning);
                }
                Some(Arc::new(cri))
            }
            None => None,
        };
        let (exits, exits_rx) = mpsc::unbounded_channel();
        let (reconcile, reconcile_rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            config,
            tree,
            store,
            state,
            inner: Mutex::new(Inner {
                pods: BTreeMap::new(),
                conditions: Vec::new(),
                reported_errors: BTreeMap::new(),
                unmanaged: BTreeMap::new(),
            }),
            exits,
            reconcile,
            on_change: std::sync::OnceLock::new(),
            cri,
        });
        adopt::adopt(&shared);
        Ok(LocalRuntime {
            shared,
            pending: Arc::new(Mutex::new(Some((exits_rx, reconcile_rx)))),
        })
    }

    /// Starts the supervisor: it starts the manifests' pods, restarts crashed containers
    /// and follows the manifest directory. The agent calls it once its event sources are
    /// up, so no pod runs before the agent can protect the node from it. Pods adopted
    /// from an earlier run keep running meanwhile. Later calls do nothing.
    /// The tasks go under `tasks`' watch: the supervisor's end stops the agent (pods would
    /// never start or restart again), the image collector's is reported.
    pub(crate) fn run_pods(&self, tasks: &crate::tasks::TaskAdder) {
        use crate::tasks::Role;
        let pending = self
            .pending
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        if let Some((exits_rx, reconcile_rx)) = pending {
            tasks.add(
                "pods supervisor",
                Role::Critical,
                tokio::spawn(lifecycle::supervise(
                    self.shared.clone(),
                    exits_rx,
                    reconcile_rx,
                )),
            );
            tasks.add(
                "manifest link follower",
                Role::Helper,
                tokio::spawn(follow_manifest_links(self.shared.clone())),
            );
            if self.shared.cri.is_some() {
                tasks.add(
                    "image and container collector",
                    Role::Helper,
                    tokio::spawn(reclaim::collect_images_periodically(self.shared.clone())),
                );
            }
        }
    }

    /// The container runtime's name and version ("containerd 1.6.20, CRI v1"), or `None`
    /// on the process runtime. An unreachable runtime is an error.
    pub(crate) async fn runtime_version(&self) -> Result<Option<String>, cri::CriError> {
        let Some(cri) = &self.shared.cri else {
            return Ok(None);
        };
        let v = cri.client.version().await?;
        Ok(Some(format!(
            "{} {}, CRI {}",
            v.runtime_name, v.runtime_version, v.runtime_api_version
        )))
    }

    /// The mount point of the container runtime's image filesystem (`None` on the process
    /// runtime, or when the runtime does not say).
    pub(crate) async fn image_filesystem(&self) -> Option<std::path::PathBuf> {
        let cri = self.shared.cri.as_ref()?;
        cri::image_fs(cri).await.ok().map(|(mount, _, _)| mount)
    }

    /// The pods root relative to the memory hierarchy (the allocatableMemory.available
    /// signal reads it).
    pub(crate) fn pods_cgroup(&self) -> String {
        self.shared.tree.pods_root_relative()
    }

    /// Evicts a pod now: marks it Failed/Evicted, a `DisruptionTarget` for a threshold
    /// eviction (persisted first, so it is never evicted twice nor restarted), then kills
    /// it (SIGTERM, SIGKILL after the grace period) and removes its cgroups. Every
    /// node-pressure eviction comes here, the hot path's kills booked after the fact too.
    pub(crate) async fn evict(&self, decision: &EvictionDecision) -> EvictionOutcome {
        let condition = crate::policy::condition::eviction_condition(
            decision,
            Some(crate::state::now_rfc3339()),
        );
        lifecycle::evict(
            &self.shared,
            &decision.pod_key,
            decision.grace_period_seconds,
            EventReason::Evicted,
            &decision.message,
            condition,
            decision.kill_timeout,
        )
        .await
    }

    /// Calls `changed` whenever the pods change (started, exited, evicted, stopped): the
    /// agent synchronizes then, so that the hot path's victim is ranked among the pods
    /// running now. Set once; later calls are ignored.
    pub(crate) fn on_pods_changed(&self, changed: impl Fn() + Send + Sync + 'static) {
        let _ = self.shared.on_change.set(Box::new(changed));
    }
}

impl ActivePods for LocalRuntime {
    /// The pods are listed under the runtime's lock; their stats are read after it is
    /// released, so starting, stopping and the API never wait on a pass over every pod.
    fn active_pods(&self, needs: StatsNeeds) -> Vec<PodWithStats> {
        let shared = &self.shared;
        let listed: Vec<(PodRecord, PodCgroup)> = {
            let inner = shared.lock();
            inner
                .pods
                .values()
                .filter(|p| !p.stopping() && !p.record.phase.is_terminal())
                .filter_map(|p| Some((p.record.clone(), p.cgroup.clone()?)))
                .collect()
        };
        let pods = listed
            .into_iter()
            .map(|(record, cgroup)| {
                let stats = pod_stats(shared, &record, &cgroup, needs);
                let mut pod = record.pod;
                // Shared with the record, not copied: only a record whose spec does not
                // carry its uid yet (one written by an older agent) gets a copy that does.
                if pod.metadata.uid != record.uid {
                    Arc::make_mut(&mut pod).metadata.uid = record.uid;
                }
                PodWithStats { stats, pod }
            })
            .collect();
        shared.tree.sweep_open_files();
        pods
    }

    fn memory_cgroups(&self) -> Vec<(Arc<crate::policy::pod::Pod>, std::path::PathBuf)> {
        let inner = self.shared.lock();
        inner
            .pods
            .values()
            .filter(|p| !p.stopping() && !p.record.phase.is_terminal())
            .filter_map(|p| {
                let cgroup = p.cgroup.as_ref()?;
                Some((
                    p.record.pod.clone(),
                    self.shared.tree.pod_memory_dir(cgroup),
                ))
            })
            .collect()
    }

    fn add_container_memory(&self, pod: &mut PodWithStats) {
        let uid = &pod.pod.metadata.uid;
        let listed = {
            let inner = self.shared.lock();
            inner
                .pods
                .get(uid)
                .and_then(|p| Some((p.record.containers.clone(), p.cgroup.clone()?)))
        };
        let Some((containers, cgroup)) = listed else {
            return;
        };
        for stats in &mut pod.stats.containers {
            if let Some(container) = containers.iter().find(|c| c.name == stats.name) {
                stats.memory_working_set_bytes =
                    container_working_set(&self.shared, &cgroup, container);
            }
        }
    }
}

impl ConditionsSink for LocalRuntime {
    fn conditions_changed(&self, conditions: &[NodeConditionType]) {
        self.shared.lock().conditions = conditions.to_vec();
    }
}

impl PodKiller for LocalRuntime {
    fn evict(&self, decision: &EvictionDecision) -> BoxFuture<EvictionOutcome> {
        let runtime = self.clone();
        let decision = decision.clone();
        Box::pin(async move { LocalRuntime::evict(&runtime, &decision).await })
    }

    fn kill_switch(&self, pod_key: &str) -> Option<KillSwitch> {
        let (cgroup, evicting) = {
            let inner = self.shared.lock();
            let live = inner.pods.values().find(|p| {
                p.record.pod.key() == pod_key && !p.stopping() && !p.record.phase.is_terminal()
            })?;
            (live.cgroup.clone()?, live.hot_killed.clone())
        };
        let path = self.shared.tree.kill_file(&cgroup)?;
        let switch = KillSwitch::open(pod_key, &path).ok()?;
        Some(
            switch
                .with_memory(self.shared.tree.pod_memory_reader(&cgroup))
                .with_evicting_flag(evicting),
        )
    }

    fn processes_left(&self, pod_key: &str) -> Option<usize> {
        Some(lifecycle::processes_left(&self.shared, pod_key))
    }
}

/// A container's working set now. A container without a process has no memory to report;
/// a container of a container runtime has its cgroup named by its id.
fn container_working_set(
    shared: &Shared,
    cgroup: &PodCgroup,
    container: &store::ContainerRecord,
) -> Option<u64> {
    container.pid?;
    match (&shared.cri, &container.container_id) {
        (Some(_), Some(id)) => shared.tree.runtime_container_working_set(cgroup, id),
        _ => shared.tree.container_working_set(cgroup, &container.name),
    }
}

/// Fresh stats of one pod: memory from its cgroup; and, as `needs` asks, disk from its
/// logs and containers' writable layers, and the task count from the pids controller.
fn pod_stats(
    shared: &Shared,
    record: &PodRecord,
    cgroup: &PodCgroup,
    needs: StatsNeeds,
) -> PodStats {
    let memory = shared.tree.pod_working_set(cgroup).ok();
    let pod = &record.pod;
    let disk = needs.disk
        || (needs.local_storage_limits
            && crate::policy::eviction::local_storage::has_local_storage_limit(pod));
    let pod_dir = disk.then(|| {
        logs::pod_dir(
            &shared.config.log_dir,
            pod.namespace(),
            &pod.metadata.name,
            &record.uid,
        )
    });
    let containers: Vec<ContainerStats> = record
        .containers
        .iter()
        .map(|c| {
            let (logs_used_bytes, logs_inodes_used) = match &pod_dir {
                Some(pod_dir) => {
                    let (bytes, inodes) = logs::usage(&pod_dir.join(&c.name));
                    (Some(bytes), Some(inodes))
                }
                None => (None, None),
            };
            // On a container runtime the container's writable layer counts too.
            let (rootfs_used_bytes, rootfs_inodes_used) = match (disk, &shared.cri, c.pid) {
                (true, Some(_), Some(pid)) if pid > 0 => cri::writable_layer(pid)
                    .map(|layer| logs::usage(&layer))
                    .map_or((None, None), |(bytes, inodes)| (Some(bytes), Some(inodes))),
                _ => (None, None),
            };
            ContainerStats {
                name: c.name.clone(),
                memory_working_set_bytes: None,
                rootfs_used_bytes,
                rootfs_inodes_used,
                logs_used_bytes,
                logs_inodes_used,
            }
        })
        .collect();
    let ephemeral = disk.then(|| {
        containers
            .iter()
            .map(|c| c.logs_used_bytes.unwrap_or(0) + c.rootfs_used_bytes.unwrap_or(0))
            .sum()
    });
    PodStats {
        memory_working_set_bytes: memory,
        containers,
        volumes: Vec::new(),
        ephemeral_storage_used_bytes: ephemeral,
        process_count: needs.processes.then(|| shared.tree.task_count(cgroup)),
    }
}

impl NodeReclaim for LocalRuntime {
    /// The kubelet's container (and, on a container runtime, image) garbage collection:
    /// see [`reclaim::reclaim`].
    fn reclaim(&self, resource: Resource, signal: Signal) -> ReclaimResult {
        reclaim::reclaim(&self.shared, resource, signal)
    }
}

/// Symbolic links among the manifests: the directory's watch does not see the files they
/// lead to change, so those are looked at every [`manifests::LINK_CHECK`] and the
/// supervisor reads the directory again when one did (changed, appeared, went).
async fn follow_manifest_links(shared: Arc<Shared>) {
    let dir = shared.config.manifest_dir.clone();
    let mut seen = manifests::LinkTargets::read(&dir);
    let mut tick = tokio::time::interval(manifests::LINK_CHECK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        let now = manifests::LinkTargets::read(&dir);
        if now != seen {
            seen = now;
            if shared.reconcile.send(()).is_err() {
                return;
            }
        }
    }
}
