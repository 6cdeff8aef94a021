//! A read-only OCI distribution registry on 127.0.0.1, serving image archives made by
//! [`crate::oci`], so that the runtime's `PullImage` is exercised for real without any
//! network. containerd speaks plain HTTP to a registry on the loopback address, so no
//! registry configuration is needed.
//!
//! It answers `GET`/`HEAD` of `/v2/`, `/v2/<repository>/manifests/<tag or digest>` and
//! `/v2/<repository>/blobs/<digest>`, one connection per request, and counts the manifest
//! requests per repository (a pull asks for the manifest; a present image is not asked).
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use anyhow::{Context, Result};

/// One repository: its blobs by digest (`sha256:<hex>`) and its tags' manifest digests
/// and media types.
#[derive(Default)]
struct Repository {
    blobs: BTreeMap<String, Vec<u8>>,
    tags: BTreeMap<String, (String, String)>,
}

#[derive(Default)]
struct State {
    repositories: BTreeMap<String, Repository>,
    manifest_requests: BTreeMap<String, usize>,
}

/// A running registry; stopped on drop.
pub struct Registry {
    port: u16,
    state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Registry {
    /// Serves `archives` (repository name, OCI archive path) on a free loopback port.
    pub fn serve(archives: &[(&str, &Path)]) -> Result<Registry> {
        let mut state = State::default();
        for (name, path) in archives {
            let repository = state.repositories.entry(name.to_string()).or_default();
            load_archive(path, repository)
                .with_context(|| format!("loading {} for {name}", path.display()))?;
        }
        let listener = TcpListener::bind("127.0.0.1:0").context("binding the registry")?;
        let port = listener.local_addr()?.port();
        let state = Arc::new(Mutex::new(state));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (state, stop) = (state.clone(), stop.clone());
            std::thread::spawn(move || {
                for stream in listener.incoming() {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    if let Ok(stream) = stream {
                        let state = state.clone();
                        std::thread::spawn(move || {
                            let _ = answer(stream, &state);
                        });
                    }
                }
            })
        };
        Ok(Registry {
            port,
            state,
            stop,
            thread: Some(thread),
        })
    }

    /// `127.0.0.1:<port>`: the registry part of the image references it serves.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// How many times a manifest of `repository` was asked for (GET or HEAD).
    pub fn manifest_requests(&self, repository: &str) -> usize {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state
            .manifest_requests
            .get(repository)
            .copied()
            .unwrap_or(0)
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wakes the accept loop so that it sees the flag.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn load_archive(path: &Path, repository: &mut Repository) -> Result<()> {
    let mut archive = tar::Archive::new(std::fs::File::open(path)?);
    let mut index = None;
    for entry in archive.entries()? {
        let mut entry = entry?;
        let name = entry.path()?.to_string_lossy().into_owned();
        let mut bytes = Vec::new();
        entry.read_to_end(&mut bytes)?;
        if let Some(hex) = name.strip_prefix("blobs/sha256/").filter(|h| !h.is_empty()) {
            repository.blobs.insert(format!("sha256:{hex}"), bytes);
        } else if name == "index.json" {
            index = Some(serde_json::from_slice::<serde_json::Value>(&bytes)?);
        }
    }
    let index = index.context("no index.json")?;
    for manifest in index["manifests"]
        .as_array()
        .context("index.json: no manifests")?
    {
        let tag = manifest["annotations"]["org.opencontainers.image.ref.name"]
            .as_str()
            .context("index.json: a manifest without a tag")?;
        let digest = manifest["digest"]
            .as_str()
            .context("index.json: no digest")?;
        let media = manifest["mediaType"].as_str().unwrap_or_default();
        repository
            .tags
            .insert(tag.to_string(), (digest.to_string(), media.to_string()));
    }
    Ok(())
}

fn answer(stream: TcpStream, state: &Mutex<State>) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut request = String::new();
    reader.read_line(&mut request)?;
    // The headers are read and ignored.
    let mut line = String::new();
    while reader.read_line(&mut line)? > 2 {
        line.clear();
    }
    let mut words = request.split_whitespace();
    let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let path = path.split('?').next().unwrap_or("");
    let found = lookup(state, path);
    let mut stream = stream;
    match found {
        Some((body, media, digest)) => {
            let mut head = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nContent-Type: {media}\r\nConnection: close\r\n",
                body.len()
            );
            if let Some(digest) = digest {
                head += &format!("Docker-Content-Digest: {digest}\r\n");
            }
            head += "\r\n";
            stream.write_all(head.as_bytes())?;
            if method != "HEAD" {
                stream.write_all(&body)?;
            }
        }
        None => stream.write_all(
            b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        )?,
    }
    stream.flush()
}

/// The body, media type and digest for a path, counting manifest requests.
fn lookup(state: &Mutex<State>, path: &str) -> Option<(Vec<u8>, String, Option<String>)> {
    if path == "/v2" || path == "/v2/" {
        return Some((b"{}".to_vec(), "application/json".into(), None));
    }
    let rest = path.strip_prefix("/v2/")?;
    let mut state = state.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((name, reference)) = rest.rsplit_once("/manifests/") {
        *state.manifest_requests.entry(name.to_string()).or_default() += 1;
        let repository = state.repositories.get(name)?;
        let (digest, media) = repository.tags.get(reference).cloned().or_else(|| {
            repository
                .tags
                .values()
                .find(|(digest, _)| digest == reference)
                .cloned()
        })?;
        let body = repository.blobs.get(&digest)?.clone();
        return Some((body, media, Some(digest)));
    }
    let (name, digest) = rest.rsplit_once("/blobs/")?;
    let body = state.repositories.get(name)?.blobs.get(digest)?.clone();
    Some((
        body,
        "application/octet-stream".into(),
        Some(digest.to_string()),
    ))
}
