//! `cargo xtask demo`: the agent beats the kernel OOM killer on a bounded node.
//!
//! A node of 1 GiB (the pods cgroup's limit) runs three pods: a guaranteed service, a
//! burstable cache that grows slowly and a best-effort batch job that allocates as fast
//! as it can. A hard threshold allocatableMemory.available<200Mi must make the agent evict
//! the batch job before the pods cgroup reaches its limit. The demo prints a timeline
//! (crossing, wake and its source, kill, memory freed) and fails when the OOM killer fired
//! or the wrong pod died.
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::cmd::workspace_root;

const MIB: u64 = 1 << 20;
const NODE_MIB: u64 = 1024;
const THRESHOLD_MIB: u64 = 200;

#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// How many times to run the race; every run must pass.
    #[arg(long, default_value_t = 1)]
    pub runs: u32,
    /// Keep the run's directory (config, manifests, agent log) for a look afterwards.
    #[arg(long)]
    pub keep: bool,
    /// Where the pods run: `process` (host processes, the default) or `cri` (a private
    /// containerd: a disk race relieved by container and image GC, then a memory race).
    #[arg(long, value_enum, default_value_t = Runtime::Process)]
    pub runtime: Runtime,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Runtime {
    Process,
    Cri,
}

pub fn run(args: DemoArgs) -> Result<()> {
    crate::setup::ensure()?;
    let root = workspace_root();
    let bin = crate::cmd::build_release_bins(&root)?;
    if args.runtime == Runtime::Cri {
        return cri(&bin, args.runs, args.keep);
    }
    let mut failures = 0;
    for run in 1..=args.runs {
        println!("\n=== demo run {run}/{} ===", args.runs);
        match race(&bin, run, args.keep) {
            Ok(()) => println!("run {run}: PASS"),
            Err(err) => {
                failures += 1;
                println!("run {run}: FAIL: {err:#}");
            }
        }
    }
    println!(
        "\ndemo: {} of {} runs passed",
        args.runs - failures,
        args.runs
    );
    if failures > 0 {
        bail!("{failures} demo run(s) failed");
    }
    Ok(())
}

/// The containerd races: the `cri-demo` helper (tests/src/bin/cri-demo.rs) brings up a
/// private containerd per race and runs the agent against it.
fn cri(bin: &Path, runs: u32, keep: bool) -> Result<()> {
    let mut failures = 0;
    for run in 1..=runs {
        println!("\n=== demo run {run}/{runs} (runtime cri) ===");
        let mut command = Command::new(bin.join("cri-demo"));
        command.arg(bin.join("monitor"));
        if keep {
            command.arg("--keep");
        }
        if let Err(err) = crate::cmd::run(&mut command) {
            failures += 1;
            println!("run {run}: FAIL: {err:#}");
        }
    }
    println!("\ndemo: {} of {runs} runs passed", runs - failures);
    if failures > 0 {
        bail!("{failures} demo run(s) failed");
    }
    Ok(())
}

pub(crate) fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The cgroup mounts and which one holds the memory controller.
pub(crate) fn cgroup_mounts() -> (Vec<PathBuf>, Option<PathBuf>, bool) {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut mounts = Vec::new();
    let mut v1_memory = None;
    let mut v2 = None;
    for line in text.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let Some(mount) = left.split_whitespace().nth(4) else {
            continue;
        };
        let mut r = right.split_whitespace();
        let (fstype, options) = (r.next().unwrap_or(""), r.nth(1).unwrap_or(""));
        match fstype {
            "cgroup" => {
                if options.split(',').any(|o| o == "memory") {
                    v1_memory = Some(PathBuf::from(mount));
                }
                mounts.push(PathBuf::from(mount));
            }
            "cgroup2" => {
                v2 = Some(PathBuf::from(mount));
                mounts.push(PathBuf::from(mount));
            }
            _ => {}
        }
    }
    match v1_memory {
        Some(memory) => (mounts, Some(memory), true),
        None => (mounts, v2, false),
    }
}

/// Kills everything under `<mount>/<root>` in every hierarchy and removes the cgroups.
pub(crate) fn remove_cgroup_root(root: &str) {
    fn remove(dir: &Path) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            if entry.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                remove(&entry.path());
            }
        }
        for _ in 0..100 {
            let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
            let pids: Vec<i32> = procs
                .lines()
                .filter_map(|l| l.trim().parse().ok())
                .collect();
            if pids.is_empty() {
                break;
            }
            for pid in pids {
                // SAFETY: kill takes plain integers; these pids live in the demo's own cgroups.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = std::fs::remove_dir(dir);
    }
    for mount in cgroup_mounts().0 {
        let dir = mount.join(root);
        if dir.exists() {
            remove(&dir);
        }
    }
}

pub(crate) struct Sample {
    pub(crate) at_ns: u64,
    pub(crate) working_set: u64,
    /// The usage alone (the page counter: memory.usage_in_bytes, memory.current), read
    /// first and stamped at `usage_at_ns`: what the kernel's OOM decision looks at, with
    /// no statistics flush in the way.
    pub(crate) usage: u64,
    pub(crate) usage_at_ns: u64,
}

/// A cgroup's usage now (memory.usage_in_bytes, memory.current).
pub(crate) fn usage(dir: &Path, v1: bool) -> u64 {
    let file = if v1 {
        "memory.usage_in_bytes"
    } else {
        "memory.current"
    };
    std::fs::read_to_string(dir.join(file))
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(0)
}

/// The working set of a cgroup now: usage − inactive_file, as the kubelet computes it.
pub(crate) fn working_set(dir: &Path, v1: bool) -> u64 {
    let (usage_file, inactive_key) = if v1 {
        ("memory.usage_in_bytes", "total_inactive_file ")
    } else {
        ("memory.current", "inactive_file ")
    };
    let usage: u64 = std::fs::read_to_string(dir.join(usage_file))
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(0);
    let inactive: u64 = std::fs::read_to_string(dir.join("memory.stat"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix(inactive_key)
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0);
    usage.saturating_sub(inactive)
}

/// Samples the pods cgroup's working set every millisecond (usage − inactive_file).
pub(crate) fn sampler(
    dir: PathBuf,
    v1: bool,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<Vec<Sample>> {
    std::thread::spawn(move || {
        let mut samples = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            let usage = usage(&dir, v1);
            let usage_at_ns = monotonic_ns();
            let working_set = working_set(&dir, v1);
            samples.push(Sample {
                at_ns: monotonic_ns(),
                working_set,
                usage,
                usage_at_ns,
            });
            std::thread::sleep(Duration::from_millis(1));
        }
        samples
    })
}

/// A pod record from the agent's state directory.
pub(crate) struct Record {
    pub(crate) name: String,
    pub(crate) phase: String,
    pub(crate) reason: String,
    pub(crate) pids: Vec<u64>,
}

pub(crate) fn records(state: &Path) -> Vec<Record> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(state.join("pods"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let Ok(text) = std::fs::read_to_string(entry.path()) else {
            continue;
        };
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) else {
            continue;
        };
        out.push(Record {
            name: v["pod"]["metadata"]["name"]
                .as_str()
                .unwrap_or("")
                .to_string(),
            phase: v["phase"].as_str().unwrap_or("").to_string(),
            reason: v["reason"].as_str().unwrap_or("").to_string(),
            pids: v["containers"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|c| c["pid"].as_u64())
                .collect(),
        });
    }
    out
}

pub(crate) fn wait(what: &str, timeout: Duration, mut check: impl FnMut() -> bool) -> Result<()> {
    let deadline = Instant::now() + timeout;
    while !check() {
        if Instant::now() > deadline {
            bail!("timed out after {timeout:?} waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

pub(crate) fn pod(name: &str, resources: &str, command: &[String], env: &str) -> String {
    let command: Vec<String> = command.iter().map(|c| format!("\"{c}\"")).collect();
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: demo}}\nspec:\n  containers:\n  - name: main\n    image: none\n    command: [{}]\n{env}{resources}",
        command.join(", ")
    )
}

/// A field `key=value` of a tracing log line.
pub(crate) fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let start = line.find(&format!(" {key}="))? + key.len() + 2;
    line[start..]
        .split_whitespace()
        .next()
        .map(|v| v.trim_matches('"'))
}

pub(crate) struct Guard {
    pub(crate) agent: Option<Child>,
    pub(crate) cgroup_root: String,
    pub(crate) dir: PathBuf,
    pub(crate) keep: bool,
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(mut agent) = self.agent.take() {
            // SAFETY: plain kill of the agent process we started.
            unsafe { libc::kill(agent.id() as i32, libc::SIGTERM) };
            let _ = agent.wait();
        }
        remove_cgroup_root(&self.cgroup_root);
        if !self.keep {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

fn race(bin: &Path, run: u32, keep: bool) -> Result<()> {
    let id = format!("monitor-demo-{}-{run}", std::process::id());
    let dir = std::env::temp_dir().join(&id);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("pods"))?;
    let mut guard = Guard {
        agent: None,
        cgroup_root: id.clone(),
        dir: dir.clone(),
        keep,
    };
    let config = format!(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nstaticPodPath: {pods}\n\
         evictionHard: {{allocatableMemory.available: {THRESHOLD_MIB}Mi, memory.available: 100Mi}}\n\
         monitor:\n  podsMemoryLimit: {NODE_MIB}Mi\n  cgroupRoot: {id}\n  stateDir: {state}\n  podLogDir: {logs}\n  socket: {sock}\n",
        pods = dir.join("pods").display(),
        state = dir.join("state").display(),
        logs = dir.join("logs").display(),
        sock = dir.join("monitor.sock").display(),
    );
    std::fs::write(dir.join("config.yaml"), config)?;
    let hog = bin.join("hog").display().to_string();
    let go = dir.join("go");
    let wait_env = format!(
        "    env:\n    - {{name: HOG_START_FILE, value: \"{}\"}}\n",
        go.display()
    );
    let manifests = [
        (
            "service",
            pod(
                "service",
                "    resources:\n      requests: {cpu: 100m, memory: 128Mi}\n      limits: {cpu: 100m, memory: 128Mi}\n",
                &[
                    hog.clone(),
                    "anon".into(),
                    "96".into(),
                    "8".into(),
                    "0".into(),
                    "3600".into(),
                ],
                "",
            ),
        ),
        (
            "cache",
            pod(
                "cache",
                "    resources:\n      requests: {memory: 64Mi}\n      limits: {memory: 600Mi}\n",
                // 4 MiB every 100 ms: grows slowly, as a cache does.
                &[
                    hog.clone(),
                    "anon".into(),
                    "300".into(),
                    "4".into(),
                    "100".into(),
                    "3600".into(),
                ],
                &wait_env,
            ),
        ),
        (
            "batch",
            pod(
                "batch",
                "",
                // As fast as it can: past the node's limit in a fraction of a second.
                &[
                    hog.clone(),
                    "anon".into(),
                    "1500".into(),
                    "8".into(),
                    "0".into(),
                    "3600".into(),
                ],
                &wait_env,
            ),
        ),
    ];
    for (name, text) in &manifests {
        std::fs::write(dir.join("pods").join(format!("{name}.yaml")), text)?;
    }
    let log_path = dir.join("agent.log");
    let log = std::fs::File::create(&log_path)?;
    guard.agent = Some(
        Command::new(bin.join("monitor"))
            .args(["run", "--config"])
            .arg(dir.join("config.yaml"))
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting monitor run")?,
    );
    let state = dir.join("state");
    wait("three pods running", Duration::from_secs(30), || {
        let r = records(&state);
        r.len() == 3 && r.iter().all(|r| r.phase == "Running" && !r.pids.is_empty())
    })?;
    let before: Vec<(String, Vec<u64>)> = records(&state)
        .into_iter()
        .map(|r| (r.name, r.pids))
        .collect();

    let (_, memory_root, v1) = cgroup_mounts();
    let pods_dir = memory_root
        .context("no memory hierarchy")?
        .join(&id)
        .join("kubepods");
    let stop = Arc::new(AtomicBool::new(false));
    let samples = sampler(pods_dir.clone(), v1, stop.clone());
    std::thread::sleep(Duration::from_millis(200));
    let start_ns = monotonic_ns();
    std::fs::write(&go, "")?;
    let outcome = wait("the batch pod to end", Duration::from_secs(30), || {
        records(&state)
            .iter()
            .any(|r| r.name == "batch" && r.phase == "Failed")
    });
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    let samples = samples
        .join()
        .map_err(|_| anyhow::anyhow!("sampler panicked"))?;
    let oom_kills = oom_kills(&pods_dir, v1);
    let after = records(&state);
    outcome?;

    // Timeline.
    let threshold = (NODE_MIB - THRESHOLD_MIB) * MIB;
    let ms = |ns: u64| ns.saturating_sub(start_ns) as f64 / 1e6;
    let crossing = samples
        .iter()
        .find(|s| s.at_ns >= start_ns && s.working_set >= threshold)
        .map(|s| s.at_ns);
    let peak = samples.iter().map(|s| s.working_set).max().unwrap_or(0);
    let log_text = std::fs::read_to_string(&log_path).unwrap_or_default();
    let event = |reason: &str| {
        log_text.lines().find_map(|l| {
            let at: u64 = field(l, "at_ns")?.parse().ok()?;
            (field(l, "reason") == Some(reason) && l.contains("demo/batch") && at >= start_ns)
                .then_some(at)
        })
    };
    // The wake that led to the eviction: the last kernel wake before the kill (earlier
    // ones, e.g. reclaim elsewhere on the node, led to synchronizes that found nothing).
    // The hot path kills before any synchronize and stamps both ends itself.
    let hot = crate::bench::logparse::hot_kill(&log_text, "demo/batch", start_ns);
    let before_kill = hot
        .as_ref()
        .map(|h| h.killed_ns)
        .or_else(|| event("Killing"))
        .unwrap_or(u64::MAX);
    let synchronized_wake = log_text.lines().rev().find_map(|l| {
        let at: u64 = field(l, "at_ns")?.parse().ok()?;
        let source = field(l, "source")?;
        (l.contains(" wake")
            && at >= start_ns
            && at <= before_kill
            && !matches!(source, "timer" | "request"))
        .then(|| (at, source.to_string()))
    });
    let wake = match &hot {
        Some(h) => Some((h.detected_ns, format!("{} (hot path)", h.source))),
        None => synchronized_wake,
    };
    let (killing, evicted) = (
        hot.as_ref()
            .map(|h| h.killed_ns)
            .or_else(|| event("Killing")),
        event("Evicted"),
    );
    let freed = killing.and_then(|k| {
        samples
            .iter()
            .find(|s| s.at_ns > k && s.working_set < threshold)
    });
    println!(
        "timeline (ms after the batch job started allocating; pods cgroup limit {NODE_MIB} MiB, threshold at {} MiB used):",
        NODE_MIB - THRESHOLD_MIB
    );
    let mut timeline: Vec<(u64, String)> = Vec::new();
    if let Some(c) = crossing {
        timeline.push((c, "working set crossed the threshold (1 ms sampler)".into()));
    }
    if let Some((at, source)) = &wake {
        timeline.push((*at, format!("agent woken by {source}")));
    }
    if let Some(k) = killing {
        timeline.push((
            k,
            if hot.is_some() {
                "demo/batch killed: cgroup.kill written by the hot path".into()
            } else {
                "SIGKILL sent to demo/batch (hard threshold: no grace)".into()
            },
        ));
    }
    if let Some(f) = freed {
        timeline.push((
            f.at_ns,
            format!(
                "working set back under the threshold: {} MiB",
                f.working_set / MIB
            ),
        ));
    }
    if let Some(e) = evicted {
        timeline.push((e, "demo/batch gone, its cgroups removed".into()));
    }
    timeline.sort_by_key(|(at, _)| *at);
    for (at, what) in &timeline {
        println!("  {:>8.1}  {what}", ms(*at));
    }
    println!(
        "  peak working set {} MiB of {NODE_MIB} MiB; kernel OOM kills in the pods cgroup: {oom_kills}",
        peak / MIB
    );
    if let (Some(c), Some((at, _))) = (crossing, &wake) {
        // The sampler reads every millisecond: a wake up to 1 ms "before" the sampled
        // crossing is the sampler's lag, not a premature wake.
        println!(
            "  crossing → wake {:+.2} ms (sampler resolution 1 ms)",
            (*at as f64 - c as f64) / 1e6
        );
    }
    if let (Some((at, _)), Some(k)) = (&wake, killing) {
        println!(
            "  wake → SIGKILL {:.2} ms",
            k.saturating_sub(*at) as f64 / 1e6
        );
    }

    // Verdict.
    if oom_kills > 0 {
        bail!("the kernel OOM killer fired ({oom_kills} kill(s))");
    }
    let batch = after
        .iter()
        .find(|r| r.name == "batch")
        .context("batch record")?;
    if batch.reason != "Evicted" {
        bail!(
            "batch ended as {} ({}), not evicted",
            batch.phase,
            batch.reason
        );
    }
    for name in ["service", "cache"] {
        let now = after
            .iter()
            .find(|r| r.name == name)
            .with_context(|| format!("{name} record"))?;
        let was = before
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, p)| p.clone())
            .unwrap_or_default();
        if now.phase != "Running" || now.pids != was {
            bail!(
                "the wrong pod died: {name} is {} (pids {:?} → {:?})",
                now.phase,
                was,
                now.pids
            );
        }
    }
    Ok(())
}

pub(crate) fn oom_kills(pods_dir: &Path, v1: bool) -> u64 {
    let file = if v1 {
        "memory.oom_control"
    } else {
        "memory.events"
    };
    std::fs::File::open(pods_dir.join(file))
        .map(|f| {
            std::io::BufReader::new(f)
                .lines()
                .map_while(Result::ok)
                .find_map(|l| {
                    l.strip_prefix("oom_kill ")
                        .and_then(|v| v.trim().parse().ok())
                })
                .unwrap_or(0)
        })
        .unwrap_or(0)
}
