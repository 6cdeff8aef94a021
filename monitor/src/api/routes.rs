//! The routes as one pure function from (state, method, request target) to a reply, so
//! every answer is tested without a socket; the server only moves bytes.
use serde::Serialize;
use serde_json::json;

use super::metrics::{Exposition, render_metrics_as};
use super::render::{
    render_decisions, render_event_list, render_explanation, render_pods, render_status,
};
use crate::notify::SourceStatus;
use crate::observe::NodeObservation;
use crate::state::{AgentState, Event, LastSync, SignalStatus};

const JSON: &str = "application/json";
const TEXT: &str = "text/plain; charset=utf-8";

/// Which routes a listener serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// The root-only unix socket: every route.
    Full,
    /// The optional TCP listener: `/metrics` only, so nothing else leaves the host.
    MetricsOnly,
}

/// An HTTP answer. A 405 is sent with `Allow: GET, HEAD`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    pub status: u16,
    pub content_type: &'static str,
    pub body: String,
}

/// The methods every route accepts (HEAD: the same headers as GET, no body).
pub(crate) const ALLOWED_METHODS: &str = "GET, HEAD";

/// Answers one request. `target` is the request target: a path with an optional query.
pub fn respond(state: &AgentState, scope: Scope, method: &str, target: &str) -> Reply {
    respond_to(state, scope, method, target, None)
}

/// [`respond`] with the request's `Accept` header, which chooses the format of `/metrics`
/// (see [`Exposition::negotiate`]).
pub fn respond_to(
    state: &AgentState,
    scope: Scope,
    method: &str,
    target: &str,
    accept: Option<&str>,
) -> Reply {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let route = match (scope, path) {
        (Scope::Full, "/status" | "/pods" | "/events" | "/explain" | "/decisions")
        | (_, "/metrics" | "/healthz") => path,
        _ => return error(404, &format!("no route {path}"), path),
    };
    if !matches!(method, "GET" | "HEAD") {
        return error(
            405,
            &format!("method {method} not allowed on {route} (read-only API: {ALLOWED_METHODS})"),
            route,
        );
    }
    let query = match Query::parse(query) {
        Ok(q) => q,
        Err(why) => return error(400, &why, route),
    };
    match route {
        "/status" => match query.format {
            Some(Format::Text) => text(render_status(state, crate::clock::monotonic_ns())),
            _ => to_json(
                &status_view(state, crate::clock::monotonic_ns()),
                query.pretty,
                route,
            ),
        },
        "/pods" => match query.format {
            Some(Format::Text) => text(render_pods(state)),
            _ => to_json(&json!({ "pods": state.pods }), query.pretty, route),
        },
        "/explain" => explain_reply(state, &query),
        "/decisions" => {
            let chosen = crate::decisions::select(
                state.decisions.iter().map(|d| d.as_ref()),
                query.pod.as_deref().filter(|p| !p.is_empty()),
                query.after.as_deref(),
            );
            match query.format {
                Some(Format::Text) => text(render_decisions(&chosen)),
                _ => to_json(&json!({ "decisions": chosen }), query.pretty, route),
            }
        }
        "/healthz" => {
            let health = super::health::health(state, crate::clock::monotonic_ns());
            let mut reply = to_json(&health, query.pretty, route);
            if !health.healthy {
                reply.status = 503;
            }
            reply
        }
        "/events" => {
            let page = events_page(state, query.since, query.limit);
            match query.format {
                Some(Format::Text) => text(render_event_list(page.events.iter().map(|e| e.event))),
                _ => to_json(&page, query.pretty, route),
            }
        }
        _ => match query.format {
            Some(Format::Json) => to_json(&state.metrics, query.pretty, route),
            _ => {
                let exposition = Exposition::negotiate(accept);
                Reply {
                    status: 200,
                    content_type: exposition.content_type(),
                    body: render_metrics_as(state, exposition),
                }
            }
        },
    }
}

/// `/status`: everything about the node's pressure, without pods, events and metrics.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct StatusView<'a> {
    sources: &'a [SourceStatus],
    signals: &'a [SignalStatus],
    conditions: &'a [String],
    /// The PSI contention conditions, when the PSINodeCondition gate is on.
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    contention_conditions: &'a [crate::policy::contention::ContentionStatus],
    last_sync: Option<&'a LastSync>,
    /// Seconds since the last synchronize finished: a loop that stopped shows here while
    /// everything else still looks current.
    last_sync_age_seconds: Option<f64>,
    /// The newest evictions and how each ended.
    evictions: &'a std::collections::VecDeque<crate::state::EvictionView>,
    /// The last time the container runtime left calls to stop a pod unanswered.
    runtime_silence: Option<&'a crate::state::RuntimeSilence>,
    observation: Option<&'a NodeObservation>,
}

fn status_view(state: &AgentState, now_ns: u64) -> StatusView<'_> {
    StatusView {
        sources: &state.sources,
        signals: &state.signals,
        conditions: &state.conditions,
        contention_conditions: &state.contention,
        last_sync: state.last_sync.as_ref(),
        // Milliseconds are all a reader of an age needs.
        last_sync_age_seconds: state
            .last_sync
            .as_ref()
            .map(|sync| (sync.age(now_ns).as_millis() as f64) / 1000.0),
        evictions: &state.evictions,
        runtime_silence: state.runtime_silence.as_ref(),
        observation: state.observation.as_ref(),
    }
}

/// `/events`: events numbered from the agent's start. A client that polls passes the
/// answer's `next` as `since`; `missed` counts events dropped (the agent keeps the newest
/// [`crate::state::EVENTS_KEPT`]) before the client asked for them.
#[derive(Serialize)]
struct EventsPage<'a> {
    first: u64,
    next: u64,
    missed: u64,
    events: Vec<NumberedEvent<'a>>,
}

#[derive(Serialize)]
struct NumberedEvent<'a> {
    index: u64,
    #[serde(flatten)]
    event: &'a Event,
}

/// With `since`, the oldest `limit` events from number `since` on (paging forward); without,
/// the newest `limit`, like `kubectl logs --tail`.
fn events_page(state: &AgentState, since: Option<u64>, limit: Option<usize>) -> EventsPage<'_> {
    let first = state.events_dropped;
    let end = first.saturating_add(state.events.len() as u64);
    let numbered = state
        .events
        .iter()
        .enumerate()
        .map(|(i, event)| NumberedEvent {
            index: first.saturating_add(i as u64),
            event,
        });
    let events: Vec<NumberedEvent<'_>> = match since {
        Some(since) => numbered
            .filter(|e| e.index >= since)
            .take(limit.unwrap_or(usize::MAX))
            .collect(),
        None => {
            let skip = state
                .events
                .len()
                .saturating_sub(limit.unwrap_or(usize::MAX));
            numbered.skip(skip).collect()
        }
    };
    let next = events.last().map_or(end, |e| e.index.saturating_add(1));
    let missed = since.map_or(0, |since| first.saturating_sub(since));
    EventsPage {
        first,
        next,
        missed,
        events,
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    Json,
    Text,
}

#[derive(Debug, Default)]
struct Query {
    format: Option<Format>,
    pretty: bool,
    since: Option<u64>,
    limit: Option<usize>,
    /// `/explain`, `/decisions`: "namespace/name" or a name.
    pod: Option<String>,
    /// `/decisions`: only those at or after this time (RFC 3339, UTC).
    after: Option<String>,
}

impl Query {
    /// Known keys with bad values are refused (a typo must not silently show everything);
    /// unknown keys are ignored, as HTTP servers usually do.
    fn parse(query: &str) -> Result<Query, String> {
        let mut q = Query::default();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let bad = || format!("invalid value {value:?} for query parameter {key}");
            match key {
                "format" => {
                    q.format = Some(match value {
                        "json" => Format::Json,
                        "text" => Format::Text,
                        _ => return Err(format!("{} (expected json or text)", bad())),
                    })
                }
                "pretty" => {
                    q.pretty = match value {
                        "" | "true" | "1" => true,
                        "false" | "0" => false,
                        _ => return Err(bad()),
                    }
                }
                "since" => q.since = Some(value.parse().map_err(|_| bad())?),
                "limit" => q.limit = Some(value.parse().map_err(|_| bad())?),
                "pod" => q.pod = Some(value.to_string()),
                "after" => {
                    let at = time::OffsetDateTime::parse(
                        value,
                        &time::format_description::well_known::Rfc3339,
                    )
                    .map_err(|_| format!("{} (expected an RFC 3339 time)", bad()))?;
                    // Compared as text with the records' own format (UTC, whole seconds).
                    let at = at.to_offset(time::UtcOffset::UTC);
                    let at = at.replace_nanosecond(0).unwrap_or(at);
                    q.after = Some(
                        at.format(&time::format_description::well_known::Rfc3339)
                            .map_err(|_| bad())?,
                    );
                }
                _ => {}
            }
        }
        Ok(q)
    }
}

/// `/explain?pod=POD`: why the pod would or would not be evicted, computed by the
/// policy's ranking on the inputs of the last eviction pass.
fn explain_reply(state: &AgentState, query: &Query) -> Reply {
    const ROUTE: &str = "/explain";
    let Some(asked) = query.pod.as_deref().filter(|p| !p.is_empty()) else {
        return error(
            400,
            "which pod? pass ?pod=NAMESPACE/NAME (or a name alone when it is unique)",
            ROUTE,
        );
    };
    let Some(snapshot) = state.ranking.as_deref() else {
        return error(
            503,
            "no synchronize has ranked the pods yet; ask again in a moment",
            ROUTE,
        );
    };
    let known: Vec<String> = snapshot
        .input
        .pods
        .iter()
        .map(|p| p.pod.key())
        .chain(state.pods.iter().map(|p| p.key.clone()))
        .collect();
    let key = match resolve_pod(asked, &known) {
        Ok(key) => key,
        Err((status, why)) => {
            return gone_pod_reply(state, asked, query)
                .unwrap_or_else(|| error(status, &why, ROUTE));
        }
    };
    let explanation = crate::policy::explain::explain(
        &snapshot.input,
        &snapshot.thresholds,
        &key,
        snapshot.hot_path,
        snapshot.hot_victim.as_deref(),
    );
    match explanation {
        Some(e) => match query.format {
            Some(Format::Text) => text(render_explanation(&e)),
            _ => to_json(&e, query.pretty, ROUTE),
        },
        None => gone_pod_reply(state, &key, query).unwrap_or_else(|| {
            let status = state
                .pods
                .iter()
                .find(|p| p.key == key)
                .map(|p| match &p.reason {
                    Some(reason) => format!(" (phase {}, reason {reason})", p.phase),
                    None => format!(" (phase {})", p.phase),
                })
                .unwrap_or_default();
            error(
                404,
                &format!(
                    "pod {key} was not among the eviction candidates of the last synchronize{status}: only active pods whose eviction is not under way are ranked"
                ),
                ROUTE,
            )
        }),
    }
}

/// `/explain` of a pod that is not running here: its decisions from the record, if any.
fn gone_pod_reply(state: &AgentState, asked: &str, query: &Query) -> Option<Reply> {
    let chosen = crate::decisions::select(
        state.decisions.iter().map(|d| d.as_ref()),
        Some(asked),
        None,
    );
    if chosen.is_empty() {
        return None;
    }
    Some(match query.format {
        Some(Format::Text) => text(format!(
            "{asked} is not running here (not among the candidates of the last synchronize); what the agent decided about it:\n\n{}",
            render_decisions(&chosen)
        )),
        _ => to_json(
            &json!({ "pod": asked, "running": false, "decisions": chosen }),
            query.pretty,
            "/explain",
        ),
    })
}

/// The pod key `asked` names: "namespace/name" as is, a bare name when exactly one known
/// pod has it. Errors carry the HTTP status.
fn resolve_pod(asked: &str, known: &[String]) -> Result<String, (u16, String)> {
    if asked.contains('/') {
        return if known.iter().any(|k| k == asked) {
            Ok(asked.to_string())
        } else {
            Err((
                404,
                format!("no pod {asked} among the pods the agent manages"),
            ))
        };
    }
    let mut matches: Vec<&String> = known
        .iter()
        .filter(|k| k.split_once('/').is_some_and(|(_, name)| name == asked))
        .collect();
    matches.sort();
    matches.dedup();
    match matches.as_slice() {
        [] => Err((
            404,
            format!("no pod named {asked} among the pods the agent manages"),
        )),
        [one] => Ok((*one).clone()),
        many => Err((
            400,
            format!(
                "{} pods are named {asked} ({}): give NAMESPACE/NAME",
                many.len(),
                many.iter()
                    .map(|k| k.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )),
    }
}

fn text(body: String) -> Reply {
    Reply {
        status: 200,
        content_type: TEXT,
        body,
    }
}

fn to_json<T: Serialize>(value: &T, pretty: bool, route: &str) -> Reply {
    let body = if pretty {
        serde_json::to_string_pretty(value)
    } else {
        serde_json::to_string(value)
    };
    match body {
        Ok(mut body) => {
            body.push('\n');
            Reply {
                status: 200,
                content_type: JSON,
                body,
            }
        }
        Err(e) => error(500, &format!("encoding the answer as JSON: {e}"), route),
    }
}

/// Errors are JSON on every route, so clients parse one shape.
fn error(status: u16, message: &str, path: &str) -> Reply {
    let body = json!({ "error": message, "status": status, "path": path });
    Reply {
        status,
        content_type: JSON,
        body: format!("{body}\n"),
    }
}

#[cfg(test)]
mod tests;
