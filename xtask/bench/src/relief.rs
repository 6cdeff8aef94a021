//! Memory relief in the VM (cgroup v2, `memory.reclaim`), three races:
//! - **page cache**: on the race's bounded node a Guaranteed ballast, a BestEffort pod
//!   holding page cache it read twice from a block-backed file (active: the working set
//!   counts it), and a BestEffort pod growing its anonymous memory slowly past where the
//!   hard threshold would be met if the page cache stayed. Relief on (the defaults) and
//!   off, trial by trial alternating: evictions, kernel OOM kills, and the pods' memory
//!   stall (PSI `full` of the pods cgroup, the highest share over any 1 s window) against
//!   relief's `maxStall`;
//! - **full speed**: the `vm-v2` race of [`crate::race`] with every source, relief on
//!   (`all`) and off (`all-relief-off`): crossing → SIGKILL, kernel-stamped (see there);
//! - **I/O stall**: a pod re-reading a file three times its memory limit (its memory
//!   stalls on the disk) with the node's memory plentiful, the stall signal configured:
//!   evictions, and the stall the pods saw.
//!
//! The guest has no disk: a loop device on a file of the initramfs gives the page cache a
//! block device under it (tmpfs pages are shmem, which no reclaim frees without swap).
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use crate::harness::{self, Bounds, Level, MIB, Mode, NAMESPACE};
use crate::memory::stat;
use crate::stats::percentile;
use crate::trial::Trial;
use crate::util::{self, LoopDisk, monotonic_ns};

pub(crate) const PREFIX: &str = "@@relief@@ ";

/// The page-cache race's pods (MiB), on the race's 1 GiB node with 200 Mi headroom: the
/// hard threshold is met at a working set of 824 MiB, relief's level (default margin 5 %)
/// at about 773. Ballast and cache alone stay under the level; with the grower's memory
/// too they are past the threshold; ballast and grower alone are not past the level.
const BALLAST_MIB: u64 = 400;
const CACHE_MIB: u64 = 256;
const GROWER_MIB: u64 = 330;
/// The grower's pace: 4 MiB every 200 ms, about 20 MiB/s.
const GROWER_STEP_MIB: u64 = 4;
const GROWER_PAUSE_MS: u64 = 200;
/// The I/O stall: a file of 120 MiB re-read in a 48 MiB limit.
const THRASH_FILE_MIB: u64 = 120;
const THRASH_LIMIT_MIB: u64 = 48;
/// The stall signal of the I/O stall race: memory stalled 5 % of the time, counted only
/// within 100 Mi of the memory thresholds, for 2 s.
const STALL_KEYS: &str = "  memoryStall: {full: 5%, margin: 100Mi, gracePeriod: 2s}\n";
const STALL_PERCENT: f64 = 5.0;
/// How long the I/O stall runs once the stall is past the signal's level.
const STALL_HOLD: Duration = Duration::from_secs(15);
/// relief's default `maxStall`: a write that stalls the pod more stops the pass.
pub(crate) const MAX_STALL_PERCENT: f64 = 10.0;
/// The full-speed race's modes (rows of `vm-v2`).
pub(crate) const RELIEF_ON_MODE: &str = "all";
pub(crate) const RELIEF_OFF_MODE: &str = crate::modes::VM_RELIEF_OFF.name;

/// One trial of the page-cache race (`race: "cache"`) or of the I/O stall (`"io-stall"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ReliefTrial {
    pub(crate) race: String,
    pub(crate) relief: bool,
    pub(crate) n: u32,
    /// Pods the agent evicted or killed.
    pub(crate) evicted: usize,
    /// Kernel OOM kills among the pods.
    pub(crate) oom_kills: u64,
    /// The pods cgroup's memory stall (PSI `full`): its highest share of any 1 s window
    /// during the trial, percent.
    pub(crate) peak_stall_percent: f64,
    /// Relief passes the agent logged.
    pub(crate) passes: usize,
    /// The cache pod's working set (usage − inactive_file, what the signals count of it)
    /// at the start and at the end, MiB (page-cache race). Its page cache itself may stay:
    /// under MGLRU reclaim ages pages to inactive before it frees them.
    pub(crate) cache_start_mib: u64,
    pub(crate) cache_end_mib: u64,
    /// The grower got all its memory (page-cache race).
    pub(crate) grown: bool,
}

fn mode(name: &'static str, keys: &'static str) -> Mode {
    Mode {
        monitor_keys: keys,
        ..Mode::deployed(name)
    }
}

/// The page-cache race, `trials` of each (relief on, off) alternating, then the I/O stall
/// `stall_trials` times; each trial printed as one `@@relief@@ <json>` line.
pub(crate) fn run(bin: &Path, trials: u32, stall_trials: u32) -> Result<()> {
    let disk = LoopDisk::new(&std::env::temp_dir().join("monitor-bench-relief-disk"), 400)?;
    let cache_file = disk.dir.join("cache");
    write_file(&cache_file, CACHE_MIB)?;
    for n in 1..=trials {
        for relief in [true, false] {
            match cache_trial(bin, &cache_file, relief, n) {
                Ok(t) => emit(&t),
                Err(err) => println!(
                    "bench: relief cache race ({}) trial {n}: FAILED: {err:#}",
                    on_off(relief)
                ),
            }
        }
    }
    let _ = std::fs::remove_file(&cache_file);
    let thrash_file = disk.dir.join("thrash");
    write_file(&thrash_file, THRASH_FILE_MIB)?;
    for n in 1..=stall_trials {
        match stall_trial(bin, &thrash_file, n) {
            Ok(t) => emit(&t),
            Err(err) => println!("bench: relief I/O stall trial {n}: FAILED: {err:#}"),
        }
    }
    Ok(())
}

fn emit(trial: &ReliefTrial) {
    match serde_json::to_string(trial) {
        Ok(json) => println!("{PREFIX}{json}"),
        Err(err) => println!("bench: relief trial {}: not serialisable: {err}", trial.n),
    }
}

/// The trials in the guest's console output.
pub(crate) fn collect(console: &[String]) -> Vec<ReliefTrial> {
    console
        .iter()
        .filter_map(|l| l.split_once(PREFIX).map(|(_, json)| json))
        .filter_map(|json| serde_json::from_str(json).ok())
        .collect()
}

fn on_off(relief: bool) -> &'static str {
    if relief { "relief on" } else { "relief off" }
}

fn cache_trial(bin: &Path, file: &Path, relief: bool, n: u32) -> Result<ReliefTrial> {
    drop_cache(file)?;
    let id = format!(
        "monitor-bench-{}-relief-{}-{n}",
        std::process::id(),
        if relief { "on" } else { "off" }
    );
    let agent_mode = if relief {
        mode("relief-on", "")
    } else {
        mode("relief-off", "  memoryRelief: {enabled: false}\n")
    };
    let (guard, dir) =
        harness::start_agent(bin, &id, &agent_mode, "", false, Level::Pods, Bounds::RACE)?;
    let hog = bin.join("hog").display().to_string();
    let go = dir.join("go");
    let manifests = [
        (
            "ballast",
            harness::manifest(
                NAMESPACE,
                "ballast",
                &[
                    hog.clone(),
                    "anon".into(),
                    BALLAST_MIB.to_string(),
                    "32".into(),
                    "0".into(),
                    "3600".into(),
                ],
                &format!(
                    "    resources:\n      requests: {{memory: {m}Mi}}\n      limits: {{memory: {m}Mi}}\n",
                    m = BALLAST_MIB + 40
                ),
                "",
            ),
        ),
        (
            "cache",
            harness::manifest(
                NAMESPACE,
                "cache",
                &[
                    hog.clone(),
                    "cache".into(),
                    file.display().to_string(),
                    "3600".into(),
                ],
                "",
                "",
            ),
        ),
        (
            "grower",
            harness::manifest(
                NAMESPACE,
                "grower",
                &[
                    hog.clone(),
                    "anon".into(),
                    GROWER_MIB.to_string(),
                    GROWER_STEP_MIB.to_string(),
                    GROWER_PAUSE_MS.to_string(),
                    "3600".into(),
                ],
                "",
                &format!(
                    "    env:\n    - {{name: HOG_START_FILE, value: \"{}\"}}\n",
                    go.display()
                ),
            ),
        ),
    ];
    for (name, text) in &manifests {
        let path = dir.join("pods").join(format!("{name}.yaml"));
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    let state = dir.join("state");
    util::wait("the three pods running", Duration::from_secs(60), || {
        let r = harness::records(&state);
        r.len() == 3 && r.iter().all(|r| r.phase == "Running" && !r.pids.is_empty())
    })?;
    let cache_dir = pod_dir(&state, "cache").context("the cache pod's cgroup")?;
    util::wait(
        &format!("the cache pod holding {CACHE_MIB} MiB of page cache"),
        Duration::from_secs(120),
        || stat(&cache_dir, "file") >= CACHE_MIB * 9 / 10 * MIB,
    )?;
    let (pods_dir, _) = harness::pods_cgroup(&id)?;
    util::wait(
        "the ballast holding its memory",
        Duration::from_secs(60),
        || stat(&pods_dir, "anon") >= (BALLAST_MIB - 8) * MIB,
    )?;
    // Settled, then a synchronize: the kernel's levels are armed on the usage and the
    // inactive page cache of the last one, and a synchronize during the cache pod's read
    // (its pages still inactive) would arm them where the working set no longer is.
    std::thread::sleep(Duration::from_secs(1));
    let log_path = dir.join("agent.log");
    let synchronizes = || {
        std::fs::read_to_string(&log_path)
            .unwrap_or_default()
            .matches("synchronize done")
            .count()
    };
    let before = synchronizes();
    util::wait(
        "a synchronize on the settled pods",
        Duration::from_secs(15),
        || synchronizes() > before,
    )?;
    let cache_start = crate::memory::working_set(&cache_dir, false);
    let oom_before = crate::memory::oom_kills(&pods_dir, false);
    let stall = StallSampler::start(pods_dir.join("memory.pressure"));
    std::fs::write(&go, "").with_context(|| format!("writing {}", go.display()))?;
    let grower_pid = harness::records(&state)
        .into_iter()
        .find(|r| r.name == "grower")
        .and_then(|r| r.pids.first().copied());
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut grown = false;
    let mut grown_at = None;
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        if evicted(&state) > 0 {
            // Settle: the eviction's cleanup, and any second one.
            std::thread::sleep(Duration::from_secs(3));
            break;
        }
        if !grown && grower_pid.is_some_and(|pid| rss(pid) >= (GROWER_MIB - 4) * MIB) {
            grown = true;
            grown_at = Some(Instant::now());
        }
        // Held a while grown: a late eviction shows here.
        if grown_at.is_some_and(|at| at.elapsed() >= Duration::from_secs(5)) {
            break;
        }
    }
    let peak = stall.stop();
    let log = std::fs::read_to_string(dir.join("agent.log")).unwrap_or_default();
    let trial = ReliefTrial {
        race: "cache".into(),
        relief,
        n,
        evicted: evicted(&state),
        oom_kills: crate::memory::oom_kills(&pods_dir, false).saturating_sub(oom_before),
        peak_stall_percent: peak,
        passes: log.matches("memory relief for ").count(),
        cache_start_mib: cache_start / MIB,
        cache_end_mib: crate::memory::working_set(&cache_dir, false) / MIB,
        grown,
    };
    println!(
        "bench: relief cache race ({}) trial {n}: {} evicted, {} OOM kill(s), {} relief pass(es), the cache pod's working set {} -> {} MiB, peak stall {:.1} %, grower {}",
        on_off(relief),
        trial.evicted,
        trial.oom_kills,
        trial.passes,
        trial.cache_start_mib,
        trial.cache_end_mib,
        trial.peak_stall_percent,
        if grown { "grown" } else { "not grown" }
    );
    if relief && trial.evicted > 0 {
        // Why relief did not spare the pods: the agent's own account.
        let lines: Vec<&str> = log
            .lines()
            .filter(|l| {
                [
                    "relief",
                    "synchronize:",
                    "hot path",
                    "wake ",
                    "threshold",
                    "level",
                    "WARN",
                ]
                .iter()
                .any(|k| l.contains(k))
            })
            .collect();
        for line in &lines[lines.len().saturating_sub(40)..] {
            println!("bench: relief cache race trial {n}: agent: {line}");
        }
    }
    drop(guard);
    Ok(trial)
}

fn stall_trial(bin: &Path, file: &Path, n: u32) -> Result<ReliefTrial> {
    drop_cache(file)?;
    let id = format!("monitor-bench-{}-iostall-{n}", std::process::id());
    let (guard, dir) = harness::start_agent(
        bin,
        &id,
        &mode("io-stall", STALL_KEYS),
        "",
        false,
        Level::Pods,
        Bounds::RACE,
    )?;
    let hog = bin.join("hog").display().to_string();
    let manifest = harness::manifest(
        NAMESPACE,
        "thrash",
        &[hog, "file".into(), file.display().to_string(), "600".into()],
        &format!(
            "    resources:\n      requests: {{memory: 32Mi}}\n      limits: {{memory: {THRASH_LIMIT_MIB}Mi}}\n"
        ),
        "",
    );
    let path = dir.join("pods").join("thrash.yaml");
    std::fs::write(&path, manifest).with_context(|| format!("writing {}", path.display()))?;
    let state = dir.join("state");
    let (pods_dir, _) = harness::pods_cgroup(&id)?;
    let stall = StallSampler::start(pods_dir.join("memory.pressure"));
    let oom_before = crate::memory::oom_kills(&pods_dir, false);
    util::wait(
        &format!("the pods' memory stalled past {STALL_PERCENT} % in a 1 s window"),
        Duration::from_secs(90),
        || stall.peak() >= STALL_PERCENT,
    )?;
    std::thread::sleep(STALL_HOLD);
    let peak = stall.stop();
    let log = std::fs::read_to_string(dir.join("agent.log")).unwrap_or_default();
    let trial = ReliefTrial {
        race: "io-stall".into(),
        relief: true,
        n,
        evicted: evicted(&state),
        oom_kills: crate::memory::oom_kills(&pods_dir, false).saturating_sub(oom_before),
        peak_stall_percent: peak,
        passes: log.matches("memory relief for ").count(),
        cache_start_mib: 0,
        cache_end_mib: 0,
        grown: false,
    };
    println!(
        "bench: relief I/O stall trial {n}: peak stall {peak:.1} % (signal at {STALL_PERCENT} %), {} evicted, {} OOM kill(s)",
        trial.evicted, trial.oom_kills
    );
    drop(guard);
    Ok(trial)
}

/// Pods the agent evicted or killed (their records say `Failed`).
fn evicted(state: &Path) -> usize {
    harness::records(state)
        .iter()
        .filter(|r| r.phase == "Failed")
        .count()
}

/// The memory cgroup of pod `name`: the parent of its container's.
fn pod_dir(state: &Path, name: &str) -> Option<PathBuf> {
    let pid = harness::records(state)
        .into_iter()
        .find(|r| r.name == name)?
        .pids
        .first()
        .copied()?;
    let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    let path = cgroup.lines().find_map(|l| l.strip_prefix("0::"))?;
    let container = Path::new("/sys/fs/cgroup").join(path.trim_start_matches('/'));
    container.parent().map(Path::to_path_buf)
}

/// A process's resident memory, bytes.
fn rss(pid: u64) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}

/// The `total=` (µs) of the `full` line of a PSI file.
fn full_total_us(text: &str) -> Option<u64> {
    text.lines()
        .find(|l| l.starts_with("full "))?
        .split_whitespace()
        .find_map(|f| f.strip_prefix("total="))?
        .parse()
        .ok()
}

/// The highest share of any window of `window_ns` among `(ns, total µs)` readings of a
/// PSI `total`, percent: between each reading and the first one a window later.
fn peak_share(readings: &[(u64, u64)], window_ns: u64) -> f64 {
    let mut peak = 0.0f64;
    let mut j = 0;
    for (i, &(at, total)) in readings.iter().enumerate() {
        j = j.max(i);
        while j < readings.len() && readings[j].0 < at + window_ns {
            j += 1;
        }
        let Some(&(end, end_total)) = readings.get(j) else {
            break;
        };
        let span_us = end.saturating_sub(at) as f64 / 1e3;
        if span_us > 0.0 {
            peak = peak.max(end_total.saturating_sub(total) as f64 / span_us * 100.0);
        }
    }
    peak
}

/// Reads a cgroup's `memory.pressure` every 50 ms on a thread of its own.
struct StallSampler {
    stop: Arc<AtomicBool>,
    readings: Arc<std::sync::Mutex<Vec<(u64, u64)>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl StallSampler {
    fn start(file: PathBuf) -> StallSampler {
        let stop = Arc::new(AtomicBool::new(false));
        let readings = Arc::new(std::sync::Mutex::new(Vec::new()));
        let thread = {
            let (stop, readings) = (stop.clone(), readings.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    if let Some(total) = std::fs::read_to_string(&file)
                        .ok()
                        .and_then(|t| full_total_us(&t))
                        && let Ok(mut r) = readings.lock()
                    {
                        r.push((monotonic_ns(), total));
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            })
        };
        StallSampler {
            stop,
            readings,
            thread: Some(thread),
        }
    }

    /// The highest 1 s share so far, percent.
    fn peak(&self) -> f64 {
        self.readings
            .lock()
            .map(|r| peak_share(&r, 1_000_000_000))
            .unwrap_or(0.0)
    }

    fn stop(mut self) -> f64 {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        self.peak()
    }
}

/// Writes `mib` MiB of data at `path`, then drops it from the page cache.
fn write_file(path: &Path, mib: u64) -> Result<()> {
    use std::io::Write;
    let mut f =
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let block = vec![7u8; MIB as usize];
    for _ in 0..mib {
        f.write_all(&block)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    f.sync_all()
        .with_context(|| format!("syncing {}", path.display()))?;
    drop(f);
    drop_cache(path)
}

/// Drops a file's clean pages from the page cache, so that its next reader has every page
/// charged to its own cgroup.
fn drop_cache(path: &Path) -> Result<()> {
    let f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    // SAFETY: an advice on a descriptor we hold open.
    let rc = unsafe {
        libc::posix_fadvise(
            std::os::fd::AsRawFd::as_raw_fd(&f),
            0,
            0,
            libc::POSIX_FADV_DONTNEED,
        )
    };
    if rc != 0 {
        bail!("posix_fadvise DONTNEED {}: error {rc}", path.display());
    }
    Ok(())
}

/// The report's lines: the page-cache race relief on and off side by side, the
/// full-speed race's crossing → SIGKILL with relief on and off (from the `vm-v2` trials),
/// and the I/O stall.
pub(crate) fn lines(relief: &[ReliefTrial], trials: &[Trial]) -> Vec<String> {
    let mut out = Vec::new();
    let cache = |on: bool| -> Vec<&ReliefTrial> {
        relief
            .iter()
            .filter(|t| t.race == "cache" && t.relief == on)
            .collect()
    };
    for on in [true, false] {
        let ts = cache(on);
        if ts.is_empty() {
            continue;
        }
        let peak = ts
            .iter()
            .map(|t| t.peak_stall_percent)
            .fold(0.0f64, f64::max);
        let reclaimed: Vec<f64> = ts
            .iter()
            .map(|t| t.cache_start_mib.saturating_sub(t.cache_end_mib) as f64)
            .collect();
        // Relief off: the cache pod's memory goes with its eviction, if at all.
        let relief_text = if on {
            format!(
                "; relief passes median {}, the cache pod's working set fell by median {} MiB of {CACHE_MIB}",
                median(&ts.iter().map(|t| t.passes as f64).collect::<Vec<_>>()),
                median(&reclaimed),
            )
        } else {
            String::new()
        };
        out.push(format!(
            "- page cache and a growing pod, {}: evictions in {} of {} trials ({} pods in all), {} kernel OOM kill(s), the grower got its memory in {}{relief_text}; pods' memory stall (PSI full, highest 1 s share) at most {:.1} % (relief's bound {MAX_STALL_PERCENT} %)",
            on_off(on),
            ts.iter().filter(|t| t.evicted > 0).count(),
            ts.len(),
            ts.iter().map(|t| t.evicted).sum::<usize>(),
            ts.iter().map(|t| t.oom_kills).sum::<u64>(),
            ts.iter().filter(|t| t.grown).count(),
            peak,
        ));
    }
    let full = |mode: &str| -> Vec<&Trial> {
        trials
            .iter()
            .filter(|t| t.rate == crate::modes::VM_RATE && t.mode == mode)
            .collect()
    };
    let (on, off) = (full(RELIEF_ON_MODE), full(RELIEF_OFF_MODE));
    if !on.is_empty() && !off.is_empty() {
        let kill_us = |ts: &[&Trial], p: f64| {
            percentile(
                &ts.iter()
                    .filter_map(|t| t.kernel_crossing_to_kill_us)
                    .collect::<Vec<_>>(),
                p,
            )
        };
        let avoided = |ts: &[&Trial]| ts.iter().filter(|t| t.oom_kills == 0).count();
        let us = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.0}"));
        out.push(format!(
            "- full-speed hog, kernel-stamped crossing → SIGKILL p50 / p99: relief on {} / {} µs, off {} / {} µs; OOM avoided {}/{} on, {}/{} off",
            us(kill_us(&on, 50.0)),
            us(kill_us(&on, 99.0)),
            us(kill_us(&off, 50.0)),
            us(kill_us(&off, 99.0)),
            avoided(&on),
            on.len(),
            avoided(&off),
            off.len(),
        ));
        if let (Some(a), Some(b)) = (kill_us(&on, 99.0), kill_us(&off, 99.0))
            && b > 0.0
        {
            out.push(format!(
                "- relief on / off crossing → SIGKILL p99: {:.2}x (target: at most 1.2x)",
                a / b
            ));
        }
    }
    let stalls: Vec<&ReliefTrial> = relief.iter().filter(|t| t.race == "io-stall").collect();
    if !stalls.is_empty() {
        out.push(format!(
            "- pure I/O stall (a {THRASH_FILE_MIB} MiB file re-read in a {THRASH_LIMIT_MIB} MiB limit, memory plentiful; stall signal at {STALL_PERCENT} %): pods' memory stall peaked at {:.1} % (highest 1 s share), {} pod(s) evicted over {} trials, {} kernel OOM kill(s)",
            stalls
                .iter()
                .map(|t| t.peak_stall_percent)
                .fold(0.0f64, f64::max),
            stalls.iter().map(|t| t.evicted).sum::<usize>(),
            stalls.len(),
            stalls.iter().map(|t| t.oom_kills).sum::<u64>(),
        ));
    }
    out
}

fn median(values: &[f64]) -> String {
    percentile(values, 50.0).map_or("-".to_string(), |v| format!("{v:.0}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_full_line_total_is_read() {
        let text = "some avg10=1.00 avg60=0.50 avg300=0.10 total=900\nfull avg10=0.50 avg60=0.20 avg300=0.05 total=400\n";
        assert_eq!(full_total_us(text), Some(400));
        assert_eq!(full_total_us("some total=3\n"), None);
    }

    #[test]
    fn the_peak_share_is_the_worst_window() {
        // 50 ms of stall per 100 ms between 1 s and 2 s, none elsewhere.
        let readings: Vec<(u64, u64)> = (0..=30u64)
            .map(|i| {
                let at = i * 100_000_000;
                let stalled = (i.clamp(10, 20) - 10) * 50_000;
                (at, stalled)
            })
            .collect();
        let peak = peak_share(&readings, 1_000_000_000);
        assert!((peak - 50.0).abs() < 0.01, "{peak}");
        assert_eq!(peak_share(&readings[..5], 1_000_000_000), 0.0, "no window");
    }

    #[test]
    fn the_lines_set_relief_on_beside_off() {
        let t = |relief: bool, evicted: usize| ReliefTrial {
            race: "cache".into(),
            relief,
            n: 1,
            evicted,
            oom_kills: 0,
            peak_stall_percent: if relief { 3.0 } else { 0.0 },
            passes: if relief { 4 } else { 0 },
            cache_start_mib: 250,
            cache_end_mib: if relief { 20 } else { 250 },
            grown: relief,
        };
        let lines = lines(&[t(true, 0), t(false, 1)], &[]);
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(
            lines[0].contains("relief on: evictions in 0 of 1 trials")
                && lines[0].contains("fell by median 230 MiB")
                && lines[0].contains("at most 3.0 %"),
            "{}",
            lines[0]
        );
        assert!(
            lines[1].contains("relief off: evictions in 1 of 1 trials")
                && !lines[1].contains("fell by"),
            "{}",
            lines[1]
        );
    }
}
