use rstest::rstest;

use super::*;
use crate::pod::Toleration;
use crate::testing::{list, pod};

use NodeConditionType::{DiskPressure, MemoryPressure, PIDPressure};

fn best_effort() -> Pod {
    pod("be", "", "")
}
fn burstable() -> Pod {
    pod("bu", "memory=1Gi", "")
}
fn guaranteed() -> Pod {
    pod("gu", "cpu=1,memory=1Gi", "cpu=1,memory=1Gi")
}
fn critical_best_effort() -> Pod {
    let mut p = best_effort();
    p.spec.priority = Some(2_000_000_000);
    p
}
fn static_best_effort() -> Pod {
    let mut p = best_effort();
    p.metadata
        .annotations
        .insert("kubernetes.io/config.source".into(), "file".into());
    p
}
fn tolerating(toleration: Toleration) -> Pod {
    let mut p = best_effort();
    p.spec.tolerations = vec![toleration];
    p
}
fn memory_pressure_toleration() -> Pod {
    tolerating(Toleration {
        key: TAINT_NODE_MEMORY_PRESSURE.into(),
        operator: "Exists".into(),
        effect: "NoSchedule".into(),
        ..Default::default()
    })
}
fn disk_pressure_toleration() -> Pod {
    tolerating(Toleration {
        key: "node.kubernetes.io/disk-pressure".into(),
        operator: "Exists".into(),
        effect: "NoSchedule".into(),
        ..Default::default()
    })
}
fn tolerates_everything() -> Pod {
    tolerating(Toleration {
        operator: "Exists".into(),
        ..Default::default()
    })
}

// The cases of the kubelet's TestAdmit and TestAdmitUnderNodeConditions.
#[rstest]
#[case::no_pressure_best_effort(vec![], best_effort(), true)]
#[case::no_pressure_guaranteed(vec![], guaranteed(), true)]
#[case::memory_best_effort(vec![MemoryPressure], best_effort(), false)]
#[case::memory_burstable(vec![MemoryPressure], burstable(), true)]
#[case::memory_guaranteed(vec![MemoryPressure], guaranteed(), true)]
#[case::memory_critical_best_effort(vec![MemoryPressure], critical_best_effort(), true)]
#[case::memory_static_best_effort(vec![MemoryPressure], static_best_effort(), true)]
#[case::memory_tolerating_best_effort(vec![MemoryPressure], memory_pressure_toleration(), true)]
#[case::memory_other_toleration(vec![MemoryPressure], disk_pressure_toleration(), false)]
#[case::memory_wildcard_toleration(vec![MemoryPressure], tolerates_everything(), true)]
#[case::disk_best_effort(vec![DiskPressure], best_effort(), false)]
#[case::disk_guaranteed(vec![DiskPressure], guaranteed(), false)]
#[case::disk_critical(vec![DiskPressure], critical_best_effort(), true)]
#[case::disk_static(vec![DiskPressure], static_best_effort(), true)]
#[case::pid_burstable(vec![PIDPressure], burstable(), false)]
#[case::memory_and_disk_guaranteed(vec![MemoryPressure, DiskPressure], guaranteed(), false)]
#[case::memory_and_disk_tolerating(vec![MemoryPressure, DiskPressure], memory_pressure_toleration(), false)]
#[case::memory_and_disk_critical(vec![MemoryPressure, DiskPressure], critical_best_effort(), true)]
fn admission_under_pressure(
    #[case] conditions: Vec<NodeConditionType>,
    #[case] pod: Pod,
    #[case] admitted: bool,
) {
    let result = admit_under_pressure(&pod, &conditions);
    assert_eq!(result.admitted, admitted, "{result:?}");
    if !admitted {
        assert_eq!(result.reason, "Evicted");
    }
}

#[test]
fn pressure_message_names_the_conditions() {
    let result = admit_under_pressure(&best_effort(), &[MemoryPressure, DiskPressure]);
    assert_eq!(
        result.message,
        "The node had condition: [MemoryPressure DiskPressure]. "
    );
}

const NODE: &str = "cpu=2,memory=4Gi,pods=3,ephemeral-storage=10Gi";

fn running() -> Vec<Pod> {
    vec![
        pod("r1", "cpu=1,memory=1Gi", ""),
        pod("r2", "cpu=500m,memory=2Gi", ""),
    ]
}

#[rstest]
#[case::fits(pod("new", "cpu=500m,memory=1Gi", ""), NODE, vec![])]
#[case::best_effort_fits(pod("new", "", ""), NODE, vec![])]
#[case::cpu_short(pod("new", "cpu=600m", ""), NODE, vec![("cpu", 600, 1500, 2000)])]
#[case::memory_short(pod("new", "memory=2Gi", ""), NODE, vec![("memory", 2 << 30, 3 << 30, 4 << 30)])]
#[case::both_short_cpu_first(pod("new", "cpu=1,memory=2Gi", ""), NODE,
    vec![("cpu", 1000, 1500, 2000), ("memory", 2 << 30, 3 << 30, 4 << 30)])]
#[case::too_many_pods(pod("new", "", ""), "cpu=2,memory=4Gi,pods=2", vec![("pods", 1, 2, 2)])]
#[case::pods_and_cpu(pod("new", "cpu=1", ""), "cpu=2,memory=4Gi,pods=2", vec![("pods", 1, 2, 2), ("cpu", 1000, 1500, 2000)])]
#[case::ephemeral_storage(pod("new", "ephemeral-storage=11Gi", ""), NODE, vec![("ephemeral-storage", 11 << 30, 0, 10 << 30)])]
#[case::extended_resource(pod("new", "example.com/gpu=2", ""), "example.com/gpu=1", vec![("example.com/gpu", 2, 0, 1)])]
#[case::unknown_resource_not_checked(pod("new", "example.com/gpu=2,cpu=100", ""), "memory=4Gi", vec![])]
#[case::exactly_full(pod("new", "cpu=500m,memory=1Gi", ""), "cpu=2,memory=4Gi", vec![])]
fn resource_fit(
    #[case] new: Pod,
    #[case] allocatable: &str,
    #[case] expected: Vec<(&str, i64, i64, i64)>,
) {
    let result = admit_resource_fit(&new, &running(), &list(allocatable));
    let got: Vec<(&str, i64, i64, i64)> = result
        .failures
        .iter()
        .map(|f| match f {
            AdmissionFailure::InsufficientResource(r) => {
                (r.resource.as_str(), r.requested, r.used, r.capacity)
            }
            other => panic!("not a resource failure: {other:?}"),
        })
        .collect();
    assert_eq!(got, expected);
    assert_eq!(result.admitted, expected.is_empty());
    if let Some((resource, ..)) = expected.first() {
        assert_eq!(result.reason, format!("OutOf{resource}"));
    }
}

#[test]
fn fit_message_and_insufficient_amount() {
    let result = admit_resource_fit(&pod("new", "cpu=600m", ""), &running(), &list(NODE));
    assert_eq!(
        result.message,
        "Node didn't have enough resource: cpu, requested: 600, used: 1500, capacity: 2000"
    );
    let shortfall = insufficient_resources(&pod("new", "cpu=600m", ""), &running(), &list(NODE));
    assert_eq!(shortfall[0].insufficient_amount(), 100);
}

#[test]
fn fit_ignores_finished_pods_and_the_pod_itself() {
    let mut done = pod("done", "cpu=2", "");
    done.status.phase = Some("Succeeded".into());
    let again = pod("new", "cpu=2", "");
    let result = admit_resource_fit(&pod("new", "cpu=2", ""), &[done, again], &list("cpu=2"));
    assert!(result.admitted, "{result:?}");
}

#[test]
fn pressure_is_checked_before_fit() {
    let result = admit_pod(&best_effort(), &[DiskPressure], &running(), &list("pods=1"));
    assert_eq!(result.reason, "Evicted");
    let result = admit_pod(
        &burstable(),
        &[MemoryPressure],
        &running(),
        &list("memory=2Gi"),
    );
    assert_eq!(result.reason, "OutOfmemory");
    assert!(admit_pod(&burstable(), &[], &running(), &list(NODE)).admitted);
}

// The node of the kubelet's TestGeneralPredicates (predicate_test.go): machine1,
// 10 millicores, 20 bytes of memory, 32 pods.
const MACHINE1: &str = "cpu=10m,memory=20,pods=32";

fn taint(key: &str, effect: &str) -> Taint {
    Taint {
        key: key.into(),
        effect: effect.into(),
        ..Default::default()
    }
}

fn bound_to(node: &str) -> Pod {
    let mut p = best_effort();
    p.spec.node_name = Some(node.into());
    p
}

fn tolerating_keys(keys: &[&str]) -> Pod {
    let mut p = best_effort();
    p.spec.tolerations = keys
        .iter()
        .map(|k| Toleration {
            key: k.to_string(),
            ..Default::default()
        })
        .collect();
    p
}

fn needs_cpu_and_memory() -> Pod {
    pod("new", "cpu=8m,memory=10", "")
}

fn short_and_bound_elsewhere() -> Pod {
    let mut p = needs_cpu_and_memory();
    p.spec.node_name = Some("machine2".into());
    p
}

// The cases of the kubelet's TestGeneralPredicates this model can express (node
// affinity is not read by the pod model; the "hostport conflict" case is in
// `node_ports`), plus the order of mixed failures: resources first, then node name,
// then taints.
#[rstest]
#[case::no_resources_port_or_host_always_fits(best_effort(), vec![], vec![])]
#[case::not_enough_cpu_and_memory(needs_cpu_and_memory(), vec![], vec!["OutOfcpu", "OutOfmemory"])]
#[case::host_not_match(bound_to("machine2"), vec![], vec!["NodeName"])]
#[case::host_matches(bound_to("machine1"), vec![], vec![])]
#[case::taint_toleration_match(tolerating_keys(&["foo", "bar"]),
    vec![taint("foo", "NoSchedule"), taint("bar", "NoExecute")], vec![])]
#[case::no_schedule_taint_not_matched(best_effort(), vec![taint("foo", "NoSchedule")], vec![])]
#[case::no_execute_taint_not_matched(best_effort(), vec![taint("bar", "NoExecute")], vec!["TaintToleration"])]
#[case::prefer_no_schedule_taint_not_matched(best_effort(), vec![taint("baz", "PreferNoSchedule")], vec![])]
#[case::static_pods_ignore_taints(static_best_effort(),
    vec![taint("foo", "NoSchedule"), taint("bar", "NoExecute")], vec![])]
#[case::resources_then_node_name_then_taint(short_and_bound_elsewhere(),
    vec![taint("bar", "NoExecute")], vec!["OutOfcpu", "OutOfmemory", "NodeName", "TaintToleration"])]
fn general_predicates(#[case] new: Pod, #[case] taints: Vec<Taint>, #[case] expected: Vec<&str>) {
    let running = vec![pod("r", "cpu=5m,memory=19", "")];
    let allocatable = list(MACHINE1);
    let node = AdmissionNode {
        name: Some("machine1"),
        taints: &taints,
        ..AdmissionNode::new(&[], &allocatable)
    };
    let result = admit_predicates(&new, &running, &node);
    let reasons: Vec<String> = result.failures.iter().map(|f| f.reason()).collect();
    assert_eq!(reasons, expected, "{result:?}");
    assert_eq!(result.admitted, expected.is_empty());
    assert_eq!(result.reason, expected.first().copied().unwrap_or(""));
}

#[test]
fn predicate_failures_carry_the_kubelets_messages() {
    let allocatable = list(MACHINE1);
    let taints = [taint("bar", "NoExecute")];
    let node = AdmissionNode {
        name: Some("machine1"),
        taints: &taints,
        ..AdmissionNode::new(&[], &allocatable)
    };
    let result = admit_predicates(&bound_to("machine2"), &[], &node);
    assert_eq!(
        result.message,
        "Predicate NodeName failed: node(s) didn't match the requested node name"
    );
    assert_eq!(
        result.failures[1].message(),
        "Predicate TaintToleration failed: node(s) had taints that the pod didn't tolerate"
    );
    // The kubelet's own "not enough cpu and memory" numbers.
    let result = admit_predicates(
        &needs_cpu_and_memory(),
        &[pod("r", "cpu=5m,memory=19", "")],
        &node,
    );
    assert_eq!(
        result.message,
        "Node didn't have enough resource: cpu, requested: 8, used: 5, capacity: 10"
    );
}

#[test]
fn an_unknown_node_name_skips_the_node_name_check() {
    let allocatable = list(MACHINE1);
    let node = AdmissionNode::new(&[], &allocatable);
    assert!(admit_predicates(&bound_to("machine2"), &[], &node).admitted);
}

/// A pod whose one container has these ports, each "PROTOCOL/hostIP/hostPort" as in
/// the scheduler's nodeports tests ("" for an unset protocol or address).
fn with_host_ports(name: &str, ports: &[&str]) -> Pod {
    let mut p = pod(name, "", "");
    p.spec.containers[0].ports = ports
        .iter()
        .map(|spec| {
            let parts: Vec<&str> = spec.split('/').collect();
            let [protocol, host_ip, host_port] = parts[..] else {
                panic!("bad port {spec}");
            };
            ContainerPort {
                container_port: 80,
                host_port: host_port.parse().unwrap_or_else(|e| panic!("{spec}: {e}")),
                protocol: protocol.into(),
                host_ip: host_ip.into(),
                ..Default::default()
            }
        })
        .collect();
    p
}

fn node_ports_verdict(new: &Pod, running: &[Pod]) -> Vec<String> {
    let allocatable = list(MACHINE1);
    let node = AdmissionNode::new(&[], &allocatable);
    let result = admit_predicates(new, running, &node);
    result.failures.iter().map(|f| f.reason()).collect()
}

// The cases of the scheduler's TestNodePorts (nodeports/node_ports_test.go), plus the
// kubelet's "hostport conflict" case of TestGeneralPredicates (port 123, protocol and
// address unset on both sides) and the edges of HostPortInfo.CheckConflict.
#[rstest]
#[case::other_port(&["UDP/127.0.0.1/8080"], &["UDP/127.0.0.1/9090"], false)]
#[case::same_udp_port(&["UDP/127.0.0.1/8080"], &["UDP/127.0.0.1/8080"], true)]
#[case::same_tcp_port(&["TCP/127.0.0.1/8080"], &["TCP/127.0.0.1/8080"], true)]
#[case::different_host_ip(&["TCP/127.0.0.1/8080"], &["TCP/127.0.0.2/8080"], false)]
#[case::different_protocol(&["UDP/127.0.0.1/8080"], &["TCP/127.0.0.1/8080"], false)]
#[case::second_udp_port_conflict(&["UDP/127.0.0.1/8000", "UDP/127.0.0.1/8080"], &["UDP/127.0.0.1/8080"], true)]
#[case::first_tcp_port_conflict(&["TCP/127.0.0.1/8001", "UDP/127.0.0.1/8080"],
    &["TCP/127.0.0.1/8001", "UDP/127.0.0.1/8081"], true)]
#[case::first_tcp_port_conflict_due_to_wildcard_host_ip(&["TCP/0.0.0.0/8001"], &["TCP/127.0.0.1/8001"], true)]
#[case::tcp_host_port_conflict_due_to_wildcard_host_ip(&["TCP/10.0.10.10/8001", "TCP/0.0.0.0/8001"],
    &["TCP/127.0.0.1/8001"], true)]
#[case::second_tcp_port_conflict_to_wildcard_host_ip(&["TCP/127.0.0.1/8001"], &["TCP/0.0.0.0/8001"], true)]
#[case::second_different_protocol(&["UDP/127.0.0.1/8001"], &["TCP/0.0.0.0/8001"], false)]
#[case::udp_host_port_conflict_due_to_wildcard_host_ip(&["UDP/127.0.0.1/8001"],
    &["TCP/0.0.0.0/8001", "UDP/0.0.0.0/8001"], true)]
#[case::kubelet_hostport_conflict(&["//123"], &["//123"], true)]
#[case::unset_address_is_the_wildcard(&["TCP/10.0.0.1/8080"], &["TCP//8080"], true)]
#[case::unset_protocol_is_tcp(&["/127.0.0.1/8080"], &["TCP/127.0.0.1/8080"], true)]
#[case::unset_protocol_is_not_udp(&["/127.0.0.1/8080"], &["UDP/127.0.0.1/8080"], false)]
#[case::host_port_zero_claims_nothing(&["TCP//0"], &["TCP//0"], false)]
#[case::no_ports_requested(&[], &["TCP//8080"], false)]
fn node_ports(#[case] wanted: &[&str], #[case] used: &[&str], #[case] conflict: bool) {
    let running = vec![with_host_ports("r", used)];
    let expected: Vec<String> = if conflict {
        vec!["NodePorts".into()]
    } else {
        vec![]
    };
    assert_eq!(
        node_ports_verdict(&with_host_ports("new", wanted), &running),
        expected
    );
}

#[test]
fn node_ports_message_is_the_schedulers() {
    let result = admit_predicates(
        &with_host_ports("new", &["TCP//8080"]),
        &[with_host_ports("r", &["TCP//8080"])],
        &AdmissionNode::new(&[], &list(MACHINE1)),
    );
    assert_eq!(
        result.message,
        "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports"
    );
}

#[test]
fn ports_of_finished_pods_the_pod_itself_and_plain_init_containers_are_free() {
    let wanted = with_host_ports("new", &["TCP//8080"]);
    let mut finished = with_host_ports("done", &["TCP//8080"]);
    finished.status.phase = Some("Failed".into());
    // A pod already known under the same key (re-admission) does not clash with
    // itself.
    let itself = with_host_ports("new", &["TCP//8080"]);
    // An init container that is not a sidecar has finished before the pod runs.
    let mut with_init = pod("init", "", "");
    with_init.spec.init_containers = with_host_ports("x", &["TCP//8080"]).spec.containers;
    assert_eq!(
        node_ports_verdict(&wanted, &[finished, itself, with_init.clone()]),
        Vec::<String>::new()
    );
    // Made a sidecar, it holds the port for the pod's life.
    with_init.spec.init_containers[0].restart_policy = Some("Always".into());
    assert_eq!(node_ports_verdict(&wanted, &[with_init]), ["NodePorts"]);
}

#[test]
fn a_container_port_alone_claims_nothing_even_beside_a_host_port() {
    // Our runtimes put every pod on the host network, but as in the kubelet only a
    // hostPort (set, or defaulted from containerPort for `hostNetwork: true`) counts.
    let mut bare = pod("bare", "", "");
    bare.spec.containers[0].ports = vec![ContainerPort {
        container_port: 8080,
        protocol: "TCP".into(),
        ..Default::default()
    }];
    assert_eq!(
        node_ports_verdict(&bare, &[with_host_ports("r", &["TCP//8080"])]),
        Vec::<String>::new()
    );
    assert_eq!(
        node_ports_verdict(&with_host_ports("new", &["TCP//8080"]), &[bare]),
        Vec::<String>::new()
    );
}

fn labelled_os(os: &str) -> Pod {
    let mut p = best_effort();
    p.metadata.labels.insert(OS_LABEL.into(), os.into());
    p
}

fn spec_os(os: &str) -> Pod {
    let mut p = best_effort();
    p.spec.os = Some(crate::pod::PodOs { name: os.into() });
    p
}

// The kubelet's TestRejectPodAdmissionBasedOnOSSelector and
// TestRejectPodAdmissionBasedOnOSField (predicate_test.go), on a linux node. The
// node's own label is never read: the kubelet resets it to its runtime's OS, so the
// "dummyOS label on the node" cases reduce to the pod's label against linux.
#[rstest]
#[case::os_label_match(labelled_os("linux"), vec![])]
#[case::os_label_mismatch(labelled_os("dummyOS"), vec!["PodOSSelectorNodeLabelDoesNotMatch"])]
#[case::windows_label(labelled_os("windows"), vec!["PodOSSelectorNodeLabelDoesNotMatch"])]
#[case::no_label_selector(best_effort(), vec![])]
#[case::os_field_match(spec_os("linux"), vec![])]
#[case::os_field_mismatch(spec_os("windows"), vec!["PodOSNotSupported"])]
fn os_checks(#[case] new: Pod, #[case] expected: Vec<&str>) {
    let allocatable = list(MACHINE1);
    let node = AdmissionNode {
        os: "linux",
        ..AdmissionNode::new(&[], &allocatable)
    };
    let result = admit_predicates(&new, &[], &node);
    let reasons: Vec<String> = result.failures.iter().map(|f| f.reason()).collect();
    assert_eq!(reasons, expected, "{result:?}");
    assert_eq!(result.admitted, expected.is_empty());
}

#[test]
fn os_rejections_carry_the_kubelets_messages() {
    let allocatable = list(MACHINE1);
    let node = AdmissionNode {
        os: "linux",
        ..AdmissionNode::new(&[], &allocatable)
    };
    let label = admit_predicates(&labelled_os("windows"), &[], &node);
    assert_eq!(
        (label.reason.as_str(), label.message.as_str()),
        (
            "PodOSSelectorNodeLabelDoesNotMatch",
            "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label"
        )
    );
    let field = admit_predicates(&spec_os("windows"), &[], &node);
    assert_eq!(
        (field.reason.as_str(), field.message.as_str()),
        (
            "PodOSNotSupported",
            "Failed to admit pod as the OS field doesn't match node OS"
        )
    );
}

#[test]
fn an_os_mismatch_is_the_only_failure_reported() {
    // The kubelet returns at the OS checks, before the resource fit and the rest;
    // the label check comes before the field check.
    let mut new = needs_cpu_and_memory();
    new.spec.node_name = Some("machine2".into());
    new.spec.os = Some(crate::pod::PodOs {
        name: "windows".into(),
    });
    new.metadata
        .labels
        .insert(OS_LABEL.into(), "windows".into());
    let allocatable = list(MACHINE1);
    let node = AdmissionNode {
        name: Some("machine1"),
        os: "linux",
        ..AdmissionNode::new(&[], &allocatable)
    };
    let result = admit_predicates(&new, &[pod("r", "cpu=5m,memory=19", "")], &node);
    assert_eq!(result.failures, vec![AdmissionFailure::OsLabelMismatch]);
    new.metadata.labels.clear();
    let result = admit_predicates(&new, &[pod("r", "cpu=5m,memory=19", "")], &node);
    assert_eq!(result.failures, vec![AdmissionFailure::OsFieldMismatch]);
}

#[test]
fn the_agents_node_runs_its_own_os() {
    let allocatable = list(MACHINE1);
    let node = AdmissionNode::new(&[], &allocatable);
    assert_eq!(node.os, std::env::consts::OS);
    assert!(admit_predicates(&spec_os(NODE_OS), &[], &node).admitted);
}

#[test]
fn host_ports_come_after_the_node_name_and_before_taints() {
    // AdmissionCheck's order: resources, node affinity, node name, node ports; then
    // the kubelet's taint check.
    let mut new = with_host_ports("new", &["TCP//8080"]);
    new.spec.containers[0].resources.requests = list("cpu=8m");
    new.spec.node_name = Some("machine2".into());
    let mut running = with_host_ports("r", &["TCP//8080"]);
    running.spec.containers[0].resources.requests = list("cpu=5m");
    let allocatable = list(MACHINE1);
    let taints = [taint("bar", "NoExecute")];
    let node = AdmissionNode {
        name: Some("machine1"),
        taints: &taints,
        ..AdmissionNode::new(&[], &allocatable)
    };
    let result = admit_predicates(&new, &[running], &node);
    let reasons: Vec<String> = result.failures.iter().map(|f| f.reason()).collect();
    assert_eq!(
        reasons,
        ["OutOfcpu", "NodeName", "NodePorts", "TaintToleration"]
    );
}

#[test]
fn pressure_failure_is_typed() {
    let result = admit_under_pressure(&best_effort(), &[DiskPressure]);
    assert_eq!(
        result.failures,
        vec![AdmissionFailure::NodeCondition(vec![DiskPressure])]
    );
}
