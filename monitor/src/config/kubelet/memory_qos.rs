//! The Memory QoS keys of a KubeletConfiguration (KEP-2570): `memoryThrottlingFactor`
//! and `memoryReservationPolicy`. They only act with the `MemoryQoS` feature gate on
//! (alpha, off by default in the kubelet through 1.36; see [`super::FEATURE_GATES`]) and
//! on a cgroup v2 node. Neither has a kubelet command-line flag.
//!
//! kubelet: pkg/kubelet/apis/config/v1beta1/defaults.go (DefaultMemoryThrottlingFactor
//! 0.9, memoryReservationPolicy None) and pkg/kubelet/apis/config/validation (the factor
//! must lie in (0, 1]; the policy must be one of its values).
use serde_yaml_ng::Value;

use super::ConfigError;
use super::document::describe;
pub(crate) use crate::policy::memory_qos::{MemoryQos, MemoryReservationPolicy};

pub(crate) const MEMORY_THROTTLING_FACTOR_KEY: &str = "memoryThrottlingFactor";
pub(crate) const MEMORY_RESERVATION_POLICY_KEY: &str = "memoryReservationPolicy";

/// `memoryThrottlingFactor`: a number in (0, 1]; `null` keeps the default.
///
/// Deviation: the kubelet validates the range only while the `MemoryQoS` gate is on; the
/// agent refuses an out-of-range factor whatever the gate, so turning the gate on later
/// cannot turn a loaded configuration into a refused one.
pub(super) fn parse_throttling_factor(
    origin: &str,
    value: &Value,
) -> Result<Option<f64>, ConfigError> {
    let factor = match value {
        Value::Null => return Ok(None),
        Value::Number(n) => n.as_f64(),
        _ => None,
    };
    let Some(factor) = factor else {
        return Err(ConfigError::WrongType {
            origin: origin.to_string(),
            key: MEMORY_THROTTLING_FACTOR_KEY.to_string(),
            expected: "a number greater than 0 and at most 1",
            value: describe(value),
        });
    };
    if !(factor > 0.0 && factor <= 1.0) {
        return Err(ConfigError::InvalidValue {
            origin: origin.to_string(),
            key: MEMORY_THROTTLING_FACTOR_KEY.to_string(),
            value: factor.to_string(),
            reason: "must be greater than 0 and less than or equal to 1.0".to_string(),
        });
    }
    Ok(Some(factor))
}

/// `memoryReservationPolicy`: `None` or `TieredReservation`, spelled as the kubelet
/// spells them; `null` or "" keeps the default (`None`).
pub(super) fn parse_reservation_policy(
    origin: &str,
    value: &Value,
) -> Result<MemoryReservationPolicy, ConfigError> {
    let text = match value {
        Value::Null => return Ok(MemoryReservationPolicy::default()),
        Value::String(text) => text,
        other => {
            return Err(ConfigError::WrongType {
                origin: origin.to_string(),
                key: MEMORY_RESERVATION_POLICY_KEY.to_string(),
                expected: "a string",
                value: describe(other),
            });
        }
    };
    if text.is_empty() {
        return Ok(MemoryReservationPolicy::default());
    }
    MemoryReservationPolicy::parse(text).ok_or_else(|| ConfigError::Unsupported {
        origin: origin.to_string(),
        key: MEMORY_RESERVATION_POLICY_KEY.to_string(),
        value: text.clone(),
        expected: MemoryReservationPolicy::NAMES.join(", "),
    })
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::super::{MEMORY_QOS, load_kubelet_config};
    use super::*;

    fn load(text: &str) -> Result<super::super::KubeletConfig, ConfigError> {
        load_kubelet_config(text, "/etc/kubelet.yaml").map(|(config, _)| config)
    }

    #[test]
    fn defaults_are_the_kubelets_and_the_gate_is_off() {
        let config = load("").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(config.memory_qos, MemoryQos::default());
        assert_eq!(config.memory_qos.throttling_factor, 0.9);
        assert_eq!(
            config.memory_qos.reservation_policy,
            MemoryReservationPolicy::None
        );
        assert!(!config.feature_gate(MEMORY_QOS));
    }

    #[test]
    fn the_keys_and_the_gate_are_read() {
        let config = load(
            "featureGates: {MemoryQoS: true}\nmemoryThrottlingFactor: 0.8\n\
             memoryReservationPolicy: TieredReservation\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(config.feature_gate(MEMORY_QOS));
        assert_eq!(
            config.memory_qos,
            MemoryQos {
                throttling_factor: 0.8,
                reservation_policy: MemoryReservationPolicy::TieredReservation,
            }
        );
        let one = load("memoryThrottlingFactor: 1\nmemoryReservationPolicy: None\n")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(one.memory_qos.throttling_factor, 1.0);
        assert_eq!(
            one.memory_qos.reservation_policy,
            MemoryReservationPolicy::None
        );
    }

    #[rstest]
    #[case::zero("memoryThrottlingFactor: 0\n", "memoryThrottlingFactor")]
    #[case::negative("memoryThrottlingFactor: -0.5\n", "memoryThrottlingFactor")]
    #[case::above_one("memoryThrottlingFactor: 1.5\n", "memoryThrottlingFactor")]
    #[case::nan("memoryThrottlingFactor: .nan\n", "memoryThrottlingFactor")]
    #[case::a_string("memoryThrottlingFactor: \"0.9\"\n", "memoryThrottlingFactor")]
    #[case::unknown_policy(
        "memoryReservationPolicy: HardReservation\n",
        "memoryReservationPolicy"
    )]
    #[case::lower_case_policy(
        "memoryReservationPolicy: tieredreservation\n",
        "memoryReservationPolicy"
    )]
    #[case::policy_not_a_string("memoryReservationPolicy: [None]\n", "memoryReservationPolicy")]
    fn bad_values_are_refused_naming_the_file_and_key(#[case] text: &str, #[case] key: &str) {
        let err = load(text).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("/etc/kubelet.yaml"), "{err}");
        assert!(err.contains(key), "{err}");
    }

    #[test]
    fn an_unknown_policy_error_lists_the_allowed_values() {
        let err = load("memoryReservationPolicy: Hard\n")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("None, TieredReservation"), "{err}");
    }
}
