//! Records: what the runtime holds of each pod, saved to the state directory and
//! published to the API; the QoS tiers and cgroups that follow from it.
use std::sync::Arc;

use super::exit::EXIT_CODE_UNKNOWN;
use crate::events::EventReason;
use crate::policy::pod::Pod;
use crate::policy::{memory_qos, qos};
use crate::runtime::cgroups::PodCgroup;
use crate::runtime::manifests::Manifest;
use crate::runtime::shared::{LivePod, Shared};
use crate::runtime::store::{ContainerRecord, Phase, PodRecord};
use crate::state::{ContainerView, PodView};

/// Records a pod that is not (yet) running.
pub(super) fn insert(
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
        conditions: Vec::new(),
    };
    persist_new(shared, &record);
    shared
        .lock()
        .pods
        .insert(manifest.uid.clone(), LivePod::new(record, None));
}

/// Changes the record of pod `uid` in place and saves it. `None`, and nothing saved, when
/// the pod is gone or `change` declines.
pub(super) fn update_record<T>(
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
pub(in crate::runtime) fn persist(shared: &Shared, record: &PodRecord) {
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
pub(super) fn persist_new(shared: &Shared, record: &PodRecord) {
    write_record(shared, record, || Some(record.clone()));
}

pub(super) fn write_record(
    shared: &Shared,
    record: &PodRecord,
    latest: impl FnOnce() -> Option<PodRecord>,
) {
    if let Err(err) = shared.store.save_latest(latest) {
        shared
            .state
            .event(EventReason::StateWrite, &record.pod.key(), err.to_string());
    }
}

/// Publishes every pod to the shared state (the API's `pods`).
pub(in crate::runtime) fn publish(shared: &Shared) {
    let views: Vec<PodView> = {
        let inner = shared.lock();
        inner.pods.values().map(pod_view).collect()
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

/// The reason of a container that exited and waits out its restart back-off, as the
/// kubelet words its waiting state.
pub(crate) const CRASH_LOOP_BACK_OFF: &str = "CrashLoopBackOff";

/// A pod as the API shows it, from what the runtime holds of it: its record's status
/// (phase, reason, message, conditions), containers and cgroup.
fn pod_view(p: &LivePod) -> PodView {
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
        conditions: r.conditions.clone(),
        cgroup: p.cgroup.as_ref().map(|c| c.relative.clone()),
        // Filled in by `publish` from the last synchronize, which reads every pod's
        // working set anyway: reading a thousand cgroups here, at every pod start and
        // under the runtime's lock, would cost more than the pass.
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
                reason: if c.pid.is_none() && p.restart_at.contains_key(&c.name) {
                    // Exited, and waiting out its restart back-off: the kubelet's word.
                    Some(CRASH_LOOP_BACK_OFF.to_string())
                } else {
                    (c.pid.is_none() && c.exit_code_unknown).then(|| EXIT_CODE_UNKNOWN.to_string())
                },
            })
            .collect(),
    }
}

pub(in crate::runtime) fn update_tiers(shared: &Shared) {
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
    if let Some(memory_qos) = &shared.config.cgroup_options.memory_qos {
        let protection =
            memory_qos::tier_protection(&active, memory_qos.settings.reservation_policy);
        if let Err(err) = shared.tree.update_memory_qos_tiers(&protection) {
            tracing::warn!("Memory QoS of the QoS tiers: {err}");
        }
    }
}

pub(in crate::runtime) fn remove_cgroups(shared: &Shared, key: &str, cgroup: &PodCgroup) {
    if let Err(err) = shared.tree.remove_pod(cgroup) {
        shared
            .state
            .event(EventReason::CgroupCleanup, key, err.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::condition::PodCondition;

    const MESSAGE: &str =
        "The node was low on resource: memory. Threshold quantity: 500Mi, available: 200Mi. ";

    fn live(record: PodRecord) -> LivePod {
        LivePod::new(record, None)
    }

    fn record(phase: Phase, conditions: Vec<PodCondition>) -> PodRecord {
        let mut pod: Pod = crate::policy::pod::parse_pod(
            "metadata: {name: hog, namespace: default}\nspec: {containers: [{name: c, image: i}]}\n",
            "hog.yaml",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        pod.metadata.uid = "u1".into();
        PodRecord {
            uid: "u1".into(),
            manifest: "/etc/monitor/pods/hog.yaml".into(),
            pod: Arc::new(pod),
            phase,
            reason: (phase == Phase::Failed).then(|| "Evicted".into()),
            message: (phase == Phase::Failed).then(|| MESSAGE.into()),
            containers: vec![ContainerRecord {
                name: "c".into(),
                pid: None,
                restart_count: 0,
                last_exit: Some(137),
                exit_code_unknown: false,
                done: true,
                container_id: None,
            }],
            sandbox_id: None,
            conditions,
        }
    }

    /// The `/pods` answer for these records, as the API serves it.
    fn pods_json(records: Vec<PodRecord>) -> serde_json::Value {
        let state = crate::state::AgentState {
            pods: records.into_iter().map(|r| pod_view(&live(r))).collect(),
            ..Default::default()
        };
        let reply = crate::api::respond(&state, crate::api::Scope::Full, "GET", "/pods");
        assert_eq!(reply.status, 200, "{}", reply.body);
        serde_json::from_str(&reply.body).unwrap_or_else(|e| panic!("{e}: {}", reply.body))
    }

    #[test]
    fn the_api_shows_an_evicted_pods_disruption_target() {
        let condition =
            PodCondition::disruption_target(MESSAGE, Some("2026-11-26T10:00:00Z".into()));
        let v = pods_json(vec![record(Phase::Failed, vec![condition])]);
        let pod = &v["pods"][0];
        assert_eq!(pod["phase"], "Failed");
        assert_eq!(pod["reason"], "Evicted");
        assert_eq!(
            pod["conditions"],
            serde_json::json!([{
                "type": "DisruptionTarget",
                "status": "True",
                "reason": "TerminationByKubelet",
                "message": MESSAGE,
                "lastTransitionTime": "2026-11-26T10:00:00Z",
            }])
        );
    }

    #[test]
    fn a_pod_without_conditions_shows_none() {
        let v = pods_json(vec![record(Phase::Running, Vec::new())]);
        let pod = &v["pods"][0];
        assert_eq!(pod["phase"], "Running");
        assert!(pod.get("conditions").is_none(), "{pod}");
    }
}
