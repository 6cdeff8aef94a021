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

/// Where images and containers' writable layers live (kubelet: withImageFs and
/// KubeletSeparateDiskGC's split image filesystem). It decides which thresholds mirror as
/// containerfs ones, how pods rank for each disk signal, and what node-level reclaim does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum FsLayout {
    /// One filesystem: nodefs, imagefs and containerfs are the same device.
    #[default]
    Shared,
    /// Images and writable layers together on an image filesystem of their own.
    DedicatedImageFs,
    /// Images on their own filesystem; writable layers stay on nodefs (containerfs is
    /// nodefs).
    SplitImageFs,
}

impl FsLayout {
    /// One filesystem, or (`dedicated`) an image filesystem that holds the writable layers
    /// too: the two layouts the kubelet knew before the split image filesystem.
    pub const fn with_imagefs(dedicated: bool) -> FsLayout {
        if dedicated {
            FsLayout::DedicatedImageFs
        } else {
            FsLayout::Shared
        }
    }

    /// Images are on a filesystem other than nodefs.
    pub fn has_imagefs(self) -> bool {
        self != FsLayout::Shared
    }

    /// Containers' writable layers are on the image filesystem.
    pub fn containers_on_imagefs(self) -> bool {
        self == FsLayout::DedicatedImageFs
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
