//! Filesystem bytes and inodes (statvfs), for the nodefs and imagefs signals.
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::error::ObserveError;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct FsStats {
    pub capacity_bytes: u64,
    /// Bytes available to unprivileged users (f_bavail), as the kubelet reports.
    pub available_bytes: u64,
    pub inodes: u64,
    pub inodes_free: u64,
}

pub fn statvfs(path: &Path) -> Result<FsStats, ObserveError> {
    let s = nix::sys::statvfs::statvfs(path).map_err(|errno| ObserveError::Read {
        path: path.to_path_buf(),
        source: std::io::Error::from(errno),
    })?;
    let frsize = s.fragment_size();
    Ok(FsStats {
        capacity_bytes: s.blocks().saturating_mul(frsize),
        available_bytes: s.blocks_available().saturating_mul(frsize),
        inodes: s.files(),
        inodes_free: s.files_free(),
    })
}

/// statvfs(2) with a bound on its wait. A filesystem that does not answer (a dead NFS
/// server, a wedged device) blocks the calling thread in the kernel, so each call runs on
/// a thread of its own; after `timeout` the caller moves on with an error, and the path
/// counts as hung until that thread comes back: no second thread is sent after it.
#[derive(Clone, Debug)]
pub struct BoundedStatvfs {
    timeout: Duration,
    in_flight: Arc<Mutex<BTreeSet<PathBuf>>>,
}

impl BoundedStatvfs {
    pub fn new(timeout: Duration) -> Self {
        BoundedStatvfs {
            timeout,
            in_flight: Arc::default(),
        }
    }

    pub fn statvfs(&self, path: &Path) -> Result<FsStats, ObserveError> {
        let hung = || ObserveError::Hung {
            path: path.to_path_buf(),
            after: self.timeout,
        };
        {
            let mut in_flight = lock(&self.in_flight);
            if !in_flight.insert(path.to_path_buf()) {
                return Err(hung());
            }
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let owned = path.to_path_buf();
        let in_flight = self.in_flight.clone();
        let spawned = std::thread::Builder::new()
            .name("monitor-statvfs".into())
            .spawn(move || {
                let result = statvfs(&owned);
                lock(&in_flight).remove(&owned);
                let _ = tx.send(result);
            });
        if let Err(source) = spawned {
            lock(&self.in_flight).remove(path);
            return Err(ObserveError::Read {
                path: path.to_path_buf(),
                source,
            });
        }
        rx.recv_timeout(self.timeout)
            .unwrap_or_else(|_| Err(hung()))
    }
}

fn lock(set: &Mutex<BTreeSet<PathBuf>>) -> std::sync::MutexGuard<'_, BTreeSet<PathBuf>> {
    set.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_statvfs_answers_and_names_a_missing_path() {
        let fs = BoundedStatvfs::new(Duration::from_secs(5));
        let dir = tempfile::tempdir().unwrap();
        assert!(fs.statvfs(dir.path()).unwrap().capacity_bytes > 0);
        let missing = dir.path().join("absent");
        let err = fs.statvfs(&missing).unwrap_err().to_string();
        assert!(err.contains("absent"), "{err}");
        // Nothing is left in flight: the next call asks the kernel again.
        assert!(fs.statvfs(dir.path()).is_ok());
    }

    #[test]
    fn a_path_still_in_flight_counts_as_hung_without_a_second_thread() {
        let fs = BoundedStatvfs::new(Duration::from_millis(10));
        let dir = tempfile::tempdir().unwrap();
        // As if an earlier call were still blocked in the kernel on this path.
        lock(&fs.in_flight).insert(dir.path().to_path_buf());
        let err = fs.statvfs(dir.path()).unwrap_err().to_string();
        assert!(err.contains("no answer"), "{err}");
        lock(&fs.in_flight).clear();
        assert!(fs.statvfs(dir.path()).is_ok());
    }
}
