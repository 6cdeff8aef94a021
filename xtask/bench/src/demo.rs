//! `cargo xtask demo`: the agent beats the kernel OOM killer on a bounded node.
//!
//! A node of 1 GiB (the pods cgroup's limit) runs three pods: a guaranteed service, a
//! burstable cache that grows slowly and a best-effort batch job that allocates as fast
//! as it can. A hard threshold allocatableMemory.available<200Mi must make the agent evict
//! the batch job before the pods cgroup reaches its limit. The demo prints a timeline
//! (crossing, wake and its source, kill, memory freed) and fails when the OOM killer fired
//! or the wrong pod died.
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, bail};

use crate::harness::{self, Bounds, HEADROOM_MIB as THRESHOLD_MIB, Level, MIB, Mode, NODE_MIB};
use crate::logparse;
use crate::memory;
use crate::util::{self, field, monotonic_ns};

/// The agent as deployed: every event source, the kubelet's default housekeeping.
const DEFAULTS: Mode = Mode::deployed("demo");

/// One run of the race (`run` numbers it); fails when the OOM killer fired or the wrong
/// pod died.
pub fn race(bin: &Path, run: u32, keep: bool) -> Result<()> {
    let id = format!("monitor-demo-{}-{run}", std::process::id());
    let (_guard, dir) =
        harness::start_agent(bin, &id, &DEFAULTS, "", keep, Level::Pods, Bounds::RACE)?;
    let hog = bin.join("hog").display().to_string();
    let go = dir.join("go");
    let wait_env = format!(
        "    env:\n    - {{name: HOG_START_FILE, value: \"{}\"}}\n",
        go.display()
    );
    let hog_args = |total: &str, step: &str, pause: &str| -> Vec<String> {
        [hog.as_str(), "anon", total, step, pause, "3600"]
            .map(String::from)
            .to_vec()
    };
    let manifests = [
        (
            "service",
            "    resources:\n      requests: {cpu: 100m, memory: 128Mi}\n      limits: {cpu: 100m, memory: 128Mi}\n",
            hog_args("96", "8", "0"),
            "",
        ),
        // 4 MiB every 100 ms: grows slowly, as a cache does.
        (
            "cache",
            "    resources:\n      requests: {memory: 64Mi}\n      limits: {memory: 600Mi}\n",
            hog_args("300", "4", "100"),
            wait_env.as_str(),
        ),
        // As fast as it can: past the node's limit in a fraction of a second.
        ("batch", "", hog_args("1500", "8", "0"), wait_env.as_str()),
    ];
    for (name, resources, command, env) in &manifests {
        let text = harness::manifest("demo", name, command, resources, env);
        std::fs::write(dir.join("pods").join(format!("{name}.yaml")), text)?;
    }
    let log_path = dir.join("agent.log");
    let state = dir.join("state");
    util::wait("three pods running", Duration::from_secs(30), || {
        let r = harness::records(&state);
        r.len() == 3 && r.iter().all(|r| r.phase == "Running" && !r.pids.is_empty())
    })?;
    let before: Vec<(String, Vec<u64>)> = harness::records(&state)
        .into_iter()
        .map(|r| (r.name, r.pids))
        .collect();

    let (pods_dir, v1) = harness::pods_cgroup(&id)?;
    let stop = Arc::new(AtomicBool::new(false));
    let samples = memory::sampler(pods_dir.clone(), v1, stop.clone());
    std::thread::sleep(Duration::from_millis(200));
    let start_ns = monotonic_ns();
    std::fs::write(&go, "")?;
    let outcome = util::wait("the batch pod to end", Duration::from_secs(30), || {
        harness::records(&state)
            .iter()
            .any(|r| r.name == "batch" && r.phase == "Failed")
    });
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    let samples = samples
        .join()
        .map_err(|_| anyhow::anyhow!("sampler panicked"))?;
    let oom_kills = memory::oom_kills(&pods_dir, v1);
    let after = harness::records(&state);
    outcome?;

    // Timeline.
    let threshold = (NODE_MIB - THRESHOLD_MIB) * MIB;
    let ms = |ns: u64| util::ms_after(start_ns, ns);
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
    let hot = logparse::hot_kill(&log_text, "demo/batch", start_ns);
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
        println!("  wake → SIGKILL {:.2} ms", util::ms_after(*at, k));
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
