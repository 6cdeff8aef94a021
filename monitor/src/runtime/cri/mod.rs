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
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use crate::policy::image_gc::{ImageGcPolicy, ImageGcState, ImageRecord};
use crate::policy::pod::{Container, Pod};
use crate::policy::qos::ResourceConfig;
use crate::policy::types::Time;

use super::cgroups::PodCgroup;
use super::logs;

pub(crate) mod client;
mod gc;
pub(crate) mod ownership;
pub(crate) mod stop;

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
pub(crate) use gc::{Collected, image_fs};
pub(super) use gc::{
    collect_all_unused_images, collect_containers, collect_images_periodic, detect_images,
};
pub use ownership::{INSTANCE_LABEL, Ownership};

/// The label on every sandbox and container the agent creates: garbage collection and
/// clean-up never touch anything without it (nor anything another agent's
/// [`INSTANCE_LABEL`] marks: see [`ownership`]).
pub const MANAGED_LABEL: &str = "monitor.managed";
/// The pod uid label (the kubelet's `io.kubernetes.pod.uid`).
pub const POD_UID_LABEL: &str = "io.kubernetes.pod.uid";
/// The container name label (the kubelet's `io.kubernetes.container.name`).
pub(crate) const CONTAINER_NAME_LABEL: &str = "io.kubernetes.container.name";

/// The CRI side of the runtime: the client, and the image collector's memory.
pub(crate) struct CriRuntime {
    pub(crate) client: CriClient,
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
    pub(crate) ownership: Ownership,
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
pub(crate) fn wall_now() -> Time {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
}

impl CriRuntime {
    /// A runtime on `socket`, its image records loaded from `state_dir/images.json`. A
    /// corrupt records file is set aside (renamed `.corrupt`) and reported, not fatal.
    /// `ownership` is the agent's identity in the runtime.
    pub(crate) fn new(
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
/// directory, its `resources` (see [`crate::policy::qos::pod_container_resource_config`]),
/// and its log under the pod's log directory
/// (`<container>/<restart>.log`, as the process runtime writes it).
///
/// With Memory QoS on (the `MemoryQoS` gate on a cgroup v2 node), `memory.min`,
/// `memory.low` and `memory.high` go in the `unified` map, as the kubelet sends them
/// (generateLinuxContainerResources); the runtime writes them to the container's cgroup.
fn container_config(
    ownership: &Ownership,
    resources: &ResourceConfig,
    uid: &str,
    spec: &Container,
    restart: u32,
) -> api::ContainerConfig {
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
                unified: memory_qos_unified(resources),
                ..api::LinuxContainerResources::default()
            }),
            ..api::LinuxContainerConfig::default()
        }),
        ..api::ContainerConfig::default()
    }
}

/// The cgroup v2 values of a container's resources as CRI `unified` entries (file name to
/// value; kubelet: cm.Cgroup2MemoryMin / MemoryLow / MemoryHigh, and memory.oom.group).
fn memory_qos_unified(resources: &ResourceConfig) -> std::collections::HashMap<String, String> {
    let mut unified: std::collections::HashMap<String, String> = [
        ("memory.min", resources.memory_min),
        ("memory.low", resources.memory_low),
        ("memory.high", resources.memory_high),
    ]
    .into_iter()
    .filter_map(|(file, value)| Some((file.to_string(), value?.max(0).to_string())))
    .collect();
    if resources.memory_oom_group {
        unified.insert("memory.oom.group".to_string(), "1".to_string());
    }
    unified
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
pub(crate) fn writable_layer(pid: u32) -> Option<PathBuf> {
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
    resources: &ResourceConfig,
    uid: &str,
    spec: &Container,
    restart: u32,
) -> Result<(String, Option<u32>), String> {
    ensure_image(&cri.client, spec).await?;
    let log_dir = PathBuf::from(&sandbox.log_directory).join(&spec.name);
    std::fs::create_dir_all(&log_dir)
        .map_err(|err| format!("creating {}: {err}", log_dir.display()))?;
    let config = container_config(&cri.ownership, resources, uid, spec, restart);
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

#[cfg(test)]
mod tests;
