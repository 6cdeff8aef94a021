//! The agent's local API: HTTP/1.1 on a root-only unix socket, an optional read-only
//! Prometheus `/metrics` on TCP, and the blocking client behind `monitor status | pods |
//! events | metrics`.
//!
//! The API only READS [`crate::state::SharedState`]: the synchronize loop and the pod
//! runtime fill it, nothing here changes the agent. That is why a socket with mode
//! 0600 is enough access control (the kubelet's read-only port made the same choice for the same data, on TCP).
//!
//! | route | answer |
//! |---|---|
//! | `GET /status` | sources, each signal against its thresholds, conditions, last synchronize, observation |
//! | `GET /pods` | the pods the agent runs: phase, reason, message, `conditions` (`DisruptionTarget` once evicted or preempted, in the API's PodCondition shape), containers |
//! | `GET /events[?since=N][&limit=N]` | events, each with its number since startup |
//! | `GET /explain?pod=POD` | why the pod would or would not be evicted: per signal its thresholds, the pod's usage and request, its rank and the rule against its neighbours, from the last synchronize's ranking inputs |
//! | `GET /metrics` | Prometheus text exposition format 0.0.4, or OpenMetrics 1.0 when `Accept` asks for it |
//!
//! Every route takes `?format=text` (the CLI's tables, rendered by the agent like the API
//! server's server-side printing for kubectl) and JSON routes take `?pretty=true`.
//!
//! Server: `hyper` 1 with `hyper-util`, chosen over `axum` because four fixed GET routes
//! need no router or middleware stack: `hyper`'s connection builder serves any tokio
//! stream, unix or TCP alike, with a smaller dependency tree (no tower, matchit, ...).
//! The client is hyper's HTTP/1.1 client connection over a tokio `UnixStream`, on a
//! single-threaded runtime made for the one request.

mod client;
mod deadline;
mod error;
/// The test-only checker of the exposition format, shared with the integration tests.
#[cfg(test)]
#[path = "../../tests/support/exposition.rs"]
mod exposition;
pub mod health;
mod metrics;
mod render;
mod routes;
mod server;

pub use client::{
    ClientArgs, ClientCommand, DEFAULT_SOCKET, DecisionsArgs, EventsArgs, ExplainArgs, SOCKET_ENV,
    StatusArgs, get, run_client, run_decisions, run_events, run_explain, run_status,
};
pub use error::ApiError;
pub use health::{Health, health};
pub use metrics::{
    Exposition, METRICS_CONTENT_TYPE, OPENMETRICS_CONTENT_TYPE, render_metrics, render_metrics_as,
};
pub use routes::{Reply, Scope, respond, respond_to};
pub use server::{ApiServer, serve, serve_connection};
