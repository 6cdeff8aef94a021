//! The effective KubeletConfiguration: what the agent acts on after defaults, the drop of
//! "0%" thresholds and the command-line flags, written back as a KubeletConfiguration
//! document (`monitor check-config` prints it). Loading that document gives the same
//! configuration again: every threshold is listed, so the defaults are not merged twice.
use serde_yaml_ng::{Mapping, Value};

use super::{API_VERSION, FEATURE_GATES, KIND, KubeletConfig, format_go_duration};
use crate::policy::contention::ContentionCondition;
use crate::policy::quantity::QuantityOrPercent;
use crate::policy::signal::{Signal, Threshold};

/// The effective configuration as a KubeletConfiguration document (without the
/// `monitor:` block, which the caller adds from the parsed settings).
pub(crate) fn effective_document(config: &KubeletConfig) -> Mapping {
    let mut doc = Mapping::new();
    let mut put = |key: &str, value: Value| {
        doc.insert(Value::from(key), value);
    };
    put("apiVersion", API_VERSION.into());
    put("kind", KIND.into());
    // The allocatableMemory.available copy of a memory.available threshold is derived
    // when node allocatable is enforced on pods; written out, it would be derived again.
    let derived = |t: &Threshold| {
        t.signal == Signal::AllocatableMemoryAvailable
            && config.eviction.thresholds.iter().any(|m| {
                m.signal == Signal::MemoryAvailable
                    && (m.value, m.grace_period, m.min_reclaim)
                        == (t.value, t.grace_period, t.min_reclaim)
            })
    };
    let thresholds: Vec<&Threshold> = config
        .eviction
        .thresholds
        .iter()
        .filter(|t| !derived(t))
        .collect();
    let map_of = |pick: &dyn Fn(&Threshold) -> Option<Value>| -> Value {
        let mut map = Mapping::new();
        for t in &thresholds {
            if let Some(value) = pick(t) {
                map.insert(t.signal.as_str().into(), value);
            }
        }
        Value::Mapping(map)
    };
    put(
        "evictionHard",
        map_of(&|t| t.is_hard().then(|| amount(&t.value))),
    );
    put(
        "evictionSoft",
        map_of(&|t| (!t.is_hard()).then(|| amount(&t.value))),
    );
    put(
        "evictionSoftGracePeriod",
        map_of(&|t| (!t.is_hard()).then(|| format_go_duration(t.grace_period).into())),
    );
    put(
        "evictionMinimumReclaim",
        map_of(&|t| t.min_reclaim.as_ref().map(amount)),
    );
    put(
        "evictionPressureTransitionPeriod",
        format_go_duration(config.eviction.pressure_transition_period).into(),
    );
    put(
        "evictionMaxPodGracePeriod",
        config.eviction.max_pod_grace_period_seconds.into(),
    );
    put(
        "localStorageCapacityIsolation",
        config.eviction.local_storage_capacity_isolation.into(),
    );
    put(
        "housekeepingInterval",
        format_go_duration(config.housekeeping_interval).into(),
    );
    let gc = &config.image_gc;
    put(
        "imageGCHighThresholdPercent",
        gc.high_threshold_percent.into(),
    );
    put(
        "imageGCLowThresholdPercent",
        gc.low_threshold_percent.into(),
    );
    put("imageMinimumGCAge", format_go_duration(gc.min_age).into());
    put(
        "imageMaximumGCAge",
        format_go_duration(gc.max_age.unwrap_or_default()).into(),
    );
    let quantities =
        |map: &std::collections::BTreeMap<String, crate::policy::quantity::Quantity>| {
            Value::Mapping(
                map.iter()
                    .map(|(k, q)| (k.as_str().into(), q.to_string().into()))
                    .collect(),
            )
        };
    put("systemReserved", quantities(&config.system_reserved));
    put("kubeReserved", quantities(&config.kube_reserved));
    put(
        "qosReserved",
        Value::Mapping(
            config
                .qos_reserved
                .iter()
                .map(|(k, f)| (k.as_str().into(), percent(*f)))
                .collect(),
        ),
    );
    put(
        "enforceNodeAllocatable",
        Value::Sequence(
            config
                .enforce_node_allocatable
                .iter()
                .map(|s| s.as_str().into())
                .collect(),
        ),
    );
    put("maxPods", config.max_pods.into());
    put("podPidsLimit", config.pod_pids_limit.unwrap_or(-1).into());
    if let Some(single) = config.single_process_oom_kill {
        put("singleProcessOOMKill", single.into());
    }
    put("cgroupRoot", config.cgroup_root.as_str().into());
    if let Some(path) = &config.static_pod_path {
        put("staticPodPath", path.as_str().into());
    }
    if let Some(endpoint) = &config.container_runtime_endpoint {
        put("containerRuntimeEndpoint", endpoint.as_str().into());
    }
    // The gates the agent follows, as they are in effect, and the others as given.
    let mut gates = config.feature_gates.clone();
    for (name, _) in FEATURE_GATES {
        gates.insert(name.to_string(), config.feature_gate(name));
    }
    put(
        "featureGates",
        Value::Mapping(
            gates
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        ),
    );
    for condition in ContentionCondition::ALL {
        put(
            condition.config_key(),
            config.contention_thresholds.get(condition).into(),
        );
    }
    put(
        "memoryThrottlingFactor",
        config.memory_qos.throttling_factor.into(),
    );
    put(
        "memoryReservationPolicy",
        config.memory_qos.reservation_policy.as_str().into(),
    );
    doc
}

/// A threshold's amount as the configuration writes it: "100Mi" or "10%".
fn amount(value: &QuantityOrPercent) -> Value {
    match value {
        QuantityOrPercent::Quantity(q) => q.to_string().into(),
        QuantityOrPercent::Percent(f) => percent(*f),
    }
}

/// A fraction as a percentage ("10%"), rounded to a millionth of a percent so that the
/// binary fraction's last digits (0.07 × 100 = 7.000000000000001) do not show.
fn percent(fraction: f64) -> Value {
    let percent = (fraction * 100.0 * 1e6).round() / 1e6;
    format!("{percent}%").into()
}
