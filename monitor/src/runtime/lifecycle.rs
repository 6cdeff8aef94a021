//! Pod lifecycle: reconcile manifests into running pods (admission and preemption
//! first), supervise container processes (restart policy with back-off), stop and evict
//! pods, and adopt the pods of an earlier agent run.
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use inotify::{Inotify, WatchMask};
use nix::sys::signal::Signal as UnixSignal;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::cgroups::PodCgroup;
use super::cri::{self, CriRuntime};
use super::manifests::{self, Manifest};
use super::port::{EvictionOutcome, KillSwitch};
use super::shared::{Exit, LivePod, MAX_BACKOFF, Shared};
use super::store::{ContainerRecord, Phase, PodRecord};
use super::{container, logs};
use crate::policy::admission::insufficient_resources;
use crate::policy::eviction::{MIN_KILL_TIMEOUT, kill_timeout};
use crate::policy::pod::Pod;
use crate::policy::preemption::{AdmissionOutcome, admit_with_preemption};
use crate::policy::qos;
use crate::state::{ContainerView, PodView};

/// How often the supervisor looks again without a change event: a watch that was lost
/// (the directory deleted and made again) is set up again then, and a pod held back by a
/// cgroup that has since emptied starts.
const MANIFEST_RESYNC: Duration = Duration::from_secs(10);

type ManifestEvents = inotify::EventStream<Vec<u8>>;

/// What the manifest directory's watch reports.
fn manifest_mask() -> WatchMask {
    WatchMask::CREATE
        | WatchMask::CLOSE_WRITE
        | WatchMask::MOVED_TO
        | WatchMask::MOVED_FROM
        | WatchMask::DELETE
        | WatchMask::DELETE_SELF
        | WatchMask::MOVE_SELF
}

/// Whether an event says the watched directory itself is gone (deleted or moved away).
fn directory_went(event: &std::io::Result<inotify::EventOwned>) -> bool {
    use inotify::EventMask;
    event.as_ref().is_ok_and(|e| {
        e.mask
            .intersects(EventMask::DELETE_SELF | EventMask::MOVE_SELF | EventMask::IGNORED)
    })
}

/// Watches the manifest directory; `None` (and a Warning) when it cannot be watched.
fn watch_manifests(shared: &Shared) -> Option<ManifestEvents> {
    let dir = &shared.config.manifest_dir;
    let watched = Inotify::init().and_then(|i| {
        i.watches().add(dir, manifest_mask())?;
        i.into_event_stream(vec![0u8; 4096])
    });
    match watched {
        Ok(stream) => Some(stream),
        Err(err) => {
            shared.state.event(
                "Warning",
                "ManifestDir",
                &dir.display().to_string(),
                format!(
                    "not watched ({err}); read every {}s until it can be",
                    MANIFEST_RESYNC.as_secs()
                ),
            );
            None
        }
    }
}

/// The supervisor task: reconciles on manifest changes (and every [`MANIFEST_RESYNC`]),
/// handles container exits and due restarts.
pub(super) async fn supervise(
    shared: Arc<Shared>,
    mut exits: mpsc::UnboundedReceiver<Exit>,
    mut reconcile_requests: mpsc::UnboundedReceiver<()>,
) {
    let dir = shared.config.manifest_dir.clone();
    if let Err(err) = std::fs::create_dir_all(&dir) {
        shared.state.event(
            "Warning",
            "ManifestDir",
            &dir.display().to_string(),
            format!("cannot create: {err}"),
        );
    }
    let mut changes = watch_manifests(&shared);
    // The directory went away and its watch with it (the stream stays, for the new one).
    let mut watch_lost = changes.is_none();
    let mut resync = tokio::time::interval_at(Instant::now() + MANIFEST_RESYNC, MANIFEST_RESYNC);
    resync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    reconcile(&shared);
    loop {
        let next_restart = next_restart(&shared);
        tokio::select! {
            Some(event) = async { match &mut changes { Some(s) => s.next().await, None => std::future::pending().await } } => {
                // Editors write in bursts: let the burst settle, then read the directory once
                // for every event the burst queued (a thousand manifests written at once
                // must cost one read of the directory, not a thousand). Each queued event is
                // taken with a zero timeout, so the stream is polled from this task and
                // wakes it again for the next one.
                let mut gone = directory_went(&event);
                tokio::time::sleep(Duration::from_millis(50)).await;
                if let Some(stream) = &mut changes {
                    while let Ok(Some(event)) = tokio::time::timeout(Duration::ZERO, stream.next()).await {
                        gone |= directory_went(&event);
                    }
                }
                // The directory itself went (deleted or moved away), and its watch with it:
                // the resync sets one up again once the directory is back.
                if gone {
                    watch_lost = true;
                    shared.state.event(
                        "Warning",
                        "ManifestDir",
                        &dir.display().to_string(),
                        format!("the directory went away; looked for every {}s and watched once it is back", MANIFEST_RESYNC.as_secs()),
                    );
                }
                reconcile(&shared);
            }
            _ = resync.tick() => {
                if watch_lost && dir.is_dir() {
                    let added = match &changes {
                        Some(stream) => stream.watches().add(&dir, manifest_mask()).is_ok(),
                        None => {
                            changes = watch_manifests(&shared);
                            changes.is_some()
                        }
                    };
                    if added {
                        watch_lost = false;
                        shared.state.event(
                            "Normal",
                            "ManifestDir",
                            &dir.display().to_string(),
                            "watched again".to_string(),
                        );
                        // Manifests written before the watch was back raised no event.
                        reconcile(&shared);
                    }
                }
                // With a live watch every change arrives as an event (a queue overflow
                // too): a full read is needed only while unwatched or while a pod waits on
                // a cgroup to empty, so an idle agent does not parse every manifest.
                if watch_lost || !shared.lock().unmanaged.is_empty() {
                    reconcile(&shared);
                }
            }
            Some(()) = reconcile_requests.recv() => reconcile(&shared),
            Some(exit) = exits.recv() => on_exit(&shared, exit),
            _ = async { match next_restart { Some(at) => tokio::time::sleep_until(at).await, None => std::future::pending().await } } => {
                run_due_restarts(&shared);
            }
        }
    }
}

fn next_restart(shared: &Shared) -> Option<Instant> {
    shared
        .lock()
        .pods
        .values()
        .flat_map(|p| p.restart_at.values().copied())
        .min()
}

/// Brings the running pods in line with the manifest directory.
pub(super) fn reconcile(shared: &Arc<Shared>) {
    let (manifests, errors) = manifests::load_dir_for(
        &shared.config.manifest_dir,
        manifests::ManifestRules::for_runtime(shared.cri.is_some()),
    );
    report_manifest_errors(shared, &errors);
    let desired: BTreeMap<String, Manifest> =
        manifests.into_iter().map(|m| (m.uid.clone(), m)).collect();

    // Pods whose manifest is gone (or changed: a new uid): stop them.
    let stale: Vec<String> = {
        let inner = shared.lock();
        inner
            .pods
            .iter()
            .filter(|(uid, p)| !desired.contains_key(*uid) && !p.terminating)
            .map(|(uid, _)| uid.clone())
            .collect()
    };
    for uid in stale {
        let shared = shared.clone();
        tokio::spawn(async move { stop(&shared, &uid).await });
    }
    // New pods (critical ones are admitted first, then by name).
    let mut new: Vec<Manifest> = {
        let inner = shared.lock();
        desired
            .into_values()
            .filter(|m| !inner.pods.contains_key(&m.uid))
            .collect()
    };
    new.retain(|m| !held_by_unmanaged_cgroup(shared, m));
    new.sort_by_key(|m| (!m.pod.is_critical(), m.pod.key()));
    for manifest in new {
        // A pod whose previous version is still stopping waits for it.
        let busy = shared
            .lock()
            .pods
            .values()
            .any(|p| p.record.pod.key() == manifest.pod.key());
        if !busy {
            admit_and_start(shared, manifest);
        }
    }
    publish(shared);
}

fn report_manifest_errors(shared: &Shared, errors: &[manifests::ManifestError]) {
    let mut inner = shared.lock();
    let now: BTreeMap<_, _> = errors
        .iter()
        .map(|e| (e.path().to_path_buf(), e.to_string()))
        .collect();
    let fresh: Vec<(std::path::PathBuf, String)> = now
        .iter()
        .filter(|(p, m)| inner.reported_errors.get(*p) != Some(m))
        .map(|(p, m)| (p.clone(), m.clone()))
        .collect();
    inner.reported_errors = now;
    drop(inner);
    for (path, message) in fresh {
        shared.state.event(
            "Warning",
            "BadManifest",
            &path.display().to_string(),
            format!("skipped: {message}"),
        );
    }
}

fn admit_and_start(shared: &Arc<Shared>, manifest: Manifest) {
    let (conditions, running) = {
        let inner = shared.lock();
        let running: Vec<Pod> = inner
            .pods
            .values()
            .filter(|p| !p.terminating && !p.record.phase.is_terminal())
            .map(|p| Pod::clone(&p.record.pod))
            .collect();
        (inner.conditions.clone(), running)
    };
    let key = manifest.pod.key();
    match admit_with_preemption(
        &manifest.pod,
        &conditions,
        &running,
        &shared.config.node_allocatable,
    ) {
        AdmissionOutcome::Admitted => start(shared, manifest),
        AdmissionOutcome::AdmittedAfterPreempting(victims) => {
            // The kubelet's preemption_signal: the first resource the pod lacked.
            let signal =
                insufficient_resources(&manifest.pod, &running, &shared.config.node_allocatable)
                    .first()
                    .map(|r| r.resource.clone())
                    .unwrap_or_default();
            shared.state.event(
                "Normal",
                "Preempting",
                &key,
                format!(
                    "critical pod admitted after preempting {}",
                    victims.join(", ")
                ),
            );
            // Hold the slot so a reconcile meanwhile does not admit it twice.
            insert(shared, &manifest, Phase::Pending, None, None);
            let shared = shared.clone();
            tokio::spawn(async move {
                for victim in &victims {
                    let grace = shared
                        .lock()
                        .pods
                        .values()
                        .find(|p| p.record.pod.key() == *victim)
                        .map(|p| p.record.pod.termination_grace_period_seconds())
                        .unwrap_or(0);
                    let message = format!("Preempted in order to admit critical pod {key}");
                    let outcome = evict(
                        &shared,
                        victim,
                        grace,
                        "Preempted",
                        &message,
                        kill_timeout(grace),
                    )
                    .await;
                    if outcome == EvictionOutcome::Evicted {
                        shared.state.record_preemption(&signal);
                    }
                }
                shared.lock().pods.remove(&manifest.uid);
                start(&shared, manifest);
                publish(&shared);
            });
        }
        AdmissionOutcome::Rejected(result) => {
            shared.state.record_admission_rejection(&result.reason);
            shared.state.event(
                "Warning",
                "FailedAdmission",
                &key,
                format!("{}: {}", result.reason, result.message),
            );
            insert(
                shared,
                &manifest,
                Phase::Failed,
                Some(result.reason),
                Some(result.message),
            );
        }
    }
}

/// Records a pod that is not (yet) running.
fn insert(
    shared: &Shared,
    manifest: &Manifest,
    phase: Phase,
    reason: Option<String>,
    message: Option<String>,
) {
    // The spec carries the record's uid, so a synchronize shares it as it is.
    let mut pod = manifest.pod.clone();
    pod.metadata.uid = manifest.uid.clone();
    let record = PodRecord {
        uid: manifest.uid.clone(),
        manifest: manifest.path.clone(),
        pod: Arc::new(pod),
        phase,
        reason,
        message,
        containers: manifest
            .pod
            .spec
            .containers
            .iter()
            .map(|c| ContainerRecord {
                name: c.name.clone(),
                pid: None,
                restart_count: 0,
                last_exit: None,
                exit_code_unknown: false,
                done: phase.is_terminal(),
                container_id: None,
            })
            .collect(),
        sandbox_id: None,
    };
    persist_new(shared, &record);
    shared.lock().pods.insert(
        manifest.uid.clone(),
        LivePod {
            record,
            cgroup: None,
            terminating: false,
            hot_killed: Default::default(),
            restart_at: BTreeMap::new(),
            backoff: BTreeMap::new(),
        },
    );
}

/// Creates the pod's cgroups and starts every container.
fn start(shared: &Arc<Shared>, manifest: Manifest) {
    let key = manifest.pod.key();
    let pod = &manifest.pod;
    let qos_class = pod.qos_class();
    let config = qos::pod_resource_config(pod, &shared.config.cgroup_options);
    let cgroup = match shared.tree.create_pod(&manifest.uid, qos_class, &config) {
        Ok(cgroup) => cgroup,
        Err(err) => {
            shared
                .state
                .event("Warning", "FailedCreatePodSandBox", &key, err.to_string());
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
        "Normal",
        "Started",
        &key,
        format!("pod started ({} QoS)", qos_class.as_str()),
    );
    publish(shared);
}

/// Starts (or restarts) one container of a running pod.
fn launch(shared: &Arc<Shared>, uid: &str, name: &str) {
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
            &qos::container_resource_config(spec, &shared.config.cgroup_options),
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
            shared.state.event(
                "Warning",
                "Failed",
                &pod.key(),
                format!("container {name}: {message}"),
            );
            // Handled like a run that failed at once: the restart policy decides.
            let _ = shared.exits.send(Exit {
                uid: uid.to_string(),
                container: name.to_string(),
                pid: 0,
                code: Some(127),
            });
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
async fn launch_on_runtime(
    shared: Arc<Shared>,
    cri: Arc<CriRuntime>,
    uid: String,
    spec: crate::policy::pod::Container,
    pod: Pod,
    cgroup: PodCgroup,
    restart: u32,
) {
    let name = spec.name.clone();
    let fail = |message: String| {
        shared.state.event(
            "Warning",
            "Failed",
            &pod.key(),
            format!("container {name}: {message}"),
        );
        let _ = shared.exits.send(Exit {
            uid: uid.clone(),
            container: name.clone(),
            pid: 0,
            code: Some(128),
        });
    };
    let (sandbox_id, sandbox) = match ensure_sandbox(&shared, &cri, &uid, &pod, &cgroup).await {
        Ok(s) => s,
        Err(message) => return fail(format!("sandbox: {message}")),
    };
    let started = cri::start_container(
        &cri,
        &sandbox_id,
        sandbox,
        &shared.config.cgroup_options,
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
async fn ensure_sandbox(
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

/// The reason of a container whose last run ended with a status the agent could not read.
pub(super) const EXIT_CODE_UNKNOWN: &str = "ExitCodeUnknown";

fn exit_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

/// A container process ended: restart it, or settle the pod's phase.
fn on_exit(shared: &Arc<Shared>, exit: Exit) {
    let mut inner = shared.lock();
    let Some(live) = inner.pods.get_mut(&exit.uid) else {
        return;
    };
    let policy = live
        .record
        .pod
        .spec
        .restart_policy
        .clone()
        .unwrap_or_else(|| "Always".into());
    let terminating = live.stopping();
    let Some(record) = live
        .record
        .containers
        .iter_mut()
        .find(|c| c.name == exit.container)
    else {
        return;
    };
    if record.pid != Some(exit.pid) && exit.pid != 0 {
        return; // An older run's late report.
    }
    record.pid = None;
    // An unreadable status is written down as such: an older run's code would misstate
    // this run.
    record.last_exit = exit.code;
    record.exit_code_unknown = exit.code.is_none();
    // An unknown status counts as a failure, as the kubelet counts a container whose
    // status it lost (ContainerStatusUnknown): under Never the pod fails, under OnFailure
    // and Always the container runs again. Calling it a success could report a job done
    // that never finished; running again a job that may have succeeded is what an
    // OnFailure job must bear after any failure anyway.
    let failed = exit.code != Some(0);
    let restart = !terminating
        && !live.record.phase.is_terminal()
        && match policy.as_str() {
            "Never" => false,
            "OnFailure" => failed,
            _ => true,
        };
    if restart {
        let delay = live
            .backoff
            .get(&exit.container)
            .map(|d| (*d * 2).min(MAX_BACKOFF))
            .unwrap_or(shared.config.restart_backoff);
        live.backoff.insert(exit.container.clone(), delay);
        live.restart_at
            .insert(exit.container.clone(), Instant::now() + delay);
    } else {
        record.done = true;
    }
    let key = live.record.pod.key();
    let all_done = live
        .record
        .containers
        .iter()
        .all(|c| c.done && c.pid.is_none());
    let finished = all_done && !terminating && !live.record.phase.is_terminal();
    if finished {
        let ok = live
            .record
            .containers
            .iter()
            .all(|c| c.last_exit == Some(0));
        live.record.phase = if ok { Phase::Succeeded } else { Phase::Failed };
    }
    let record = live.record.clone();
    let pod_cgroup = live.cgroup.clone();
    let cgroup = if finished { live.cgroup.take() } else { None };
    drop(inner);
    // The container ended with its main process: whatever it left behind in its cgroup
    // goes too (a container runtime does this itself).
    if shared.cri.is_none()
        && let Some(pod_cgroup) = &pod_cgroup
    {
        match shared
            .tree
            .kill_container_leftovers(pod_cgroup, &exit.container)
        {
            Ok(0) => {}
            Ok(n) => tracing::info!(
                pod = %key,
                container = %exit.container,
                "killed {n} process(es) left behind by the container's main process"
            ),
            Err(err) => tracing::warn!(pod = %key, "container {} leftovers: {err}", exit.container),
        }
    }
    persist(shared, &record);
    shared.state.event(
        if failed { "Warning" } else { "Normal" },
        if restart { "BackOff" } else { "Exited" },
        &key,
        format!(
            "container {} exited ({}){}",
            exit.container,
            exit.code.map(|c| c.to_string()).unwrap_or_else(|| format!(
                "status unknown: {EXIT_CODE_UNKNOWN}, counted as a failure"
            )),
            if restart { ", will restart" } else { "" }
        ),
    );
    if let Some(cgroup) = cgroup {
        match (&shared.cri, record.sandbox_id.clone()) {
            (Some(cri), Some(sandbox)) => {
                // A finished pod's sandbox is stopped (its dead containers stay for the
                // container collector), then its cgroups go.
                let (shared, cri) = (shared.clone(), cri.clone());
                tokio::spawn(async move {
                    let deadline = Instant::now() + FINISHED_SANDBOX_STOP;
                    let answers =
                        cri::stop::stop_sandbox(&cri.client, &sandbox, false, deadline).await;
                    report_answers(&shared, &key, &answers, FINISHED_SANDBOX_STOP);
                    remove_cgroups(&shared, &key, &cgroup);
                    update_tiers(&shared);
                });
            }
            _ => {
                remove_cgroups(shared, &key, &cgroup);
                update_tiers(shared);
            }
        }
    }
    publish(shared);
}

fn run_due_restarts(shared: &Arc<Shared>) {
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

/// An instant no deadline reaches (about thirty years ahead, as tokio's own far future).
fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(86_400 * 365 * 30)
}

/// `wait` from now, or a deadline never reached when that overflows the clock (a grace
/// period near i64::MAX seconds).
fn after(wait: Duration) -> Instant {
    Instant::now().checked_add(wait).unwrap_or_else(far_future)
}

/// How often a stop looks at the pod's cgroups while it waits for them to empty.
const STOP_POLL: Duration = Duration::from_millis(20);

/// Kills a pod: SIGTERM to every process in its cgroups, SIGKILL once the grace period
/// ends (at once for grace 0), then waits until the cgroups are empty or `timeout` (never
/// below [`MIN_KILL_TIMEOUT`]) runs out.
pub(super) async fn kill(
    shared: &Shared,
    cgroup: &PodCgroup,
    grace_seconds: i64,
    timeout: Duration,
) -> EvictionOutcome {
    let deadline = after(timeout.max(MIN_KILL_TIMEOUT));
    if grace_seconds > 0 {
        sigterm(shared, cgroup);
        let grace = Duration::from_secs(u64::try_from(grace_seconds).unwrap_or(0));
        let grace_end = after(grace);
        while !shared.tree.is_empty(cgroup) && Instant::now() < grace_end {
            tokio::time::sleep(STOP_POLL).await;
        }
    }
    kill_until_empty(shared, cgroup, deadline).await
}

/// SIGTERM to every process in the pod's cgroups. A failure only shortens the grace
/// period: SIGKILL follows regardless.
fn sigterm(shared: &Shared, cgroup: &PodCgroup) {
    if let Err(err) = shared.tree.signal(cgroup, UnixSignal::SIGTERM) {
        tracing::warn!("SIGTERM to {}: {err}", cgroup.relative);
    }
}

/// SIGKILL through the pod's cgroups (`cgroup.kill` where the kernel has it, else each
/// process through a pidfd) until they are empty, or `deadline`: Evicted once empty,
/// TimedOut (or the last kill's error) at the deadline.
async fn kill_until_empty(
    shared: &Shared,
    cgroup: &PodCgroup,
    deadline: Instant,
) -> EvictionOutcome {
    // Where the kernel has cgroup.kill, the first kill goes through a switch that holds
    // pidfds of the pod's processes: their memory is then reaped at once
    // (process_mrelease), as the hot path does, instead of as each one exits.
    if let Some(path) = shared.tree.kill_file(cgroup)
        && let Ok(switch) = KillSwitch::open(&cgroup.relative, &path)
        && switch.fire().is_ok()
    {
        let _ = tokio::task::spawn_blocking(move || switch.release_memory()).await;
    }
    // Again until empty: a process may fork while we signal.
    let mut last_error = None;
    loop {
        let alive = shared.tree.pids(cgroup).len();
        if alive == 0 {
            return EvictionOutcome::Evicted;
        }
        if Instant::now() >= deadline {
            return match last_error {
                Some(err) => EvictionOutcome::KillFailed(err),
                None => EvictionOutcome::TimedOut { alive },
            };
        }
        last_error = shared
            .tree
            .signal(cgroup, UnixSignal::SIGKILL)
            .err()
            .map(|e| e.to_string());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// How long an eviction waits for the runtime to delete the pod's writable layers (never
/// past its deadline).
const LAYER_CLEANUP_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a finished pod's sandbox stop may take (it frees nothing that is pressing).
const FINISHED_SANDBOX_STOP: Duration = Duration::from_secs(30);

/// Stops a pod that is being evicted or removed, by `deadline`.
///
/// The kill goes through the pod's cgroups, never through the runtime, so that a runtime
/// that does not answer cannot hold it up: with a grace period, the pod gets SIGTERM
/// (from the container runtime's StopContainer with the grace period, or through its
/// cgroups on the process runtime or when the runtime refuses) and until the grace period
/// ends to go; then whatever is left in its cgroups is killed at once. Only then is the
/// container runtime told (the sandbox stopped and removed with its containers, and the
/// writable layers' deletion waited for), each call dropped at `deadline`: a call left
/// unanswered is reported (a `RuntimeUnresponsive` event, and the
/// `monitor_runtime_unresponsive_calls_total` metric), and what the runtime holds of the
/// pod is left to garbage collection.
async fn stop_pod(
    shared: &Arc<Shared>,
    record: &PodRecord,
    cgroup: Option<&PodCgroup>,
    grace_seconds: i64,
    deadline: Instant,
) -> EvictionOutcome {
    let started = Instant::now();
    let key = record.pod.key();
    let grace = Duration::from_secs(u64::try_from(grace_seconds).unwrap_or(0));
    let grace_end = after(grace).min(deadline);
    let cri = shared.cri.clone();
    let ids: Vec<String> = record
        .containers
        .iter()
        .filter_map(|c| c.container_id.clone())
        .collect();
    // The writable layers, noted while the containers still run: the pod is cleaned up
    // once the runtime has deleted them (it does so a moment after removing the sandbox),
    // so that the next look at the image filesystem sees the space freed.
    let layers: Vec<std::path::PathBuf> = match &cri {
        Some(_) => record
            .containers
            .iter()
            .filter_map(|c| c.pid.filter(|pid| *pid > 0))
            .filter_map(cri::writable_layer)
            .collect(),
        None => Vec::new(),
    };
    let mut answers = cri::stop::StopAnswers::default();
    // The runtime's StopContainer calls with the grace period, while they run.
    let mut stops = match &cri {
        Some(cri) if !grace.is_zero() && !ids.is_empty() => Some(Box::pin(
            cri::stop::stop_containers(&cri.client, &ids, grace, deadline),
        )),
        _ => None,
    };
    if !grace.is_zero() {
        if stops.is_none()
            && let Some(cgroup) = cgroup
        {
            sigterm(shared, cgroup);
        }
        // Until the pod is gone or its grace period ends; the runtime's answer (its
        // containers stopped) ends it too.
        while cgroup.is_some_and(|c| !shared.tree.is_empty(c)) && Instant::now() < grace_end {
            let answered = match &mut stops {
                Some(pending) => tokio::select! {
                    got = pending => Some(got),
                    () = tokio::time::sleep(STOP_POLL) => None,
                },
                None => {
                    tokio::time::sleep(STOP_POLL).await;
                    None
                }
            };
            let Some(got) = answered else {
                continue;
            };
            stops = None;
            let refused = !got.errors.is_empty();
            answers.merge(got);
            if !refused {
                break;
            }
            // The runtime refused: the grace period goes on through the cgroups.
            if let Some(cgroup) = cgroup {
                sigterm(shared, cgroup);
            }
        }
    }
    // The kill: what is left goes at once, without a word from the runtime.
    let outcome = match cgroup {
        Some(cgroup) => kill_until_empty(shared, cgroup, deadline).await,
        None => EvictionOutcome::Evicted,
    };
    // Then the runtime is told, within what is left of the deadline.
    if let Some(cri) = &cri {
        if let Some(pending) = stops {
            answers.merge(pending.await);
        }
        match record.sandbox_id.as_deref() {
            Some(sandbox) => {
                answers.merge(cri::stop::stop_sandbox(&cri.client, sandbox, true, deadline).await);
            }
            None if grace.is_zero() && !ids.is_empty() => answers.merge(
                cri::stop::stop_containers(&cri.client, &ids, Duration::ZERO, deadline).await,
            ),
            None => {}
        }
        let layers_deadline = after(LAYER_CLEANUP_TIMEOUT).min(deadline);
        while answers.answered_all()
            && layers.iter().any(|layer| layer.exists())
            && Instant::now() < layers_deadline
        {
            tokio::time::sleep(STOP_POLL).await;
        }
        report_answers(
            shared,
            &key,
            &answers,
            deadline.saturating_duration_since(started),
        );
        if answers.answered_all() && record.sandbox_id.is_some() {
            update_record(shared, &record.uid, |record| {
                record.sandbox_id = None;
                Some(())
            });
        }
    }
    outcome
}

/// Reports what the container runtime answered to a pod's stop: each error as a
/// `FailedKillPod` event; the calls it left unanswered within `waited` as one
/// `RuntimeUnresponsive` Warning naming the pod and the calls, each call counted in
/// `monitor_runtime_unresponsive_calls_total`.
fn report_answers(shared: &Shared, key: &str, answers: &cri::stop::StopAnswers, waited: Duration) {
    for err in &answers.errors {
        shared
            .state
            .event("Warning", "FailedKillPod", key, err.clone());
    }
    if answers.unanswered.is_empty() {
        return;
    }
    {
        let mut state = shared.state.lock();
        for call in &answers.unanswered {
            *state
                .metrics
                .runtime_unresponsive_calls
                .entry((*call).to_string())
                .or_default() += 1;
        }
    }
    shared.state.event(
        "Warning",
        "RuntimeUnresponsive",
        key,
        cri::stop::silence_message(&answers.unanswered, waited),
    );
}

pub(super) fn remove_cgroups(shared: &Shared, key: &str, cgroup: &PodCgroup) {
    if let Err(err) = shared.tree.remove_pod(cgroup) {
        shared
            .state
            .event("Warning", "CgroupCleanup", key, err.to_string());
    }
}

/// Where the pods with this key that the runtime still knows have cgroups: the ones their
/// records hold, or, for a record that let go of its cgroup, where it would be.
fn cgroups_of(shared: &Shared, key: &str) -> Vec<PodCgroup> {
    let known: Vec<(Option<PodCgroup>, String, crate::policy::types::QosClass)> = shared
        .lock()
        .pods
        .values()
        .filter(|p| p.record.pod.key() == key)
        .map(|p| {
            (
                p.cgroup.clone(),
                p.record.uid.clone(),
                p.record.pod.qos_class(),
            )
        })
        .collect();
    known
        .into_iter()
        .filter_map(|(cgroup, uid, qos)| cgroup.or_else(|| shared.tree.pod_cgroup(&uid, qos)))
        .collect()
}

/// How many processes the cgroups of the pods with this key hold now (see
/// [`crate::runtime::port::PodKiller::processes_left`]).
pub(super) fn processes_left(shared: &Shared, key: &str) -> usize {
    cgroups_of(shared, key)
        .iter()
        .map(|cgroup| shared.tree.pids(cgroup).len())
        .sum()
}

/// Evicts (or preempts) the pod with this key. The record says Failed/`reason` before the
/// first signal is sent and is persisted, so a restarted agent neither restarts it nor
/// evicts it again. A pod whose earlier kill failed (Failed, cgroups still there) is
/// killed again; so is whatever is left in the cgroups of a pod whose earlier eviction is
/// still under way, or that its record lets go of.
///
/// The eviction runs as a task of its own, awaited here: a caller that stops waiting (the
/// eviction loop gives up on an answer after the kill timeout) drops only its wait. The
/// eviction still runs to its end, bounded by `timeout`, and the pod is never left marked
/// terminating.
pub(super) async fn evict(
    shared: &Arc<Shared>,
    key: &str,
    grace_seconds: i64,
    reason: &str,
    message: &str,
    timeout: Duration,
) -> EvictionOutcome {
    let task = tokio::spawn(evict_to_end(
        shared.clone(),
        key.to_string(),
        grace_seconds,
        reason.to_string(),
        message.to_string(),
        timeout,
    ));
    task.await.unwrap_or_else(|err| {
        EvictionOutcome::KillFailed(format!("the eviction's task ended early: {err}"))
    })
}

/// Clears a pod's `terminating` mark however its eviction ends: at [`TerminatingMark::clear`],
/// or when dropped (the eviction panicked).
struct TerminatingMark<'a> {
    shared: &'a Shared,
    /// The pod; `None` once cleared.
    uid: Option<String>,
}

impl TerminatingMark<'_> {
    /// The eviction ended: the mark goes, and the pod lets go of its cgroups when they
    /// were removed (`gone`), in one step.
    fn clear(mut self, gone: bool) {
        let Some(uid) = self.uid.take() else {
            return;
        };
        if let Some(live) = self.shared.lock().pods.get_mut(&uid) {
            live.terminating = false;
            if gone {
                live.cgroup = None;
            }
        }
    }
}

impl Drop for TerminatingMark<'_> {
    fn drop(&mut self) {
        if let Some(uid) = self.uid.take()
            && let Some(live) = self.shared.lock().pods.get_mut(&uid)
        {
            live.terminating = false;
        }
    }
}

async fn evict_to_end(
    shared: Arc<Shared>,
    key: String,
    grace_seconds: i64,
    reason: String,
    message: String,
    timeout: Duration,
) -> EvictionOutcome {
    let shared = &shared;
    let key = key.as_str();
    let deadline = after(timeout.max(MIN_KILL_TIMEOUT));
    let found = {
        let mut inner = shared.lock();
        // A pod that failed a moment ago without a reason is still evicted: the hot path
        // kills its victim through cgroup.kill before this call, and the exit of a pod
        // that is never restarted may be handled first. Its eviction is then written
        // down, not lost as a plain exit 137.
        inner
            .pods
            .iter_mut()
            .find(|(_, p)| {
                p.record.pod.key() == key
                    && !p.terminating
                    && (!p.record.phase.is_terminal()
                        || p.cgroup.is_some()
                        || (p.record.phase == Phase::Failed && p.record.reason.is_none()))
            })
            .map(|(uid, live)| {
                live.terminating = true;
                live.restart_at.clear();
                live.record.phase = Phase::Failed;
                live.record.reason = Some(reason.clone());
                live.record.message = Some(message.clone());
                for c in &mut live.record.containers {
                    c.done = true;
                }
                (uid.clone(), live.cgroup.clone(), live.record.clone())
            })
    };
    let Some((uid, cgroup, record)) = found else {
        // No pod to stop: one whose eviction is still under way, or that is gone. Its
        // cgroups must be empty all the same before the eviction counts as done.
        return kill_leftovers(shared, key, deadline).await;
    };
    let mark = TerminatingMark {
        shared,
        uid: Some(uid.clone()),
    };
    // Persisted before the first signal (write and rename: a crash of the agent never
    // leaves a half-written record); the API view is refreshed after the kill.
    persist(shared, &record);
    shared.state.event(
        "Normal",
        "Killing",
        key,
        format!("{reason}: stopping with a grace period of {grace_seconds} s"),
    );
    // A record that let go of its cgroups (its containers' exits were handled first)
    // may still have processes there.
    let cgroup = cgroup.or_else(|| {
        shared
            .tree
            .pod_cgroup(&uid, record.pod.qos_class())
            .filter(|c| !shared.tree.is_empty(c))
    });
    let outcome = stop_pod(shared, &record, cgroup.as_ref(), grace_seconds, deadline).await;
    let gone = outcome == EvictionOutcome::Evicted;
    if let Some(cgroup) = &cgroup
        && gone
    {
        remove_cgroups(shared, key, cgroup);
    }
    mark.clear(gone);
    update_tiers(shared);
    // A manifest removed or changed while the pod was being killed was passed over by the
    // reconcile it raised (the pod was terminating): look at the directory again.
    let _ = shared.reconcile.send(());
    shared.state.event(
        "Warning",
        &reason,
        key,
        if gone {
            message.clone()
        } else {
            format!("{message} ({outcome})")
        },
    );
    publish(shared);
    outcome
}

/// The eviction of a pod the runtime has nothing to stop for (its earlier eviction still
/// runs, or it is gone): whatever its cgroups still hold is killed, by `deadline`.
/// AlreadyGone when they hold nothing.
async fn kill_leftovers(shared: &Arc<Shared>, key: &str, deadline: Instant) -> EvictionOutcome {
    let held: Vec<PodCgroup> = cgroups_of(shared, key)
        .into_iter()
        .filter(|c| !shared.tree.is_empty(c))
        .collect();
    if held.is_empty() {
        return EvictionOutcome::AlreadyGone;
    }
    tracing::warn!(
        pod = %key,
        "nothing left to stop, but its cgroups still hold processes: killing them"
    );
    let mut outcome = EvictionOutcome::Evicted;
    for cgroup in &held {
        let killed = kill_until_empty(shared, cgroup, deadline).await;
        if killed != EvictionOutcome::Evicted {
            outcome = killed;
        }
    }
    outcome
}

/// Stops a pod whose manifest is gone or changed, and forgets it.
async fn stop(shared: &Arc<Shared>, uid: &str) {
    let (key, cgroup, grace, record) = {
        let mut inner = shared.lock();
        let Some(live) = inner.pods.get_mut(uid) else {
            return;
        };
        live.terminating = true;
        live.restart_at.clear();
        (
            live.record.pod.key(),
            live.cgroup.clone(),
            live.record.pod.termination_grace_period_seconds(),
            live.record.clone(),
        )
    };
    if let Some(cgroup) = &cgroup {
        shared.state.event(
            "Normal",
            "Killing",
            &key,
            "manifest removed or changed: stopping",
        );
        let deadline = after(kill_timeout(grace));
        match stop_pod(shared, &record, Some(cgroup), grace, deadline).await {
            EvictionOutcome::Evicted => remove_cgroups(shared, &key, cgroup),
            outcome => shared.state.event(
                "Warning",
                "FailedKill",
                &key,
                format!("stopping: {outcome}; its cgroups are left for the next start to clean"),
            ),
        }
    }
    shared.lock().pods.remove(uid);
    shared.store.remove(uid);
    update_tiers(shared);
    publish(shared);
    // The new version of a changed manifest waited for this one.
    let _ = shared.reconcile.send(());
}

pub(super) async fn stop_all(shared: &Arc<Shared>) {
    let uids: Vec<String> = shared.lock().pods.keys().cloned().collect();
    for uid in uids {
        stop(shared, &uid).await;
    }
}

pub(super) fn update_tiers(shared: &Shared) {
    let active: Vec<Pod> = shared
        .lock()
        .pods
        .values()
        .filter(|p| p.cgroup.is_some() && !p.record.phase.is_terminal())
        .map(|p| Pod::clone(&p.record.pod))
        .collect();
    match qos::qos_tier_configs(
        &active,
        &shared.config.node_allocatable,
        shared.config.qos_reserved_memory_percent,
    ) {
        Ok(tiers) => {
            if let Err(err) = shared.tree.update_qos_tiers(&tiers) {
                tracing::warn!("updating QoS tiers: {err}");
            }
        }
        Err(err) => tracing::warn!("QoS tiers: {err}"),
    }
}

/// Changes the record of pod `uid` in place and saves it. `None`, and nothing saved, when
/// the pod is gone or `change` declines.
fn update_record<T>(
    shared: &Shared,
    uid: &str,
    change: impl FnOnce(&mut PodRecord) -> Option<T>,
) -> Option<T> {
    let (out, record) = {
        let mut inner = shared.lock();
        let live = inner.pods.get_mut(uid)?;
        let out = change(&mut live.record)?;
        (out, live.record.clone())
    };
    persist(shared, &record);
    Some(out)
}

/// Saves a pod's record: the newest one the runtime holds when the write's turn comes,
/// nothing when the runtime no longer holds the pod.
pub(super) fn persist(shared: &Shared, record: &PodRecord) {
    // The pod as the runtime holds it when this write's turn comes; none once it was
    // stopped and forgotten meanwhile (a late exit report must not bring its record back).
    let latest = || {
        shared
            .lock()
            .pods
            .get(&record.uid)
            .map(|live| live.record.clone())
    };
    write_record(shared, record, latest);
}

/// Writes the record of a pod not yet held by the runtime (about to be inserted).
fn persist_new(shared: &Shared, record: &PodRecord) {
    write_record(shared, record, || Some(record.clone()));
}

fn write_record(shared: &Shared, record: &PodRecord, latest: impl FnOnce() -> Option<PodRecord>) {
    if let Err(err) = shared.store.save_latest(latest) {
        shared
            .state
            .event("Warning", "StateWrite", &record.pod.key(), err.to_string());
    }
}

/// Whether `manifest`'s pod must wait: a cgroup of its uid that no record claims still
/// has processes (it would run twice). Once that cgroup is empty it is removed and the pod
/// may start.
fn held_by_unmanaged_cgroup(shared: &Arc<Shared>, manifest: &Manifest) -> bool {
    let Some(cgroup) = shared.lock().unmanaged.get(&manifest.uid).cloned() else {
        return false;
    };
    if !shared.tree.is_empty(&cgroup) {
        return true;
    }
    shared.lock().unmanaged.remove(&manifest.uid);
    remove_cgroups(shared, &manifest.pod.key(), &cgroup);
    false
}

/// Publishes every pod to the shared state (the API's `pods`).
pub(super) fn publish(shared: &Shared) {
    let views: Vec<PodView> = {
        let inner = shared.lock();
        inner
            .pods
            .values()
            .map(|p| {
                let r = &p.record;
                PodView {
                    key: r.pod.key(),
                    uid: r.uid.clone(),
                    qos_class: r.pod.qos_class().as_str().to_string(),
                    priority: r.pod.priority(),
                    phase: if p.terminating && !r.phase.is_terminal() {
                        "Terminating".into()
                    } else {
                        r.phase.as_str().into()
                    },
                    reason: r.reason.clone(),
                    message: r.message.clone(),
                    cgroup: p.cgroup.as_ref().map(|c| c.relative.clone()),
                    // Filled in below from the last synchronize, which reads every pod's
                    // working set anyway: reading a thousand cgroups here, at every pod
                    // start and under the runtime's lock, would cost more than the pass.
                    memory_working_set_bytes: None,
                    containers: r
                        .containers
                        .iter()
                        .map(|c| ContainerView {
                            name: c.name.clone(),
                            pid: c.pid,
                            restart_count: c.restart_count,
                            state: match (c.pid, c.last_exit) {
                                (Some(_), _) => "running".into(),
                                (None, Some(code)) if code > 128 => {
                                    format!("signaled({})", code - 128)
                                }
                                (None, Some(code)) => format!("exited({code})"),
                                (None, None) if c.exit_code_unknown => "exited(unknown)".into(),
                                (None, None) => "waiting".into(),
                            },
                            reason: (c.pid.is_none() && c.exit_code_unknown)
                                .then(|| EXIT_CODE_UNKNOWN.to_string()),
                        })
                        .collect(),
                }
            })
            .collect()
    };
    let mut views = views;
    let mut state = shared.state.lock();
    let known: std::collections::HashMap<&str, u64> = state
        .pods
        .iter()
        .filter_map(|v| Some((v.uid.as_str(), v.memory_working_set_bytes?)))
        .collect();
    for view in &mut views {
        view.memory_working_set_bytes = known.get(view.uid.as_str()).copied();
    }
    state.pods = views;
    drop(state);
    // Whoever decides on these pods (the synchronize loop, whose hot path holds a victim
    // ranked among them) looks again.
    if let Some(changed) = shared.on_change.get() {
        changed();
    }
}

/// The container's oom_score_adj, as the QoS policy wants it, except that without
/// CAP_SYS_RESOURCE the kernel refuses any value below the agent's own (0): then the
/// container gets 0, and an event says so once.
fn container_oom_score_adj(
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
            "Warning",
            "OomScoreAdj",
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
