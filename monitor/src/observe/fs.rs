//! Filesystem bytes and inodes (statvfs), for the nodefs and imagefs signals.
use std::path::Path;

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
