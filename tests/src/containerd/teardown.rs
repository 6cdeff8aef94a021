//! Taking a private containerd down, after its fixture or after a killed run: the runc state
//! of its tasks, its shims and their descendants, mounts under its directory, the cgroups
//! it tracked, the directory itself. Nothing is signalled or removed unless it names this
//! instance's directory or socket (see the parent module's host-safety rules).
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::*;

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
pub(super) fn cleanup_stale_dir(dir: &Path) {
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
pub(super) fn teardown(
    dir: &Path,
    socket: &Path,
    mut sockets: BTreeSet<PathBuf>,
    tracked: &[String],
) {
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

/// The shim sockets our shims wrote into their bundles (`<state>/io.containerd.runtime.v2
/// .task/<ns>/<id>/address`: `unix:///run/containerd/s/<hash>`).
pub(super) fn shim_sockets(dir: &Path) -> BTreeSet<PathBuf> {
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
pub(super) fn bundles(dir: &Path) -> Vec<(String, String, PathBuf)> {
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

pub(super) fn subdirs(dir: &Path) -> Vec<PathBuf> {
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
pub(super) fn delete_runc_leftovers(dir: &Path) {
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
pub(super) fn kill_shims(socket: &Path) {
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

pub(super) struct Process {
    ppid: i32,
    args: Vec<String>,
}

/// Every live (non-zombie) process: its parent and its command line.
pub(super) fn processes() -> HashMap<i32, Process> {
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
pub(super) fn stat(pid: i32) -> Option<(char, i32)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &text[text.rfind(')')? + 1..];
    let mut fields = after.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some((state, ppid))
}

pub(super) fn cmdline(pid: i32) -> Option<Vec<String>> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    Some(
        raw.split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect(),
    )
}

/// Whether `pid` exists and is not a zombie (PID 1 here may not reap the orphans).
pub(super) fn process_alive(pid: i32) -> bool {
    stat(pid).is_some_and(|(state, _)| state != 'Z')
}

/// Sends `signal` and waits up to `timeout` for the process to be gone.
pub(super) fn signal_and_wait(pid: i32, signal: Signal, timeout: Duration) {
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
pub(super) fn unescape_mountinfo(field: &str) -> String {
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
pub(super) fn unmount_under(dir: &Path) {
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
pub(super) fn rmdir_tree(dir: &Path) {
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
pub(super) fn checked_cgroup_path(relative: &str) -> Option<String> {
    let trimmed = relative.trim().trim_end_matches('/');
    let ok = !trimmed.is_empty()
        && !trimmed.starts_with('/')
        && trimmed
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != "..");
    ok.then(|| trimmed.to_string())
}
