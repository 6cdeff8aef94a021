//! Evictions for local storage limits, independent of node pressure (kubelet:
//! eviction_manager.go localStorageEviction, emptyDirLimitEviction,
//! podEphemeralStorageLimitEviction, containerEphemeralStorageLimitEviction).
use super::{EvictionDecision, EvictionReason, kill_timeout};
use crate::pod::Pod;
use crate::quantity::Quantity;
use crate::stats::PodWithStats;
use crate::types::Resource;

const EPHEMERAL_STORAGE: &str = "ephemeral-storage";

/// Every pod over one of its local storage limits, each once, checked in the kubelet's
/// order: emptyDir sizeLimit, then the pod's total, then each container. Pods without
/// stats and critical pods are never evicted here. Every eviction is immediate, with
/// `grace_period_seconds` (the hard-eviction grace period).
pub fn local_storage_evictions(
    pods: &[PodWithStats],
    dedicated_imagefs: bool,
    grace_period_seconds: i64,
) -> Vec<EvictionDecision> {
    pods.iter()
        .filter(|p| !p.stats.is_missing() && !p.pod.is_critical())
        .filter_map(|p| {
            let (reason, message) = empty_dir_limit_exceeded(p)
                .or_else(|| pod_ephemeral_storage_limit_exceeded(p))
                .or_else(|| container_ephemeral_storage_limit_exceeded(p, dedicated_imagefs))?;
            Some(EvictionDecision {
                pod_key: p.pod.key(),
                signal: None,
                resource: Resource::EphemeralStorage,
                reason,
                grace_period_seconds,
                immediate: true,
                kill_timeout: kill_timeout(grace_period_seconds),
                message,
            })
        })
        .collect()
}

fn bytes(value: u64) -> Quantity {
    Quantity::from_units(i64::try_from(value).unwrap_or(i64::MAX))
}

/// An emptyDir whose usage is above its positive sizeLimit.
fn empty_dir_limit_exceeded(p: &PodWithStats) -> Option<(EvictionReason, String)> {
    p.pod.spec.volumes.iter().find_map(|volume| {
        let limit = volume.empty_dir.as_ref()?.size_limit?;
        let used = p
            .stats
            .volumes
            .iter()
            .find(|v| v.name == volume.name)?
            .used_bytes?;
        (limit > Quantity::ZERO && bytes(used) > limit).then(|| {
            (
                EvictionReason::EmptyDirSizeLimit,
                format!(
                    "Usage of EmptyDir volume {:?} exceeds the limit {:?}. ",
                    volume.name,
                    limit.to_string()
                ),
            )
        })
    })
}

/// Whether local storage isolation has anything to check on `pod`: an ephemeral-storage
/// limit on any container or an emptyDir with a sizeLimit.
pub fn has_local_storage_limit(pod: &Pod) -> bool {
    pod_ephemeral_storage_limit(pod).is_some()
        || pod
            .spec
            .volumes
            .iter()
            .any(|v| v.empty_dir.as_ref().is_some_and(|e| e.size_limit.is_some()))
}

/// The pod's ephemeral-storage limit as the kubelet sums it (component-helpers PodLimits):
/// the regular containers' limits added up, or the largest init container limit if that
/// is larger; `None` when no container sets one. Unlike the cgroup limit, containers
/// without a limit do not make the pod unlimited.
pub fn pod_ephemeral_storage_limit(pod: &Pod) -> Option<Quantity> {
    let limit = |c: &crate::pod::Container| c.resources.limits.get(EPHEMERAL_STORAGE).copied();
    let containers: Vec<Quantity> = pod.spec.containers.iter().filter_map(limit).collect();
    let init: Vec<Quantity> = pod.spec.init_containers.iter().filter_map(limit).collect();
    if containers.is_empty() && init.is_empty() {
        return None;
    }
    let steady: Quantity = containers.into_iter().sum();
    Some(init.into_iter().fold(steady, Quantity::max))
}

/// The pod's total ephemeral storage use above its limit.
fn pod_ephemeral_storage_limit_exceeded(p: &PodWithStats) -> Option<(EvictionReason, String)> {
    let limit = pod_ephemeral_storage_limit(&p.pod)?;
    let used = bytes(p.stats.ephemeral_storage_used_bytes.unwrap_or(0));
    (used > limit).then(|| {
        (
            EvictionReason::PodEphemeralStorageLimit,
            format!(
                "Pod ephemeral local storage usage exceeds the total limit of containers {limit}. "
            ),
        )
    })
}

/// A container whose logs (plus writable layer, when that shares nodefs) exceed its
/// non-zero ephemeral-storage limit.
fn container_ephemeral_storage_limit_exceeded(
    p: &PodWithStats,
    dedicated_imagefs: bool,
) -> Option<(EvictionReason, String)> {
    p.stats.containers.iter().find_map(|stats| {
        let container = p
            .pod
            .spec
            .containers
            .iter()
            .find(|c| c.name == stats.name)?;
        let limit = container
            .resources
            .limits
            .get(EPHEMERAL_STORAGE)
            .copied()
            .filter(|q| q.value() != 0)?;
        let mut used = stats.logs_used_bytes.unwrap_or(0);
        if !dedicated_imagefs {
            used = used.saturating_add(stats.rootfs_used_bytes.unwrap_or(0));
        }
        (bytes(used) > limit).then(|| {
            (
                EvictionReason::ContainerEphemeralStorageLimit,
                format!(
                    "Container {} exceeded its local ephemeral storage limit {:?}. ",
                    stats.name,
                    limit.to_string()
                ),
            )
        })
    })
}
