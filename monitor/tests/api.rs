//! The local API end to end, unprivileged: `serve` on a socket in a temp dir, answered by
//! the blocking client, raw HTTP, and the `monitor` binary's client subcommands.

mod support {
    pub mod exposition;
}
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;

use monitor::api::{ApiError, ApiServer, get, serve};
use monitor::events::EventReason;
use monitor::notify::{SourceStatus, WakeSource};
use monitor::policy::condition::PodCondition;
use monitor::state::{
    ContainerView, LastSync, PodView, SharedState, SignalStatus, ThresholdStatus,
};
use rstest::rstest;
use serde_json::Value;
use support::exposition::check_exposition;
use tokio::runtime::Runtime;

/// A state as the manager and pod runtime leave it mid-pressure.
fn filled_state() -> SharedState {
    let shared = SharedState::default();
    shared.event(EventReason::Started, "default/web", "Started container app");
    shared.event(
        EventReason::Evicted,
        "default/hog",
        "The node was low on resource: memory. Threshold quantity: 500Mi, available: 412Mi.",
    );
    {
        let mut s = shared.lock();
        s.sources = vec![
            SourceStatus::running(
                WakeSource::Ebpf,
                "tracepoints vmscan/mm_vmscan_direct_reclaim_begin, oom/mark_victim",
            ),
            SourceStatus::running(WakeSource::Psi, "/proc/pressure/memory some 150000 1000000"),
            SourceStatus::unsupported(
                WakeSource::MemcgThreshold,
                "cgroup v2 has no cgroup.event_control",
            ),
            SourceStatus::running(WakeSource::Timer, "every 10s"),
        ];
        s.signals = vec![
            SignalStatus {
                signal: "memory.available".into(),
                available: 412 << 20,
                capacity: 4 << 30,
                thresholds: vec![
                    ThresholdStatus {
                        value: "500Mi".into(),
                        quantity: 500 << 20,
                        kind: "hard".into(),
                        grace_period: None,
                        met: true,
                        grace_period_met: true,
                    },
                    ThresholdStatus {
                        value: "1Gi".into(),
                        quantity: 1 << 30,
                        kind: "soft".into(),
                        grace_period: Some("1m30s".into()),
                        met: true,
                        grace_period_met: false,
                    },
                ],
            },
            SignalStatus {
                signal: "nodefs.inodesFree".into(),
                available: 900_000,
                capacity: 1_000_000,
                thresholds: vec![ThresholdStatus {
                    value: "5%".into(),
                    quantity: 50_000,
                    kind: "hard".into(),
                    grace_period: None,
                    met: false,
                    grace_period_met: false,
                }],
            },
        ];
        s.conditions = vec!["MemoryPressure".into()];
        s.last_sync = Some(LastSync {
            finished_unix_seconds: 0.0,
            sequence: 31,
            at: "2025-06-01T12:00:00Z".into(),
            wake_sources: vec![WakeSource::Ebpf],
            wake_latency_us: 85,
            duration_us: 1_900,
            summary: "evicted default/hog (memory.available < 500Mi)".into(),
            finished_ns: monitor::clock::monotonic_ns(),
        });
        s.pods = vec![
            PodView {
                key: "default/hog".into(),
                uid: "8d1f".into(),
                qos_class: "BestEffort".into(),
                priority: 0,
                phase: "Failed".into(),
                reason: Some("Evicted".into()),
                message: Some("The node was low on resource: memory.".into()),
                conditions: vec![PodCondition::disruption_target(
                    "The node was low on resource: memory.",
                    Some("2025-06-01T11:59:58Z".into()),
                )],
                cgroup: Some("kubepods/besteffort/pod8d1f".into()),
                memory_working_set_bytes: Some(3 << 30),
                containers: vec![ContainerView {
                    name: "hog".into(),
                    pid: None,
                    restart_count: 2,
                    state: "signaled(9)".into(),
                    reason: None,
                }],
            },
            PodView {
                key: "default/web".into(),
                uid: "77aa".into(),
                qos_class: "Guaranteed".into(),
                priority: 1000,
                phase: "Running".into(),
                reason: None,
                message: None,
                conditions: vec![],
                cgroup: Some("kubepods/pod77aa".into()),
                memory_working_set_bytes: Some(120 << 20),
                containers: vec![ContainerView {
                    name: "app".into(),
                    pid: Some(4242),
                    restart_count: 0,
                    state: "running".into(),
                    reason: None,
                }],
            },
        ];
        s.metrics.evictions.insert("memory.available".into(), 1);
        s.metrics.synchronizes = 31;
        s.metrics.sync_duration.observe(0.0019);
        s.metrics.sync_duration.observe(0.03);
        s.metrics.observe_wake_to_sync(WakeSource::Ebpf, 85e-6);
        s.metrics.observe_wake_to_sync(WakeSource::Ebpf, 2e-5);
        s.metrics.observe_wake_to_sync(WakeSource::Timer, 0.004);
    }
    shared
}

/// A runtime whose worker threads serve while the test thread makes blocking requests.
struct Running {
    runtime: Runtime,
    server: Option<ApiServer>,
    socket: PathBuf,
    _dir: tempfile::TempDir,
}

impl Running {
    fn start() -> Running {
        Running::start_with(None)
    }

    fn start_with(metrics: Option<std::net::SocketAddr>) -> Running {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("run/monitor/monitor.sock");
        let runtime = runtime();
        let server = runtime
            .block_on(serve(filled_state(), &socket, metrics))
            .unwrap_or_else(|e| panic!("serve: {e}"));
        Running {
            runtime,
            server: Some(server),
            socket,
            _dir: dir,
        }
    }

    fn get(&self, route: &str) -> (u16, String) {
        get(&self.socket, route).unwrap_or_else(|e| panic!("GET {route}: {e}"))
    }

    fn json(&self, route: &str) -> Value {
        let (status, body) = self.get(route);
        assert_eq!(status, 200, "GET {route}: {body}");
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {route}: {e}: {body}"))
    }

    fn shutdown(mut self) -> PathBuf {
        if let Some(server) = self.server.take() {
            self.runtime.block_on(server.shutdown());
        }
        self.socket.clone()
    }
}

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// A raw request; returns the whole answer (head and body).
fn raw_unix(socket: &Path, request: &str) -> String {
    let mut stream = UnixStream::connect(socket).expect("connect");
    stream.write_all(request.as_bytes()).expect("write");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("read");
    answer
}

#[test]
fn status_reports_sources_signals_conditions_and_last_sync() {
    let api = Running::start();
    let v = api.json("/status");
    assert_eq!(v["sources"][0]["source"], "ebpf", "{v}");
    assert_eq!(v["sources"][2]["state"], "unsupported", "{v}");
    let memory = &v["signals"][0];
    assert_eq!(memory["signal"], "memory.available");
    assert_eq!(memory["available"], 412 << 20);
    assert_eq!(memory["thresholds"][1]["gracePeriod"], "1m30s");
    assert_eq!(memory["thresholds"][1]["met"], true);
    assert_eq!(memory["thresholds"][1]["gracePeriodMet"], false);
    assert_eq!(v["conditions"], serde_json::json!(["MemoryPressure"]));
    assert_eq!(v["lastSync"]["sequence"], 31);
    assert_eq!(v["lastSync"]["wakeSources"][0], "ebpf");
    assert!(v["observation"].is_null(), "{v}");
}

#[test]
fn pods_lists_every_pod() {
    let api = Running::start();
    let v = api.json("/pods");
    let pods = v["pods"].as_array().unwrap_or_else(|| panic!("{v}"));
    assert_eq!(pods.len(), 2);
    assert_eq!(pods[0]["key"], "default/hog");
    assert_eq!(pods[0]["reason"], "Evicted");
    assert_eq!(pods[0]["containers"][0]["restartCount"], 2);
    assert_eq!(pods[1]["qosClass"], "Guaranteed");
    assert_eq!(
        pods[0]["conditions"],
        serde_json::json!([{
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "TerminationByKubelet",
            "message": "The node was low on resource: memory.",
            "lastTransitionTime": "2025-06-01T11:59:58Z",
        }])
    );
    assert!(pods[1].get("conditions").is_none(), "{}", pods[1]);
}

#[rstest]
#[case::all("/events", &["Started", "Evicted"])]
#[case::newest("/events?limit=1", &["Evicted"])]
#[case::since("/events?since=1", &["Evicted"])]
#[case::page("/events?since=0&limit=1", &["Started"])]
#[case::none_new("/events?since=2", &[])]
fn events_page(#[case] route: &str, #[case] reasons: &[&str]) {
    let api = Running::start();
    let v = api.json(route);
    let got: Vec<&str> = v["events"]
        .as_array()
        .unwrap_or_else(|| panic!("{v}"))
        .iter()
        .map(|e| e["reason"].as_str().unwrap_or("?"))
        .collect();
    assert_eq!(got, reasons, "{v}");
    if let Some(first) = v["events"].get(0) {
        assert!(
            first["time"].as_str().is_some_and(|t| t.ends_with('Z')),
            "{v}"
        );
        assert!(
            first["object"]
                .as_str()
                .is_some_and(|o| o.starts_with("default/")),
            "{v}"
        );
    }
}

#[test]
fn metrics_pass_the_format_checker() {
    let api = Running::start();
    let answer = raw_unix(
        &api.socket,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    let (head, body) = answer.split_once("\r\n\r\n").expect("head and body");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: text/plain; version=0.0.4; charset=utf-8"),
        "{head}"
    );
    let samples = check_exposition(body).unwrap_or_else(|e| panic!("{e}\n{body}"));
    assert!(samples > 50, "only {samples} samples:\n{body}");
    for line in [
        "monitor_evictions_total{eviction_signal=\"memory.available\"} 1",
        "monitor_evictions_total{eviction_signal=\"nodefs.inodesFree\"} 0",
        "monitor_wake_to_sync_seconds_bucket{source=\"ebpf\",le=\"0.0001\"} 2",
        "monitor_wake_to_sync_seconds_count{source=\"timer\"} 1",
        "monitor_sync_duration_seconds_count 2",
        "monitor_threshold_met{eviction_signal=\"nodefs.inodesFree\",threshold=\"5%\",kind=\"hard\"} 0",
        "monitor_signal_available_inodes{eviction_signal=\"nodefs.inodesFree\"} 900000",
        "monitor_signal_capacity_bytes{eviction_signal=\"memory.available\"} 4294967296",
        "monitor_admission_rejections_total{reason=\"OutOfmemory\"} 0",
        "monitor_source_up{source=\"memcg_threshold\"} 0",
        "monitor_source_state{source=\"memcg_threshold\",state=\"unsupported\"} 1",
        "monitor_pods{phase=\"Failed\"} 1",
    ] {
        assert!(
            body.lines().any(|l| l == line),
            "missing {line:?} in\n{body}"
        );
    }
}

#[test]
fn socket_is_root_only_and_its_directory_was_created() {
    let api = Running::start();
    let meta = std::fs::metadata(&api.socket).expect("socket metadata");
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    let dir = std::fs::metadata(api.socket.parent().expect("parent")).expect("dir metadata");
    assert_eq!(dir.permissions().mode() & 0o777, 0o755);
    // No temporary name is left beside it.
    let entries = std::fs::read_dir(api.socket.parent().expect("parent"))
        .expect("read dir")
        .count();
    assert_eq!(entries, 1);
}

#[test]
fn a_second_agent_on_the_same_socket_is_refused() {
    let api = Running::start();
    let second = api
        .runtime
        .block_on(serve(SharedState::default(), &api.socket, None));
    match second {
        Err(e @ ApiError::AlreadyRunning { .. }) => {
            let msg = e.to_string();
            assert!(
                msg.contains("already serving") && msg.contains(&api.socket.display().to_string()),
                "{msg}"
            );
        }
        other => panic!("expected AlreadyRunning, got {other:?}"),
    }
    // The first one still answers.
    assert_eq!(api.get("/status").0, 200);
}

#[test]
fn a_stale_socket_is_replaced() {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("monitor.sock");
    // A crashed agent's leftover: the file stays, nothing listens.
    drop(std::os::unix::net::UnixListener::bind(&socket).expect("bind"));
    assert!(
        UnixStream::connect(&socket).is_err(),
        "nothing should listen"
    );
    let rt = runtime();
    let server = rt
        .block_on(serve(filled_state(), &socket, None))
        .unwrap_or_else(|e| panic!("serve over a stale socket: {e}"));
    let (status, _) = get(&socket, "/pods").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(status, 200);
    rt.block_on(server.shutdown());
}

#[test]
fn a_regular_file_at_the_socket_path_is_left_alone() {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("monitor.sock");
    std::fs::write(&socket, "precious").expect("write");
    let err = runtime()
        .block_on(serve(SharedState::default(), &socket, None))
        .expect_err("must refuse");
    assert!(matches!(err, ApiError::NotASocket { .. }), "{err}");
    assert_eq!(std::fs::read_to_string(&socket).expect("read"), "precious");
}

#[rstest]
#[case::unknown("GET /nope HTTP/1.1", "404", "no route /nope")]
#[case::post("POST /status HTTP/1.1", "405", "not allowed")]
#[case::put("PUT /metrics HTTP/1.1", "405", "not allowed")]
#[case::bad_query("GET /events?since=x HTTP/1.1", "400", "since")]
fn errors_answer_json(#[case] request_line: &str, #[case] status: &str, #[case] says: &str) {
    let api = Running::start();
    let answer = raw_unix(
        &api.socket,
        &format!("{request_line}\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"),
    );
    let (head, body) = answer.split_once("\r\n\r\n").expect("head and body");
    assert!(head.starts_with(&format!("HTTP/1.1 {status}")), "{head}");
    if status == "405" {
        assert!(
            head.to_ascii_lowercase().contains("allow: get, head"),
            "{head}"
        );
    }
    let v: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"));
    assert!(v["error"].as_str().is_some_and(|e| e.contains(says)), "{v}");
}

#[test]
fn head_has_no_body() {
    let api = Running::start();
    let answer = raw_unix(
        &api.socket,
        "HEAD /status HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    let (head, body) = answer.split_once("\r\n\r\n").expect("head");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert_eq!(body, "");
}

#[test]
fn tcp_serves_metrics_and_nothing_else() {
    let api = Running::start_with(Some("127.0.0.1:0".parse().expect("addr")));
    let addr = api
        .server
        .as_ref()
        .and_then(|s| s.metrics_addr())
        .expect("metrics address");
    assert_ne!(addr.port(), 0);
    let ask = |route: &str| {
        let mut stream = TcpStream::connect(addr).expect("connect");
        stream
            .write_all(
                format!("GET {route} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
            )
            .expect("write");
        let mut answer = String::new();
        stream.read_to_string(&mut answer).expect("read");
        answer
    };
    let metrics = ask("/metrics");
    assert!(metrics.starts_with("HTTP/1.1 200"), "{metrics}");
    let (_, body) = metrics.split_once("\r\n\r\n").expect("body");
    check_exposition(body).unwrap_or_else(|e| panic!("{e}"));
    for route in ["/status", "/pods", "/events"] {
        let answer = ask(route);
        assert!(answer.starts_with("HTTP/1.1 404"), "{route}: {answer}");
    }
}

#[test]
fn shutdown_removes_the_socket() {
    let api = Running::start();
    let socket = api.shutdown();
    assert!(!socket.exists(), "{} left behind", socket.display());
    let err = get(&socket, "/status").expect_err("stopped").to_string();
    assert!(err.contains("is the agent running?"), "{err}");
}

#[test]
fn shutdown_closes_idle_keep_alive_connections() {
    let api = Running::start();
    // A keep-alive client that got its answer and keeps the connection open.
    let mut idle = UnixStream::connect(&api.socket).expect("connect");
    idle.write_all(b"GET /status HTTP/1.1\r\nHost: x\r\n\r\n")
        .expect("write");
    let mut first = [0u8; 12];
    idle.read_exact(&mut first).expect("read the status line");
    assert_eq!(&first, b"HTTP/1.1 200");
    let started = std::time::Instant::now();
    let socket = api.shutdown();
    assert!(
        started.elapsed() < std::time::Duration::from_secs(2),
        "shutdown waited {:?} on an idle connection",
        started.elapsed()
    );
    assert!(!socket.exists());
}

fn cli(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_monitor"))
        .args(args)
        .output()
        .expect("run monitor");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[rstest]
#[case::status("status", &["EVENT SOURCES", "memory.available: 412Mi available of 4096Mi (10.1%)", "hard threshold memory.available<500Mi (= 500Mi): met", "grace period 1m30s running", "MemoryPressure", "#31 at 2025-06-01T12:00:00Z (", "ago), woken by ebpf: wake latency 85µs"])]
#[case::pods("pods", &["KEY", "RESTARTS", "default/hog", "Evicted", "3072Mi", "default/web"])]
#[case::events("events", &["TIME", "MESSAGE", "Evicted", "The node was low on resource: memory."])]
#[case::metrics("metrics", &["# TYPE monitor_evictions_total counter", "monitor_synchronizes_total 31"])]
fn cli_prints_tables(#[case] subcommand: &str, #[case] expected: &[&str]) {
    let api = Running::start();
    let socket = api.socket.display().to_string();
    let (ok, stdout, stderr) = cli(&[subcommand, "--socket", &socket]);
    assert!(ok, "monitor {subcommand} failed: {stderr}");
    println!("{stdout}");
    for text in expected {
        assert!(stdout.contains(text), "{text:?} not in\n{stdout}");
    }
}

#[rstest]
#[case::status("status", "/signals/0/signal", "memory.available")]
#[case::pods("pods", "/pods/1/key", "default/web")]
#[case::events("events", "/events/1/reason", "Evicted")]
#[case::metrics("metrics", "/synchronizes", "31")]
fn cli_json_is_parseable(#[case] subcommand: &str, #[case] pointer: &str, #[case] value: &str) {
    let api = Running::start();
    let socket = api.socket.display().to_string();
    let (ok, stdout, stderr) = cli(&[subcommand, "--socket", &socket, "--json"]);
    assert!(ok, "monitor {subcommand} --json failed: {stderr}");
    let v: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    let got = v
        .pointer(pointer)
        .unwrap_or_else(|| panic!("no {pointer} in {v}"));
    let got = got.as_str().map_or_else(|| got.to_string(), String::from);
    assert_eq!(got, value);
}

#[test]
fn cli_without_an_agent_fails_and_says_why() {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("monitor.sock").display().to_string();
    let (ok, stdout, stderr) = cli(&["status", "--socket", &socket]);
    assert!(!ok, "must fail without an agent; printed {stdout}");
    assert!(
        stderr.contains("is the agent running?") && stderr.contains(&socket),
        "{stderr}"
    );
}
