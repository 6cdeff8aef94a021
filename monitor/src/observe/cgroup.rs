//! cgroup v1 and v2 memory readers. The layout (which version, where it is mounted) is
//! detected once from /proc/self/mountinfo; every read afterwards goes to the files at that
//! moment. Roots are injectable so tests can point a reader at a fake tree.
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::error::{ObserveError, read_file};
use super::open_files::OpenFiles;
use super::parse;

/// Which hierarchy carries the memory controller.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum CgroupVersion {
    V1,
    V2,
}

/// Where the cgroup hierarchies are mounted on this host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CgroupLayout {
    /// The version of the hierarchy with the memory controller.
    pub version: CgroupVersion,
    /// Mount point of the hierarchy with the memory controller
    /// (`/sys/fs/cgroup/memory` on v1, `/sys/fs/cgroup` on v2).
    pub memory_root: PathBuf,
    /// Mount point of the cgroup2 hierarchy, when one is mounted (on hybrid v1 hosts
    /// `/sys/fs/cgroup/unified`, which has no controllers but still groups tasks: the
    /// eBPF programs see a task's cgroup id in it).
    pub unified_root: Option<PathBuf>,
}

impl CgroupLayout {
    /// `given` (a configuration's, or a test's), else the running host's.
    pub fn given_or_detected(given: Option<&CgroupLayout>) -> Result<Self, ObserveError> {
        match given {
            Some(layout) => Ok(layout.clone()),
            None => CgroupLayout::detect(),
        }
    }

    /// Detects the layout of the running host.
    pub fn detect() -> Result<Self, ObserveError> {
        let path = Path::new("/proc/self/mountinfo");
        let text = read_file(path)?;
        Self::from_mountinfo(&text, |root| {
            std::fs::read_to_string(root.join("cgroup.controllers")).unwrap_or_default()
        })
        .ok_or_else(|| ObserveError::Parse {
            path: path.to_path_buf(),
            reason: "no cgroup hierarchy with the memory controller is mounted".into(),
        })
    }

    /// Detects the layout from mountinfo text; `controllers_of` reads a cgroup2 mount's
    /// `cgroup.controllers` (injected for tests).
    pub(crate) fn from_mountinfo(
        mountinfo: &str,
        controllers_of: impl Fn(&Path) -> String,
    ) -> Option<Self> {
        let mut v1_memory = None;
        let mut unified = None;
        for mount in cgroup_mounts(mountinfo) {
            if mount.v2 {
                unified = Some(mount.mount_point);
            } else if mount.options.iter().any(|o| o == "memory") {
                v1_memory = Some(mount.mount_point);
            }
        }
        if let Some(memory_root) = v1_memory {
            return Some(CgroupLayout {
                version: CgroupVersion::V1,
                memory_root,
                unified_root: unified,
            });
        }
        let root = unified?;
        let has_memory = controllers_of(&root)
            .split_whitespace()
            .any(|c| c == "memory");
        has_memory.then(|| CgroupLayout {
            version: CgroupVersion::V2,
            memory_root: root.clone(),
            unified_root: Some(root),
        })
    }
}

/// One cgroup hierarchy mounted on this host, from /proc/self/mountinfo.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct CgroupMount {
    pub(crate) mount_point: PathBuf,
    /// The directory of the hierarchy mounted there ("/" for the whole hierarchy; shown
    /// relative to the reader's cgroup namespace).
    pub(crate) root: PathBuf,
    /// cgroup2 (else a v1 hierarchy).
    pub(crate) v2: bool,
    /// Super options: a v1 hierarchy's controllers ("rw", "memory", "cpu", …).
    pub(crate) options: Vec<String>,
}

/// One line of mountinfo: where, which filesystem type, and its super options
/// ("36 35 0:30 / /sys/fs/cgroup/memory rw,relatime shared:1 - cgroup cgroup rw,memory").
pub(crate) struct Mount {
    pub(crate) mount_point: PathBuf,
    /// The directory of the filesystem mounted there (mountinfo's fourth field).
    pub(crate) root: PathBuf,
    pub(crate) fstype: String,
    pub(crate) super_options: Vec<String>,
}

/// Every mount in mountinfo text, in its order (a later mount at the same point hides
/// an earlier one).
pub(crate) fn mounts(mountinfo: &str) -> Vec<Mount> {
    mountinfo
        .lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let mut left = left.split_whitespace();
            let root = left.nth(3)?;
            let mount_point = left.next()?;
            let mut right = right.split_whitespace();
            let fstype = right.next()?;
            let options = right.nth(1).unwrap_or("");
            Some(Mount {
                mount_point: PathBuf::from(unescape_mount_path(mount_point)),
                root: PathBuf::from(unescape_mount_path(root)),
                fstype: fstype.to_string(),
                super_options: options.split(',').map(str::to_string).collect(),
            })
        })
        .collect()
}

/// Every cgroup and cgroup2 mount in mountinfo text.
pub(crate) fn cgroup_mounts(mountinfo: &str) -> Vec<CgroupMount> {
    mounts(mountinfo)
        .into_iter()
        .filter_map(|m| {
            let v2 = match m.fstype.as_str() {
                "cgroup" => false,
                "cgroup2" => true,
                _ => return None,
            };
            Some(CgroupMount {
                mount_point: m.mount_point,
                root: m.root,
                v2,
                options: m.super_options,
            })
        })
        .collect()
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo` octal.
fn unescape_mount_path(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| bytes[i] == b'\\' && d.iter().all(|b| (b'0'..=b'7').contains(b)));
        match octal.and_then(|d| u8::from_str_radix(std::str::from_utf8(d).ok()?, 8).ok()) {
            Some(byte) => {
                out.push(byte);
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Memory statistics of one cgroup.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct MemoryStats {
    pub usage_bytes: u64,
    /// Hierarchical inactive file pages (v1 `total_inactive_file`, v2 `inactive_file`).
    pub(crate) inactive_file_bytes: Option<u64>,
    /// The hard limit (v1 memory.limit_in_bytes, v2 memory.max); `None` when unlimited.
    pub limit_bytes: Option<u64>,
    /// usage − inactive_file, as the kubelet (cAdvisor) computes the working set.
    pub(crate) working_set_bytes: u64,
}

/// Event counters of one cgroup (v2 memory.events; v1 memory.oom_control and failcnt).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct MemoryEvents {
    /// v2: times usage went over memory.high.
    pub(crate) high: Option<u64>,
    /// v2: times usage hit memory.max; v1: memory.failcnt.
    pub(crate) max: Option<u64>,
    /// v2: OOM situations; v1: `under_oom` flag.
    pub(crate) oom: Option<u64>,
    /// Processes the OOM killer killed in this cgroup (v2 `oom_kill`, v1 oom_control
    /// `oom_kill`, since 4.13).
    pub oom_kill: Option<u64>,
}

/// Reads memory files of cgroups under one hierarchy.
#[derive(Clone, Debug)]
pub struct CgroupReader {
    version: CgroupVersion,
    root: PathBuf,
    /// Where the usage and memory.stat files stay open between reads, if anywhere.
    open: Option<Arc<OpenFiles>>,
}

impl CgroupReader {
    pub fn new(version: CgroupVersion, root: impl Into<PathBuf>) -> Self {
        CgroupReader {
            version,
            root: root.into(),
            open: None,
        }
    }

    /// Keeps the files the working set is read from open in `open` (for readers of the
    /// same cgroups at every synchronize).
    pub(crate) fn keeping_open(mut self, open: Arc<OpenFiles>) -> Self {
        self.open = Some(open);
        self
    }

    fn read(&self, path: &Path) -> Result<String, ObserveError> {
        match &self.open {
            Some(open) => open.read(path),
            None => read_file(path),
        }
    }

    /// Reads `path` now and parses its content with `parse` (without allocating, through
    /// a kept descriptor).
    fn read_with<R>(&self, path: &Path, parse: impl FnOnce(&str) -> R) -> Result<R, ObserveError> {
        match &self.open {
            Some(open) => open.read_with(path, parse),
            None => read_file(path).map(|text| parse(&text)),
        }
    }

    pub(crate) fn version(&self) -> CgroupVersion {
        self.version
    }

    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    /// Absolute directory of a cgroup given relative to the root ("" is the root).
    pub(crate) fn dir(&self, cgroup: &str) -> PathBuf {
        self.root.join(cgroup.trim_start_matches('/'))
    }

    fn file(&self, cgroup: &str, v1: &str, v2: &str) -> PathBuf {
        self.dir(cgroup).join(match self.version {
            CgroupVersion::V1 => v1,
            CgroupVersion::V2 => v2,
        })
    }

    /// The file whose value crosses memory thresholds (v1 memory.usage_in_bytes, v2
    /// memory.current).
    pub(crate) fn usage_file(&self, cgroup: &str) -> PathBuf {
        self.file(cgroup, "memory.usage_in_bytes", "memory.current")
    }

    pub(crate) fn memory_stats(&self, cgroup: &str) -> Result<MemoryStats, ObserveError> {
        let (usage_bytes, inactive_file_bytes) = self.usage_and_inactive_file(cgroup)?;
        let limit_path = self.file(cgroup, "memory.limit_in_bytes", "memory.max");
        let limit_bytes = match self.read(&limit_path) {
            Ok(text) => single(&limit_path, &text)?,
            // The v2 root has no memory.max: unlimited.
            Err(ObserveError::Read { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                None
            }
            Err(err) => return Err(err),
        };
        Ok(MemoryStats {
            usage_bytes,
            inactive_file_bytes,
            limit_bytes,
            working_set_bytes: usage_bytes.saturating_sub(inactive_file_bytes.unwrap_or(0)),
        })
    }

    /// The working set alone (usage minus inactive file pages, as cAdvisor computes it):
    /// two reads, no limit, for callers that poll many cgroups.
    pub(crate) fn working_set_bytes(&self, cgroup: &str) -> Result<u64, ObserveError> {
        let (usage, inactive_file) = self.usage_and_inactive_file(cgroup)?;
        Ok(usage.saturating_sub(inactive_file.unwrap_or(0)))
    }

    /// The usage (memory.usage_in_bytes or memory.current): one read.
    pub(crate) fn usage_bytes(&self, cgroup: &str) -> Result<u64, ObserveError> {
        let path = self.usage_file(cgroup);
        Ok(self
            .read_with(&path, |text| single(&path, text))??
            .unwrap_or(0))
    }

    /// The usage and the inactive file pages (hierarchical), as the working set needs
    /// them: two reads.
    pub fn usage_and_inactive_file(
        &self,
        cgroup: &str,
    ) -> Result<(u64, Option<u64>), ObserveError> {
        let usage_bytes = self.usage_bytes(cgroup)?;
        Ok((usage_bytes, self.inactive_file_bytes(cgroup)?))
    }

    /// The inactive file pages (hierarchical) from memory.stat: one read; `None` when the
    /// file lacks the key.
    pub(crate) fn inactive_file_bytes(&self, cgroup: &str) -> Result<Option<u64>, ObserveError> {
        let stat_path = self.file(cgroup, "memory.stat", "memory.stat");
        let inactive_key = match self.version {
            CgroupVersion::V1 => "total_inactive_file",
            CgroupVersion::V2 => "inactive_file",
        };
        self.read_with(&stat_path, |text| {
            parse::flat_keyed_value(text, inactive_key)
        })
    }

    pub fn memory_events(&self, cgroup: &str) -> Result<MemoryEvents, ObserveError> {
        match self.version {
            CgroupVersion::V2 => {
                let events =
                    parse::flat_keyed(&read_file(&self.file(cgroup, "", "memory.events"))?);
                Ok(MemoryEvents {
                    high: events.get("high").copied(),
                    max: events.get("max").copied(),
                    oom: events.get("oom").copied(),
                    oom_kill: events.get("oom_kill").copied(),
                })
            }
            CgroupVersion::V1 => {
                let oom =
                    parse::flat_keyed(&read_file(&self.dir(cgroup).join("memory.oom_control"))?);
                let failcnt = read_single(&self.dir(cgroup).join("memory.failcnt"))?;
                Ok(MemoryEvents {
                    high: None,
                    max: failcnt,
                    oom: oom.get("under_oom").copied(),
                    oom_kill: oom.get("oom_kill").copied(),
                })
            }
        }
    }
}

fn read_single(path: &Path) -> Result<Option<u64>, ObserveError> {
    single(path, &read_file(path)?)
}

fn single(path: &Path, text: &str) -> Result<Option<u64>, ObserveError> {
    parse::single_value(text).map_err(|e| ObserveError::Parse {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;

    const HYBRID: &str = "\
25 30 0:22 / /sys/fs/cgroup rw - tmpfs tmpfs ro,mode=755
26 25 0:23 / /sys/fs/cgroup/unified rw,relatime shared:5 - cgroup2 cgroup2 rw
31 25 0:28 / /sys/fs/cgroup/memory rw,relatime shared:10 - cgroup cgroup rw,memory
32 25 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
";

    #[test]
    fn detects_hybrid_v1_memory() {
        let l = CgroupLayout::from_mountinfo(HYBRID, |_| String::new()).unwrap();
        assert_eq!(l.version, CgroupVersion::V1);
        assert_eq!(l.memory_root, Path::new("/sys/fs/cgroup/memory"));
        assert_eq!(
            l.unified_root.as_deref(),
            Some(Path::new("/sys/fs/cgroup/unified"))
        );
    }

    #[test]
    fn detects_pure_v2_only_with_memory_controller() {
        let text = "26 1 0:23 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n";
        let l = CgroupLayout::from_mountinfo(text, |_| "cpuset cpu io memory pids".into()).unwrap();
        assert_eq!(l.version, CgroupVersion::V2);
        assert!(CgroupLayout::from_mountinfo(text, |_| "cpu io".into()).is_none());
    }

    fn fake_tree(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in files {
            let path = dir.path().join(name);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, text).unwrap();
        }
        dir
    }

    #[test]
    fn v1_memory_stats_and_events() {
        let t = fake_tree(&[
            ("pods/memory.usage_in_bytes", "1000\n"),
            ("pods/memory.stat", "cache 1\ntotal_inactive_file 300\n"),
            ("pods/memory.limit_in_bytes", "9223372036854771712\n"),
            (
                "pods/memory.oom_control",
                "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
            ),
            ("pods/memory.failcnt", "5\n"),
        ]);
        let r = CgroupReader::new(CgroupVersion::V1, t.path());
        let m = r.memory_stats("/pods").unwrap();
        assert_eq!(r.working_set_bytes("pods").unwrap(), 700);
        assert_eq!(
            m,
            MemoryStats {
                usage_bytes: 1000,
                inactive_file_bytes: Some(300),
                limit_bytes: None,
                working_set_bytes: 700
            }
        );
        let e = r.memory_events("pods").unwrap();
        assert_eq!((e.max, e.oom_kill), (Some(5), Some(2)));
    }

    #[test]
    fn v2_memory_stats_and_events() {
        let t = fake_tree(&[
            ("p/memory.current", "4096\n"),
            ("p/memory.stat", "anon 1\ninactive_file 5000\n"),
            ("p/memory.max", "max\n"),
            (
                "p/memory.events",
                "low 0\nhigh 3\nmax 1\noom 0\noom_kill 0\noom_group_kill 0\n",
            ),
        ]);
        let r = CgroupReader::new(CgroupVersion::V2, t.path());
        let m = r.memory_stats("p").unwrap();
        // inactive_file above usage (racy reads) must not underflow.
        assert_eq!(m.working_set_bytes, 0);
        assert_eq!(r.working_set_bytes("p").unwrap(), 0);
        assert_eq!(r.memory_events("p").unwrap().high, Some(3));
    }

    #[test]
    fn missing_and_odd_files_are_errors_naming_the_path() {
        let t = fake_tree(&[("q/memory.current", "lots\n"), ("q/memory.stat", "")]);
        let r = CgroupReader::new(CgroupVersion::V2, t.path());
        let err = r.memory_stats("q").unwrap_err().to_string();
        assert!(
            err.contains("q/memory.current") && err.contains("lots"),
            "{err}"
        );
        let err = r.memory_stats("absent").unwrap_err().to_string();
        assert!(err.contains("absent/memory.current"), "{err}");
        let err = r.working_set_bytes("absent").unwrap_err().to_string();
        assert!(err.contains("absent/memory.current"), "{err}");
    }
}
