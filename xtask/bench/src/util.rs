//! Small helpers of the developer commands, the races, the demos and the privileged tests
//! alike: the clock the agent stamps its log with, a field of its log lines, a bounded
//! wait, the cgroup mounts, the teardown of a cgroup tree of our own, cargo, a command's
//! output, and a loop-device disk for real page cache.
use std::ffi::CString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// CLOCK_MONOTONIC in nanoseconds: the clock of the agent's `at_ns` log fields.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Milliseconds from `start_ns` to `at_ns` (both [`monotonic_ns`]), 0 for a stamp before
/// the start.
pub fn ms_after(start_ns: u64, at_ns: u64) -> f64 {
    at_ns.saturating_sub(start_ns) as f64 / 1e6
}

/// `MONITOR run --config CONFIG`, uncoloured, stdin closed, stdout and stderr appended to
/// `log`: the agent as every race, demo and test starts it (the caller adds its
/// `RUST_LOG` and what else it needs, and spawns it).
pub fn monitor_run(monitor: &Path, config: &Path, log: &std::fs::File) -> Result<Command> {
    let mut command = Command::new(monitor);
    command
        .args(["run", "--config"])
        .arg(config)
        .env("NO_COLOR", "1")
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone().context("the agent's log file")?)
        .stderr(log.try_clone().context("the agent's log file")?);
    Ok(command)
}

/// A field `key=value` or `key="value"` of one of the agent's (tracing) log lines.
pub fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let start = line.find(&format!(" {key}="))? + key.len() + 2;
    let rest = &line[start..];
    match rest.strip_prefix('"') {
        Some(quoted) => quoted.split('"').next(),
        None => rest.split_whitespace().next(),
    }
}

/// The values of `key` in a systemd unit's text (`Key=value` lines, comments left out),
/// in their order: the packaged unit as the package's checks read it.
pub fn unit_values(unit: &str, key: &str) -> Vec<String> {
    unit.lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .filter(|(k, _)| *k == key)
        .map(|(_, v)| v.to_string())
        .collect()
}

/// Waits until `check` returns true, checking every 10 ms; fails naming `what` after
/// `timeout`.
pub fn wait(what: &str, timeout: Duration, mut check: impl FnMut() -> bool) -> Result<()> {
    let deadline = Instant::now() + timeout;
    while !check() {
        if Instant::now() > deadline {
            bail!("timed out after {timeout:?} waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

/// The cgroup mounts: every hierarchy (v1 controllers and cgroup2), the one holding the
/// memory controller, and whether that is cgroup v1.
pub fn cgroup_mounts() -> (Vec<PathBuf>, Option<PathBuf>, bool) {
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

/// Kills every process in a cgroup tree of our own, then removes it bottom-up.
pub fn remove_cgroup_tree(dir: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            // A child left behind shows as the parent's removal failing below.
            let _ = remove_cgroup_tree(&entry.path());
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
            // SAFETY: kill takes plain integers; these pids live in cgroups we created.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    remove_cgroup_dir(dir)
}

/// Removes an empty cgroup directory, retrying for a second while the kernel still
/// counts exiting tasks in it; a directory already gone is no error.
pub fn remove_cgroup_dir(dir: &Path) -> std::io::Result<()> {
    let mut last = Ok(());
    for _ in 0..50 {
        match std::fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => last = Err(e),
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    last
}

/// [`remove_cgroup_tree`] of `<mount>/<root>` in every hierarchy.
pub fn remove_cgroup_root(root: &str) {
    for mount in cgroup_mounts().0 {
        let dir = mount.join(root);
        if dir.exists() {
            let _ = remove_cgroup_tree(&dir);
        }
    }
}

/// `cargo` as invoked by `cargo xtask` (the same toolchain).
pub fn cargo() -> Command {
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

/// Makes `command`'s child write "0" into each `cgroup.procs` file before it execs: the
/// child joins those cgroups, so not one page it touches is charged elsewhere.
pub fn join_before_exec(command: &mut Command, procs_files: &[PathBuf]) {
    let files: Vec<CString> = procs_files
        .iter()
        .map(|p| CString::new(p.as_os_str().as_encoded_bytes()).expect("path without NUL"))
        .collect();
    // SAFETY: the closure runs in the forked child before exec and only calls
    // async-signal-safe functions (open, write, close) on buffers prepared before fork.
    unsafe {
        command.pre_exec(move || {
            for file in &files {
                let fd = libc::open(file.as_ptr(), libc::O_WRONLY);
                if fd < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                let ok = libc::write(fd, b"0".as_ptr().cast(), 1) == 1;
                libc::close(fd);
                if !ok {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
}

/// An ext2 filesystem on a loop device over a sparse file (`<dir>.img`), mounted at `dir`:
/// files there have real, reclaimable page cache, which a tmpfs (a VM's only filesystem
/// otherwise) does not. Unmounted, detached and removed on drop.
pub struct LoopDisk {
    pub dir: PathBuf,
    device: String,
    backing: PathBuf,
}

impl LoopDisk {
    pub fn new(dir: &Path, mib: u64) -> Result<LoopDisk> {
        let backing = dir.with_extension("img");
        let file = std::fs::File::create(&backing)
            .with_context(|| format!("creating {}", backing.display()))?;
        file.set_len(mib << 20)
            .with_context(|| format!("sizing {}", backing.display()))?;
        drop(file);
        let device = output(Command::new("losetup").arg("-f"))?;
        output(Command::new("losetup").arg(&device).arg(&backing))?;
        let disk = LoopDisk {
            dir: dir.to_path_buf(),
            device,
            backing,
        };
        output(Command::new("mke2fs").args(["-F", &disk.device]))?;
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        output(
            Command::new("mount")
                .args(["-t", "ext2", &disk.device])
                .arg(dir),
        )?;
        Ok(disk)
    }
}

impl Drop for LoopDisk {
    fn drop(&mut self) {
        // Lazily: a process still reading there (a pod not yet reaped) does not keep it.
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        let _ = Command::new("losetup").args(["-d", &self.device]).status();
        let _ = std::fs::remove_file(&self.backing);
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Runs a command; its stdout, trimmed.
pub fn output(command: &mut Command) -> Result<String> {
    let out = command
        .output()
        .with_context(|| format!("running {command:?}"))?;
    if !out.status.success() {
        bail!(
            "{command:?}: {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The kernel's report of its last OOM kill (from its "invoked oom-killer" line, at most
/// `lines` lines of `dmesg`), for a trial the OOM killer ended: which allocation failed and
/// what memory the node held then. Empty when dmesg has none or cannot be read.
pub fn last_oom_report(lines: usize) -> Vec<String> {
    let Ok(out) = Command::new("dmesg").output() else {
        return Vec::new();
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let all: Vec<&str> = text.lines().collect();
    match all.iter().rposition(|l| l.contains("invoked oom-killer")) {
        Some(start) => all[start..]
            .iter()
            .take(lines)
            .map(|l| l.to_string())
            .collect(),
        None => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case::plain("x wake source=ebpf at_ns=5", "at_ns", Some("5"))]
    #[case::quoted(
        "event reason=\"Killing\" object=\"demo/hog\"",
        "object",
        Some("demo/hog")
    )]
    #[case::quoted_with_spaces("x msg=\"a b\" y=1", "msg", Some("a b"))]
    #[case::prefix_of_another_key("x at_ns_x=1 at_ns=2", "at_ns", Some("2"))]
    #[case::missing("x y=1", "z", None)]
    fn fields_are_read_from_log_lines(
        #[case] line: &str,
        #[case] key: &str,
        #[case] expected: Option<&str>,
    ) {
        assert_eq!(field(line, key), expected);
    }

    #[test]
    fn the_clock_moves_forward() {
        let a = monotonic_ns();
        assert!(monotonic_ns() >= a && a > 0);
    }

    #[test]
    fn a_wait_ends_with_its_check_or_its_timeout() {
        assert!(wait("now", Duration::ZERO, || true).is_ok());
        let err = wait("never", Duration::from_millis(20), || false).unwrap_err();
        assert!(err.to_string().contains("waiting for never"), "{err}");
    }
}
