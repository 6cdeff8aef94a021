//! KubeletConfiguration (kubelet.config.k8s.io/v1beta1) and the kubelet's command-line
//! flags, reduced to the settings the agent acts on.
//!
//! A user's real kubelet config file must load: keys of the kubelet's schema that the agent
//! does not use are accepted silently, keys nobody knows produce a [`ConfigWarning`]. The
//! key `monitor` is reserved for the agent's own settings and kept raw.
//!
//! Eviction defaults (kubelet: pkg/kubelet/eviction/defaults_linux.go DefaultEvictionHard,
//! applied in cmd/kubelet/app/server.go loadConfigFile): when `evictionHard` is absent the
//! Linux defaults apply: memory.available<100Mi, nodefs.available<10%,
//! nodefs.inodesFree<5%, imagefs.available<15% and imagefs.inodesFree<5% (the fifth since
//! kubelet 1.30, kubernetes#121834). When
//! `evictionHard` is given it REPLACES the defaults, unless `mergeDefaultEvictionSettings:
//! true` (kubelet ≥ 1.34), which keeps the defaults for the signals not given. As in the
//! kubelet, a threshold of "0%" or "100%" is dropped, which is how a default is switched off;
//! a dropped soft threshold needs no grace period.
use std::collections::BTreeMap;
use std::time::Duration;

use serde_yaml_ng::Value;

pub(crate) use crate::policy::container_gc::ContainerGcPolicy;
use crate::policy::contention::ContentionThresholds;
pub(crate) use crate::policy::image_gc::ImageGcPolicy;
use crate::policy::quantity::{Quantity, parse_quantity, parse_quantity_or_percent};
use crate::policy::signal::Signal;

mod document;
mod duration;
mod effective;
mod flags;
mod memory_qos;
#[cfg(test)]
mod tests;
mod thresholds;

pub(crate) use crate::policy::eviction::EvictionConfig;
pub(crate) use document::unwrap_configz;
pub use duration::{DurationError, format_go_duration, parse_go_duration};
pub(crate) use effective::effective_document;
pub use flags::apply_flags;
pub(crate) use memory_qos::MemoryQos;

pub(crate) const API_VERSION: &str = "kubelet.config.k8s.io/v1beta1";
pub(crate) const KIND: &str = "KubeletConfiguration";

/// The kubelet's Linux hard eviction defaults (pkg/kubelet/eviction/defaults_linux.go,
/// 1.30 and later).
pub(crate) const DEFAULT_EVICTION_HARD: [(Signal, &str); 5] = [
    (Signal::MemoryAvailable, "100Mi"),
    (Signal::NodeFsAvailable, "10%"),
    (Signal::NodeFsInodesFree, "5%"),
    (Signal::ImageFsAvailable, "15%"),
    (Signal::ImageFsInodesFree, "5%"),
];

/// The node-allocatable enforcement key that adds allocatableMemory.available thresholds.
pub(crate) const ENFORCE_PODS: &str = "pods";
const ENFORCE_NODE_ALLOCATABLE_VALUES: [&str; 6] = [
    "pods",
    "system-reserved",
    "kube-reserved",
    "system-reserved-compressible",
    "kube-reserved-compressible",
    "none",
];

/// The settings of a KubeletConfiguration the agent acts on.
#[derive(Clone, Debug, PartialEq)]
pub struct KubeletConfig {
    pub eviction: EvictionConfig,
    /// The imageGC* keys and imageMinimumGCAge / imageMaximumGCAge.
    pub(crate) image_gc: ImageGcPolicy,
    /// Dead-container collection (flags only in the kubelet:
    /// `--minimum-container-ttl-duration`, `--maximum-dead-containers-per-container`,
    /// `--maximum-dead-containers`).
    pub(crate) container_gc: ContainerGcPolicy,
    pub(crate) system_reserved: BTreeMap<String, Quantity>,
    pub(crate) kube_reserved: BTreeMap<String, Quantity>,
    /// Fraction of a tier's requests reserved from lower QoS tiers, by resource
    /// ("memory: 50%" is 0.5). Only memory is supported, as in the kubelet.
    pub(crate) qos_reserved: BTreeMap<String, f64>,
    /// The agent's fallback timer between synchronizes (the kubelet's
    /// --housekeeping-interval; default 10s).
    pub(crate) housekeeping_interval: Duration,
    pub static_pod_path: Option<String>,
    /// The CRI runtime's socket ("unix:///run/containerd/containerd.sock"); the agent
    /// uses it when `monitor.runtime` is `cri`.
    pub(crate) container_runtime_endpoint: Option<String>,
    /// Root of the pod cgroup hierarchy (default "/").
    pub(crate) cgroup_root: String,
    /// How the kubelet names its pods' cgroups (`cgroupDriver`): followed to find the
    /// pods of a pod list (`monitor.podList`); the agent's own pods are always named as
    /// the cgroupfs driver does.
    pub(crate) cgroup_driver: CgroupDriver,
    /// Where node allocatable is enforced (default ["pods"]).
    pub(crate) enforce_node_allocatable: Vec<String>,
    pub(crate) max_pods: i64,
    /// Per-pod pid limit; `None` for unlimited (the kubelet's -1 or unset).
    pub(crate) pod_pids_limit: Option<i64>,
    /// `singleProcessOOMKill`: `Some(true)` keeps the kernel's OOM killer to one process
    /// of a container; unset or false, the whole container goes on cgroup v2
    /// (`memory.oom.group`), the kubelet's default there.
    pub(crate) single_process_oom_kill: Option<bool>,
    /// `featureGates` (and `--feature-gates`) as given; see [`KubeletConfig::feature_gate`]
    /// for the ones the agent follows and their defaults.
    pub(crate) feature_gates: BTreeMap<String, bool>,
    /// The thresholds of the PSI contention conditions (`systemMemoryContentionThreshold`
    /// and its three siblings), used with the PSINodeCondition gate.
    pub(crate) contention_thresholds: ContentionThresholds,
    /// `memoryThrottlingFactor` and `memoryReservationPolicy`, acting only with the
    /// [`MEMORY_QOS`] gate on, on cgroup v2 (see [`memory_qos`]).
    pub(crate) memory_qos: MemoryQos,
    /// The agent's own settings under the reserved `monitor` key, unparsed.
    pub(crate) monitor: Option<Value>,
    /// The eviction settings as written, kept so flags can override them and the
    /// thresholds be rebuilt and validated after flags are applied.
    source: EvictionSource,
}

/// The kubelet's `cgroupDriver`: how a pod's cgroup is named under `cgroupRoot`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CgroupDriver {
    /// `kubepods/burstable/pod<uid>`.
    #[default]
    Cgroupfs,
    /// `kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid, '-' as '_'>.slice`.
    Systemd,
}

impl CgroupDriver {
    pub fn as_str(self) -> &'static str {
        match self {
            CgroupDriver::Cgroupfs => "cgroupfs",
            CgroupDriver::Systemd => "systemd",
        }
    }
}

/// The kubelet feature gates the agent follows, with the kubelet's default (1.36 and later)
/// when the configuration does not set them. Other gates are accepted and ignored.
pub(crate) const FEATURE_GATES: [(&str, bool); 3] = [
    // Beta, on by default since 1.36: memory.available leaves out the hugepages' capacity
    // (kubelet: pkg/kubelet/server/stats summary, adjustForHugePages).
    (HUGEPAGE_AWARE_EVICTION, true),
    // Alpha in 1.36, off by default: the PSI contention node conditions
    // ([`crate::policy::contention`]).
    (PSI_NODE_CONDITION, false),
    // Off by default (KEP-2570): memory.high / memory.min / memory.low on cgroup v2
    // (pkg/features/kube_features.go MemoryQoS).
    (MEMORY_QOS, false),
];
pub(crate) const HUGEPAGE_AWARE_EVICTION: &str = "HugepageAwareEviction";
pub(crate) const PSI_NODE_CONDITION: &str = "PSINodeCondition";
pub(crate) const MEMORY_QOS: &str = "MemoryQoS";

impl KubeletConfig {
    /// Whether the feature gate `name` (one of [`FEATURE_GATES`]) is on: as set, or the
    /// kubelet's default.
    pub(crate) fn feature_gate(&self, name: &str) -> bool {
        self.feature_gates.get(name).copied().unwrap_or_else(|| {
            FEATURE_GATES
                .iter()
                .find(|(gate, _)| *gate == name)
                .is_some_and(|(_, on)| *on)
        })
    }

    /// The thresholds of the PSI contention conditions when the PSINodeCondition gate is
    /// on; `None` when it is off.
    pub(crate) fn contention(&self) -> Option<&ContentionThresholds> {
        self.feature_gate(PSI_NODE_CONDITION)
            .then_some(&self.contention_thresholds)
    }

    /// Memory left for pods on a node of `capacity` bytes (MemTotal) of which `hugepages`
    /// bytes are hugepages of any size: [`KubeletConfig::allocatable`] of memory less the
    /// hugepages, which regular pods cannot use (kubelet: pkg/kubelet/nodestatus
    /// MachineInfo takes every hugepages-<size> capacity out of allocatable memory).
    pub(crate) fn allocatable_memory(&self, capacity: i64, hugepages: i64) -> i64 {
        self.allocatable("memory", capacity)
            .saturating_sub(hugepages.max(0))
            .max(0)
    }

    /// The part of `capacity` of `resource` ("memory", "ephemeral-storage", ...) left for
    /// pods: capacity minus system-reserved, kube-reserved and the hard eviction threshold
    /// of that resource (kubelet: pkg/kubelet/cm GetNodeAllocatableReservation,
    /// hardEvictionReservation). Never negative.
    pub fn allocatable(&self, resource: &str, capacity: i64) -> i64 {
        let reserved =
            |map: &BTreeMap<String, Quantity>| map.get(resource).map_or(0, |q| q.value());
        capacity
            .saturating_sub(reserved(&self.system_reserved))
            .saturating_sub(reserved(&self.kube_reserved))
            .saturating_sub(self.eviction_reserved(resource, capacity))
            .max(0)
    }

    /// The hard eviction threshold reserved from allocatable for `resource`: memory for
    /// memory.available, ephemeral-storage for nodefs.available (kubelet:
    /// hardEvictionReservation).
    pub(crate) fn eviction_reserved(&self, resource: &str, capacity: i64) -> i64 {
        let signal = match resource {
            "memory" => Signal::MemoryAvailable,
            "ephemeral-storage" => Signal::NodeFsAvailable,
            _ => return 0,
        };
        self.eviction
            .thresholds
            .iter()
            .filter(|t| t.signal == signal && t.is_hard())
            .map(|t| t.quantity(capacity))
            .max()
            .unwrap_or(0)
    }
}

/// A key that was accepted but not understood, or a setting that has no effect.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigWarning {
    pub(crate) origin: String,
    pub(crate) key: String,
    pub(crate) message: String,
}

impl std::fmt::Display for ConfigWarning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}: {}", self.origin, self.key, self.message)
    }
}

/// A configuration the agent refuses. Every variant names where (file or flags), the key
/// and the offending value.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    #[error("{origin}: not valid YAML: {reason}")]
    Yaml { origin: String, reason: String },
    #[error("{origin}: expected a KubeletConfiguration mapping at the top level, found {found}")]
    NotAMapping { origin: String, found: String },
    #[error("{origin}: {key}: expected {expected}, found {value}")]
    WrongType {
        origin: String,
        key: String,
        expected: &'static str,
        value: String,
    },
    #[error("{origin}: {key}: {value:?} is not supported (expected {expected})")]
    Unsupported {
        origin: String,
        key: String,
        value: String,
        expected: String,
    },
    #[error("{origin}: {key}: unsupported eviction signal {signal:?}")]
    UnknownSignal {
        origin: String,
        key: String,
        signal: String,
    },
    #[error("{origin}: {key}: {signal}: bad operator in {value:?}: only `<` is valid")]
    BadOperator {
        origin: String,
        key: String,
        signal: String,
        value: String,
    },
    #[error("{origin}: {key}: {name}: invalid value {value:?}: {reason}")]
    InvalidEntry {
        origin: String,
        key: String,
        name: String,
        value: String,
        reason: String,
    },
    #[error("{origin}: {key}: invalid value {value:?}: {reason}")]
    InvalidValue {
        origin: String,
        key: String,
        value: String,
        reason: String,
    },
    #[error("{origin}: {key}: signal {signal} is given more than once")]
    DuplicateSignal {
        origin: String,
        key: String,
        signal: String,
    },
    #[error(
        "{origin}: {key}: soft threshold {signal}<{value} has no grace period in evictionSoftGracePeriod"
    )]
    MissingGracePeriod {
        origin: String,
        key: String,
        signal: String,
        value: String,
    },
    #[error(
        "{origin}: {key}: grace period {value:?} for {signal}, which has no soft threshold in evictionSoft"
    )]
    GracePeriodWithoutSoftThreshold {
        origin: String,
        key: String,
        signal: String,
        value: String,
    },
    #[error(
        "{origin}: imageGCLowThresholdPercent {low} must be less than imageGCHighThresholdPercent {high}"
    )]
    ImageGcThresholds { origin: String, low: i64, high: i64 },
    #[error(
        "{origin}: imageMaximumGCAge {maximum:?} must be greater than imageMinimumGCAge {minimum:?}"
    )]
    ImageGcAges {
        origin: String,
        maximum: String,
        minimum: String,
    },
}

/// The eviction maps as written (file or flags), rebuilt into thresholds on every change.
#[derive(Clone, Debug, Default, PartialEq)]
struct EvictionSource {
    hard: Option<RawMap>,
    soft: Option<RawMap>,
    soft_grace_period: Option<RawMap>,
    minimum_reclaim: Option<RawMap>,
    merge_defaults: bool,
}

/// A map setting with where it came from, for error messages.
#[derive(Clone, Debug, Default, PartialEq)]
struct RawMap {
    origin: String,
    key: String,
    entries: Vec<(String, String)>,
}

/// The scalar eviction settings, kept raw for the same reason.
#[derive(Clone, Debug, PartialEq)]
struct Scalars {
    origin: String,
    image_gc_high: i64,
    image_gc_low: i64,
}

/// The kubelet's defaults: the Linux hard eviction thresholds (plus their
/// allocatableMemory.available copy, node allocatable being enforced on pods by default),
/// 5m transition period, image GC at 85%/80%.
pub fn default_kubelet_config() -> KubeletConfig {
    let mut config = KubeletConfig {
        eviction: EvictionConfig::default(),
        image_gc: ImageGcPolicy::default(),
        container_gc: ContainerGcPolicy::default(),
        system_reserved: BTreeMap::new(),
        kube_reserved: BTreeMap::new(),
        qos_reserved: BTreeMap::new(),
        housekeeping_interval: Duration::from_secs(10),
        static_pod_path: None,
        container_runtime_endpoint: None,
        cgroup_root: "/".to_string(),
        cgroup_driver: CgroupDriver::Cgroupfs,
        enforce_node_allocatable: vec![ENFORCE_PODS.to_string()],
        max_pods: 110,
        pod_pids_limit: None,
        single_process_oom_kill: None,
        feature_gates: BTreeMap::new(),
        contention_thresholds: ContentionThresholds::default(),
        memory_qos: MemoryQos::default(),
        monitor: None,
        source: EvictionSource::default(),
    };
    // The defaults are valid by construction; an empty threshold list would only be
    // returned if they were not, which the tests rule out.
    if let Ok(built) =
        thresholds::build_thresholds(&config.source, &config.enforce_node_allocatable)
    {
        config.eviction.thresholds = built.thresholds;
    }
    config
}

/// Parses a KubeletConfiguration (YAML or JSON) from `text`; `origin` (usually the file
/// path) prefixes every error and warning. Defaults fill what the text leaves out, and the
/// result is validated. Use [`load_kubelet_config_with_flags`] when flags also apply, so
/// validation sees the combination.
#[cfg(test)]
pub(crate) fn load_kubelet_config(
    text: &str,
    origin: &str,
) -> Result<(KubeletConfig, Vec<ConfigWarning>), ConfigError> {
    load_kubelet_config_with_flags(text, origin, &[])
}

/// [`load_kubelet_config`] with kubelet command-line flags applied on top of the file
/// (flags win), validated once both are in.
pub(crate) fn load_kubelet_config_with_flags(
    text: &str,
    origin: &str,
    args: &[String],
) -> Result<(KubeletConfig, Vec<ConfigWarning>), ConfigError> {
    let mut config = default_kubelet_config();
    let mut warnings = Vec::new();
    let mut scalars = Scalars {
        origin: origin.to_string(),
        image_gc_high: 85,
        image_gc_low: 80,
    };
    document::parse_document(text, origin, &mut config, &mut scalars, &mut warnings)?;
    flags::apply_flag_values(&mut config, &mut scalars, args, &mut warnings)?;
    finish(&mut config, &scalars, &mut warnings)?;
    Ok((config, warnings))
}

/// Validates the scalar settings and rebuilds the thresholds from the eviction maps.
fn finish(
    config: &mut KubeletConfig,
    scalars: &Scalars,
    warnings: &mut Vec<ConfigWarning>,
) -> Result<(), ConfigError> {
    let (high, low) = (scalars.image_gc_high, scalars.image_gc_low);
    for (key, value) in [
        ("imageGCHighThresholdPercent", high),
        ("imageGCLowThresholdPercent", low),
    ] {
        if !(0..=100).contains(&value) {
            return Err(ConfigError::InvalidValue {
                origin: scalars.origin.clone(),
                key: key.to_string(),
                value: value.to_string(),
                reason: "must be between 0 and 100, inclusive".to_string(),
            });
        }
    }
    // kubelet: validation.go ("must be less than imageGCHighThresholdPercent").
    if low >= high {
        return Err(ConfigError::ImageGcThresholds {
            origin: scalars.origin.clone(),
            low,
            high,
        });
    }
    config.image_gc.high_threshold_percent = high as i32;
    config.image_gc.low_threshold_percent = low as i32;
    if let Some(maximum) = config.image_gc.max_age
        && maximum <= config.image_gc.min_age
    {
        return Err(ConfigError::ImageGcAges {
            origin: scalars.origin.clone(),
            maximum: format_go_duration(maximum),
            minimum: format_go_duration(config.image_gc.min_age),
        });
    }
    let built = thresholds::build_thresholds(&config.source, &config.enforce_node_allocatable)?;
    config.eviction.thresholds = built.thresholds;
    warnings.extend(built.warnings);
    Ok(())
}

/// systemReserved / kubeReserved: resource names to non-negative quantities.
fn parse_reservation(
    entries: &[(String, String)],
    origin: &str,
    key: &str,
) -> Result<BTreeMap<String, Quantity>, ConfigError> {
    let mut result = BTreeMap::new();
    for (name, text) in entries {
        let invalid = |reason: String| ConfigError::InvalidEntry {
            origin: origin.to_string(),
            key: key.to_string(),
            name: name.clone(),
            value: text.clone(),
            reason,
        };
        let quantity = parse_quantity(text).map_err(|e| invalid(e.to_string()))?;
        if quantity.is_negative() {
            return Err(invalid("must not be negative".to_string()));
        }
        if result.insert(name.clone(), quantity).is_some() {
            return Err(invalid("given more than once".to_string()));
        }
    }
    Ok(result)
}

/// qosReserved: "memory: 50%" (kubelet: only memory is supported, as a percentage).
fn parse_qos_reserved(
    entries: &[(String, String)],
    origin: &str,
    key: &str,
) -> Result<BTreeMap<String, f64>, ConfigError> {
    let mut result = BTreeMap::new();
    for (name, text) in entries {
        let invalid = |reason: &str| ConfigError::InvalidEntry {
            origin: origin.to_string(),
            key: key.to_string(),
            name: name.clone(),
            value: text.clone(),
            reason: reason.to_string(),
        };
        if name != "memory" {
            return Err(invalid("only memory can be reserved"));
        }
        if !text.trim().ends_with('%') {
            return Err(invalid("expected a percentage such as 50%"));
        }
        match parse_quantity_or_percent(text) {
            Ok(crate::policy::quantity::QuantityOrPercent::Percent(fraction)) => {
                result.insert(name.clone(), fraction);
            }
            _ => return Err(invalid("expected a percentage between 0% and 100%")),
        }
    }
    Ok(result)
}

/// Feature gates from `name=value` pairs (the `--feature-gates` flag): each value is a
/// boolean as Go's strconv.ParseBool reads it.
fn parse_feature_gates(
    entries: &[(String, String)],
    origin: &str,
    key: &str,
) -> Result<BTreeMap<String, bool>, ConfigError> {
    entries
        .iter()
        .map(|(name, text)| {
            let on = match text.as_str() {
                "1" | "t" | "T" | "true" | "TRUE" | "True" => true,
                "0" | "f" | "F" | "false" | "FALSE" | "False" => false,
                _ => {
                    return Err(ConfigError::InvalidEntry {
                        origin: origin.to_string(),
                        key: key.to_string(),
                        name: name.clone(),
                        value: text.clone(),
                        reason: "expected true or false".to_string(),
                    });
                }
            };
            Ok((name.clone(), on))
        })
        .collect()
}

fn validate_enforce_node_allocatable(
    values: &[String],
    origin: &str,
    key: &str,
) -> Result<(), ConfigError> {
    for value in values {
        if !ENFORCE_NODE_ALLOCATABLE_VALUES.contains(&value.as_str()) {
            return Err(ConfigError::Unsupported {
                origin: origin.to_string(),
                key: key.to_string(),
                value: value.clone(),
                expected: ENFORCE_NODE_ALLOCATABLE_VALUES.join(", "),
            });
        }
    }
    if values.len() > 1 && values.iter().any(|v| v == "none") {
        return Err(ConfigError::Unsupported {
            origin: origin.to_string(),
            key: key.to_string(),
            value: values.join(","),
            expected: "\"none\" alone, or other values without it".to_string(),
        });
    }
    Ok(())
}
