//! What the agent costs: RSS and CPU at idle, and the synchronize duration against the
//! number of pods, with real cgroups and processes (the criterion bench in
//! monitor/benches/ measures the policy alone).
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use crate::harness::{self, Bounds, Level, Mode};
use crate::logparse;
use crate::stats::Spread;
use crate::util;

/// Every kernel source on, the default 10 s housekeeping: the agent as deployed.
const ALL_SOURCES: Mode = Mode::deployed("idle");

/// Only the timer, every second: with 1000 pods a synchronize takes a good fraction of
/// 100 ms, so a faster timer would measure a saturated agent.
const TIMER_ONLY: Mode = Mode {
    name: "sync",
    ebpf: false,
    memcg_thresholds: false,
    memory_events: false,
    psi: false,
    housekeeping: "1s",
    monitor_keys: "",
};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Idle {
    pub(crate) seconds: u64,
    pub(crate) pods: usize,
    /// CPU time of the agent process over the window / the window.
    pub(crate) cpu_percent: f64,
    pub(crate) cpu_ms: f64,
    /// Where the CPU time was read: the agent's own CPU accounting cgroup (to the
    /// nanosecond or microsecond), else /proc/PID/stat (to the clock tick, 10 ms).
    #[serde(default)]
    pub(crate) cpu_source: String,
    pub(crate) rss_kib: u64,
    pub(crate) rss_peak_kib: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct SyncScaling {
    /// Pods asked for.
    pub(crate) pods: usize,
    /// Pods running when the window opened (fewer when start-up hit its time limit).
    pub(crate) running: usize,
    pub(crate) synchronizes: usize,
    pub(crate) duration: Spread,
    /// Agent RSS with this many pods.
    pub(crate) rss_kib: u64,
}

fn sleep_binary() -> Result<String> {
    ["/bin/sleep", "/usr/bin/sleep"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .map(str::to_string)
        .context("no sleep binary in /bin or /usr/bin for the idle pods")
}

pub(crate) fn write_idle_pods(dir: &Path, count: usize, resources: &str) -> Result<()> {
    let sleep = sleep_binary()?;
    for i in 0..count {
        let path = dir.join("pods").join(format!("idle-{i}.yaml"));
        let text = harness::manifest(
            harness::NAMESPACE,
            &format!("idle-{i}"),
            &[sleep.clone(), "3600".into()],
            resources,
            "",
        );
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// Waits for `count` running pods, reading the records twice a second only: with a
/// thousand records a tighter loop would compete with the agent it measures.
pub(crate) fn wait_running(dir: &Path, count: usize, timeout: Duration) -> Result<usize> {
    let state = dir.join("state");
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let running = harness::records(&state)
            .iter()
            .filter(|r| r.phase == "Running")
            .count();
        if running >= count {
            return Ok(running);
        }
        if std::time::Instant::now() > deadline {
            bail!(
                "{running} of {count} pods running after {timeout:?} ({})",
                state.display()
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// (utime + stime in ms, VmRSS KiB, VmHWM KiB) of a process.
fn usage(pid: u32) -> Result<(f64, u64, u64)> {
    let stat_path = format!("/proc/{pid}/stat");
    let stat =
        std::fs::read_to_string(&stat_path).with_context(|| format!("reading {stat_path}"))?;
    // Fields after the parenthesised command: state is field 3, utime 14, stime 15.
    let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // SAFETY: sysconf takes a constant and returns a number.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let cpu_ms = (ticks(11).saturating_add(ticks(12))) as f64 / hz * 1000.0;
    let status_path = format!("/proc/{pid}/status");
    let status =
        std::fs::read_to_string(&status_path).with_context(|| format!("reading {status_path}"))?;
    let kib = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    Ok((cpu_ms, kib("VmRSS:"), kib("VmHWM:")))
}

/// The agent's CPU time, read from a CPU accounting cgroup of its own: every thread it
/// ever ran counts (tokio's blocking threads come and go), to the nanosecond (cgroup v1
/// `cpuacct.usage`) or microsecond (v2 `cpu.stat`). /proc/PID/stat counts clock ticks
/// (10 ms), a third of what an idle agent uses in a minute.
pub(crate) struct CpuMeter {
    dir: PathBuf,
    v2: bool,
}

impl CpuMeter {
    /// Moves `pid` (the whole process) into a new cgroup `name` of the hierarchy that
    /// accounts CPU time. `None` where there is none or it refuses.
    pub(crate) fn attach(name: &str, pid: u32) -> Option<CpuMeter> {
        // A v1 hierarchy with cpuacct has cpuacct.usage at its root; else cgroup v2.
        let (mounts, _, _) = util::cgroup_mounts();
        let v1 = mounts.iter().find(|m| m.join("cpuacct.usage").exists());
        let v2 = mounts
            .iter()
            .find(|m| m.join("cgroup.controllers").exists());
        let (root, v2) = match (v1, v2) {
            (Some(root), _) => (root, false),
            (None, Some(root)) => (root, true),
            (None, None) => return None,
        };
        let dir = root.join(name);
        std::fs::create_dir(&dir).ok()?;
        let meter = CpuMeter { dir, v2 };
        std::fs::write(meter.dir.join("cgroup.procs"), pid.to_string()).ok()?;
        Some(meter)
    }

    /// Moves every process but `keep` out of the meter's cgroup, to its hierarchy's root:
    /// where the CPU accounting hierarchy is not one the agent puts its pods in (a v1
    /// cpuacct mounted on its own), the pods it starts stay in its cgroup there, and
    /// their CPU would count as the agent's. Returns how many it moved.
    pub(crate) fn move_out_all_but(&self, keep: u32) -> usize {
        let Some(root) = self.dir.parent() else {
            return 0;
        };
        let procs = std::fs::read_to_string(self.dir.join("cgroup.procs")).unwrap_or_default();
        procs
            .split_whitespace()
            .filter(|pid| *pid != keep.to_string())
            .filter(|pid| std::fs::write(root.join("cgroup.procs"), pid).is_ok())
            .count()
    }

    /// CPU time used in the cgroup so far, in ms.
    pub(crate) fn used_ms(&self) -> Option<f64> {
        if self.v2 {
            let text = std::fs::read_to_string(self.dir.join("cpu.stat")).ok()?;
            let usec: u64 = text
                .lines()
                .find_map(|l| l.strip_prefix("usage_usec "))?
                .trim()
                .parse()
                .ok()?;
            Some(usec as f64 / 1e3)
        } else {
            let text = std::fs::read_to_string(self.dir.join("cpuacct.usage")).ok()?;
            Some(text.trim().parse::<u64>().ok()? as f64 / 1e6)
        }
    }
}

impl Drop for CpuMeter {
    /// Normally the agent has exited by now. If it still runs (an early error), it goes
    /// back to the root cgroup first, so the directory can go.
    fn drop(&mut self) {
        if let Ok(procs) = std::fs::read_to_string(self.dir.join("cgroup.procs"))
            && let Some(root) = self.dir.parent()
        {
            for pid in procs.split_whitespace() {
                let _ = std::fs::write(root.join("cgroup.procs"), pid);
            }
        }
        for _ in 0..50 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        println!("bench: could not remove {}", self.dir.display());
    }
}

/// The agent with every source on and `pods` sleeping pods, left alone for `seconds`.
pub(crate) fn idle(bin: &Path, seconds: u64, pods: usize, keep: bool) -> Result<Idle> {
    let id = format!("monitor-bench-{}-idle", std::process::id());
    let (guard, dir) =
        harness::start_agent(bin, &id, &ALL_SOURCES, "", keep, Level::Pods, Bounds::RACE)?;
    let pid = guard
        .agent
        .as_ref()
        .map(|a| a.id())
        .context("the agent is not running")?;
    let meter = CpuMeter::attach(&format!("{id}-agent"), pid);
    write_idle_pods(&dir, pods, "")?;
    wait_running(&dir, pods, Duration::from_secs(60))?;
    // Let pod start-up settle before the window opens.
    std::thread::sleep(Duration::from_secs(3));
    let cpu = |meter: &Option<CpuMeter>| -> Result<(f64, &'static str)> {
        match meter.as_ref().and_then(CpuMeter::used_ms) {
            Some(ms) => Ok((ms, "cgroup")),
            None => Ok((usage(pid)?.0, "/proc/PID/stat")),
        }
    };
    let (cpu0, _) = cpu(&meter)?;
    std::thread::sleep(Duration::from_secs(seconds));
    let (cpu1, cpu_source) = cpu(&meter)?;
    let (_, rss, hwm) = usage(pid)?;
    // The agent stops first, so its cgroup is empty when the meter removes it.
    drop(guard);
    drop(meter);
    let cpu_ms = cpu1 - cpu0;
    Ok(Idle {
        seconds,
        pods,
        cpu_percent: cpu_ms / (seconds.max(1) as f64 * 1000.0) * 100.0,
        cpu_ms,
        cpu_source: cpu_source.to_string(),
        rss_kib: rss,
        rss_peak_kib: hwm,
    })
}

/// Synchronize durations with `pods` running pods, over `window`.
pub(crate) fn sync_scaling(
    bin: &Path,
    pods: usize,
    window: Duration,
    start_limit: Duration,
    keep: bool,
) -> Result<SyncScaling> {
    let id = format!("monitor-bench-{}-sync-{pods}", std::process::id());
    // maxPods above the count: admission must not refuse any of them.
    let extra = format!("maxPods: {}\n", pods.saturating_add(10));
    let (guard, dir) = harness::start_agent(
        bin,
        &id,
        &TIMER_ONLY,
        &extra,
        keep,
        Level::Pods,
        Bounds::RACE,
    )?;
    write_idle_pods(&dir, pods, "")?;
    // Measured with however many run by then: the count is reported next to the result.
    let running = match wait_running(&dir, pods, start_limit) {
        Ok(running) => running,
        Err(err) => {
            println!("bench: {err:#}; measuring with those");
            harness::records(&dir.join("state"))
                .iter()
                .filter(|r| r.phase == "Running")
                .count()
        }
    };
    std::thread::sleep(Duration::from_secs(1));
    let from = util::monotonic_ns();
    std::thread::sleep(window);
    let pid = guard
        .agent
        .as_ref()
        .map(|a| a.id())
        .context("the agent is not running")?;
    let (_, rss, _) = usage(pid)?;
    let log_path = dir.join("agent.log");
    let log = std::fs::read_to_string(&log_path)
        .with_context(|| format!("reading {}", log_path.display()))?;
    drop(guard);
    let durations: Vec<f64> = logparse::syncs(&log)
        .iter()
        .filter(|s| s.started_ns >= from)
        .filter_map(|s| s.duration_ns)
        .map(|d| d as f64 / 1e6)
        .collect();
    Ok(SyncScaling {
        pods,
        running,
        synchronizes: durations.len(),
        duration: Spread::of(&durations),
        rss_kib: rss,
    })
}

/// One line of criterion's report: `synchronize/110  time:  [72.6 µs 75.8 µs 79.3 µs]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct PolicyBench {
    pub(crate) pods: usize,
    /// Criterion's estimate and its confidence interval, in microseconds.
    pub(crate) low_us: f64,
    pub(crate) estimate_us: f64,
    pub(crate) high_us: f64,
}

/// Runs the criterion benchmark of the policy (monitor/benches/policy.rs) and reads its
/// estimates from the output.
pub(crate) fn policy_bench(root: &Path) -> Result<Vec<PolicyBench>> {
    let out = util::cargo()
        .current_dir(root)
        .args([
            "bench",
            "-p",
            "monitor",
            "--bench",
            "policy",
            "--",
            "--warm-up-time",
            "1",
            "--measurement-time",
            "3",
        ])
        .output()
        .context("running cargo bench -p monitor --bench policy")?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!(
            "cargo bench -p monitor --bench policy failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .rev()
                .take(10)
                .collect::<Vec<_>>()
                .join(" | ")
        );
    }
    Ok(parse_criterion(&text))
}

fn parse_criterion(text: &str) -> Vec<PolicyBench> {
    let micros = |value: &str, unit: &str| -> Option<f64> {
        let v: f64 = value.parse().ok()?;
        Some(match unit {
            "ns" => v / 1000.0,
            "µs" | "us" => v,
            "ms" => v * 1000.0,
            "s" => v * 1e6,
            _ => return None,
        })
    };
    text.lines()
        .filter_map(|line| {
            let rest = line.trim().strip_prefix("synchronize/")?;
            let (pods, rest) = rest.split_once(char::is_whitespace)?;
            let inside = rest.split_once('[')?.1.split_once(']')?.0;
            let words: Vec<&str> = inside.split_whitespace().collect();
            let [a, au, b, bu, c, cu] = words.as_slice() else {
                return None;
            };
            Some(PolicyBench {
                pods: pods.parse().ok()?,
                low_us: micros(a, au)?,
                estimate_us: micros(b, bu)?,
                high_us: micros(c, cu)?,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case::micro("synchronize/110         time:   [72.597 µs 75.846 µs 79.262 µs]", Some((110, 75.846)))]
    #[case::nano("synchronize/10          time:   [900.00 ns 950.50 ns 1.0100 µs]", Some((10, 0.9505)))]
    #[case::milli("synchronize/1000        time:   [1.5 ms 2.0 ms 2.5 ms]", Some((1000, 2000.0)))]
    #[case::change_line(
        "                        change: [-1.0% +0.5% +2.0%] (p = 0.50 > 0.05)",
        None
    )]
    #[case::progress("Benchmarking synchronize/1000: Analyzing", None)]
    fn criterion_lines(#[case] line: &str, #[case] expected: Option<(usize, f64)>) {
        let parsed = parse_criterion(line);
        assert_eq!(
            parsed.first().map(|p| (p.pods, p.estimate_us)),
            expected,
            "{line}"
        );
        assert!(parsed.len() <= 1);
    }
}
