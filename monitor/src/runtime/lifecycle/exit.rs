//! Exit: what becomes of a pod when one of its containers ends.
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::records::{persist, publish, remove_cgroups, update_tiers};
use super::stop::report_answers;
use crate::events::EventReason;
use crate::runtime::cri;
use crate::runtime::shared::{Exit, MAX_BACKOFF, Shared};
use crate::runtime::store::{ContainerRecord, Phase};

/// The reason of a container whose last run ended with a status the agent could not read.
pub(super) const EXIT_CODE_UNKNOWN: &str = "ExitCodeUnknown";

/// How long a finished pod's sandbox stop may take (it frees nothing that is pressing).
pub(super) const FINISHED_SANDBOX_STOP: Duration = Duration::from_secs(30);

/// What the runtime knows of a pod when one of its containers' processes ends: plain
/// data, read under the runtime's lock.
#[derive(Clone, Copy, Debug)]
pub(super) struct ExitFacts<'a> {
    /// The pod's `restartPolicy` as written; `None` is Always (the API's default).
    pub(super) policy: Option<&'a str>,
    /// Being stopped, evicted, or killed by the hot path (its kill switch raised the flag
    /// before the kill, so an exit seen before the eviction is booked counts too).
    pub(super) stopping: bool,
    /// The pod's phase before this exit (Failed for an evicted pod).
    pub(super) phase: Phase,
    /// The pod's containers as recorded before this exit.
    pub(super) containers: &'a [ContainerRecord],
    /// The back-off of the container's last restart; `None` before its first.
    pub(super) last_backoff: Option<Duration>,
    /// The first back-off ([`RuntimeConfig::restart_backoff`](crate::runtime::RuntimeConfig::restart_backoff)).
    pub(super) first_backoff: Duration,
}

/// What follows a container's exit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum AfterExit {
    /// A late report of an earlier run (the container runs again already), or of no
    /// container of the pod: nothing changes.
    Stale,
    Settled {
        /// The container runs again after this back-off (the last one doubled, up to
        /// [`MAX_BACKOFF`]); `None`: it is done.
        restart_after: Option<Duration>,
        /// The phase the pod ends in now that its last container is done; `None` while
        /// others run, or when it had ended or was being stopped already.
        pod_ends: Option<Phase>,
    },
}

/// The decision after a container's exit, as the kubelet makes it for a pod's restart
/// policy: Always restarts whatever the code, OnFailure on a failure, Never never; a pod
/// being stopped or evicted, or one that has ended, restarts nothing. The pod ends once
/// every container is done: Succeeded when each last exited 0, Failed otherwise.
///
/// An unknown status (`code` `None`) counts as a failure, as the kubelet counts a
/// container whose status it lost (ContainerStatusUnknown): under Never the pod fails,
/// under OnFailure and Always the container runs again. Calling it a success could report
/// a job done that never finished; running again a job that may have succeeded is what an
/// OnFailure job must bear after any failure anyway.
///
/// A report from pid 0 (a start that failed, a container found dead at adoption) is never
/// stale.
pub(super) fn after_exit(facts: &ExitFacts<'_>, exit: &Exit) -> AfterExit {
    let Some(index) = facts
        .containers
        .iter()
        .position(|c| c.name == exit.container)
    else {
        return AfterExit::Stale;
    };
    let this = &facts.containers[index];
    if this.pid != Some(exit.pid) && exit.pid != 0 {
        return AfterExit::Stale;
    }
    let failed = exit.code != Some(0);
    let restart = !facts.stopping
        && !facts.phase.is_terminal()
        && match facts.policy.unwrap_or("Always") {
            "Never" => false,
            "OnFailure" => failed,
            _ => true,
        };
    let restart_after = restart.then(|| {
        facts
            .last_backoff
            .map(|d| (d * 2).min(MAX_BACKOFF))
            .unwrap_or(facts.first_backoff)
    });
    // The containers as they stand after this exit: this one runs no more, and is done
    // unless it restarts.
    let all_done = facts.containers.iter().enumerate().all(|(i, c)| {
        if i == index {
            !restart || c.done
        } else {
            c.done && c.pid.is_none()
        }
    });
    let ended = all_done && !facts.stopping && !facts.phase.is_terminal();
    let pod_ends = ended.then(|| {
        let ok = facts.containers.iter().enumerate().all(|(i, c)| {
            let last_exit = if i == index { exit.code } else { c.last_exit };
            last_exit == Some(0)
        });
        if ok { Phase::Succeeded } else { Phase::Failed }
    });
    AfterExit::Settled {
        restart_after,
        pod_ends,
    }
}

/// A container process ended: restart it, or settle the pod's phase, as [`after_exit`]
/// decides.
pub(super) fn on_exit(shared: &Arc<Shared>, exit: Exit) {
    let mut inner = shared.lock();
    let Some(live) = inner.pods.get_mut(&exit.uid) else {
        return;
    };
    let facts = ExitFacts {
        policy: live.record.pod.spec.restart_policy.as_deref(),
        stopping: live.stopping(),
        phase: live.record.phase,
        containers: &live.record.containers,
        last_backoff: live.backoff.get(&exit.container).copied(),
        first_backoff: shared.config.restart_backoff,
    };
    let AfterExit::Settled {
        restart_after,
        pod_ends,
    } = after_exit(&facts, &exit)
    else {
        return;
    };
    let failed = exit.code != Some(0);
    let Some(record) = live
        .record
        .containers
        .iter_mut()
        .find(|c| c.name == exit.container)
    else {
        return;
    };
    record.pid = None;
    // An unreadable status is written down as such: an older run's code would misstate
    // this run.
    record.last_exit = exit.code;
    record.exit_code_unknown = exit.code.is_none();
    match restart_after {
        Some(delay) => {
            live.backoff.insert(exit.container.clone(), delay);
            live.restart_at
                .insert(exit.container.clone(), Instant::now() + delay);
        }
        None => record.done = true,
    }
    let restart = restart_after.is_some();
    let key = live.record.pod.key();
    if let Some(phase) = pod_ends {
        live.record.phase = phase;
    }
    let finished = pod_ends.is_some();
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
        if restart {
            EventReason::BackOff { failed }
        } else {
            EventReason::Exited { failed }
        },
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
