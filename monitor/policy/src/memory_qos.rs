//! Memory QoS on cgroup v2 (KEP-2570, the kubelet's `MemoryQoS` feature gate, alpha and
//! off by default through 1.36): `memory.high` throttles a container before its limit,
//! `memory.min` / `memory.low` protect requests from reclaim.
//!
//! kubelet sources mirrored:
//! - pkg/kubelet/kuberuntime/kuberuntime_container_linux.go generateLinuxContainerResources:
//!   the container's `memory.high` and, with `memoryReservationPolicy: TieredReservation`,
//!   its `memory.min` (Guaranteed) or `memory.low` (Burstable), sent in the CRI
//!   LinuxContainerResources `unified` map;
//! - pkg/kubelet/cm/helpers_linux.go ResourceConfigForPod: the pod cgroup's protection,
//!   the sum of the pod's memory requests;
//! - pkg/kubelet/cm/qos_container_manager_linux.go setMemoryQoS: the pods root
//!   (`kubepods`, the Guaranteed tier) gets `memory.min` = Guaranteed + Burstable requests,
//!   the Burstable tier `memory.low` = Burstable requests, so each parent covers the
//!   protection of its children (cgroup v2 caps a child's protection by its parent's).
//!
//! With `None` (the default policy) the protections are 0: the kubelet (1.36) resets
//! them to 0 rather than leaving values of an earlier policy in place.
use super::pod::{Container, Pod};
use super::types::QosClass;

/// The page size `memory.high` is rounded down to (the kubelet's `defaultPageSize`,
/// os.Getpagesize(): 4 KiB on x86_64 and most arm64 kernels).
pub const PAGE_SIZE: i64 = 4096;

/// The kubelet's default `memoryThrottlingFactor` (DefaultMemoryThrottlingFactor).
pub const DEFAULT_THROTTLING_FACTOR: f64 = 0.9;

/// `memoryReservationPolicy` (KubeletConfiguration, 1.36 and later).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MemoryReservationPolicy {
    /// No request protection: `memory.min` and `memory.low` are 0 (the default).
    #[default]
    None,
    /// Guaranteed pods and containers get `memory.min` = requests (hard protection),
    /// Burstable ones `memory.low` = requests (soft protection), BestEffort nothing.
    TieredReservation,
}

impl MemoryReservationPolicy {
    /// The values the kubelet accepts, as written in a KubeletConfiguration.
    pub const NAMES: [&'static str; 2] = ["None", "TieredReservation"];

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "None" => Some(MemoryReservationPolicy::None),
            "TieredReservation" => Some(MemoryReservationPolicy::TieredReservation),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            MemoryReservationPolicy::None => "None",
            MemoryReservationPolicy::TieredReservation => "TieredReservation",
        }
    }
}

/// The Memory QoS settings of a KubeletConfiguration. Whether they apply is the
/// `MemoryQoS` feature gate's and the hierarchy's business (cgroup v2 only).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MemoryQos {
    /// `memoryThrottlingFactor`, in (0, 1]; default 0.9.
    pub throttling_factor: f64,
    /// `memoryReservationPolicy`; default `None`.
    pub reservation_policy: MemoryReservationPolicy,
}

impl Default for MemoryQos {
    fn default() -> Self {
        MemoryQos {
            throttling_factor: DEFAULT_THROTTLING_FACTOR,
            reservation_policy: MemoryReservationPolicy::None,
        }
    }
}

/// Memory QoS as it applies on one node: the settings and the node's allocatable memory
/// (what `memory.high` is computed from when a container has no memory limit).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NodeMemoryQos {
    pub settings: MemoryQos,
    /// Node allocatable memory in bytes (kubelet: getNodeAllocatable); 0 when unknown.
    pub allocatable_memory: i64,
}

/// The protection files of one cgroup, in bytes; both are written (0 clears them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryProtection {
    /// `memory.min`: never reclaimed.
    pub min: i64,
    /// `memory.low`: reclaimed only when nothing unprotected is left.
    pub low: i64,
}

/// `memory.high` for a container with memory `request` and `limit` (0 = none), or `None`
/// to leave it at `max` (kubelet: generateLinuxContainerResources).
///
/// `high = floor((request + factor × (limit − request)) / page) × page`, with the node's
/// allocatable memory standing in for a missing limit. Not set when request and limit are
/// equal and non-zero (a Guaranteed-style container is never throttled below its limit),
/// when there is no limit and allocatable is unknown, or when the result is not above the
/// request (throttling would start inside the request).
///
/// BestEffort containers (no request, no limit) get `factor × allocatable`, as KEP-2570
/// says; kubelet 1.36 left them at `max` (kubernetes#137685, fixed by #138139).
pub fn memory_high(
    request: i64,
    limit: i64,
    allocatable: i64,
    factor: f64,
    page_size: i64,
) -> Option<i64> {
    if request == limit && request > 0 {
        return None;
    }
    let ceiling = if limit != 0 { limit } else { allocatable };
    if ceiling <= 0 || page_size <= 0 {
        return None;
    }
    let (request_f, ceiling_f) = (request as f64, ceiling as f64);
    let pages = ((request_f + (ceiling_f - request_f) * factor) / page_size as f64).floor();
    // `as` saturates: a nonsense factor cannot wrap around.
    let high = (pages as i64).saturating_mul(page_size);
    (high != 0 && high > request).then_some(high)
}

/// The protection of a container of a pod of class `qos` with memory `request`
/// (kubelet: generateLinuxContainerResources under TieredReservation).
pub fn container_protection(
    qos: QosClass,
    request: i64,
    policy: MemoryReservationPolicy,
) -> MemoryProtection {
    tiered(qos, request.max(0), policy)
}

/// The protection of a pod's cgroup: its memory requests (kubelet: PodRequests, so init
/// containers count as the scheduler counts them and the overhead is included).
pub fn pod_protection(pod: &Pod, policy: MemoryReservationPolicy) -> MemoryProtection {
    tiered(
        pod.qos_class(),
        pod.requests("memory").value().max(0),
        policy,
    )
}

fn tiered(qos: QosClass, request: i64, policy: MemoryReservationPolicy) -> MemoryProtection {
    match (policy, qos) {
        (MemoryReservationPolicy::TieredReservation, QosClass::Guaranteed) => MemoryProtection {
            min: request,
            low: 0,
        },
        (MemoryReservationPolicy::TieredReservation, QosClass::Burstable) => MemoryProtection {
            min: 0,
            low: request,
        },
        _ => MemoryProtection::default(),
    }
}

/// The QoS-level protections for the active pods (kubelet: qos container manager
/// setMemoryQoS): the pods root's `memory.min` and the Burstable tier's `memory.low`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TierProtection {
    /// `kubepods/memory.min`: Guaranteed plus Burstable requests.
    pub pods_root_min: i64,
    /// `kubepods/burstable/memory.low`: Burstable requests.
    pub burstable_low: i64,
}

pub fn tier_protection(active_pods: &[Pod], policy: MemoryReservationPolicy) -> TierProtection {
    if policy == MemoryReservationPolicy::None {
        return TierProtection::default();
    }
    let (mut guaranteed, mut burstable) = (0i64, 0i64);
    for pod in active_pods {
        let request = pod.requests("memory").value().max(0);
        match pod.qos_class() {
            QosClass::Guaranteed => guaranteed = guaranteed.saturating_add(request),
            QosClass::Burstable => burstable = burstable.saturating_add(request),
            QosClass::BestEffort => {}
        }
    }
    TierProtection {
        pods_root_min: guaranteed.saturating_add(burstable),
        burstable_low: burstable,
    }
}

/// What Memory QoS writes for one container: `memory.high` (`None`: left at `max`) and
/// the protection.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ContainerMemoryQos {
    pub high: Option<i64>,
    pub protection: MemoryProtection,
}

/// The container's values on this node (its own request and limit, as the kubelet reads
/// them from the container's resources; the pod gives the QoS class).
pub fn container_values(
    pod: &Pod,
    container: &Container,
    node: &NodeMemoryQos,
) -> ContainerMemoryQos {
    let resources = &container.resources;
    let request = resources.requests.get("memory").map_or(0, |q| q.value());
    let limit = resources.limits.get("memory").map_or(0, |q| q.value());
    ContainerMemoryQos {
        high: memory_high(
            request,
            limit,
            node.allocatable_memory,
            node.settings.throttling_factor,
            PAGE_SIZE,
        ),
        protection: container_protection(
            pod.qos_class(),
            request,
            node.settings.reservation_policy,
        ),
    }
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;
    use crate::pod::PodSpec;
    use crate::testing::{container, pod};

    const MI: i64 = 1 << 20;

    // KEP-2570 "Alpha v1.27" table: limit 1000, factor 0.9, a page of 1 (units of Mi in
    // the KEP): memory.high = request + 0.9 × (1000 − request). Request 1000 equals the
    // limit: no memory.high (the KEP table's "1000" is the limit itself, which the kubelet
    // leaves as `max`).
    #[rstest]
    #[case::request_0(0, Some(900))]
    #[case::request_100(100, Some(910))]
    #[case::request_200(200, Some(920))]
    #[case::request_300(300, Some(930))]
    #[case::request_400(400, Some(940))]
    #[case::request_500(500, Some(950))]
    #[case::request_600(600, Some(960))]
    #[case::request_700(700, Some(970))]
    #[case::request_800(800, Some(980))]
    #[case::request_900(900, Some(990))]
    #[case::request_1000(1000, None)]
    fn kep_table_limit_1000_factor_0_9(#[case] request: i64, #[case] expected: Option<i64>) {
        assert_eq!(memory_high(request, 1000, 0, 0.9, 1), expected);
    }

    // KEP-2570 table comparing v1.22 and v1.27, limit 1000Mi, a 1Mi page.
    #[rstest]
    #[case::r500_f06(500, 0.6, Some(800))]
    #[case::r800_f06(800, 0.6, Some(920))]
    #[case::r1000_f06(1000, 0.6, None)]
    #[case::r500_f08(500, 0.8, Some(900))]
    #[case::r850_f08(850, 0.8, Some(970))]
    #[case::r500_f04(500, 0.4, Some(700))]
    fn kep_table_v1_27_formula(
        #[case] request_mi: i64,
        #[case] factor: f64,
        #[case] expected_mi: Option<i64>,
    ) {
        assert_eq!(
            memory_high(request_mi * MI, 1000 * MI, 0, factor, MI),
            expected_mi.map(|m| m * MI)
        );
    }

    // kubelet: kuberuntime_container_linux_test.go TestGenerateContainerConfigWithMemoryQoSEnforced
    // (request 128Mi with limit 256Mi, and without a limit against the fake node's 32Gi
    // allocatable), plus the edge cases of generateLinuxContainerResources.
    #[rstest]
    #[case::request_128mi_limit_256mi(128 * MI, 256 * MI, 32 << 30, 0.9,
        Some(((128 * MI) as f64 + (128 * MI) as f64 * 0.9) as i64 / 4096 * 4096))]
    #[case::request_128mi_no_limit(128 * MI, 0, 32 << 30, 0.9,
        Some(((128 * MI) as f64 + ((32i64 << 30) - 128 * MI) as f64 * 0.9) as i64 / 4096 * 4096))]
    #[case::rounded_down_to_a_page(0, 10_000, 0, 0.9, Some(8192))]
    #[case::guaranteed_never(64 * MI, 64 * MI, 32 << 30, 0.9, None)]
    #[case::limit_only_is_not_guaranteed(0, 64 * MI, 32 << 30, 0.5, Some(32 * MI))]
    #[case::best_effort_from_allocatable(0, 0, 1 << 30, 0.8, Some(((1i64 << 30) as f64 * 0.8) as i64 / 4096 * 4096))]
    #[case::no_limit_and_allocatable_unknown(128 * MI, 0, 0, 0.9, None)]
    #[case::factor_one_gives_the_limit(128 * MI, 256 * MI, 0, 1.0, Some(256 * MI))]
    #[case::below_a_page_is_zero(0, 4096, 0, 0.5, None)]
    #[case::not_above_the_request(4096 * 10 + 1, 4096 * 10 + 100, 0, 0.5, None)]
    #[case::request_above_allocatable(2 << 30, 0, 1 << 30, 0.9, None)]
    fn container_memory_high(
        #[case] request: i64,
        #[case] limit: i64,
        #[case] allocatable: i64,
        #[case] factor: f64,
        #[case] expected: Option<i64>,
    ) {
        assert_eq!(
            memory_high(request, limit, allocatable, factor, PAGE_SIZE),
            expected
        );
    }

    // KEP-2570 "Alpha v1.36" mapping: TieredReservation gives Guaranteed memory.min and
    // Burstable memory.low (kubelet: the 1.36 TieredReservation unit tests of
    // generateLinuxContainerResources); None gives neither.
    #[rstest]
    #[case::tiered_guaranteed(MemoryReservationPolicy::TieredReservation, QosClass::Guaranteed, 512 * MI, 0)]
    #[case::tiered_burstable(MemoryReservationPolicy::TieredReservation, QosClass::Burstable, 0, 512 * MI)]
    #[case::tiered_best_effort(
        MemoryReservationPolicy::TieredReservation,
        QosClass::BestEffort,
        0,
        0
    )]
    #[case::none_guaranteed(MemoryReservationPolicy::None, QosClass::Guaranteed, 0, 0)]
    #[case::none_burstable(MemoryReservationPolicy::None, QosClass::Burstable, 0, 0)]
    fn container_protection_by_policy_and_class(
        #[case] policy: MemoryReservationPolicy,
        #[case] qos: QosClass,
        #[case] min: i64,
        #[case] low: i64,
    ) {
        assert_eq!(
            container_protection(qos, 512 * MI, policy),
            MemoryProtection { min, low }
        );
    }

    fn two_containers(name: &str, a: (&str, &str), b: (&str, &str)) -> Pod {
        let mut p = Pod {
            spec: PodSpec {
                containers: vec![container("a", a.0, a.1), container("b", b.0, b.1)],
                ..Default::default()
            },
            ..Default::default()
        };
        p.metadata.name = name.into();
        p
    }

    #[test]
    fn pod_protection_is_the_sum_of_its_requests() {
        let guaranteed = two_containers(
            "g",
            ("cpu=100m,memory=64Mi", "cpu=100m,memory=64Mi"),
            ("cpu=100m,memory=32Mi", "cpu=100m,memory=32Mi"),
        );
        let burstable = two_containers("b", ("memory=64Mi", "memory=128Mi"), ("memory=16Mi", ""));
        let tiered = MemoryReservationPolicy::TieredReservation;
        assert_eq!(
            pod_protection(&guaranteed, tiered),
            MemoryProtection {
                min: 96 * MI,
                low: 0
            }
        );
        assert_eq!(
            pod_protection(&burstable, tiered),
            MemoryProtection {
                min: 0,
                low: 80 * MI
            }
        );
        assert_eq!(
            pod_protection(&pod("e", "", ""), tiered),
            MemoryProtection::default()
        );
        assert_eq!(
            pod_protection(&guaranteed, MemoryReservationPolicy::None),
            MemoryProtection::default()
        );
    }

    // kubelet: qos_container_manager_linux_test.go (setMemoryQoS under TieredReservation):
    // the pods root covers Guaranteed and Burstable requests, the Burstable tier its own.
    #[test]
    fn tiers_cover_their_childrens_protection() {
        let pods = [
            pod("g1", "cpu=1,memory=128Mi", "cpu=1,memory=128Mi"),
            pod("g2", "cpu=1,memory=256Mi", "cpu=1,memory=256Mi"),
            pod("b1", "memory=64Mi", "memory=512Mi"),
            pod("b2", "memory=32Mi", ""),
            pod("e", "", ""),
        ];
        assert_eq!(
            tier_protection(&pods, MemoryReservationPolicy::TieredReservation),
            TierProtection {
                pods_root_min: (128 + 256 + 64 + 32) * MI,
                burstable_low: (64 + 32) * MI,
            }
        );
        assert_eq!(
            tier_protection(&pods, MemoryReservationPolicy::None),
            TierProtection::default()
        );
        assert_eq!(
            tier_protection(&[], MemoryReservationPolicy::TieredReservation),
            TierProtection::default()
        );
    }

    #[test]
    fn container_values_take_the_class_from_the_pod() {
        let node = NodeMemoryQos {
            settings: MemoryQos {
                throttling_factor: 0.8,
                reservation_policy: MemoryReservationPolicy::TieredReservation,
            },
            allocatable_memory: 512 * MI,
        };
        let burstable = pod("b", "cpu=100m,memory=32Mi", "memory=128Mi");
        let values = container_values(&burstable, &burstable.spec.containers[0], &node);
        let expected_high = ((32 * MI) as f64 + (96 * MI) as f64 * 0.8) as i64 / 4096 * 4096;
        assert_eq!(values.high, Some(expected_high));
        assert_eq!(
            values.protection,
            MemoryProtection {
                min: 0,
                low: 32 * MI
            }
        );
        let best_effort = pod("e", "", "");
        let values = container_values(&best_effort, &best_effort.spec.containers[0], &node);
        assert_eq!(
            values.high,
            Some(((512 * MI) as f64 * 0.8) as i64 / 4096 * 4096)
        );
        assert_eq!(values.protection, MemoryProtection::default());
    }

    #[rstest]
    #[case::none("None", Some(MemoryReservationPolicy::None))]
    #[case::tiered("TieredReservation", Some(MemoryReservationPolicy::TieredReservation))]
    #[case::wrong_case("tieredreservation", None)]
    #[case::old_alpha_name("HardReservation", None)]
    fn policy_names(#[case] text: &str, #[case] expected: Option<MemoryReservationPolicy>) {
        assert_eq!(MemoryReservationPolicy::parse(text), expected);
        if let Some(policy) = expected {
            assert_eq!(policy.as_str(), text);
        }
    }
}
