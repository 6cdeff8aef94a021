//! Launch: a pod's cgroups made and its containers started (as processes, or through
//! the container runtime), restarts run when due.
use std::sync::Arc;

use tokio::time::Instant;

use super::records::{insert, persist, publish, update_record, update_tiers};
use crate::events::EventReason;
use crate::policy::pod::Pod;
use crate::policy::qos;
use crate::runtime::cgroups::PodCgroup;
use crate::runtime::cri::{self, CriRuntime};
use crate::runtime::manifests::Manifest;
use crate::runtime::shared::{Exit, Shared};
use crate::runtime::store::Phase;
use crate::runtime::{container, logs};

/// Creates the pod's cgroups and starts every container.
pub(super) fn start(shared: &Arc<Shared>, manifest: Manifest) {
    let key = manifest.pod.key();
    let pod = &manifest.pod;
    let qos_class = pod.qos_class();
    let config = qos::pod_resource_config(pod, &shared.config.cgroup_options);
    let cgroup = match shared.tree.create_pod(&manifest.uid, qos_class, &config) {
        Ok(cgroup) => cgroup,
        Err(err) => {
            shared
                .state
                .event(EventReason::FailedCreatePodSandBox, &key, err.to_string());
            insert(
                shared,
                &manifest,
                Phase::Failed,
                Some("CgroupError".into()),
                Some(err.to_string()),
            );
            return;
        }
    };
    insert(shared, &manifest, Phase::Running, None, None);
    {
        let mut inner = shared.lock();
        if let Some(live) = inner.pods.get_mut(&manifest.uid) {
            live.cgroup = Some(cgroup);
        }
    }
    for c in &pod.spec.containers {
        launch(shared, &manifest.uid, &c.name);
    }
    update_tiers(shared);
    shared.state.event(
        EventReason::Started,
        &key,
        format!("pod started ({} QoS)", qos_class.as_str()),
    );
    publish(shared);
}

/// Starts (or restarts) one container of a running pod.
pub(super) fn launch(shared: &Arc<Shared>, uid: &str, name: &str) {
    let mut inner = shared.lock();
    let Some(live) = inner.pods.get_mut(uid) else {
        return;
    };
    let Some(cgroup) = live.cgroup.clone() else {
        return;
    };
    let pod = live.record.pod.clone();
    let Some(spec) = pod.spec.containers.iter().find(|c| c.name == name) else {
        return;
    };
    let Some(record) = live.record.containers.iter_mut().find(|c| c.name == name) else {
        return;
    };
    let restart = record.restart_count;
    if let Some(cri) = shared.cri.clone() {
        // On a container runtime the start takes several calls: its own task.
        record.pid = None;
        drop(inner);
        tokio::spawn(launch_on_runtime(
            shared.clone(),
            cri,
            uid.to_string(),
            spec.clone(),
            Pod::clone(&pod),
            cgroup,
            restart,
        ));
        return;
    }
    let result = shared
        .tree
        .create_container(
            &cgroup,
            name,
            &qos::pod_container_resource_config(&pod, spec, &shared.config.cgroup_options),
        )
        .map_err(|e| e.to_string())
        .and_then(|cc| {
            let launch = container::Launch {
                container: spec,
                join_files: shared.tree.join_files(&cc),
                oom_score_adj: container_oom_score_adj(shared, &pod, spec),
                log_path: logs::container_log(
                    &logs::pod_dir(
                        &shared.config.log_dir,
                        pod.namespace(),
                        &pod.metadata.name,
                        uid,
                    ),
                    name,
                    restart,
                ),
            };
            container::spawn(&launch).map_err(|e| e.to_string())
        });
    match result {
        Ok(mut child) => {
            let pid = child.id().unwrap_or(0);
            record.pid = Some(pid);
            let exits = shared.exits.clone();
            let (uid, name) = (uid.to_string(), name.to_string());
            tokio::spawn(async move {
                let code = child.wait().await.ok().map(exit_code);
                let _ = exits.send(Exit {
                    uid,
                    container: name,
                    pid,
                    code,
                });
            });
        }
        Err(message) => {
            record.pid = None;
            drop(inner);
            // Handled like a run that failed at once: the restart policy decides.
            failed_start(shared, &pod.key(), uid, name, &message, 127);
            return;
        }
    }
    let record = live.record.clone();
    drop(inner);
    persist(shared, &record);
}

/// Starts one container of a pod through the container runtime (its sandbox first, once
/// per pod), records the run, then watches its main process and reports its exit. Runs as
/// its own task; a failure is reported as a run that failed at once, and the restart
/// policy decides.
pub(super) async fn launch_on_runtime(
    shared: Arc<Shared>,
    cri: Arc<CriRuntime>,
    uid: String,
    spec: crate::policy::pod::Container,
    pod: Pod,
    cgroup: PodCgroup,
    restart: u32,
) {
    let name = spec.name.clone();
    let fail = |message: String| failed_start(&shared, &pod.key(), &uid, &name, &message, 128);
    let (sandbox_id, sandbox) = match ensure_sandbox(&shared, &cri, &uid, &pod, &cgroup).await {
        Ok(s) => s,
        Err(message) => return fail(format!("sandbox: {message}")),
    };
    let started = cri::start_container(
        &cri,
        &sandbox_id,
        sandbox,
        &qos::pod_container_resource_config(&pod, &spec, &shared.config.cgroup_options),
        &uid,
        &spec,
        restart,
    )
    .await;
    let (id, pid) = match started {
        Ok(run) => run,
        Err(message) => return fail(message),
    };
    // The run is ours to report from here on: record it, then watch it.
    let recorded = update_record(&shared, &uid, |record| {
        let c = record.containers.iter_mut().find(|c| c.name == name)?;
        c.pid = pid.or(Some(0));
        c.container_id = Some(id.clone());
        Some(())
    });
    if recorded.is_none() {
        return;
    }
    publish(&shared);
    let pid = pid.unwrap_or(0);
    if pid > 0 {
        container::wait_for_exit(pid).await;
    }
    let code = cri::exit_code(&cri, &id).await;
    let _ = shared.exits.send(Exit {
        uid,
        container: name,
        pid,
        code,
    });
}

/// The pod's sandbox: the one in its record, or a new one made now.
pub(super) async fn ensure_sandbox(
    shared: &Arc<Shared>,
    cri: &CriRuntime,
    uid: &str,
    pod: &Pod,
    cgroup: &PodCgroup,
) -> Result<(String, cri::api::PodSandboxConfig), String> {
    let config = cri.sandbox_config(&shared.config.log_dir, uid, pod, cgroup);
    let _one_at_a_time = cri.sandboxes.lock().await;
    let existing = shared
        .lock()
        .pods
        .get(uid)
        .and_then(|p| p.record.sandbox_id.clone());
    if let Some(id) = existing {
        return Ok((id, config));
    }
    let dir = std::path::PathBuf::from(&config.log_directory);
    std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let id = cri
        .client
        .run_pod_sandbox(config.clone())
        .await
        .map_err(|e| e.to_string())?;
    update_record(shared, uid, |record| {
        record.sandbox_id = Some(id.clone());
        Some(())
    })
    .ok_or("the pod went away while its sandbox was made")?;
    Ok((id, config))
}

pub(super) fn exit_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

pub(super) fn run_due_restarts(shared: &Arc<Shared>) {
    let now = Instant::now();
    let due: Vec<(String, String)> = {
        let mut inner = shared.lock();
        let mut due = Vec::new();
        for (uid, live) in inner.pods.iter_mut() {
            let ready: Vec<String> = live
                .restart_at
                .iter()
                .filter(|(_, at)| **at <= now)
                .map(|(n, _)| n.clone())
                .collect();
            for name in ready {
                live.restart_at.remove(&name);
                if let Some(c) = live.record.containers.iter_mut().find(|c| c.name == name) {
                    c.restart_count += 1;
                }
                if !live.stopping() {
                    due.push((uid.clone(), name));
                }
            }
        }
        due
    };
    for (uid, name) in due {
        launch(shared, &uid, &name);
    }
    publish(shared);
}

/// The container's oom_score_adj, as the QoS policy wants it, except that without
/// CAP_SYS_RESOURCE the kernel refuses any value below the agent's own (0): then the
/// container gets 0, and an event says so once.
pub(super) fn container_oom_score_adj(
    shared: &Shared,
    pod: &Pod,
    container: &crate::policy::pod::Container,
) -> i32 {
    let wanted = qos::oom_score_adj(pod, container, shared.config.memory_capacity);
    if wanted >= 0 || has_cap_sys_resource() {
        return wanted;
    }
    static WARNED: std::sync::Once = std::sync::Once::new();
    WARNED.call_once(|| {
        shared.state.event(
            EventReason::OomScoreAdj,
            "node",
            "the agent lacks CAP_SYS_RESOURCE: containers that should get a negative oom_score_adj get 0",
        );
    });
    0
}

/// Whether this process may lower oom_score_adj (CAP_SYS_RESOURCE, capability 24).
pub fn has_cap_sys_resource() -> bool {
    const CAP_SYS_RESOURCE: u32 = 24;
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:").map(|v| v.trim().to_string()))
        })
        .and_then(|hex| u64::from_str_radix(&hex, 16).ok())
        .is_some_and(|caps| caps & (1 << CAP_SYS_RESOURCE) != 0)
}

/// A container that could not start: a `Failed` event, and an exit with `code` and no
/// process, for the restart policy to decide on as for a run that failed at once.
fn failed_start(shared: &Shared, pod_key: &str, uid: &str, name: &str, message: &str, code: i32) {
    shared.state.event(
        EventReason::Failed,
        pod_key,
        format!("container {name}: {message}"),
    );
    let _ = shared.exits.send(Exit {
        uid: uid.to_string(),
        container: name.to_string(),
        pid: 0,
        code: Some(code),
    });
}
