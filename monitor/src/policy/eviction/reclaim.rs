//! Node-level reclaim: which garbage collection runs for which signal, and crediting what it
//! freed to the observations (kubelet: buildSignalToNodeReclaimFuncs, reclaimNodeLevelResources).
use super::ReclaimResult;
use crate::policy::signal::{Observations, Signal};

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

/// The reclaim steps for `signal`, in order (kubelet: buildSignalToNodeReclaimFuncs for an
/// imagefs that also holds the containers, i.e. no split containerfs):
/// - memory and pid signals: none (only eviction helps);
/// - without a dedicated imagefs, every disk signal: dead containers, then unused images;
/// - with one, imagefs and containerfs signals: dead containers, then unused images;
///   nodefs signals: none (the kubelet lists no reclaim for nodefs when images and
///   writable layers live elsewhere; pods are evicted for their logs and volumes).
pub fn node_reclaim_funcs(signal: Signal, dedicated_imagefs: bool) -> &'static [NodeReclaimFunc] {
    match signal {
        Signal::MemoryAvailable | Signal::AllocatableMemoryAvailable | Signal::PidAvailable => &[],
        Signal::NodeFsAvailable | Signal::NodeFsInodesFree if dedicated_imagefs => &[],
        _ => CONTAINERS_THEN_IMAGES,
    }
}

/// The signals measured on the same filesystem as `signal` (bytes then inodes), i.e. the
/// ones node-level reclaim on that filesystem improves. Without a dedicated imagefs,
/// nodefs, imagefs and containerfs are one device; with one, containerfs is the imagefs.
pub fn same_filesystem_signals(signal: Signal, dedicated_imagefs: bool) -> &'static [Signal] {
    const ONE_FS: &[Signal] = &[
        Signal::NodeFsAvailable,
        Signal::ImageFsAvailable,
        Signal::ContainerFsAvailable,
        Signal::NodeFsInodesFree,
        Signal::ImageFsInodesFree,
        Signal::ContainerFsInodesFree,
    ];
    const NODEFS: &[Signal] = &[Signal::NodeFsAvailable, Signal::NodeFsInodesFree];
    const IMAGEFS: &[Signal] = &[
        Signal::ImageFsAvailable,
        Signal::ContainerFsAvailable,
        Signal::ImageFsInodesFree,
        Signal::ContainerFsInodesFree,
    ];
    match signal {
        Signal::MemoryAvailable | Signal::AllocatableMemoryAvailable | Signal::PidAvailable => &[],
        _ if !dedicated_imagefs => ONE_FS,
        Signal::NodeFsAvailable | Signal::NodeFsInodesFree => NODEFS,
        _ => IMAGEFS,
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
    dedicated_imagefs: bool,
    freed: ReclaimResult,
) -> Observations {
    let mut credited = observations.clone();
    for affected in same_filesystem_signals(signal, dedicated_imagefs) {
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
