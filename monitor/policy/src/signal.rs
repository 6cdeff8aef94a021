//! Eviction signals, thresholds and the observations they are evaluated against
//! (kubelet: pkg/kubelet/eviction/api/types.go and the signal maps in helpers.go).
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::quantity::{Format, Quantity, QuantityOrPercent};
use super::types::{NodeConditionType, Resource, Time};

/// An eviction signal: a named amount of some resource still available on the node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Signal {
    /// Node memory capacity minus the node's working set.
    MemoryAvailable,
    /// Node allocatable memory minus the working set of the pods cgroup.
    AllocatableMemoryAvailable,
    /// Free bytes on the filesystem holding the kubelet root dir, logs and volumes.
    NodeFsAvailable,
    NodeFsInodesFree,
    /// Free bytes on the container runtime's image filesystem.
    ImageFsAvailable,
    ImageFsInodesFree,
    /// Free bytes on the filesystem holding containers' writable layers (the kubelet derives
    /// its thresholds from nodefs or imagefs; see `threshold::update_container_fs_thresholds`).
    ContainerFsAvailable,
    ContainerFsInodesFree,
    /// Process ids left before the node's pid limit.
    PidAvailable,
    /// The agent's own signal (not the kubelet's, so not in [`Signal::ALL`] and never
    /// read from its eviction keys): the share of time the pods and the node were not all
    /// stalled on memory, in hundredths of a percent (10000 − PSI `full` avg10 × 100),
    /// and only while a memory signal is near its threshold (see [`crate::stall`]).
    MemoryStall,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unsupported eviction signal {0:?} (expected one of memory.available, allocatableMemory.available, nodefs.available, nodefs.inodesFree, imagefs.available, imagefs.inodesFree, containerfs.available, containerfs.inodesFree, pid.available)"
)]
pub struct UnknownSignal(pub String);

impl Signal {
    pub const ALL: [Signal; 9] = [
        Signal::MemoryAvailable,
        Signal::AllocatableMemoryAvailable,
        Signal::NodeFsAvailable,
        Signal::NodeFsInodesFree,
        Signal::ImageFsAvailable,
        Signal::ImageFsInodesFree,
        Signal::ContainerFsAvailable,
        Signal::ContainerFsInodesFree,
        Signal::PidAvailable,
    ];

    /// The kubelet's spelling, as written in configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            Signal::MemoryAvailable => "memory.available",
            Signal::AllocatableMemoryAvailable => "allocatableMemory.available",
            Signal::NodeFsAvailable => "nodefs.available",
            Signal::NodeFsInodesFree => "nodefs.inodesFree",
            Signal::ImageFsAvailable => "imagefs.available",
            Signal::ImageFsInodesFree => "imagefs.inodesFree",
            Signal::ContainerFsAvailable => "containerfs.available",
            Signal::ContainerFsInodesFree => "containerfs.inodesFree",
            Signal::PidAvailable => "pid.available",
            Signal::MemoryStall => "memory.stall",
        }
    }

    /// The resource that evicting pods reclaims for this signal (kubelet: signalToResource).
    pub fn resource(self) -> Resource {
        match self {
            Signal::MemoryAvailable | Signal::AllocatableMemoryAvailable | Signal::MemoryStall => {
                Resource::Memory
            }
            Signal::NodeFsAvailable | Signal::ImageFsAvailable | Signal::ContainerFsAvailable => {
                Resource::EphemeralStorage
            }
            Signal::NodeFsInodesFree
            | Signal::ImageFsInodesFree
            | Signal::ContainerFsInodesFree => Resource::Inodes,
            Signal::PidAvailable => Resource::Pids,
        }
    }

    /// The node condition reported while a threshold on this signal is met
    /// (kubelet: signalToNodeCondition).
    pub fn node_condition(self) -> NodeConditionType {
        match self.resource() {
            Resource::Memory => NodeConditionType::MemoryPressure,
            Resource::EphemeralStorage | Resource::Inodes => NodeConditionType::DiskPressure,
            Resource::Pids => NodeConditionType::PIDPressure,
        }
    }

    /// True for the memory signals, which the kubelet reclaims before any other
    /// (kubelet: byEvictionPriority).
    pub fn is_memory(self) -> bool {
        self.resource() == Resource::Memory
    }

    /// True when the signal's unit is bytes (so values print with binary suffixes).
    pub fn is_bytes(self) -> bool {
        self != Signal::MemoryStall
            && matches!(
                self.resource(),
                Resource::Memory | Resource::EphemeralStorage
            )
    }
}

impl fmt::Display for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Signal {
    type Err = UnknownSignal;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Signal::ALL
            .into_iter()
            .find(|signal| signal.as_str() == s)
            .ok_or_else(|| UnknownSignal(s.to_string()))
    }
}

impl Serialize for Signal {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Signal {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// How an observation is compared with a threshold. The kubelet only has `LessThan` (the
/// direction is implied by the signal: every signal is an amount still available).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Operator {
    #[default]
    LessThan,
}

/// An eviction threshold, `signal < value`, hard when `grace_period` is zero.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Threshold {
    pub signal: Signal,
    pub operator: Operator,
    pub value: QuantityOrPercent,
    /// How long the threshold must be met before it drives eviction; zero for a hard one.
    pub grace_period: Duration,
    /// How far past the threshold eviction must push the signal before the pressure
    /// counts as resolved.
    pub min_reclaim: Option<QuantityOrPercent>,
}

impl Threshold {
    /// A hard threshold: acts at once (kubelet: isHardEvictionThreshold).
    pub fn hard(signal: Signal, value: QuantityOrPercent) -> Self {
        Threshold {
            signal,
            operator: Operator::LessThan,
            value,
            grace_period: Duration::ZERO,
            min_reclaim: None,
        }
    }

    /// A soft threshold with its grace period.
    pub fn soft(signal: Signal, value: QuantityOrPercent, grace_period: Duration) -> Self {
        Threshold {
            grace_period,
            ..Threshold::hard(signal, value)
        }
    }

    pub fn with_min_reclaim(self, min_reclaim: QuantityOrPercent) -> Self {
        Threshold {
            min_reclaim: Some(min_reclaim),
            ..self
        }
    }

    pub fn is_hard(&self) -> bool {
        self.grace_period.is_zero()
    }

    /// The threshold as an amount of the signal's unit, percentages resolved against
    /// `capacity` (kubelet: GetThresholdQuantity).
    pub fn quantity(&self, capacity: i64) -> i64 {
        self.value.resolve(capacity)
    }

    /// The minimum reclaim as an amount (zero when unset).
    pub fn min_reclaim_quantity(&self, capacity: i64) -> i64 {
        self.min_reclaim.map_or(0, |value| value.resolve(capacity))
    }
}

impl fmt::Display for Threshold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}<{}", self.signal, format_value(self.value))?;
        if !self.is_hard() {
            write!(f, " (grace period {:?})", self.grace_period)?;
        }
        if let Some(min_reclaim) = self.min_reclaim {
            write!(f, " (minimum reclaim {})", format_value(min_reclaim))?;
        }
        Ok(())
    }
}

/// Formats a threshold value the way a user writes it ("500Mi", "10%").
pub fn format_value(value: QuantityOrPercent) -> String {
    match value {
        QuantityOrPercent::Quantity(q) => q.to_string(),
        QuantityOrPercent::Percent(p) => {
            let percent = p * 100.0;
            // Drop float noise such as 10.000000000000002 from 0.1 × 100.
            let rounded = (percent * 1e6).round() / 1e6;
            format!("{rounded}%")
        }
    }
}

/// Formats an observed amount of a signal's unit for messages as the kubelet's
/// observations print: bytes as BinarySI ("300Mi"), inode and pid counts as DecimalSI
/// ("200k") (kubelet: makeSignalObservations).
pub fn format_amount(signal: Signal, amount: i64) -> String {
    if signal == Signal::MemoryStall {
        return format!("{}%", amount as f64 / 100.0);
    }
    let format = if signal.is_bytes() {
        Format::BinarySI
    } else {
        Format::DecimalSI
    };
    Quantity::new(amount, format).to_string()
}

/// One reading of a signal: how much is available out of what capacity, and when it was
/// measured. Stats whose `time` did not advance since the previous synchronize are stale
/// and ignored for eviction (kubelet: thresholdsUpdatedStats). A source without its own
/// timestamp passes the time of the synchronize.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignalObservation {
    pub available: i64,
    pub capacity: i64,
    pub time: Time,
}

/// The observations of one synchronize, by signal (kubelet: signalObservations).
pub type Observations = BTreeMap<Signal, SignalObservation>;

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;
    use crate::quantity::parse_quantity_or_percent;

    #[rstest]
    #[case(
        "memory.available",
        Signal::MemoryAvailable,
        Resource::Memory,
        NodeConditionType::MemoryPressure
    )]
    #[case(
        "allocatableMemory.available",
        Signal::AllocatableMemoryAvailable,
        Resource::Memory,
        NodeConditionType::MemoryPressure
    )]
    #[case(
        "nodefs.available",
        Signal::NodeFsAvailable,
        Resource::EphemeralStorage,
        NodeConditionType::DiskPressure
    )]
    #[case(
        "nodefs.inodesFree",
        Signal::NodeFsInodesFree,
        Resource::Inodes,
        NodeConditionType::DiskPressure
    )]
    #[case(
        "imagefs.available",
        Signal::ImageFsAvailable,
        Resource::EphemeralStorage,
        NodeConditionType::DiskPressure
    )]
    #[case(
        "imagefs.inodesFree",
        Signal::ImageFsInodesFree,
        Resource::Inodes,
        NodeConditionType::DiskPressure
    )]
    #[case(
        "containerfs.available",
        Signal::ContainerFsAvailable,
        Resource::EphemeralStorage,
        NodeConditionType::DiskPressure
    )]
    #[case(
        "containerfs.inodesFree",
        Signal::ContainerFsInodesFree,
        Resource::Inodes,
        NodeConditionType::DiskPressure
    )]
    #[case(
        "pid.available",
        Signal::PidAvailable,
        Resource::Pids,
        NodeConditionType::PIDPressure
    )]
    fn signal_vocabulary(
        #[case] text: &str,
        #[case] signal: Signal,
        #[case] resource: Resource,
        #[case] condition: NodeConditionType,
    ) {
        assert_eq!(text.parse::<Signal>().unwrap(), signal, "parse {text}");
        assert_eq!(signal.as_str(), text);
        assert_eq!(signal.resource(), resource, "{text} reclaims");
        assert_eq!(signal.node_condition(), condition, "{text} condition");
    }

    #[rstest]
    #[case("memory.Available")]
    #[case("swap.available")]
    #[case("")]
    fn unknown_signals_are_rejected(#[case] text: &str) {
        let err = text.parse::<Signal>().unwrap_err();
        assert!(err.to_string().contains(&format!("{text:?}")), "{err}");
    }

    #[test]
    fn hard_and_soft() {
        let value = parse_quantity_or_percent("500Mi").unwrap();
        assert!(Threshold::hard(Signal::MemoryAvailable, value).is_hard());
        assert!(
            !Threshold::soft(Signal::MemoryAvailable, value, Duration::from_secs(90)).is_hard()
        );
    }

    #[rstest]
    #[case("500Mi", None, 10 << 30, 500 << 20, 0)]
    #[case("10%", Some("5%"), 1000, 100, 50)]
    #[case("1Gi", Some("500Mi"), 100 << 30, 1 << 30, 500 << 20)]
    fn quantities_resolve_against_capacity(
        #[case] value: &str,
        #[case] min_reclaim: Option<&str>,
        #[case] capacity: i64,
        #[case] quantity: i64,
        #[case] reclaim: i64,
    ) {
        let mut threshold = Threshold::hard(
            Signal::NodeFsAvailable,
            parse_quantity_or_percent(value).unwrap(),
        );
        if let Some(m) = min_reclaim {
            threshold = threshold.with_min_reclaim(parse_quantity_or_percent(m).unwrap());
        }
        assert_eq!(threshold.quantity(capacity), quantity);
        assert_eq!(threshold.min_reclaim_quantity(capacity), reclaim);
    }

    #[rstest]
    #[case("10%", "10%")]
    #[case("7.5%", "7.5%")]
    #[case("500Mi", "500Mi")]
    fn values_format_as_written(#[case] text: &str, #[case] shown: &str) {
        assert_eq!(
            format_value(parse_quantity_or_percent(text).unwrap()),
            shown
        );
    }

    #[test]
    fn amounts_format_by_unit() {
        assert_eq!(format_amount(Signal::MemoryAvailable, 300 << 20), "300Mi");
        assert_eq!(format_amount(Signal::NodeFsInodesFree, 4096), "4096");
        assert_eq!(format_amount(Signal::NodeFsInodesFree, 200_000), "200k");
        assert_eq!(format_amount(Signal::NodeFsAvailable, 1000), "1k");
        assert_eq!(
            format_amount(Signal::NodeFsAvailable, 7_366_280 << 10),
            "7366280Ki"
        );
    }
}
