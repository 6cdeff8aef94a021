//! A private containerd for tests: its own root, state, socket, config, CNI and runc
//! directories under `/tmp/monitor-test-containerd-<pid>-<n>`, the sandbox image
//! [`PAUSE_IMAGE`] and [`BUSYBOX_IMAGE`] imported from locally built OCI archives (no
//! registry), and everything it made taken down when the fixture is dropped — even when
//! the test panicked. A run that was killed outright is cleaned up by the next one
//! ([`cleanup_stale`], which [`Containerd::start`] calls).
//!
//! ```no_run
//! use monitor_tests::containerd::Containerd;
//! use monitor_tests::oci::OciImage;
//!
//! let containerd = Containerd::start()?;
//! // The CRI listens on containerd.socket() (runtime and image service alike).
//! containerd.import(&OciImage::busybox("localhost/big:1").with_filler(64 << 20))?;
//! let images = containerd.ctr(&["images", "ls", "-q"])?;
//! # anyhow::Ok(())
//! ```
//!
//! Host safety: nothing here uses `/run/containerd/containerd.sock` or the host's
//! containerd root. A process is only ever signalled when it is the containerd this
//! fixture started (or, for a stale directory, one whose command line names that
//! directory's config), a `containerd-shim*` whose command line names this instance's
//! socket after `-address`, or a descendant of such a shim. Only mounts under the
//! instance directory are unmounted, and it is only removed once none is left.
//!
//! Outside the instance directory remain: shim sockets in `/run/containerd/s` whose
//! owner could not be determined (their names are hashes, containerd hard-codes the
//! directory), `ctr run`'s FIFOs under `/run/containerd/fifo`, and cgroup parents that
//! were not tracked with [`Containerd::track_cgroup_parent`]. Containers started with
//! `ctr run` keep their runc state under `/run/containerd/runc/k8s.io` unless they are
//! given `--runc-root` [`Containerd::runc_root`].
use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::oci::{BUSYBOX, OciImage};
pub use crate::oci::{BUSYBOX_IMAGE, PAUSE_IMAGE};

mod teardown;

use teardown::*;
pub use teardown::{cleanup_stale, mounts_under};

/// The containerd namespace the CRI uses; [`Containerd::ctr`] works in it.
pub const NAMESPACE: &str = "k8s.io";
/// Instance directories are `/tmp/<DIR_PREFIX><pid>-<n>`.
pub const DIR_PREFIX: &str = "monitor-test-containerd-";
/// Where containerd 1.6's shims put their sockets, whatever the instance (hard-coded).
const SHIM_SOCKET_DIR: &str = "/run/containerd/s";
/// How long one `ctr` call of [`Containerd::ctr`] may take.
const CTR_TIMEOUT: Duration = Duration::from_secs(120);
/// How long one `ctr` call may take while tearing down.
const TEARDOWN_CTR_TIMEOUT: Duration = Duration::from_secs(15);
const READY_TIMEOUT: Duration = Duration::from_secs(20);

static NEXT_INSTANCE: AtomicU32 = AtomicU32::new(0);

/// A running private containerd (see the module documentation). Dropping it removes
/// every task and container, stops containerd, kills any shim left behind, unmounts
/// whatever is mounted under [`Containerd::dir`], removes tracked cgroups and deletes the
/// directory.
///
/// Do not keep one in a `static`: statics are never dropped, so its cleanup would be left
/// to the next run's [`cleanup_stale`].
#[derive(Debug)]
pub struct Containerd {
    dir: PathBuf,
    socket: PathBuf,
    root: PathBuf,
    config: PathBuf,
    child: Option<Child>,
    tracked_cgroups: Mutex<Vec<String>>,
    imports: AtomicU32,
}

impl Containerd {
    /// Starts a private containerd in a fresh directory
    /// `/tmp/monitor-test-containerd-<pid>-<n>` and imports [`PAUSE_IMAGE`] (the CRI's
    /// sandbox image) and [`BUSYBOX_IMAGE`] into namespace `k8s.io`. Ready when this
    /// returns (well under a second here).
    ///
    /// Fails (does not panic) when not root, when containerd, runc, ctr or a static
    /// `/bin/busybox` is missing (the message says what to install), when containerd's
    /// default config has changed so that the private paths cannot be set (containerd
    /// 1.6's is expected), or when containerd does not answer within 20 s (the error
    /// carries the end of its log). Whatever was started is cleaned up before it returns.
    pub fn start() -> Result<Containerd> {
        Containerd::start_with(None)
    }

    /// As [`Containerd::start`], with containerd's root (content store and snapshots: the
    /// image filesystem) on a tmpfs of `mib` MiB of its own, so that image filesystem
    /// usage is small, bounded and exact. Unmounted with the rest on drop.
    pub fn start_with_image_disk(mib: u64) -> Result<Containerd> {
        Containerd::start_with(Some(mib))
    }

    fn start_with(image_disk_mib: Option<u64>) -> Result<Containerd> {
        cleanup_stale();
        if !nix::unistd::geteuid().is_root() {
            bail!("a private containerd needs root");
        }
        if let Some(reason) = available() {
            bail!("{reason}");
        }
        let dir = PathBuf::from(format!(
            "/tmp/{DIR_PREFIX}{}-{}",
            std::process::id(),
            NEXT_INSTANCE.fetch_add(1, Ordering::Relaxed)
        ));
        if std::fs::symlink_metadata(&dir).is_ok() {
            // Left by an earlier process that had our pid.
            cleanup_stale_dir(&dir);
        }
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .with_context(|| format!("creating {}", dir.display()))?;
        // From here on, an early return drops the fixture, which cleans up.
        let mut fixture = Containerd {
            socket: dir.join("containerd.sock"),
            root: dir.join("root"),
            config: dir.join("config.toml"),
            dir,
            child: None,
            tracked_cgroups: Mutex::new(Vec::new()),
            imports: AtomicU32::new(0),
        };
        for sub in ["root", "state", "cni/bin", "cni/net.d", "runc-root", "opt"] {
            let path = fixture.dir.join(sub);
            std::fs::create_dir_all(&path)
                .with_context(|| format!("creating {}", path.display()))?;
        }
        if let Some(mib) = image_disk_mib {
            nix::mount::mount(
                Some("monitor-test-imagefs"),
                &fixture.root,
                Some("tmpfs"),
                nix::mount::MsFlags::MS_NOSUID | nix::mount::MsFlags::MS_NODEV,
                Some(format!("size={mib}m,mode=0700").as_str()),
            )
            .with_context(|| format!("mounting a {mib} MiB tmpfs on {}", fixture.root.display()))?;
        }
        let config = private_config(&fixture.dir)?;
        std::fs::write(&fixture.config, config)
            .with_context(|| format!("writing {}", fixture.config.display()))?;

        let log_path = fixture.log_path();
        let log = std::fs::File::create(&log_path)
            .with_context(|| format!("creating {}", log_path.display()))?;
        let mut command = Command::new("containerd");
        command
            .arg("--config")
            .arg(&fixture.config)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        // SAFETY: the closure runs in the forked child before exec and only calls setsid,
        // which is async-signal-safe.
        unsafe {
            command.pre_exec(|| {
                if libc::setsid() < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = command
            .spawn()
            .context("starting containerd (is it installed? `cargo xtask setup`)")?;
        let pid = child.id();
        fixture.child = Some(child);
        std::fs::write(fixture.dir.join("containerd.pid"), pid.to_string())?;
        fixture.wait_ready()?;
        fixture.import(&OciImage::pause())?;
        fixture.import(&OciImage::busybox(BUSYBOX_IMAGE))?;
        Ok(fixture)
    }

    /// The containerd (and CRI) gRPC socket.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// containerd's root directory: the content store and the snapshots (the image
    /// filesystem) live under it.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// containerd's state directory (bundles, CRI sandbox files, network namespaces).
    pub fn state(&self) -> PathBuf {
        self.dir.join("state")
    }

    /// The instance directory, `/tmp/monitor-test-containerd-<pid>-<n>`.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The runc root the CRI's runc runtime is configured with; give it to `ctr run
    /// --runc-root` so that containers made with ctr keep their runc state here too.
    pub fn runc_root(&self) -> PathBuf {
        self.dir.join("runc-root")
    }

    /// containerd's log (stdout and stderr).
    pub fn log_path(&self) -> PathBuf {
        self.dir.join("containerd.log")
    }

    /// The containerd process id (None after it exited and was reaped).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The last `lines` lines of containerd's log, for error messages.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(self.log_path()).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Builds `image`'s OCI archive in the instance directory and imports (and unpacks) it
    /// with `ctr images import` into namespace `k8s.io`, where the CRI sees it under
    /// [`OciImage::name`]. The archive is deleted afterwards. See
    /// [`Containerd::image_digest`] for the digest it got.
    pub fn import(&self, image: &OciImage) -> Result<()> {
        let n = self.imports.fetch_add(1, Ordering::Relaxed);
        let archive = self.dir.join(format!("import-{n}.tar"));
        let result = image.write_archive(&archive).and_then(|_| {
            self.ctr(&["images", "import", &archive.to_string_lossy()])
                .with_context(|| format!("importing {}", image.name()))
        });
        let _ = std::fs::remove_file(&archive);
        result.map(|_| ())
    }

    /// Runs `ctr -a <socket> -n k8s.io ARGS` (for at most two minutes) and returns its
    /// stdout; fails with its stderr when it exits non-zero.
    pub fn ctr(&self, args: &[&str]) -> Result<String> {
        ctr(&self.socket, NAMESPACE, args, CTR_TIMEOUT)
    }

    /// The manifest digest (`sha256:…`) `ctr images ls` shows for `reference`.
    pub fn image_digest(&self, reference: &str) -> Result<String> {
        let listing = self.ctr(&["images", "ls"])?;
        listing
            .lines()
            .skip(1)
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .find(|cols| cols.first() == Some(&reference))
            .and_then(|cols| cols.get(2).map(|d| d.to_string()))
            .with_context(|| format!("{reference} is not in `ctr images ls`:\n{listing}"))
    }

    /// Records a cgroup parent, relative to the hierarchy mounts (e.g.
    /// `monitor-test-123/kubepods`), whose subtree is removed on drop: depth first, only
    /// empty directories (`rmdir`), in every mounted cgroup v1 hierarchy and the cgroup2
    /// one. Use it for the `cgroup_parent` the pods are given: runc removes a container's
    /// own cgroup but leaves its parents behind. The path itself is removed too (its
    /// ancestors are not). Also recorded in the instance directory, for [`cleanup_stale`].
    ///
    /// Panics on an absolute or empty path, or one with `.` or `..`.
    pub fn track_cgroup_parent(&self, relative: &str) {
        let relative = checked_cgroup_path(relative)
            .unwrap_or_else(|| panic!("not a relative cgroup path: {relative:?}"));
        self.tracked_cgroups
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(relative.clone());
        let record = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("tracked-cgroups"))
            .and_then(|mut f| writeln!(f, "{relative}"));
        if let Err(e) = record {
            eprintln!("warning: recording tracked cgroup {relative}: {e}");
        }
    }

    /// Waits until `ctr version` answers on our socket.
    fn wait_ready(&mut self) -> Result<()> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(child) = &mut self.child
                && let Some(status) = child.try_wait()?
            {
                bail!(
                    "containerd exited ({status}) before it was ready; the end of {}:\n{}",
                    self.log_path().display(),
                    self.log_tail(30)
                );
            }
            let answered = ctr(
                &self.socket,
                NAMESPACE,
                &["version"],
                Duration::from_secs(5),
            );
            if answered.is_ok() {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "containerd did not answer on {} within {READY_TIMEOUT:?} ({:#}); the end of {}:\n{}",
                    self.socket.display(),
                    answered.unwrap_err(),
                    self.log_path().display(),
                    self.log_tail(30)
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Kills and deletes every task and deletes every container, in every namespace, by
    /// asking our containerd. CRI sandboxes are containers too.
    fn remove_containers(&self) {
        let run = |ns: &str, args: &[&str]| ctr(&self.socket, ns, args, TEARDOWN_CTR_TIMEOUT);
        let mut namespaces: BTreeSet<String> = run(NAMESPACE, &["namespaces", "ls", "-q"])
            .map(|out| out.lines().map(|l| l.trim().to_string()).collect())
            .unwrap_or_default();
        namespaces.insert(NAMESPACE.to_string());
        namespaces.retain(|ns| !ns.is_empty());
        for ns in &namespaces {
            let tasks = ids(run(ns, &["tasks", "ls", "-q"]));
            for id in &tasks {
                let _ = run(ns, &["tasks", "kill", "--all", "--signal", "SIGKILL", id]);
            }
            for id in &tasks {
                // A task can end and go by itself between the listing and here.
                if let Err(e) = run(ns, &["tasks", "rm", "--force", id])
                    && !format!("{e:#}").contains("not found")
                {
                    eprintln!("warning: removing task {ns}/{id}: {e:#}");
                }
            }
            for id in ids(run(ns, &["containers", "ls", "-q"])) {
                if let Err(e) = run(ns, &["containers", "rm", &id]) {
                    eprintln!("warning: removing container {ns}/{id}: {e:#}");
                }
            }
        }
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        let mut shim_sockets = shim_sockets(&self.dir);
        let running = self
            .child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)));
        if running {
            self.remove_containers();
            shim_sockets.extend(self::shim_sockets(&self.dir));
        }
        if let Some(mut child) = self.child.take() {
            stop_child(&mut child);
        }
        let tracked = self
            .tracked_cgroups
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        teardown(&self.dir, &self.socket, shim_sockets, &tracked);
    }
}

/// `None` when containerd, containerd-shim-runc-v2, runc, ctr and a statically linked
/// `/bin/busybox` are all present; otherwise why not (for a SKIP line).
pub fn available() -> Option<String> {
    const INSTALL: &str = "`cargo xtask setup` installs containerd, runc and busybox-static";
    for (program, arg) in [
        ("containerd", "--version"),
        ("runc", "--version"),
        ("ctr", "--version"),
    ] {
        match Command::new(program).arg(arg).stdin(Stdio::null()).output() {
            Ok(out) if out.status.success() => {}
            Ok(out) => return Some(format!("`{program} {arg}` failed: {}", out.status)),
            Err(e) => return Some(format!("{program} does not run ({e}); {INSTALL}")),
        }
    }
    if on_path("containerd-shim-runc-v2").is_none() {
        return Some(format!("containerd-shim-runc-v2 is not on PATH; {INSTALL}"));
    }
    match std::fs::read(BUSYBOX) {
        Err(e) => Some(format!(
            "{BUSYBOX}: {e}; install busybox-static ({INSTALL})"
        )),
        Ok(bytes) if has_interpreter(&bytes) => Some(format!(
            "{BUSYBOX} is dynamically linked: install busybox-static ({INSTALL})"
        )),
        Ok(_) => None,
    }
}

/// SIGTERM, then SIGKILL after 10 s; reaps it.
fn stop_child(child: &mut Child) {
    if matches!(child.try_wait(), Ok(Some(_))) {
        return;
    }
    let pid = Pid::from_raw(child.id() as i32);
    let _ = kill(pid, Signal::SIGTERM);
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if matches!(child.try_wait(), Ok(Some(_))) {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!("warning: containerd {pid} ignored SIGTERM for 10 s; killing it");
    let _ = child.kill();
    let _ = child.wait();
}

/// The lines of a successful `ctr ... ls -q`.
fn ids(listing: Result<String>) -> Vec<String> {
    listing
        .map(|out| {
            out.lines()
                .map(|l| l.trim().to_string())
                .filter(|l| !l.is_empty())
                .collect()
        })
        .unwrap_or_default()
}

/// `ctr -a <socket> -n <namespace> ARGS`: its stdout, or an error with its stderr.
fn ctr(socket: &Path, namespace: &str, args: &[&str], timeout: Duration) -> Result<String> {
    let mut command = Command::new("ctr");
    command
        .arg("-a")
        .arg(socket)
        .args(["-n", namespace])
        .args(args);
    let out = output_with_timeout(&mut command, timeout)?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        bail!(
            "`ctr -n {namespace} {}` failed ({}): {}{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim(),
            if stdout.trim().is_empty() {
                String::new()
            } else {
                format!("\nstdout: {}", stdout.trim())
            }
        );
    }
    Ok(stdout)
}

/// Runs a command with stdin closed, collecting its output; kills it after `timeout`.
fn output_with_timeout(command: &mut Command, timeout: Duration) -> Result<Output> {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {command:?}"))?;
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut bytes);
            }
            bytes
        })
    };
    let stdout = drain(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let stderr = drain(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!("{command:?} did not finish within {timeout:?}; killed it");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    Ok(Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    })
}

/// containerd's default config (`containerd config default`, containerd 1.6) with every
/// path made private to `dir`. Fails naming the line when an expected default is not
/// there, so that a new containerd version is noticed rather than half-configured.
fn private_config(dir: &Path) -> Result<String> {
    let out = Command::new("containerd")
        .args(["config", "default"])
        .stdin(Stdio::null())
        .output()
        .context("running `containerd config default`")?;
    if !out.status.success() {
        bail!(
            "`containerd config default` failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let d = dir.display();
    const CRI: &str = r#"[plugins."io.containerd.grpc.v1.cri"]"#;
    let mut edits: Vec<(Option<&str>, &str, String)> = vec![
        (
            None,
            r#"root = "/var/lib/containerd""#,
            format!(r#"root = "{d}/root""#),
        ),
        (
            None,
            r#"state = "/run/containerd""#,
            format!(r#"state = "{d}/state""#),
        ),
        (
            Some("[grpc]"),
            r#"address = "/run/containerd/containerd.sock""#,
            format!(r#"address = "{d}/containerd.sock""#),
        ),
        (
            Some(CRI),
            "netns_mounts_under_state_dir = false",
            "netns_mounts_under_state_dir = true".into(),
        ),
        // Without CAP_SYS_RESOURCE runc cannot give the sandbox its oomScoreAdj of -998
        // and fails with "can't get final child's PID from pipe: EOF".
        (
            Some(CRI),
            "restrict_oom_score_adj = false",
            "restrict_oom_score_adj = true".into(),
        ),
        (
            Some(CRI),
            r#"sandbox_image = "registry.k8s.io/pause:3.6""#,
            format!(r#"sandbox_image = "{PAUSE_IMAGE}""#),
        ),
        (
            Some(r#"[plugins."io.containerd.grpc.v1.cri".cni]"#),
            r#"bin_dir = "/opt/cni/bin""#,
            format!(r#"bin_dir = "{d}/cni/bin""#),
        ),
        (
            Some(r#"[plugins."io.containerd.grpc.v1.cri".cni]"#),
            r#"conf_dir = "/etc/cni/net.d""#,
            format!(r#"conf_dir = "{d}/cni/net.d""#),
        ),
        (
            Some(r#"[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]"#),
            r#"Root = """#,
            format!(r#"Root = "{d}/runc-root""#),
        ),
        (
            Some(r#"[plugins."io.containerd.internal.v1.opt"]"#),
            r#"path = "/opt/containerd""#,
            format!(r#"path = "{d}/opt""#),
        ),
    ];
    // pivot_root(2) cannot leave the initramfs (the test VM's root): runc then changes root
    // with a mount move instead, as it does for any runtime on such a root.
    if root_is_initramfs() {
        edits.push((
            Some(r#"[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]"#),
            "NoPivotRoot = false",
            "NoPivotRoot = true".into(),
        ));
    }
    let mut lines: Vec<String> = String::from_utf8(out.stdout)
        .context("containerd's default config is not UTF-8")?
        .lines()
        .map(String::from)
        .collect();
    for (section, old, new) in edits {
        let index = find_setting(&lines, section, old).with_context(|| {
            format!(
                "containerd's default config (`containerd config default`) has no line `{old}`{}: \
                 a containerd other than 1.6? The test fixture must learn its config",
                section.map(|s| format!(" in {s}")).unwrap_or_default()
            )
        })?;
        let indent: String = lines[index]
            .chars()
            .take_while(|c| c.is_whitespace())
            .collect();
        lines[index] = format!("{indent}{new}");
    }
    let mut text = lines.join("\n");
    text.push('\n');
    Ok(text)
}

/// Whether `/` is the kernel's initial root filesystem (type `rootfs`), which
/// pivot_root(2) refuses to move.
pub fn root_is_initramfs() -> bool {
    std::fs::read_to_string("/proc/self/mountinfo").is_ok_and(|text| {
        text.lines()
            .rfind(|line| line.split_whitespace().nth(4) == Some("/"))
            .and_then(|line| line.split_once(" - "))
            .and_then(|(_, tail)| tail.split_whitespace().next())
            == Some("rootfs")
    })
}

/// The index of the first line equal (trimmed) to `setting`: among the top-level settings
/// (before the first table) when `section` is None, else among the settings directly
/// under the table header `section`.
fn find_setting(lines: &[String], section: Option<&str>, setting: &str) -> Option<usize> {
    let start = match section {
        None => 0,
        Some(header) => lines.iter().position(|l| l.trim() == header)? + 1,
    };
    lines[start..]
        .iter()
        .take_while(|l| !l.trim_start().starts_with('['))
        .position(|l| l.trim() == setting)
        .map(|i| start + i)
}

/// Whether an ELF file asks for a program interpreter (is dynamically linked).
fn has_interpreter(elf: &[u8]) -> bool {
    const PT_INTERP: u32 = 3;
    let read_u16 = |at: usize| {
        elf.get(at..at + 2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
    };
    let read_u32 = |at: usize| {
        elf.get(at..at + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    let read_u64 = |at: usize| {
        elf.get(at..at + 8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
    };
    // Only 64-bit little-endian ELF is understood; anything else counts as static.
    if elf.get(..6) != Some(b"\x7fELF\x02\x01".as_slice()) {
        return false;
    }
    let (Some(phoff), Some(phentsize), Some(phnum)) =
        (read_u64(0x20), read_u16(0x36), read_u16(0x38))
    else {
        return false;
    };
    (0..usize::from(phnum)).any(|i| {
        usize::try_from(phoff)
            .ok()
            .and_then(|off| read_u32(off + i * usize::from(phentsize)))
            == Some(PT_INTERP)
    })
}

/// The first `name` on PATH.
fn on_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

#[cfg(test)]
mod tests;

/// A sandbox config as the kubelet (and the agent's CRI runtime) gives a pod on the host's
/// network: its own pid namespace, the pod's IPC, `cgroup_parent` (relative to the
/// hierarchies' mounts) as its cgroup parent, its logs under `log_dir`.
pub fn host_network_sandbox(
    name: &str,
    uid: &str,
    namespace: &str,
    log_dir: &Path,
    cgroup_parent: &str,
    labels: std::collections::HashMap<String, String>,
) -> monitor::runtime::cri::api::PodSandboxConfig {
    use monitor::runtime::cri::api;
    api::PodSandboxConfig {
        metadata: Some(api::PodSandboxMetadata {
            name: name.into(),
            uid: uid.into(),
            namespace: namespace.into(),
            attempt: 0,
        }),
        log_directory: log_dir.display().to_string(),
        labels,
        linux: Some(api::LinuxPodSandboxConfig {
            cgroup_parent: format!("/{}", cgroup_parent.trim_start_matches('/')),
            security_context: Some(api::LinuxSandboxSecurityContext {
                namespace_options: Some(api::NamespaceOption {
                    network: api::NamespaceMode::Node as i32,
                    pid: api::NamespaceMode::Container as i32,
                    ipc: api::NamespaceMode::Pod as i32,
                    ..api::NamespaceOption::default()
                }),
                ..api::LinuxSandboxSecurityContext::default()
            }),
            ..api::LinuxPodSandboxConfig::default()
        }),
        ..api::PodSandboxConfig::default()
    }
}
