//! Adoption after an agent restart: the pods of the earlier run keep running and are
//! taken over; evicted pods stay evicted; pod cgroups with no record at all are killed
//! and removed (the kubelet's orphaned pod cgroups); pod cgroups whose record cannot be
//! read are left alone.
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal as UnixSignal;

use super::cgroups::PodCgroup;
use super::exit_status::{self, Adopted};
use super::lifecycle::{kill, persist, publish, remove_cgroups, update_tiers};
use super::port::EvictionOutcome;
use super::shared::{Exit, LivePod, Shared};
use crate::events::EventReason;

/// Re-takes the pods of an earlier run: running containers are watched again (through a
/// pidfd: they are not our children any more), containers that died meanwhile go through
/// the restart policy, and pod cgroups no record claims are dealt with as [`unclaimed`]
/// says.
pub(super) fn adopt(shared: &Arc<Shared>) {
    let (records, errors) = shared.store.load_all();
    // After the load: a record it set aside is on disk as `.corrupt` by now.
    let files = shared.store.uids_with_files();
    for err in errors {
        let reason = match err {
            super::store::StoreError::Quarantined { .. } => EventReason::StateQuarantined,
            _ => EventReason::StateUnreadable,
        };
        shared.state.event(reason, "node", err.to_string());
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
                EventReason::PendingReadmitted,
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
                EventReason::PodCgroupGone,
                &key,
                "its cgroup is gone (the node restarted?): it starts afresh from its manifest",
            );
            continue;
        }
        shared.lock().pods.insert(
            record.uid.clone(),
            LivePod::new(record.clone(), if terminal { None } else { cgroup.clone() }),
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
    // Pod cgroups under our root that no readable record claims.
    let known: Vec<String> = shared.lock().pods.keys().cloned().collect();
    let mut orphans = Vec::new();
    for (uid, cgroup) in cgroups {
        if known.contains(&uid) {
            continue;
        }
        match unclaimed(&uid, shared.tree.is_empty(&cgroup), files.as_ref()) {
            Unclaimed::Empty => {
                remove_cgroups(shared, &format!("pod{uid} (no record, empty)"), &cgroup);
            }
            Unclaimed::Orphan => orphans.push(cgroup),
            Unclaimed::Unproven => {
                shared.state.event(
                    EventReason::UnmanagedPod,
                    &format!("pod{uid}"),
                    format!(
                        "{} has processes and a record in {} that cannot be read (set aside as corrupt, or unreadable): left running and unmanaged (never killed, never evicted); a manifest with this uid waits until it is empty",
                        cgroup.relative,
                        shared.config.state_dir.display()
                    ),
                );
                shared.lock().unmanaged.insert(uid, cgroup);
            }
        }
    }
    kill_orphans(shared, orphans, ORPHAN_KILL_TIMEOUT);
    if !adopted.is_empty() {
        shared.state.event(
            EventReason::Adopted,
            "node",
            format!("re-took running pods: {}", adopted.join(", ")),
        );
    }
    update_tiers(shared);
    publish(shared);
}

/// What to do with a pod cgroup under our root that no readable record claims.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Unclaimed {
    /// No process in it: only removed.
    Empty,
    /// Processes, and no file of the records directory is about its pod: an orphan, as
    /// the kubelet has them (the record was removed with its pod while the agent was
    /// down, or never written by a run cut short; a stray process someone put there).
    /// Killed and removed at start, as the kubelet removes orphaned pod cgroups.
    Orphan,
    /// Processes, and a record that cannot be read (set aside as `.corrupt`, unreadable,
    /// or a save cut short), or a records directory that cannot be read at all: nothing
    /// proves what runs there, or that it is not a pod this agent should still run. Left
    /// running, unmanaged, and reported.
    Unproven,
}

/// Decides for the pod cgroup of `uid`. `files` are the pods any file of the records
/// directory is about ([`StateStore::uids_with_files`](super::store::StateStore::uids_with_files);
/// `None` when the directory cannot be read): that is how "no record at all" is told
/// from "a record that cannot be read", since a corrupt record is set aside under its
/// uid's name, never deleted.
fn unclaimed(uid: &str, empty: bool, files: Option<&BTreeSet<String>>) -> Unclaimed {
    if empty {
        Unclaimed::Empty
    } else if files.is_some_and(|files| !files.contains(uid)) {
        Unclaimed::Orphan
    } else {
        Unclaimed::Unproven
    }
}

/// How long the start waits for orphans' processes to die.
const ORPHAN_KILL_TIMEOUT: Duration = Duration::from_secs(5);

/// Kills every process of each orphan pod cgroup (SIGKILL through `cgroup.kill` where the
/// kernel has it, else through pidfds of the listed processes, repeated while processes
/// remain: see [`CgroupTree::signal`](super::cgroups::CgroupTree::signal)) and removes
/// the emptied cgroups, each with a warning event naming it. Done before the start goes
/// on, so a manifest with the same uid starts in a cgroup of its own, never in one being
/// killed. One still not empty after `timeout` (a process stuck in the kernel) is left
/// unmanaged, reported, and its manifest waits until it is empty.
fn kill_orphans(shared: &Shared, orphans: Vec<PodCgroup>, timeout: Duration) {
    if orphans.is_empty() {
        return;
    }
    let deadline = Instant::now() + timeout;
    let mut pending: Vec<(PodCgroup, usize)> = orphans
        .into_iter()
        .map(|cgroup| {
            let found = shared.tree.pids(&cgroup).len();
            (cgroup, found)
        })
        .collect();
    loop {
        pending.retain(|(cgroup, found)| {
            if !shared.tree.is_empty(cgroup) {
                return true;
            }
            let key = format!("pod{}", cgroup.uid);
            remove_cgroups(shared, &key, cgroup);
            shared.state.event(
                EventReason::OrphanPodKilled,
                &key,
                format!(
                    "{} had {found} process(es) and no record in {}: killed and removed",
                    cgroup.relative,
                    shared.config.state_dir.display()
                ),
            );
            false
        });
        if pending.is_empty() || Instant::now() >= deadline {
            break;
        }
        for (cgroup, _) in &pending {
            if let Err(err) = shared.tree.signal(cgroup, UnixSignal::SIGKILL) {
                tracing::warn!("SIGKILL to orphan {}: {err}", cgroup.relative);
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    for (cgroup, _) in pending {
        let left = shared.tree.pids(&cgroup).len();
        shared.state.event(
            EventReason::OrphanPodNotKilled,
            &format!("pod{}", cgroup.uid),
            format!(
                "{} has no record in {} and still {left} process(es) {timeout:?} after SIGKILL: left unmanaged; a manifest with this uid waits until it is empty",
                cgroup.relative,
                shared.config.state_dir.display()
            ),
        );
        shared.lock().unmanaged.insert(cgroup.uid.clone(), cgroup);
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unclaimed_pod_cgroup_is_killed_only_when_no_file_is_about_its_pod() {
        let files: BTreeSet<String> = ["corrupt-uid".to_string()].into();
        let cases = [
            // (uid, empty, files readable, expected)
            ("any", true, true, Unclaimed::Empty),
            ("any", true, false, Unclaimed::Empty),
            ("orphan-uid", false, true, Unclaimed::Orphan),
            // A record set aside as corrupt (or unreadable, or a save cut short).
            ("corrupt-uid", false, true, Unclaimed::Unproven),
            // The records directory unreadable: nothing is known to have no record.
            ("orphan-uid", false, false, Unclaimed::Unproven),
        ];
        for (uid, empty, readable, expected) in cases {
            let files = readable.then_some(&files);
            assert_eq!(
                unclaimed(uid, empty, files),
                expected,
                "{uid} empty={empty} readable={readable}"
            );
        }
    }
}
