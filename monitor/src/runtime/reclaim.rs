//! Node-level reclaim: the kubelet's container and image garbage collection, on the
//! eviction path ([`NodeReclaim`](super::port::NodeReclaim)) and every `monitor.imageGcPeriod`. On the process
//! runtime it removes dead containers' logs; on a container runtime, dead containers,
//! sandboxes and unused images (see [`cri::collect_containers`]).
use std::sync::Arc;

use super::shared::Shared;
use super::{cri, logs};
use crate::events::EventReason;
use crate::policy::eviction::ReclaimResult;
use crate::policy::signal::Signal;
use crate::policy::types::Resource;

/// Node-level reclaim: on a container runtime, [`reclaim_on_runtime`]; on the process
/// runtime, container GC: the logs of dead containers go, every run but the newest of
/// each live container, and everything of finished pods (there are no images to
/// collect). The runtime's lock is held only to list what to delete, never while
/// deleting.
pub(super) fn reclaim(shared: &Arc<Shared>, resource: Resource, signal: Signal) -> ReclaimResult {
    if let Some(cri) = shared.cri.clone() {
        return reclaim_on_runtime(shared, &cri, resource, signal);
    }
    let mut doomed = Vec::new();
    {
        let inner = shared.lock();
        for p in inner.pods.values() {
            let pod = &p.record.pod;
            let dir = logs::pod_dir(
                &shared.config.log_dir,
                pod.namespace(),
                &pod.metadata.name,
                &p.record.uid,
            );
            if p.record.phase.is_terminal() && p.cgroup.is_none() {
                doomed.push(dir);
            } else {
                for c in &p.record.containers {
                    doomed.extend(logs::old_runs(&dir.join(&c.name)));
                }
            }
        }
    }
    let mut freed = ReclaimResult::default();
    let mut removed = 0;
    for path in doomed {
        let (bytes, inodes) = logs::remove(&path);
        removed += u64::from(inodes > 0);
        freed.freed_bytes += bytes;
        freed.freed_inodes += inodes;
    }
    shared
        .state
        .record_gc("eviction", &[("log", removed, freed.freed_bytes)]);
    shared.state.event(
        EventReason::ContainerGC,
        "node",
        format!(
            "node-level reclaim for {} ({}): removed dead containers' logs, freed {} bytes and {} inodes",
            resource.as_str(),
            signal.as_str(),
            freed.freed_bytes,
            freed.freed_inodes
        ),
    );
    freed
}

/// The pods as garbage collection sees them.
struct GcView {
    /// Pods not finished.
    running: std::collections::BTreeSet<String>,
    /// Pods whose content (dead containers, logs) is kept: every pod the agent still
    /// has, but the evicted and preempted ones (the kubelet's ShouldPodContentBeRemoved).
    kept: std::collections::BTreeSet<String>,
    /// The specs of the running pods (for the images in use).
    specs: Vec<crate::policy::pod::Pod>,
    /// The sandboxes the records name, with their pods' uids: what proves an older
    /// agent's sandbox (one without an instance label) ours.
    recorded: cri::ownership::RecordedSandboxes,
}

fn gc_view(shared: &Shared) -> GcView {
    let inner = shared.lock();
    let mut view = GcView {
        running: Default::default(),
        kept: Default::default(),
        specs: Vec::new(),
        recorded: Default::default(),
    };
    for (uid, p) in &inner.pods {
        if let Some(sandbox) = &p.record.sandbox_id {
            view.recorded.insert(sandbox.clone(), uid.clone());
        }
        if !p.record.phase.is_terminal() {
            view.running.insert(uid.clone());
            view.specs
                .push(crate::policy::pod::Pod::clone(&p.record.pod));
        }
        let removed = matches!(p.record.reason.as_deref(), Some("Evicted" | "Preempted"));
        if !removed {
            view.kept.insert(uid.clone());
        }
    }
    view
}

/// The eviction path's node-level reclaim on a container runtime (the kubelet's
/// DeleteAllUnusedContainers, then DeleteUnusedImages): every dead container of ours,
/// then every unused image past the minimum age. Runs on a blocking thread: the runtime's
/// calls are made from it with the agent's tokio runtime.
fn reclaim_on_runtime(
    shared: &Arc<Shared>,
    cri: &Arc<cri::CriRuntime>,
    resource: Resource,
    signal: Signal,
) -> ReclaimResult {
    let view = gc_view(shared);
    let policy = shared.config.container_gc;
    // As the kubelet's DeleteAllUnusedContainers: finished pods (the evicted among them)
    // lose every dead container.
    let remove_all = |uid: &str| !view.running.contains(uid);
    let collect = async {
        let containers = cri::collect_containers(cri, &policy, &view.recorded, remove_all).await;
        let images = cri::collect_all_unused_images(cri, &view.specs).await;
        (containers, images)
    };
    let (containers, images) = match tokio::runtime::Handle::try_current() {
        Ok(handle) => handle.block_on(collect),
        Err(_) => return ReclaimResult::default(),
    };
    for err in containers.errors.iter().chain(&images.errors) {
        shared
            .state
            .event(EventReason::FailedGC, "node", err.clone());
    }
    // Removed images are freed at once (the runtime collects them before it answers);
    // a removed container's writable layer is deleted by the runtime in the background.
    let freed = ReclaimResult {
        freed_bytes: u64::try_from(images.image_bytes).unwrap_or(0),
        freed_inodes: 0,
        released_later: !containers.containers.is_empty(),
    };
    record_gc(shared, "eviction", &containers, &images);
    shared.state.event(
        EventReason::ContainerGC,
        "node",
        format!(
            "node-level reclaim for {} ({}): removed {} dead container(s), {} sandbox(es) and {} unused image(s), freed {} bytes",
            resource.as_str(),
            signal.as_str(),
            containers.containers.len(),
            containers.sandboxes.len(),
            images.images.len(),
            freed.freed_bytes
        ),
    );
    freed
}

/// One periodic pass: dead containers per the kubelet's rules, then images by age and by
/// the image filesystem's thresholds. Reported as events.
async fn image_gc_pass(shared: &Shared, cri: &cri::CriRuntime) {
    let view = gc_view(shared);
    let remove_all = |uid: &str| !view.kept.contains(uid);
    let containers =
        cri::collect_containers(cri, &shared.config.container_gc, &view.recorded, remove_all).await;
    let images = cri::collect_images_periodic(cri, &view.specs).await;
    for err in containers.errors.iter().chain(&images.errors) {
        shared
            .state
            .event(EventReason::FailedGC, "node", err.clone());
    }
    if !containers.containers.is_empty() || !containers.sandboxes.is_empty() {
        shared.state.event(
            EventReason::ContainerGC,
            "node",
            format!(
                "removed {} dead container(s) and {} sandbox(es)",
                containers.containers.len(),
                containers.sandboxes.len()
            ),
        );
    }
    if !images.images.is_empty() {
        shared.state.event(
            EventReason::ImageGC,
            "node",
            format!(
                "removed {} unused image(s), {} bytes: {}",
                images.images.len(),
                images.image_bytes,
                images.images.join(", ")
            ),
        );
    }
    record_gc(shared, "periodic", &containers, &images);
}

/// Counts one collection on a container runtime for `/metrics`.
fn record_gc(shared: &Shared, trigger: &str, containers: &cri::Collected, images: &cri::Collected) {
    let count = |v: &Vec<String>| u64::try_from(v.len()).unwrap_or(u64::MAX);
    shared.state.record_gc(
        trigger,
        &[
            ("container", count(&containers.containers), 0),
            ("sandbox", count(&containers.sandboxes), 0),
            (
                "image",
                count(&images.images),
                u64::try_from(images.image_bytes).unwrap_or(0),
            ),
        ],
    );
    let by_age = images.images_by_age.min(images.images.len());
    shared.state.record_images_collected(
        u64::try_from(by_age).unwrap_or(u64::MAX),
        u64::try_from(images.images.len() - by_age).unwrap_or(u64::MAX),
    );
}

/// The image collector's period: a pass every `monitor.imageGcPeriod`.
pub(super) async fn collect_images_periodically(shared: Arc<Shared>) {
    let Some(cri) = shared.cri.clone() else {
        return;
    };
    let mut tick = tokio::time::interval(shared.config.image_gc_period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Images are detected at once (their ages count from here); the first collection
    // comes one period later, as the kubelet's does.
    tick.tick().await;
    let view = gc_view(&shared);
    if let Err(err) = cri::detect_images(&cri, &view.specs, cri::wall_now()).await {
        shared.state.event(EventReason::FailedGC, "node", err);
    }
    loop {
        tick.tick().await;
        image_gc_pass(&shared, &cri).await;
    }
}
