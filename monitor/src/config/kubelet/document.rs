//! Reading a KubeletConfiguration document: one typed reader per key, errors naming the
//! origin, key and value.
use std::collections::BTreeMap;
use std::time::Duration;

use serde_yaml_ng::Value;

use super::{
    API_VERSION, CgroupDriver, ConfigError, ConfigWarning, KIND, KubeletConfig, RawMap, Scalars,
    format_go_duration, memory_qos, parse_go_duration, parse_qos_reserved, parse_reservation,
    validate_enforce_node_allocatable,
};
use crate::policy::contention::ContentionCondition;
use crate::policy::quantity::Quantity;

/// KubeletConfiguration keys the agent accepts without using (v1beta1 schema), so a real
/// kubelet config loads without a warning per line.
const IGNORED_KUBELET_KEYS: &[&str] = &[
    "enableServer",
    "podLogsDir",
    "syncFrequency",
    "fileCheckFrequency",
    "httpCheckFrequency",
    "staticPodURL",
    "staticPodURLHeader",
    "address",
    "port",
    "readOnlyPort",
    "tlsCertFile",
    "tlsPrivateKeyFile",
    "tlsCipherSuites",
    "tlsMinVersion",
    "rotateCertificates",
    "serverTLSBootstrap",
    "authentication",
    "authorization",
    "registryPullQPS",
    "registryBurst",
    "imagePullCredentialsVerificationPolicy",
    "preloadedImagesVerificationAllowlist",
    "eventRecordQPS",
    "eventBurst",
    "enableDebuggingHandlers",
    "enableContentionProfiling",
    "healthzPort",
    "healthzBindAddress",
    "oomScoreAdj",
    "clusterDomain",
    "clusterDNS",
    "streamingConnectionIdleTimeout",
    "nodeStatusUpdateFrequency",
    "nodeStatusReportFrequency",
    "nodeLeaseDurationSeconds",
    "volumeStatsAggPeriod",
    "kubeletCgroups",
    "systemCgroups",
    "cgroupsPerQOS",
    "cgroupDriver",
    "cpuManagerPolicy",
    "cpuManagerPolicyOptions",
    "cpuManagerReconcilePeriod",
    "memoryManagerPolicy",
    "topologyManagerPolicy",
    "topologyManagerScope",
    "topologyManagerPolicyOptions",
    "runtimeRequestTimeout",
    "hairpinMode",
    "podCIDR",
    "resolvConf",
    "runOnce",
    "cpuCFSQuota",
    "cpuCFSQuotaPeriod",
    "nodeStatusMaxImages",
    "maxOpenFiles",
    "contentType",
    "kubeAPIQPS",
    "kubeAPIBurst",
    "serializeImagePulls",
    "maxParallelImagePulls",
    "podsPerCore",
    "enableControllerAttachDetach",
    "protectKernelDefaults",
    "makeIPTablesUtilChains",
    "iptablesMasqueradeBit",
    "iptablesDropBit",
    "failSwapOn",
    "memorySwap",
    "containerLogMaxSize",
    "containerLogMaxFiles",
    "containerLogMaxWorkers",
    "containerLogMonitorInterval",
    "configMapAndSecretChangeDetectionStrategy",
    "reservedSystemCPUs",
    "showHiddenMetricsForVersion",
    "systemReservedCgroup",
    "kubeReservedCgroup",
    "allowedUnsafeSysctls",
    "volumePluginDir",
    "providerID",
    "kernelMemcgNotification",
    "logging",
    "enableSystemLogHandler",
    "enableSystemLogQuery",
    "shutdownGracePeriod",
    "shutdownGracePeriodCriticalPods",
    "shutdownGracePeriodByPodPriority",
    "crashLoopBackOff",
    "reservedMemory",
    "enableProfilingHandler",
    "enableDebugFlagsHandler",
    "seccompDefault",
    "registerWithTaints",
    "registerNode",
    "tracing",
    "imageServiceEndpoint",
    "failCgroupV1",
    "userNamespaces",
    "podHousekeepingPeriod",
];

/// The kubelet's `/configz` answer (`kubectl get --raw /api/v1/nodes/<node>/proxy/configz`)
/// wraps its KubeletConfiguration as `{"kubeletconfig": {...}}`: such a document is read
/// as the configuration inside. Any other document is left as it is.
pub(crate) fn unwrap_configz(document: Value) -> Value {
    match document {
        Value::Mapping(mut mapping)
            if mapping.len() == 1
                && matches!(mapping.get("kubeletconfig"), Some(Value::Mapping(_))) =>
        {
            mapping.remove("kubeletconfig").unwrap_or(Value::Null)
        }
        other => other,
    }
}

/// Why a KubeletConfiguration key, set to `value`, does not do here what it does in the
/// kubelet; `None` when the agent follows it or it changes nothing the agent does. Said
/// once per key, as a warning, so that a real node's configuration is not misread quietly.
fn meaning_here(key: &str, value: &Value) -> Option<String> {
    let text = value.as_str();
    let flag = value.as_bool();
    let message = match key {
        "cgroupDriver" if text != Some("cgroupfs") => {
            "followed only to find the pods of monitor.podList: the agent names its own pods' cgroups as the cgroupfs driver does (<cgroupRoot>/kubepods/<qos>/pod<uid>) whatever the driver"
        }
        "cgroupsPerQOS" if flag == Some(false) => {
            "not followed: the agent always puts pods under their QoS class's cgroup (kubepods/burstable, kubepods/besteffort)"
        }
        "memorySwap" => "not followed: the agent writes no swap limit for its pods",
        "logging" => {
            "not followed: the agent's logs follow its --log-format and --log flags (or RUST_LOG)"
        }
        "kernelMemcgNotification" if flag == Some(false) => {
            "not followed: the agent is always woken by the kernel's memory notifications (turn single sources off under monitor.sources)"
        }
        _ => return None,
    };
    Some(message.to_string())
}

pub(super) fn parse_document(
    text: &str,
    origin: &str,
    config: &mut KubeletConfig,
    scalars: &mut Scalars,
    warnings: &mut Vec<ConfigWarning>,
) -> Result<(), ConfigError> {
    let document: Value = serde_yaml_ng::from_str(text).map_err(|e| ConfigError::Yaml {
        origin: origin.to_string(),
        reason: e.to_string(),
    })?;
    let mapping = match unwrap_configz(document) {
        Value::Null => return Ok(()),
        Value::Mapping(mapping) => mapping,
        other => {
            return Err(ConfigError::NotAMapping {
                origin: origin.to_string(),
                found: describe(&other),
            });
        }
    };
    let field = Field { origin };
    for (key, value) in mapping {
        let Value::String(key) = key else {
            return Err(ConfigError::WrongType {
                origin: origin.to_string(),
                key: describe(&key),
                expected: "string keys",
                value: describe(&key),
            });
        };
        let k = key.as_str();
        if let Some(condition) = ContentionCondition::ALL
            .into_iter()
            .find(|c| c.config_key() == k)
        {
            config
                .contention_thresholds
                .set(condition, field.fraction(k, &value)?);
            continue;
        }
        if k == "cgroupDriver" {
            config.cgroup_driver = match field.string(k, &value)?.as_str() {
                "cgroupfs" => CgroupDriver::Cgroupfs,
                "systemd" => CgroupDriver::Systemd,
                other => {
                    return Err(field.invalid(k, other, "must be cgroupfs or systemd"));
                }
            };
        }
        if let Some(message) = meaning_here(k, &value) {
            warnings.push(ConfigWarning {
                origin: origin.to_string(),
                key: key.clone(),
                message,
            });
            continue;
        }
        match k {
            "apiVersion" => field.expect_one_of(k, &value, &[API_VERSION])?,
            "kind" => field.expect_one_of(k, &value, &[KIND])?,
            "monitor" => config.monitor = Some(value),
            "evictionHard" => config.source.hard = field.raw_map(k, &value)?,
            "evictionSoft" => config.source.soft = field.raw_map(k, &value)?,
            "evictionSoftGracePeriod" => {
                config.source.soft_grace_period = field.raw_map(k, &value)?
            }
            "evictionMinimumReclaim" => config.source.minimum_reclaim = field.raw_map(k, &value)?,
            "featureGates" => config.feature_gates = field.feature_gates(k, &value)?,
            "mergeDefaultEvictionSettings" => {
                config.source.merge_defaults = field.bool(k, &value)?
            }
            "evictionPressureTransitionPeriod" => {
                // kubelet defaulting: a zero period means the default.
                let period = field.duration(k, &value)?;
                if !period.is_zero() {
                    config.eviction.pressure_transition_period = period;
                }
            }
            "evictionMaxPodGracePeriod" => {
                // Any int32, as the kubelet's config type has it: a negative value is
                // valid and makes soft evictions as quick as can be (see
                // EvictionManager::grace_period_seconds).
                config.eviction.max_pod_grace_period_seconds = field.int32(k, &value)?.into()
            }
            "localStorageCapacityIsolation" => {
                config.eviction.local_storage_capacity_isolation = field.bool(k, &value)?
            }
            "imageGCHighThresholdPercent" => scalars.image_gc_high = field.int(k, &value)?,
            "imageGCLowThresholdPercent" => scalars.image_gc_low = field.int(k, &value)?,
            "imageMinimumGCAge" => {
                let age = field.duration(k, &value)?;
                if !age.is_zero() {
                    config.image_gc.min_age = age;
                }
            }
            "imageMaximumGCAge" => {
                let age = field.duration(k, &value)?;
                config.image_gc.max_age = (!age.is_zero()).then_some(age);
            }
            "systemReserved" => config.system_reserved = field.reservation(k, &value)?,
            "kubeReserved" => config.kube_reserved = field.reservation(k, &value)?,
            "qosReserved" => config.qos_reserved = field.qos_reserved(k, &value)?,
            "housekeepingInterval" => {
                config.housekeeping_interval = field.positive_duration(k, &value)?
            }
            "staticPodPath" => config.static_pod_path = field.optional_string(k, &value)?,
            "containerRuntimeEndpoint" => {
                config.container_runtime_endpoint = field.optional_string(k, &value)?
            }
            "cgroupRoot" => {
                config.cgroup_root = field
                    .optional_string(k, &value)?
                    .unwrap_or_else(|| "/".to_string())
            }
            "enforceNodeAllocatable" => {
                config.enforce_node_allocatable = field.enforce_node_allocatable(k, &value)?
            }
            "maxPods" => {
                // kubelet defaulting: 0 means the default 110.
                let max = field.non_negative(k, &value)?;
                config.max_pods = if max == 0 { 110 } else { max };
            }
            "memoryThrottlingFactor" => {
                if let Some(factor) = memory_qos::parse_throttling_factor(origin, &value)? {
                    config.memory_qos.throttling_factor = factor;
                }
            }
            "memoryReservationPolicy" => {
                config.memory_qos.reservation_policy =
                    memory_qos::parse_reservation_policy(origin, &value)?
            }
            "singleProcessOOMKill" => config.single_process_oom_kill = Some(field.bool(k, &value)?),
            "podPidsLimit" => {
                config.pod_pids_limit = Some(field.int(k, &value)?).filter(|limit| *limit >= 0)
            }
            known if IGNORED_KUBELET_KEYS.contains(&known) => {}
            unknown => warnings.push(ConfigWarning {
                origin: origin.to_string(),
                key: unknown.to_string(),
                message: "unknown KubeletConfiguration key, ignored".to_string(),
            }),
        }
    }
    Ok(())
}

/// Short description of a YAML value for error messages.
pub(super) fn describe(value: &Value) -> String {
    match value {
        Value::Null => "null".to_string(),
        Value::Bool(b) => format!("boolean {b}"),
        Value::Number(n) => format!("number {n}"),
        Value::String(s) => format!("string {s:?}"),
        Value::Sequence(_) => "a list".to_string(),
        Value::Mapping(_) => "a mapping".to_string(),
        Value::Tagged(t) => format!("tagged value {}", t.tag),
    }
}

/// Typed readers for one document's fields, producing errors that name origin and key.
struct Field<'a> {
    origin: &'a str,
}

impl Field<'_> {
    fn wrong_type(&self, key: &str, expected: &'static str, value: &Value) -> ConfigError {
        ConfigError::WrongType {
            origin: self.origin.to_string(),
            key: key.to_string(),
            expected,
            value: describe(value),
        }
    }

    fn invalid(&self, key: &str, value: impl Into<String>, reason: impl ToString) -> ConfigError {
        ConfigError::InvalidValue {
            origin: self.origin.to_string(),
            key: key.to_string(),
            value: value.into(),
            reason: reason.to_string(),
        }
    }

    fn string(&self, key: &str, value: &Value) -> Result<String, ConfigError> {
        match value {
            Value::String(s) => Ok(s.clone()),
            other => Err(self.wrong_type(key, "a string", other)),
        }
    }

    fn optional_string(&self, key: &str, value: &Value) -> Result<Option<String>, ConfigError> {
        match value {
            Value::Null => Ok(None),
            other => Ok(Some(self.string(key, other)?).filter(|s| !s.is_empty())),
        }
    }

    fn expect_one_of(&self, key: &str, value: &Value, allowed: &[&str]) -> Result<(), ConfigError> {
        let text = self.string(key, value)?;
        if allowed.contains(&text.as_str()) {
            Ok(())
        } else {
            Err(ConfigError::Unsupported {
                origin: self.origin.to_string(),
                key: key.to_string(),
                value: text,
                expected: allowed.join(", "),
            })
        }
    }

    fn bool(&self, key: &str, value: &Value) -> Result<bool, ConfigError> {
        value
            .as_bool()
            .ok_or_else(|| self.wrong_type(key, "true or false", value))
    }

    fn int(&self, key: &str, value: &Value) -> Result<i64, ConfigError> {
        value
            .as_i64()
            .ok_or_else(|| self.wrong_type(key, "an integer", value))
    }

    /// An integer of a field the kubelet types int32.
    fn int32(&self, key: &str, value: &Value) -> Result<i32, ConfigError> {
        let n = self.int(key, value)?;
        i32::try_from(n).map_err(|_| {
            self.invalid(
                key,
                n.to_string(),
                "out of range (a 32-bit integer, -2147483648 to 2147483647)",
            )
        })
    }

    fn non_negative(&self, key: &str, value: &Value) -> Result<i64, ConfigError> {
        let n = self.int(key, value)?;
        if n < 0 {
            return Err(self.invalid(key, n.to_string(), "must not be negative"));
        }
        Ok(n)
    }

    fn duration(&self, key: &str, value: &Value) -> Result<Duration, ConfigError> {
        let text = self.string(key, value)?;
        parse_go_duration(&text).map_err(|e| self.invalid(key, text, e))
    }

    fn positive_duration(&self, key: &str, value: &Value) -> Result<Duration, ConfigError> {
        let duration = self.duration(key, value)?;
        if duration.is_zero() {
            return Err(self.invalid(key, format_go_duration(duration), "must be positive"));
        }
        Ok(duration)
    }

    /// A map of names to scalar values, kept as strings; `null` is absent.
    fn raw_map(&self, key: &str, value: &Value) -> Result<Option<RawMap>, ConfigError> {
        let mapping = match value {
            Value::Null => return Ok(None),
            Value::Mapping(mapping) => mapping,
            other => return Err(self.wrong_type(key, "a mapping of names to values", other)),
        };
        let mut entries = Vec::with_capacity(mapping.len());
        for (name, entry) in mapping {
            let name = self.string(key, name)?;
            let text = match entry {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                other => {
                    return Err(ConfigError::InvalidEntry {
                        origin: self.origin.to_string(),
                        key: key.to_string(),
                        name,
                        value: describe(other),
                        reason: "expected a string".to_string(),
                    });
                }
            };
            entries.push((name, text));
        }
        Ok(Some(RawMap {
            origin: self.origin.to_string(),
            key: key.to_string(),
            entries,
        }))
    }

    /// A number from 0 to 1.
    fn fraction(&self, key: &str, value: &Value) -> Result<f64, ConfigError> {
        let n = value
            .as_f64()
            .ok_or_else(|| self.wrong_type(key, "a number from 0 to 1", value))?;
        if !(0.0..=1.0).contains(&n) {
            return Err(self.invalid(
                key,
                n.to_string(),
                "must be from 0 to 1 (a fraction of the time stalled)",
            ));
        }
        Ok(n)
    }

    /// A mapping of gate names to true or false; `null` is none.
    fn feature_gates(
        &self,
        key: &str,
        value: &Value,
    ) -> Result<BTreeMap<String, bool>, ConfigError> {
        let mapping = match value {
            Value::Null => return Ok(BTreeMap::new()),
            Value::Mapping(mapping) => mapping,
            other => {
                return Err(self.wrong_type(
                    key,
                    "a mapping of gate names to true or false",
                    other,
                ));
            }
        };
        let mut gates = BTreeMap::new();
        for (name, on) in mapping {
            let name = self.string(key, name)?;
            let Some(on) = on.as_bool() else {
                return Err(ConfigError::InvalidEntry {
                    origin: self.origin.to_string(),
                    key: key.to_string(),
                    name,
                    value: describe(on),
                    reason: "expected true or false".to_string(),
                });
            };
            gates.insert(name, on);
        }
        Ok(gates)
    }

    fn reservation(
        &self,
        key: &str,
        value: &Value,
    ) -> Result<BTreeMap<String, Quantity>, ConfigError> {
        let raw = self.raw_map(key, value)?.unwrap_or_default();
        parse_reservation(&raw.entries, self.origin, key)
    }

    fn qos_reserved(&self, key: &str, value: &Value) -> Result<BTreeMap<String, f64>, ConfigError> {
        let raw = self.raw_map(key, value)?.unwrap_or_default();
        parse_qos_reserved(&raw.entries, self.origin, key)
    }

    fn enforce_node_allocatable(
        &self,
        key: &str,
        value: &Value,
    ) -> Result<Vec<String>, ConfigError> {
        let items = match value {
            Value::Null => return Ok(Vec::new()),
            Value::Sequence(items) => items,
            other => return Err(self.wrong_type(key, "a list of strings", other)),
        };
        let values = items
            .iter()
            .map(|item| self.string(key, item))
            .collect::<Result<Vec<_>, _>>()?;
        validate_enforce_node_allocatable(&values, self.origin, key)?;
        Ok(values)
    }
}
