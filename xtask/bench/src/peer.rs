//! The peer: earlyoom (Debian package) on the same kind of race inside the VM. earlyoom
//! watches the node's MemAvailable, so this race is node-level: a ballast process holds
//! most of the guest's memory (oom_score_adj -1000, like a guaranteed pod, so that neither
//! earlyoom nor the OOM killer prefers it), then the hog allocates until earlyoom or the
//! kernel kills it. earlyoom's threshold lies at the same free memory as the agent's, the
//! headroom above the kernel's floor ([`crate::reserve`]): `-M` that level of MemAvailable
//! in KiB, as both its SIGTERM and its SIGKILL size, so that it sends SIGKILL at the
//! threshold, as the agent's hard eviction does. Both processes run in a
//! cgroup of their own (`/sys/fs/cgroup/bench-peer`), without a limit: the guest's RAM
//! bounds the node.
//!
//! Times: crossing from a 1 ms sampler of /proc/meminfo (used = MemTotal − MemAvailable,
//! interpolated); earlyoom's "low memory!" line as its wake and its "sending SIG…" line as
//! the kill, both on stderr (unbuffered) and stamped when read; its SIGKILL as the kernel
//! stamps it (`signal:signal_generate` from earlyoom's process, by the crossing probe),
//! as the agent's is in the same race; OOM kills from /proc/vmstat's oom_kill.
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::harness::{HOG_TO_CROSSING_MIB, MIB};
use crate::memory::{meminfo_kib, vmstat};
use crate::reserve::Reserve;
use crate::trial::{self, Trial};
use crate::util::{self, monotonic_ns};

pub(crate) const MODE: &str = "earlyoom";
/// The agent's modes set beside earlyoom in the report, with how the report names them.
pub(crate) const RIVALS: [(&str, &str); 2] = [
    ("all", "all sources"),
    ("ebpf", "the crossing detector alone"),
];
const CGROUP: &str = "/sys/fs/cgroup/bench-peer";

/// Kills what the trial started and removes its cgroup, whichever way the trial ends.
struct PeerGuard {
    children: Vec<Child>,
}

impl Drop for PeerGuard {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir(CGROUP);
    }
}

fn spawn_in_cgroup(command: &mut Command, what: &str) -> Result<Child> {
    let child = command
        .spawn()
        .with_context(|| format!("starting {what}"))?;
    let procs = Path::new(CGROUP).join("cgroup.procs");
    std::fs::write(&procs, child.id().to_string()).with_context(|| {
        format!(
            "moving {what} (pid {}) into {}",
            child.id(),
            procs.display()
        )
    })?;
    Ok(child)
}

/// One node-level race against earlyoom, with its SIGTERM and SIGKILL levels
/// `headroom_mib` of MemAvailable; `earlyoom` is the command line that starts it (the
/// dynamic loader and the binary, as the guest has no /lib).
pub(crate) fn trial(bin: &Path, earlyoom: &[String], headroom_mib: u64, n: u32) -> Result<Trial> {
    let _ = std::fs::create_dir(CGROUP);
    let mut guard = PeerGuard {
        children: Vec::new(),
    };
    let dir = std::env::temp_dir().join(format!("bench-peer-{n}"));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let (ballast_go, go) = (dir.join("ballast-go"), dir.join("go"));
    let _ = std::fs::remove_file(&ballast_go);
    let _ = std::fs::remove_file(&go);
    let total = meminfo_kib("MemTotal:").context("MemTotal missing from /proc/meminfo")? * 1024;
    let available =
        meminfo_kib("MemAvailable:").context("MemAvailable missing from /proc/meminfo")? * 1024;
    // earlyoom's level: MemAvailable at the free memory where the agent's threshold for
    // the same headroom lies, both `headroom_mib` above the kernel's floor.
    let reserve = Reserve::read()?;
    let level_kib = reserve.earlyoom_level_kib(headroom_mib)?;
    if n == 1 {
        println!("bench: earlyoom race: {}", reserve.describe(headroom_mib));
    }
    let ballast_mib = (available / MIB).saturating_sub(level_kib / 1024 + HOG_TO_CROSSING_MIB);
    let hog = bin.join("hog");

    let ballast = spawn_in_cgroup(
        Command::new(&hog)
            .args(["anon", &ballast_mib.to_string(), "32", "0", "3600"])
            .env("HOG_START_FILE", &ballast_go)
            .stdout(Stdio::null()),
        "the ballast",
    )?;
    let ballast_pid = ballast.id();
    guard.children.push(ballast);
    std::fs::write(format!("/proc/{ballast_pid}/oom_score_adj"), "-1000")
        .context("setting the ballast's oom_score_adj")?;
    std::fs::write(&ballast_go, "").with_context(|| format!("writing {}", ballast_go.display()))?;
    let rss_mib = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
            / 1024
    };
    let waited = util::wait("the ballast's allocation", Duration::from_secs(120), || {
        rss_mib(ballast_pid) >= ballast_mib.saturating_sub(8)
    });
    if let Err(err) = waited {
        bail!(
            "{err:#}: ballast pid {ballast_pid} holds {} MiB of {ballast_mib} MiB; MemAvailable {} KiB (was {} KiB)",
            rss_mib(ballast_pid),
            meminfo_kib("MemAvailable:").unwrap_or(0),
            available / 1024
        );
    }

    let hog_child = spawn_in_cgroup(
        Command::new(&hog)
            .args(["anon", &(total / MIB).to_string(), "8", "0", "3600"])
            .env("HOG_START_FILE", &go)
            .stdout(Stdio::null()),
        "the hog",
    )?;
    let hog_pid = hog_child.id();
    guard.children.push(hog_child);

    let (program, args) = earlyoom.split_first().context("no earlyoom command")?;
    let mut peer = Command::new(program)
        .args(args)
        .args(["-M", &format!("{level_kib},{level_kib}"), "-r", "0"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {}", earlyoom.join(" ")))?;
    let stderr = peer.stderr.take().context("earlyoom's stderr")?;
    let peer_pid = peer.id();
    guard.children.push(peer);
    let probe = crate::probe::Probe::start(
        bin,
        Path::new(CGROUP),
        crate::probe::NEVER,
        peer_pid,
        dir.join("probe.log"),
    )
    .map_err(|err| println!("bench: earlyoom trial {n}: no kernel stamp of its SIGKILL: {err:#}"))
    .ok();
    let lines: Arc<Mutex<Vec<(u64, String)>>> = Arc::default();
    let reader = {
        let lines = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Ok(mut l) = lines.lock() {
                    l.push((monotonic_ns(), line));
                }
            }
        })
    };
    // earlyoom prints its limits at start-up; give it that long to be watching.
    util::wait("earlyoom to start", Duration::from_secs(10), || {
        lines.lock().map(|l| !l.is_empty()).unwrap_or(false)
    })?;
    std::thread::sleep(Duration::from_millis(200));

    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut out = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                if let Some(a) = meminfo_kib("MemAvailable:") {
                    out.push((monotonic_ns(), total.saturating_sub(a * 1024)));
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            out
        })
    };
    std::thread::sleep(Duration::from_millis(100));
    let oom_before = vmstat("oom_kill ");
    let start_ns = monotonic_ns();
    std::fs::write(&go, "").with_context(|| format!("writing {}", go.display()))?;
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut oom_ns = None;
    let mut ended = None;
    loop {
        std::thread::sleep(Duration::from_millis(2));
        let now = monotonic_ns();
        if oom_ns.is_none() && vmstat("oom_kill ") > oom_before {
            oom_ns = Some(now);
        }
        let hog_gone = !Path::new(&format!("/proc/{hog_pid}")).exists()
            || std::fs::read_to_string(format!("/proc/{hog_pid}/stat"))
                .map(|s| s.contains(") Z"))
                .unwrap_or(true);
        if ended.is_none() && (hog_gone || oom_ns.is_some()) {
            ended = Some(now);
        }
        if ended.is_some_and(|e| now.saturating_sub(e) >= 300_000_000) || Instant::now() > deadline
        {
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    let points = sampler
        .join()
        .map_err(|_| anyhow::anyhow!("the /proc/meminfo sampler thread panicked"))?;
    let oom_kills = vmstat("oom_kill ").saturating_sub(oom_before);
    let kernel_kill_ns = probe.and_then(|p| crate::logparse::kernel_kill(&p.output(), start_ns));
    drop(guard);
    let _ = reader.join();
    let _ = std::fs::remove_dir_all(&dir);
    if ended.is_none() {
        bail!("earlyoom trial {n}: neither earlyoom nor the OOM killer ended the hog within 60 s");
    }
    let lines = lines.lock().map(|l| l.clone()).unwrap_or_default();
    let at = |needle: &str| {
        lines
            .iter()
            .find(|(at, l)| *at >= start_ns && l.contains(needle))
            .map(|(at, _)| *at)
    };
    let threshold = total.saturating_sub(level_kib * 1024);
    let mut trial = trial::from_points(trial::Observed {
        mode: MODE,
        rate: "full",
        n,
        node_mib: total / MIB,
        headroom_mib,
        start_ns,
        threshold,
        points: &points,
        wake: at("low memory").map(|w| (w, "earlyoom-poll".to_string(), None, None)),
        kill_ns: at("sending SIG"),
        oom_ns,
        oom_kills,
        sync_durations_ms: Vec::new(),
        bpf: Vec::new(),
    });
    trial.kernel_kill_ms = kernel_kill_ns.map(|killed| util::ms_after(start_ns, killed));
    Ok(trial)
}
