//! The error of every reader here: what went wrong reading a kernel file, naming the file.
use std::path::{Path, PathBuf};

/// What went wrong reading a kernel file. Always names the file.
#[derive(Debug, thiserror::Error)]
pub enum ObserveError {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {reason}")]
    Parse { path: PathBuf, reason: String },
    #[error("{path}: key {key:?} is missing")]
    Missing { path: PathBuf, key: String },
}

pub(crate) fn read_file(path: &Path) -> Result<String, ObserveError> {
    std::fs::read_to_string(path).map_err(|source| ObserveError::Read {
        path: path.to_path_buf(),
        source,
    })
}
