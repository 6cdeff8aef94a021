//! Filesystem bytes and inodes (statvfs), for the nodefs and imagefs signals.
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, Sender, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::error::ObserveError;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct FsStats {
    pub capacity_bytes: u64,
    /// Bytes available to unprivileged users (f_bavail), as the kubelet reports.
    pub available_bytes: u64,
    pub(crate) inodes: u64,
    pub(crate) inodes_free: u64,
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
/// server, a wedged device) blocks the calling thread in the kernel, so the calls for
/// each path run on a thread of that path's own, kept for the next call (a new thread
/// per call cost a synchronize more than the statvfs itself). After `timeout` the caller
/// moves on with an error, and the path counts as hung until its thread comes back: no
/// second thread is sent after it.
#[derive(Clone, Debug)]
pub(crate) struct BoundedStatvfs {
    timeout: Duration,
    in_flight: Arc<Mutex<BTreeSet<PathBuf>>>,
    workers: Arc<Mutex<HashMap<PathBuf, Worker>>>,
}

/// Where a path's thread takes its requests: each carries the channel for its answer.
type Worker = SyncSender<Sender<Result<FsStats, ObserveError>>>;

impl BoundedStatvfs {
    pub(crate) fn new(timeout: Duration) -> Self {
        BoundedStatvfs {
            timeout,
            in_flight: Arc::default(),
            workers: Arc::default(),
        }
    }

    pub(crate) fn statvfs(&self, path: &Path) -> Result<FsStats, ObserveError> {
        self.start(path).wait()
    }

    /// Asks the path's thread for its statvfs and returns at once: the caller reads
    /// other files meanwhile and takes the answer with [`PendingStatvfs::wait`]. Handing
    /// the call to another thread and back costs more than the call itself (about
    /// 150 µs here, against 2 µs), so the wait overlaps it with other work.
    pub(crate) fn start(&self, path: &Path) -> PendingStatvfs {
        let hung = ObserveError::Hung {
            path: path.to_path_buf(),
            after: self.timeout,
        };
        if !lock(&self.in_flight).insert(path.to_path_buf()) {
            return PendingStatvfs::Done(Err(hung));
        }
        let (answer, answered) = std::sync::mpsc::channel();
        if let Err(source) = self.send(path, answer) {
            lock(&self.in_flight).remove(path);
            return PendingStatvfs::Done(Err(ObserveError::Read {
                path: path.to_path_buf(),
                source,
            }));
        }
        PendingStatvfs::Asked {
            answered,
            deadline: std::time::Instant::now() + self.timeout,
            hung,
        }
    }

    /// Hands a request to the path's thread, starting one when there is none (or the
    /// last one is gone).
    fn send(
        &self,
        path: &Path,
        mut answer: Sender<Result<FsStats, ObserveError>>,
    ) -> std::io::Result<()> {
        let mut workers = lock(&self.workers);
        if let Some(worker) = workers.get(path) {
            // The path is not in flight, so its thread waits for work: the one-slot
            // channel has room unless the thread is gone.
            match worker.try_send(answer) {
                Ok(()) => return Ok(()),
                Err(TrySendError::Full(back) | TrySendError::Disconnected(back)) => {
                    answer = back;
                }
            }
        }
        let (worker, requests): (Worker, _) = std::sync::mpsc::sync_channel(1);
        let owned = path.to_path_buf();
        let in_flight = self.in_flight.clone();
        std::thread::Builder::new()
            .name("monitor-statvfs".into())
            .spawn(move || {
                for answer in requests {
                    let result = statvfs(&owned);
                    lock(&in_flight).remove(&owned);
                    // The caller may have given up (timeout): nobody to answer then.
                    let _ = answer.send(result);
                }
            })?;
        // A new channel with an empty slot and a live thread: this cannot fail.
        let _ = worker.try_send(answer);
        workers.insert(path.to_path_buf(), worker);
        Ok(())
    }
}

/// A statvfs under way on its path's thread, or its result when it never went there.
pub(crate) enum PendingStatvfs {
    Asked {
        answered: Receiver<Result<FsStats, ObserveError>>,
        /// The call counts as hung past this.
        deadline: std::time::Instant,
        hung: ObserveError,
    },
    Done(Result<FsStats, ObserveError>),
}

impl PendingStatvfs {
    /// The answer, or an error once the bound has passed since the call was asked for.
    pub(crate) fn wait(self) -> Result<FsStats, ObserveError> {
        match self {
            PendingStatvfs::Done(result) => result,
            PendingStatvfs::Asked {
                answered,
                deadline,
                hung,
            } => {
                let left = deadline.saturating_duration_since(std::time::Instant::now());
                answered.recv_timeout(left).unwrap_or(Err(hung))
            }
        }
    }
}

fn lock<T>(set: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
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
    fn each_path_keeps_one_thread_across_calls() {
        let fs = BoundedStatvfs::new(Duration::from_secs(5));
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        for _ in 0..3 {
            assert!(fs.statvfs(a.path()).is_ok());
            assert!(fs.statvfs(b.path()).is_ok());
        }
        assert_eq!(lock(&fs.workers).len(), 2);
        assert!(lock(&fs.in_flight).is_empty());
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
