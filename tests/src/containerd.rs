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
use std::collections::{BTreeSet, HashMap};
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

/// Removes what earlier test processes left: every directory
/// `/tmp/monitor-test-containerd-<pid>-<n>` whose process is gone. Its containerd is
/// killed (only when the process in its pid file is a `containerd` whose command line
/// names that directory's config), its shims and their descendants too (only those whose
/// command line names that directory's socket), runc containers whose state names the
/// directory are deleted, mounts under it unmounted, cgroups it tracked removed (empty
/// ones only), and the directory deleted.
pub fn cleanup_stale() {
    let Ok(entries) = std::fs::read_dir("/tmp") else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        let Some((pid, n)) = name
            .strip_prefix(DIR_PREFIX)
            .and_then(|rest| rest.split_once('-'))
        else {
            continue;
        };
        let (Ok(pid), Ok(_)) = (pid.parse::<u32>(), n.parse::<u32>()) else {
            continue;
        };
        // Never follow a symlink someone planted in /tmp.
        if !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        if pid == std::process::id() || process_alive(pid as i32) {
            continue;
        }
        eprintln!("containerd fixture: cleaning up {}", entry.path().display());
        cleanup_stale_dir(&entry.path());
    }
}

/// Cleans up an instance directory whose owner is gone.
fn cleanup_stale_dir(dir: &Path) {
    let config = dir.join("config.toml");
    if let Some(pid) = std::fs::read_to_string(dir.join("containerd.pid"))
        .ok()
        .and_then(|s| s.trim().parse::<i32>().ok())
    {
        let is_ours = cmdline(pid).is_some_and(|args| {
            args.first()
                .is_some_and(|a| Path::new(a).file_name() == Some("containerd".as_ref()))
                && args.iter().any(|a| Path::new(a) == config)
        });
        if is_ours {
            signal_and_wait(pid, Signal::SIGTERM, Duration::from_secs(5));
            signal_and_wait(pid, Signal::SIGKILL, Duration::from_secs(5));
        }
    }
    let tracked: Vec<String> = std::fs::read_to_string(dir.join("tracked-cgroups"))
        .unwrap_or_default()
        .lines()
        .filter_map(checked_cgroup_path)
        .collect();
    teardown(
        dir,
        &dir.join("containerd.sock"),
        shim_sockets(dir),
        &tracked,
    );
}

/// What is left once containerd is stopped (or gone): runc containers, shims, shim
/// sockets, mounts, tracked cgroups, the directory.
fn teardown(dir: &Path, socket: &Path, mut sockets: BTreeSet<PathBuf>, tracked: &[String]) {
    sockets.extend(shim_sockets(dir));
    delete_runc_leftovers(dir);
    kill_shims(socket);
    for socket in &sockets {
        if socket.starts_with(SHIM_SOCKET_DIR) {
            let _ = std::fs::remove_file(socket);
        }
    }
    unmount_under(dir);
    for relative in tracked {
        for mount in crate::cgroup_mounts() {
            rmdir_tree(&mount.join(relative));
        }
    }
    let left = mounts_under(dir);
    if !left.is_empty() {
        eprintln!(
            "warning: not removing {}: still mounted under it: {left:?}",
            dir.display()
        );
        return;
    }
    if let Err(e) = std::fs::remove_dir_all(dir)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        eprintln!("warning: removing {}: {e}", dir.display());
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

/// The shim sockets our shims wrote into their bundles (`<state>/io.containerd.runtime.v2
/// .task/<ns>/<id>/address`: `unix:///run/containerd/s/<hash>`).
fn shim_sockets(dir: &Path) -> BTreeSet<PathBuf> {
    let mut sockets = BTreeSet::new();
    for (_, _, bundle) in bundles(dir) {
        if let Ok(address) = std::fs::read_to_string(bundle.join("address")) {
            let path = address.trim().trim_start_matches("unix://");
            let path = Path::new(path);
            if path.parent() == Some(Path::new(SHIM_SOCKET_DIR)) {
                sockets.insert(path.to_path_buf());
            }
        }
    }
    sockets
}

/// (namespace, id, bundle directory) of every task bundle under the state directory.
fn bundles(dir: &Path) -> Vec<(String, String, PathBuf)> {
    let mut found = Vec::new();
    let tasks = dir.join("state/io.containerd.runtime.v2.task");
    for ns in subdirs(&tasks) {
        for bundle in subdirs(&ns) {
            let name = |p: &Path| p.file_name().map(|n| n.to_string_lossy().to_string());
            if let (Some(ns), Some(id)) = (name(&ns), name(&bundle)) {
                found.push((ns, id, bundle));
            }
        }
    }
    found
}

fn subdirs(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default()
}

/// `runc delete --force` for each container of ours that runc still knows, in our runc
/// root or the default one ctr uses: only when its `state.json` names our directory.
fn delete_runc_leftovers(dir: &Path) {
    let marker = format!("{}/", dir.display());
    for (ns, id, _) in bundles(dir) {
        for root in [
            dir.join("runc-root").join(&ns),
            Path::new("/run/containerd/runc").join(&ns),
        ] {
            let state = root.join(&id).join("state.json");
            let names_us = std::fs::read_to_string(&state).is_ok_and(|s| s.contains(&marker));
            if !names_us {
                continue;
            }
            let mut command = Command::new("runc");
            command
                .arg("--root")
                .arg(&root)
                .args(["delete", "--force", &id]);
            match output_with_timeout(&mut command, TEARDOWN_CTR_TIMEOUT) {
                Ok(out) if out.status.success() => {}
                Ok(out) => eprintln!(
                    "warning: runc delete {id}: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                ),
                Err(e) => eprintln!("warning: runc delete {id}: {e:#}"),
            }
        }
    }
}

/// SIGKILLs every shim whose command line has `-address <socket>`, after its descendants
/// (the containers' processes, which would otherwise be reparented and live on).
fn kill_shims(socket: &Path) {
    let socket = socket.to_string_lossy();
    for _round in 0..3 {
        let procs = processes();
        let shims: Vec<i32> = procs
            .iter()
            .filter(|(_, p)| {
                p.args.first().is_some_and(|a| {
                    Path::new(a)
                        .file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with("containerd-shim"))
                }) && p
                    .args
                    .windows(2)
                    .any(|w| w[0] == "-address" && w[1] == socket)
            })
            .map(|(pid, _)| *pid)
            .collect();
        if shims.is_empty() {
            return;
        }
        for shim in shims {
            let mut descendants = Vec::new();
            let mut frontier = vec![shim];
            while let Some(parent) = frontier.pop() {
                for (pid, p) in &procs {
                    if p.ppid == parent && !descendants.contains(pid) {
                        descendants.push(*pid);
                        frontier.push(*pid);
                    }
                }
            }
            for pid in descendants.iter().rev() {
                let _ = kill(Pid::from_raw(*pid), Signal::SIGKILL);
            }
            signal_and_wait(shim, Signal::SIGKILL, Duration::from_secs(5));
            for pid in descendants {
                signal_and_wait(pid, Signal::SIGKILL, Duration::from_secs(2));
            }
        }
    }
}

struct Process {
    ppid: i32,
    args: Vec<String>,
}

/// Every live (non-zombie) process: its parent and its command line.
fn processes() -> HashMap<i32, Process> {
    let mut procs = HashMap::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return procs;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        let Some((state, ppid)) = stat(pid) else {
            continue;
        };
        if state == 'Z' {
            continue;
        }
        let args = cmdline(pid).unwrap_or_default();
        procs.insert(pid, Process { ppid, args });
    }
    procs
}

/// (state, ppid) from /proc/<pid>/stat.
fn stat(pid: i32) -> Option<(char, i32)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &text[text.rfind(')')? + 1..];
    let mut fields = after.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some((state, ppid))
}

fn cmdline(pid: i32) -> Option<Vec<String>> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    Some(
        raw.split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect(),
    )
}

/// Whether `pid` exists and is not a zombie (PID 1 here may not reap the orphans).
fn process_alive(pid: i32) -> bool {
    stat(pid).is_some_and(|(state, _)| state != 'Z')
}

/// Sends `signal` and waits up to `timeout` for the process to be gone.
fn signal_and_wait(pid: i32, signal: Signal, timeout: Duration) {
    if !process_alive(pid) {
        return;
    }
    let _ = kill(Pid::from_raw(pid), signal);
    let deadline = Instant::now() + timeout;
    while process_alive(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Mount points at or under `dir`, from /proc/self/mountinfo.
pub fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    text.lines()
        .filter_map(|line| line.split_whitespace().nth(4))
        .map(|field| PathBuf::from(unescape_mountinfo(field)))
        .filter(|mount| mount.starts_with(dir))
        .collect()
}

/// Undoes mountinfo's octal escapes (`\040` for a space and so on).
fn unescape_mountinfo(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && i + 3 < bytes.len()
            && let Ok(digits) = std::str::from_utf8(&bytes[i + 1..i + 4])
            && let Ok(v) = u8::from_str_radix(digits, 8)
        {
            out.push(v);
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Unmounts everything at or under `dir`, deepest first; lazily when a plain unmount
/// fails.
fn unmount_under(dir: &Path) {
    use nix::mount::{MntFlags, umount2};
    for _round in 0..5 {
        let mut mounts = mounts_under(dir);
        if mounts.is_empty() {
            return;
        }
        mounts.sort_by_key(|m| std::cmp::Reverse(m.components().count()));
        mounts.dedup();
        for mount in mounts {
            if umount2(&mount, MntFlags::empty()).is_err()
                && let Err(e) = umount2(&mount, MntFlags::MNT_DETACH)
            {
                eprintln!("warning: unmounting {}: {e}", mount.display());
            }
        }
    }
}

/// Removes a cgroup directory and its subdirectories, depth first, with rmdir: a
/// directory that still has processes stays (after a few tries over a second).
fn rmdir_tree(dir: &Path) {
    if !std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir()) {
        return;
    }
    for child in subdirs(dir) {
        rmdir_tree(&child);
    }
    if let Err(e) = crate::remove_cgroup_dir(dir) {
        eprintln!("warning: removing cgroup {}: {e}", dir.display());
    }
}

/// A relative cgroup path without empty, `.` or `..` components, or None.
fn checked_cgroup_path(relative: &str) -> Option<String> {
    let trimmed = relative.trim().trim_end_matches('/');
    let ok = !trimmed.is_empty()
        && !trimmed.starts_with('/')
        && trimmed
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != "..");
    ok.then(|| trimmed.to_string())
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
mod tests {
    use super::*;

    #[test]
    fn unescapes_mountinfo() {
        assert_eq!(unescape_mountinfo(r"/tmp/a\040b"), "/tmp/a b");
        assert_eq!(unescape_mountinfo(r"/tmp/plain"), "/tmp/plain");
        assert_eq!(unescape_mountinfo(r"/tmp/x\"), r"/tmp/x\");
    }

    #[test]
    fn checks_cgroup_paths() {
        assert_eq!(checked_cgroup_path("a/b/").as_deref(), Some("a/b"));
        assert_eq!(checked_cgroup_path("/a"), None);
        assert_eq!(checked_cgroup_path("a/../b"), None);
        assert_eq!(checked_cgroup_path(""), None);
        assert_eq!(checked_cgroup_path("a//b"), None);
    }

    #[test]
    fn finds_settings_in_their_section() {
        let lines: Vec<String> = [
            "root = \"/x\"",
            "[grpc]",
            "  address = \"/a\"",
            "[ttrpc]",
            "  address = \"/b\"",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(find_setting(&lines, None, "root = \"/x\""), Some(0));
        assert_eq!(
            find_setting(&lines, Some("[grpc]"), "address = \"/a\""),
            Some(2)
        );
        assert_eq!(
            find_setting(&lines, Some("[ttrpc]"), "address = \"/a\""),
            None
        );
        assert_eq!(find_setting(&lines, None, "address = \"/a\""), None);
    }

    #[test]
    fn tells_static_from_dynamic() {
        // A 64-bit little-endian ELF header with one program header of type `kind` (what
        // is on this machine's /bin differs: dash on Debian, static busybox in the VM).
        let elf = |kind: u32| {
            let mut bytes = vec![0u8; 64 + 56];
            bytes[..6].copy_from_slice(b"\x7fELF\x02\x01");
            bytes[0x20..0x28].copy_from_slice(&64u64.to_le_bytes());
            bytes[0x36..0x38].copy_from_slice(&56u16.to_le_bytes());
            bytes[0x38..0x3a].copy_from_slice(&1u16.to_le_bytes());
            bytes[64..68].copy_from_slice(&kind.to_le_bytes());
            bytes
        };
        assert!(has_interpreter(&elf(3)), "PT_INTERP: dynamically linked");
        assert!(!has_interpreter(&elf(1)), "PT_LOAD only: static");
        assert!(!has_interpreter(&elf(3)[..66]), "truncated program headers");
        assert!(!has_interpreter(b"not an elf"));
    }
}
