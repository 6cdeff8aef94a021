use std::time::Duration;

use rstest::rstest;

use super::*;
use crate::policy::quantity::QuantityOrPercent;
use crate::policy::signal::Threshold;

const ORIGIN: &str = "/etc/kubernetes/kubelet.yaml";

fn load(text: &str) -> (KubeletConfig, Vec<ConfigWarning>) {
    load_kubelet_config(text, ORIGIN).unwrap_or_else(|e| panic!("should load: {e}\n{text}"))
}

fn load_err(text: &str) -> String {
    match load_kubelet_config(text, ORIGIN) {
        Ok((config, _)) => panic!(
            "should be rejected:\n{text}\ngot {:?}",
            config.eviction.thresholds
        ),
        Err(e) => e.to_string(),
    }
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

fn q(text: &str) -> QuantityOrPercent {
    crate::policy::quantity::parse_quantity_or_percent(text).unwrap()
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn thresholds_of(config: &KubeletConfig, signal: Signal) -> Vec<Threshold> {
    config
        .eviction
        .thresholds
        .iter()
        .filter(|t| t.signal == signal)
        .copied()
        .collect()
}

#[test]
fn empty_document_gives_kubelet_defaults() {
    let (config, warnings) = load("");
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(config, default_kubelet_config());
    assert_eq!(
        config.eviction.thresholds,
        vec![
            Threshold::hard(Signal::MemoryAvailable, q("100Mi")),
            Threshold::hard(Signal::NodeFsAvailable, q("10%")),
            Threshold::hard(Signal::NodeFsInodesFree, q("5%")),
            Threshold::hard(Signal::ImageFsAvailable, q("15%")),
            // kubernetes#121834 (1.30): the fifth Linux default
            Threshold::hard(Signal::ImageFsInodesFree, q("5%")),
            // node allocatable is enforced on pods by default
            Threshold::hard(Signal::AllocatableMemoryAvailable, q("100Mi")),
        ]
    );
    assert_eq!(config.eviction.pressure_transition_period, secs(300));
    assert_eq!(config.eviction.max_pod_grace_period_seconds, 0);
    assert_eq!(config.image_gc, ImageGcPolicy::default());
    assert_eq!(
        (
            config.image_gc.high_threshold_percent,
            config.image_gc.low_threshold_percent
        ),
        (85, 80)
    );
    assert_eq!(config.image_gc.min_age, secs(120));
    assert_eq!(config.housekeeping_interval, secs(10));
    assert_eq!(config.max_pods, 110);
    assert_eq!(config.enforce_node_allocatable, vec!["pods".to_string()]);
}

#[test]
fn full_eviction_settings() {
    let (config, warnings) = load(
        r#"
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
evictionHard:
  memory.available: "500Mi"
  nodefs.available: "1Gi"
evictionSoft:
  memory.available: "1Gi"
evictionSoftGracePeriod:
  memory.available: "1m30s"
evictionMinimumReclaim:
  nodefs.available: "500Mi"
evictionPressureTransitionPeriod: "30s"
evictionMaxPodGracePeriod: 60
imageGCHighThresholdPercent: 90
imageGCLowThresholdPercent: 70
imageMinimumGCAge: "5m0s"
imageMaximumGCAge: "168h"
systemReserved:
  memory: "1.5Gi"
  cpu: "500m"
kubeReserved:
  memory: 512Mi
qosReserved:
  memory: "50%"
housekeepingInterval: "2s"
staticPodPath: /etc/kubernetes/manifests
cgroupRoot: /kubepods
enforceNodeAllocatable: [pods, system-reserved]
maxPods: 50
podPidsLimit: 4096
"#,
    );
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(
        config.eviction.thresholds,
        vec![
            Threshold::hard(Signal::MemoryAvailable, q("500Mi")),
            Threshold::hard(Signal::NodeFsAvailable, q("1Gi")).with_min_reclaim(q("500Mi")),
            Threshold::soft(Signal::MemoryAvailable, q("1Gi"), secs(90)),
            Threshold::hard(Signal::AllocatableMemoryAvailable, q("500Mi")),
        ],
        "evictionHard replaces every default"
    );
    assert_eq!(config.eviction.pressure_transition_period, secs(30));
    assert_eq!(config.eviction.max_pod_grace_period_seconds, 60);
    assert_eq!(
        config.image_gc,
        ImageGcPolicy {
            high_threshold_percent: 90,
            low_threshold_percent: 70,
            min_age: secs(300),
            max_age: Some(secs(168 * 3600)),
        }
    );
    assert_eq!(
        config.system_reserved["memory"],
        parse_quantity("1.5Gi").unwrap()
    );
    assert_eq!(
        config.system_reserved["cpu"],
        parse_quantity("500m").unwrap()
    );
    assert_eq!(
        config.kube_reserved["memory"],
        parse_quantity("512Mi").unwrap()
    );
    assert_eq!(config.qos_reserved["memory"], 0.5);
    assert_eq!(config.housekeeping_interval, secs(2));
    assert_eq!(
        config.static_pod_path.as_deref(),
        Some("/etc/kubernetes/manifests")
    );
    assert_eq!(config.cgroup_root, "/kubepods");
    assert_eq!(config.max_pods, 50);
    assert_eq!(config.pod_pids_limit, Some(4096));
}

#[test]
fn json_is_yaml() {
    let (config, _) = load(
        r#"{"kind":"KubeletConfiguration","evictionHard":{"memory.available":"200Mi"},"enforceNodeAllocatable":[]}"#,
    );
    assert_eq!(
        config.eviction.thresholds,
        vec![Threshold::hard(Signal::MemoryAvailable, q("200Mi"))]
    );
}

#[test]
fn merge_default_eviction_settings_keeps_unset_defaults() {
    let (config, _) = load(
        "mergeDefaultEvictionSettings: true\nenforceNodeAllocatable: []\nevictionHard:\n  memory.available: 1Gi\n  imagefs.available: 0%\n",
    );
    assert_eq!(
        config.eviction.thresholds,
        vec![
            Threshold::hard(Signal::MemoryAvailable, q("1Gi")),
            Threshold::hard(Signal::NodeFsAvailable, q("10%")),
            Threshold::hard(Signal::NodeFsInodesFree, q("5%")),
            Threshold::hard(Signal::ImageFsInodesFree, q("5%")),
        ],
        "given values win, 0% switches the imagefs.available default off, other defaults stay"
    );
}

#[rstest]
#[case("0%")]
#[case("100%")]
fn zero_and_full_percent_are_ignored(#[case] value: &str) {
    let (config, _) = load(&format!(
        "enforceNodeAllocatable: []\nevictionHard:\n  memory.available: 1Gi\n  nodefs.available: \"{value}\"\n"
    ));
    assert_eq!(
        config.eviction.thresholds,
        vec![Threshold::hard(Signal::MemoryAvailable, q("1Gi"))]
    );
}

// kubelet: helpers_test.go TestParseThresholdConfig "disable via 0%" and "disable via 100%"
// (hard and soft at the value, no grace period: no error, no threshold).
#[rstest]
#[case("0%")]
#[case("100%")]
fn ignored_soft_thresholds_need_no_grace_period(#[case] value: &str) {
    let (config, warnings) = load(&format!(
        "evictionHard:\n  memory.available: \"{value}\"\nevictionSoft:\n  memory.available: \"{value}\"\n"
    ));
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(config.eviction.thresholds, vec![]);
    // The same through the kubelet's flags.
    let (config, _) = load_kubelet_config_with_flags(
        "",
        ORIGIN,
        &args(&[
            "--eviction-hard=memory.available<1Gi",
            &format!("--eviction-soft=memory.available<{value}"),
            "--enforce-node-allocatable=",
        ]),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        config.eviction.thresholds,
        vec![Threshold::hard(Signal::MemoryAvailable, q("1Gi"))]
    );
}

// kubelet: helpers.go ParseThresholdConfig looks grace periods up, and attaches minimum
// reclaims, only for the thresholds it kept: for an ignored one both are unused, not errors.
#[test]
fn grace_period_and_min_reclaim_of_an_ignored_threshold_are_unused() {
    let (config, warnings) = load(
        "enforceNodeAllocatable: []\nevictionHard:\n  memory.available: 0%\n  nodefs.available: 1Gi\nevictionSoft:\n  memory.available: 100%\nevictionSoftGracePeriod:\n  memory.available: 1m\nevictionMinimumReclaim:\n  memory.available: 100Mi\n",
    );
    assert_eq!(
        config.eviction.thresholds,
        vec![Threshold::hard(Signal::NodeFsAvailable, q("1Gi"))]
    );
    // Loads, but says why the minimum reclaim does nothing.
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert_eq!(warnings[0].key, "evictionMinimumReclaim.memory.available");
    assert!(warnings[0].message.contains("0% or 100%"), "{warnings:?}");
}

// kubelet: helpers.go parseGracePeriods and parseMinimumReclaims check every entry, used or
// not (TestParseThresholdConfig "soft-negative-grace-period", "negative-reclaim").
#[rstest]
#[case(
    "evictionSoft:\n  memory.available: 0%\nevictionSoftGracePeriod:\n  memory.available: -30s\n",
    &["evictionSoftGracePeriod", "memory.available", "-30s", "negative"]
)]
#[case(
    "evictionHard:\n  memory.available: 0%\nevictionMinimumReclaim:\n  memory.available: -300Mi\n",
    &["evictionMinimumReclaim", "memory.available", "-300Mi"]
)]
fn entries_of_an_ignored_threshold_are_still_checked(#[case] text: &str, #[case] words: &[&str]) {
    let message = load_err(text);
    for word in words.iter().chain(&[ORIGIN]) {
        assert!(
            message.contains(word),
            "{message:?} should contain {word:?}"
        );
    }
}

// kubelet: helpers.go parseThresholdStatement ignores the exact texts "0%" and "100%" only;
// "0.0%" is a real threshold of 0 (never met) and, soft, needs its grace period.
#[test]
fn only_the_exact_texts_are_ignored() {
    let (config, _) = load("enforceNodeAllocatable: []\nevictionHard:\n  memory.available: 0.0%\n");
    assert_eq!(
        config.eviction.thresholds,
        vec![Threshold::hard(Signal::MemoryAvailable, q("0%"))]
    );
    let message = load_err("evictionSoft:\n  memory.available: 0.0%\n");
    assert!(message.contains("grace period"), "{message}");
}

// kubelet: helpers_test.go TestParseThresholdConfig "all memory eviction values": a minimum
// reclaim of exactly "0" is valid (only a threshold must be positive).
#[test]
fn zero_min_reclaim_is_valid() {
    let (config, warnings) = load(
        "enforceNodeAllocatable: []\nevictionHard:\n  memory.available: 150Mi\nevictionSoft:\n  memory.available: 300Mi\nevictionSoftGracePeriod:\n  memory.available: 30s\nevictionMinimumReclaim:\n  memory.available: \"0\"\n",
    );
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(
        config.eviction.thresholds,
        vec![
            Threshold::hard(Signal::MemoryAvailable, q("150Mi")).with_min_reclaim(q("0")),
            Threshold::soft(Signal::MemoryAvailable, q("300Mi"), secs(30)).with_min_reclaim(q("0")),
        ]
    );
}

#[test]
fn null_maps_are_absent() {
    let (config, _) = load("evictionHard: null\nevictionMinimumReclaim: null\n");
    assert_eq!(
        config.eviction.thresholds,
        default_kubelet_config().eviction.thresholds
    );
}

#[test]
fn zero_durations_mean_the_default() {
    let (config, _) =
        load("evictionPressureTransitionPeriod: 0s\nimageMinimumGCAge: \"0\"\nmaxPods: 0\n");
    assert_eq!(config.eviction.pressure_transition_period, secs(300));
    assert_eq!(config.image_gc.min_age, secs(120));
    assert_eq!(config.max_pods, 110);
}

#[test]
fn real_kubelet_config_loads_with_warnings_for_unknown_keys_and_keys_not_followed() {
    let (config, warnings) = load(
        r#"
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true, cacheTTL: 2m0s}
authorization: {mode: Webhook}
cgroupDriver: systemd
clusterDNS: [10.96.0.10]
clusterDomain: cluster.local
rotateCertificates: true
featureGates: {KubeletSeparateDiskGC: true}
logging: {format: text}
evictionHrad: {memory.available: 1Gi}
monitor:
  sources: [memcg, psi]
"#,
    );
    // The typo, and the two keys the agent does not follow as the kubelet does.
    assert_eq!(
        warnings.iter().map(|w| w.key.as_str()).collect::<Vec<_>>(),
        ["cgroupDriver", "logging", "evictionHrad"],
        "{warnings:?}"
    );
    assert!(warnings[2].to_string().contains(ORIGIN), "{}", warnings[2]);
    let monitor = config.monitor.expect("the monitor key is kept");
    assert!(monitor.get("sources").is_some(), "{monitor:?}");
}

#[rstest]
// (document, words the error must contain: origin is always checked)
#[case("apiVersion: kubelet.config.k8s.io/v1\n", &["apiVersion", "kubelet.config.k8s.io/v1"])]
#[case("kind: Pod\n", &["kind", "Pod"])]
#[case("evictionHard:\n  memory.free: 1Gi\n", &["evictionHard", "memory.free"])]
#[case("evictionMinimumReclaim:\n  disk.available: 1Gi\n", &["evictionMinimumReclaim", "disk.available"])]
#[case("evictionHard:\n  memory.available: \">1Gi\"\n", &["evictionHard", "memory.available", ">1Gi", "only `<`"])]
#[case("evictionHard:\n  memory.available: \"<=1Gi\"\n", &["evictionHard", "<=1Gi", "only `<`"])]
#[case("evictionHard:\n  memory.available: -1Gi\n", &["evictionHard", "memory.available", "-1Gi", "positive"])]
#[case("evictionHard:\n  memory.available: \"0\"\n", &["evictionHard", "memory.available", "\"0\"", "positive"])]
// kubelet: helpers.go parseThresholdStatement: a quantity must be positive, soft or hard
#[case(
    "evictionSoft:\n  memory.available: \"0\"\nevictionSoftGracePeriod:\n  memory.available: 30s\n",
    &["evictionSoft", "memory.available", "\"0\"", "positive"]
)]
#[case("evictionHard:\n  nodefs.available: 101%\n", &["evictionHard", "nodefs.available", "101%", "<= 100%"])]
#[case("evictionHard:\n  nodefs.available: -5%\n", &["evictionHard", "nodefs.available", "-5%", ">= 0%"])]
#[case("evictionHard:\n  memory.available: 1Gb\n", &["evictionHard", "memory.available", "1Gb"])]
// kubelet: helpers_test.go TestParseThresholdConfig "soft-no-grace-period"
#[case("evictionSoft:\n  memory.available: 1Gi\n", &["evictionSoft", "memory.available", "grace period"])]
#[case(
    "evictionSoft:\n  memory.available: 1Gi\nevictionSoftGracePeriod:\n  memory.available: 1m\n  nodefs.available: 30s\n",
    &["evictionSoftGracePeriod", "nodefs.available", "30s", "no soft threshold"]
)]
#[case(
    "evictionSoft:\n  memory.available: 1Gi\nevictionSoftGracePeriod:\n  memory.available: 90\n",
    &["evictionSoftGracePeriod", "memory.available", "90"]
)]
#[case(
    "evictionSoft:\n  memory.available: 1Gi\nevictionSoftGracePeriod:\n  memory.available: 1 minute\n",
    &["evictionSoftGracePeriod", "memory.available", "1 minute"]
)]
#[case("evictionHard:\n  memory.available: 1Gi\n  memory.available: 2Gi\n", &["memory.available"])]
#[case("evictionMinimumReclaim:\n  memory.available: -1Mi\n", &["evictionMinimumReclaim", "memory.available", "-1Mi"])]
#[case("evictionMinimumReclaim:\n  memory.available: 0%\n", &["evictionMinimumReclaim", "memory.available", "0%", "positive"])]
#[case("imageGCLowThresholdPercent: 90\n", &["imageGCLowThresholdPercent", "90", "imageGCHighThresholdPercent", "85"])]
#[case("imageGCHighThresholdPercent: 80\n", &["imageGCLowThresholdPercent", "80"])]
#[case("imageGCHighThresholdPercent: 101\n", &["imageGCHighThresholdPercent", "101"])]
#[case("imageGCHighThresholdPercent: high\n", &["imageGCHighThresholdPercent", "high"])]
#[case("imageMaximumGCAge: 1m\n", &["imageMaximumGCAge", "1m0s", "imageMinimumGCAge", "2m0s"])]
#[case("evictionPressureTransitionPeriod: 5 minutes\n", &["evictionPressureTransitionPeriod", "5 minutes"])]
#[case("evictionPressureTransitionPeriod: -5m\n", &["evictionPressureTransitionPeriod", "-5m", "negative"])]
#[case("evictionMaxPodGracePeriod: 2147483648\n", &["evictionMaxPodGracePeriod", "2147483648", "out of range"])]
#[case("evictionMaxPodGracePeriod: -2147483649\n", &["evictionMaxPodGracePeriod", "-2147483649", "out of range"])]
#[case("evictionMaxPodGracePeriod: soon\n", &["evictionMaxPodGracePeriod", "soon"])]
#[case("housekeepingInterval: 0s\n", &["housekeepingInterval", "0s", "positive"])]
#[case("systemReserved:\n  memory: 1.5Gig\n", &["systemReserved", "memory", "1.5Gig"])]
#[case("kubeReserved:\n  memory: -1Gi\n", &["kubeReserved", "memory", "-1Gi", "negative"])]
#[case("qosReserved:\n  cpu: 50%\n", &["qosReserved", "cpu", "50%"])]
#[case("qosReserved:\n  memory: 150%\n", &["qosReserved", "memory", "150%"])]
#[case("enforceNodeAllocatable: [pods, everything]\n", &["enforceNodeAllocatable", "everything"])]
#[case("evictionHard: [memory.available]\n", &["evictionHard", "list"])]
#[case("- just\n- a list\n", &["mapping"])]
#[case("evictionHard: {memory.available: 1Gi\n", &["YAML"])]
fn rejected(#[case] text: &str, #[case] words: &[&str]) {
    let message = load_err(text);
    assert!(
        message.contains(ORIGIN),
        "{message:?} should name the origin"
    );
    for word in words {
        assert!(
            message.contains(word),
            "{message:?} should contain {word:?}"
        );
    }
}

#[test]
fn containerfs_thresholds_warn() {
    let (config, warnings) = load("evictionHard:\n  containerfs.available: 10%\n");
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].key.contains("containerfs.available"),
        "{warnings:?}"
    );
    // kept in the list: the eviction manager replaces it by the nodefs/imagefs mirror
    assert_eq!(
        thresholds_of(&config, Signal::ContainerFsAvailable).len(),
        1
    );
}

#[test]
fn min_reclaim_without_threshold_warns() {
    let (_, warnings) = load("evictionMinimumReclaim:\n  pid.available: 100\n");
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].key.contains("pid.available"), "{warnings:?}");
}

#[test]
fn flags_override_the_file() {
    let (config, warnings) = load_kubelet_config_with_flags(
        "evictionHard:\n  memory.available: 100Mi\nevictionSoft:\n  memory.available: 2Gi\n",
        ORIGIN,
        &args(&[
            "--eviction-hard=memory.available<500Mi,nodefs.available<10%",
            "--eviction-soft-grace-period",
            "memory.available=1m30s",
            "--eviction-minimum-reclaim=nodefs.available=500Mi",
            "--eviction-max-pod-grace-period=45",
            "--eviction-pressure-transition-period",
            "1m",
            "--image-gc-high-threshold=70",
            "--image-gc-low-threshold",
            "60",
            "--minimum-image-ttl-duration=10m",
            "--minimum-container-ttl-duration=30s",
            "--maximum-dead-containers-per-container=2",
            "--maximum-dead-containers",
            "100",
            "--system-reserved=memory=1.5Gi,cpu=500m",
            "--kube-reserved",
            "memory=256Mi",
            "--housekeeping-interval=1s",
            "--enforce-node-allocatable=",
            "--kubeconfig",
            "/etc/kubernetes/kubelet.conf",
            "--v=2",
        ]),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        config.eviction.thresholds,
        vec![
            Threshold::hard(Signal::MemoryAvailable, q("500Mi")),
            Threshold::hard(Signal::NodeFsAvailable, q("10%")).with_min_reclaim(q("500Mi")),
            // the file's soft threshold, with the grace period only the flags give
            Threshold::soft(Signal::MemoryAvailable, q("2Gi"), secs(90)),
        ]
    );
    assert_eq!(config.eviction.max_pod_grace_period_seconds, 45);
    assert_eq!(config.eviction.pressure_transition_period, secs(60));
    assert_eq!(
        (
            config.image_gc.high_threshold_percent,
            config.image_gc.low_threshold_percent
        ),
        (70, 60)
    );
    assert_eq!(config.image_gc.min_age, secs(600));
    assert_eq!(
        config.container_gc,
        ContainerGcPolicy {
            min_age: secs(30),
            max_per_pod_container: 2,
            max_containers: 100,
        }
    );
    assert_eq!(
        config.system_reserved["memory"],
        parse_quantity("1.5Gi").unwrap()
    );
    assert_eq!(
        config.system_reserved["cpu"],
        parse_quantity("500m").unwrap()
    );
    assert_eq!(
        config.kube_reserved["memory"],
        parse_quantity("256Mi").unwrap()
    );
    assert_eq!(config.housekeeping_interval, secs(1));
    let keys: Vec<&str> = warnings.iter().map(|w| w.key.as_str()).collect();
    assert_eq!(
        keys,
        vec!["--kubeconfig", "--v"],
        "unknown flags warn, their values are skipped"
    );
}

#[test]
fn apply_flags_on_a_loaded_config() {
    let (mut config, _) = load("");
    let warnings = apply_flags(
        &mut config,
        &args(&[
            "--eviction-hard=memory.available<1Gi",
            "--enforce-node-allocatable=none",
        ]),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(
        config.eviction.thresholds,
        vec![Threshold::hard(Signal::MemoryAvailable, q("1Gi"))]
    );
}

#[rstest]
#[case(&["--eviction-hard=memory.available>1Gi"], &["--eviction-hard", "memory.available>1Gi", "only `<`"])]
#[case(&["--eviction-hard=memory.available<=1Gi"], &["--eviction-hard", "memory.available", "only `<`"])]
#[case(&["--eviction-hard=memory.available=1Gi"], &["--eviction-hard", "memory.available=1Gi", "only `<`"])]
#[case(&["--eviction-hard=memory.available<1Gi,memory.available<2Gi"], &["--eviction-hard", "memory.available", "more than once"])]
#[case(&["--eviction-hard=mem.available<1Gi"], &["--eviction-hard", "mem.available"])]
#[case(&["--eviction-soft=memory.available<1Gi"], &["--eviction-soft", "memory.available", "grace period"])]
#[case(&["--eviction-soft-grace-period=memory.available=soon"], &["--eviction-soft-grace-period", "soon"])]
#[case(&["--eviction-max-pod-grace-period=4294967296"], &["--eviction-max-pod-grace-period", "4294967296", "out of range"])]
#[case(&["--eviction-max-pod-grace-period=ten"], &["--eviction-max-pod-grace-period", "ten"])]
#[case(&["--image-gc-low-threshold=90"], &["imageGCLowThresholdPercent", "90", "85"])]
#[case(&["--system-reserved=memory"], &["--system-reserved", "memory"])]
#[case(&["--housekeeping-interval"], &["--housekeeping-interval", "missing value"])]
#[case(&["--minimum-image-ttl-duration=2x"], &["--minimum-image-ttl-duration", "2x"])]
fn rejected_flags(#[case] list: &[&str], #[case] words: &[&str]) {
    let err = load_kubelet_config_with_flags("", ORIGIN, &args(list))
        .expect_err("should be rejected")
        .to_string();
    for word in words {
        assert!(err.contains(word), "{err:?} should contain {word:?}");
    }
}

// The kubelet types evictionMaxPodGracePeriod int32 and validates nothing more: a
// negative value loads (its soft evictions then get no grace; see the eviction policy).
#[rstest]
#[case::minus_one("evictionMaxPodGracePeriod: -1\n", -1)]
#[case::int32_min("evictionMaxPodGracePeriod: -2147483648\n", i64::from(i32::MIN))]
#[case::int32_max("evictionMaxPodGracePeriod: 2147483647\n", i64::from(i32::MAX))]
fn max_pod_grace_period_takes_any_int32(#[case] text: &str, #[case] expected: i64) {
    let (config, _) = load(text);
    assert_eq!(config.eviction.max_pod_grace_period_seconds, expected);
}

#[test]
fn a_negative_max_pod_grace_period_flag_loads() {
    let (config, _) =
        load_kubelet_config_with_flags("", ORIGIN, &args(&["--eviction-max-pod-grace-period=-5"]))
            .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(config.eviction.max_pod_grace_period_seconds, -5);
}

#[test]
fn seed_node_allocatable() {
    // 10Gi node, memory.available<500Mi, system-reserved 1.5Gi: 10240 - 1536 - 500 = 8204Mi.
    let (config, _) =
        load("evictionHard:\n  memory.available: 500Mi\nsystemReserved:\n  memory: 1.5Gi\n");
    let capacity = 10i64 << 30;
    assert_eq!(config.eviction_reserved("memory", capacity), 500 << 20);
    assert_eq!(config.allocatable("memory", capacity), 8204 << 20);
    assert_eq!(config.allocatable("cpu", 4000), 4000);
}

#[test]
fn feature_gates_come_from_the_file_and_the_flag_over_it() {
    let (config, warnings) =
        load("featureGates: {HugepageAwareEviction: false, SomeOtherGate: true}\n");
    assert!(warnings.is_empty(), "{warnings:?}");
    assert!(!config.feature_gate(HUGEPAGE_AWARE_EVICTION));
    let mut flagged = config.clone();
    apply_flags(
        &mut flagged,
        &["--feature-gates=HugepageAwareEviction=true".to_string()],
    )
    .unwrap();
    assert!(flagged.feature_gate(HUGEPAGE_AWARE_EVICTION));
    assert_eq!(flagged.feature_gates.get("SomeOtherGate"), Some(&true));
    // On by default, as in the kubelet since 1.36.
    assert!(load("").0.feature_gate(HUGEPAGE_AWARE_EVICTION));
}

#[rstest]
#[case::file("featureGates: {HugepageAwareEviction: sometimes}\n", &[])]
#[case::file_not_a_map("featureGates: [HugepageAwareEviction]\n", &[])]
#[case::flag("", &["--feature-gates=HugepageAwareEviction=sometimes"])]
fn a_feature_gate_that_is_not_a_boolean_is_refused_with_its_name(
    #[case] file: &str,
    #[case] flags: &[&str],
) {
    let flags: Vec<String> = flags.iter().map(|f| f.to_string()).collect();
    let err = load_kubelet_config_with_flags(file, "k.yaml", &flags)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("featureGates") || err.contains("--feature-gates"),
        "{err}"
    );
    assert!(
        err.contains("HugepageAwareEviction") || err.contains("mapping"),
        "{err}"
    );
}

// kubelet: nodestatus MachineInfo takes each hugepages-<size> capacity out of allocatable
// memory, never below zero.
#[rstest]
#[case(0, 8 << 30)]
#[case(1 << 30, 7 << 30)]
#[case(100 << 30, 0)]
fn allocatable_memory_leaves_out_hugepages(#[case] hugepages: i64, #[case] expected: i64) {
    let (config, _) = load("systemReserved: {memory: 1948Mi}\n");
    // 10Gi − 1948Mi reserved − 100Mi hard threshold = 8Gi.
    assert_eq!(config.allocatable_memory(10 << 30, hugepages), expected);
}

#[test]
fn contention_thresholds_load_and_apply_only_with_their_gate() {
    use crate::policy::contention::ContentionCondition;
    let text = "systemMemoryContentionThreshold: 0.5\nkubepodsDiskContentionThreshold: 0\n";
    let (config, warnings) = load(text);
    assert!(warnings.is_empty(), "{warnings:?}");
    assert!(
        config.contention().is_none(),
        "PSINodeCondition is off by default"
    );
    let (config, _) = load(&format!("featureGates: {{PSINodeCondition: true}}\n{text}"));
    let thresholds = config.contention().expect("the gate is on");
    assert_eq!(thresholds.get(ContentionCondition::SystemMemory), 0.5);
    assert_eq!(thresholds.get(ContentionCondition::KubepodsDisk), 0.0);
    assert_eq!(thresholds.get(ContentionCondition::SystemDisk), 0.9);
}

#[rstest]
#[case("systemDiskContentionThreshold: 1.5\n")]
#[case("systemDiskContentionThreshold: -0.1\n")]
#[case("systemDiskContentionThreshold: high\n")]
fn a_contention_threshold_outside_zero_to_one_is_refused(#[case] text: &str) {
    let err = load_kubelet_config(text, "k.yaml").unwrap_err().to_string();
    assert!(
        err.contains("k.yaml") && err.contains("systemDiskContentionThreshold"),
        "{err}"
    );
}

#[test]
fn the_kubelets_configz_answer_is_read_as_the_configuration_inside() {
    // As `kubectl get --raw /api/v1/nodes/<node>/proxy/configz` prints it (JSON is YAML).
    let configz = r#"{"kubeletconfig":{"enableServer":true,"evictionHard":{"memory.available":"300Mi","nodefs.available":"5%"},"housekeepingInterval":"5s","kind":"KubeletConfiguration","apiVersion":"kubelet.config.k8s.io/v1beta1"}}"#;
    let (config, warnings) = load(configz);
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(
        thresholds_of(&config, Signal::MemoryAvailable),
        [Threshold::hard(Signal::MemoryAvailable, q("300Mi"))]
    );
    assert_eq!(config.housekeeping_interval, secs(5));
    // A document with other keys beside it is not a configz answer: the key is unknown.
    let (_, warnings) = load("kubeletconfig: {}\nmaxPods: 10\n");
    assert_eq!(
        warnings.iter().map(|w| w.key.as_str()).collect::<Vec<_>>(),
        ["kubeletconfig"]
    );
}

#[rstest]
#[case::systemd_driver("cgroupDriver: systemd", Some("cgroupfs driver"))]
#[case::cgroupfs_driver("cgroupDriver: cgroupfs", None)]
#[case::no_qos_cgroups("cgroupsPerQOS: false", Some("QoS class"))]
#[case::group_oom_kill("singleProcessOOMKill: false", None)]
#[case::single_oom_kill("singleProcessOOMKill: true", None)]
#[case::swap("memorySwap: {swapBehavior: LimitedSwap}", Some("swap limit"))]
#[case::logging("logging: {format: json}", Some("--log-format"))]
#[case::notifications_off("kernelMemcgNotification: false", Some("monitor.sources"))]
#[case::notifications_on("kernelMemcgNotification: true", None)]
fn keys_that_do_something_else_here_are_named_in_a_warning(
    #[case] line: &str,
    #[case] says: Option<&str>,
) {
    let (_, warnings) = load(line);
    let key = line.split(':').next().unwrap_or_default();
    match says {
        Some(says) => {
            assert_eq!(warnings.len(), 1, "{warnings:?}");
            assert_eq!(warnings[0].key, key);
            assert!(warnings[0].message.contains(says), "{}", warnings[0]);
        }
        None => assert!(warnings.is_empty(), "{warnings:?}"),
    }
}
