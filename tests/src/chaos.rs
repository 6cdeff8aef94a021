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
/// restarted agent finds it gone, with no reason). False if it never ends within 30 s.
fn pod_ended(node: &Node, name: &str) -> bool {
    let terminal = |with_reason: bool| {
        node.record(name).is_some_and(|r| {
            matches!(r.phase, Phase::Failed | Phase::Succeeded)
                && (r.reason.is_some() || !with_reason)
        })
    };
    if !poll(Duration::from_secs(30), || terminal(false)) {
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
        let ended = pod_ended(&node, &name);
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

/// One pressure race with an event source off: whether the hog was evicted before the
/// kernel's OOM killer fired.
#[derive(Clone, Debug)]
pub struct SourceRace {
    pub source: &'static str,
    pub evicted: bool,
    pub oom_kills: u64,
    pub panics: u32,
    pub detail: String,
}

/// The `monitor.sources` switches, one off per race (the others stay on).
pub const SOURCE_SWITCHES: &[(&str, &str)] = &[
    ("ebpf", "ebpf"),
    ("memcg thresholds", "memcgThresholds"),
    ("memory.events", "memoryEvents"),
    ("psi", "psi"),
];

/// (b) A full-speed hog on the bounded node with each event source off in turn.
pub fn source_races() -> Vec<SourceRace> {
    SOURCE_SWITCHES
        .iter()
        .map(|(source, key)| {
            let mut node =
                Node::with_agent_keys(EVICTION, &format!("  sources: {{{key}: false}}\n"));
            node.json_logs = true;
            node.start();
            assert!(
                wait_ready(&mut node, Duration::from_secs(30)),
                "the agent with {source} off did not start:\n{}",
                node.log(1)
            );
            node.manifest("guaranteed.yaml", &sleeper("guaranteed", GUARANTEED));
            node.wait_running("guaranteed");
            let oom_before = node.pods_oom_kills();
            node.manifest("batch.yaml", &hog_pod("batch", 0));
            let ended = pod_ended(&node, "batch");
            let record = node.record("batch");
            let evicted = ended
                && record
                    .as_ref()
                    .is_some_and(|r| r.reason.as_deref() == Some("Evicted"));
            let oom_kills = node.pods_oom_kills().saturating_sub(oom_before);
            node.stop();
            let log = node.log(1);
            SourceRace {
                source,
                evicted,
                oom_kills,
                panics: read_log(&log).1,
                detail: if evicted && oom_kills == 0 {
                    String::new()
                } else {
                    format!("record {record:?}\nlog:\n{log}")
                },
            }
        })
        .collect()
}

/// The sources table `cargo xtask chaos` prints.
pub fn sources_table(races: &[SourceRace]) -> String {
    let mut out = String::from(
        "| source off | evicted before the OOM killer | OOM kills | panics |\n|---|---|---|---|\n",
    );
    for race in races {
        out.push_str(&format!(
            "| {} | {} | {} | {} |\n",
            race.source,
            if race.evicted { "yes" } else { "NO" },
            race.oom_kills,
            race.panics
        ));
    }
    out
}

/// One piece of hostile input and what became of it.
#[derive(Clone, Debug)]
pub struct Replay {
    pub input: String,
    /// Refused with an error naming the file (and field), or answered with an error.
    pub refused: bool,
    pub detail: String,
}

impl Replay {
    /// One input's outcome; `what_happened` describes it when it was not refused.
    fn new(
        input: impl Into<String>,
        refused: bool,
        what_happened: impl FnOnce() -> String,
    ) -> Replay {
        Replay {
            input: input.into(),
            refused,
            detail: if refused {
                String::new()
            } else {
                what_happened()
            },
        }
    }
}

/// Hostile pod manifests: (file, text, what the refusal must name).
fn hostile_manifests(marker: &Path) -> Vec<(String, String, &'static str)> {
    let escape = marker.display().to_string();
    let sleep = |name: &str, meta: &str, spec: &str, container: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: demo\n{meta}spec:\n{spec}  containers:\n  - name: {container}\n    image: none\n    command: [\"/bin/sleep\", \"1000\"]\n"
        )
    };
    let huge_quantity = "    resources:\n      requests: {memory: 1e2147483645}\n";
    let mut out = vec![
        (
            "quantity-overflow.yaml".to_string(),
            format!("{}{huge_quantity}", sleep("overflow", "", "", "main")),
            "memory",
        ),
        (
            "name-escape.yaml".to_string(),
            sleep("../../../../tmp/escape", "", "", "main"),
            "name",
        ),
        (
            "namespace-escape.yaml".to_string(),
            sleep("ns", "", "", "main").replace("namespace: demo", "namespace: ../.."),
            "namespace",
        ),
        (
            "uid-escape.yaml".to_string(),
            sleep(
                "uid",
                &format!("  uid: \"../../../..{escape}\"\n"),
                "",
                "main",
            ),
            "uid",
        ),
        (
            "container-name.yaml".to_string(),
            sleep("container", "", "", "Bad_Name/.."),
            "name",
        ),
        (
            "not-yaml.yaml".to_string(),
            "\u{0}\u{1}{{{[[[: : :\n\t- - -".to_string(),
            "not-yaml.yaml",
        ),
        (
            "deep.yaml".to_string(),
            format!("{}{}", "[".repeat(10_000), "]".repeat(10_000)),
            "deep.yaml",
        ),
    ];
    // Two manifests with one uid: the second is refused.
    let uid = "11111111-2222-3333-4444-555555555555";
    out.push((
        "dup-a.yaml".to_string(),
        sleep("dup-a", &format!("  uid: {uid}\n"), "", "main"),
        "uid",
    ));
    out.push((
        "dup-b.yaml".to_string(),
        sleep("dup-b", &format!("  uid: {uid}\n"), "", "main"),
        "uid",
    ));
    out
}

/// Hostile configuration files for `monitor run`: (name, text, the key the error names).
fn hostile_configs() -> Vec<(&'static str, &'static str, &'static str)> {
    vec![
        (
            "quantity overflow",
            "evictionHard: {memory.available: 1e2147483645}\n",
            "evictionHard",
        ),
        ("cgroupRoot /", "monitor: {cgroupRoot: /}\n", "cgroupRoot"),
        (
            "empty cgroupRoot",
            "monitor: {cgroupRoot: \"\"}\n",
            "cgroupRoot",
        ),
        (
            "restartBackoff 0s",
            "monitor: {restartBackoff: 0s}\n",
            "restartBackoff",
        ),
        (
            "reserved cpu overflow",
            "systemReserved: {cpu: \"99999999999999999999\"}\n",
            "systemReserved",
        ),
        (
            "type error",
            "monitor: {podsMemoryLimit: [1, 2]}\n",
            "podsMemoryLimit",
        ),
    ]
}

/// (c) Replays hostile input at a running agent (manifests, a corrupt record, raw bytes
/// on the API socket) and at `monitor run` (configs). Returns what became of each, and
/// the losses it caused (the agent must run on, the stable pods untouched, nothing
/// written outside its directories).
pub fn hostile_replay() -> (Vec<Replay>, Tally) {
    let mut tally = Tally::default();
    let mut replays = Vec::new();
    let mut node = Node::new(EVICTION);
    node.json_logs = true;
    node.start();
    assert!(
        wait_ready(&mut node, Duration::from_secs(30)),
        "the agent did not start:\n{}",
        node.log(1)
    );
    let mut stable = Stable::start(&mut node);

    // A path a manifest tries to reach outside the agent's directories.
    let marker = std::env::temp_dir().join(format!("monitor-chaos-escape-{}", std::process::id()));
    let _ = std::fs::remove_file(&marker);
    let _ = std::fs::remove_file(marker.with_extension("json"));
    for (file, text, names) in hostile_manifests(&marker) {
        node.manifest(&file, &text);
        let refused = poll(Duration::from_secs(10), || {
            node.log(node.runs)
                .lines()
                .any(|l| l.contains(&file) && l.contains(names) && l.contains("WARN"))
        });
        let dup_first = file == "dup-a.yaml";
        // The first of two manifests sharing a uid is a valid pod.
        replays.push(Replay::new(
            format!("manifest {file}"),
            refused || dup_first,
            || format!("no warning naming {file} and {names:?}"),
        ));
    }
    // A pod asking for a grace period near i64::MAX seconds, stopped: the stop waits
    // (for ever, in effect) without overflowing a clock, and the agent runs on.
    let forever = sleeper("forever", "").replace(
        "spec:\n",
        "spec:\n  terminationGracePeriodSeconds: 9223372036854775807\n",
    );
    node.manifest("forever.yaml", &forever);
    let started = poll(Duration::from_secs(10), || {
        node.record("forever")
            .is_some_and(|r| r.phase == Phase::Running)
    });
    node.remove_manifest("forever.yaml");
    std::thread::sleep(Duration::from_millis(500));
    let survived =
        node.agent_running() && !crate::agent_metrics(&node.path("monitor.sock")).is_empty();
    replays.push(Replay::new(
        "manifest terminationGracePeriodSeconds i64::MAX, stopped",
        started && survived,
        || format!("started {started}, agent answering after the stop {survived}"),
    ));

    // A record that is not JSON, and one for a uid no manifest has, before a restart.
    let records = node.path("state").join("pods");
    std::fs::create_dir_all(&records).ok();
    std::fs::write(records.join("corrupt.json"), b"{\"uid\": \0\0 not json").unwrap();
    node.crash();
    node.start();
    let started = wait_ready(&mut node, Duration::from_secs(30));
    let quarantined = poll(Duration::from_secs(5), || {
        std::fs::read_dir(&records)
            .into_iter()
            .flatten()
            .flatten()
            .any(|e| e.file_name().to_string_lossy().contains(".corrupt"))
    });
    replays.push(Replay::new(
        "corrupt pod record",
        started && quarantined,
        || {
            format!(
                "started {started}, quarantined {quarantined}; records {:?}",
                std::fs::read_dir(&records)
                    .map(|d| d.flatten().map(|e| e.file_name()).collect::<Vec<_>>())
            )
        },
    ));

    // Raw bytes on the API socket, then a request that must still be answered.
    let socket = node.path("monitor.sock");
    for (what, bytes) in [
        ("garbage", b"\x00\xff\x13\x37 not http\r\n\r\n".to_vec()),
        (
            "huge header",
            format!(
                "GET /status HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
                "a".repeat(1 << 20)
            )
            .into_bytes(),
        ),
        (
            "path traversal",
            b"GET /../../etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
        ),
        (
            "unknown method",
            b"BREW /status HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
        ),
    ] {
        let answer = raw_request(&socket, &bytes);
        let still = !crate::agent_metrics(&socket).is_empty();
        // An answer, if any, is an error status, never a page or a crash.
        let ok_answer = answer.is_empty()
            || answer.starts_with("HTTP/1.1 4")
            || answer.starts_with("HTTP/1.0 4");
        replays.push(Replay::new(
            format!("API {what}"),
            still && ok_answer,
            || {
                format!(
                    "answer {:?}, agent answering afterwards: {still}",
                    answer.chars().take(200).collect::<String>()
                )
            },
        ));
    }

    if !node.agent_running() {
        tally.pods_lost += 1;
        tally.findings.push(format!(
            "the agent died under hostile input:\n{}",
            node.log(node.runs)
        ));
    }
    stable.check(&node, &mut tally, "hostile input");
    for path in [marker.clone(), marker.with_extension("json")] {
        if path.exists() {
            tally.pods_lost += 1;
            tally.findings.push(format!(
                "a manifest wrote outside the agent's directories: {}",
                path.display()
            ));
            let _ = std::fs::remove_file(&path);
        }
    }
    node.stop();
    for run in 1..=node.runs {
        tally.panics += read_log(&node.log(run)).1;
    }
    drop(node);

    // Configurations: refused with the key named, exit status 1, never a panic (101).
    let dir = tempfile::tempdir().expect("tempdir");
    for (what, text, key) in hostile_configs() {
        let path = dir.path().join("config.yaml");
        let config = format!(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n{text}"
        );
        std::fs::write(&path, config).unwrap();
        let output = std::process::Command::new(crate::helper_binary("monitor"))
            .args(["run", "--config"])
            .arg(&path)
            .env("NO_COLOR", "1")
            .stdin(std::process::Stdio::null())
            .output()
            .expect("monitor run");
        let stderr = String::from_utf8_lossy(&output.stderr);
        let code = output.status.code();
        if code == Some(101) || stderr.contains("panicked at") {
            tally.panics += 1;
        }
        let refused = code == Some(1) && stderr.contains(key) && stderr.contains("config.yaml");
        replays.push(Replay::new(format!("config {what}"), refused, || {
            format!("exit {code:?}, stderr: {stderr}")
        }));
    }
    (replays, tally)
}

/// Sends `bytes` on the unix socket and returns what came back within 2 s.
fn raw_request(socket: &Path, bytes: &[u8]) -> String {
    use std::io::{Read, Write};
    let Ok(mut stream) = std::os::unix::net::UnixStream::connect(socket) else {
        return String::new();
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let _ = stream.set_write_timeout(Some(Duration::from_secs(2)));
    let _ = stream.write_all(bytes);
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    String::from_utf8_lossy(&answer).into_owned()
}

/// The hostile-input table `cargo xtask chaos` prints.
pub fn replay_table(replays: &[Replay]) -> String {
    let mut out = String::from("| hostile input | refused, agent unharmed |\n|---|---|\n");
    for replay in replays {
        out.push_str(&format!(
            "| {} | {} |\n",
            replay.input,
            if replay.refused { "yes" } else { "NO" }
        ));
    }
    for replay in replays.iter().filter(|r| !r.refused) {
        out.push_str(&format!("  - {}: {}\n", replay.input, replay.detail));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moments_replay_from_their_seed_and_stay_below_the_bound() {
        let mut a = Moments::new(42);
        let mut b = Moments::new(42);
        let first: Vec<u64> = (0..100).map(|_| a.below(3000)).collect();
        let second: Vec<u64> = (0..100).map(|_| b.below(3000)).collect();
        assert_eq!(first, second);
        assert!(first.iter().all(|m| *m < 3000));
        // Spread over the window, not stuck in one corner of it.
        assert!(first.iter().any(|m| *m < 1000) && first.iter().any(|m| *m >= 2000));
    }

    #[rstest::rstest]
    #[case::fast_host(300, 25, 3200)]
    #[case::slow_start(2000, 160, 17780)]
    #[case::very_slow_start(30_000, 1000, 108_500)]
    fn the_hog_gives_a_restarted_agent_three_starts(
        #[case] start_ms: u64,
        #[case] pause_ms: u64,
        #[case] window_ms: u64,
    ) {
        let pace = Pace::for_start(Duration::from_millis(start_ms));
        assert_eq!((pace.pause_ms, pace.kill_window_ms), (pause_ms, window_ms));
    }

    #[test]
    fn evictions_and_panics_are_read_from_json_lines() {
        let log = concat!(
            "{\"level\":\"WARN\",\"fields\":{\"message\":\"x\",\"reason\":\"Evicted\",\"object\":\"demo/hog-1\"}}\n",
            "{\"level\":\"INFO\",\"fields\":{\"message\":\"y\",\"reason\":\"Killing\",\"object\":\"demo/hog-1\"}}\n",
            "{\"level\":\"WARN\",\"fields\":{\"message\":\"x\",\"reason\":\"Evicted\",\"object\":\"demo/hog-1\"}}\n",
            "thread 'main' panicked at src/x.rs:1:1:\n",
        );
        let (evictions, panics) = read_log(log);
        assert_eq!(evictions.get("demo/hog-1"), Some(&2));
        assert_eq!(evictions.len(), 1);
        assert_eq!(panics, 1);
    }

    #[test]
    fn a_clean_tally_has_zeros_and_any_loss_makes_it_unclean() {
        let mut tally = Tally {
            cycles: 50,
            ..Tally::default()
        };
        assert!(tally.clean());
        assert!(
            tally
                .table(50)
                .contains("| 50/50 | 0 | 0 | 0 | 0 | 0 | 0 | 0 |")
        );
        tally.orphan_cgroups = 1;
        assert!(!tally.clean());
    }
}
