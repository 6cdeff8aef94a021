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
mod tests {
    use rstest::rstest;
    use serde_json::Value;

    use super::*;
    use crate::events::EventReason;
    use crate::notify::WakeSource;
    use crate::state::SharedState;

    fn state(events: usize, dropped_first: usize) -> AgentState {
        let shared = SharedState::default();
        for i in 0..events {
            shared.event(EventReason::Started, "node", format!("event {i}"));
        }
        let mut s = shared.read();
        for _ in 0..dropped_first {
            s.events.pop_front();
            s.events_dropped += 1;
        }
        s.sources = vec![SourceStatus::running(WakeSource::Timer, "every 10s")];
        s.conditions = vec!["DiskPressure".into()];
        s
    }

    fn body(reply: &Reply) -> Value {
        serde_json::from_str(&reply.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", reply.body))
    }

    #[rstest]
    #[case::status(Scope::Full, "GET", "/status", 200)]
    #[case::head(Scope::Full, "HEAD", "/pods", 200)]
    #[case::events(Scope::Full, "GET", "/events?since=0&limit=2", 200)]
    #[case::metrics(Scope::Full, "GET", "/metrics", 200)]
    #[case::unknown(Scope::Full, "GET", "/nope", 404)]
    #[case::trailing_slash(Scope::Full, "GET", "/status/", 404)]
    #[case::post(Scope::Full, "POST", "/status", 405)]
    #[case::delete(Scope::Full, "DELETE", "/metrics", 405)]
    #[case::unknown_before_method(Scope::Full, "POST", "/nope", 404)]
    #[case::tcp_metrics(Scope::MetricsOnly, "GET", "/metrics", 200)]
    #[case::tcp_hides_status(Scope::MetricsOnly, "GET", "/status", 404)]
    #[case::tcp_hides_pods(Scope::MetricsOnly, "GET", "/pods", 404)]
    #[case::bad_since(Scope::Full, "GET", "/events?since=-1", 400)]
    #[case::bad_limit(Scope::Full, "GET", "/events?limit=ten", 400)]
    #[case::bad_format(Scope::Full, "GET", "/status?format=yaml", 400)]
    #[case::unknown_key(Scope::Full, "GET", "/status?watch=1", 200)]
    fn answers(
        #[case] scope: Scope,
        #[case] method: &str,
        #[case] target: &str,
        #[case] status: u16,
    ) {
        let reply = respond(&state(3, 0), scope, method, target);
        assert_eq!(reply.status, status, "{method} {target}: {}", reply.body);
        if status != 200 {
            let err = body(&reply);
            assert_eq!(err["status"], status);
            assert!(
                err["error"].as_str().is_some_and(|e| !e.is_empty()),
                "{err}"
            );
        }
    }

    #[test]
    fn healthz_answers_503_with_the_problems_until_a_synchronize_finished() {
        for scope in [Scope::Full, Scope::MetricsOnly] {
            let reply = respond(&state(1, 0), scope, "GET", "/healthz");
            assert_eq!(reply.status, 503, "{}", reply.body);
            let v = body(&reply);
            assert_eq!(v["healthy"], false, "{v}");
            assert_eq!(v["problems"][0], "no synchronize has finished yet", "{v}");
        }
        let mut s = state(1, 0);
        s.last_sync = Some(LastSync {
            finished_unix_seconds: 0.0,
            sequence: 1,
            at: String::new(),
            wake_sources: vec![],
            wake_latency_us: 0,
            duration_us: 0,
            summary: String::new(),
            finished_ns: crate::clock::monotonic_ns(),
        });
        let reply = respond(&s, Scope::Full, "GET", "/healthz");
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert_eq!(body(&reply)["healthy"], true);
    }

    #[test]
    fn status_json_has_the_sections() {
        let reply = respond(&state(1, 0), Scope::Full, "GET", "/status");
        assert_eq!(reply.content_type, JSON);
        let v = body(&reply);
        assert_eq!(v["sources"][0]["source"], "timer");
        assert_eq!(v["sources"][0]["state"], "running");
        assert_eq!(v["conditions"][0], "DiskPressure");
        assert!(v["lastSync"].is_null() && v["observation"].is_null(), "{v}");
        assert!(v.get("events").is_none(), "status carries no events: {v}");
        assert!(v["lastSyncAgeSeconds"].is_null(), "{v}");
        assert!(
            v["runtimeSilence"].is_null(),
            "the runtime never fell silent: {v}"
        );
    }

    #[test]
    fn status_json_carries_the_age_of_the_last_synchronize() {
        let mut s = state(1, 0);
        s.last_sync = Some(LastSync {
            finished_unix_seconds: 0.0,
            sequence: 4,
            at: "2025-01-02T03:04:05Z".into(),
            wake_sources: vec![],
            wake_latency_us: 0,
            duration_us: 0,
            summary: String::new(),
            finished_ns: 10_000_000_000,
        });
        let v = serde_json::to_value(status_view(&s, 12_345_000_000)).expect("serialize");
        assert_eq!(v["lastSyncAgeSeconds"], 2.345, "{v}");
        assert_eq!(v["lastSync"]["sequence"], 4, "{v}");
        assert!(v["lastSync"].get("finishedNs").is_none(), "{v}");
    }

    #[test]
    fn text_format_renders_the_tables() {
        let s = state(2, 0);
        let status = respond(&s, Scope::Full, "GET", "/status?format=text");
        assert_eq!(status.content_type, TEXT);
        assert!(status.body.contains("DiskPressure"), "{}", status.body);
        let events = respond(&s, Scope::Full, "GET", "/events?format=text&limit=1");
        assert!(events.body.starts_with("TIME"), "{}", events.body);
        assert!(
            events.body.contains("event 1") && !events.body.contains("event 0"),
            "{}",
            events.body
        );
    }

    #[test]
    fn pretty_json_is_indented() {
        let reply = respond(&state(0, 0), Scope::Full, "GET", "/pods?pretty");
        assert_eq!(reply.body, "{\n  \"pods\": []\n}\n");
    }

    // 6 events recorded, the first 2 dropped: numbers 2..=5 remain.
    #[rstest]
    #[case::all("", &[2, 3, 4, 5], 6, 0)]
    #[case::newest("limit=2", &[4, 5], 6, 0)]
    #[case::limit_zero("limit=0", &[], 6, 0)]
    #[case::since("since=4", &[4, 5], 6, 0)]
    #[case::since_paged("since=3&limit=1", &[3], 4, 0)]
    #[case::since_dropped("since=0&limit=2", &[2, 3], 4, 2)]
    #[case::caught_up("since=6", &[], 6, 0)]
    #[case::beyond_end("since=99", &[], 6, 0)]
    fn pages_events(
        #[case] query: &str,
        #[case] indexes: &[u64],
        #[case] next: u64,
        #[case] missed: u64,
    ) {
        let reply = respond(
            &state(6, 2),
            Scope::Full,
            "GET",
            &format!("/events?{query}"),
        );
        let v = body(&reply);
        let got: Vec<u64> = v["events"]
            .as_array()
            .unwrap_or_else(|| panic!("no events array: {v}"))
            .iter()
            .map(|e| e["index"].as_u64().unwrap_or(u64::MAX))
            .collect();
        assert_eq!(got, indexes, "{v}");
        assert_eq!(v["next"], next, "{v}");
        assert_eq!(v["missed"], missed, "{v}");
        assert_eq!(v["first"], 2, "{v}");
        if let Some(first) = v["events"].get(0) {
            assert_eq!(first["message"], format!("event {}", indexes[0]), "{v}");
            assert_eq!(first["reason"], "Started", "{v}");
        }
    }

    #[test]
    fn metrics_json_and_text() {
        let s = state(0, 0);
        let text = respond(&s, Scope::MetricsOnly, "GET", "/metrics");
        assert_eq!(text.content_type, crate::api::METRICS_CONTENT_TYPE);
        assert!(
            text.body
                .contains("# TYPE monitor_synchronizes_total counter")
        );
        // Prometheus' own Accept header: OpenMetrics first.
        let accept = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        let open = respond_to(&s, Scope::MetricsOnly, "GET", "/metrics", Some(accept));
        assert_eq!(open.content_type, crate::api::OPENMETRICS_CONTENT_TYPE);
        assert!(open.body.contains("# TYPE monitor_synchronizes counter\n"));
        assert!(open.body.ends_with("# EOF\n"), "{}", open.body);
        let json = body(&respond(&s, Scope::Full, "GET", "/metrics?format=json"));
        assert_eq!(json["synchronizes"], 0);
    }

    #[rstest]
    #[case::full_key("default/web", Ok("default/web"))]
    #[case::name("web", Ok("default/web"))]
    #[case::unique_elsewhere("batch", Ok("jobs/batch"))]
    #[case::ambiguous("db", Err(400))]
    #[case::unknown_name("nope", Err(404))]
    #[case::unknown_key("jobs/web", Err(404))]
    fn resolves_pod_names(#[case] asked: &str, #[case] want: Result<&str, u16>) {
        let known: Vec<String> = [
            "default/web",
            "jobs/batch",
            "default/db",
            "jobs/db",
            "default/web",
        ]
        .iter()
        .map(|k| k.to_string())
        .collect();
        let got = resolve_pod(asked, &known);
        match want {
            Ok(key) => assert_eq!(got, Ok(key.to_string())),
            Err(status) => {
                let (code, why) = got.expect_err(asked);
                assert_eq!(code, status, "{why}");
                assert!(why.contains(asked), "{why}");
            }
        }
    }

    fn ranked_state() -> AgentState {
        use crate::policy::eviction::fixtures::{MI, pod, qty};
        use crate::policy::quantity::QuantityOrPercent;
        use crate::policy::signal::{Signal, SignalObservation, Threshold};
        let mut s = state(0, 0);
        let mut observations = crate::policy::signal::Observations::new();
        observations.insert(
            Signal::MemoryAvailable,
            SignalObservation {
                available: 100 * MI as i64,
                capacity: 1024 * MI as i64,
                time: std::time::Duration::ZERO,
            },
        );
        s.ranking = Some(std::sync::Arc::new(crate::state::RankingSnapshot {
            input: crate::policy::eviction::SyncInput {
                observations,
                pods: vec![
                    pod("small").working_set(10 * MI).build(),
                    pod("big").working_set(600 * MI).build(),
                ],
                fs_layout: crate::policy::types::FsLayout::Shared,
            },
            thresholds: vec![Threshold::hard(
                Signal::MemoryAvailable,
                QuantityOrPercent::Quantity(qty("200Mi")),
            )],
            hot_path: true,
            hot_victim: Some("default/big".into()),
        }));
        s
    }

    #[test]
    fn explain_answers_from_the_last_ranking() {
        let s = ranked_state();
        let v = body(&respond(&s, Scope::Full, "GET", "/explain?pod=small"));
        assert_eq!(v["pod"], "default/small", "{v}");
        assert_eq!(v["signals"][0]["signal"], "memory.available", "{v}");
        assert_eq!(v["signals"][0]["met"], true, "{v}");
        assert_eq!(v["signals"][0]["rank"], 2, "{v}");
        assert_eq!(v["signals"][0]["before"]["pod"], "default/big", "{v}");
        assert_eq!(v["hotPathVictim"], "default/big", "{v}");
        let text = respond(
            &s,
            Scope::Full,
            "GET",
            "/explain?pod=default/big&format=text",
        );
        assert_eq!(text.status, 200, "{}", text.body);
        assert!(
            text.body.contains("rank 1 of 2") && text.body.contains("hot path"),
            "{}",
            text.body
        );
    }

    #[rstest]
    #[case::no_pod("/explain", 400)]
    #[case::unknown("/explain?pod=default/nope", 404)]
    #[case::tcp_hides_it("/explain?pod=small", 404)]
    fn explain_refuses_clearly(#[case] target: &str, #[case] status: u16) {
        let scope = if target.ends_with("small") {
            Scope::MetricsOnly
        } else {
            Scope::Full
        };
        let reply = respond(&ranked_state(), scope, "GET", target);
        assert_eq!(reply.status, status, "{}", reply.body);
    }

    fn recorded(at: &str, action: &str, pod: &str) -> std::sync::Arc<crate::decisions::Decision> {
        std::sync::Arc::new(crate::decisions::Decision {
            at: at.into(),
            action: action.into(),
            shadow: false,
            pod: Some(pod.into()),
            uid: None,
            signal: Some("memory.available".into()),
            message: format!("{action} of {pod}"),
            signals: Vec::new(),
            thresholds_met: vec!["memory.available<100Mi".into()],
            ranking: Vec::new(),
            timings: crate::decisions::Timings {
                crossing_to_kill_us: Some(120),
                source: Some("ebpf".into()),
                ..Default::default()
            },
        })
    }

    #[test]
    fn decisions_and_the_explanation_of_a_gone_pod_come_from_the_record() {
        let mut s = ranked_state();
        s.decisions
            .push_back(recorded("2026-11-27T10:00:00Z", "hotKill", "shop/gone"));
        s.decisions
            .push_back(recorded("2026-11-27T11:00:00Z", "evict", "default/big"));
        let v = body(&respond(&s, Scope::Full, "GET", "/decisions?pod=shop/gone"));
        assert_eq!(v["decisions"].as_array().map(Vec::len), Some(1), "{v}");
        assert_eq!(v["decisions"][0]["action"], "hotKill", "{v}");
        let v = body(&respond(
            &s,
            Scope::Full,
            "GET",
            "/decisions?after=2026-11-27T10:30:00Z",
        ));
        assert_eq!(v["decisions"].as_array().map(Vec::len), Some(1), "{v}");
        assert_eq!(v["decisions"][0]["pod"], "default/big", "{v}");
        let bad = respond(&s, Scope::Full, "GET", "/decisions?after=yesterday");
        assert_eq!(bad.status, 400, "{}", bad.body);
        let gone = respond(&s, Scope::Full, "GET", "/explain?pod=shop/gone&format=text");
        assert_eq!(gone.status, 200, "{}", gone.body);
        assert!(
            gone.body.contains("not running here")
                && gone.body.contains("hotKill")
                && gone.body.contains("crossing to kill 120µs (ebpf)"),
            "{}",
            gone.body
        );
        // A running pod is still explained from the ranking.
        let live = body(&respond(&s, Scope::Full, "GET", "/explain?pod=default/big"));
        assert_eq!(live["pod"], "default/big", "{live}");
        let text = respond(&s, Scope::MetricsOnly, "GET", "/decisions");
        assert_eq!(text.status, 404, "the TCP listener serves metrics only");
    }

    #[test]
    fn explain_before_any_synchronize_says_so() {
        let reply = respond(&state(0, 0), Scope::Full, "GET", "/explain?pod=x");
        assert_eq!(reply.status, 503);
        assert!(
            body(&reply)["error"]
                .as_str()
                .is_some_and(|e| e.contains("no synchronize"))
        );
    }
}
