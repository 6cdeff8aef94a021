//! A memory counter read again and again between synchronizes: a cgroup's, or the node's
//! as the memory.available signal counts it. The hot path confirms each crossing on the
//! counter of the signal that crossed, reading only as far as the level needs.
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::cgroup::{CgroupReader, CgroupVersion};
use super::error::{ObserveError, read_file};
use super::open_files::OpenFiles;
use super::parse;

#[derive(Clone, Debug)]
pub(crate) enum MemoryCounter {
    /// A memory cgroup (the reader's root): its usage file and memory.stat. On cgroup v1
    /// the root memory cgroup is also the node's counter.
    Cgroup(CgroupReader),
    /// The node on cgroup v2, whose root cgroup has no memory.current: /proc/meminfo,
    /// usage MemTotal − MemFree and Inactive(file), as a synchronize reads it.
    Meminfo {
        path: PathBuf,
        open: Option<Arc<OpenFiles>>,
    },
}

impl MemoryCounter {
    /// The node's counter: the root memory cgroup `memory_root` on cgroup v1, meminfo
    /// under `proc_root` on cgroup v2.
    pub(crate) fn node(version: CgroupVersion, memory_root: &Path, proc_root: &Path) -> Self {
        match version {
            CgroupVersion::V1 => MemoryCounter::Cgroup(CgroupReader::new(version, memory_root)),
            CgroupVersion::V2 => MemoryCounter::Meminfo {
                path: proc_root.join("meminfo"),
                open: None,
            },
        }
    }

    /// The same counter, its files kept open in `files`.
    pub(crate) fn keeping_open(self, files: Arc<OpenFiles>) -> Self {
        match self {
            MemoryCounter::Cgroup(reader) => MemoryCounter::Cgroup(reader.keeping_open(files)),
            MemoryCounter::Meminfo { path, .. } => MemoryCounter::Meminfo {
                path,
                open: Some(files),
            },
        }
    }

    /// The usage now: one read.
    pub(crate) fn usage_bytes(&self) -> Result<u64, ObserveError> {
        match self {
            MemoryCounter::Cgroup(reader) => reader.usage_bytes(""),
            MemoryCounter::Meminfo { path, open } => {
                let [total, free] = meminfo(path, open.as_deref(), ["MemTotal", "MemFree"])?;
                Ok(total.saturating_sub(free))
            }
        }
    }

    /// The working set now, read only as far as `level` needs it: a usage short of
    /// `level` is short in working set too (page cache is part of the usage), and then
    /// a cgroup's memory.stat, whose read first flushes its pending statistics, is not
    /// read. meminfo holds both numbers: one read.
    pub(crate) fn working_set_toward(&self, level: u64) -> Result<Toward, ObserveError> {
        let (usage, inactive_file) = match self {
            MemoryCounter::Cgroup(reader) => {
                let usage = reader.usage_bytes("")?;
                if usage < level {
                    return Ok(Toward::Short(usage));
                }
                (usage, reader.inactive_file_bytes("")?.unwrap_or(0))
            }
            MemoryCounter::Meminfo { path, open } => {
                let [total, free, inactive] = meminfo(
                    path,
                    open.as_deref(),
                    ["MemTotal", "MemFree", "Inactive(file)"],
                )?;
                (total.saturating_sub(free), inactive)
            }
        };
        Ok(Toward::WorkingSet(usage.saturating_sub(inactive_file)))
    }
}

/// What [`MemoryCounter::working_set_toward`] read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Toward {
    /// The usage, short of the level: the working set was not read.
    Short(u64),
    /// The working set (usage less the inactive page cache).
    WorkingSet(u64),
}

/// The values of `keys` in the meminfo file `path`, read now (through `open` if given); a
/// missing key names the file and the key.
fn meminfo<const N: usize>(
    path: &Path,
    open: Option<&OpenFiles>,
    keys: [&str; N],
) -> Result<[u64; N], ObserveError> {
    let parse = |text: &str| keys.map(|k| parse::flat_keyed_value(text, k));
    let values = match open {
        Some(open) => open.read_with(path, parse)?,
        None => parse(&read_file(path)?),
    };
    let mut out = [0; N];
    for ((slot, value), key) in out.iter_mut().zip(values).zip(keys) {
        *slot = value.ok_or_else(|| ObserveError::Missing {
            path: path.to_path_buf(),
            key: key.into(),
        })?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meminfo(text: &str) -> (tempfile::TempDir, MemoryCounter) {
        let proc = tempfile::tempdir().expect("tempdir");
        std::fs::write(proc.path().join("meminfo"), text).expect("meminfo");
        let counter = MemoryCounter::node(CgroupVersion::V2, Path::new("/unused"), proc.path());
        (proc, counter)
    }

    #[test]
    fn the_v2_node_counts_usage_and_page_cache_from_meminfo() {
        let (_proc, counter) = meminfo(
            "MemTotal:       10000 kB\nMemFree:         2500 kB\nInactive(file):   700 kB\n",
        );
        assert_eq!(counter.usage_bytes().unwrap(), 7500 * 1024);
        assert_eq!(
            counter.working_set_toward(0).unwrap(),
            Toward::WorkingSet(6800 * 1024)
        );
        let kept = counter.keeping_open(Arc::new(OpenFiles::with_budget(1)));
        assert_eq!(kept.usage_bytes().unwrap(), 7500 * 1024);
        assert_eq!(
            kept.working_set_toward(7000 * 1024).unwrap(),
            Toward::WorkingSet(6800 * 1024)
        );
    }

    #[test]
    fn a_missing_meminfo_key_names_the_file_and_the_key() {
        let (_proc, counter) = meminfo("MemTotal: 10000 kB\nInactive(file): 1 kB\n");
        let err = counter.usage_bytes().unwrap_err().to_string();
        assert!(err.contains("meminfo") && err.contains("MemFree"), "{err}");
    }

    #[test]
    fn the_v1_node_is_the_root_memory_cgroup() {
        let root = tempfile::tempdir().expect("tempdir");
        std::fs::write(root.path().join("memory.usage_in_bytes"), "4096\n").unwrap();
        std::fs::write(
            root.path().join("memory.stat"),
            "total_inactive_file 1024\n",
        )
        .unwrap();
        let counter = MemoryCounter::node(CgroupVersion::V1, root.path(), Path::new("/unused"));
        assert_eq!(counter.usage_bytes().unwrap(), 4096);
        assert_eq!(
            counter.working_set_toward(4096).unwrap(),
            Toward::WorkingSet(3072)
        );
        // A usage short of the level: memory.stat is not read (here it no longer parses).
        std::fs::remove_file(root.path().join("memory.stat")).unwrap();
        assert_eq!(
            counter.working_set_toward(4097).unwrap(),
            Toward::Short(4096)
        );
    }
}
