//! Pods on a CRI container runtime (containerd): each pod a sandbox, each container a CRI
//! container, in the same QoS cgroup hierarchy as the process runtime's pods (the
//! sandbox's cgroup parent is the pod's cgroup, so the runtime's containers land under it
//! and every reader of pod cgroups, the hot path's `cgroup.kill` included, works
//! unchanged).
//!
//! The pod lifecycle (restarts, eviction, adoption, records) stays in the runtime; this
//! module does what differs: the sandbox and container configurations, starting a
//! container through the CRI (image pull policy, create, start), its exit code, stopping
//! a pod through the CRI, a container's writable layer, and the kubelet's container and
//! image garbage collection against the runtime's real containers and images.
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use crate::policy::container_gc::{self, ContainerGcPolicy, DeadContainer};
use crate::policy::image_gc::{self, Image, ImageGcPolicy, ImageGcState, ImageRecord};
use crate::policy::pod::{Container, Pod};
use crate::policy::qos::{self, CgroupOptions};
use crate::policy::types::Time;

use super::cgroups::PodCgroup;
use super::logs;

pub mod client;
pub mod ownership;
pub mod stop;

/// Types and stubs generated from the CRI v1 protos (package `runtime.v1`).
#[expect(
    clippy::all,
    clippy::pedantic,
    reason = "generated code: its style is the generator's"
)]
pub mod api {
    tonic::include_proto!("runtime.v1");
}

pub use client::{CriClient, CriError, socket_of_endpoint};
pub use ownership::{INSTANCE_LABEL, Ownership};

/// The label on every sandbox and container the agent creates: garbage collection and
/// clean-up never touch anything without it (nor anything another agent's
/// [`INSTANCE_LABEL`] marks: see [`ownership`]).
pub const MANAGED_LABEL: &str = "monitor.managed";
/// The pod uid label (the kubelet's `io.kubernetes.pod.uid`).
pub const POD_UID_LABEL: &str = "io.kubernetes.pod.uid";
/// The container name label (the kubelet's `io.kubernetes.container.name`).
pub const CONTAINER_NAME_LABEL: &str = "io.kubernetes.container.name";

/// The CRI side of the runtime: the client, and the image collector's memory.
pub struct CriRuntime {
    pub client: CriClient,
    /// One sandbox creation at a time: two containers of a new pod must not both make one.
    pub(super) sandboxes: tokio::sync::Mutex<()>,
    images: Mutex<ImageGcState>,
    /// Where the image records live between agent restarts (first detected, last used).
    images_file: PathBuf,
    /// When the collector first ran on this node (persisted with the records).
    began_gc: Time,
    policy: ImageGcPolicy,
    /// Who this agent is in the runtime: the labels it puts on what it creates, and what
    /// its garbage collection may touch.
    pub ownership: Ownership,
}

/// What is kept of the image collector between runs.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct ImagesFile {
    began_gc: Time,
    records: Vec<ImageRecord>,
}

/// Now, as the image collector counts time (since the Unix epoch, so that it survives
/// agent restarts).
pub fn wall_now() -> Time {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
}

impl CriRuntime {
    /// A runtime on `socket`, its image records loaded from `state_dir/images.json`. A
    /// corrupt records file is set aside (renamed `.corrupt`) and reported, not fatal.
    /// `ownership` is the agent's identity in the runtime.
    pub fn new(
        socket: &Path,
        state_dir: &Path,
        policy: ImageGcPolicy,
        ownership: Ownership,
    ) -> Result<(CriRuntime, Option<String>), CriError> {
        let client = CriClient::new(socket)?;
        let images_file = state_dir.join("images.json");
        let mut warning = None;
        let (began_gc, mut state) = match std::fs::read(&images_file) {
            Ok(bytes) => match serde_json::from_slice::<ImagesFile>(&bytes) {
                Ok(file) => (file.began_gc, ImageGcState::from_records(file.records)),
                Err(err) => {
                    let aside = images_file.with_extension("json.corrupt");
                    let _ = std::fs::rename(&images_file, &aside);
                    warning = Some(format!(
                        "{}: {err}; set aside as {}, image times start afresh",
                        images_file.display(),
                        aside.display()
                    ));
                    (wall_now(), ImageGcState::new())
                }
            },
            Err(_) => (wall_now(), ImageGcState::new()),
        };
        // Times from the future count as now, and the file is rewritten to say so.
        let now = wall_now();
        let mut rewrite = clamp_future_times(&images_file, &mut state, now);
        if began_gc > now {
            tracing::warn!(
                file = %images_file.display(),
                "the image collector's start (beganGc) is recorded after now: counted as now and rewritten"
            );
            rewrite = true;
        }
        let began_gc = began_gc.min(now);
        if rewrite {
            write_images_file(&images_file, began_gc, &state);
        }
        Ok((
            CriRuntime {
                client,
                sandboxes: tokio::sync::Mutex::new(()),
                images: Mutex::new(state),
                images_file,
                began_gc,
                policy,
                ownership,
            },
            warning,
        ))
    }

    /// The sandbox of a pod (see [`sandbox_config`]), labelled as this agent's.
    pub(super) fn sandbox_config(
        &self,
        log_dir: &Path,
        uid: &str,
        pod: &Pod,
        cgroup: &PodCgroup,
    ) -> api::PodSandboxConfig {
        sandbox_config(&self.ownership, log_dir, uid, pod, cgroup)
    }

    fn save_images(&self, state: &ImageGcState) {
        write_images_file(&self.images_file, self.began_gc, state);
    }

    fn lock_images(&self) -> std::sync::MutexGuard<'_, ImageGcState> {
        self.images.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Writes the image records (aside, then renamed over `path`).
fn write_images_file(path: &Path, began_gc: Time, state: &ImageGcState) {
    let file = ImagesFile {
        began_gc,
        records: state.records().cloned().collect(),
    };
    let Ok(bytes) = serde_json::to_vec_pretty(&file) else {
        return;
    };
    let tmp = path.with_extension(format!("json.{}.tmp", std::process::id()));
    if std::fs::write(&tmp, bytes).is_ok() && std::fs::rename(&tmp, path).is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
}

/// Brings the image times recorded after `now` back to `now` (see
/// [`ImageGcState::clamp_future_times`]) and says so, once for each image: the records
/// are then rewritten, so the next pass finds nothing to say. Returns whether any was.
fn clamp_future_times(file: &Path, state: &mut ImageGcState, now: Time) -> bool {
    let clamped = state.clamp_future_times(now);
    for image in &clamped {
        tracing::warn!(
            file = %file.display(),
            image = %image,
            "image record times after now (clock stepped back, or copied records): counted as now and rewritten"
        );
    }
    !clamped.is_empty()
}

/// The sandbox of a pod, as the kubelet configures a host-network pod: the pod's cgroup
/// as parent, its log directory, the kubelet's labels plus ours (managed, and this
/// agent's instance).
fn sandbox_config(
    ownership: &Ownership,
    log_dir: &Path,
    uid: &str,
    pod: &Pod,
    cgroup: &PodCgroup,
) -> api::PodSandboxConfig {
    let mut labels: BTreeMap<String, String> = ownership.labels().into_iter().collect();
    labels.insert(POD_UID_LABEL.to_string(), uid.to_string());
    labels.insert("io.kubernetes.pod.name".into(), pod.metadata.name.clone());
    labels.insert(
        "io.kubernetes.pod.namespace".into(),
        pod.namespace().to_string(),
    );
    api::PodSandboxConfig {
        metadata: Some(api::PodSandboxMetadata {
            name: pod.metadata.name.clone(),
            uid: uid.to_string(),
            namespace: pod.namespace().to_string(),
            attempt: 0,
        }),
        // Host network means the host's UTS namespace: the hostname must stay unset.
        hostname: String::new(),
        log_directory: logs::pod_dir(log_dir, pod.namespace(), &pod.metadata.name, uid)
            .display()
            .to_string(),
        labels: labels.into_iter().collect(),
        linux: Some(api::LinuxPodSandboxConfig {
            cgroup_parent: format!("/{}", cgroup.relative),
            security_context: Some(api::LinuxSandboxSecurityContext {
                namespace_options: Some(api::NamespaceOption {
                    network: api::NamespaceMode::Node as i32,
                    pid: api::NamespaceMode::Container as i32,
                    ipc: api::NamespaceMode::Pod as i32,
                    ..api::NamespaceOption::default()
                }),
                ..api::LinuxSandboxSecurityContext::default()
            }),
            ..api::LinuxPodSandboxConfig::default()
        }),
        ..api::PodSandboxConfig::default()
    }
}

/// A container as the kubelet asks the runtime for it: image, command, args, env, working
/// directory, the resources of its QoS class, and its log under the pod's log directory
/// (`<container>/<restart>.log`, as the process runtime writes it).
fn container_config(
    ownership: &Ownership,
    cgroup_options: &CgroupOptions,
    uid: &str,
    spec: &Container,
    restart: u32,
) -> api::ContainerConfig {
    let resources = qos::container_resource_config(spec, cgroup_options);
    let mut labels: BTreeMap<String, String> = ownership.labels().into_iter().collect();
    labels.insert(POD_UID_LABEL.to_string(), uid.to_string());
    labels.insert(CONTAINER_NAME_LABEL.to_string(), spec.name.clone());
    api::ContainerConfig {
        metadata: Some(api::ContainerMetadata {
            name: spec.name.clone(),
            attempt: restart,
        }),
        image: Some(api::ImageSpec {
            image: spec.image.clone(),
            ..api::ImageSpec::default()
        }),
        command: spec.command.clone(),
        args: spec.args.clone(),
        working_dir: spec.working_dir.clone().unwrap_or_default(),
        envs: spec
            .env
            .iter()
            .map(|e| api::KeyValue {
                key: e.name.clone(),
                value: e.value.clone().unwrap_or_default(),
            })
            .collect(),
        labels: labels.into_iter().collect(),
        log_path: format!("{}/{restart}.log", spec.name),
        linux: Some(api::LinuxContainerConfig {
            resources: Some(api::LinuxContainerResources {
                cpu_period: resources.cpu_period.map_or(0, |p| p as i64),
                cpu_quota: resources.cpu_quota.filter(|q| *q > 0).unwrap_or(0),
                cpu_shares: resources.cpu_shares.map_or(0, |s| s as i64),
                memory_limit_in_bytes: resources.memory_limit.unwrap_or(0),
                ..api::LinuxContainerResources::default()
            }),
            ..api::LinuxContainerConfig::default()
        }),
        ..api::ContainerConfig::default()
    }
}

/// Makes sure the image is there as the container's pull policy asks.
async fn ensure_image(client: &CriClient, spec: &Container) -> Result<(), String> {
    let image = spec.image.as_str();
    if image.is_empty() {
        return Err("spec.containers[].image: a container runtime needs an image".into());
    }
    let present = || async {
        client
            .image_status(image)
            .await
            .map(|i| i.is_some())
            .map_err(|e| e.to_string())
    };
    match spec.pull_policy() {
        "Never" => {
            if present().await? {
                Ok(())
            } else {
                Err(format!(
                    "ErrImageNeverPull: image {image:?} is not present and imagePullPolicy is Never"
                ))
            }
        }
        "IfNotPresent" => {
            if present().await? {
                return Ok(());
            }
            client
                .pull_image(image)
                .await
                .map(drop)
                .map_err(|e| format!("ErrImagePull: {e}"))
        }
        "Always" => client
            .pull_image(image)
            .await
            .map(drop)
            .map_err(|e| format!("ErrImagePull: {e}")),
        other => Err(format!(
            "spec.containers[{}].imagePullPolicy: {other:?} is not one of Always, IfNotPresent, Never",
            spec.name
        )),
    }
}

/// The writable layer of a running container: the `upperdir` of the overlay mounted at
/// its root, from its main process's mountinfo. `None` when the process is gone or its
/// root is not an overlay (another snapshotter).
pub fn writable_layer(pid: u32) -> Option<PathBuf> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).ok()?;
    root_upperdir(&text)
}

/// The `upperdir` of the last overlay mounted at `/` in a mountinfo text.
fn root_upperdir(mountinfo: &str) -> Option<PathBuf> {
    crate::observe::cgroup::mounts(mountinfo)
        .into_iter()
        .rfind(|m| m.mount_point == Path::new("/") && m.fstype == "overlay")?
        .super_options
        .iter()
        .find_map(|o| o.strip_prefix("upperdir="))
        .map(PathBuf::from)
}

/// Creates and starts one container of a pod in its sandbox, the image made present as
/// the container's pull policy asks. Returns the runtime's container id and the pid of
/// the container's main process (None where the runtime does not tell it).
pub(super) async fn start_container(
    cri: &CriRuntime,
    sandbox_id: &str,
    sandbox: api::PodSandboxConfig,
    cgroup_options: &CgroupOptions,
    uid: &str,
    spec: &Container,
    restart: u32,
) -> Result<(String, Option<u32>), String> {
    ensure_image(&cri.client, spec).await?;
    let log_dir = PathBuf::from(&sandbox.log_directory).join(&spec.name);
    std::fs::create_dir_all(&log_dir)
        .map_err(|err| format!("creating {}: {err}", log_dir.display()))?;
    let config = container_config(&cri.ownership, cgroup_options, uid, spec, restart);
    let id = cri
        .client
        .create_container(sandbox_id, config, sandbox)
        .await
        .map_err(|e| e.to_string())?;
    if let Err(err) = cri.client.start_container(&id).await {
        let _ = cri.client.remove_container(&id).await;
        return Err(err.to_string());
    }
    let (_, pid) = cri
        .client
        .container_status(&id)
        .await
        .map_err(|e| e.to_string())?;
    Ok((id, pid))
}

/// The exit code of a container whose main process has ended. The runtime learns of the
/// exit a moment after the kernel, so this asks until it knows; None when the container
/// is gone from the runtime (removed with its sandbox).
/// (Called at once where no pid could be watched: the asking then slows to once a second.)
pub(super) async fn exit_code(cri: &CriRuntime, id: &str) -> Option<i32> {
    let mut pause = Duration::from_millis(20);
    loop {
        match cri.client.container_status(id).await {
            Ok((status, _)) if status.state == api::ContainerState::ContainerExited as i32 => {
                return Some(status.exit_code);
            }
            Err(err) if err.is_not_found() => return None,
            Ok(_) | Err(_) => {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
        }
    }
}

/// What one garbage collection freed and removed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Collected {
    pub containers: Vec<String>,
    pub sandboxes: Vec<String>,
    pub images: Vec<String>,
    pub image_bytes: i64,
    pub errors: Vec<String>,
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
pub(super) async fn collect_containers(
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
pub(super) async fn detect_images(cri: &CriRuntime, pods: &[Pod], now: Time) -> Result<(), String> {
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
pub async fn image_fs(cri: &CriRuntime) -> Result<(PathBuf, i64, i64), String> {
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

/// The periodic image collection (the kubelet's image GC pass): images unused for longer
/// than the maximum age, then, when the image filesystem is at or above the high
/// threshold, unused images least recently used first down to the low threshold, none
/// younger than the minimum age, none in use or pinned.
pub(super) async fn collect_images_periodic(cri: &CriRuntime, pods: &[Pod]) -> Collected {
    let mut collected = Collected::default();
    let now = wall_now();
    if let Err(err) = detect_images(cri, pods, now).await {
        collected.errors.push(err);
        return collected;
    }
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
            let ids: Vec<String> = plan.images().cloned().collect();
            remove_images(cri, ids, &mut collected).await;
        }
        Err(err) => collected.errors.push(err.to_string()),
    }
    collected
}

/// The eviction path's image collection (DeleteUnusedImages): every unused, unpinned image
/// past the minimum age.
pub(super) async fn collect_all_unused_images(cri: &CriRuntime, pods: &[Pod]) -> Collected {
    let mut collected = Collected::default();
    let now = wall_now();
    if let Err(err) = detect_images(cri, pods, now).await {
        collected.errors.push(err);
        return collected;
    }
    let ids: Vec<String> = {
        let state = cri.lock_images();
        image_gc::free_all_eligible(&cri.policy, &state, now).images
    };
    remove_images(cri, ids, &mut collected).await;
    collected
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(dir: &Path) -> Ownership {
        Ownership::for_agent("monitor", dir, &dir.join("logs"))
    }

    #[tokio::test]
    async fn a_corrupt_image_records_file_is_set_aside_and_reported() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("images.json");
        std::fs::write(&file, b"{\"beganGc\": ").unwrap();
        let socket = dir.path().join("no-runtime.sock");
        let (runtime, warning) = CriRuntime::new(
            &socket,
            dir.path(),
            ImageGcPolicy::default(),
            owner(dir.path()),
        )
        .unwrap();
        let warning = warning.expect("a warning");
        assert!(warning.contains("images.json"), "{warning}");
        assert!(dir.path().join("images.json.corrupt").exists());
        assert!(!file.exists());
        assert_eq!(runtime.lock_images().records().count(), 0);
        // The records written from now on are readable by the next run.
        runtime.save_images(&ImageGcState::new());
        let (_, warning) = CriRuntime::new(
            &socket,
            dir.path(),
            ImageGcPolicy::default(),
            owner(dir.path()),
        )
        .unwrap();
        assert_eq!(warning, None);
    }

    #[tokio::test]
    async fn an_image_recorded_in_2100_counts_as_now_and_is_freed_by_age_and_pressure() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("images.json");
        let year_2100 = Duration::from_secs(4_102_444_800);
        let record = |id: &str, first_detected, last_used| ImageRecord {
            id: id.into(),
            repo_tags: vec![format!("{id}:latest")],
            size_bytes: 1 << 20,
            pinned: false,
            first_detected,
            last_used,
        };
        let recorded = ImagesFile {
            began_gc: year_2100,
            records: vec![
                record("future", year_2100, year_2100),
                record("past", Duration::from_secs(1000), Duration::ZERO),
            ],
        };
        std::fs::write(&file, serde_json::to_vec(&recorded).unwrap()).unwrap();
        let before = wall_now();
        let policy = ImageGcPolicy {
            max_age: Some(Duration::from_secs(3600)),
            ..ImageGcPolicy::default()
        };
        let socket = dir.path().join("no-runtime.sock");
        let (runtime, warning) =
            CriRuntime::new(&socket, dir.path(), policy, owner(dir.path())).unwrap();
        let after = wall_now();
        assert_eq!(warning, None);

        // The file now holds times at or before now; the past record is untouched.
        let rewritten: ImagesFile = serde_json::from_slice(&std::fs::read(&file).unwrap())
            .unwrap_or_else(|e| panic!("{e}"));
        assert!((before..=after).contains(&rewritten.began_gc));
        let times: BTreeMap<String, (Time, Time)> = rewritten
            .records
            .iter()
            .map(|r| (r.id.clone(), (r.first_detected, r.last_used)))
            .collect();
        let (detected, used) = times["future"];
        assert!((before..=after).contains(&detected), "{detected:?}");
        assert!((before..=after).contains(&used), "{used:?}");
        assert_eq!(times["past"], (Duration::from_secs(1000), Duration::ZERO));
        assert_eq!(runtime.began_gc, rewritten.began_gc);

        // Unused from now on, it ages as any other image.
        let mut state = runtime.lock_images().clone();
        let listed = [Image {
            id: "future".into(),
            repo_tags: vec!["future:latest".into()],
            size_bytes: 1 << 20,
            pinned: false,
        }];
        state.detect(&listed, &BTreeSet::new(), &BTreeSet::new(), after);
        let hour = Duration::from_secs(3600);
        let (gib, roomy) = (1 << 30, 1 << 29);
        let collect = |now: Time| {
            image_gc::garbage_collect(&policy, &state, gib, roomy, now, runtime.began_gc)
                .unwrap_or_else(|e| panic!("{e}"))
                .by_age
                .images
        };
        assert!(
            collect(after + hour / 2).is_empty(),
            "younger than imageMaximumGCAge"
        );
        assert_eq!(collect(after + hour + Duration::from_secs(1)), ["future"]);
        // And under disk pressure (node-level reclaim) once past imageMinimumGCAge.
        let reclaim = |now: Time| image_gc::free_all_eligible(&policy, &state, now).images;
        assert!(reclaim(after).is_empty(), "imageMinimumGCAge");
        assert_eq!(reclaim(after + policy.min_age), ["future"]);
    }

    #[test]
    fn the_writable_layer_is_the_upperdir_of_the_root_overlay() {
        let mountinfo = "\
1620 1500 0:160 / / rw,relatime - overlay overlay rw,lowerdir=/c/snapshots/1/fs,upperdir=/c/snapshots/7/fs,workdir=/c/snapshots/7/work
1621 1620 0:161 / /proc rw,nosuid - proc proc rw
1622 1620 0:162 / /dev rw,nosuid - tmpfs tmpfs rw,size=65536k
";
        assert_eq!(
            root_upperdir(mountinfo),
            Some(PathBuf::from("/c/snapshots/7/fs"))
        );
        // Not an overlay at the root: no writable layer to measure.
        assert_eq!(root_upperdir("1 0 8:1 / / rw - ext4 /dev/vda1 rw\n"), None);
        assert_eq!(root_upperdir(""), None);
    }
}
