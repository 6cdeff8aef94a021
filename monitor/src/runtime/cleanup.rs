//! `monitor cleanup --config FILE`: removes what the agent of that configuration left on
//! the host once it is stopped, and nothing else. Its pods are those its records name (in
//! `stateDir`): their processes are killed through their pod cgroups, the cgroups, records
//! and logs removed. The directories the agent made around them (its QoS cgroups, its
//! `cgroupRoot`, the state and log directories, the socket) go only when nothing else is
//! left in them. A pod cgroup without a record, another agent's or a kubelet's, is left
//! alone.
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use super::cgroups::CgroupTree;
use super::logs;
use super::store::StateStore;
use crate::config::LoadedConfig;
use crate::config::agent::RuntimeKind;
use crate::observe::CgroupLayout;

/// How long a killed pod's cgroups may take to empty.
const EMPTY_WITHIN: Duration = Duration::from_secs(10);

/// What one cleanup removed and left, in the words it prints.
#[derive(Debug, Default)]
pub struct CleanupReport {
    pub removed: Vec<String>,
    pub left: Vec<String>,
}

/// Cleans up after the stopped agent of `config`. Refuses while an agent answers on the
/// configuration's socket.
pub fn cleanup(config: &LoadedConfig) -> anyhow::Result<CleanupReport> {
    let settings = &config.agent.settings;
    if std::os::unix::net::UnixStream::connect(&settings.socket).is_ok() {
        bail!(
            "an agent is running on {}: stop it first (its pods keep running; cleanup removes them)",
            settings.socket.display()
        );
    }
    if settings.runtime == RuntimeKind::Cri {
        bail!(
            "monitor.runtime is cri: the pods are containerd's sandboxes; cleanup removes the process runtime's pods only"
        );
    }
    let layout = CgroupLayout::given_or_detected(config.agent.layout.as_ref())
        .context("detecting the cgroup layout")?;
    let root = super::scope::pods_root(settings, &layout, false);
    let tree =
        CgroupTree::new(&layout, &root).with_context(|| format!("the cgroup tree under {root}"))?;
    let mut report = CleanupReport::default();
    if settings.state_dir.is_dir() {
        let store = StateStore::open(&settings.state_dir)
            .with_context(|| format!("opening {}", settings.state_dir.display()))?;
        let (records, errors) = store.load_all();
        for error in errors {
            report
                .left
                .push(format!("a record that does not load, left: {error}"));
        }
        for record in records {
            let key = record.pod.key();
            if let Some(pod) = tree.pod_cgroup(&record.uid, record.pod.qos_class()) {
                let killed = tree
                    .signal(&pod, nix::sys::signal::Signal::SIGKILL)
                    .with_context(|| format!("killing {key}"))?;
                let deadline = Instant::now() + EMPTY_WITHIN;
                while !tree.is_empty(&pod) && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(20));
                }
                tree.remove_pod(&pod)
                    .with_context(|| format!("removing the cgroups of {key}"))?;
                report.removed.push(format!(
                    "pod {key}: {killed} process(es) killed, its cgroups removed"
                ));
            }
            let logs = logs::pod_dir(
                &settings.pod_log_dir,
                record.pod.namespace(),
                &record.pod.metadata.name,
                &record.uid,
            );
            if logs.exists() {
                std::fs::remove_dir_all(&logs)
                    .with_context(|| format!("removing {}", logs.display()))?;
                report.removed.push(format!("logs {}", logs.display()));
            }
            store.remove(&record.uid);
            report.removed.push(format!("record of {key}"));
        }
    }
    // What the agent made around its pods, each only when nothing else is in it.
    match tree.remove_all() {
        Ok(()) => report.removed.push(format!(
            "its cgroup tree under {} (where empty)",
            settings.cgroup_root
        )),
        Err(err) => report.left.push(format!("cgroup tree: {err}")),
    }
    // The decision record is the agent's own too.
    for name in [
        crate::decisions::FILE,
        crate::decisions::ROTATED,
        &format!("{}.corrupt", crate::decisions::FILE),
        &format!("{}.corrupt", crate::decisions::ROTATED),
    ] {
        let path = settings.state_dir.join(name);
        if std::fs::remove_file(&path).is_ok() {
            report
                .removed
                .push(format!("decision record {}", path.display()));
        }
    }
    for dir in [
        settings.state_dir.join("pods"),
        settings.state_dir.clone(),
        settings.pod_log_dir.clone(),
    ] {
        remove_if_empty(&dir, &mut report);
    }
    if settings.socket.exists() {
        std::fs::remove_file(&settings.socket)
            .with_context(|| format!("removing {}", settings.socket.display()))?;
        report
            .removed
            .push(format!("socket {}", settings.socket.display()));
    }
    Ok(report)
}

/// Removes `dir` if it exists and holds nothing; says so either way.
fn remove_if_empty(dir: &Path, report: &mut CleanupReport) {
    match std::fs::remove_dir(dir) {
        Ok(()) => report.removed.push(format!("{}", dir.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => report
            .left
            .push(format!("{} (not empty: {e})", dir.display())),
    }
}
