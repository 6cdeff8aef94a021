//! Adoption after an agent restart: the pods of the earlier run keep running and are
//! taken over; evicted pods stay evicted; cgroups nobody owns are emptied and removed.
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::Signal as UnixSignal;

use super::cgroups::PodCgroup;
use super::exit_status::{self, Adopted};
use super::lifecycle::{kill, persist, publish, remove_cgroups, update_tiers};
use super::port::EvictionOutcome;
use super::shared::{Exit, LivePod, Shared};

/// Re-takes the pods of an earlier run: running containers are watched again (through a
/// pidfd: they are not our children any more), containers that died meanwhile go through
/// the restart policy, and pod cgroups nobody owns are emptied and removed.
pub(super) fn adopt(shared: &Arc<Shared>) {
    let (records, errors) = shared.store.load_all();
    for err in errors {
        let reason = match err {
            super::store::StoreError::Quarantined { .. } => "StateQuarantined",
            _ => "StateUnreadable",
        };
        shared
            .state
            .event("Warning", reason, "node", err.to_string());
    }
    let cgroups: BTreeMap<String, PodCgroup> = shared
        .tree
        .existing_pods()
        .into_iter()
        .map(|c| (c.uid.clone(), c))
        .collect();
    let mut adopted = Vec::new();
    for mut record in records {
        let cgroup = cgroups.get(&record.uid).cloned();
        let alive: Vec<i32> = cgroup
            .as_ref()
            .map(|c| shared.tree.pids(c))
            .unwrap_or_default();
        let mut dead = Vec::new();
        for c in &mut record.containers {
            match c.pid {
                Some(pid) if alive.contains(&(pid as i32)) => {}
                Some(_) => {
                    c.pid = None;
                    dead.push(c.name.clone());
                }
                None => {}
            }
        }
        let key = record.pod.key();
        let terminal = record.phase.is_terminal();
        if record.phase == super::store::Phase::Pending
            && cgroup.as_ref().is_none_or(|c| shared.tree.is_empty(c))
        {
            // Admitted but never started: the agent stopped while a critical pod waited
            // for its victims to go (or between making its cgroup and starting it).
            // Admission is decided again from the manifest, on the node as it is now:
            // started if it fits, preempting again if it must, or rejected with a reason.
            if let Some(cgroup) = &cgroup {
                remove_cgroups(shared, &key, cgroup);
            }
            shared.store.remove(&record.uid);
            shared.state.event(
                "Normal",
                "PendingReadmitted",
                &key,
                "admitted but not started when the agent stopped (a preemption cut short?): admitted again from its manifest",
            );
            continue;
        }
        if !terminal && cgroup.is_none() {
            // Its cgroup is gone, and every process with it: the node restarted (or
            // someone removed it). The record describes nothing that runs; the pod starts
            // afresh from its manifest, as the kubelet starts static pods after a reboot.
            shared.store.remove(&record.uid);
            shared.state.event(
                "Normal",
                "PodCgroupGone",
                &key,
                "its cgroup is gone (the node restarted?): it starts afresh from its manifest",
            );
            continue;
        }
        shared.lock().pods.insert(
            record.uid.clone(),
            LivePod {
                cgroup: if terminal { None } else { cgroup.clone() },
                record: record.clone(),
                terminating: false,
                hot_killed: Default::default(),
                restart_at: BTreeMap::new(),
                backoff: BTreeMap::new(),
            },
        );
        if terminal {
            // Its record says what ran when it was written; the processes it names that
            // are gone are gone for good (the run that ended them may have stopped
            // before it wrote that down).
            if !dead.is_empty() {
                persist(shared, &record);
            }
            // An evicted or finished pod whose processes outlived us: finish the job.
            if let Some(cgroup) = cgroup {
                let _ = shared.tree.signal(&cgroup, UnixSignal::SIGKILL);
                let shared = shared.clone();
                tokio::spawn(async move {
                    if kill(&shared, &cgroup, 0, Duration::from_secs(5)).await
                        == EvictionOutcome::Evicted
                    {
                        remove_cgroups(&shared, &key, &cgroup);
                    }
                });
            }
            continue;
        }
        // Opened now, while they run: the kernel keeps an exit status only for pidfds
        // that existed at the exit.
        let held: Vec<(String, Option<Adopted>)> = record
            .containers
            .iter()
            .filter_map(|c| Some((c.name.clone(), hold(&key, &c.name, c.pid?))))
            .collect();
        // The pids were read from the cgroup before the pidfds were opened: a pidfd names
        // the container's process only if its process is still there and still listed
        // (one that exited in between may have passed its pid on).
        let listed = cgroup
            .as_ref()
            .map(|c| shared.tree.pids(c))
            .unwrap_or_default();
        for (name, adopted) in held {
            let adopted = adopted
                .filter(|a| a.exists() && listed.contains(&i32::try_from(a.pid()).unwrap_or(-1)));
            watch_adopted(shared, &record.uid, &key, &name, adopted);
        }
        for name in dead {
            let _ = shared.exits.send(Exit {
                uid: record.uid.clone(),
                container: name,
                pid: 0,
                code: None,
            });
        }
        adopted.push(key);
    }
    // Pod cgroups under our root that no readable record claims: nothing proves what
    // runs there or that it is ours to stop (a record set aside as corrupt, a state
    // directory changed or emptied). They are left as they are and reported; an empty
    // one is only removed.
    let known: Vec<String> = shared.lock().pods.keys().cloned().collect();
    for (uid, cgroup) in cgroups {
        if known.contains(&uid) {
            continue;
        }
        if shared.tree.is_empty(&cgroup) {
            remove_cgroups(shared, &format!("pod{uid} (no record, empty)"), &cgroup);
            continue;
        }
        shared.state.event(
            "Warning",
            "UnmanagedPod",
            &format!("pod{uid}"),
            format!(
                "{} has processes but no record in {}: left running and unmanaged (never killed, never evicted); a manifest with this uid waits until it is empty",
                cgroup.relative,
                shared.config.state_dir.display()
            ),
        );
        shared.lock().unmanaged.insert(uid, cgroup);
    }
    if !adopted.is_empty() {
        shared.state.event(
            "Normal",
            "Adopted",
            "node",
            format!("re-took running pods: {}", adopted.join(", ")),
        );
    }
    update_tiers(shared);
    publish(shared);
}

/// A pidfd for an adopted container's process; `None` when it is gone already or no
/// pidfd can be had (its exit is then reported at once, status unknown).
fn hold(key: &str, container: &str, pid: u32) -> Option<Adopted> {
    match Adopted::open(pid) {
        Ok(adopted) => adopted,
        Err(why) => {
            tracing::warn!(pod = %key, container, pid, "cannot watch the adopted process: {why}");
            None
        }
    }
}

/// Watches a process that is not our child: its pidfd turns readable when it exits, and
/// then tells its exit status where the kernel kept it.
fn watch_adopted(shared: &Arc<Shared>, uid: &str, key: &str, name: &str, adopted: Option<Adopted>) {
    let exits = shared.exits.clone();
    let (uid, key, name) = (uid.to_string(), key.to_string(), name.to_string());
    tokio::spawn(async move {
        let Some(adopted) = adopted else {
            let _ = exits.send(Exit {
                uid,
                container: name,
                pid: 0,
                code: None,
            });
            return;
        };
        adopted.exited().await;
        let pid = adopted.pid();
        let code = match adopted.wait_status().await {
            Ok((status, source)) => {
                let code = exit_status::exit_code(status);
                tracing::info!(
                    pod = %key,
                    container = %name,
                    pid,
                    "adopted process exited ({}), read through {}",
                    code.map_or_else(|| format!("wait status {status:#x}"), |c| c.to_string()),
                    source.as_str()
                );
                code
            }
            Err(why) => {
                tracing::warn!(pod = %key, container = %name, pid, "adopted process exited, status unknown: {why}");
                None
            }
        };
        let _ = exits.send(Exit {
            uid,
            container: name,
            pid,
            code,
        });
    });
}
