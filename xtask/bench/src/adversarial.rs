//! The agent under adversarial load: its CPU time (read from a CPU accounting cgroup of
//! its own) over a window beside a workload that does nothing wrong but pokes at its
//! kernel notifiers, on the race's bounded node (a 1 GiB pods cgroup,
//! `allocatableMemory.available<200Mi` hard, every source on):
//!
//! - **idle**: nothing runs; the reference.
//! - **(a) flapping**: a pod moves the pods cgroup's usage across the hard threshold's
//!   early level and back every 20 ms, never reaching the level itself.
//! - **(b) reclaim outside**: a service in a cgroup of its own, outside the pods, re-reads
//!   a file twice its 32 MiB limit: it reclaims at its limit all the time.
//! - **(c) page cache churn**: inside the pods, one pod limited to 48 MiB re-reads a
//!   96 MiB file (reclaiming at its own limit) while a ballast holds the pods 80 MiB below
//!   the threshold.
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::costs::CpuMeter;
use crate::harness::{self, Bounds, HEADROOM_MIB, Level, Mode, NODE_MIB};
use crate::memory;
use crate::util;

const MIB: u64 = 1 << 20;

/// The agent as deployed: every source on, the default housekeeping.
const ALL_SOURCES: Mode = Mode::deployed("adversarial");

/// The target every row is held to: 2 % of one core.
pub(crate) const TARGET_PERCENT: f64 = 2.0;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Row {
    pub(crate) row: String,
    pub(crate) workload: String,
    pub(crate) seconds: u64,
    /// The agent's CPU time over the window, and as a share of one core.
    pub(crate) cpu_ms: f64,
    pub(crate) cpu_percent: f64,
    /// The hot path's watches' share of it (`monitor_hot_watch_cpu_seconds_total`).
    pub(crate) watch_cpu_ms: f64,
    pub(crate) synchronizes: u64,
    pub(crate) evictions: u64,
    /// Times the workload's cgroups hit their memory limit during the window (v1
    /// `memory.failcnt`, v2 `max` of `memory.events`): the proof that (b) and (c) reclaim.
    #[serde(default)]
    pub(crate) limit_hits: u64,
}

/// Every row, each on an agent of its own; a failed row is reported, not dropped.
pub(crate) fn run(bin: &Path, seconds: u64, keep: bool) -> Vec<Row> {
    let rows: [(&str, &str, Workload); 4] = [
        ("idle", "nothing", Workload::Idle),
        (
            "(a) flapping",
            "pods usage across the early level and back every 20 ms",
            Workload::Flapping,
        ),
        (
            "(b) reclaim outside",
            "a 32 MiB service outside the pods re-reading a 64 MiB file",
            Workload::ReclaimOutside,
        ),
        (
            "(c) page cache churn",
            "a 48 MiB pod re-reading a 96 MiB file, pods 80 MiB under the threshold",
            Workload::PageCacheChurn,
        ),
    ];
    let mut out = Vec::new();
    for (n, (row, workload, kind)) in rows.into_iter().enumerate() {
        println!("bench: agent under adversarial load, {row}: {workload} ({seconds} s)");
        match measure(bin, n, kind, seconds, keep) {
            Ok(m) => out.push(Row {
                row: row.to_string(),
                workload: workload.to_string(),
                seconds,
                cpu_ms: m.cpu_ms,
                cpu_percent: m.cpu_ms / (seconds.max(1) as f64 * 1000.0) * 100.0,
                watch_cpu_ms: m.watch_cpu_ms,
                synchronizes: m.synchronizes,
                evictions: m.evictions,
                limit_hits: m.limit_hits,
            }),
            Err(err) => println!("bench: {row} FAILED: {err:#}"),
        }
    }
    out
}

/// The rows as a markdown table.
pub(crate) fn table(rows: &[Row]) -> String {
    let mut out = format!(
        "| row | workload | agent CPU, % of one core | of which watches, ms | synchronizes | evictions | workload's limit hits | within {TARGET_PERCENT} % |\n|---|---|---|---|---|---|---|---|\n"
    );
    for r in rows {
        out.push_str(&format!(
            "| {} | {} | {:.2} % ({:.0} ms in {} s) | {:.1} | {} | {} | {} | {} |\n",
            r.row,
            r.workload,
            r.cpu_percent,
            r.cpu_ms,
            r.seconds,
            r.watch_cpu_ms,
            r.synchronizes,
            r.evictions,
            r.limit_hits,
            if r.cpu_percent <= TARGET_PERCENT {
                "yes"
            } else {
                "NO"
            }
        ));
    }
    out
}

#[derive(Clone, Copy, Debug)]
enum Workload {
    Idle,
    Flapping,
    ReclaimOutside,
    PageCacheChurn,
}

struct Measured {
    cpu_ms: f64,
    watch_cpu_ms: f64,
    synchronizes: u64,
    evictions: u64,
    limit_hits: u64,
}

fn measure(bin: &Path, n: usize, workload: Workload, seconds: u64, keep: bool) -> Result<Measured> {
    let id = format!("monitor-bench-{}-adversarial-{n}", std::process::id());
    let (guard, dir) =
        harness::start_agent(bin, &id, &ALL_SOURCES, "", keep, Level::Pods, Bounds::RACE)?;
    let pid = guard
        .agent
        .as_ref()
        .map(Child::id)
        .context("the agent is not running")?;
    let log = dir.join("agent.log");
    util::wait("the agent running", Duration::from_secs(30), || {
        std::fs::read_to_string(&log).is_ok_and(|t| t.contains("agent running"))
    })?;
    let meter = CpuMeter::attach(&format!("{id}-agent"), pid)
        .context("no CPU accounting cgroup for the agent")?;
    let (pods_dir, v1) = harness::pods_cgroup(&id)?;
    let hog = bin.join("hog").display().to_string();
    // The window lasts `seconds`; the workloads outlive it a little.
    let lasting = (seconds + 30).to_string();
    let mut service: Option<Service> = None;
    match workload {
        Workload::Idle => {}
        Workload::Flapping => {
            let (low, high) = flapping_band(&pods_dir, v1);
            let usage = pods_dir.join(if v1 {
                "memory.usage_in_bytes"
            } else {
                "memory.current"
            });
            pod(
                &dir,
                "flapper",
                &[
                    &hog,
                    "oscillate",
                    &usage.display().to_string(),
                    &low.to_string(),
                    &high.to_string(),
                    "10",
                    &lasting,
                ],
                "",
            )?;
            util::wait(
                "the flapping pod at its band",
                Duration::from_secs(60),
                || memory::usage(&pods_dir, v1) >= low,
            )?;
        }
        Workload::ReclaimOutside => {
            let file = cold_file(&dir, 64)?;
            service = Some(Service::start(
                &format!("{id}-service"),
                32 * MIB,
                Command::new(bin.join("hog")).args(["file", &file.display().to_string(), &lasting]),
            )?);
        }
        Workload::PageCacheChurn => {
            let file = cold_file(&dir, 96)?;
            let ballast_mib = NODE_MIB - HEADROOM_MIB - 80 - 48;
            pod(
                &dir,
                "ballast",
                &[&hog, "anon", &ballast_mib.to_string(), "32", "0", "3600"],
                "",
            )?;
            util::wait("the ballast", Duration::from_secs(60), || {
                memory::working_set(&pods_dir, v1) >= (ballast_mib - 8) * MIB
            })?;
            pod(
                &dir,
                "reader",
                &[&hog, "file", &file.display().to_string(), &lasting],
                "    resources:\n      limits: {memory: 48Mi}\n",
            )?;
        }
    }
    // Let start-up settle; then only the agent's own CPU is counted.
    std::thread::sleep(Duration::from_secs(2));
    let moved = meter.move_out_all_but(pid);
    if moved > 0 {
        println!("bench: {moved} pod process(es) moved out of the agent's CPU accounting cgroup");
    }
    let socket = dir.join("monitor.sock");
    // Where the workload may hit a memory limit: the service's cgroup, or the pods.
    let watched: Vec<PathBuf> = match &service {
        Some(service) => service.dirs[..1].to_vec(),
        None => vec![pods_dir.clone()],
    };
    let hits = || -> u64 { watched.iter().map(|d| limit_hits(d, v1)).sum() };
    let hits0 = hits();
    let before = Metrics::read(bin, &socket);
    let cpu0 = meter.used_ms().context("reading the agent's CPU time")?;
    std::thread::sleep(Duration::from_secs(seconds));
    let cpu1 = meter.used_ms().context("reading the agent's CPU time")?;
    let after = Metrics::read(bin, &socket);
    let limit_hits = hits().saturating_sub(hits0);
    drop(service);
    drop(guard);
    drop(meter);
    Ok(Measured {
        cpu_ms: cpu1 - cpu0,
        watch_cpu_ms: (after.watch_cpu_s - before.watch_cpu_s) * 1000.0,
        synchronizes: after.synchronizes.saturating_sub(before.synchronizes),
        evictions: after.evictions.saturating_sub(before.evictions),
        limit_hits,
    })
}

/// Times `dir` and the cgroups below it hit their memory limit (v1 `memory.failcnt`, v2
/// `max` of `memory.events`, summed).
fn limit_hits(dir: &Path, v1: bool) -> u64 {
    let own = if v1 {
        std::fs::read_to_string(dir.join("memory.failcnt"))
            .ok()
            .and_then(|t| t.trim().parse().ok())
    } else {
        std::fs::read_to_string(dir.join("memory.events"))
            .ok()
            .and_then(|t| {
                t.lines()
                    .find_map(|l| l.strip_prefix("max ")?.trim().parse().ok())
            })
    }
    .unwrap_or(0u64);
    let below: u64 = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| limit_hits(&e.path(), v1))
        .sum();
    own + below
}

/// The band the flapping pod moves in: from 2 MiB under the hard threshold's early level
/// to a quarter of the early margin above it, well short of the level. The level is the
/// pods' usage at which allocatableMemory.available<200Mi is met (capacity − 200 MiB plus
/// their inactive page cache); its early level sits the agent's early margin below.
fn flapping_band(pods_dir: &Path, v1: bool) -> (u64, u64) {
    let inactive = memory::usage(pods_dir, v1).saturating_sub(memory::working_set(pods_dir, v1));
    let level = (NODE_MIB - HEADROOM_MIB) * MIB + inactive;
    // The agent's own margin: monitor::notify::memcg::early_margin.
    let page = 4096u64;
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    let margin = (192 * page * cpus).min(8 * MIB);
    let early = level - margin;
    (early - 2 * MIB, early + margin / 4)
}

fn pod(dir: &Path, name: &str, command: &[&str], resources: &str) -> Result<()> {
    let command: Vec<String> = command.iter().map(|c| c.to_string()).collect();
    let path = dir.join("pods").join(format!("{name}.yaml"));
    std::fs::write(
        &path,
        harness::manifest(harness::NAMESPACE, name, &command, resources, ""),
    )
    .with_context(|| format!("writing {}", path.display()))
}

/// A file of `mib` MiB written by this process (outside every cgroup under test: dirty
/// pages in a small v1 memcg can end in an OOM kill), then dropped from the page cache,
/// so that the workload's reads charge its own cgroup.
fn cold_file(dir: &Path, mib: usize) -> Result<PathBuf> {
    let path = dir.join(format!("cold-{mib}"));
    std::fs::write(&path, vec![7u8; mib << 20])
        .with_context(|| format!("writing {}", path.display()))?;
    let file = std::fs::File::open(&path)?;
    file.sync_all()?;
    use std::os::fd::AsRawFd;
    // SAFETY: posix_fadvise takes a descriptor we hold open and plain integers.
    let err = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if err != 0 {
        anyhow::bail!(
            "dropping {} from the page cache: {}",
            path.display(),
            std::io::Error::from_raw_os_error(err)
        );
    }
    Ok(path)
}

/// A process in a memory cgroup of its own outside the pods (and, on a hybrid host, in a
/// cgroup of the same name in the cgroup2 hierarchy, which the agent's eBPF programs see):
/// killed and removed on drop.
struct Service {
    child: Child,
    /// The memory cgroup first.
    dirs: Vec<PathBuf>,
}

impl Service {
    fn start(name: &str, limit: u64, command: &mut Command) -> Result<Service> {
        let (mounts, memory_root, v1) = util::cgroup_mounts();
        let memory_root = memory_root.context("no memory controller")?;
        let mut dirs = vec![memory_root.join(name)];
        if v1
            && let Some(unified) = mounts
                .iter()
                .find(|m| m.join("cgroup.controllers").exists())
        {
            dirs.push(unified.join(name));
        }
        for dir in &dirs {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        let limit_file = if v1 {
            "memory.limit_in_bytes"
        } else {
            "memory.max"
        };
        std::fs::write(dirs[0].join(limit_file), limit.to_string())
            .with_context(|| format!("limiting {}", dirs[0].display()))?;
        let procs: Vec<PathBuf> = dirs.iter().map(|d| d.join("cgroup.procs")).collect();
        // SAFETY: between fork and exec the child only writes its own pid ("0") to the
        // cgroup files, with plain system calls.
        unsafe {
            command.pre_exec(move || {
                for file in &procs {
                    std::fs::write(file, "0")?;
                }
                Ok(())
            });
        }
        let child = command
            .stdout(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {command:?}"))?;
        Ok(Service { child, dirs })
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        for dir in &self.dirs {
            for _ in 0..50 {
                if std::fs::remove_dir(dir).is_ok() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

/// The counters read from the agent's `/metrics`.
#[derive(Debug, Default)]
struct Metrics {
    synchronizes: u64,
    evictions: u64,
    watch_cpu_s: f64,
}

impl Metrics {
    fn read(bin: &Path, socket: &Path) -> Metrics {
        let text = Command::new(bin.join("monitor"))
            .args(["metrics", "--socket"])
            .arg(socket)
            .env("NO_COLOR", "1")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        let sum = |name: &str| -> f64 {
            text.lines()
                .filter(|l| l.starts_with(name) && !l.starts_with('#'))
                .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
                .sum()
        };
        Metrics {
            synchronizes: sum("monitor_synchronizes_total") as u64,
            evictions: sum("monitor_evictions_total") as u64,
            watch_cpu_s: sum("monitor_hot_watch_cpu_seconds_total"),
        }
    }
}
