//! The whole agent on a node: the pod runtime (when pods run here), the event sources and
//! the synchronize loop with the eviction policy, all sharing one [`SharedState`].
use std::path::PathBuf;

use anyhow::Context;

use crate::agent::Agent;
use crate::config::LoadedConfig;
use crate::config::agent::RuntimeKind;
use crate::observe::{CgroupLayout, NodeMemory};
use crate::policy::memory_qos::NodeMemoryQos;
use crate::policy::pod::ResourceList;
use crate::policy::qos::{AGENT_OOM_SCORE_ADJ, CgroupOptions};
use crate::policy::quantity::Quantity;
use crate::runtime::port::Ports;
use crate::runtime::{LocalRuntime, RuntimeConfig};
use crate::state::SharedState;

/// A running node agent.
pub struct NodeAgent {
    pub agent: Agent,
    /// The pod runtime, when pods run here: kept for as long as the agent runs.
    _runtime: Option<LocalRuntime>,
    pub state: SharedState,
    pub(crate) api: crate::api::ApiServer,
}

impl NodeAgent {
    /// Stops the API and the agent. Pods keep running (a restarted agent adopts them).
    pub async fn shutdown(self) {
        self.api.shutdown().await;
        self.agent.shutdown().await;
    }
}

/// Node allocatable for admission: memory is the pods cgroup's limit when the node is
/// bounded, else capacity minus reservations; cpu likewise from the online CPUs.
fn node_allocatable(loaded: &LoadedConfig, memory: &NodeMemory) -> ResourceList {
    let kubelet = &loaded.kubelet;
    let bytes = |b: u64| i64::try_from(b).unwrap_or(i64::MAX);
    let memory = match loaded.agent.settings.pods_memory_limit {
        Some(limit) => limit.value(),
        None => {
            kubelet.allocatable_memory(bytes(memory.capacity_bytes), bytes(memory.hugepages_bytes))
        }
    };
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get() as i64)
        .unwrap_or(1);
    let reserved_cpu = |m: &std::collections::BTreeMap<String, Quantity>| {
        m.get("cpu").map_or(0, |q| q.milli_value())
    };
    let cpu_milli = (cpus * 1000
        - reserved_cpu(&kubelet.system_reserved)
        - reserved_cpu(&kubelet.kube_reserved))
    .max(0);
    ResourceList::from([
        ("memory".to_string(), Quantity::from_units(memory)),
        ("cpu".to_string(), Quantity::from_milli(cpu_milli)),
        ("pods".to_string(), Quantity::from_units(kubelet.max_pods)),
    ])
}

/// Memory QoS for the pods' cgroups: only with the `MemoryQoS` feature gate on and on
/// cgroup v2, as the kubelet (kuberuntime generateContainerResources and the qos
/// container manager check both); `memory.high` of a container without a memory limit
/// follows the node's allocatable memory (kubelet: getNodeAllocatable).
fn memory_qos_on_node(
    loaded: &LoadedConfig,
    version: crate::observe::CgroupVersion,
    allocatable: &ResourceList,
) -> Option<NodeMemoryQos> {
    if !loaded
        .kubelet
        .feature_gate(crate::config::kubelet::MEMORY_QOS)
    {
        return None;
    }
    if version != crate::observe::CgroupVersion::V2 {
        tracing::info!(
            "the MemoryQoS feature gate is on, but cgroup v1 has no memory.high / memory.min / memory.low: not applied"
        );
        return None;
    }
    Some(NodeMemoryQos {
        settings: loaded.kubelet.memory_qos,
        allocatable_memory: allocatable.get("memory").map_or(0, |q| q.value()),
    })
}

/// Room a hard `memory.available` threshold should leave above the kernel's free-page
/// reserve: about 15 ms of an allocation at 2 GiB/s.
const RESERVE_RUNWAY_BYTES: i64 = 32 << 20;

/// The warning for a hard `memory.available` threshold of `threshold` bytes on a kernel
/// that keeps `min_free` bytes free (`vm.min_free_kbytes`), if it leaves too little room.
///
/// The kubelet's signal is capacity less the working set, in effect MemFree plus the
/// inactive page cache. An allocation that would take free memory below the zones' min
/// watermarks (their sum is `vm.min_free_kbytes`) reclaims, and with nothing left to
/// reclaim it invokes the OOM killer: the signal does not go much below `min_free`
/// before the kernel kills. A threshold at or near it is met a few MiB before the OOM
/// killer fires, or never (measured in a 2 GiB cgroup v2 VM whose transparent huge pages
/// raise the reserve to 45 MiB: with `memory.available<50Mi` the kernel killed first in
/// most trials). earlyoom's MemAvailable subtracts the reserve; the kubelet's signal
/// does not, and the agent keeps the kubelet's signal.
pub(crate) fn reserve_runway_warning(threshold: i64, min_free: i64) -> Option<String> {
    let runway = threshold - min_free;
    (runway < RESERVE_RUNWAY_BYTES).then(|| {
        let mib = |b: i64| b as f64 / f64::from(1u32 << 20);
        format!(
            "evictionHard memory.available<{:.0}Mi leaves {:.0} MiB above the kernel's free-page reserve (vm.min_free_kbytes = {:.0} MiB): the signal (free memory plus inactive page cache) reaches the reserve just before the kernel's OOM killer fires, so a fast allocation can meet the OOM killer before this threshold; set it at least {:.0}Mi",
            mib(threshold),
            mib(runway),
            mib(min_free),
            mib(min_free + RESERVE_RUNWAY_BYTES).ceil()
        )
    })
}

/// Warns, once at start, for each hard `memory.available` threshold too close to the
/// kernel's free-page reserve (see [`reserve_runway_warning`]).
fn warn_of_thresholds_near_the_reserve(loaded: &LoadedConfig, capacity: i64) {
    let path = "/proc/sys/vm/min_free_kbytes";
    let min_free = match std::fs::read_to_string(path) {
        Ok(text) => match text.trim().parse::<i64>() {
            Ok(kib) => kib.saturating_mul(1024),
            Err(_) => {
                tracing::debug!(
                    "{path}: not a number ({:?}): reserve check skipped",
                    text.trim()
                );
                return;
            }
        },
        Err(err) => {
            tracing::debug!("{path}: {err}: reserve check skipped");
            return;
        }
    };
    for threshold in loaded
        .kubelet
        .eviction
        .thresholds
        .iter()
        .filter(|t| t.signal == crate::policy::signal::Signal::MemoryAvailable && t.is_hard())
    {
        if let Some(warning) = reserve_runway_warning(threshold.quantity(capacity), min_free) {
            tracing::warn!("{warning}");
        }
    }
}

/// Linux's MCL_ONFAULT (since 4.4): lock pages as they are touched, not all at once.
const MCL_ONFAULT: libc::c_int = 4;

/// Keeps the agent's memory resident: under the pressure it exists to handle, a page of
/// the agent swapped out or its code dropped from the page cache would stall the kill
/// path on I/O. Locked as touched (MCL_ONFAULT), so reserved but unused memory (thread
/// stacks) is not made resident.
fn lock_memory() {
    // SAFETY: mlockall takes flags only.
    if unsafe { libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE | MCL_ONFAULT) } == 0 {
        tracing::info!("agent memory locked as it is touched (mlockall)");
    } else {
        tracing::warn!(
            "cannot lock the agent's memory (mlockall): {}; it may be paged out under pressure",
            std::io::Error::last_os_error()
        );
    }
}

/// Starts everything, sharing `state` between the runtime, the loop and the API. Must run
/// inside a tokio runtime, as root.
pub async fn start(mut loaded: LoadedConfig, state: SharedState) -> anyhow::Result<NodeAgent> {
    // The limits as the agent was started with them, before anything below raises one:
    // containers start with these.
    crate::runtime::inherited::OriginalLimits::record();
    // The agent must outlive every pod under memory pressure.
    if let Err(err) = std::fs::write("/proc/self/oom_score_adj", AGENT_OOM_SCORE_ADJ.to_string()) {
        tracing::warn!("cannot set the agent's oom_score_adj to {AGENT_OOM_SCORE_ADJ}: {err}");
    }
    lock_memory();
    // Every pod's memory files stay open between synchronizes: a thousand pods need a few
    // thousand descriptors, more than the usual soft limit of 1024.
    match crate::observe::open_files::raise_open_file_limit() {
        Ok(limit) => tracing::debug!("open file limit {limit}"),
        Err(err) => tracing::warn!("cannot raise the open file limit: {err}"),
    }
    let layout = CgroupLayout::given_or_detected(loaded.agent.layout.as_ref())
        .context("detecting the cgroup layout")?;
    loaded.agent.layout = Some(layout.clone());
    let mut settings = loaded.agent.settings.clone();
    state.lock().housekeeping = loaded.kubelet.housekeeping_interval;
    // The API first: when another agent already serves this socket, stop here, before
    // touching its pods or cgroups.
    let metrics_addr =
        match &settings.metrics_address {
            Some(text) => Some(text.parse::<std::net::SocketAddr>().with_context(|| {
                format!("monitor.metricsAddress: {text:?} is not an address:port")
            })?),
            None => None,
        };
    let api = crate::api::serve(state.clone(), &settings.socket, metrics_addr)
        .await
        .context("starting the API")?;
    // The pods' cgroup tree, once the socket is ours: under systemd the scope it
    // delegates to the agent, registered at the first start.
    if settings.run_pods {
        settings.cgroup_root = crate::runtime::scope::pods_root(&settings, &layout, true);
        loaded.agent.settings.cgroup_root = settings.cgroup_root.clone();
    }
    // Every decision from now on is kept in the state directory; one that cannot be
    // opened costs the record, not the agent.
    if let Err(err) = state.open_decision_record(&settings.state_dir) {
        tracing::warn!(
            "decision record in {}: {err}; decisions are kept in memory only",
            settings.state_dir.display()
        );
    }
    let runtime = if settings.run_pods {
        let node_memory = crate::observe::Observer::new(
            crate::observe::CgroupReader::new(layout.version, layout.memory_root.clone()),
            Default::default(),
        )
        .node_memory()
        .context("reading the node's memory capacity")?;
        let memory_capacity = node_memory.capacity_bytes as i64;
        let allocatable = node_allocatable(&loaded, &node_memory);
        warn_of_thresholds_near_the_reserve(&loaded, memory_capacity);
        let config = RuntimeConfig {
            manifest_dir: PathBuf::from(
                loaded
                    .kubelet
                    .static_pod_path
                    .clone()
                    .unwrap_or_else(|| "/etc/monitor/pods".into()),
            ),
            log_dir: settings.pod_log_dir.clone(),
            state_dir: settings.state_dir.clone(),
            cgroup_root: settings.cgroup_root.clone(),
            pods_memory_limit: settings.pods_memory_limit.map(|q| q.value()),
            node_allocatable: allocatable.clone(),
            memory_capacity,
            cgroup_options: CgroupOptions {
                pod_pids_limit: loaded.kubelet.pod_pids_limit,
                memory_qos: memory_qos_on_node(&loaded, layout.version, &allocatable),
                // The kubelet's default on cgroup v2: an OOM kill ends the whole container.
                oom_group: layout.version == crate::observe::CgroupVersion::V2
                    && !loaded.kubelet.single_process_oom_kill.unwrap_or(false),
                ..CgroupOptions::default()
            },
            qos_reserved_memory_percent: loaded
                .kubelet
                .qos_reserved
                .get("memory")
                .map(|f| (f * 100.0).round() as i64),
            restart_backoff: settings.restart_backoff,
            cri_socket: match settings.runtime {
                RuntimeKind::Process => None,
                RuntimeKind::Cri => {
                    let endpoint = loaded.kubelet.container_runtime_endpoint.as_deref().context(
                        "monitor.runtime is cri, but the KubeletConfiguration sets no containerRuntimeEndpoint",
                    )?;
                    Some(
                        crate::runtime::cri::socket_of_endpoint(endpoint)
                            .context("KubeletConfiguration containerRuntimeEndpoint")?,
                    )
                }
            },
            image_gc: loaded.kubelet.image_gc,
            container_gc: loaded.kubelet.container_gc,
            image_gc_period: settings.image_gc_period,
        };
        let runtime = LocalRuntime::start(config, &layout, state.clone())
            .context("starting the pod runtime")?;
        loaded.agent.settings.pods_cgroup = Some(runtime.pods_cgroup());
        // A container runtime that does not answer is a configuration error: say so now
        // rather than fail every pod start.
        if let Some(version) = runtime.runtime_version().await.context(
            "reaching the container runtime (KubeletConfiguration containerRuntimeEndpoint)",
        )? {
            tracing::info!("pods run on {version}");
        }
        // On a container runtime the imagefs signals watch the filesystem that holds its
        // images, unless the configuration names one.
        if loaded.agent.settings.imagefs_path.is_none()
            && let Some(mount) = runtime.image_filesystem().await
        {
            tracing::info!(
                "image filesystem of the container runtime: {}",
                mount.display()
            );
            loaded.agent.settings.imagefs_path = Some(mount);
        }
        Some(runtime)
    } else {
        None
    };
    // Without pods of its own, the agent may protect the pods a kubelet runs here.
    let kubelet_pods = match (&runtime, &settings.pod_list) {
        (None, Some(list)) => {
            // The kubelet's tree is where the agent kills: it must stay under the mounts.
            let root = &loaded.kubelet.cgroup_root;
            anyhow::ensure!(
                !root.split('/').any(|c| c == "." || c == ".."),
                "KubeletConfiguration cgroupRoot {root:?}: '.' and '..' are not allowed (it names the kubelet's cgroup tree, where the agent kills)"
            );
            let naming = crate::runtime::kubelet_pods::naming::KubeletTree::new(
                loaded.kubelet.cgroup_driver,
                &loaded.kubelet.cgroup_root,
            );
            let pods = crate::runtime::kubelet_pods::KubeletPods::new(
                &list.file,
                naming,
                &layout,
                state.clone(),
            )
            .context("monitor.podList")?;
            if loaded.agent.settings.pods_cgroup.is_none() {
                loaded.agent.settings.pods_cgroup = Some(pods.pods_cgroup());
            }
            tracing::info!(
                file = %list.file.display(),
                pods = pods.listed(),
                driver = loaded.kubelet.cgroup_driver.as_str(),
                pods_cgroup = %pods.pods_cgroup(),
                shadow = settings.shadow,
                "protecting the pods a kubelet runs, as listed in the pod list"
            );
            Some(pods)
        }
        _ => None,
    };
    let ports = match (&runtime, kubelet_pods) {
        (Some(runtime), _) => Ports::of(std::sync::Arc::new(runtime.clone())),
        (None, Some(pods)) => Ports::of(std::sync::Arc::new(pods)),
        (None, None) => Ports::none(),
    };
    let agent = Agent::start(
        loaded.agent.clone(),
        loaded.kubelet.clone(),
        ports,
        state.clone(),
    )?;
    if let Some(runtime) = &runtime {
        let wakes = agent.wake_sender();
        runtime.on_pods_changed(move || {
            wakes.wake(
                crate::notify::WakeSource::Request,
                crate::notify::WakeDetail::None,
            )
        });
        // The sources are up: now the pods may start.
        runtime.run_pods(&agent.task_adder());
        agent.request_sync();
    }
    Ok(NodeAgent {
        agent,
        _runtime: runtime,
        state,
        api,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: i64 = 1 << 20;

    #[test]
    fn a_threshold_near_the_kernels_reserve_is_warned_of_with_the_least_safe_value() {
        // The cgroup v2 VM's: a 45 MiB reserve (transparent huge pages) and a 50Mi threshold.
        let warning = reserve_runway_warning(50 * MIB, 45 * MIB).expect("a warning");
        assert!(
            warning.contains("memory.available<50Mi leaves 5 MiB"),
            "{warning}"
        );
        assert!(warning.contains("vm.min_free_kbytes = 45 MiB"), "{warning}");
        assert!(warning.ends_with("set it at least 77Mi"), "{warning}");
        // Below the reserve the runway is negative: still a warning, never a panic.
        assert!(reserve_runway_warning(10 * MIB, 45 * MIB).is_some());
    }

    #[test]
    fn a_threshold_well_above_the_reserve_is_not_warned_of() {
        assert_eq!(reserve_runway_warning(200 * MIB, 45 * MIB), None);
        assert_eq!(reserve_runway_warning(77 * MIB, 45 * MIB), None);
        assert!(reserve_runway_warning(77 * MIB - 1, 45 * MIB).is_some());
    }
}
