//! Node-level reclaim: which garbage collection runs for which signal, and crediting what it
//! freed to the observations (kubelet: buildSignalToNodeReclaimFuncs, reclaimNodeLevelResources).
use super::ReclaimResult;
use crate::signal::{Observations, Signal};
use crate::types::FsLayout;

/// One node-level reclaim step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeReclaimFunc {
    /// Remove exited containers (kubelet: containerGC.DeleteAllUnusedContainers).
    DeleteAllUnusedContainers,
    /// Remove images no container uses (kubelet: imageGC.DeleteUnusedImages).
    DeleteUnusedImages,
}

const CONTAINERS_THEN_IMAGES: &[NodeReclaimFunc] = &[
    NodeReclaimFunc::DeleteAllUnusedContainers,
    NodeReclaimFunc::DeleteUnusedImages,
];

/// The reclaim steps for `signal`, in order (kubelet: buildSignalToNodeReclaimFuncs):
/// - memory and pid signals: none (only eviction helps);
/// - one filesystem: every disk signal, dead containers then unused images;
/// - a dedicated imagefs holding the writable layers too: imagefs and containerfs signals,
///   dead containers then unused images; nodefs signals none (pods are evicted for their
///   logs and volumes);
/// - a split imagefs (images alone on it): imagefs signals delete unused images; nodefs
///   and containerfs signals (the writable layers live on nodefs) dead containers.
pub fn node_reclaim_funcs(signal: Signal, layout: FsLayout) -> &'static [NodeReclaimFunc] {
    const IMAGES: &[NodeReclaimFunc] = &[NodeReclaimFunc::DeleteUnusedImages];
    const CONTAINERS: &[NodeReclaimFunc] = &[NodeReclaimFunc::DeleteAllUnusedContainers];
    let nodefs = matches!(signal, Signal::NodeFsAvailable | Signal::NodeFsInodesFree);
    let imagefs = matches!(signal, Signal::ImageFsAvailable | Signal::ImageFsInodesFree);
    match (signal, layout) {
        (
            Signal::MemoryAvailable
            | Signal::AllocatableMemoryAvailable
            | Signal::MemoryStall
            | Signal::PidAvailable,
            _,
        ) => &[],
        (_, FsLayout::Shared) => CONTAINERS_THEN_IMAGES,
        (_, FsLayout::DedicatedImageFs) if nodefs => &[],
        (_, FsLayout::DedicatedImageFs) => CONTAINERS_THEN_IMAGES,
        (_, FsLayout::SplitImageFs) if imagefs => IMAGES,
        (_, FsLayout::SplitImageFs) => CONTAINERS,
    }
}

/// The signals measured on the same filesystem as `signal` (bytes then inodes), i.e. the
/// ones node-level reclaim on that filesystem improves. On one filesystem that is every
/// disk signal; with a dedicated imagefs, containerfs is the imagefs; with a split one,
/// containerfs is the nodefs.
pub fn same_filesystem_signals(signal: Signal, layout: FsLayout) -> &'static [Signal] {
    const ONE_FS: &[Signal] = &[
        Signal::NodeFsAvailable,
        Signal::ImageFsAvailable,
        Signal::ContainerFsAvailable,
        Signal::NodeFsInodesFree,
        Signal::ImageFsInodesFree,
        Signal::ContainerFsInodesFree,
    ];
    const NODEFS: &[Signal] = &[Signal::NodeFsAvailable, Signal::NodeFsInodesFree];
    const IMAGEFS_WITH_CONTAINERS: &[Signal] = &[
        Signal::ImageFsAvailable,
        Signal::ContainerFsAvailable,
        Signal::ImageFsInodesFree,
        Signal::ContainerFsInodesFree,
    ];
    const NODEFS_WITH_CONTAINERS: &[Signal] = &[
        Signal::NodeFsAvailable,
        Signal::ContainerFsAvailable,
        Signal::NodeFsInodesFree,
        Signal::ContainerFsInodesFree,
    ];
    const IMAGEFS_ALONE: &[Signal] = &[Signal::ImageFsAvailable, Signal::ImageFsInodesFree];
    let imagefs = matches!(signal, Signal::ImageFsAvailable | Signal::ImageFsInodesFree);
    let nodefs = matches!(signal, Signal::NodeFsAvailable | Signal::NodeFsInodesFree);
    match (signal, layout) {
        (
            Signal::MemoryAvailable
            | Signal::AllocatableMemoryAvailable
            | Signal::MemoryStall
            | Signal::PidAvailable,
            _,
        ) => &[],
        (_, FsLayout::Shared) => ONE_FS,
        (_, FsLayout::DedicatedImageFs) if nodefs => NODEFS,
        (_, FsLayout::DedicatedImageFs) => IMAGEFS_WITH_CONTAINERS,
        (_, FsLayout::SplitImageFs) if imagefs => IMAGEFS_ALONE,
        (_, FsLayout::SplitImageFs) => NODEFS_WITH_CONTAINERS,
    }
}

/// The observations as they will be once `freed` is back on the filesystem of `signal`.
///
/// The kubelet re-reads its stats after reclaim; we credit what the reclaimer reports
/// instead (the same optimistic update, without a second, possibly stale, read). A signal's
/// available amount never exceeds its capacity.
pub fn credit_reclaim(
    observations: &Observations,
    signal: Signal,
    layout: FsLayout,
    freed: ReclaimResult,
) -> Observations {
    let mut credited = observations.clone();
    for affected in same_filesystem_signals(signal, layout) {
        if let Some(observation) = credited.get_mut(affected) {
            let amount = if affected.is_bytes() {
                freed.freed_bytes
            } else {
                freed.freed_inodes
            };
            let amount = i64::try_from(amount).unwrap_or(i64::MAX);
            observation.available = observation
                .available
                .saturating_add(amount)
                .min(observation.capacity.max(observation.available));
        }
    }
    credited
}
