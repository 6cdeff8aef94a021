//! Stop: a pod killed through its cgroups by a deadline, then the container runtime told;
//! a pod whose manifest went stopped and forgotten.
use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::Signal as UnixSignal;
use tokio::time::Instant;

use super::records::{publish, remove_cgroups, update_record, update_tiers};
use crate::events::EventReason;
use crate::policy::eviction::{MIN_KILL_TIMEOUT, kill_timeout};
use crate::runtime::cgroups::PodCgroup;
use crate::runtime::cri;
use crate::runtime::port::{EvictionOutcome, KillSwitch};
use crate::runtime::shared::Shared;
use crate::runtime::store::PodRecord;

/// An instant no deadline reaches (about thirty years ahead, as tokio's own far future).
pub(super) fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(86_400 * 365 * 30)
}

/// `wait` from now, or a deadline never reached when that overflows the clock (a grace
/// period near i64::MAX seconds).
pub(super) fn after(wait: Duration) -> Instant {
    Instant::now().checked_add(wait).unwrap_or_else(far_future)
}

/// How often a stop looks at the pod's cgroups while it waits for them to empty.
pub(super) const STOP_POLL: Duration = Duration::from_millis(20);

/// Kills a pod: SIGTERM to every process in its cgroups, SIGKILL once the grace period
/// ends (at once for grace 0), then waits until the cgroups are empty or `timeout` (never
/// below [`MIN_KILL_TIMEOUT`]) runs out.
pub(in crate::runtime) async fn kill(
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
pub(super) fn sigterm(shared: &Shared, cgroup: &PodCgroup) {
    if let Err(err) = shared.tree.signal(cgroup, UnixSignal::SIGTERM) {
        tracing::warn!("SIGTERM to {}: {err}", cgroup.relative);
    }
}

/// SIGKILL through the pod's cgroups (`cgroup.kill` where the kernel has it, else each
/// process through a pidfd) until they are empty, or `deadline`: Evicted once empty,
/// TimedOut (or the last kill's error) at the deadline.
pub(super) async fn kill_until_empty(
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

/// How long an eviction waits, once the runtime has answered its stop and removal, for
/// the runtime to delete the pod's writable layers (containerd does so at its next
/// garbage collection). The wait is skipped when the runtime left a call unanswered.
pub(super) const LAYER_CLEANUP_TIMEOUT: Duration = Duration::from_secs(10);

/// Stops a pod that is being evicted or removed, by `deadline`.
///
/// The kill goes through the pod's cgroups, never through the runtime, so that a runtime
/// that does not answer cannot hold it up: with a grace period, the pod gets SIGTERM
/// (from the container runtime's StopContainer with the grace period, or through its
/// cgroups on the process runtime or when the runtime refuses) and until the grace period
/// ends to go; then whatever is left in its cgroups is killed at once. Only then is the
/// container runtime told (the sandbox stopped and removed with its containers), each
/// call dropped at `deadline`: a call left unanswered is reported (a
/// `RuntimeUnresponsive` event, and the `monitor_runtime_unresponsive_calls_total`
/// metric), and what the runtime holds of the pod is left to garbage collection. When
/// every call was answered, the writable layers' deletion is waited for, up to
/// [`LAYER_CLEANUP_TIMEOUT`].
pub(super) async fn stop_pod(
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
        // The kill is done and the runtime has answered: its deletion of the layers is
        // waited for on a clock of its own, not what the slow calls left of the kill's
        // deadline (a sandbox stop can take most of it on a loaded node).
        let waiting = Instant::now();
        let layers_deadline = after(LAYER_CLEANUP_TIMEOUT);
        while answers.answered_all()
            && layers.iter().any(|layer| layer.exists())
            && Instant::now() < layers_deadline
        {
            tokio::time::sleep(STOP_POLL).await;
        }
        if !layers.is_empty() {
            let left = layers.iter().filter(|layer| layer.exists()).count();
            tracing::info!(
                pod = %key,
                "{} of {} writable layer(s) deleted by the runtime {} ms after it answered",
                layers.len() - left,
                layers.len(),
                waiting.elapsed().as_millis()
            );
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
pub(super) fn report_answers(
    shared: &Shared,
    key: &str,
    answers: &cri::stop::StopAnswers,
    waited: Duration,
) {
    for err in &answers.errors {
        shared
            .state
            .event(EventReason::FailedKillPod, key, err.clone());
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
        let total = state.metrics.runtime_unresponsive_calls.values().sum();
        state.runtime_silence = Some(crate::state::RuntimeSilence::now(
            key,
            &answers.unanswered,
            total,
        ));
    }
    shared.state.event(
        EventReason::RuntimeUnresponsive,
        key,
        cri::stop::silence_message(&answers.unanswered, waited),
    );
}

/// Stops a pod whose manifest is gone or changed, and forgets it.
pub(super) async fn stop(shared: &Arc<Shared>, uid: &str) {
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
            EventReason::Killing,
            &key,
            "manifest removed or changed: stopping",
        );
        let deadline = after(kill_timeout(grace));
        match stop_pod(shared, &record, Some(cgroup), grace, deadline).await {
            EvictionOutcome::Evicted => remove_cgroups(shared, &key, cgroup),
            outcome => shared.state.event(
                EventReason::FailedKill,
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
