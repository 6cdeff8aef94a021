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
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

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
    file: File,
    /// The sweep generation of the last read.
    read_in: u64,
}

#[derive(Debug, Default)]
struct Inner {
    files: HashMap<PathBuf, Kept>,
    generation: u64,
}

/// Open cgroup files, each read afresh with `pread(2)`; see the module's documentation.
#[derive(Debug)]
pub struct OpenFiles {
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
    pub fn new() -> Self {
        let soft = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
            .map_or(1024, |(soft, _)| soft);
        let budget = usize::try_from(soft / BUDGET_SHARE).unwrap_or(MAX_BUDGET);
        OpenFiles::with_budget(budget.min(MAX_BUDGET))
    }

    /// A set that keeps at most `budget` descriptors.
    pub fn with_budget(budget: usize) -> Self {
        OpenFiles {
            inner: Mutex::new(Inner::default()),
            budget,
        }
    }

    /// The file's whole content, read now.
    pub fn read(&self, path: &Path) -> Result<String, ObserveError> {
        let failed = |source| ObserveError::Read {
            path: path.to_path_buf(),
            source,
        };
        let mut inner = self.lock();
        let generation = inner.generation;
        if let Some(kept) = inner.files.get_mut(path) {
            kept.read_in = generation;
            match read_at_start(&kept.file) {
                Ok(text) => return Ok(text),
                // Stale (the cgroup went, maybe came back) or failing: open it anew.
                Err(_) => {
                    inner.files.remove(path);
                }
            }
        }
        let file = File::open(path).map_err(failed)?;
        let text = read_at_start(&file).map_err(failed)?;
        if inner.files.len() < self.budget {
            inner.files.insert(
                path.to_path_buf(),
                Kept {
                    file,
                    read_in: generation,
                },
            );
        }
        Ok(text)
    }

    /// Closes the descriptors not read since the previous sweep.
    pub fn sweep(&self) {
        let mut inner = self.lock();
        let generation = inner.generation;
        inner.files.retain(|_, kept| kept.read_in == generation);
        inner.generation = generation.wrapping_add(1);
    }

    /// How many descriptors are kept now.
    pub fn len(&self) -> usize {
        self.lock().files.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A reader that panicked left the map whole: every entry is a complete File.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Reads from offset 0 to the end with `pread(2)`. A read that leaves room in the buffer
/// has the whole file: a kernfs file fills the buffer with as much of its content as fits,
/// and asking for more at an offset past 0 would make the kernel generate the content
/// anew just to skip to that offset. So a file that fits costs one generation.
fn read_at_start(file: &File) -> io::Result<String> {
    let mut buf = vec![0u8; FIRST_READ];
    let mut len = 0;
    loop {
        let offset = u64::try_from(len).unwrap_or(u64::MAX);
        match file.read_at(&mut buf[len..], offset) {
            Ok(0) => break,
            Ok(n) => {
                len += n;
                if len < buf.len() {
                    break;
                }
                buf.resize(buf.len() * 2, 0);
            }
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
    buf.truncate(len);
    String::from_utf8(buf).map_err(|err| io::Error::new(io::ErrorKind::InvalidData, err))
}

/// Raises the soft open-file limit to the hard one, so that the kept descriptors of a
/// thousand pods fit (the soft limit is often 1024; systemd's hard limit is 512Ki).
/// Returns the new soft limit.
pub fn raise_open_file_limit() -> io::Result<u64> {
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
        let paths: Vec<PathBuf> = (0..4)
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
