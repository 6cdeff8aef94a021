//! The cgroupfs files a tree reads and writes: control files, process lists, removal.
use std::collections::BTreeSet;
use std::io::{self, Write as _};
use std::path::Path;
use std::time::Duration;

use super::CgroupError;

/// Deepest cgroup nesting walked below a pod (a process may make its own children).
const MAX_DEPTH: usize = 16;
/// rmdir of a cgroup whose last task is still exiting fails with EBUSY for a moment.
const REMOVE_ATTEMPTS: u32 = 20;
const REMOVE_PAUSE: Duration = Duration::from_millis(10);

pub(super) fn write_file(path: &Path, value: &str) -> Result<(), CgroupError> {
    // No O_CREAT: a missing control file must read as "not supported", not be created.
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .and_then(|mut file| file.write_all(value.as_bytes()))
        .map_err(|source| CgroupError::Write {
            path: path.to_path_buf(),
            value: value.to_string(),
            source,
        })
}

/// Adds the pids in `dir`'s cgroup.procs and its descendants'. A missing directory or
/// file adds nothing; pid 0 (a task of another pid namespace) is left out, since
/// signalling 0 would hit our own process group.
pub(super) fn collect_pids(dir: &Path, depth: usize, pids: &mut BTreeSet<i32>) {
    if let Ok(text) = std::fs::read_to_string(dir.join("cgroup.procs")) {
        pids.extend(
            text.lines()
                .filter_map(|l| l.trim().parse::<i32>().ok())
                .filter(|p| *p > 0),
        );
    }
    if depth >= MAX_DEPTH {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            collect_pids(&entry.path(), depth + 1, pids);
        }
    }
}

/// Removes a cgroup directory and its child cgroups, deepest first. cgroupfs lets rmdir
/// take a directory with its control files; EBUSY (a task still exiting) is retried.
pub(super) fn remove_cgroup(dir: &Path, depth: usize) -> Result<(), CgroupError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(CgroupError::Read {
                path: dir.to_path_buf(),
                source,
            });
        }
    };
    if depth < MAX_DEPTH {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                remove_cgroup(&entry.path(), depth + 1)?;
            }
        }
    }
    let mut attempt = 0;
    loop {
        match std::fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) && attempt < REMOVE_ATTEMPTS => {
                attempt += 1;
                std::thread::sleep(REMOVE_PAUSE);
            }
            Err(source) => {
                return Err(CgroupError::Remove {
                    path: dir.to_path_buf(),
                    source,
                });
            }
        }
    }
}
