//! The CLI side: a blocking HTTP/1.1 GET over the unix socket and the `monitor status |
//! pods | events | metrics` subcommands. Plain std, no runtime: one request per run.
use std::io::{ErrorKind, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use super::error::ApiError;

/// Where the agent listens unless told otherwise.
pub const DEFAULT_SOCKET: &str = "/run/monitor/monitor.sock";

/// How long the client waits for the agent.
const TIMEOUT: Duration = Duration::from_secs(10);
/// Largest answer read (1000 events are well under 1 MiB).
const MAX_RESPONSE: u64 = 64 << 20;

/// Options shared by the client subcommands.
#[derive(Clone, Debug, clap::Args)]
pub struct ClientArgs {
    /// The agent's API socket.
    #[arg(long, default_value = DEFAULT_SOCKET)]
    pub socket: PathBuf,
    /// Print the agent's JSON instead of a table.
    #[arg(long)]
    pub json: bool,
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
    pub fn route(self, json: bool) -> &'static str {
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

/// Runs one client subcommand: prints the answer on stdout, or the problem on stderr and
/// fails.
pub fn run_client(cmd: ClientCommand, args: &ClientArgs) -> ExitCode {
    let route = cmd.route(args.json);
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

/// GETs `route` over the unix socket and returns the status code and body.
pub fn get(socket: &Path, route: &str) -> Result<(u16, String), ApiError> {
    if !route.starts_with('/') || route.chars().any(|c| c.is_control() || c == ' ') {
        return Err(ApiError::InvalidRoute {
            route: route.into(),
        });
    }
    let mut stream = UnixStream::connect(socket).map_err(|e| connect_error(socket, e))?;
    let io_error = |source| ApiError::Request {
        path: socket.to_path_buf(),
        route: route.into(),
        source,
    };
    stream.set_read_timeout(Some(TIMEOUT)).map_err(io_error)?;
    stream.set_write_timeout(Some(TIMEOUT)).map_err(io_error)?;
    let request = format!(
        "GET {route} HTTP/1.1\r\nHost: localhost\r\nUser-Agent: monitor-cli\r\nAccept: */*\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).map_err(io_error)?;
    let mut raw = Vec::new();
    stream
        .take(MAX_RESPONSE)
        .read_to_end(&mut raw)
        .map_err(io_error)?;
    parse_response(&raw).map_err(|reason| ApiError::BadResponse {
        path: socket.to_path_buf(),
        route: route.into(),
        reason,
    })
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

/// Status line, headers, then the body by Content-Length, chunked, or up to the close.
fn parse_response(raw: &[u8]) -> Result<(u16, String), String> {
    let head_end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("no end of headers")?;
    let head = std::str::from_utf8(&raw[..head_end]).map_err(|_| "headers are not UTF-8")?;
    let rest = &raw[head_end + 4..];
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let mut parts = status_line.splitn(3, ' ');
    let (version, code) = (parts.next(), parts.next());
    if !version.is_some_and(|v| v.starts_with("HTTP/1.")) {
        return Err(format!("not an HTTP/1 status line: {status_line:?}"));
    }
    let status: u16 = code
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("no status code in {status_line:?}"))?;
    let mut length = None;
    let mut chunked = false;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            return Err(format!("malformed header {line:?}"));
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            length = Some(
                value
                    .parse::<usize>()
                    .map_err(|_| format!("bad Content-Length {value:?}"))?,
            );
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = value.eq_ignore_ascii_case("chunked");
        }
    }
    let body = if chunked {
        dechunk(rest)?
    } else if let Some(length) = length {
        rest.get(..length)
            .ok_or_else(|| format!("body shorter than its Content-Length {length}"))?
            .to_vec()
    } else {
        rest.to_vec()
    };
    let body = String::from_utf8(body).map_err(|_| "the body is not UTF-8".to_string())?;
    Ok((status, body))
}

fn dechunk(mut raw: &[u8]) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    loop {
        let line_end = raw
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or("unterminated chunk size")?;
        let size_text = std::str::from_utf8(&raw[..line_end]).map_err(|_| "bad chunk size")?;
        let size_text = size_text.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_text, 16)
            .map_err(|_| format!("bad chunk size {size_text:?}"))?;
        raw = &raw[line_end + 2..];
        if size == 0 {
            return Ok(body);
        }
        let chunk = raw.get(..size).ok_or("truncated chunk")?;
        body.extend_from_slice(chunk);
        raw = raw.get(size + 2..).ok_or("truncated chunk")?;
    }
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;

    #[rstest]
    #[case::length(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello".as_slice(), 200, "hello")]
    #[case::close(b"HTTP/1.1 404 Not Found\r\n\r\n{}\n".as_slice(), 404, "{}\n")]
    #[case::chunked(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n".as_slice(),
        200,
        "abcde"
    )]
    fn parses_responses(#[case] raw: &[u8], #[case] status: u16, #[case] body: &str) {
        assert_eq!(parse_response(raw), Ok((status, body.to_string())));
    }

    #[rstest]
    #[case::no_head(b"HTTP/1.1 200 OK\r\n".as_slice(), "no end of headers")]
    #[case::not_http(b"SSH-2.0\r\n\r\n".as_slice(), "not an HTTP/1 status line")]
    #[case::bad_code(b"HTTP/1.1 abc\r\n\r\n".as_slice(), "no status code")]
    #[case::short(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nabc".as_slice(), "shorter")]
    #[case::bad_chunk(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n".as_slice(),
        "bad chunk size"
    )]
    #[case::truncated_chunk(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nff\r\nabc".as_slice(),
        "truncated chunk"
    )]
    fn rejects_malformed_responses(#[case] raw: &[u8], #[case] why: &str) {
        match parse_response(raw) {
            Ok(r) => panic!("accepted {r:?}"),
            Err(e) => assert!(e.contains(why), "{e:?} does not say {why:?}"),
        }
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
    #[case(ClientCommand::Status, false, "/status?format=text")]
    #[case(ClientCommand::Events, true, "/events?pretty=true")]
    #[case(ClientCommand::Metrics, false, "/metrics")]
    fn routes(#[case] cmd: ClientCommand, #[case] json: bool, #[case] route: &str) {
        assert_eq!(cmd.route(json), route);
    }
}
