//! Container logs in the kubelet's layout: `<log dir>/<namespace>_<name>_<uid>/<container>/<restart>.log`,
//! and their disk usage (the pods' ephemeral-storage stats) and garbage collection
//! (node-level reclaim: the logs of dead containers go first).
use std::path::{Path, PathBuf};

/// The directory of one pod's logs.
pub(crate) fn pod_dir(log_dir: &Path, namespace: &str, name: &str, uid: &str) -> PathBuf {
    log_dir.join(format!("{namespace}_{name}_{uid}"))
}

/// The log file of one run of a container.
pub(crate) fn container_log(pod_dir: &Path, container: &str, restart: u32) -> PathBuf {
    pod_dir.join(container).join(format!("{restart}.log"))
}

/// Bytes (allocated on disk, as du counts) and inodes used under `path`.
pub(crate) fn usage(path: &Path) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return (0, 0);
    };
    let mut bytes = meta.blocks() * 512;
    let mut inodes = 1;
    if meta.is_dir() {
        for entry in std::fs::read_dir(path).into_iter().flatten().flatten() {
            let (b, i) = usage(&entry.path());
            bytes += b;
            inodes += i;
        }
    }
    (bytes, inodes)
}

/// Removes `path` (file or directory) and returns what that freed.
pub(crate) fn remove(path: &Path) -> (u64, u64) {
    let freed = usage(path);
    let result = if path.is_dir() {
        std::fs::remove_dir_all(path)
    } else {
        std::fs::remove_file(path)
    };
    match result {
        Ok(()) => freed,
        Err(err) => {
            tracing::warn!("container GC: removing {}: {err}", path.display());
            (0, 0)
        }
    }
}

/// The logs of earlier runs of a container: every `<n>.log` but the newest.
pub(crate) fn old_runs(container_dir: &Path) -> Vec<PathBuf> {
    let mut runs: Vec<(u32, PathBuf)> = std::fs::read_dir(container_dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().to_string();
            let n = name.strip_suffix(".log")?.parse().ok()?;
            Some((n, e.path()))
        })
        .collect();
    runs.sort();
    runs.pop();
    runs.into_iter().map(|(_, p)| p).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_and_gc_of_old_runs() {
        let dir = tempfile::tempdir().unwrap();
        let pod = pod_dir(dir.path(), "ns", "web", "u1");
        for run in 0..3 {
            let log = container_log(&pod, "c", run);
            std::fs::create_dir_all(log.parent().unwrap()).unwrap();
            std::fs::write(&log, vec![b'x'; 8192]).unwrap();
        }
        let (bytes, inodes) = usage(&pod);
        assert!(bytes >= 3 * 8192, "{bytes}");
        assert_eq!(inodes, 5, "pod dir, container dir, three logs");
        let old = old_runs(&pod.join("c"));
        assert_eq!(old.len(), 2);
        assert!(old.iter().all(|p| !p.ends_with("2.log")));
        let freed: u64 = old.iter().map(|p| remove(p).0).sum();
        assert!(freed >= 2 * 8192);
        assert!(container_log(&pod, "c", 2).exists());
    }
}
