//! Cgroup files kept open between reads. Opening a cgroupfs file costs about ten times
//! what reading it does (a path walk through kernfs and a new open file each time); a
//! synchronize reads the same few files of every pod over and over, so it keeps them open
//! and reads each with `pread(2)` at offset 0, which makes the kernel generate the file's
//! content afresh. The values are as fresh as with a new open: nothing is cached but the
//! descriptor.
//!
//! A kept descriptor goes stale when its cgroup is removed (reads then fail with ENODEV),
//! possibly recreated under the same name: any failed read drops the descriptor and the
//! file is opened and read once more. Descriptors not read since the last [`sweep`] are
//! closed by it, so the set follows the pods that exist. The set is bounded by a budget
//! taken from the process's open-file limit; beyond it, files are read the ordinary way.
//!
//! [`sweep`]: OpenFiles::sweep
use std::collections::HashMap;
use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::{Arc, Mutex};

use super::error::ObserveError;

/// The share of the soft open-file limit kept descriptors may take: the rest stays for
/// sockets, eBPF objects, pidfds and the runtime's own files.
const BUDGET_SHARE: u64 = 2;
/// The largest budget whatever the limit (four files for each of 8000 cgroups).
const MAX_BUDGET: usize = 32_000;
/// The first read size; a larger file is read in further chunks.
const FIRST_READ: usize = 4096;

#[derive(Debug)]
struct Kept {
    /// Shared with a read under way, which runs without the set's lock.
    file: Arc<File>,
    /// The sweep generation of the last read.
    read_in: u64,
}

#[derive(Debug, Default)]
struct Inner {
    /// Keyed by the path's bytes: hashing a `Path` walks its components, which cost
    /// more than the lookup itself.
    files: HashMap<OsString, Kept>,
    generation: u64,
}

/// Open cgroup files, each read afresh with `pread(2)`; see the module's documentation.
#[derive(Debug)]
pub(crate) struct OpenFiles {
    inner: Mutex<Inner>,
    budget: usize,
}

impl Default for OpenFiles {
    fn default() -> Self {
        OpenFiles::new()
    }
}

impl OpenFiles {
    /// A set whose budget is half the process's soft open-file limit (see
    /// [`raise_open_file_limit`]).
    pub(crate) fn new() -> Self {
        let soft = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
            .map_or(1024, |(soft, _)| soft);
        let budget = usize::try_from(soft / BUDGET_SHARE).unwrap_or(MAX_BUDGET);
        OpenFiles::with_budget(budget.min(MAX_BUDGET))
    }

    /// A set that keeps at most `budget` descriptors.
    pub(crate) fn with_budget(budget: usize) -> Self {
        OpenFiles {
            inner: Mutex::new(Inner::default()),
            budget,
        }
    }

    /// The file's whole content, read now.
    pub(crate) fn read(&self, path: &Path) -> Result<String, ObserveError> {
        self.read_with(path, str::to_string)
    }

    /// Reads the file now and hands its content to `parse`, without allocating for a
    /// file that fits in [`FIRST_READ`] bytes (every per-pod file does). The set's lock
    /// is held only to find or keep the descriptor, never during the read, so threads
    /// read different files at once.
    pub(crate) fn read_with<R>(
        &self,
        path: &Path,
        parse: impl FnOnce(&str) -> R,
    ) -> Result<R, ObserveError> {
        let failed = |source| ObserveError::Read {
            path: path.to_path_buf(),
            source,
        };
        let mut buffer = Buffer::new();
        let kept = {
            let mut inner = self.lock();
            let generation = inner.generation;
            inner.files.get_mut(path.as_os_str()).map(|kept| {
                kept.read_in = generation;
                kept.file.clone()
            })
        };
        if let Some(file) = kept {
            match buffer.fill(&file) {
                Ok(text) => return Ok(parse(text)),
                // Stale (the cgroup went, maybe came back) or failing: open it anew.
                Err(_) => {
                    let mut inner = self.lock();
                    if inner
                        .files
                        .get(path.as_os_str())
                        .is_some_and(|k| Arc::ptr_eq(&k.file, &file))
                    {
                        inner.files.remove(path.as_os_str());
                    }
                }
            }
        }
        let file = File::open(path).map_err(failed)?;
        let value = parse(buffer.fill(&file).map_err(failed)?);
        let mut inner = self.lock();
        if inner.files.len() < self.budget {
            let generation = inner.generation;
            inner.files.insert(
                path.as_os_str().to_owned(),
                Kept {
                    file: Arc::new(file),
                    read_in: generation,
                },
            );
        }
        Ok(value)
    }

    /// Closes the descriptors not read since the previous sweep.
    pub(crate) fn sweep(&self) {
        let mut inner = self.lock();
        let generation = inner.generation;
        inner.files.retain(|_, kept| kept.read_in == generation);
        inner.generation = generation.wrapping_add(1);
    }

    /// How many descriptors are kept now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().files.len()
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A reader that panicked left the map whole: every entry is a complete File.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Where a file is read: on the stack, and on the heap only for a file larger than
/// [`FIRST_READ`] (a big node's root memory.stat).
struct Buffer {
    first: [u8; FIRST_READ],
    more: Vec<u8>,
}

impl Buffer {
    fn new() -> Self {
        Buffer {
            first: [0; FIRST_READ],
            more: Vec::new(),
        }
    }

    /// Reads from offset 0 to the end with `pread(2)`. A read that leaves room in the
    /// buffer has the whole file: a kernfs file fills the buffer with as much of its
    /// content as fits, and asking for more at an offset past 0 would make the kernel
    /// generate the content anew just to skip to that offset. So a file that fits costs
    /// one generation.
    fn fill(&mut self, file: &File) -> io::Result<&str> {
        let len = read_into(file, &mut self.first, 0)?;
        if len < FIRST_READ {
            return utf8(&self.first[..len]);
        }
        self.more.clear();
        self.more.extend_from_slice(&self.first);
        let mut len = len;
        loop {
            self.more.resize(self.more.len() * 2, 0);
            len += read_into(file, &mut self.more[len..], len)?;
            if len < self.more.len() {
                break;
            }
        }
        utf8(&self.more[..len])
    }
}

/// One `pread(2)` at `offset`, retried on EINTR; 0 at the end of the file.
fn read_into(file: &File, buf: &mut [u8], offset: usize) -> io::Result<usize> {
    let offset = u64::try_from(offset).unwrap_or(u64::MAX);
    loop {
        match file.read_at(buf, offset) {
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            other => return other,
        }
    }
}

fn utf8(bytes: &[u8]) -> io::Result<&str> {
    std::str::from_utf8(bytes).map_err(|err| io::Error::new(io::ErrorKind::InvalidData, err))
}

/// Raises the soft open-file limit to the hard one, so that the kept descriptors of a
/// thousand pods fit (the soft limit is often 1024; systemd's hard limit is 512Ki).
/// Returns the new soft limit. Whoever starts containers records the limits as they were
/// first: containers start with those, not with this one.
pub(crate) fn raise_open_file_limit() -> io::Result<u64> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).map_err(io::Error::from)?;
    if soft < hard {
        setrlimit(Resource::RLIMIT_NOFILE, hard, hard).map_err(io::Error::from)?;
    }
    Ok(hard.max(soft))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_afresh_through_a_kept_descriptor() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("memory.current");
        std::fs::write(&path, "100\n").unwrap();
        let files = OpenFiles::with_budget(8);
        assert_eq!(files.read(&path).unwrap(), "100\n");
        assert_eq!(files.len(), 1);
        // Rewritten in place: the same inode, so the kept descriptor sees the new bytes.
        std::fs::write(&path, "2000\n").unwrap();
        assert_eq!(files.read(&path).unwrap(), "2000\n");
        assert_eq!(files.len(), 1);
    }

    #[test]
    fn a_large_file_is_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("memory.stat");
        let text: String = (0..2000).map(|i| format!("key{i} {i}\n")).collect();
        std::fs::write(&path, &text).unwrap();
        assert_eq!(OpenFiles::with_budget(1).read(&path).unwrap(), text);
    }

    #[test]
    fn a_missing_file_is_an_error_naming_it_and_nothing_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let files = OpenFiles::with_budget(8);
        let missing = dir.path().join("absent");
        let err = files.read(&missing).unwrap_err().to_string();
        assert!(err.contains("absent"), "{err}");
        assert!(files.is_empty());
    }

    #[test]
    fn the_budget_bounds_kept_descriptors_and_sweep_closes_unread_ones() {
        let dir = tempfile::tempdir().unwrap();
        let files = OpenFiles::with_budget(2);
        let paths: Vec<std::path::PathBuf> = (0..4)
            .map(|i| {
                let p = dir.path().join(format!("f{i}"));
                std::fs::write(&p, i.to_string()).unwrap();
                p
            })
            .collect();
        for (i, p) in paths.iter().enumerate() {
            assert_eq!(files.read(p).unwrap(), i.to_string());
        }
        assert_eq!(files.len(), 2);
        files.sweep();
        // Only f0 is read in the new generation: f1 goes at the next sweep.
        files.read(&paths[0]).unwrap();
        files.sweep();
        assert_eq!(files.len(), 1);
    }
}
