//! The cgroup values the kubelet derives from QoS: CPU shares (and their cgroup v2
//! weight), CFS quota, memory limits and pids limits for containers, pods and the
//! Burstable / BestEffort tier cgroups, and the `oom_score_adj` of every container.
//!
//! kubelet: pkg/kubelet/cm/helpers_linux.go (MilliCPUToShares, MilliCPUToQuota,
//! ResourceConfigForPod), pkg/kubelet/cm/qos_container_manager_linux.go (setCPUCgroupConfig,
//! setMemoryReserve), pkg/kubelet/kuberuntime/kuberuntime_container_linux.go
//! (calculateLinuxResources) and pkg/kubelet/qos/policy.go (GetContainerOOMScoreAdjust).
use super::memory_qos::{self, NodeMemoryQos};
use super::pod::{Container, Pod, ResourceList};
use super::types::QosClass;

/// Fewest CPU shares a cgroup gets (the kernel's minimum, `MinShares`).
pub const MIN_SHARES: u64 = 2;
/// Most CPU shares a cgroup gets (`MaxShares`, the kernel's maximum).
pub const MAX_SHARES: u64 = 262_144;
/// Shares for one whole CPU.
pub const SHARES_PER_CPU: u64 = 1024;
/// Default CFS period, 100 ms in µs (`QuotaPeriod`).
pub const QUOTA_PERIOD_US: u64 = 100_000;
/// Smallest CFS quota the kubelet writes, 1 ms in µs (`MinQuotaPeriod`).
pub const MIN_QUOTA_PERIOD_US: i64 = 1000;
/// Largest cgroup v2 `cpu.weight`.
pub const MAX_CPU_WEIGHT: u64 = 10_000;

/// `oom_score_adj` for the agent itself, as the kubelet gives itself (`KubeletOOMScoreAdj`).
pub const AGENT_OOM_SCORE_ADJ: i32 = -999;
/// `oom_score_adj` of Guaranteed (and node-critical) containers.
///
/// The project's seeds fix −998 (the kubelet's value up to 1.13 and the value its docs
/// long quoted). The current kubelet uses −997 (`guaranteedOOMScoreAdj`), which moves the
/// Burstable floor from 2 to 3; change this one constant to follow it.
pub const GUARANTEED_OOM_SCORE_ADJ: i32 = -998;
/// `oom_score_adj` of BestEffort containers: first to go.
pub const BEST_EFFORT_OOM_SCORE_ADJ: i32 = 1000;

/// Converts a CPU request in millicores to CFS shares, clamped to [2, 262144]
/// (kubelet: cm MilliCPUToShares; 0 gives the minimum, not the kernel's 1024 default).
pub fn milli_cpu_to_shares(milli_cpu: i64) -> u64 {
    if milli_cpu <= 0 {
        return MIN_SHARES;
    }
    let shares = (i128::from(milli_cpu) * i128::from(SHARES_PER_CPU)) / 1000;
    shares.clamp(i128::from(MIN_SHARES), i128::from(MAX_SHARES)) as u64
}

/// Maps cgroup v1 CPU shares to a cgroup v2 `cpu.weight` in [1, 10000] the way runc does
/// for the kubelet (libcontainer ConvertCPUSharesToCgroupV2Value): 0 means "unset".
pub fn cpu_shares_to_weight(shares: u64) -> u64 {
    if shares == 0 {
        return 0;
    }
    let shares = shares.clamp(MIN_SHARES, MAX_SHARES);
    1 + ((shares - MIN_SHARES) * (MAX_CPU_WEIGHT - 1)) / (MAX_SHARES - MIN_SHARES)
}

/// Converts a CPU limit in millicores to a CFS quota in µs for `period_us`, at least 1 ms;
/// 0 (no limit) gives 0 (kubelet: cm MilliCPUToQuota).
pub fn milli_cpu_to_quota(milli_cpu: i64, period_us: u64) -> i64 {
    if milli_cpu <= 0 {
        return 0;
    }
    let quota = (i128::from(milli_cpu) * i128::from(period_us)) / 1000;
    quota.clamp(i128::from(MIN_QUOTA_PERIOD_US), i128::from(i64::MAX)) as i64
}

/// The values written to one cgroup; `None` leaves the file alone (unlimited / inherited).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ResourceConfig {
    /// cgroup v1 `cpu.shares` (v2: see [`ResourceConfig::cpu_weight`]).
    pub cpu_shares: Option<u64>,
    /// CFS quota in µs; −1 means unlimited.
    pub cpu_quota: Option<i64>,
    /// CFS period in µs.
    pub cpu_period: Option<u64>,
    /// Memory limit in bytes.
    pub memory_limit: Option<i64>,
    pub pids_limit: Option<i64>,
    /// cgroup v2 `memory.high` in bytes (Memory QoS); never written on v1.
    pub memory_high: Option<i64>,
    /// cgroup v2 `memory.min` in bytes (Memory QoS); 0 is written, as a reset.
    pub memory_min: Option<i64>,
    /// cgroup v2 `memory.low` in bytes (Memory QoS); 0 is written, as a reset.
    pub memory_low: Option<i64>,
    /// cgroup v2 `memory.oom.group` = 1: the kernel's OOM killer, choosing a process of
    /// this cgroup, kills all of them (see [`CgroupOptions::oom_group`]); never on v1.
    pub memory_oom_group: bool,
}

impl ResourceConfig {
    /// The cgroup v2 `cpu.weight` equivalent of the shares.
    pub fn cpu_weight(&self) -> Option<u64> {
        self.cpu_shares.map(cpu_shares_to_weight)
    }
}

/// Node-level settings that shape the cgroups (the matching KubeletConfiguration keys).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CgroupOptions {
    /// `cpuCFSQuota`: enforce CPU limits with CFS quota (default true).
    pub enforce_cpu_limits: bool,
    /// `cpuCFSQuotaPeriod` in µs (default 100 ms).
    pub cpu_cfs_quota_period_us: u64,
    /// `podPidsLimit`: written to every pod cgroup when positive.
    pub pod_pids_limit: Option<i64>,
    /// Memory QoS (memory.high / memory.min / memory.low): `Some` only when the
    /// `MemoryQoS` feature gate is on and the hierarchy is cgroup v2, as the kubelet
    /// checks both (kuberuntime generateContainerResources, qos container manager
    /// UpdateCgroups).
    pub memory_qos: Option<NodeMemoryQos>,
    /// `memory.oom.group` = 1 on every container's cgroup, so that an OOM kill ends the
    /// whole container and not one of its processes: the kubelet's default on cgroup v2
    /// since 1.32 (kuberuntime generateLinuxContainerResources), off with
    /// `singleProcessOOMKill: true` and always off on v1.
    pub oom_group: bool,
}

impl Default for CgroupOptions {
    fn default() -> Self {
        CgroupOptions {
            enforce_cpu_limits: true,
            cpu_cfs_quota_period_us: QUOTA_PERIOD_US,
            pod_pids_limit: None,
            memory_qos: None,
            oom_group: false,
        }
    }
}

/// The pod-level cgroup (kubelet: cm ResourceConfigForPod plus the pod container manager's
/// pids limit). Guaranteed pods get shares, quota and memory limit; Burstable pods get
/// shares, and quota / memory limit only when every container (init containers
/// included) sets that limit; BestEffort pods get the minimum shares and nothing else.
///
/// With Memory QoS on, the pod's `memory.min` / `memory.low` follow its requests under the
/// reservation policy ([`memory_qos::pod_protection`]); the pod gets no `memory.high`
/// (KEP-2570: only containers are throttled, so one container's spike cannot throttle
/// its siblings).
pub fn pod_resource_config(pod: &Pod, options: &CgroupOptions) -> ResourceConfig {
    let mut config = pod_resource_config_without_memory_qos(pod, options);
    if let Some(node) = &options.memory_qos {
        let protection = memory_qos::pod_protection(pod, node.settings.reservation_policy);
        config.memory_min = Some(protection.min);
        config.memory_low = Some(protection.low);
    }
    config
}

fn pod_resource_config_without_memory_qos(pod: &Pod, options: &CgroupOptions) -> ResourceConfig {
    let period = options.cpu_cfs_quota_period_us;
    let cpu_shares = milli_cpu_to_shares(pod.requests("cpu").milli_value());
    let cpu_limit = pod.limits("cpu");
    let memory_limit = pod.limits("memory");
    let cpu_quota = if options.enforce_cpu_limits {
        milli_cpu_to_quota(cpu_limit.map_or(0, |q| q.milli_value()), period)
    } else {
        -1
    };
    let pids_limit = options.pod_pids_limit.filter(|limit| *limit > 0);
    match pod.qos_class() {
        QosClass::Guaranteed => ResourceConfig {
            cpu_shares: Some(cpu_shares),
            cpu_quota: Some(cpu_quota),
            cpu_period: Some(period),
            memory_limit: Some(memory_limit.map_or(0, |q| q.value())),
            pids_limit,
            ..ResourceConfig::default()
        },
        QosClass::Burstable => ResourceConfig {
            cpu_shares: Some(cpu_shares),
            cpu_quota: cpu_limit.map(|_| cpu_quota),
            cpu_period: cpu_limit.map(|_| period),
            memory_limit: memory_limit.map(|q| q.value()),
            pids_limit,
            ..ResourceConfig::default()
        },
        QosClass::BestEffort => ResourceConfig {
            cpu_shares: Some(MIN_SHARES),
            pids_limit,
            ..ResourceConfig::default()
        },
    }
}

/// A container's cgroup as the kubelet asks the runtime for it (kuberuntime
/// calculateLinuxResources): shares from the request (from the limit when only a limit
/// is set, as old clusters' pods may be), quota from the limit when CFS quota is
/// enforced, the memory limit when set. Pids are limited at the pod level only.
pub fn container_resource_config(container: &Container, options: &CgroupOptions) -> ResourceConfig {
    let resources = &container.resources;
    let cpu_limit = resources.limits.get("cpu").copied();
    let cpu_request = match (resources.requests.get("cpu"), cpu_limit) {
        (None, Some(limit)) => limit,
        (request, _) => request.copied().unwrap_or_default(),
    };
    let memory_limit = resources
        .limits
        .get("memory")
        .map(|q| q.value())
        .filter(|v| *v != 0);
    let period = options.cpu_cfs_quota_period_us;
    let cpu_quota = options
        .enforce_cpu_limits
        .then(|| milli_cpu_to_quota(cpu_limit.map_or(0, |q| q.milli_value()), period))
        .filter(|quota| *quota > 0);
    ResourceConfig {
        cpu_shares: Some(milli_cpu_to_shares(cpu_request.milli_value())),
        cpu_quota,
        cpu_period: cpu_quota.map(|_| period),
        memory_limit,
        pids_limit: None,
        memory_oom_group: options.oom_group,
        ..ResourceConfig::default()
    }
}

/// [`container_resource_config`] for a container of `pod`, with Memory QoS when
/// `options` has it: `memory.high` from the container's request and limit, and the
/// protection of the pod's class (kubelet: generateLinuxContainerResources, which puts
/// them in the CRI `unified` map).
pub fn pod_container_resource_config(
    pod: &Pod,
    container: &Container,
    options: &CgroupOptions,
) -> ResourceConfig {
    let mut config = container_resource_config(container, options);
    if let Some(node) = &options.memory_qos {
        let values = memory_qos::container_values(pod, container, node);
        config.memory_high = values.high;
        config.memory_min = Some(values.protection.min);
        config.memory_low = Some(values.protection.low);
    }
    config
}

/// The Burstable and BestEffort tier cgroups (the Guaranteed pods sit directly under the
/// pods cgroup, which has no tier settings of its own).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QosTierConfigs {
    pub burstable: ResourceConfig,
    pub best_effort: ResourceConfig,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QosError {
    #[error("qosReserved memory: {0}% is not a percentage in 0..=100")]
    ReservedPercent(i64),
}

/// The tier cgroups for the active pods (kubelet: qos container manager UpdateCgroups).
///
/// CPU: the Burstable tier's shares follow the sum of Burstable pods' CPU requests
/// (minimum 2); the BestEffort tier always has 2 shares (setCPUCgroupConfig).
///
/// Memory, only with `qosReserved` memory P% (setMemoryReserve), and only when the node's
/// allocatable memory is known and non-zero: Burstable limit = allocatable − P% of the
/// Guaranteed pods' memory requests; BestEffort limit = that − P% of the Burstable pods'
/// requests. A result at or below zero means the requests over-commit allocatable; it is
/// returned as computed and writers must refuse it.
///
/// Deviation: the kubelet first lowers each tier limit only as far as the tier's current
/// usage and retries later; that needs cgroup reads, so it is left to the caller.
pub fn qos_tier_configs(
    active_pods: &[Pod],
    node_allocatable: &ResourceList,
    qos_reserved_memory_percent: Option<i64>,
) -> Result<QosTierConfigs, QosError> {
    if let Some(percent) = qos_reserved_memory_percent.filter(|p| !(0..=100).contains(p)) {
        return Err(QosError::ReservedPercent(percent));
    }
    let mut burstable_cpu_milli: i64 = 0;
    let (mut guaranteed_memory, mut burstable_memory): (i64, i64) = (0, 0);
    for pod in active_pods {
        let memory = pod.requests("memory").value();
        match pod.qos_class() {
            QosClass::Guaranteed => guaranteed_memory = guaranteed_memory.saturating_add(memory),
            QosClass::Burstable => {
                burstable_memory = burstable_memory.saturating_add(memory);
                burstable_cpu_milli =
                    burstable_cpu_milli.saturating_add(pod.requests("cpu").milli_value());
            }
            QosClass::BestEffort => {}
        }
    }
    let mut configs = QosTierConfigs {
        burstable: ResourceConfig {
            cpu_shares: Some(milli_cpu_to_shares(burstable_cpu_milli)),
            ..ResourceConfig::default()
        },
        best_effort: ResourceConfig {
            cpu_shares: Some(MIN_SHARES),
            ..ResourceConfig::default()
        },
    };
    let allocatable = node_allocatable
        .get("memory")
        .map(|q| q.value())
        .filter(|v| *v != 0);
    if let (Some(percent), Some(allocatable)) = (qos_reserved_memory_percent, allocatable) {
        let reserve = |requests: i64| requests.saturating_mul(percent) / 100;
        let burstable_limit = allocatable.saturating_sub(reserve(guaranteed_memory));
        let best_effort_limit = burstable_limit.saturating_sub(reserve(burstable_memory));
        configs.burstable.memory_limit = Some(burstable_limit);
        configs.best_effort.memory_limit = Some(best_effort_limit);
    }
    Ok(configs)
}

/// The `oom_score_adj` for a container of `pod` on a node with `memory_capacity` bytes
/// (kubelet: qos GetContainerOOMScoreAdjust).
///
/// Node-critical pods and Guaranteed pods get [`GUARANTEED_OOM_SCORE_ADJ`]; BestEffort
/// pods 1000; Burstable containers `1000 − 1000 × memory request / capacity`, raised to
/// `1000 + GUARANTEED_OOM_SCORE_ADJ` (so a Burstable container always scores above a
/// Guaranteed one) and lowered from 1000 to 999 (so it scores below BestEffort). A
/// sidecar (restartable init container) scores no higher than the pod's regular container
/// with the smallest memory request, so it is not killed before the work it serves.
///
/// Deviation: a capacity of 0 (unknown) divides by zero in the kubelet; here the request
/// counts as no share of memory, which gives 999.
pub fn oom_score_adj(pod: &Pod, container: &Container, memory_capacity: i64) -> i32 {
    if pod.is_node_critical() {
        return GUARANTEED_OOM_SCORE_ADJ;
    }
    match pod.qos_class() {
        QosClass::Guaranteed => return GUARANTEED_OOM_SCORE_ADJ,
        QosClass::BestEffort => return BEST_EFFORT_OOM_SCORE_ADJ,
        QosClass::Burstable => {}
    }
    let score_for = |request: i64| -> i64 {
        if memory_capacity <= 0 {
            return 1000;
        }
        let share = (1000 * i128::from(request.max(0))) / i128::from(memory_capacity);
        (1000 - share).clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
    };
    let memory_request =
        |c: &Container| c.resources.requests.get("memory").map_or(0, |q| q.value());
    let mut score = score_for(memory_request(container));
    let is_sidecar = container.is_restartable_init()
        && pod
            .spec
            .init_containers
            .iter()
            .any(|init| init.name == container.name);
    let smallest_regular = pod.spec.containers.iter().map(memory_request).min();
    if let Some(smallest) = smallest_regular.filter(|_| is_sidecar) {
        score = score.min(score_for(smallest));
    }
    let floor = i64::from(1000 + GUARANTEED_OOM_SCORE_ADJ);
    if score < floor {
        return floor as i32;
    }
    if score >= i64::from(BEST_EFFORT_OOM_SCORE_ADJ) {
        return BEST_EFFORT_OOM_SCORE_ADJ - 1;
    }
    score as i32
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;
    use crate::pod::PodSpec;
    use crate::testing::{container, list};

    fn pod(name: &str, containers: Vec<Container>) -> Pod {
        let mut pod = Pod {
            spec: PodSpec {
                containers,
                ..Default::default()
            },
            ..Default::default()
        };
        pod.metadata.name = name.into();
        pod
    }

    #[rstest]
    #[case::zero(0, 2)]
    #[case::negative(-5, 2)]
    #[case::one_milli(1, 2)]
    #[case::just_above_min(3, 3)]
    #[case::hundred_milli(100, 102)]
    #[case::one_cpu(1000, 1024)]
    #[case::at_max(256_000, 262_144)]
    #[case::above_max(1_000_000, 262_144)]
    #[case::huge(i64::MAX, 262_144)]
    fn shares(#[case] milli: i64, #[case] expected: u64) {
        assert_eq!(milli_cpu_to_shares(milli), expected);
    }

    #[rstest]
    #[case::unset(0, 0)]
    #[case::min(2, 1)]
    #[case::default_1024(1024, 39)]
    #[case::one_cpu_of_shares(102, 4)]
    #[case::max(262_144, 10_000)]
    #[case::above_max(1_000_000, 10_000)]
    fn weight(#[case] shares: u64, #[case] expected: u64) {
        assert_eq!(cpu_shares_to_weight(shares), expected);
    }

    #[rstest]
    #[case::no_limit(0, 100_000, 0)]
    #[case::tiny_limit_floors_at_1ms(5, 100_000, 1000)]
    #[case::ten_milli(10, 100_000, 1000)]
    #[case::half_cpu(500, 100_000, 50_000)]
    #[case::two_cpus(2000, 100_000, 200_000)]
    #[case::custom_period(500, 50_000, 25_000)]
    #[case::huge(i64::MAX, 100_000, i64::MAX)]
    fn quota(#[case] milli: i64, #[case] period: u64, #[case] expected: i64) {
        assert_eq!(milli_cpu_to_quota(milli, period), expected);
    }

    const GI: i64 = 1 << 30;

    #[rstest]
    #[case::guaranteed(
        vec![container("a", "cpu=500m,memory=1Gi", "cpu=500m,memory=1Gi"), container("b", "cpu=250m,memory=1Gi", "cpu=250m,memory=1Gi")],
        ResourceConfig { cpu_shares: Some(768), cpu_quota: Some(75_000), cpu_period: Some(100_000), memory_limit: Some(2 * GI), pids_limit: None, ..ResourceConfig::default() })]
    #[case::burstable_all_limits(
        vec![container("a", "cpu=100m,memory=512Mi", "cpu=1,memory=1Gi")],
        ResourceConfig { cpu_shares: Some(102), cpu_quota: Some(100_000), cpu_period: Some(100_000), memory_limit: Some(GI), pids_limit: None, ..ResourceConfig::default() })]
    #[case::burstable_one_container_without_limits(
        vec![container("a", "cpu=100m,memory=512Mi", "cpu=1,memory=1Gi"), container("b", "cpu=100m", "")],
        ResourceConfig { cpu_shares: Some(204), ..ResourceConfig::default() })]
    #[case::burstable_memory_limit_only(
        vec![container("a", "cpu=100m,memory=512Mi", "memory=1Gi")],
        ResourceConfig { cpu_shares: Some(102), memory_limit: Some(GI), ..ResourceConfig::default() })]
    #[case::burstable_without_cpu_request(
        vec![container("a", "memory=512Mi", "")],
        ResourceConfig { cpu_shares: Some(2), ..ResourceConfig::default() })]
    #[case::best_effort(vec![container("a", "", "")], ResourceConfig { cpu_shares: Some(2), ..ResourceConfig::default() })]
    fn pod_config(#[case] containers: Vec<Container>, #[case] expected: ResourceConfig) {
        assert_eq!(
            pod_resource_config(&pod("p", containers), &CgroupOptions::default()),
            expected
        );
    }

    #[test]
    fn pod_config_counts_init_containers() {
        let mut p = pod(
            "p",
            vec![container("a", "cpu=100m,memory=512Mi", "cpu=1,memory=1Gi")],
        );
        p.spec.init_containers = vec![container("i", "cpu=2", "")];
        let config = pod_resource_config(&p, &CgroupOptions::default());
        assert_eq!(
            config.cpu_shares,
            Some(2048),
            "init container's request dominates"
        );
        assert_eq!(
            config.cpu_quota, None,
            "an init container without a cpu limit unbounds the pod"
        );
        assert_eq!(config.memory_limit, None, "nor memory");
    }

    #[test]
    fn pod_config_options() {
        let guaranteed = pod(
            "p",
            vec![container("a", "cpu=1,memory=1Gi", "cpu=1,memory=1Gi")],
        );
        let options = CgroupOptions {
            enforce_cpu_limits: false,
            cpu_cfs_quota_period_us: 10_000,
            pod_pids_limit: Some(1024),
            memory_qos: None,
            oom_group: false,
        };
        let config = pod_resource_config(&guaranteed, &options);
        assert_eq!(config.cpu_quota, Some(-1), "quota disabled means unlimited");
        assert_eq!(config.cpu_period, Some(10_000));
        assert_eq!(config.pids_limit, Some(1024));
        let best_effort = pod("b", vec![container("a", "", "")]);
        let options = CgroupOptions {
            pod_pids_limit: Some(-1),
            ..CgroupOptions::default()
        };
        assert_eq!(
            pod_resource_config(&best_effort, &options).pids_limit,
            None,
            "-1 means unlimited"
        );
        assert_eq!(
            pod_resource_config(&best_effort, &options).cpu_weight(),
            Some(1)
        );
    }

    #[rstest]
    #[case::request_and_limit("cpu=250m,memory=100Mi", "cpu=500m,memory=200Mi",
        ResourceConfig { cpu_shares: Some(256), cpu_quota: Some(50_000), cpu_period: Some(100_000), memory_limit: Some(200 << 20), pids_limit: None, ..ResourceConfig::default() })]
    #[case::limit_only_defaults_shares("", "cpu=1",
        ResourceConfig { cpu_shares: Some(1024), cpu_quota: Some(100_000), cpu_period: Some(100_000), ..ResourceConfig::default() })]
    #[case::nothing("", "", ResourceConfig { cpu_shares: Some(2), ..ResourceConfig::default() })]
    #[case::zero_memory_limit_is_none("", "memory=0", ResourceConfig { cpu_shares: Some(2), ..ResourceConfig::default() })]
    fn container_config(
        #[case] requests: &str,
        #[case] limits: &str,
        #[case] expected: ResourceConfig,
    ) {
        assert_eq!(
            container_resource_config(&container("c", requests, limits), &CgroupOptions::default()),
            expected
        );
    }

    #[test]
    fn container_config_without_cfs_quota() {
        let options = CgroupOptions {
            enforce_cpu_limits: false,
            ..CgroupOptions::default()
        };
        let config = container_resource_config(&container("c", "", "cpu=1"), &options);
        assert_eq!((config.cpu_quota, config.cpu_period), (None, None));
    }

    fn tier_pods() -> Vec<Pod> {
        vec![
            pod(
                "g",
                vec![container("a", "cpu=1,memory=4Gi", "cpu=1,memory=4Gi")],
            ),
            pod(
                "b1",
                vec![container("a", "cpu=500m,memory=2Gi", "memory=3Gi")],
            ),
            pod("b2", vec![container("a", "cpu=250m,memory=1Gi", "")]),
            pod("be", vec![container("a", "", "")]),
        ]
    }

    #[rstest]
    #[case::no_reserve(None, None, None)]
    #[case::zero_percent(Some(0), Some(16 * GI), Some(16 * GI))]
    #[case::half(Some(50), Some(14 * GI), Some(14 * GI - 3 * GI / 2))]
    #[case::full(Some(100), Some(12 * GI), Some(9 * GI))]
    fn tier_memory(
        #[case] percent: Option<i64>,
        #[case] burstable: Option<i64>,
        #[case] best_effort: Option<i64>,
    ) {
        let configs = qos_tier_configs(&tier_pods(), &list("memory=16Gi,cpu=8"), percent)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(configs.burstable.memory_limit, burstable, "burstable");
        assert_eq!(configs.best_effort.memory_limit, best_effort, "besteffort");
    }

    #[test]
    fn tier_cpu_shares() {
        let configs = qos_tier_configs(&tier_pods(), &ResourceList::new(), None)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            configs.burstable.cpu_shares,
            Some(768),
            "750m of burstable requests"
        );
        assert_eq!(configs.best_effort.cpu_shares, Some(2));
        let none =
            qos_tier_configs(&[], &ResourceList::new(), None).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            none.burstable.cpu_shares,
            Some(2),
            "no burstable pods: the minimum"
        );
    }

    #[rstest]
    #[case::unknown_allocatable(ResourceList::new())]
    #[case::zero_allocatable(list("memory=0"))]
    fn tier_memory_needs_allocatable(#[case] allocatable: ResourceList) {
        let configs = qos_tier_configs(&tier_pods(), &allocatable, Some(100))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (
                configs.burstable.memory_limit,
                configs.best_effort.memory_limit
            ),
            (None, None)
        );
    }

    #[rstest]
    #[case(-1)]
    #[case(101)]
    fn tier_rejects_bad_percent(#[case] percent: i64) {
        assert_eq!(
            qos_tier_configs(&[], &ResourceList::new(), Some(percent)),
            Err(QosError::ReservedPercent(percent))
        );
    }

    const CAPACITY: i64 = 10 * GI;

    #[rstest]
    #[case::guaranteed(vec![container("a", "cpu=1,memory=1Gi", "cpu=1,memory=1Gi")], -998)]
    #[case::best_effort(vec![container("a", "", "")], 1000)]
    #[case::burstable_10_percent(vec![container("a", "memory=1Gi", "")], 900)]
    #[case::burstable_half(vec![container("a", "memory=5Gi", "")], 500)]
    #[case::burstable_no_memory_request(vec![container("a", "cpu=100m", "")], 999)]
    #[case::burstable_tiny_request(vec![container("a", "memory=1Mi", "")], 999)]
    #[case::burstable_whole_node(vec![container("a", "memory=10Gi", "")], 2)]
    #[case::burstable_above_node(vec![container("a", "memory=20Gi", "")], 2)]
    #[case::burstable_just_under_floor(vec![container("a", "memory=10239Mi", "")], 2)]
    fn oom_score(#[case] containers: Vec<Container>, #[case] expected: i32) {
        let p = pod("p", containers);
        assert_eq!(oom_score_adj(&p, &p.spec.containers[0], CAPACITY), expected);
    }

    #[test]
    fn oom_score_node_critical_and_other_critical() {
        let mut p = pod("p", vec![container("a", "", "")]);
        p.spec.priority = Some(2_000_001_000);
        p.spec.priority_class_name = Some("system-node-critical".into());
        assert_eq!(
            oom_score_adj(&p, &p.spec.containers[0], CAPACITY),
            GUARANTEED_OOM_SCORE_ADJ,
            "node critical"
        );
        p.spec.priority_class_name = Some("system-cluster-critical".into());
        assert_eq!(
            oom_score_adj(&p, &p.spec.containers[0], CAPACITY),
            1000,
            "cluster critical follows QoS"
        );
    }

    #[test]
    fn oom_score_sidecar_not_above_smallest_regular_container() {
        let mut p = pod(
            "p",
            vec![
                container("a", "memory=2Gi", ""),
                container("b", "memory=1Gi", ""),
            ],
        );
        let mut sidecar = container("s", "memory=100Mi", "");
        sidecar.restart_policy = Some("Always".into());
        p.spec.init_containers = vec![sidecar.clone()];
        assert_eq!(
            oom_score_adj(&p, &sidecar, CAPACITY),
            900,
            "capped at container b's score"
        );
        let plain_init = container("s", "memory=100Mi", "");
        p.spec.init_containers = vec![plain_init.clone()];
        assert_eq!(
            oom_score_adj(&p, &plain_init, CAPACITY),
            991,
            "an ordinary init container keeps its own score"
        );
    }

    #[test]
    fn oom_score_unknown_capacity() {
        let p = pod("p", vec![container("a", "memory=1Gi", "")]);
        assert_eq!(oom_score_adj(&p, &p.spec.containers[0], 0), 999);
    }

    fn with_memory_qos(policy: memory_qos::MemoryReservationPolicy) -> CgroupOptions {
        CgroupOptions {
            memory_qos: Some(NodeMemoryQos {
                settings: memory_qos::MemoryQos {
                    throttling_factor: 0.8,
                    reservation_policy: policy,
                },
                allocatable_memory: 4 * GI,
            }),
            ..CgroupOptions::default()
        }
    }

    #[test]
    fn memory_qos_off_leaves_the_v2_memory_files_alone() {
        let p = pod("p", vec![container("a", "memory=1Gi", "memory=2Gi")]);
        let options = CgroupOptions::default();
        let pod_config = pod_resource_config(&p, &options);
        let container_config = pod_container_resource_config(&p, &p.spec.containers[0], &options);
        for config in [pod_config, container_config] {
            assert_eq!(
                (config.memory_high, config.memory_min, config.memory_low),
                (None, None, None)
            );
        }
        assert_eq!(
            container_config,
            container_resource_config(&p.spec.containers[0], &options)
        );
    }

    #[test]
    fn memory_qos_on_sets_the_pod_protection_and_the_container_values() {
        use memory_qos::MemoryReservationPolicy::{None as NoReservation, TieredReservation};
        let burstable = pod(
            "b",
            vec![
                container("a", "memory=1Gi", "memory=2Gi"),
                container("b", "memory=1Gi", ""),
            ],
        );
        let options = with_memory_qos(TieredReservation);
        let config = pod_resource_config(&burstable, &options);
        assert_eq!(
            (config.memory_high, config.memory_min, config.memory_low),
            (None, Some(0), Some(2 * GI)),
            "pods are protected, never throttled"
        );
        let a = pod_container_resource_config(&burstable, &burstable.spec.containers[0], &options);
        // 1Gi + 0.8 × (2Gi − 1Gi), a whole number of pages already.
        let high_a = GI + (GI as f64 * 0.8) as i64 / 4096 * 4096;
        assert_eq!(
            (a.memory_limit, a.memory_high, a.memory_min, a.memory_low),
            (Some(2 * GI), Some(high_a), Some(0), Some(GI))
        );
        let b = pod_container_resource_config(&burstable, &burstable.spec.containers[1], &options);
        // No limit: node allocatable (4Gi) stands in.
        let high_b = GI + ((3 * GI) as f64 * 0.8) as i64 / 4096 * 4096;
        assert_eq!(b.memory_high, Some(high_b));
        let guaranteed = pod(
            "g",
            vec![container("a", "cpu=1,memory=1Gi", "cpu=1,memory=1Gi")],
        );
        let g =
            pod_container_resource_config(&guaranteed, &guaranteed.spec.containers[0], &options);
        assert_eq!(
            (g.memory_high, g.memory_min, g.memory_low),
            (None, Some(GI), Some(0))
        );
        let none = with_memory_qos(NoReservation);
        let g = pod_container_resource_config(&guaranteed, &guaranteed.spec.containers[0], &none);
        assert_eq!((g.memory_min, g.memory_low), (Some(0), Some(0)));
        let config = pod_resource_config(&guaranteed, &none);
        assert_eq!((config.memory_min, config.memory_low), (Some(0), Some(0)));
    }
}
