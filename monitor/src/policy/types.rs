//! Small vocabulary types shared by every part of the policy.
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// A point in time for the policy: the offset from an arbitrary, fixed origin (the agent's
/// start, or a scenario's start). The policy never reads a clock; callers pass `now`.
pub type Time = Duration;

/// The kubelet's Quality of Service classes (pkg/apis/core/v1/helper/qos).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum QosClass {
    Guaranteed,
    Burstable,
    BestEffort,
}

impl QosClass {
    pub fn as_str(self) -> &'static str {
        match self {
            QosClass::Guaranteed => "Guaranteed",
            QosClass::Burstable => "Burstable",
            QosClass::BestEffort => "BestEffort",
        }
    }
}

/// Node conditions the eviction manager maintains.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum NodeConditionType {
    MemoryPressure,
    DiskPressure,
    PIDPressure,
}

impl NodeConditionType {
    pub fn as_str(self) -> &'static str {
        match self {
            NodeConditionType::MemoryPressure => "MemoryPressure",
            NodeConditionType::DiskPressure => "DiskPressure",
            NodeConditionType::PIDPressure => "PIDPressure",
        }
    }
}

/// Resources the node can be starved of (the kubelet's `v1.ResourceName` values used by
/// the eviction manager).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Resource {
    #[serde(rename = "memory")]
    Memory,
    #[serde(rename = "ephemeral-storage")]
    EphemeralStorage,
    /// Inodes on a filesystem (the kubelet's internal "inodes" resource name).
    #[serde(rename = "inodes")]
    Inodes,
    #[serde(rename = "pids")]
    Pids,
}

impl Resource {
    pub fn as_str(self) -> &'static str {
        match self {
            Resource::Memory => "memory",
            Resource::EphemeralStorage => "ephemeral-storage",
            Resource::Inodes => "inodes",
            Resource::Pids => "pids",
        }
    }
}

/// Priority at and above which a pod is critical (the kubelet's
/// `scheduling.SystemCriticalPriority`, 2 × 10⁹).
pub const SYSTEM_CRITICAL_PRIORITY: i32 = 2_000_000_000;
