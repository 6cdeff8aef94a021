//! The CLI side: one HTTP/1.1 GET over the unix socket (hyper's client) and the `monitor
//! status | pods | events | metrics | explain` subcommands.
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper::Request;
use hyper::header::{HOST, USER_AGENT};
use hyper_util::rt::TokioIo;

use super::error::ApiError;

/// Where the agent listens unless told otherwise.
pub const DEFAULT_SOCKET: &str = "/run/monitor/monitor.sock";

/// How long the client waits for the agent.
const TIMEOUT: Duration = Duration::from_secs(10);
/// Largest answer read (1000 events are well under 1 MiB).
const MAX_RESPONSE: usize = 64 << 20;

/// Options shared by the client subcommands.
#[derive(Clone, Debug, clap::Args)]
pub struct ClientArgs {
    /// The agent's API socket (the environment's MONITOR_SOCKET when set).
    #[arg(long, env = SOCKET_ENV, default_value = DEFAULT_SOCKET)]
    pub(crate) socket: PathBuf,
    /// Print the agent's JSON instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

/// The environment variable that names the agent's socket for every client subcommand
/// (`--socket` wins), as `CONTAINER_RUNTIME_ENDPOINT` does for crictl.
pub const SOCKET_ENV: &str = "MONITOR_SOCKET";

/// How often `monitor events --follow` asks for new events.
const FOLLOW_EVERY: Duration = Duration::from_secs(1);

/// `monitor events`.
#[derive(Clone, Debug, clap::Args)]
pub struct EventsArgs {
    /// After the events recorded so far, keep printing new ones as the agent records them
    /// (one line each, or one JSON object per line with --json) until interrupted or the
    /// agent stops (exit 1).
    #[arg(long, short = 'f')]
    pub(crate) follow: bool,
    #[command(flatten)]
    pub(crate) client: ClientArgs,
}

/// `monitor events`: the recent events, and with `--follow` the new ones as they come.
pub fn run_events(args: &EventsArgs) -> ExitCode {
    if !args.follow {
        return run_client(ClientCommand::Events, &args.client);
    }
    let mut since: Option<u64> = None;
    let mut header = !args.client.json;
    loop {
        let route = match since {
            Some(since) => format!("/events?since={since}"),
            None => "/events".to_string(),
        };
        let page = match get(&args.client.socket, &route) {
            Ok((200, body)) => match serde_json::from_str::<serde_json::Value>(&body) {
                Ok(page) => page,
                Err(e) => {
                    eprintln!("monitor events: the agent's answer is not JSON: {e}");
                    return ExitCode::FAILURE;
                }
            },
            Ok((status, body)) => {
                eprintln!("monitor events: the agent answered {status} to GET {route}: {body}");
                return ExitCode::FAILURE;
            }
            Err(e) => {
                eprintln!("monitor events: {e}");
                return ExitCode::FAILURE;
            }
        };
        let missed = page["missed"].as_u64().unwrap_or(0);
        if missed > 0 {
            eprintln!(
                "monitor events: {missed} event(s) were dropped by the agent before they could be read"
            );
        }
        let mut out = String::new();
        if header {
            out.push_str("TIME\tTYPE\tREASON\tOBJECT\tMESSAGE\n");
            header = false;
        }
        for event in page["events"].as_array().into_iter().flatten() {
            if args.client.json {
                out.push_str(&event.to_string());
            } else {
                let field = |name: &str| event[name].as_str().unwrap_or_default().to_string();
                out.push_str(
                    &[
                        field("time"),
                        field("kind"),
                        field("reason"),
                        field("object"),
                        field("message"),
                    ]
                    .join("\t"),
                );
            }
            out.push('\n');
        }
        let mut stdout = std::io::stdout().lock();
        if let Err(e) = stdout
            .write_all(out.as_bytes())
            .and_then(|()| stdout.flush())
        {
            // `monitor events -f | head` closes the pipe: the reader is done.
            if e.kind() == ErrorKind::BrokenPipe {
                return ExitCode::SUCCESS;
            }
            eprintln!("monitor events: writing to stdout: {e}");
            return ExitCode::FAILURE;
        }
        drop(stdout);
        since = page["next"].as_u64().or(since);
        std::thread::sleep(FOLLOW_EVERY);
    }
}

/// `monitor status`.
#[derive(Clone, Debug, clap::Args)]
pub struct StatusArgs {
    /// Only check the agent's health (`/healthz`): print what is wrong, if anything, and
    /// exit 0 when healthy, 1 when the agent answers unhealthy (the synchronize loop is
    /// stalled, or an event source failed), 2 when it cannot be asked.
    #[arg(long)]
    pub(crate) check: bool,
    #[command(flatten)]
    pub(crate) client: ClientArgs,
}

/// `monitor status`: the agent's view, or with `--check` its health as the exit code.
pub fn run_status(args: &StatusArgs) -> ExitCode {
    if !args.check {
        return run_client(ClientCommand::Status, &args.client);
    }
    let answer = get(&args.client.socket, "/healthz?pretty=true");
    let (code, body) = match answer {
        Ok((status @ (200 | 503), body)) => (if status == 200 { 0 } else { 1 }, body),
        Ok((status, body)) => {
            eprintln!("monitor status --check: the agent answered {status}: {body}");
            return ExitCode::from(2);
        }
        Err(e) => {
            eprintln!("monitor status --check: {e}");
            return ExitCode::from(2);
        }
    };
    if args.client.json {
        println!("{}", body.trim_end());
    } else {
        match serde_json::from_str::<serde_json::Value>(&body) {
            Ok(health) => {
                let problems = health["problems"].as_array().cloned().unwrap_or_default();
                if problems.is_empty() {
                    println!("healthy");
                }
                for problem in problems {
                    println!("unhealthy: {}", problem.as_str().unwrap_or_default());
                }
            }
            Err(e) => {
                eprintln!("monitor status --check: the agent's answer is not JSON: {e}");
                return ExitCode::from(2);
            }
        }
    }
    ExitCode::from(code)
}

/// What to ask the agent for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientCommand {
    Status,
    Pods,
    Events,
    Metrics,
}

impl ClientCommand {
    /// The request target. Tables are rendered by the agent (`format=text`), so the client
    /// needs no copy of the state's types and old clients read new agents.
    pub(crate) fn route(self, json: bool) -> &'static str {
        match (self, json) {
            (ClientCommand::Status, false) => "/status?format=text",
            (ClientCommand::Status, true) => "/status?pretty=true",
            (ClientCommand::Pods, false) => "/pods?format=text",
            (ClientCommand::Pods, true) => "/pods?pretty=true",
            (ClientCommand::Events, false) => "/events?format=text",
            (ClientCommand::Events, true) => "/events?pretty=true",
            (ClientCommand::Metrics, false) => "/metrics",
            (ClientCommand::Metrics, true) => "/metrics?format=json&pretty=true",
        }
    }
}

/// `monitor explain POD`.
#[derive(Clone, Debug, clap::Args)]
pub struct ExplainArgs {
    /// The pod: NAMESPACE/NAME, or NAME when only one pod has it.
    pub(crate) pod: String,
    #[command(flatten)]
    pub(crate) client: ClientArgs,
}

/// `monitor decisions`.
#[derive(Clone, Debug, clap::Args)]
pub struct DecisionsArgs {
    /// Only the decisions about this pod: NAMESPACE/NAME, or NAME in any namespace.
    #[arg(long)]
    pub(crate) pod: Option<String>,
    /// Only those of the last DURATION (e.g. 30m, 2h) or since a time (RFC 3339).
    #[arg(long)]
    pub(crate) since: Option<String>,
    #[command(flatten)]
    pub(crate) client: ClientArgs,
}

/// `monitor decisions`: what the agent decided, from its decision record (which outlives
/// the pods and the agent's restarts).
pub fn run_decisions(args: &DecisionsArgs) -> ExitCode {
    match decisions_route(args, time::OffsetDateTime::now_utc()) {
        Ok(route) => print_answer(&route, &args.client),
        Err(why) => {
            eprintln!("monitor decisions: {why}");
            ExitCode::FAILURE
        }
    }
}

fn decisions_route(args: &DecisionsArgs, now: time::OffsetDateTime) -> Result<String, String> {
    let mut route = String::from(if args.client.json {
        "/decisions?pretty=true"
    } else {
        "/decisions?format=text"
    });
    if let Some(pod) = &args.pod {
        check_pod_name(pod)?;
        route.push_str(&format!("&pod={pod}"));
    }
    if let Some(since) = &args.since {
        let rfc3339 = &time::format_description::well_known::Rfc3339;
        let at = match crate::config::kubelet::parse_go_duration(since) {
            Ok(ago) => now - ago,
            Err(_) => time::OffsetDateTime::parse(since, rfc3339).map_err(|_| {
                format!("--since {since:?}: neither a duration (30m, 2h) nor an RFC 3339 time")
            })?,
        };
        let at = at.to_offset(time::UtcOffset::UTC);
        let text = at
            .replace_nanosecond(0)
            .unwrap_or(at)
            .format(rfc3339)
            .map_err(|e| e.to_string())?;
        route.push_str(&format!("&after={text}"));
    }
    Ok(route)
}

/// Runs one client subcommand: prints the answer on stdout, or the problem on stderr and
/// fails.
pub fn run_client(cmd: ClientCommand, args: &ClientArgs) -> ExitCode {
    print_answer(cmd.route(args.json), args)
}

/// `monitor explain POD`: why the agent would or would not evict the pod.
pub fn run_explain(args: &ExplainArgs) -> ExitCode {
    match explain_route(&args.pod, args.client.json) {
        Ok(route) => print_answer(&route, &args.client),
        Err(why) => {
            eprintln!("monitor explain: {why}");
            ExitCode::FAILURE
        }
    }
}

/// The request target for `pod`. Pod names and namespaces are DNS labels and subdomains,
/// so anything else is refused here rather than encoded.
fn explain_route(pod: &str, json: bool) -> Result<String, String> {
    check_pod_name(pod)?;
    Ok(if json {
        format!("/explain?pod={pod}&pretty=true")
    } else {
        format!("/explain?pod={pod}&format=text")
    })
}

/// Pod names and namespaces are DNS labels and subdomains: anything else is refused
/// rather than encoded into a request target.
fn check_pod_name(pod: &str) -> Result<(), String> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | '/');
    if pod.is_empty() || !pod.chars().all(allowed) || pod.matches('/').count() > 1 {
        return Err(format!(
            "{pod:?} is not a pod name: NAMESPACE/NAME or NAME (letters, digits, '-', '.')"
        ));
    }
    Ok(())
}

fn print_answer(route: &str, args: &ClientArgs) -> ExitCode {
    match get(&args.socket, route) {
        Ok((200, body)) => {
            let mut stdout = std::io::stdout().lock();
            match stdout
                .write_all(body.as_bytes())
                .and_then(|()| stdout.flush())
            {
                // `monitor events | head` closes the pipe early: not an error.
                Err(e) if e.kind() != ErrorKind::BrokenPipe => {
                    eprintln!("monitor: writing to stdout: {e}");
                    ExitCode::FAILURE
                }
                _ => ExitCode::SUCCESS,
            }
        }
        Ok((status, body)) => {
            let why = serde_json::from_str::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| v["error"].as_str().map(String::from))
                .unwrap_or(body);
            eprintln!("monitor: the agent answered {status} to GET {route}: {why}");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("monitor: {e}");
            ExitCode::FAILURE
        }
    }
}

/// GETs `route` over the unix socket and returns the status code and body: one HTTP/1.1
/// exchange with hyper's client on a single-threaded runtime of its own.
pub fn get(socket: &Path, route: &str) -> Result<(u16, String), ApiError> {
    if !route.starts_with('/') || route.chars().any(|c| c.is_control() || c == ' ') {
        return Err(ApiError::InvalidRoute {
            route: route.into(),
        });
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .map_err(|source| ApiError::Request {
            path: socket.to_path_buf(),
            route: route.into(),
            source,
        })?;
    runtime.block_on(async {
        match tokio::time::timeout(TIMEOUT, exchange(socket, route)).await {
            Ok(answer) => answer,
            Err(_) => Err(ApiError::Request {
                path: socket.to_path_buf(),
                route: route.into(),
                source: std::io::Error::new(
                    ErrorKind::TimedOut,
                    format!("no answer within {}s", TIMEOUT.as_secs()),
                ),
            }),
        }
    })
}

async fn exchange(socket: &Path, route: &str) -> Result<(u16, String), ApiError> {
    let stream = tokio::net::UnixStream::connect(socket)
        .await
        .map_err(|e| connect_error(socket, e))?;
    let bad = |reason: String| ApiError::BadResponse {
        path: socket.to_path_buf(),
        route: route.into(),
        reason,
    };
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| bad(e.to_string()))?;
    // The connection is driven beside the request; it ends when the answer is read.
    let driver = tokio::spawn(connection);
    let request = Request::get(route)
        .header(HOST, "localhost")
        .header(USER_AGENT, "monitor-cli")
        .body(Empty::<Bytes>::new())
        .map_err(|e| bad(format!("building the request: {e}")))?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| bad(e.to_string()))?;
    let status = response.status().as_u16();
    let body = Limited::new(response.into_body(), MAX_RESPONSE)
        .collect()
        .await
        .map_err(|e| bad(format!("reading the body: {e}")))?
        .to_bytes();
    driver.abort();
    let body = String::from_utf8(body.to_vec()).map_err(|_| bad("the body is not UTF-8".into()))?;
    Ok((status, body))
}

/// EACCES means the agent runs but the socket is root-only; anything else (ENOENT,
/// ECONNREFUSED) means nobody is there.
fn connect_error(socket: &Path, source: std::io::Error) -> ApiError {
    match source.kind() {
        ErrorKind::PermissionDenied => ApiError::PermissionDenied {
            path: socket.to_path_buf(),
        },
        _ => ApiError::NotRunning {
            path: socket.to_path_buf(),
            source,
        },
    }
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;

    #[rstest]
    #[case::ago(
        Some("30m"),
        "/decisions?format=text&pod=shop/web&after=2026-11-27T09:30:00Z"
    )]
    #[case::at(
        Some("2026-11-27T12:00:00+02:00"),
        "/decisions?format=text&pod=shop/web&after=2026-11-27T10:00:00Z"
    )]
    #[case::all(None, "/decisions?format=text&pod=shop/web")]
    fn decisions_since_becomes_a_utc_time(#[case] since: Option<&str>, #[case] route: &str) {
        let args = DecisionsArgs {
            pod: Some("shop/web".into()),
            since: since.map(str::to_string),
            client: ClientArgs {
                socket: DEFAULT_SOCKET.into(),
                json: false,
            },
        };
        let now = time::OffsetDateTime::parse(
            "2026-11-27T10:00:00Z",
            &time::format_description::well_known::Rfc3339,
        )
        .unwrap();
        assert_eq!(decisions_route(&args, now).as_deref(), Ok(route));
        let bad = DecisionsArgs {
            since: Some("yesterday".into()),
            ..args
        };
        assert!(decisions_route(&bad, now).unwrap_err().contains("--since"));
    }

    /// Serves one connection on a real unix socket with `answer` as the raw bytes of the
    /// response, and returns the socket's path.
    fn answering(dir: &Path, answer: &'static [u8]) -> PathBuf {
        use std::io::Read;
        let socket = dir.join("agent.sock");
        let listener = std::os::unix::net::UnixListener::bind(&socket).expect("bind");
        std::thread::spawn(move || {
            if let Ok((mut stream, _)) = listener.accept() {
                // The request's head, then the canned answer.
                let mut request = [0u8; 4096];
                let _ = stream.read(&mut request);
                let _ = stream.write_all(answer);
            }
        });
        socket
    }

    #[rstest]
    #[case::length(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello".as_slice(), 200, "hello")]
    #[case::close(b"HTTP/1.1 404 Not Found\r\nConnection: close\r\n\r\n{}\n".as_slice(), 404, "{}\n")]
    #[case::chunked(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n".as_slice(),
        200,
        "abcde"
    )]
    fn reads_answers(#[case] raw: &'static [u8], #[case] status: u16, #[case] body: &str) {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = answering(dir.path(), raw);
        let answer = get(&socket, "/status").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(answer, (status, body.to_string()));
    }

    #[rstest]
    #[case::not_http(b"SSH-2.0-OpenSSH\r\n\r\n".as_slice())]
    #[case::short(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nabc".as_slice())]
    #[case::bad_chunk(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n".as_slice())]
    #[case::not_utf8(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n\xff\xfe".as_slice())]
    fn malformed_answers_name_the_socket_and_route(#[case] raw: &'static [u8]) {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = answering(dir.path(), raw);
        let err = get(&socket, "/pods").expect_err("must refuse").to_string();
        assert!(
            err.starts_with(&format!(
                "GET /pods on socket {}: malformed answer: ",
                socket.display()
            )),
            "{err}"
        );
    }

    #[rstest]
    #[case::relative("status")]
    #[case::space("/status HTTP/1.0\r\nX: y")]
    #[case::newline("/status\nX")]
    fn refuses_routes_that_would_forge_a_request(#[case] route: &str) {
        let dir = tempfile::tempdir().expect("tempdir");
        let err = get(&dir.path().join("none.sock"), route).expect_err("must refuse");
        assert!(matches!(err, ApiError::InvalidRoute { .. }), "{err}");
    }

    #[test]
    fn missing_socket_asks_whether_the_agent_runs() {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("monitor.sock");
        let err = get(&socket, "/status").expect_err("no agent").to_string();
        assert!(
            err.contains("is the agent running?") && err.contains(&socket.display().to_string()),
            "{err}"
        );
    }

    #[rstest]
    #[case::eacces(
        libc::EACCES,
        "permission denied: the API is root-only (socket /run/m.sock)"
    )]
    #[case::enoent(libc::ENOENT, "is the agent running? (socket /run/m.sock: ")]
    #[case::refused(libc::ECONNREFUSED, "is the agent running? (socket /run/m.sock: ")]
    fn connect_errors_say_what_to_do(#[case] errno: i32, #[case] says: &str) {
        let err = connect_error(
            Path::new("/run/m.sock"),
            std::io::Error::from_raw_os_error(errno),
        )
        .to_string();
        assert!(
            err.starts_with(says),
            "{err:?} does not start with {says:?}"
        );
    }

    #[rstest]
    #[case::key("default/web", false, Ok("/explain?pod=default/web&format=text"))]
    #[case::name("web-0", true, Ok("/explain?pod=web-0&pretty=true"))]
    #[case::query_smuggled("web&format=json", false, Err(()))]
    #[case::two_slashes("a/b/c", false, Err(()))]
    #[case::empty("", false, Err(()))]
    fn explain_routes(#[case] pod: &str, #[case] json: bool, #[case] want: Result<&str, ()>) {
        match (explain_route(pod, json), want) {
            (Ok(route), Ok(want)) => assert_eq!(route, want),
            (Err(why), Err(())) => assert!(why.contains("not a pod name"), "{why}"),
            (got, want) => panic!("{pod:?}: got {got:?}, want {want:?}"),
        }
    }

    #[rstest]
    #[case(ClientCommand::Status, false, "/status?format=text")]
    #[case(ClientCommand::Events, true, "/events?pretty=true")]
    #[case(ClientCommand::Metrics, false, "/metrics")]
    fn routes(#[case] cmd: ClientCommand, #[case] json: bool, #[case] route: &str) {
        assert_eq!(cmd.route(json), route);
    }
}
