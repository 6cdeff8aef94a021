//! The pods' cgroup tree on a systemd node (`monitor.systemdScope`).
//!
//! Under systemd each cgroup has one writer: systemd owns the root and its slices, and a
//! service writes only below a cgroup delegated to it (`Delegate=yes`). The agent's own
//! service cannot hold the pods: on cgroup v2 a cgroup that enables controllers for its
//! children holds no process, so once the pods' tree is below the service's cgroup
//! systemd cannot put a restarted agent back into it (systemd 254 added
//! `DelegateSubgroup=` for that; Debian 12 has 252), and stopping the service would kill
//! the pods. So the tree gets a unit of its own: a transient scope with `Delegate=yes`,
//! registered through `systemd-run --scope` by the agent the first time it starts. The
//! scope lives as long as a process is in it; a small holder process (`monitor
//! hold-scope`, in the scope's leaf `holder`) keeps it while no pod runs, and the pods
//! run in `<scope>/kubepods/...` beside it. The agent's restarts and stops leave it; it
//! ends with `systemctl stop <scope>` (which kills the pods in it) or the package's
//! purge (only when no pod runs).
use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, bail};

use crate::config::agent::AgentSettings;
use crate::observe::{CgroupLayout, CgroupVersion};

/// The leaf of the scope that holds the holder process.
pub const HOLDER: &str = "holder";
/// How long a new scope may take to appear with its holder in place.
const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// The cgroup, relative to the memory hierarchy's root, that the agent's pods live
/// under: the scope's when `monitor.systemdScope` names one and systemd runs the node's
/// cgroup v2 hierarchy (registered if `create` and missing), else `cgroupRoot`. A scope
/// that cannot be had falls back to `cgroupRoot` with a warning: the pods are protected
/// either way.
pub fn pods_root(settings: &AgentSettings, layout: &CgroupLayout, create: bool) -> String {
    let fallback = settings.cgroup_root.clone();
    let Some(unit) = &settings.systemd_scope else {
        return fallback;
    };
    if layout.version != CgroupVersion::V2 || !systemd_runs() {
        tracing::info!(
            "monitor.systemdScope {unit}: not a systemd node on cgroup v2; the pods' tree is cgroupRoot {fallback}"
        );
        return fallback;
    }
    let found = if create {
        delegated_tree(unit, &layout.memory_root).map(Some)
    } else {
        existing_tree(unit, &layout.memory_root)
    };
    match found {
        Ok(Some(tree)) => {
            tracing::info!(
                "the pods' cgroup tree is {tree}, delegated to the agent by systemd (scope {unit})"
            );
            tree
        }
        Ok(None) => fallback,
        Err(err) => {
            tracing::warn!(
                "monitor.systemdScope {unit}: {err:#}; the pods' tree is cgroupRoot {fallback}, beside systemd's units"
            );
            fallback
        }
    }
}

/// Whether systemd is the init system (its own test: sd_booted(3)).
pub fn systemd_runs() -> bool {
    Path::new("/run/systemd/system").is_dir()
}

/// The pods' tree, relative to the cgroup v2 mount `mount`: the scope `unit`'s cgroup,
/// registered with systemd if it is not there yet.
pub fn delegated_tree(unit: &str, mount: &Path) -> anyhow::Result<String> {
    if let Some(found) = existing_tree(unit, mount)? {
        return Ok(found);
    }
    let holder = std::env::current_exe().context("finding the agent's own binary")?;
    let mut child = Command::new("systemd-run")
        .args([
            "--scope",
            "--quiet",
            "--collect",
            &format!("--unit={unit}"),
            "--property=Delegate=yes",
            "--description=monitor's pods (a cgroup tree delegated to the agent)",
            "--",
        ])
        .arg(&holder)
        .arg("hold-scope")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting systemd-run --scope")?;
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        if let Some(found) = existing_tree(unit, mount)?
            && holder_in_place(&mount.join(&found))
        {
            // The holder runs for as long as the scope: reap it whenever it ends.
            std::thread::Builder::new()
                .name("monitor-scope".into())
                .spawn(move || child.wait())
                .context("starting the scope holder's reaper")?;
            return Ok(found);
        }
        if let Some(status) = child.try_wait().context("waiting for systemd-run")? {
            let mut why = String::new();
            if let Some(mut stderr) = child.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut stderr, &mut why);
            }
            bail!(
                "systemd-run --scope --unit={unit} ended ({status}) before the scope was ready: {}",
                why.trim()
            );
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!("the scope {unit} was not ready after {READY_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The scope's cgroup, relative to `mount`, if systemd runs it now; no scope is made.
pub fn existing_tree(unit: &str, mount: &Path) -> anyhow::Result<Option<String>> {
    let out = Command::new("systemctl")
        .args(["show", "--property=ActiveState,ControlGroup", unit])
        .stderr(Stdio::null())
        .output()
        .context("running systemctl show")?;
    if !out.status.success() {
        bail!("systemctl show {unit}: {}", out.status);
    }
    let Some(group) = active_control_group(&String::from_utf8_lossy(&out.stdout)) else {
        return Ok(None);
    };
    Ok(mount.join(&group).is_dir().then_some(group))
}

/// The `ControlGroup` of an active unit from `systemctl show`'s `KEY=VALUE` lines,
/// without its leading slash.
fn active_control_group(show: &str) -> Option<String> {
    let value = |key: &str| {
        show.lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
    };
    if value("ActiveState")? != "active" {
        return None;
    }
    let group = value("ControlGroup")?.trim_matches('/');
    (!group.is_empty()).then(|| group.to_string())
}

fn holder_in_place(scope: &Path) -> bool {
    std::fs::read_to_string(scope.join(HOLDER).join("cgroup.procs"))
        .is_ok_and(|procs| !procs.trim().is_empty())
}

/// `monitor hold-scope`: run by systemd-run inside the new scope. Moves itself into the
/// scope's leaf [`HOLDER`] (so that the scope's own cgroup holds no process and can
/// enable controllers for the pods' tree) and sleeps until it is signalled.
pub fn hold() -> anyhow::Result<()> {
    let own = std::fs::read_to_string("/proc/self/cgroup").context("reading /proc/self/cgroup")?;
    let scope = own
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .context("/proc/self/cgroup has no cgroup v2 line")?;
    let leaf = PathBuf::from("/sys/fs/cgroup")
        .join(scope.trim_matches('/'))
        .join(HOLDER);
    match std::fs::create_dir(&leaf) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e).with_context(|| format!("creating {}", leaf.display())),
    }
    std::fs::write(leaf.join("cgroup.procs"), std::process::id().to_string())
        .with_context(|| format!("moving into {}", leaf.display()))?;
    loop {
        // SAFETY: pause(2) only waits for a signal; SIGTERM's default action ends us.
        unsafe { libc::pause() };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case::active(
        "ActiveState=active\nControlGroup=/system.slice/monitor-pods.scope\n",
        Some("system.slice/monitor-pods.scope")
    )]
    #[case::order_does_not_matter(
        "ControlGroup=/system.slice/x.scope\nActiveState=active\n",
        Some("system.slice/x.scope")
    )]
    #[case::inactive("ActiveState=inactive\nControlGroup=\n", None)]
    #[case::failed_with_a_group("ActiveState=failed\nControlGroup=/system.slice/x.scope\n", None)]
    #[case::no_group("ActiveState=active\nControlGroup=\n", None)]
    #[case::garbage("what\n", None)]
    fn the_scope_counts_only_while_active(#[case] show: &str, #[case] expected: Option<&str>) {
        assert_eq!(active_control_group(show).as_deref(), expected);
    }
}
