//! The agent's local API: HTTP/1.1 on a root-only unix socket, an optional read-only
//! Prometheus `/metrics` on TCP, and the blocking client behind `monitor status | pods |
//! events | metrics`.
//!
//! The API only READS [`crate::state::SharedState`]: the synchronize loop and the pod
//! runtime fill it, nothing here changes the agent. That is why a socket with mode 0600 is enough access
//! control (the kubelet's read-only port made the same choice for the same data, on TCP).
//!
//! | route | answer |
//! |---|---|
//! | `GET /status` | sources, each signal against its thresholds, conditions, last synchronize, observation |
//! | `GET /pods` | the pods the agent runs |
//! | `GET /events[?since=N][&limit=N]` | events, each with its number since startup |
//! | `GET /metrics` | Prometheus text exposition format 0.0.4 |
//!
//! Every route takes `?format=text` (the CLI's tables, rendered by the agent like the API
//! server's server-side printing for kubectl) and JSON routes take `?pretty=true`.
//!
//! Server: `hyper` 1 with `hyper-util`, chosen over `axum` because four fixed GET routes
//! need no router or middleware stack: `hyper`'s connection builder serves any tokio
//! stream, unix or TCP alike, with a smaller dependency tree (no tower, matchit, ...).
//! The client is plain std (`UnixStream`, `Connection: close`): the CLI needs no runtime.
use std::path::PathBuf;

mod client;
/// The test-only checker of the exposition format, shared with the integration tests.
#[cfg(test)]
#[path = "../../tests/support/exposition.rs"]
mod exposition;
mod metrics;
mod render;
mod routes;
mod server;

pub use client::{ClientArgs, ClientCommand, DEFAULT_SOCKET, get, run_client};
pub use metrics::{METRICS_CONTENT_TYPE, render_metrics};
pub use render::{render_events, render_pods, render_status};
pub use routes::{Reply, Scope, respond};
pub use server::{ApiServer, serve};

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
