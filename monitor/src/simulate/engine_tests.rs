//! The step loop's own rules (docs/simulate.md, "Semantics"), on small inline scenarios.
use std::path::Path;

use super::*;
use crate::simulate::config::load_config;
use crate::simulate::scenario::parse_scenario;

const MI: i64 = 1 << 20;

fn run(text: &str) -> Vec<StepOutput> {
    let scenario =
        parse_scenario(text, "s.yaml", Path::new(".")).unwrap_or_else(|e| panic!("scenario: {e}"));
    let config =
        load_config(&scenario.config, &mut Vec::new()).unwrap_or_else(|e| panic!("config: {e}"));
    Simulation::run(config, &scenario)
}

const DISK_CONFIG: &str = "config:
  evictionHard: {nodefs.available: 1Gi}
";

const TWO_PODS: &str = "    pods:
      - metadata: {name: a}
        spec: {containers: [{name: c, image: i}]}
      - metadata: {name: b}
        spec: {containers: [{name: c, image: i}]}
";

#[test]
fn reclaim_bytes_are_credited_and_one_shot() {
    let text = format!(
        "{DISK_CONFIG}steps:
  - at: 0s
{TWO_PODS}    summary:
      node: {{fs: {{availableBytes: {free}, capacityBytes: {cap}}}}}
      pods:
        - podRef: {{name: a}}
          containers: [{{name: c, rootfs: {{usedBytes: 100}}, logs: {{usedBytes: 100}}}}]
    reclaim: {{nodefs: 500Mi}}
  - at: 10s
",
        free = 900 * MI,
        cap = 20 * 1024 * MI
    );
    let out = run(&text);
    // 900Mi + 500Mi reclaimed = 1400Mi ≥ 1Gi: no eviction.
    assert_eq!(
        out[0].node_reclaim,
        NodeReclaimOutput {
            attempted: true,
            freed_bytes: 500 * MI as u64,
            sufficient: true
        }
    );
    assert!(
        out[0].evicted.is_none(),
        "reclaim was sufficient: {:?}",
        out[0].evicted
    );
    assert!(out[0].ranking.is_empty());
    // The next step has no reclaim bytes: the same pressure now evicts. `b` has no
    // stats at all and ranks first, as the kubelet ranks pods without stats.
    assert_eq!(
        out[1].node_reclaim,
        NodeReclaimOutput {
            attempted: true,
            freed_bytes: 0,
            sufficient: false
        }
    );
    assert_eq!(out[1].ranking, ["default/b", "default/a"]);
    assert_eq!(
        out[1].evicted.as_ref().map(|e| e.pod.as_str()),
        Some("default/b")
    );
}

#[test]
fn pods_carry_over_lose_evicted_ones_and_are_replaced_by_a_later_list() {
    let text = format!(
        "config:
  evictionHard: {{memory.available: 500Mi}}
steps:
  - at: 0s
{TWO_PODS}    summary:
      node: {{memory: {{availableBytes: {low}, workingSetBytes: {ws}}}}}
      pods:
        - podRef: {{name: a}}
          memory: {{workingSetBytes: 2000}}
        - podRef: {{name: b}}
          memory: {{workingSetBytes: 1000}}
  - at: 10s
  - at: 20s
    pods:
      - metadata: {{name: c}}
        spec: {{containers: [{{name: c, image: i}}]}}
",
        low = 100 * MI,
        ws = 8000 * MI
    );
    let out = run(&text);
    assert_eq!(
        out[0].evicted.as_ref().map(|e| e.pod.as_str()),
        Some("default/a")
    );
    assert_eq!(
        out[1].ranking,
        ["default/b"],
        "a was evicted at 0s and is gone"
    );
    assert_eq!(
        out[1].evicted.as_ref().map(|e| e.pod.as_str()),
        Some("default/b")
    );
    assert_eq!(
        out[2].ranking,
        ["default/c"],
        "a later pods list replaces the set"
    );
}

#[test]
fn admitted_pods_join_the_running_set() {
    let text = format!(
        "config:
  evictionHard: {{memory.available: 500Mi}}
steps:
  - at: 0s
    pods: []
    summary:
      node: {{memory: {{availableBytes: {high}, workingSetBytes: {ws}}}}}
    admit:
      - metadata: {{name: newcomer, namespace: x}}
        spec: {{containers: [{{name: c, image: i}}]}}
  - at: 10s
    summary:
      node: {{memory: {{availableBytes: {low}, workingSetBytes: {ws}}}}}
",
        high = 4000 * MI,
        low = 100 * MI,
        ws = 4000 * MI
    );
    let out = run(&text);
    assert!(out[0].admission[0].admitted, "{:?}", out[0].admission);
    assert_eq!(out[1].ranking, ["x/newcomer"]);
    assert_eq!(out[1].admission, [], "admit is one-shot");
}

/// Two cpu reservations of 9E once overflowed their sum (a scenario fuzz input).
#[test]
fn cpu_reservations_past_i64_leave_no_allocatable_cpu() {
    let text = "config:
  systemReserved: {cpu: 9E}
  kubeReserved: {cpu: 9E}
steps:
  - at: 0s
    node: {status: {capacity: {cpu: '8'}}}
    summary:
      node: {memory: {availableBytes: 1, workingSetBytes: 1}}
    admit:
      - metadata: {name: newcomer, namespace: x}
        spec:
          containers: [{name: c, image: i, resources: {requests: {cpu: 1m}}}]
";
    let out = run(text);
    assert!(!out[0].admission[0].admitted, "{:?}", out[0].admission);
}

#[test]
fn periodic_image_gc_frees_least_recently_used_images_down_to_the_low_threshold() {
    // 10Gi filesystem shared by images, 1Gi free: 90% used ≥ 85%, free down to 80%:
    // 1Gi to free. Unused images, least recently used first: the never-used ones (by
    // detection time, then id) before `old`, last used at 10s.
    let text = format!(
        "config:
  evictionHard: {{memory.available: 100Mi}}
steps:
  - at: 10s
    pods:
      - metadata: {{name: p}}
        spec: {{containers: [{{name: c, image: reg/old:1}}]}}
    images:
      - {{id: sha256:old, repoTags: [reg/old:1], sizeBytes: 256Mi}}
      - {{id: sha256:b, sizeBytes: 512Mi}}
      - {{id: sha256:a, sizeBytes: 512Mi}}
      - {{id: sha256:c, sizeBytes: 2Gi}}
    summary:
      node: {{fs: {{availableBytes: {free}, capacityBytes: {cap}}}}}
  - at: 1m
    pods: []
  - at: 5m
",
        free = 1024 * MI,
        cap = 10 * 1024 * MI
    );
    let out = run(&text);
    assert_eq!(
        out[0].images_removed,
        Vec::<String>::new(),
        "images younger than imageMinimumGCAge (2m) stay"
    );
    assert_eq!(
        out[1].images_removed,
        Vec::<String>::new(),
        "still younger than 2m"
    );
    // Never-used images (a, b, c) sort before `old`: a + b = 1Gi.
    assert_eq!(out[2].images_removed, ["sha256:a", "sha256:b"]);
    assert!(
        out[2].thresholds_met.is_empty(),
        "no eviction threshold is involved"
    );
}

/// Admission's fallback allocatable leaves the hugepages out of memory (kubelet:
/// nodestatus MachineInfo), once: a summary's memory capacity (available + working set)
/// is already without them when the kubelet's HugepageAwareEviction adjusted it.
#[rstest::rstest]
// Capacity from the Node object: 10Gi − 100Mi − 1Gi of hugepages = 9116Mi.
#[case::node_capacity("", "memory: 10Gi, ", 9 << 30, 9100, true)]
#[case::node_capacity_too_much("", "memory: 10Gi, ", 9 << 30, 9150, false)]
// Capacity from an adjusted summary (9Gi): 9216Mi − 100Mi, the hugepages not taken twice.
#[case::adjusted_summary("", "", 9 << 30, 9100, true)]
#[case::adjusted_summary_too_much("", "", 9 << 30, 9150, false)]
// The gate off: the summary holds them (10Gi), so they are taken off here.
#[case::gate_off("  featureGates: {HugepageAwareEviction: false}\n", "", 10 << 30, 9100, true)]
#[case::gate_off_too_much("  featureGates: {HugepageAwareEviction: false}\n", "", 10 << 30, 9150, false)]
fn fallback_allocatable_leaves_out_hugepages_once(
    #[case] gates: &str,
    #[case] node_memory: &str,
    #[case] summary_capacity: i64,
    #[case] request_mi: i64,
    #[case] admitted: bool,
) {
    let text = format!(
        "config:
  evictionHard: {{memory.available: 100Mi}}
{gates}steps:
  - at: 0s
    pods: []
    node: {{status: {{capacity: {{{node_memory}hugepages-2Mi: 1Gi, cpu: '8'}}}}}}
    summary:
      node: {{memory: {{availableBytes: {available}, workingSetBytes: {ws}}}}}
    admit:
      - metadata: {{name: newcomer, namespace: x}}
        spec:
          containers: [{{name: c, image: i, resources: {{requests: {{memory: {request_mi}Mi}}}}}}]
",
        available = summary_capacity - (1 << 30),
        ws = 1 << 30,
    );
    let out = run(&text);
    assert_eq!(
        out[0].admission[0].admitted, admitted,
        "{:?}",
        out[0].admission
    );
}

/// Scenario pods go through the pod parser, so `admit` pods can ask for host ports and
/// name an OS; admission answers as the kubelet's predicate handler does.
#[test]
fn admission_refuses_a_taken_host_port_and_another_os() {
    let text = "config:
  evictionHard: {memory.available: 100Mi}
steps:
  - at: 0s
    pods:
      - metadata: {name: web}
        spec:
          containers: [{name: c, image: i, ports: [{containerPort: 80, hostPort: 8080}]}]
    summary:
      node: {memory: {availableBytes: 4294967296, workingSetBytes: 1}}
    admit:
      - metadata: {name: clash}
        spec:
          containers: [{name: c, image: i, ports: [{containerPort: 80, hostPort: 8080, hostIP: 10.0.0.1}]}]
      - metadata: {name: udp}
        spec:
          containers: [{name: c, image: i, ports: [{containerPort: 80, hostPort: 8080, protocol: UDP}]}]
      - metadata: {name: windows}
        spec:
          os: {name: windows}
          containers: [{name: c, image: i}]
      - metadata: {name: labelled, labels: {kubernetes.io/os: windows}}
        spec:
          containers: [{name: c, image: i}]
";
    let out = run(text);
    let got: Vec<(&str, bool, &str)> = out[0]
        .admission
        .iter()
        .map(|a| (a.pod.as_str(), a.admitted, a.reason.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            ("default/clash", false, "NodePorts"),
            ("default/udp", true, ""),
            ("default/windows", false, "PodOSNotSupported"),
            (
                "default/labelled",
                false,
                "PodOSSelectorNodeLabelDoesNotMatch"
            ),
        ]
    );
}

/// The kubelet marks a pod it evicts for node pressure with `DisruptionTarget`
/// (eviction_manager.go synchronize) and a pod it evicts for a local-storage limit with
/// nothing (localStorageEviction): the output shows each pod's conditions so.
#[test]
fn threshold_evictions_carry_disruption_target_and_local_storage_evictions_do_not() {
    let text = format!(
        "config:
  evictionHard: {{memory.available: 500Mi}}
steps:
  - at: 0s
    pods:
      - metadata: {{name: a}}
        spec:
          containers: [{{name: c, image: i}}]
          volumes: [{{name: cache, emptyDir: {{sizeLimit: 1Mi}}}}]
      - metadata: {{name: b}}
        spec: {{containers: [{{name: c, image: i}}]}}
    summary:
      node: {{memory: {{availableBytes: {high}, workingSetBytes: {ws}}}}}
      pods:
        - podRef: {{name: a}}
          volume: [{{name: cache, usedBytes: {over}}}]
        - podRef: {{name: b}}
          memory: {{workingSetBytes: 1000}}
  - at: 10s
    summary:
      node: {{memory: {{availableBytes: {low}, workingSetBytes: {ws}}}}}
      pods:
        - podRef: {{name: b}}
          memory: {{workingSetBytes: 1000}}
",
        high = 4000 * MI,
        low = 100 * MI,
        ws = 4000 * MI,
        over = 2 * MI
    );
    let out = run(&text);
    let storage = out[0]
        .evicted
        .as_ref()
        .expect("a is over its emptyDir limit");
    assert_eq!(
        (storage.pod.as_str(), storage.signal.as_deref()),
        ("default/a", None)
    );
    assert_eq!(
        storage.conditions,
        [],
        "no condition for a local-storage limit"
    );

    let pressure = out[1].evicted.as_ref().expect("memory pressure evicts b");
    assert_eq!(pressure.pod, "default/b");
    assert_eq!(
        pressure.conditions,
        [crate::policy::condition::PodCondition::disruption_target(
            &pressure.message,
            None
        )]
    );
    let line = serde_json::to_value(&out[1]).unwrap_or_else(|e| panic!("serialize: {e}"));
    assert_eq!(
        line["evicted"]["conditions"],
        serde_json::json!([{
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "TerminationByKubelet",
            "message": "The node was low on resource: memory. Threshold quantity: 500Mi, available: 100Mi. ",
            "lastTransitionTime": null,
        }])
    );
    assert_eq!(
        line["evictedAll"][0]["conditions"],
        line["evicted"]["conditions"]
    );
}

/// With the PSINodeCondition gate, the summary's PSI (node memory and I/O, the "pods"
/// system container's) drives the contention conditions step by step, with the KEP's
/// hysteresis; without it the output has no such key.
#[test]
fn psi_in_the_summary_drives_the_contention_conditions() {
    let step = |at: &str, avg10: f64, avg60: f64| {
        format!(
            "  - at: {at}
    summary:
      node:
        memory: {{availableBytes: 4294967296, workingSetBytes: 1073741824,
                  psi: {{full: {{avg10: {avg10}, avg60: {avg60}, avg300: 0}}}}}}
        io: {{psi: {{full: {{avg10: 0, avg60: 0, avg300: 0}}}}}}
        systemContainers:
          - name: pods
            memory: {{psi: {{full: {{avg10: {avg10}, avg60: {avg60}, avg300: 0}}}}}}
"
        )
    };
    let steps = [
        step("0s", 95.0, 91.0),
        step("10s", 50.0, 92.0),
        step("20s", 50.0, 50.0),
    ]
    .concat();
    let gated = format!(
        "config:\n  featureGates: {{PSINodeCondition: true}}\n  kubepodsDiskContentionThreshold: 0\nsteps:\n{steps}"
    );
    let out = run(&gated);
    let status = |i: usize| -> Vec<(String, bool)> {
        out[i]
            .contention_conditions
            .iter()
            .map(|c| (c.condition.as_str().to_string(), c.status))
            .collect()
    };
    let both = |memory: bool| {
        vec![
            ("SystemMemoryContentionPressure".to_string(), memory),
            ("SystemDiskContentionPressure".to_string(), false),
            ("KubepodsMemoryContentionPressure".to_string(), memory),
        ]
    };
    assert_eq!(status(0), both(true), "both averages over 90 %");
    assert_eq!(status(1), both(true), "avg10 eased, avg60 still over: held");
    assert_eq!(status(2), both(false), "avg60 under: cleared");
    let line = serde_json::to_value(&out[0]).expect("serialize");
    assert_eq!(
        line["contentionConditions"][0]["type"],
        "SystemMemoryContentionPressure"
    );
    assert_eq!(line["contentionConditions"][0]["averages"]["avg60"], 91.0);

    let ungated = run(&format!("config: {{}}\nsteps:\n{steps}"));
    let line = serde_json::to_value(&ungated[0]).expect("serialize");
    assert!(line.get("contentionConditions").is_none(), "{line}");
}

/// Memory relief: a pod's page cache is given back before the eviction pass, while the
/// signal is between its threshold and its relief level; what a pod gave is gone for later
/// steps; a hard threshold met is left to eviction.
#[test]
fn memory_relief_takes_reclaimable_page_cache_before_evicting() {
    let text = format!(
        "config:
  evictionHard: {{memory.available: 500Mi}}
  monitor: {{memoryRelief: {{margin: 500Mi}}}}
steps:
  - at: 0s
{TWO_PODS}    reclaimable: {{default/a: 600Mi}}
    summary:
      node: {{memory: {{availableBytes: {short}, workingSetBytes: {ws}}}}}
      pods:
        - podRef: {{name: a}}
          memory: {{workingSetBytes: 2000}}
        - podRef: {{name: b}}
          memory: {{workingSetBytes: 1000}}
  - at: 10s
  - at: 20s
    summary:
      node: {{memory: {{availableBytes: {low}, workingSetBytes: {ws}}}}}
      pods:
        - podRef: {{name: a}}
          memory: {{workingSetBytes: 2000}}
        - podRef: {{name: b}}
          memory: {{workingSetBytes: 1000}}
",
        short = 700 * MI,
        low = 400 * MI,
        ws = 8000 * MI
    );
    let out = run(&text);
    // 700 Mi available, level 1000 Mi: 300 Mi back plus 125 Mi of slack.
    let relief = out[0].memory_relief.as_ref().expect("a relief pass at 0s");
    assert_eq!(relief.signal, "memory.available");
    assert_eq!(relief.relief_level, 1000 * MI);
    assert_eq!(relief.wanted_bytes, 425 << 20);
    assert_eq!(relief.freed_bytes, 425 << 20);
    assert_eq!(relief.pods[0].pod, "default/a");
    assert_eq!(relief.pods[0].qos, "BestEffort");
    assert!(out[0].evicted.is_none(), "{:?}", out[0]);
    // The same shortage again: the pod has 175 Mi left, and gives them.
    let relief = out[1].memory_relief.as_ref().expect("a relief pass at 10s");
    assert_eq!(relief.freed_bytes, 175 << 20);
    // Below the hard threshold: no relief, the eviction as the kubelet's.
    assert!(out[2].memory_relief.is_none(), "{:?}", out[2]);
    assert!(out[2].evicted.is_some(), "{:?}", out[2]);
}

#[test]
fn relief_off_runs_no_pass() {
    let text = format!(
        "config:
  evictionHard: {{memory.available: 500Mi}}
  monitor: {{memoryRelief: {{enabled: false, margin: 500Mi}}}}
steps:
  - at: 0s
{TWO_PODS}    reclaimable: {{default/a: 600Mi}}
    summary:
      node: {{memory: {{availableBytes: {short}, workingSetBytes: {ws}}}}}
",
        short = 700 * MI,
        ws = 8000 * MI
    );
    let out = run(&text);
    assert!(out[0].memory_relief.is_none());
}
