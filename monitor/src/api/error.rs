//! The API's one error type.
use std::path::PathBuf;

/// What failed, naming the socket, address or route.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("creating the API socket directory {path}: {source}")]
    CreateDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "another agent is already serving the API on {path}; stop it first (or pass another socket path)"
    )]
    AlreadyRunning { path: PathBuf },
    #[error("{path} exists and is not a socket; refusing to replace it")]
    NotASocket { path: PathBuf },
    #[error("checking the existing API socket {path}: {source}")]
    Probe {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("removing the stale API socket {path}: {source}")]
    RemoveStale {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("binding the API socket {path}: {source}")]
    Bind {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("making the API socket {path} root-only (0600): {source}")]
    Permissions {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("moving the API socket into place at {path}: {source}")]
    Publish {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("binding the metrics listener on {addr}: {source}")]
    BindMetrics {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
    #[error("is the agent running? (socket {path}: {source})")]
    NotRunning {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("permission denied: the API is root-only (socket {path}); run this as root")]
    PermissionDenied { path: PathBuf },
    #[error(
        "invalid request path {route:?}: it must start with '/' and hold no spaces or control characters"
    )]
    InvalidRoute { route: String },
    #[error("GET {route} on socket {path}: {source}")]
    Request {
        path: PathBuf,
        route: String,
        source: std::io::Error,
    },
    #[error("GET {route} on socket {path}: malformed answer: {reason}")]
    BadResponse {
        path: PathBuf,
        route: String,
        reason: String,
    },
}
