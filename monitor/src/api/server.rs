//! Serving the routes: HTTP/1.1 on the unix socket (every route) and, optionally, on a TCP
//! address (`/metrics` only), as tokio tasks that stop on [`ApiServer::shutdown`].
use std::collections::VecDeque;
use std::convert::Infallible;
use std::io::ErrorKind;
use std::net::SocketAddr;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{ACCEPT, ALLOW, CONTENT_TYPE, HeaderValue, VARY};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::watch;
use tokio::task::{AbortHandle, JoinHandle, JoinSet};

use super::deadline::WriteDeadline;
use super::error::ApiError;
use super::routes::{ALLOWED_METHODS, Scope, respond_to};
use crate::state::SharedState;

/// Connections served at once per listener. One more arriving closes the oldest, so a
/// listener full of stalled clients still answers a new `/metrics` or `/status` at once:
/// the agent's own requests take milliseconds, only a stalled or idle connection grows old.
const MAX_CONNECTIONS: usize = 64;
/// A client must send its request headers within this time (slowloris); an idle
/// keep-alive connection is closed after it too.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// A client must take its response within this time once it stopped reading.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// On shutdown, requests in flight get this long to finish.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(2);

/// The running API. Stop it with [`ApiServer::shutdown`]; dropping it stops the listeners
/// too, without waiting.
#[derive(Debug)]
pub struct ApiServer {
    socket: PathBuf,
    /// (device, inode) of the socket we bound: shutdown removes the path only while it
    /// is still ours, never a newer agent's socket.
    socket_id: (u64, u64),
    metrics_addr: Option<SocketAddr>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl ApiServer {
    /// The bound metrics address (the real port when 0 was asked for).
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    /// Stops accepting, lets requests in flight finish (briefly), removes the socket file.
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        for task in std::mem::take(&mut self.tasks) {
            let _ = task.await;
        }
        self.remove_socket();
    }

    fn remove_socket(&self) {
        let ours = std::fs::symlink_metadata(&self.socket)
            .is_ok_and(|m| (m.dev(), m.ino()) == self.socket_id);
        if ours && let Err(e) = std::fs::remove_file(&self.socket) {
            tracing::warn!("removing the API socket {}: {e}", self.socket.display());
        }
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        if !self.tasks.is_empty() {
            self.remove_socket();
        }
    }
}

/// Serves the API on `socket` (mode 0600) and, with `metrics_addr`, `/metrics` on TCP.
///
/// An existing socket file is replaced only when nothing answers on it (a crashed agent's
/// leftover); a live agent there is an error, and so is a non-socket file at that path.
pub async fn serve(
    state: SharedState,
    socket: &Path,
    metrics_addr: Option<SocketAddr>,
) -> Result<ApiServer, ApiError> {
    prepare_dir(socket)?;
    clear_stale(socket).await?;
    let (unix, socket_id) = bind_private(socket)?;
    let tcp = match metrics_addr {
        Some(addr) => match TcpListener::bind(addr).await {
            Ok(listener) => Some(listener),
            Err(source) => {
                let _ = std::fs::remove_file(socket);
                return Err(ApiError::BindMetrics { addr, source });
            }
        },
        None => None,
    };
    let metrics_addr = match &tcp {
        Some(listener) => listener.local_addr().ok().or(metrics_addr),
        None => None,
    };

    let (stop, stopped) = watch::channel(false);
    let mut tasks = vec![tokio::spawn(accept_loop(
        Listener::Unix(unix),
        state.clone(),
        Scope::Full,
        stopped.clone(),
    ))];
    if let Some(listener) = tcp {
        tasks.push(tokio::spawn(accept_loop(
            Listener::Tcp(listener),
            state,
            Scope::MetricsOnly,
            stopped,
        )));
    }
    tracing::info!(
        "API listening on {} (root-only){}",
        socket.display(),
        metrics_addr.map_or(String::new(), |a| format!(", /metrics on http://{a}"))
    );
    Ok(ApiServer {
        socket: socket.to_path_buf(),
        socket_id,
        metrics_addr,
        stop,
        tasks,
    })
}

/// Creates the socket's directory (0755, like /run/<daemon>) when it is missing.
fn prepare_dir(socket: &Path) -> Result<(), ApiError> {
    let Some(dir) = socket.parent().filter(|d| !d.as_os_str().is_empty()) else {
        return Ok(());
    };
    if dir.is_dir() {
        return Ok(());
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(dir)
        .and_then(|()| std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)))
        .map_err(|source| ApiError::CreateDir {
            path: dir.to_path_buf(),
            source,
        })
}

/// Removes a leftover socket that nobody answers on; refuses a live one or a non-socket.
async fn clear_stale(socket: &Path) -> Result<(), ApiError> {
    let meta = match std::fs::symlink_metadata(socket) {
        Ok(meta) => meta,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(ApiError::Probe {
                path: socket.to_path_buf(),
                source,
            });
        }
    };
    if !meta.file_type().is_socket() {
        return Err(ApiError::NotASocket {
            path: socket.to_path_buf(),
        });
    }
    match tokio::net::UnixStream::connect(socket).await {
        Ok(_) => Err(ApiError::AlreadyRunning {
            path: socket.to_path_buf(),
        }),
        // Nothing listens: the file outlived its agent.
        Err(e) if e.kind() == ErrorKind::ConnectionRefused => {
            tracing::info!("removing the stale API socket {}", socket.display());
            std::fs::remove_file(socket).map_err(|source| ApiError::RemoveStale {
                path: socket.to_path_buf(),
                source,
            })
        }
        Err(source) => Err(ApiError::Probe {
            path: socket.to_path_buf(),
            source,
        }),
    }
}

/// Binds inside a fresh 0700 directory, makes the socket 0600, then renames it into place:
/// it is never reachable, at its public path or its temporary one, with the umask's mode.
/// (A directory instead of `umask(2)`: the umask is the whole process's, and other threads
/// create files meanwhile.)
fn bind_private(socket: &Path) -> Result<(UnixListener, (u64, u64)), ApiError> {
    let name = socket
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "monitor.sock".into());
    let private_dir = socket.with_file_name(format!(".{name}.{}.d", std::process::id()));
    let private = private_dir.join(&name);
    let bind_error = |source| ApiError::Bind {
        path: socket.to_path_buf(),
        source,
    };
    // A leftover of a crashed start with our pid (a pid namespace's init restarting).
    let _ = std::fs::remove_file(&private);
    let _ = std::fs::remove_dir(&private_dir);
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&private_dir)
        .map_err(bind_error)?;
    let cleanup = |err: ApiError| {
        let _ = std::fs::remove_file(&private);
        let _ = std::fs::remove_dir(&private_dir);
        err
    };
    let listener = std::os::unix::net::UnixListener::bind(&private)
        .map_err(|source| cleanup(bind_error(source)))?;
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o600)).map_err(
        |source| {
            cleanup(ApiError::Permissions {
                path: socket.to_path_buf(),
                source,
            })
        },
    )?;
    std::fs::rename(&private, socket).map_err(|source| {
        cleanup(ApiError::Publish {
            path: socket.to_path_buf(),
            source,
        })
    })?;
    let _ = std::fs::remove_dir(&private_dir);
    let meta = std::fs::symlink_metadata(socket).map_err(|source| ApiError::Publish {
        path: socket.to_path_buf(),
        source,
    })?;
    listener.set_nonblocking(true).map_err(bind_error)?;
    let listener = UnixListener::from_std(listener).map_err(bind_error)?;
    Ok((listener, (meta.dev(), meta.ino())))
}

enum Listener {
    Unix(UnixListener),
    Tcp(TcpListener),
}

async fn accept_loop(
    listener: Listener,
    state: SharedState,
    scope: Scope,
    mut stopped: watch::Receiver<bool>,
) {
    let mut connections = JoinSet::new();
    // Live connections, oldest first.
    let mut by_age: VecDeque<AbortHandle> = VecDeque::new();
    let mut shed: u64 = 0;
    loop {
        if *stopped.borrow() {
            break;
        }
        let accepted = tokio::select! {
            _ = stopped.changed() => break,
            Some(done) = connections.join_next_with_id(), if !connections.is_empty() => {
                let id = match &done {
                    Ok((id, ())) => *id,
                    Err(e) => e.id(),
                };
                by_age.retain(|handle| handle.id() != id);
                continue;
            }
            accepted = accept(&listener) => accepted,
        };
        let stream = match accepted {
            Ok(stream) => stream,
            Err(e) => {
                // Out of descriptors and the like: back off instead of spinning.
                tracing::warn!("API accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        if by_age.len() >= MAX_CONNECTIONS
            && let Some(oldest) = by_age.pop_front()
        {
            // Aborting drops the stream (the client sees the connection closed); a request
            // is never cut while it holds the state's lock, the handler does not await.
            oldest.abort();
            shed += 1;
            if shed == 1 {
                tracing::warn!(
                    "API: {MAX_CONNECTIONS} connections open on one listener, closing the oldest for each new one"
                );
            } else {
                tracing::debug!("API: {shed} connections closed for newer ones");
            }
        }
        let handle = match stream {
            Stream::Unix(s) => {
                connections.spawn(connection(s, state.clone(), scope, stopped.clone()))
            }
            Stream::Tcp(s) => {
                connections.spawn(connection(s, state.clone(), scope, stopped.clone()))
            }
        };
        by_age.push_back(handle);
    }
    drop(listener);
    let drain = async { while connections.join_next().await.is_some() {} };
    if tokio::time::timeout(DRAIN_TIMEOUT, drain).await.is_err() {
        connections.abort_all();
    }
}

enum Stream {
    Unix(tokio::net::UnixStream),
    Tcp(tokio::net::TcpStream),
}

async fn accept(listener: &Listener) -> std::io::Result<Stream> {
    match listener {
        Listener::Unix(l) => l.accept().await.map(|(s, _)| Stream::Unix(s)),
        Listener::Tcp(l) => l.accept().await.map(|(s, _)| Stream::Tcp(s)),
    }
}

/// Serves the requests of one connection as a listener does, until the client closes it
/// (or stalls past the header or write timeout). The fuzz targets feed it raw request bytes.
pub async fn serve_connection<S>(stream: S, state: SharedState, scope: Scope)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    // Kept until the connection ends: nothing asks this connection to stop.
    let (_stop, stopped) = watch::channel(false);
    connection(stream, state, scope, stopped).await;
}

async fn connection<S>(
    stream: S,
    state: SharedState,
    scope: Scope,
    mut stopped: watch::Receiver<bool>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = service_fn(move |request: Request<Incoming>| {
        let reply = handle(&state, scope, &request);
        async move { Ok::<_, Infallible>(reply) }
    });
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    let stream = WriteDeadline::new(stream, WRITE_TIMEOUT);
    let conn = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    tokio::select! {
        result = conn.as_mut() => {
            if let Err(e) = result {
                tracing::debug!("API connection: {e}");
            }
        }
        _ = stopped.changed() => {
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        }
    }
}

/// One request: the routes read the state under its lock (no await while held).
fn handle(state: &SharedState, scope: Scope, request: &Request<Incoming>) -> Response<Full<Bytes>> {
    let target = request.uri().path_and_query().map_or("/", |pq| pq.as_str());
    // Every Accept header, as one list (a client may send several).
    let accept: Vec<&str> = request
        .headers()
        .get_all(ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .collect();
    let accept = (!accept.is_empty()).then(|| accept.join(","));
    let reply = respond_to(
        &state.lock(),
        scope,
        request.method().as_str(),
        target,
        accept.as_deref(),
    );
    let mut response = Response::new(Full::new(Bytes::from(reply.body)));
    *response.status_mut() =
        StatusCode::from_u16(reply.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(reply.content_type));
    // `/metrics` answers by the Accept header (OpenMetrics or the text format): a cache
    // between must not hand one scraper's format to another.
    if request.uri().path() == "/metrics" {
        response
            .headers_mut()
            .insert(VARY, HeaderValue::from_static("accept"));
    }
    if reply.status == 405 {
        response
            .headers_mut()
            .insert(ALLOW, HeaderValue::from_static(ALLOWED_METHODS));
    }
    response
}
