//! Admission: the manifests brought in line with the running pods, each new pod admitted
//! (preempting for a critical one) or rejected with a reason.
use std::collections::BTreeMap;
use std::sync::Arc;

use super::evict::evict;
use super::launch::start;
use super::records::{insert, publish, remove_cgroups};
use super::stop::stop;
use crate::events::EventReason;
use crate::policy::admission::insufficient_resources;
use crate::policy::condition::preemption_condition;
use crate::policy::eviction::kill_timeout;
use crate::policy::pod::Pod;
use crate::policy::preemption::{AdmissionOutcome, admit_with_preemption};
use crate::runtime::manifests::{self, Manifest};
use crate::runtime::port::EvictionOutcome;
use crate::runtime::shared::Shared;
use crate::runtime::store::Phase;

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

pub(super) fn report_manifest_errors(shared: &Shared, errors: &[manifests::ManifestError]) {
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
            EventReason::BadManifest,
            &path.display().to_string(),
            format!("skipped: {message}"),
        );
    }
}

pub(super) fn admit_and_start(shared: &Arc<Shared>, manifest: Manifest) {
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
                EventReason::Preempting,
                &key,
                format!(
                    "critical pod admitted after preempting {}",
                    victims.join(", ")
                ),
            );
            for victim in &victims {
                shared.state.record_decision(simple_decision(
                    "preempt",
                    victim,
                    Some(&signal),
                    format!("Preempted in order to admit critical pod {key}"),
                ));
            }
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
                    // kubelet: preemption.go sets DisruptionTarget on each pod it preempts,
                    // with a message of its own.
                    let condition = preemption_condition(Some(crate::state::now_rfc3339()));
                    let outcome = evict(
                        &shared,
                        victim,
                        grace,
                        EventReason::Preempted,
                        &message,
                        Some(condition),
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
            shared.state.record_decision(simple_decision(
                "rejectAdmission",
                &key,
                None,
                format!("{}: {}", result.reason, result.message),
            ));
            shared.state.event(
                EventReason::FailedAdmission,
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

/// Whether `manifest`'s pod must wait: a cgroup of its uid that no record claims still
/// has processes (it would run twice). Once that cgroup is empty it is removed and the pod
/// may start.
pub(super) fn held_by_unmanaged_cgroup(shared: &Arc<Shared>, manifest: &Manifest) -> bool {
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

/// A decision of admission for the decision record: the pod and the kubelet's words.
fn simple_decision(
    action: &str,
    pod: &str,
    resource: Option<&str>,
    message: String,
) -> crate::decisions::Decision {
    crate::decisions::Decision {
        at: crate::state::now_rfc3339(),
        action: action.to_string(),
        shadow: false,
        pod: Some(pod.to_string()),
        uid: None,
        signal: resource.map(str::to_string),
        message,
        signals: Vec::new(),
        thresholds_met: Vec::new(),
        ranking: Vec::new(),
        timings: Default::default(),
    }
}
