//! The error of every reader here: what went wrong reading a kernel file, naming the file.
use std::path::{Path, PathBuf};

/// What went wrong reading a kernel file. Always names the file.
#[derive(Debug, thiserror::Error)]
pub enum ObserveError {
    #[error("reading {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {reason}", path.display())]
    Parse { path: PathBuf, reason: String },
    #[error("{}: key {key:?} is missing", path.display())]
    Missing { path: PathBuf, key: String },
    #[error("{}: no answer after {after:?}", path.display())]
    Hung {
        path: PathBuf,
        after: std::time::Duration,
    },
}

pub(crate) fn read_file(path: &Path) -> Result<String, ObserveError> {
    std::fs::read_to_string(path).map_err(|source| ObserveError::Read {
        path: path.to_path_buf(),
        source,
    })
}
