//! Eviction (and preemption): the record says so before the first signal, the kill runs
//! to its end in a task of its own, and a pod is never left marked terminating.
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use super::records::{persist, publish, remove_cgroups, update_tiers};
use super::stop::{after, kill_until_empty, stop_pod};
use crate::events::EventReason;
use crate::policy::condition::{PodCondition, set_condition};
use crate::policy::eviction::MIN_KILL_TIMEOUT;
use crate::runtime::cgroups::PodCgroup;
use crate::runtime::port::EvictionOutcome;
use crate::runtime::shared::Shared;
use crate::runtime::store::{Phase, PodRecord};

/// Evicts (or preempts) the pod with this key. The record says Failed/`reason`, with
/// `condition` (`DisruptionTarget`, see [`mark_evicted`]) among its conditions, before the
/// first signal is sent and is persisted, so a restarted agent neither restarts it nor
/// evicts it again, and still shows why it ended. A pod whose earlier kill failed (Failed, cgroups still there) is
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
    reason: EventReason,
    message: &str,
    condition: Option<PodCondition>,
    timeout: Duration,
) -> EvictionOutcome {
    // In the caller's span (the eviction's, under the pass that decided it): the kill's
    // lines stay traceable to the decision.
    let task = tokio::spawn(
        evict_to_end(
            shared.clone(),
            key.to_string(),
            grace_seconds,
            Ending {
                reason,
                message: message.to_string(),
                condition,
            },
            timeout,
        )
        .in_current_span(),
    );
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

/// What an eviction writes in the pod's record: the status reason and message, and the
/// condition it sets, if any.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Ending {
    /// Evicted or Preempted: the pod's status reason and the reason of the event that
    /// says the pod ended.
    pub(crate) reason: EventReason,
    pub(crate) message: String,
    pub(crate) condition: Option<PodCondition>,
}

/// Writes an eviction into a record: Failed with the eviction's reason and message, every
/// container done, and the eviction's condition set among the pod's conditions. The
/// kubelet does the same in one status update when it terminates a pod abnormally
/// (pkg/kubelet/kubelet_pods.go generateAPIPodStatus carries the DisruptionTarget its
/// eviction or preemption set over into every later status); a condition already there
/// keeps its transition time ([`set_condition`]).
pub(super) fn mark_evicted(record: &mut PodRecord, ending: &Ending) {
    record.phase = Phase::Failed;
    record.reason = Some(ending.reason.as_str().to_string());
    record.message = Some(ending.message.clone());
    for c in &mut record.containers {
        c.done = true;
    }
    if let Some(condition) = &ending.condition {
        set_condition(&mut record.conditions, condition.clone());
    }
}

pub(super) async fn evict_to_end(
    shared: Arc<Shared>,
    key: String,
    grace_seconds: i64,
    ending: Ending,
    timeout: Duration,
) -> EvictionOutcome {
    let reason = ending.reason;
    let message = ending.message.clone();
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
                mark_evicted(&mut live.record, &ending);
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
        EventReason::Killing,
        key,
        format!(
            "{}: stopping with a grace period of {grace_seconds} s",
            reason.as_str()
        ),
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
        reason,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::condition::{ConditionStatus, DISRUPTION_TARGET, preemption_condition};
    use crate::policy::pod::Pod;
    use crate::runtime::store::ContainerRecord;

    const T0: &str = "2026-11-26T10:00:00Z";
    const T1: &str = "2026-11-26T10:00:07Z";
    const MESSAGE: &str =
        "The node was low on resource: memory. Threshold quantity: 500Mi, available: 200Mi. ";

    fn running() -> PodRecord {
        PodRecord {
            uid: "u1".into(),
            manifest: "/etc/monitor/pods/hog.yaml".into(),
            pod: Pod::default().into(),
            phase: Phase::Running,
            reason: None,
            message: None,
            containers: vec![ContainerRecord {
                name: "c".into(),
                pid: Some(42),
                restart_count: 0,
                last_exit: None,
                exit_code_unknown: false,
                done: false,
                container_id: None,
            }],
            sandbox_id: None,
            conditions: Vec::new(),
        }
    }

    fn eviction(at: &str) -> Ending {
        Ending {
            reason: EventReason::Evicted,
            message: MESSAGE.into(),
            condition: Some(PodCondition::disruption_target(MESSAGE, Some(at.into()))),
        }
    }

    #[test]
    fn an_evicted_record_is_failed_and_a_disruption_target() {
        let mut record = running();
        mark_evicted(&mut record, &eviction(T0));
        assert_eq!(record.phase, Phase::Failed);
        assert_eq!(record.reason.as_deref(), Some("Evicted"));
        assert_eq!(record.message.as_deref(), Some(MESSAGE));
        assert!(record.containers.iter().all(|c| c.done));
        assert_eq!(
            record.conditions,
            [PodCondition::disruption_target(MESSAGE, Some(T0.into()))]
        );
    }

    #[test]
    fn a_hot_path_kill_whose_exit_came_first_is_booked_with_its_condition() {
        // The hot path killed the pod through cgroup.kill, and its exit (137, never
        // restarted) was handled before the eviction was booked: Failed, no reason.
        let mut record = running();
        record.phase = Phase::Failed;
        record.containers[0].pid = None;
        record.containers[0].last_exit = Some(137);
        record.containers[0].done = true;
        mark_evicted(&mut record, &eviction(T0));
        assert_eq!(record.reason.as_deref(), Some("Evicted"));
        assert_eq!(record.conditions.len(), 1);
        assert_eq!(record.conditions[0].kind, DISRUPTION_TARGET);
        assert_eq!(record.conditions[0].status, ConditionStatus::True);
    }

    #[test]
    fn evicting_again_keeps_the_first_transition_time() {
        // A kill that did not finish is retried: the pod was a disruption target since
        // the first attempt.
        let mut record = running();
        mark_evicted(&mut record, &eviction(T0));
        mark_evicted(&mut record, &eviction(T1));
        assert_eq!(record.conditions.len(), 1, "{:?}", record.conditions);
        assert_eq!(
            record.conditions[0].last_transition_time.as_deref(),
            Some(T0)
        );
    }

    #[test]
    fn a_preempted_record_carries_the_preemption_condition() {
        let mut record = running();
        let ending = Ending {
            reason: EventReason::Preempted,
            message: "Preempted in order to admit critical pod kube-system/dns".into(),
            condition: Some(preemption_condition(Some(T0.into()))),
        };
        mark_evicted(&mut record, &ending);
        assert_eq!(record.reason.as_deref(), Some("Preempted"));
        assert_eq!(
            record.conditions[0].message,
            "Pod was preempted by Kubelet to accommodate a critical pod."
        );
        assert_eq!(record.conditions[0].reason, "TerminationByKubelet");
    }

    #[test]
    fn a_local_storage_eviction_sets_no_condition() {
        let mut record = running();
        let ending = Ending {
            reason: EventReason::Evicted,
            message: "Usage of EmptyDir volume \"cache\" exceeds the limit \"1Gi\". ".into(),
            condition: None,
        };
        mark_evicted(&mut record, &ending);
        assert_eq!(record.phase, Phase::Failed);
        assert!(record.conditions.is_empty(), "{:?}", record.conditions);
    }

    #[test]
    fn the_condition_survives_a_save_and_a_load() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::runtime::store::StateStore::open(dir.path()).unwrap();
        let mut record = running();
        mark_evicted(&mut record, &eviction(T0));
        store.save(&record).unwrap();
        let (records, errors) = store.load_all();
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(records, [record]);
    }
}
