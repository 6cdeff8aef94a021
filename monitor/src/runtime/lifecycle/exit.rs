//! Exit: what becomes of a pod when one of its containers ends.
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::records::{persist, publish, remove_cgroups, update_tiers};
use super::stop::report_answers;
use crate::runtime::cri;
use crate::runtime::shared::{Exit, MAX_BACKOFF, Shared};
use crate::runtime::store::Phase;

/// The reason of a container whose last run ended with a status the agent could not read.
pub(super) const EXIT_CODE_UNKNOWN: &str = "ExitCodeUnknown";

/// How long a finished pod's sandbox stop may take (it frees nothing that is pressing).
pub(super) const FINISHED_SANDBOX_STOP: Duration = Duration::from_secs(30);

/// A container process ended: restart it, or settle the pod's phase.
pub(super) fn on_exit(shared: &Arc<Shared>, exit: Exit) {
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
