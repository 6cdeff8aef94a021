//! The kubelet's container and image garbage collection against the runtime's real
//! containers and images: dead containers and sandboxes of ours, unused images by age and
//! by the image filesystem's thresholds.
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use super::{CriRuntime, POD_UID_LABEL, api, clamp_future_times, ownership, wall_now};
use crate::policy::container_gc::{self, ContainerGcPolicy, DeadContainer};
use crate::policy::image_gc::{self, Image};
use crate::policy::pod::Pod;
use crate::policy::types::Time;
use crate::runtime::logs;

/// What one garbage collection freed and removed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Collected {
    pub(crate) containers: Vec<String>,
    pub(crate) sandboxes: Vec<String>,
    pub(crate) images: Vec<String>,
    /// How many of `images` the age pass removed (`imageMaximumGCAge`); the others were
    /// removed for space, as the kubelet's `image_garbage_collected_total` tells them.
    pub(crate) images_by_age: usize,
    pub(crate) image_bytes: i64,
    pub(crate) errors: Vec<String>,
}

/// Removes dead containers of ours per the kubelet's rules (see
/// [`container_gc`](crate::policy::container_gc)), then the stopped sandboxes left
/// without containers of pods whose content is to go. `remove_all(uid)` says whether
/// everything of pod `uid` goes (evicted or deleted; on the eviction path also finished).
///
/// "Ours" is what [`ownership::Judge`] says: this agent's instance label, or an older
/// agent's unlabelled-instance sandbox that `recorded` (the sandboxes this agent's pod
/// records name) proves ours. Another agent's dead containers, sandboxes and log files
/// are never touched, whatever `remove_all` says of pods this agent does not know, and a
/// log file is deleted only below this agent's log directory.
pub(in crate::runtime) async fn collect_containers(
    cri: &CriRuntime,
    policy: &ContainerGcPolicy,
    recorded: &ownership::RecordedSandboxes,
    remove_all: impl Fn(&str) -> bool,
) -> Collected {
    let mut collected = Collected::default();
    let containers = match cri.client.list_containers().await {
        Ok(c) => c,
        Err(err) => {
            collected.errors.push(err.to_string());
            return collected;
        }
    };
    let judge = ownership::Judge {
        ownership: &cri.ownership,
        recorded,
    };
    let dead: Vec<DeadContainer> = containers
        .iter()
        .filter(|c| {
            judge.owns_container(c) && c.state == api::ContainerState::ContainerExited as i32
        })
        .map(|c| DeadContainer {
            id: c.id.clone(),
            pod_uid: c.labels.get(POD_UID_LABEL).cloned().unwrap_or_default(),
            name: c
                .metadata
                .as_ref()
                .map(|m| m.name.clone())
                .unwrap_or_default(),
            created_at: Duration::from_nanos(u64::try_from(c.created_at).unwrap_or(0)),
        })
        .collect();
    for id in container_gc::containers_to_remove(policy, &dead, &remove_all, wall_now()) {
        // The runtime keeps the log file: it goes with its container, as the kubelet does.
        let log = cri
            .client
            .container_status(&id)
            .await
            .ok()
            .map(|(status, _)| status.log_path)
            .filter(|path| !path.is_empty());
        match cri.client.remove_container(&id).await {
            Ok(()) => {
                if let Some(log) = log
                    .map(PathBuf::from)
                    .filter(|p| cri.ownership.log_is_ours(p) && p.exists())
                {
                    logs::remove(&log);
                }
                collected.containers.push(id);
            }
            Err(err) => collected.errors.push(err.to_string()),
        }
    }
    let remaining: BTreeSet<String> = match cri.client.list_containers().await {
        Ok(c) => c.into_iter().map(|c| c.pod_sandbox_id).collect(),
        Err(err) => {
            collected.errors.push(err.to_string());
            return collected;
        }
    };
    match cri.client.list_pod_sandboxes().await {
        Ok(sandboxes) => {
            for s in sandboxes.iter().filter(|s| judge.owns_sandbox(s)) {
                let uid = s.metadata.as_ref().map_or("", |m| m.uid.as_str());
                let ready = s.state == api::PodSandboxState::SandboxReady as i32;
                if ready || !remove_all(uid) || remaining.contains(&s.id) {
                    continue;
                }
                match cri.client.remove_pod_sandbox(&s.id).await {
                    Ok(()) => collected.sandboxes.push(s.id.clone()),
                    Err(err) => collected.errors.push(err.to_string()),
                }
            }
        }
        Err(err) => collected.errors.push(err.to_string()),
    }
    collected
}

/// The runtime's images as the collector sees them, with the images our pods use marked
/// in use (by the containers' images and the runtime's own view of running containers).
/// Done at start and before every collection, as the kubelet's image manager does, so
/// that an image's age counts from when the agent first saw it.
pub(in crate::runtime) async fn detect_images(
    cri: &CriRuntime,
    pods: &[Pod],
    now: Time,
) -> Result<(), String> {
    let listed = cri.client.list_images().await.map_err(|e| e.to_string())?;
    let images: Vec<Image> = listed
        .iter()
        .map(|i| Image {
            id: i.id.clone(),
            repo_tags: i.repo_tags.clone(),
            size_bytes: i64::try_from(i.size).unwrap_or(i64::MAX),
            pinned: i.pinned,
        })
        .collect();
    let mut in_use = image_gc::images_in_use(pods, &images);
    // Every container the runtime still has (running or dead) holds its image, whoever
    // made it: another agent's, or anyone's.
    let containers = cri
        .client
        .list_containers()
        .await
        .map_err(|e| e.to_string())?;
    in_use.extend(ownership::images_held(&containers));
    // The sandbox image is kept as the kubelet keeps it: every new pod needs it (runtimes
    // that pin images themselves also say so in `pinned`).
    let sandbox: BTreeSet<String> = cri
        .client
        .sandbox_image()
        .await
        .ok()
        .flatten()
        .into_iter()
        .collect();
    let mut state = cri.lock_images();
    // A clock stepped back while the agent ran: the times recorded since are in the future.
    clamp_future_times(&cri.images_file, &mut state, now);
    state.detect(&images, &in_use, &sandbox, now);
    cri.save_images(&state);
    Ok(())
}

async fn remove_images(cri: &CriRuntime, ids: Vec<String>, collected: &mut Collected) {
    for id in ids {
        let size = cri.lock_images().record(&id).map_or(0, |r| r.size_bytes);
        match cri.client.remove_image(&id).await {
            Ok(()) => {
                collected.image_bytes = collected.image_bytes.saturating_add(size);
                collected.images.push(id);
            }
            Err(err) => collected.errors.push(err.to_string()),
        }
    }
    let mut state = cri.lock_images();
    state.remove(&collected.images);
    cri.save_images(&state);
}

/// The image filesystem: capacity and available bytes of the filesystem that holds the
/// runtime's images (the mount point ImageFsInfo names).
pub(crate) async fn image_fs(cri: &CriRuntime) -> Result<(PathBuf, i64, i64), String> {
    let info = cri
        .client
        .image_fs_info()
        .await
        .map_err(|e| e.to_string())?;
    let mount = info
        .image_filesystems
        .first()
        .and_then(|fs| fs.fs_id.as_ref())
        .map(|id| PathBuf::from(&id.mountpoint))
        .ok_or("ImageFsInfo names no image filesystem")?;
    let fs = crate::observe::fs::statvfs(&mount).map_err(|e| e.to_string())?;
    let bytes = |b: u64| i64::try_from(b).unwrap_or(i64::MAX);
    Ok((mount, bytes(fs.capacity_bytes), bytes(fs.available_bytes)))
}

/// The start of an image collection: the images in use and seen noted at `now`; what
/// failed, as the collection's result, when they could not be.
async fn images_detected(cri: &CriRuntime, pods: &[Pod]) -> Result<(Collected, Time), Collected> {
    let mut collected = Collected::default();
    let now = wall_now();
    match detect_images(cri, pods, now).await {
        Ok(_) => Ok((collected, now)),
        Err(err) => {
            collected.errors.push(err);
            Err(collected)
        }
    }
}

/// The periodic image collection (the kubelet's image GC pass): images unused for longer
/// than the maximum age, then, when the image filesystem is at or above the high
/// threshold, unused images least recently used first down to the low threshold, none
/// younger than the minimum age, none in use or pinned.
pub(in crate::runtime) async fn collect_images_periodic(
    cri: &CriRuntime,
    pods: &[Pod],
) -> Collected {
    let (mut collected, now) = match images_detected(cri, pods).await {
        Ok(started) => started,
        Err(failed) => return failed,
    };
    let (_, capacity, available) = match image_fs(cri).await {
        Ok(fs) => fs,
        Err(err) => {
            collected.errors.push(err);
            return collected;
        }
    };
    let plan = {
        let state = cri.lock_images();
        image_gc::garbage_collect(&cri.policy, &state, capacity, available, now, cri.began_gc)
    };
    match plan {
        Ok(plan) => {
            remove_images(cri, plan.by_age.images, &mut collected).await;
            collected.images_by_age = collected.images.len();
            remove_images(cri, plan.by_space.plan.images, &mut collected).await;
        }
        Err(err) => collected.errors.push(err.to_string()),
    }
    collected
}

/// The eviction path's image collection (DeleteUnusedImages): every unused, unpinned image
/// past the minimum age.
pub(in crate::runtime) async fn collect_all_unused_images(
    cri: &CriRuntime,
    pods: &[Pod],
) -> Collected {
    let (mut collected, now) = match images_detected(cri, pods).await {
        Ok(started) => started,
        Err(failed) => return failed,
    };
    let ids: Vec<String> = {
        let state = cri.lock_images();
        image_gc::free_all_eligible(&cri.policy, &state, now).images
    };
    remove_images(cri, ids, &mut collected).await;
    collected
}
