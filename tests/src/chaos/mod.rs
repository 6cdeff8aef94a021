//! Chaos runs against the real agent: `monitor run` killed with SIGKILL at random moments
//! under memory pressure and restarted at once, each event source off in turn during a
//! pressure race, and hostile input replayed at a running agent. Every loss is counted in
//! one table (cycles, pods lost, double evictions, orphan cgroups, stale memory.high, OOM
//! kills, panics); a clean run has zeros everywhere.
//!
//! The node is the tests' bounded node ([`crate::node::Node`]): a 512 MiB pods cgroup under
//! `monitor-test-<pid>`, `allocatableMemory.available<150Mi` hard, a guaranteed and a
//! burstable pod that must never be touched, and one best-effort hog pod per cycle.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use monitor::observe::CgroupVersion;
use monitor::runtime::store::Phase;

use crate::node::{self, BURSTABLE, GUARANTEED, Node, alive, poll, sleeper};

mod hostile;
mod sources;

pub use hostile::{Replay, hostile_replay, replay_table};
pub use sources::{SOURCE_SWITCHES, SourceRace, source_races, sources_table};

/// What a chaos run does; from the environment so that `cargo xtask chaos` can pass it
/// through the test harness and into the VM.
#[derive(Clone, Debug)]
pub struct Options {
    /// Agent SIGKILL cycles under pressure (`MONITOR_CHAOS_CYCLES`).
    pub cycles: u32,
    /// Seed of the kill moments (`MONITOR_CHAOS_SEED`; printed, so a run can be replayed).
    pub seed: u64,
}

impl Options {
    pub fn from_env(default_cycles: u32) -> Options {
        let cycles = std::env::var("MONITOR_CHAOS_CYCLES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default_cycles);
        let seed = std::env::var("MONITOR_CHAOS_SEED")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos() as u64)
                    .unwrap_or(1)
            });
        Options { cycles, seed }
    }
}

/// The losses of a run. Every field but `cycles` must stay zero.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    pub cycles: u32,
    /// Pods that should run and do not, ran twice, or have no record.
    pub pods_lost: u32,
    /// Pods evicted more than once, and pods evicted beside the one a crossing called for.
    pub double_evictions: u32,
    /// Pod cgroups left behind by pods that are gone.
    pub orphan_cgroups: u32,
    /// memory.high left below `max` where the agent no longer arms it (cgroup v2).
    pub stale_memory_high: u32,
    /// Kernel OOM kills in the pods cgroup.
    pub oom_kills: u64,
    /// Agent panics (any run's log).
    pub panics: u32,
    /// Agent starts that did not reach "agent running".
    pub failed_starts: u32,
    /// What each loss was, for the report.
    pub findings: Vec<String>,
}

impl Tally {
    pub fn clean(&self) -> bool {
        self.pods_lost == 0
            && self.double_evictions == 0
            && self.orphan_cgroups == 0
            && self.stale_memory_high == 0
            && self.oom_kills == 0
            && self.panics == 0
            && self.failed_starts == 0
    }

    /// The table `cargo xtask chaos` prints.
    pub fn table(&self, planned: u32) -> String {
        let mut out = String::from(
            "| cycles | pods lost | double evictions | orphan cgroups | stale memory.high | OOM kills | panics | failed starts |\n\
             |---|---|---|---|---|---|---|---|\n",
        );
        out.push_str(&format!(
            "| {}/{planned} | {} | {} | {} | {} | {} | {} | {} |\n",
            self.cycles,
            self.pods_lost,
            self.double_evictions,
            self.orphan_cgroups,
            self.stale_memory_high,
            self.oom_kills,
            self.panics,
            self.failed_starts
        ));
        for finding in &self.findings {
            out.push_str(&format!("  - {finding}\n"));
        }
        out
    }
}

/// A small deterministic generator (xorshift64*): the kill moments of a seed replay.
pub struct Moments(u64);

impl Moments {
    pub fn new(seed: u64) -> Moments {
        Moments(seed.max(1))
    }

    /// A value in `0..bound` (bound > 0).
    pub fn below(&mut self, bound: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % bound.max(1)
    }
}

/// The hard threshold every chaos node runs with.
pub const EVICTION: &str = "evictionHard: {allocatableMemory.available: 150Mi}";

/// A best-effort hog pod: `pause_ms` between 4 MiB steps, up to 700 MiB (past the 512 MiB
/// node), never restarted.
pub fn hog_pod(name: &str, pause_ms: u64) -> String {
    let hog = crate::helper_binary("hog").display().to_string();
    let pause = pause_ms.to_string();
    node::pod(
        name,
        "",
        &[&hog, "anon", "700", "4", &pause, "60"],
        "  restartPolicy: Never\n",
    )
}

/// How fast the kill cycles' hog grows, from how long the agent takes to start here.
/// The property under test is that nothing is lost when the agent dies and is restarted
/// at once, as a supervisor does; not that a dead agent beats the OOM killer. So the hog
/// needs three agent starts to go from the threshold to the node's limit (150 MiB): on
/// this host's start of about 0.3 s that is the 25 ms floor, about 160 MiB/s; under
/// emulation, where a start takes seconds, proportionally slower.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pace {
    pub start: Duration,
    /// Pause after each 4 MiB step.
    pub pause_ms: u64,
    /// The agent is killed at a random moment within this long of the hog's start: the
    /// pod start, the ramp to the threshold (362 MiB, about 90 steps), the crossing, and
    /// half a second more for the kill and the eviction being written down.
    pub kill_window_ms: u64,
}

impl Pace {
    /// How long a hog started now may take to end: the ramp to the threshold with the
    /// kill window's margin, and 15 s for the pod's start and its eviction; 30 s at least.
    pub fn ramp_deadline(&self) -> Duration {
        Duration::from_millis(self.kill_window_ms + 15_000).max(Duration::from_secs(30))
    }

    pub fn for_start(start: Duration) -> Pace {
        // 150 MiB in 3 starts: 37.5 steps of 4 MiB, a pause of start × 3 / 37.5 each.
        let pause_ms = (start.as_millis() as u64 * 8 / 100).clamp(25, 1000);
        Pace {
            start,
            pause_ms,
            kill_window_ms: 90 * pause_ms * 12 / 10 + 500,
        }
    }
}

/// Waits until the agent's run `run` logged that it runs (sources armed), or it exited.
pub fn wait_ready(node: &mut Node, timeout: Duration) -> bool {
    let run = node.runs;
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if node.log(run).contains("agent running") {
            return true;
        }
        if !node.agent_running() {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    false
}

/// The pods that must never be touched, with their container pids.
struct Stable {
    pids: BTreeMap<String, u32>,
}

impl Stable {
    fn start(node: &mut Node) -> Stable {
        node.manifest("guaranteed.yaml", &sleeper("guaranteed", GUARANTEED));
        node.manifest("burstable.yaml", &sleeper("burstable", BURSTABLE));
        let mut pids = BTreeMap::new();
        for name in ["guaranteed", "burstable"] {
            let record = node.wait_running(name);
            pids.insert(name.to_string(), record.containers[0].pid.expect("pid"));
        }
        Stable { pids }
    }

    /// Counts each stable pod that is no longer running its first process (killed,
    /// restarted, evicted), and takes its current process as the new baseline.
    fn check(&mut self, node: &Node, tally: &mut Tally, when: &str) {
        for (name, pid) in self.pids.iter_mut() {
            let record = node.record(name);
            let now = record
                .as_ref()
                .filter(|r| r.phase == Phase::Running)
                .and_then(|r| r.containers[0].pid);
            if now != Some(*pid) || !alive(*pid) {
                let what = format!("{when}: stable pod {name} lost its process {pid}: {record:?}");
                tally.pods_lost += 1;
                tally.findings.push(what);
                if let Some(new) = now {
                    *pid = new;
                }
            }
        }
    }

    fn uids(node: &Node) -> Vec<String> {
        node.records()
            .into_iter()
            .filter(|r| r.phase == Phase::Running)
            .map(|r| r.uid)
            .collect()
    }
}

/// Waits until the pod is terminal with its reason written down (the exit of a pod the
/// hot path killed may be handled a moment before its eviction is recorded), or only
/// terminal after a grace of 5 s more (a pod killed just before the agent died: the
/// restarted agent finds it gone, with no reason). False if it never ends within `within`.
fn pod_ended(node: &Node, name: &str, within: Duration) -> bool {
    let terminal = |with_reason: bool| {
        node.record(name).is_some_and(|r| {
            matches!(r.phase, Phase::Failed | Phase::Succeeded)
                && (r.reason.is_some() || !with_reason)
        })
    };
    if !poll(within, || terminal(false)) {
        return false;
    }
    poll(Duration::from_secs(5), || terminal(true));
    true
}

/// Where the current run's log is kept for a finding (the node's directory goes with it):
/// a copy in the temp directory.
fn log_tail(node: &Node) -> String {
    let keep = std::env::temp_dir().join(format!(
        "monitor-chaos-{}-run{}.log",
        std::process::id(),
        node.runs
    ));
    match std::fs::copy(node.log_path(node.runs), &keep) {
        Ok(_) => format!("agent log kept in {}", keep.display()),
        Err(e) => format!("agent log not kept: {e}"),
    }
}

/// Every memory hierarchy root (v1: each controller mount; v2: the one mount) holding the
/// node's cgroup root.
fn node_roots(node: &Node) -> Vec<PathBuf> {
    crate::cgroup_mounts()
        .into_iter()
        .map(|mount| mount.join(&node.cgroup_root))
        .filter(|dir| dir.exists())
        .collect()
}

/// Pod cgroups (`pod<uid>` directories) in every hierarchy whose uid is not in `keep`.
fn orphan_pod_dirs(node: &Node, keep: &[String]) -> Vec<String> {
    node_roots(node)
        .iter()
        .flat_map(|root| node::walk_dirs(root))
        .filter(|dir| {
            let name = dir.rsplit('/').next().unwrap_or("");
            name.strip_prefix("pod")
                .is_some_and(|uid| !keep.iter().any(|k| k == uid))
        })
        .collect()
}

/// memory.high values that throttle without the agent arming them: below `max` anywhere
/// but the pods cgroup, or on the pods cgroup at or below its usage (a stand-in is armed
/// above the usage; one below it is left from a run that died). `stopped`: the agent
/// was stopped cleanly, so nothing may remain at all, nor the marker of a replaced value.
fn stale_memory_high(node: &Node, stopped: bool) -> Vec<String> {
    let layout = monitor::observe::CgroupLayout::detect().expect("cgroup layout");
    if layout.version != CgroupVersion::V2 {
        return Vec::new();
    }
    let root = node.memory_root();
    let pods = root.join("kubepods");
    let mut stale = Vec::new();
    for dir in std::iter::once(root.display().to_string()).chain(node::walk_dirs(&root)) {
        let dir = PathBuf::from(dir);
        let Ok(high) = std::fs::read_to_string(dir.join("memory.high")) else {
            continue;
        };
        let high = high.trim();
        let marker = xattr::get(&dir, monitor::notify::memcg::HIGH_XATTR)
            .ok()
            .flatten()
            .is_some();
        if high == "max" && !(stopped && marker) {
            continue;
        }
        let usage: u64 = std::fs::read_to_string(dir.join("memory.current"))
            .ok()
            .and_then(|u| u.trim().parse().ok())
            .unwrap_or(0);
        let below_usage = high.parse::<u64>().is_ok_and(|h| h <= usage);
        if stopped || dir != pods || below_usage {
            stale.push(format!(
                "{}: memory.high {high} (usage {usage}, marker {marker})",
                dir.display()
            ));
        }
    }
    stale
}

/// Eviction events per pod in one run's JSON log.
pub fn eviction_events(text: &str) -> BTreeMap<String, u32> {
    read_log(text).0
}

/// Eviction events per pod in one run's JSON log, and that run's panics.
fn read_log(text: &str) -> (BTreeMap<String, u32>, u32) {
    let mut evictions = BTreeMap::new();
    let mut panics = 0;
    for line in text.lines() {
        if line.contains("panicked at") {
            panics += 1;
        }
        let Ok(value) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let fields = &value["fields"];
        if fields["reason"] == "Evicted"
            && let Some(object) = fields["object"].as_str()
        {
            *evictions.entry(object.to_string()).or_insert(0) += 1;
        }
    }
    (evictions, panics)
}

/// (a) SIGKILL the agent at a random moment of each pressure cycle, restart it at once,
/// and count what was lost.
pub fn kill_cycles(options: &Options) -> Tally {
    let mut tally = Tally::default();
    let mut moments = Moments::new(options.seed);
    let mut node = Node::new(EVICTION);
    node.json_logs = true;
    let started = Instant::now();
    node.start();
    if !wait_ready(&mut node, Duration::from_secs(30)) {
        panic!("the agent did not start:\n{}", node.log(node.runs));
    }
    let pace = Pace::for_start(started.elapsed());
    tally.findings.push(format!(
        "agent start {:?}: the hog pauses {} ms per 4 MiB step, the agent is killed within {} ms of its start",
        pace.start, pace.pause_ms, pace.kill_window_ms
    ));
    let mut stable = Stable::start(&mut node);
    let oom_before = node.pods_oom_kills();

    for cycle in 0..options.cycles {
        let name = format!("hog-{cycle}");
        let file = format!("{name}.yaml");
        node.manifest(&file, &hog_pod(&name, pace.pause_ms));
        let kill_after = Duration::from_millis(moments.below(pace.kill_window_ms));
        std::thread::sleep(kill_after);
        node.crash();
        node.start();
        if !wait_ready(&mut node, Duration::from_secs(30)) {
            let what = format!(
                "cycle {cycle}: the restarted agent did not start:\n{}",
                node.log(node.runs)
            );
            tally.failed_starts += 1;
            tally.findings.push(what);
            node.crash();
            node.start();
            if !wait_ready(&mut node, Duration::from_secs(30)) {
                break;
            }
        }
        // The hog ends evicted (or, had the agent failed, OOM-killed): never running on.
        // Killed before it saw the manifest, the restarted agent starts the hog only now,
        // and its ramp to the threshold alone takes most of the kill window (about 30 s
        // under emulation): the wait covers a whole ramp and the eviction after it.
        let ended = pod_ended(&node, &name, pace.ramp_deadline());
        let record = node.record(&name);
        if !ended {
            tally.pods_lost += 1;
            tally.findings.push(format!(
                "cycle {cycle} (killed after {kill_after:?}): {name} did not end: {record:?}"
            ));
        } else if let Some(r) = &record
            && r.reason.as_deref() != Some("Evicted")
        {
            // Killed by the hot path just before the crash: the restarted agent found it
            // gone. Not a loss, but worth seeing in the report.
            tally.findings.push(format!(
                "cycle {cycle} (killed after {kill_after:?}): note: {name} ended {:?} with reason {:?}",
                r.phase, r.reason
            ));
        }
        stable.check(&node, &mut tally, &format!("cycle {cycle}"));

        // Removing the manifest removes the pod and its cgroups.
        node.remove_manifest(&file);
        let keep = Stable::uids(&node);
        let gone = poll(Duration::from_secs(10), || {
            node.record(&name).is_none() && orphan_pod_dirs(&node, &keep).is_empty()
        });
        if !gone {
            let orphans = orphan_pod_dirs(&node, &keep);
            tally.orphan_cgroups += orphans.len() as u32;
            if node.record(&name).is_some() {
                // The manifest's removal was lost: the pod stays.
                tally.pods_lost += 1;
            }
            tally.findings.push(format!(
                "cycle {cycle} (killed after {kill_after:?}): {name} left record {:?}, cgroups {orphans:?}\n{}",
                node.record(&name).map(|r| r.phase),
                log_tail(&node)
            ));
        }
        for stale in stale_memory_high(&node, false) {
            tally.stale_memory_high += 1;
            tally.findings.push(format!(
                "cycle {cycle} (killed after {kill_after:?}): {stale}"
            ));
        }
        tally.cycles += 1;
    }

    // A clean stop puts every memory.high back and leaves only the stable pods' cgroups.
    node.stop();
    for stale in stale_memory_high(&node, true) {
        tally.stale_memory_high += 1;
        tally.findings.push(format!("after a clean stop: {stale}"));
    }
    stable.check(&node, &mut tally, "after a clean stop");
    tally.oom_kills = node.pods_oom_kills().saturating_sub(oom_before);
    // Each hog is evicted once at most (one the restarted agent found already killed by
    // the hot path is not evicted again), and nothing else ever.
    let mut evictions: BTreeMap<String, u32> = BTreeMap::new();
    for run in 1..=node.runs {
        for (object, n) in read_log(&node.log(run)).0 {
            *evictions.entry(object).or_insert(0) += n;
        }
    }
    for (object, n) in &evictions {
        let extra = if object.starts_with("demo/hog-") {
            n.saturating_sub(1)
        } else {
            *n
        };
        if extra > 0 {
            tally.double_evictions += extra;
            tally.findings.push(format!("{object} evicted {n} time(s)"));
        }
    }
    for run in 1..=node.runs {
        let panics = read_log(&node.log(run)).1;
        if panics > 0 {
            tally.panics += panics;
            tally
                .findings
                .push(format!("run {run} panicked:\n{}", node.log(run)));
        }
    }
    tally
}

#[cfg(test)]
mod tests;
