//! Chaos scenarios for the guarantees a fast kill must keep, run against the real agent
//! on the tests' bounded node (a 512 MiB pods cgroup, `allocatableMemory.available<150Mi`
//! hard, so the pods' working set crosses at about 362 MiB):
//!
//! - **stale victim**: a pod peaks (and is ranked first at a synchronize), then frees its
//!   memory; another pod then grows past the threshold before the next synchronize. The
//!   pod killed must be the grower, the kubelet's pick on the working sets of that moment.
//! - **unfreeable memory**: pods whose memory stays charged after they are gone (files on
//!   a tmpfs). Killing one gives nothing back, so after the first eviction at most one per
//!   housekeeping interval may follow, and the agent must say `EvictionIneffective`.
//! - **double kill**: two pods grow at full speed at once, with `restartPolicy: Always`.
//!   Every pod killed must be booked `Evicted`, none may run again after its eviction,
//!   and none may be evicted twice.
//!
//! Each counts its losses in one table; a clean run has zeros in every loss column.
use std::path::PathBuf;
use std::time::{Duration, Instant};

use monitor::runtime::store::{Phase, PodRecord};

use crate::chaos::{EVICTION, wait_ready};
use crate::node::{Node, alive, poll_every};

/// The housekeeping interval of these nodes: short, so pacing shows within seconds.
pub const HOUSEKEEPING: Duration = Duration::from_secs(2);

/// The losses of one scenario. Every field but `scenario` and `cycles` must stay zero.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TrustTally {
    pub scenario: &'static str,
    pub cycles: u32,
    /// A pod killed that was not the kubelet's pick on fresh stats (or a bystander).
    pub wrong_kills: u32,
    /// An evicted pod whose containers ran again.
    pub restarted_after_eviction: u32,
    /// Evictions beyond what the kubelet would do: two within one housekeeping interval
    /// for a signal that did not move, a pod evicted twice, a kill not booked `Evicted`.
    pub extra_evictions: u32,
    /// Kernel OOM kills in the pods cgroup.
    pub oom_kills: u64,
    /// What the agent had to say that it did not (e.g. no `EvictionIneffective`), and
    /// pods that never ended.
    pub missing: u32,
    pub findings: Vec<String>,
}

impl TrustTally {
    pub fn clean(&self) -> bool {
        self.wrong_kills == 0
            && self.restarted_after_eviction == 0
            && self.extra_evictions == 0
            && self.oom_kills == 0
            && self.missing == 0
    }
}

/// The table `cargo xtask chaos` prints for these scenarios.
pub fn trust_table(tallies: &[TrustTally]) -> String {
    let mut out = String::from(
        "| scenario | cycles | wrong kills | restarted after eviction | evictions beyond the kubelet's | OOM kills | missing |\n\
         |---|---|---|---|---|---|---|\n",
    );
    for t in tallies {
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} |\n",
            t.scenario,
            t.cycles,
            t.wrong_kills,
            t.restarted_after_eviction,
            t.extra_evictions,
            t.oom_kills,
            t.missing
        ));
    }
    for t in tallies {
        for finding in &t.findings {
            out.push_str(&format!("  - {}: {finding}\n", t.scenario));
        }
    }
    out
}

fn hog() -> String {
    crate::helper_binary("hog").display().to_string()
}

/// A burstable pod (a small memory request, no limit) running `command`, with `restart`
/// as its restart policy. Not best-effort: admission refuses those while MemoryPressure
/// holds (the transition period outlasts a cycle), and each cycle needs its pods to run.
fn pod(name: &str, command: &[&str], restart: &str) -> String {
    crate::node::pod(
        name,
        "    resources:\n      requests: {memory: 16Mi}\n",
        command,
        &format!("  restartPolicy: {restart}\n"),
    )
}

fn node() -> Node {
    let mut node = Node::new(&format!(
        "{EVICTION}\nhousekeepingInterval: {}s",
        HOUSEKEEPING.as_secs()
    ));
    node.json_logs = true;
    node.start();
    assert!(
        wait_ready(&mut node, Duration::from_secs(30)),
        "the agent did not start:\n{}",
        node.log(node.runs)
    );
    node
}

/// Evicted for node pressure (the eviction message), not refused at admission (whose
/// reason is also `Evicted`).
fn evicted(record: &Option<PodRecord>) -> bool {
    record.as_ref().is_some_and(|r| {
        r.phase == Phase::Failed
            && r.reason.as_deref() == Some("Evicted")
            && r.message
                .as_deref()
                .is_some_and(|m| m.starts_with("The node was low on resource"))
    })
}

fn running(record: &Option<PodRecord>) -> bool {
    record.as_ref().is_some_and(|r| {
        r.phase == Phase::Running && r.containers.iter().all(|c| c.pid.is_some_and(alive))
    })
}

/// Stale victim: `cycles` times, a pod peaks at 250 MiB for 3 s (two housekeeping
/// synchronizes rank it first), frees it all, and at that moment a second pod starts
/// growing at full speed to 700 MiB. The second must be evicted, the first never.
pub fn stale_victim(cycles: u32) -> TrustTally {
    let mut tally = TrustTally {
        scenario: "stale victim",
        ..TrustTally::default()
    };
    let mut node = node();
    let oom_before = node.pods_oom_kills();
    let hog = hog();
    for cycle in 0..cycles {
        let (peak, grow) = (format!("peak-{cycle}"), format!("grow-{cycle}"));
        let freed = node.path(&format!("freed-{cycle}")).display().to_string();
        node.manifest(
            &format!("{peak}.yaml"),
            &pod(&peak, &[&hog, "peak", "250", "3", &freed, "600"], "Never"),
        );
        node.manifest(
            &format!("{grow}.yaml"),
            &pod(
                &grow,
                &[&hog, "after", &freed, "anon", "700", "1", "0", "60"],
                "Never",
            ),
        );
        let ended = poll_every(Duration::from_secs(30), Duration::from_millis(20), || {
            node.record(&grow)
                .is_some_and(|r| matches!(r.phase, Phase::Failed | Phase::Succeeded))
        });
        // A moment for a wrong second kill to show.
        std::thread::sleep(Duration::from_millis(500));
        let (peak_record, grow_record) = (node.record(&peak), node.record(&grow));
        if !ended || !evicted(&grow_record) {
            tally.missing += 1;
            tally.findings.push(format!(
                "cycle {cycle}: the growing pod was not evicted: {grow_record:?}"
            ));
        }
        if !running(&peak_record) {
            tally.wrong_kills += 1;
            tally.findings.push(format!(
                "cycle {cycle}: the pod that had freed its memory was killed: {peak_record:?}"
            ));
        }
        node.remove_manifest(&format!("{peak}.yaml"));
        node.remove_manifest(&format!("{grow}.yaml"));
        poll_every(Duration::from_secs(10), Duration::from_millis(20), || {
            node.record(&peak).is_none() && node.record(&grow).is_none()
        });
        tally.cycles += 1;
    }
    tally.oom_kills = node.pods_oom_kills().saturating_sub(oom_before);
    let log = node.log(node.runs);
    let hot = log.matches("hot path: cgroup.kill written").count();
    tally.findings.push(format!(
        "note: {hot} of the {cycles} evictions were hot kills"
    ));
    node.stop();
    tally
}

/// A tmpfs of our own, unmounted on drop (which frees what its files hold).
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn new(dir: PathBuf, mib: u64) -> Tmpfs {
        crate::node::mount_tmpfs(&dir, mib);
        Tmpfs(dir)
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = nix::mount::umount2(&self.0, nix::mount::MntFlags::MNT_DETACH);
    }
}

/// Unfreeable memory: three pods each write 130 MiB to a tmpfs and sleep; together they
/// cross the threshold. Evicting one gives nothing back (its file stays charged), so
/// after the first eviction each next one must wait a housekeeping interval, and the
/// agent must report `EvictionIneffective`.
pub fn unfreeable() -> TrustTally {
    let mut tally = TrustTally {
        scenario: "unfreeable memory",
        ..TrustTally::default()
    };
    let mut node = node();
    let shm = Tmpfs::new(node.path("shm"), 600);
    let oom_before = node.pods_oom_kills();
    let hog = hog();
    let names: Vec<String> = (0..3).map(|i| format!("shm-{i}")).collect();
    for name in &names {
        let file = shm.0.join(name).display().to_string();
        node.manifest(
            &format!("{name}.yaml"),
            &pod(name, &[&hog, "shm", &file, "130", "600"], "Never"),
        );
    }
    // When each pod was first seen evicted, polled every 20 ms for 12 s.
    let started = Instant::now();
    let mut seen: Vec<(String, Duration)> = Vec::new();
    while started.elapsed() < Duration::from_secs(12) && seen.len() < names.len() {
        for name in &names {
            if !seen.iter().any(|(n, _)| n == name) && evicted(&node.record(name)) {
                seen.push((name.clone(), started.elapsed()));
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    tally.cycles = 1;
    if seen.is_empty() {
        tally.missing += 1;
        tally
            .findings
            .push("nothing was evicted: the pods never crossed the threshold".into());
    }
    // The first may follow at once; then one per housekeeping interval at most (20 ms of
    // polling and 100 ms of loop scheduling allowed).
    let floor = HOUSEKEEPING - Duration::from_millis(120);
    for pair in seen.windows(2) {
        if pair[1].1 - pair[0].1 < floor {
            tally.extra_evictions += 1;
            tally.findings.push(format!(
                "{} evicted {:?} after {}: less than a housekeeping interval",
                pair[1].0,
                pair[1].1 - pair[0].1,
                pair[0].0
            ));
        }
    }
    tally.findings.push(format!("evicted at {seen:?}"));
    let log = node.log(node.runs);
    if tally.extra_evictions > 0 {
        // What the agent saw and did about these pods, to tell a pacing gap from a
        // second signal or a hot kill.
        let lines: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("shm-") || l.contains("paced") || l.contains("hot"))
            .collect();
        tally.findings.push(format!(
            "the agent's lines about them:\n{}",
            lines[lines.len().saturating_sub(40)..].join("\n")
        ));
    }
    if !seen.is_empty() && !log.contains("EvictionIneffective") {
        tally.missing += 1;
        tally
            .findings
            .push("no EvictionIneffective event in the agent's log".into());
    }
    tally.oom_kills = node.pods_oom_kills().saturating_sub(oom_before);
    node.stop();
    drop(shm);
    tally
}

/// Double kill: `cycles` times, two pods with `restartPolicy: Always` grow at full speed
/// at once. Every pod killed must end `Evicted` (booked, not a bare exit 137), stay down
/// (never restarted), and be evicted once.
pub fn double_kill(cycles: u32) -> TrustTally {
    let mut tally = TrustTally {
        scenario: "double kill",
        ..TrustTally::default()
    };
    let mut node = node();
    let oom_before = node.pods_oom_kills();
    let hog = hog();
    for cycle in 0..cycles {
        let names = [format!("twin-a-{cycle}"), format!("twin-b-{cycle}")];
        let go = node.path(&format!("go-{cycle}")).display().to_string();
        for name in &names {
            node.manifest(
                &format!("{name}.yaml"),
                &pod(
                    name,
                    &[&hog, "after", &go, "anon", "700", "1", "0", "60"],
                    "Always",
                ),
            );
        }
        for name in &names {
            node.wait_running(name);
        }
        std::fs::write(&go, "").expect("start file");
        // Both grow past the node: both end evicted, one after the other.
        let ended = poll_every(Duration::from_secs(30), Duration::from_millis(20), || {
            names.iter().all(|n| evicted(&node.record(n)))
        });
        if !ended {
            tally.missing += 1;
            tally.findings.push(format!(
                "cycle {cycle}: not both evicted: {:?}",
                names.iter().map(|n| node.record(n)).collect::<Vec<_>>()
            ));
        }
        // An evicted pod stays down for 3 s: no restart, and no process but the one it had
        // when it was booked (a killed process may still be exiting: its record keeps its
        // pid until the exit is handled).
        let watch_until = Instant::now() + Duration::from_secs(3);
        let mut restarted = std::collections::BTreeSet::new();
        let mut booked: std::collections::BTreeMap<String, Vec<(u32, Option<u32>)>> =
            std::collections::BTreeMap::new();
        while Instant::now() < watch_until {
            for name in &names {
                let record = node.record(name);
                let Some(r) = record.as_ref().filter(|_| evicted(&record)) else {
                    continue;
                };
                let now: Vec<(u32, Option<u32>)> = r
                    .containers
                    .iter()
                    .map(|c| (c.restart_count, c.pid))
                    .collect();
                let first = booked.entry(name.clone()).or_insert_with(|| now.clone());
                // No container of these pods restarts before its eviction (they wait on a
                // file, then grow): any restart is one after the kill.
                let ran_again = now
                    .iter()
                    .zip(first.iter())
                    .any(|((count, pid), (_, pid0))| {
                        *count > 0 || (pid.is_some_and(alive) && pid != pid0)
                    });
                if ran_again {
                    restarted.insert(name.clone());
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        for name in &restarted {
            tally.restarted_after_eviction += 1;
            tally.findings.push(format!(
                "cycle {cycle}: {name} ran again after its eviction: {:?}",
                node.record(name)
            ));
        }
        for name in &names {
            node.remove_manifest(&format!("{name}.yaml"));
        }
        poll_every(Duration::from_secs(10), Duration::from_millis(20), || {
            names.iter().all(|n| node.record(n).is_none())
        });
        tally.cycles += 1;
    }
    tally.oom_kills = node.pods_oom_kills().saturating_sub(oom_before);
    node.stop();
    // Each pod evicted once, by its events.
    for (object, n) in crate::chaos::eviction_events(&node.log(node.runs)) {
        if n > 1 {
            tally.extra_evictions += n - 1;
            tally.findings.push(format!("{object} evicted {n} times"));
        }
    }
    tally
}
