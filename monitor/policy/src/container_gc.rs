//! Container garbage collection: which dead containers to delete.
//!
//! kubelet: pkg/kubelet/kuberuntime/kuberuntime_gc.go (evictContainers). Dead containers
//! are grouped in units, one per (pod, container name). A unit whose pod's content is to
//! go (the pod was evicted or deleted; on the eviction path also when it has finished)
//! goes whole. Every other unit keeps its newest `max_per_pod_container` containers; if
//! the node still holds more than `max_containers`, each unit keeps an equal share (at
//! least one) and, failing that, only the newest `max_containers` of all are kept.
//! Containers younger than `min_age` are neither removed nor counted.
use std::collections::BTreeMap;
use std::time::Duration;

use super::types::Time;

/// The kubelet's container GC settings (its flags `--minimum-container-ttl-duration`,
/// `--maximum-dead-containers-per-container`, `--maximum-dead-containers`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ContainerGcPolicy {
    /// Dead containers created less than this ago are kept.
    pub min_age: Duration,
    /// Dead containers kept per (pod, container name); negative: no limit.
    pub max_per_pod_container: i32,
    /// Dead containers kept on the node; negative: no limit.
    pub max_containers: i32,
}

impl Default for ContainerGcPolicy {
    /// The kubelet's defaults: no minimum age, one per container, no node limit.
    fn default() -> Self {
        ContainerGcPolicy {
            min_age: Duration::ZERO,
            max_per_pod_container: 1,
            max_containers: -1,
        }
    }
}

/// A container that has exited, as the runtime lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeadContainer {
    pub id: String,
    pub pod_uid: String,
    pub name: String,
    pub created_at: Time,
}

/// The dead containers to remove, oldest of each unit first. `remove_all(uid)` says
/// whether everything of pod `uid` is to go.
pub fn containers_to_remove(
    policy: &ContainerGcPolicy,
    dead: &[DeadContainer],
    remove_all: impl Fn(&str) -> bool,
    now: Time,
) -> Vec<String> {
    let newest_removable = now.saturating_sub(policy.min_age);
    let mut units: BTreeMap<(&str, &str), Vec<&DeadContainer>> = BTreeMap::new();
    for c in dead.iter().filter(|c| c.created_at <= newest_removable) {
        units
            .entry((c.pod_uid.as_str(), c.name.as_str()))
            .or_default()
            .push(c);
    }
    for unit in units.values_mut() {
        // Newest first; ties broken by id so the order is the same every time.
        unit.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(a.id.cmp(&b.id)));
    }
    let mut removed: Vec<String> = Vec::new();
    units.retain(|(uid, _), unit| {
        if remove_all(uid) {
            removed.extend(unit.iter().rev().map(|c| c.id.clone()));
            false
        } else {
            true
        }
    });
    if let Ok(keep) = usize::try_from(policy.max_per_pod_container) {
        keep_newest_per_unit(&mut units, keep, &mut removed);
    }
    if let Ok(max) = usize::try_from(policy.max_containers) {
        let total = |units: &BTreeMap<_, Vec<&DeadContainer>>| -> usize {
            units.values().map(Vec::len).sum()
        };
        if total(&units) > max {
            let share = (max / units.len().max(1)).max(1);
            keep_newest_per_unit(&mut units, share, &mut removed);
        }
        if total(&units) > max {
            let mut all: Vec<&DeadContainer> = units.values().flatten().copied().collect();
            all.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(a.id.cmp(&b.id)));
            removed.extend(all[max..].iter().rev().map(|c| c.id.clone()));
        }
    }
    removed
}

fn keep_newest_per_unit(
    units: &mut BTreeMap<(&str, &str), Vec<&DeadContainer>>,
    keep: usize,
    removed: &mut Vec<String>,
) {
    for unit in units.values_mut() {
        if unit.len() > keep {
            removed.extend(unit[keep..].iter().rev().map(|c| c.id.clone()));
            unit.truncate(keep);
        }
    }
    units.retain(|_, unit| !unit.is_empty());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Time {
        Duration::from_secs(s)
    }

    fn dead(id: &str, pod: &str, name: &str, created: u64) -> DeadContainer {
        DeadContainer {
            id: id.into(),
            pod_uid: pod.into(),
            name: name.into(),
            created_at: secs(created),
        }
    }

    fn run(policy: ContainerGcPolicy, dead: &[DeadContainer], gone: &[&str]) -> Vec<String> {
        containers_to_remove(&policy, dead, |uid| gone.contains(&uid), secs(1000))
    }

    #[test]
    fn the_default_keeps_the_newest_dead_container_per_name() {
        let d = [
            dead("a1", "p", "a", 10),
            dead("a3", "p", "a", 30),
            dead("a2", "p", "a", 20),
            dead("b1", "p", "b", 5),
        ];
        assert_eq!(run(ContainerGcPolicy::default(), &d, &[]), ["a1", "a2"]);
    }

    #[test]
    fn a_pod_whose_content_goes_loses_every_dead_container() {
        let d = [dead("a1", "p", "a", 10), dead("q1", "q", "a", 10)];
        assert_eq!(run(ContainerGcPolicy::default(), &d, &["q"]), ["q1"]);
    }

    #[test]
    fn containers_younger_than_the_minimum_age_stay_and_do_not_count() {
        let policy = ContainerGcPolicy {
            min_age: secs(100),
            ..ContainerGcPolicy::default()
        };
        // a3 is 50 s old: kept, and a2 is the newest removable one, so it stays too.
        let d = [
            dead("a1", "p", "a", 10),
            dead("a2", "p", "a", 20),
            dead("a3", "p", "a", 950),
        ];
        assert_eq!(run(policy, &d, &[]), ["a1"]);
        assert_eq!(run(policy, &d, &["p"]), ["a1", "a2"]);
    }

    #[test]
    fn a_negative_per_container_limit_keeps_all() {
        let policy = ContainerGcPolicy {
            max_per_pod_container: -1,
            ..ContainerGcPolicy::default()
        };
        let d = [dead("a1", "p", "a", 10), dead("a2", "p", "a", 20)];
        assert!(run(policy, &d, &[]).is_empty());
    }

    #[test]
    fn the_node_limit_shares_out_then_keeps_the_newest_overall() {
        let policy = ContainerGcPolicy {
            max_per_pod_container: -1,
            max_containers: 4,
            ..ContainerGcPolicy::default()
        };
        // Two units of three: each keeps 4 / 2 = 2.
        let d = [
            dead("a1", "p", "a", 10),
            dead("a2", "p", "a", 20),
            dead("a3", "p", "a", 30),
            dead("b1", "p", "b", 11),
            dead("b2", "p", "b", 21),
            dead("b3", "p", "b", 31),
        ];
        assert_eq!(run(policy, &d, &[]), ["a1", "b1"]);
        // Five units of one with a limit of 2: a share of 0 is raised to 1, so the
        // newest 2 of all are kept.
        let policy = ContainerGcPolicy {
            max_containers: 2,
            ..policy
        };
        let d: Vec<DeadContainer> = (1..=5)
            .map(|i| dead(&format!("c{i}"), "p", &format!("n{i}"), i * 10))
            .collect();
        assert_eq!(run(policy, &d, &[]), ["c1", "c2", "c3"]);
    }

    #[test]
    fn a_zero_node_limit_removes_every_dead_container() {
        let policy = ContainerGcPolicy {
            max_containers: 0,
            ..ContainerGcPolicy::default()
        };
        let d = [dead("a1", "p", "a", 10), dead("b1", "q", "b", 20)];
        let mut removed = run(policy, &d, &[]);
        removed.sort();
        assert_eq!(removed, ["a1", "b1"]);
    }
}
