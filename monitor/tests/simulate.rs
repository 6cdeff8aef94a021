//! `monitor simulate` as a user runs it: the built binary on the documented examples
//! (docs/examples/simulate/*, whose expected outputs were worked out from the kubelet's
//! rules in docs/simulate.md) and on bad input (non-zero exit, a message naming the file
//! and the field, never a panic).
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use rstest::rstest;
use serde_json::Value;

fn examples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/examples/simulate")
}

fn monitor(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_monitor"))
        .arg("simulate")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run monitor: {e}"))
}

/// The command line for an example: `--scenario scenario.yaml`, or a snapshot made of the
/// files present (kubelet-config.yaml, pods.*, summary.*, node.*, admit.*).
fn example_args(dir: &Path) -> Vec<String> {
    let scenario = dir.join("scenario.yaml");
    if scenario.exists() {
        return vec!["--scenario".into(), scenario.display().to_string()];
    }
    let mut args = Vec::new();
    for (flag, stem) in [
        ("--config", "kubelet-config"),
        ("--pods", "pods"),
        ("--summary", "summary"),
        ("--node", "node"),
        ("--admit", "admit"),
    ] {
        let found = ["yaml", "json"]
            .iter()
            .map(|ext| dir.join(format!("{stem}.{ext}")))
            .find(|p| p.exists());
        if let Some(path) = found {
            args.push(flag.to_string());
            args.push(path.display().to_string());
        }
    }
    args
}

fn parse_lines(text: &str, what: &str) -> Vec<Value> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .enumerate()
        .map(|(i, l)| {
            serde_json::from_str(l).unwrap_or_else(|e| panic!("{what} line {}: {e}: {l}", i + 1))
        })
        .collect()
}

/// Every key of `expected` must be in `actual` with an equal value; objects compare
/// key-wise the same way (an expected file may leave out what it does not pin down),
/// arrays element-wise with equal lengths.
fn assert_matches(actual: &Value, expected: &Value, path: &str) {
    match (actual, expected) {
        (Value::Object(a), Value::Object(e)) => {
            for (key, e_value) in e {
                let a_value = a
                    .get(key)
                    .unwrap_or_else(|| panic!("{path}.{key}: missing from the output {actual}"));
                assert_matches(a_value, e_value, &format!("{path}.{key}"));
            }
        }
        (Value::Array(a), Value::Array(e)) => {
            assert_eq!(
                a.len(),
                e.len(),
                "{path}: got {actual}, expected {expected}"
            );
            for (i, (a_item, e_item)) in a.iter().zip(e).enumerate() {
                assert_matches(a_item, e_item, &format!("{path}[{i}]"));
            }
        }
        _ => assert_eq!(actual, expected, "{path}"),
    }
}

const STEP_KEYS: [&str; 11] = [
    "admission",
    "at",
    "conditions",
    "evicted",
    "evictedAll",
    "imagesRemoved",
    "nodeReclaim",
    "preempted",
    "ranking",
    "starvedResources",
    "thresholdsMet",
];

#[rstest]
#[case::seed_10gi("seed-10gi")]
#[case::min_reclaim("min-reclaim")]
#[case::soft_grace("soft-grace")]
#[case::memory_ranking("memory-ranking")]
#[case::critical_pod("critical-pod")]
#[case::critical_pod_predicates("critical-pod-predicates")]
#[case::image_reclaim("image-reclaim")]
#[case::admission("admission")]
#[case::stale_stats("stale-stats")]
fn documented_example_prints_the_expected_decisions(#[case] name: &str) {
    let dir = examples_dir().join(name);
    let args = example_args(&dir);
    let arg_refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = monitor(&arg_refs);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{name}: exit {:?}, stderr: {stderr}",
        out.status
    );
    let actual = parse_lines(&String::from_utf8_lossy(&out.stdout), "stdout");
    let expected_text = std::fs::read_to_string(dir.join("expected.jsonl"))
        .unwrap_or_else(|e| panic!("{name}/expected.jsonl: {e}"));
    let expected = parse_lines(&expected_text, "expected.jsonl");
    assert_eq!(
        actual.len(),
        expected.len(),
        "{name}: one output line per step"
    );
    for (i, (a, e)) in actual.iter().zip(&expected).enumerate() {
        let mut keys: Vec<&str> = a
            .as_object()
            .expect("a step is an object")
            .keys()
            .map(String::as_str)
            .collect();
        keys.sort_unstable();
        assert_eq!(
            keys, STEP_KEYS,
            "{name} step {i}: exactly the documented keys"
        );
        assert_matches(a, e, &format!("{name}[{i}]"));
    }
}

#[test]
fn every_documented_example_is_tested() {
    let mut found: Vec<String> = std::fs::read_dir(examples_dir())
        .unwrap_or_else(|e| panic!("examples dir: {e}"))
        .filter_map(|entry| entry.ok())
        .filter(|entry| entry.path().is_dir())
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .collect();
    found.sort();
    let tested = [
        "admission",
        "critical-pod",
        "critical-pod-predicates",
        "image-reclaim",
        "memory-ranking",
        "min-reclaim",
        "seed-10gi",
        "soft-grace",
        "stale-stats",
    ];
    assert_eq!(
        found, tested,
        "add new examples to documented_example_prints_the_expected_decisions"
    );
}

/// Writes `files` into a fresh temp dir and returns it.
fn temp_files(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    dir
}

const GOOD_CONFIG: &str = "evictionHard:\n  memory.available: 500Mi\n";
const GOOD_PODS: &str = r#"{"items": [{"metadata": {"name": "a"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}]}"#;
const GOOD_SUMMARY: &str =
    r#"{"node": {"memory": {"availableBytes": 100, "workingSetBytes": 900}}}"#;

/// A scenario text from its config and steps (literals, so cases stay `&'static str`).
macro_rules! scenario_with {
    ($config:literal, $steps:literal) => {
        concat!("config:\n", $config, "steps:\n", $steps)
    };
}

#[rstest]
#[case::malformed_summary_json(
    &[("config.yaml", GOOD_CONFIG), ("pods.json", GOOD_PODS), ("summary.json", r#"{"node": {"memory": {"availableBytes": "lots"}}}"#)],
    &["--config", "config.yaml", "--pods", "pods.json", "--summary", "summary.json"],
    &["summary.json", "node.memory.availableBytes", "invalid value"]
)]
#[case::truncated_summary_json(
    &[("config.yaml", GOOD_CONFIG), ("pods.json", GOOD_PODS), ("summary.json", r#"{"node": {"#)],
    &["--config", "config.yaml", "--pods", "pods.json", "--summary", "summary.json"],
    &["summary.json", "malformed JSON"]
)]
#[case::malformed_pods_json(
    &[("config.yaml", GOOD_CONFIG), ("pods.json", r#"{"items": [{"metadata": }]}"#), ("summary.json", GOOD_SUMMARY)],
    &["--config", "config.yaml", "--pods", "pods.json", "--summary", "summary.json"],
    &["pods.json"]
)]
#[case::pod_without_a_name(
    &[("config.yaml", GOOD_CONFIG), ("pods.json", r#"{"items": [{"metadata": {"namespace": "x"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}]}"#), ("summary.json", GOOD_SUMMARY)],
    &["--config", "config.yaml", "--pods", "pods.json", "--summary", "summary.json"],
    &["pods.json", "metadata.name"]
)]
#[case::unknown_signal(
    &[("config.yaml", "evictionHard:\n  memory.avail: 500Mi\n"), ("pods.json", GOOD_PODS), ("summary.json", GOOD_SUMMARY)],
    &["--config", "config.yaml", "--pods", "pods.json", "--summary", "summary.json"],
    &["config.yaml", "memory.avail"]
)]
#[case::soft_threshold_without_grace_period(
    &[("config.yaml", "evictionSoft:\n  memory.available: 1Gi\n"), ("pods.json", GOOD_PODS), ("summary.json", GOOD_SUMMARY)],
    &["--config", "config.yaml", "--pods", "pods.json", "--summary", "summary.json"],
    &["config.yaml", "memory.available", "grace"]
)]
#[case::missing_file(
    &[("config.yaml", GOOD_CONFIG), ("pods.json", GOOD_PODS)],
    &["--config", "config.yaml", "--pods", "pods.json", "--summary", "nope.json"],
    &["nope.json"]
)]
#[case::malformed_scenario_yaml(
    &[("s.yaml", "config: {evictionHard: {memory.available: 500Mi}\nsteps: [\n")],
    &["--scenario", "s.yaml"],
    &["s.yaml", "YAML"]
)]
#[case::scenario_step_bad_duration(
    &[("s.yaml", scenario_with!("  evictionHard: {memory.available: 500Mi}\n", "  - at: 10 seconds\n    summary: {}\n"))],
    &["--scenario", "s.yaml"],
    &["s.yaml", "steps[0].at"]
)]
#[case::scenario_inline_pod_without_name(
    &[("s.yaml", scenario_with!("  evictionHard: {memory.available: 500Mi}\n", "  - at: 0s\n    summary: {}\n    pods:\n      - metadata: {namespace: x}\n        spec: {containers: [{name: c, image: i}]}\n"))],
    &["--scenario", "s.yaml"],
    &["s.yaml", "steps[0].pods", "metadata.name"]
)]
#[case::scenario_inline_summary_bad_field(
    &[("s.yaml", scenario_with!("  evictionHard: {memory.available: 500Mi}\n", "  - at: 0s\n    summary: {node: {fs: {capacityBytes: -5}}}\n"))],
    &["--scenario", "s.yaml"],
    &["s.yaml", "steps[0].summary.node.fs.capacityBytes"]
)]
#[case::scenario_unknown_signal_inline(
    &[("s.yaml", scenario_with!("  evictionHard: {disk.available: 1Gi}\n", "  - at: 0s\n    summary: {}\n"))],
    &["--scenario", "s.yaml"],
    &["s.yaml", "config", "disk.available"]
)]
#[case::scenario_misspelt_key(
    &[("s.yaml", scenario_with!("  evictionHard: {memory.available: 500Mi}\n", "  - at: 0s\n    summary: {}\n    sumary: {}\n"))],
    &["--scenario", "s.yaml"],
    &["s.yaml", "steps[0]", "sumary"]
)]
#[case::scenario_bad_timestamp(
    &[("s.yaml", scenario_with!("  evictionHard: {memory.available: 500Mi}\n", "  - at: 0s\n    summary: {node: {memory: {time: yesterday}}}\n"))],
    &["--scenario", "s.yaml"],
    &["s.yaml", "steps[0].summary.node.memory.time", "RFC 3339"]
)]
#[case::scenario_steps_out_of_order(
    &[("s.yaml", scenario_with!("  evictionHard: {memory.available: 500Mi}\n", "  - at: 1m\n    summary: {}\n  - at: 30s\n"))],
    &["--scenario", "s.yaml"],
    &["s.yaml", "steps[1].at"]
)]
#[case::scenario_missing_referenced_file(
    &[("s.yaml", scenario_with!("  evictionHard: {memory.available: 500Mi}\n", "  - at: 0s\n    summary: gone.json\n"))],
    &["--scenario", "s.yaml"],
    &["gone.json"]
)]
#[case::node_list_of_three_nodes(
    &[("config.yaml", GOOD_CONFIG), ("pods.json", GOOD_PODS), ("summary.json", GOOD_SUMMARY),
      ("node.json", r#"{"apiVersion": "v1", "kind": "List", "items": [{"kind": "Node", "metadata": {"name": "a"}}, {"kind": "Node", "metadata": {"name": "b"}}, {"kind": "Node", "metadata": {"name": "c"}}]}"#)],
    &["--config", "config.yaml", "--pods", "pods.json", "--summary", "summary.json", "--node", "node.json"],
    &["node.json: items: a List with 3 nodes; pass one Node (kubectl get node NAME -o json)"]
)]
#[case::node_list_without_nodes(
    &[("config.yaml", GOOD_CONFIG), ("pods.json", GOOD_PODS), ("summary.json", GOOD_SUMMARY),
      ("node.json", r#"{"apiVersion": "v1", "kind": "NodeList", "items": []}"#)],
    &["--config", "config.yaml", "--pods", "pods.json", "--summary", "summary.json", "--node", "node.json"],
    &["node.json: items: a NodeList with no nodes"]
)]
#[case::node_file_holding_a_pod(
    &[("config.yaml", GOOD_CONFIG), ("pods.json", GOOD_PODS), ("summary.json", GOOD_SUMMARY),
      ("node.json", r#"{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"}}"#)],
    &["--config", "config.yaml", "--pods", "pods.json", "--summary", "summary.json", "--node", "node.json"],
    &["node.json: kind: \"Pod\" is not a Node"]
)]
#[case::node_file_holding_a_pod_list(
    &[("config.yaml", GOOD_CONFIG), ("pods.json", GOOD_PODS), ("summary.json", GOOD_SUMMARY),
      ("kubectl-pods.json", r#"{"apiVersion": "v1", "kind": "List", "items": [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"}}]}"#)],
    &["--config", "config.yaml", "--pods", "pods.json", "--summary", "summary.json", "--node", "kubectl-pods.json"],
    &["kubectl-pods.json: items[0].kind: \"Pod\" is not a Node"]
)]
#[case::scenario_inline_node_list_of_two(
    &[("s.yaml", scenario_with!("  evictionHard: {memory.available: 500Mi}\n", "  - at: 0s\n    summary: {}\n    node: {kind: NodeList, items: [{metadata: {name: a}}, {metadata: {name: b}}]}\n"))],
    &["--scenario", "s.yaml"],
    &["s.yaml: steps[0].node.items: a NodeList with 2 nodes"]
)]
#[case::scenario_node_file_of_another_kind(
    &[("s.yaml", scenario_with!("  evictionHard: {memory.available: 500Mi}\n", "  - at: 0s\n    summary: {}\n    node: nodes.json\n")),
      ("nodes.json", r#"{"kind": "PodList", "items": []}"#)],
    &["--scenario", "s.yaml"],
    &["nodes.json: kind: \"PodList\" is not a Node"]
)]
#[case::no_inputs(&[], &[], &["--scenario"])]
fn bad_input_exits_non_zero_naming_file_and_field(
    #[case] files: &[(&str, &str)],
    #[case] args: &[&str],
    #[case] must_mention: &[&str],
) {
    let dir = temp_files(files);
    let args: Vec<String> = args
        .iter()
        .map(|a| {
            if a.ends_with(".json") || a.ends_with(".yaml") {
                dir.path().join(a).display().to_string()
            } else {
                a.to_string()
            }
        })
        .collect();
    let arg_refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = monitor(&arg_refs);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(1),
        "must fail cleanly (exit 1, not a panic's 101); stderr: {stderr}"
    );
    assert!(!stderr.contains("panicked"), "no panic: {stderr}");
    for needle in must_mention {
        assert!(
            stderr.contains(needle),
            "stderr should mention {needle:?}: {stderr}"
        );
    }
    assert!(
        out.stdout.is_empty(),
        "nothing printed on stdout for rejected input"
    );
}

/// `monitor.hardEvictionGracePeriodSeconds` reaches the policy: 0 by default, 1 as the
/// kubelet >= 1.31 passes; anything else is refused naming the file and the key.
#[rstest]
#[case("", Some(0))]
#[case("monitor:\n  hardEvictionGracePeriodSeconds: 0\n", Some(0))]
#[case("monitor:\n  hardEvictionGracePeriodSeconds: 1\n", Some(1))]
#[case("monitor:\n  hardEvictionGracePeriodSeconds: 30\n", None)]
fn the_hard_eviction_grace_period_setting(#[case] monitor_block: &str, #[case] grace: Option<i64>) {
    let config = format!("{GOOD_CONFIG}{monitor_block}");
    let dir = temp_files(&[
        ("config.yaml", &config),
        ("pods.json", GOOD_PODS),
        ("summary.json", GOOD_SUMMARY),
    ]);
    let path = |name: &str| dir.path().join(name).display().to_string();
    let (config, pods, summary) = (path("config.yaml"), path("pods.json"), path("summary.json"));
    let out = monitor(&["--config", &config, "--pods", &pods, "--summary", &summary]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    match grace {
        Some(seconds) => {
            assert!(out.status.success(), "stderr: {stderr}");
            let steps = parse_lines(&String::from_utf8_lossy(&out.stdout), "stdout");
            assert_eq!(steps[0]["evicted"]["gracePeriodSeconds"], seconds);
        }
        None => {
            assert_eq!(out.status.code(), Some(1), "stderr: {stderr}");
            for needle in ["config.yaml", "hardEvictionGracePeriodSeconds", "0 or 1"] {
                assert!(stderr.contains(needle), "{needle:?} in {stderr}");
            }
        }
    }
}

/// A one-node List (what `kubectl get nodes -o json` prints on a one-node cluster) is the
/// Node: its allocatable (1536Mi, where the summary alone would give about 5Gi) makes the
/// critical pod 512Mi short, and its name decides the NodeName check. A critical pod short
/// of memory preempts `default/a`; bound to another node it is rejected and preempts
/// nobody, since evicting pods cannot fix the node name.
#[rstest]
#[case::bound_here(Some("worker-1"), true, "", &["default/a"])]
#[case::not_bound(None, true, "", &["default/a"])]
#[case::bound_elsewhere(Some("worker-2"), false, "NodeName", &[])]
fn a_node_list_of_one_node_is_used_for_admission(
    #[case] node_name: Option<&str>,
    #[case] admitted: bool,
    #[case] reason: &str,
    #[case] preempted: &[&str],
) {
    let node_list = r#"{"apiVersion": "v1", "kind": "List", "items": [{"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "worker-1"},
        "status": {"allocatable": {"cpu": "2", "memory": "1536Mi", "pods": "110"}}}]}"#;
    let running = r#"{"kind": "List", "items": [{"metadata": {"name": "a"}, "spec": {"containers":
        [{"name": "c", "image": "i", "resources": {"requests": {"memory": "1Gi"}}}]}}]}"#;
    let bound = node_name.map_or(String::new(), |n| format!(r#""nodeName": "{n}","#));
    let admit = format!(
        r#"{{"kind": "List", "items": [{{"metadata": {{"name": "agent", "namespace": "kube-system"}},
        "spec": {{{bound} "priority": 2000001000, "priorityClassName": "system-node-critical",
        "containers": [{{"name": "c", "image": "i", "resources": {{"requests": {{"memory": "1Gi"}}}}}}]}}}}]}}"#
    );
    let summary =
        r#"{"node": {"memory": {"availableBytes": 4294967296, "workingSetBytes": 1073741824}}}"#;
    let dir = temp_files(&[
        ("config.yaml", "evictionHard:\n  memory.available: 100Mi\n"),
        ("pods.json", running),
        ("summary.json", summary),
        ("node.json", node_list),
        ("admit.json", &admit),
    ]);
    let path = |name: &str| dir.path().join(name).display().to_string();
    let args = [
        "--config".to_string(),
        path("config.yaml"),
        "--pods".into(),
        path("pods.json"),
        "--summary".into(),
        path("summary.json"),
        "--node".into(),
        path("node.json"),
        "--admit".into(),
        path("admit.json"),
    ];
    let arg_refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = monitor(&arg_refs);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stderr: {stderr}");
    let steps = parse_lines(&String::from_utf8_lossy(&out.stdout), "stdout");
    let admission = &steps[0]["admission"][0];
    assert_eq!(admission["pod"], "kube-system/agent");
    assert_eq!(admission["admitted"], admitted, "{admission}");
    assert_eq!(admission["reason"], reason, "{admission}");
    assert_eq!(steps[0]["preempted"], serde_json::json!(preempted));
}
