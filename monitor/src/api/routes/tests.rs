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
    serde_json::from_str(&reply.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", reply.body))
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
fn answers(#[case] scope: Scope, #[case] method: &str, #[case] target: &str, #[case] status: u16) {
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
