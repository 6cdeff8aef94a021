//! The peer: earlyoom (Debian package) on the same kind of race inside the VM. earlyoom
//! watches the node's MemAvailable, so this race is node-level: a ballast process holds
//! most of the guest's memory (oom_score_adj -1000, like a guaranteed pod, so that neither
//! earlyoom nor the OOM killer prefers it), then the hog allocates until earlyoom or the
//! kernel kills it. earlyoom's threshold is set to the same headroom as the agent's
//! (`-M` HEADROOM_MIB in KiB). Both processes run in a cgroup of their own
//! (`/sys/fs/cgroup/bench-peer`), without a limit: the guest's RAM bounds the node.
//!
//! Times: crossing from a 1 ms sampler of /proc/meminfo (used = MemTotal − MemAvailable,
//! interpolated); earlyoom's "low memory!" line as its wake and its "sending SIG…" line as
//! the kill, both on stderr (unbuffered) and stamped when read; OOM kills from
//! /proc/vmstat's oom_kill.
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::race::{self, HEADROOM_MIB, HOG_TO_CROSSING_MIB, MIB, Trial};
use crate::demo;

pub(crate) const MODE: &str = "earlyoom";
const CGROUP: &str = "/sys/fs/cgroup/bench-peer";

/// One "Key: N kB" field of /proc/meminfo text, in KiB; `key` includes the colon.
pub(crate) fn meminfo_field(text: &str, key: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

fn meminfo_kib(key: &str) -> Option<u64> {
    meminfo_field(&std::fs::read_to_string("/proc/meminfo").ok()?, key)
}

pub(crate) fn vmstat(key: &str) -> u64 {
    std::fs::read_to_string("/proc/vmstat")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(key).and_then(|v| v.trim().parse().ok()))
        .unwrap_or(0)
}

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

/// One node-level race against earlyoom; `earlyoom` is the command line that starts it
/// (the dynamic loader and the binary, as the guest has no /lib).
pub(crate) fn trial(bin: &Path, earlyoom: &[String], n: u32) -> Result<Trial> {
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
    let ballast_mib = (available / MIB).saturating_sub(HEADROOM_MIB + HOG_TO_CROSSING_MIB);
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
    let waited = demo::wait("the ballast's allocation", Duration::from_secs(120), || {
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
        .args(["-M", &(HEADROOM_MIB * 1024).to_string(), "-r", "0"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {}", earlyoom.join(" ")))?;
    let stderr = peer.stderr.take().context("earlyoom's stderr")?;
    guard.children.push(peer);
    let lines: Arc<Mutex<Vec<(u64, String)>>> = Arc::default();
    let reader = {
        let lines = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Ok(mut l) = lines.lock() {
                    l.push((demo::monotonic_ns(), line));
                }
            }
        })
    };
    // earlyoom prints its limits at start-up; give it that long to be watching.
    demo::wait("earlyoom to start", Duration::from_secs(10), || {
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
                    out.push((demo::monotonic_ns(), total.saturating_sub(a * 1024)));
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            out
        })
    };
    std::thread::sleep(Duration::from_millis(100));
    let oom_before = vmstat("oom_kill ");
    let start_ns = demo::monotonic_ns();
    std::fs::write(&go, "").with_context(|| format!("writing {}", go.display()))?;
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut oom_ns = None;
    let mut ended = None;
    loop {
        std::thread::sleep(Duration::from_millis(2));
        let now = demo::monotonic_ns();
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
    let threshold = total.saturating_sub(HEADROOM_MIB * MIB);
    Ok(race::from_points(race::Observed {
        mode: MODE,
        rate: "full",
        n,
        node_mib: total / MIB,
        start_ns,
        threshold,
        points: &points,
        wake: at("low memory").map(|w| (w, "earlyoom-poll".to_string(), None, None)),
        kill_ns: at("sending SIG"),
        oom_ns,
        oom_kills,
        sync_durations_ms: Vec::new(),
        bpf: Vec::new(),
    }))
}

/// earlyoom from the Debian archive, unpacked under `dir` (not installed: no service on
/// the host), with the shared libraries and the loader it needs (from ldd). Returns the
/// files to copy into the guest's /bin: (name, host path).
pub(crate) fn fetch(dir: &Path) -> Result<Vec<(String, PathBuf)>> {
    let binary = dir.join("usr/bin/earlyoom");
    if !binary.exists() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        crate::cmd::run(
            Command::new("apt-get")
                .args(["download", "earlyoom"])
                .current_dir(dir),
        )?;
        let deb = std::fs::read_dir(dir)
            .with_context(|| format!("listing {}", dir.display()))?
            .flatten()
            .map(|e| e.path())
            .find(|p| p.extension().is_some_and(|e| e == "deb"))
            .with_context(|| {
                format!(
                    "apt-get download earlyoom left no .deb in {}",
                    dir.display()
                )
            })?;
        crate::cmd::run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(dir))?;
    }
    let out = Command::new("ldd")
        .arg(&binary)
        .output()
        .with_context(|| format!("running ldd {}", binary.display()))?;
    let mut files = vec![("earlyoom".to_string(), binary.clone())];
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let path = match line.split_once("=>") {
            Some((_, right)) => right.split_whitespace().next(),
            None => line.split_whitespace().next(),
        };
        let Some(path) = path.filter(|p| p.starts_with('/')) else {
            continue;
        };
        let path = PathBuf::from(path);
        if let Some(name) = path.file_name() {
            files.push((name.to_string_lossy().to_string(), path.clone()));
        }
    }
    if !files.iter().any(|(n, _)| n.starts_with("ld-linux")) {
        bail!("ldd {} named no dynamic loader", binary.display());
    }
    Ok(files)
}
