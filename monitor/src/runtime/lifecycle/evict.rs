//! Eviction (and preemption): the record says so before the first signal, the kill runs
//! to its end in a task of its own, and a pod is never left marked terminating.
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::records::{persist, publish, remove_cgroups, update_tiers};
use super::stop::{after, kill_until_empty, stop_pod};
use crate::policy::eviction::MIN_KILL_TIMEOUT;
use crate::runtime::cgroups::PodCgroup;
use crate::runtime::port::EvictionOutcome;
use crate::runtime::shared::Shared;
use crate::runtime::store::Phase;

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
pub(in crate::runtime) async fn evict(
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
pub(super) struct TerminatingMark<'a> {
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

pub(super) async fn evict_to_end(
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
pub(super) async fn kill_leftovers(
    shared: &Arc<Shared>,
    key: &str,
    deadline: Instant,
) -> EvictionOutcome {
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

/// Where the pods with this key that the runtime still knows have cgroups: the ones their
/// records hold, or, for a record that let go of its cgroup, where it would be.
pub(super) fn cgroups_of(shared: &Shared, key: &str) -> Vec<PodCgroup> {
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
pub(in crate::runtime) fn processes_left(shared: &Shared, key: &str) -> usize {
    cgroups_of(shared, key)
        .iter()
        .map(|cgroup| shared.tree.pids(cgroup).len())
        .sum()
}
