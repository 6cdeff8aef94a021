//! Pod manifests from a directory (the kubelet's staticPodPath): every `*.yaml`, `*.yml`
//! and `*.json` file holds one Pod. A file that does not parse is reported (naming the
//! file and the field) and skipped; the others still run.
//!
//! Symbolic links are followed, as the kubelet follows them (configuration tools install
//! manifests that way): a link to a regular file is a manifest under the link's name, a
//! link to nothing is reported by name. The directory's watch sees links come and go, not
//! their targets change: [`LinkTargets`] tells when those changed.
use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::policy::pod::{Pod, PodError, parse_pod};

/// A manifest that parsed.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Manifest {
    pub(crate) path: PathBuf,
    pub(crate) pod: Pod,
    /// Stable identity of this version of the manifest: `metadata.uid` when given, else a
    /// hash of the pod's namespace, name and the file's content, so editing a file makes a
    /// new pod (the kubelet hashes static pods the same way).
    pub(crate) uid: String,
}

/// Why a manifest (or the directory) was skipped. Every message names the file, so the
/// text alone is enough for the BadManifest event.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ManifestError {
    #[error("{}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The pod error already names the file and the field.
    /// Larger than [`MAX_MANIFEST_BYTES`]: refused before it is read into memory.
    #[error("{}: {size} bytes or more, larger than the {MAX_MANIFEST_BYTES} bytes a manifest may have", path.display())]
    TooLarge { path: PathBuf, size: u64 },
    #[error("{source}")]
    Pod {
        path: PathBuf,
        #[source]
        source: PodError,
    },
    #[error("{}: metadata.name: pod {key} is already defined by another manifest", path.display())]
    Duplicate { path: PathBuf, key: String },
    #[error("{}: metadata.uid: {uid:?} is already the uid of pod {key} in another manifest", path.display())]
    DuplicateUid {
        path: PathBuf,
        uid: String,
        key: String,
    },
    /// A symbolic link whose target does not exist.
    #[error("{}: a symbolic link to {}, which does not exist", path.display(), target.display())]
    Dangling { path: PathBuf, target: PathBuf },
}

impl ManifestError {
    /// The file (or directory) skipped.
    pub(crate) fn path(&self) -> &Path {
        match self {
            ManifestError::Read { path, .. }
            | ManifestError::TooLarge { path, .. }
            | ManifestError::Pod { path, .. }
            | ManifestError::Duplicate { path, .. }
            | ManifestError::DuplicateUid { path, .. }
            | ManifestError::Dangling { path, .. } => path,
        }
    }
}

/// What the runtime that runs the pods asks of a manifest beyond the API's rules.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ManifestRules {
    /// Every container names what to run (`command`, or failing that `args`): the
    /// process runtime has no image whose entrypoint could stand in.
    pub(crate) require_command: bool,
}

impl ManifestRules {
    /// Pods run as host processes.
    pub(crate) const PROCESS_RUNTIME: ManifestRules = ManifestRules {
        require_command: true,
    };
    /// Pods run on a container runtime (CRI): the image may say what to run.
    pub(crate) const CONTAINER_RUNTIME: ManifestRules = ManifestRules {
        require_command: false,
    };

    /// The rules of the runtime in use: a container runtime, or host processes.
    pub(crate) fn for_runtime(container_runtime: bool) -> ManifestRules {
        if container_runtime {
            ManifestRules::CONTAINER_RUNTIME
        } else {
            ManifestRules::PROCESS_RUNTIME
        }
    }

    /// Refuses, naming the file and the field, a pod the runtime could not run.
    fn check(self, pod: &Pod, origin: &str) -> Result<(), PodError> {
        if !self.require_command {
            return Ok(());
        }
        let invalid = |path: String, message: &str| PodError::Invalid {
            origin: origin.to_string(),
            path,
            message: message.to_string(),
        };
        for (i, container) in pod.spec.containers.iter().enumerate() {
            let (field, program) = match (container.command.first(), container.args.first()) {
                (Some(program), _) => ("command", program),
                (None, Some(program)) => ("args", program),
                (None, None) => {
                    return Err(invalid(
                        format!("spec.containers[{i}].command"),
                        "nothing to run: no command and no args (pods run as host processes here, with no image to give an entrypoint)",
                    ));
                }
            };
            if program.is_empty() {
                return Err(invalid(
                    format!("spec.containers[{i}].{field}[0]"),
                    "nothing to run: the program is an empty string",
                ));
            }
        }
        Ok(())
    }
}

/// A directory entry that may be a manifest: a regular file, or a symbolic link to one
/// (links followed to the end). A link to nothing is an error naming it; anything else
/// (a directory, a device, a FIFO, a link to one of those, an entry gone meanwhile) is
/// not a manifest.
fn manifest_entry(entry: &std::fs::DirEntry) -> Option<Result<PathBuf, ManifestError>> {
    let path = entry.path();
    let file_type = entry.file_type().ok()?;
    if file_type.is_file() {
        return Some(Ok(path));
    }
    if !file_type.is_symlink() {
        return None;
    }
    match std::fs::metadata(&path) {
        Ok(meta) => meta.is_file().then_some(Ok(path)),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            // No link either: removed since the directory was read.
            let target = std::fs::read_link(&path).ok()?;
            Some(Err(ManifestError::Dangling { path, target }))
        }
        // A loop of links, a target that cannot be read: the error names the link.
        Err(source) => Some(Err(ManifestError::Read { path, source })),
    }
}

/// Whether a directory entry is a manifest (editor swap files and dotfiles are not).
pub(crate) fn is_manifest_name(name: &str) -> bool {
    !name.starts_with('.')
        && [".yaml", ".yml", ".json"]
            .iter()
            .any(|ext| name.ends_with(ext))
}

/// Reads every manifest in `dir`, in name order, with no rule of a runtime (see
/// [`load_dir_for`]). A missing directory is no pods.
#[cfg(test)]
pub(crate) fn load_dir(dir: &Path) -> (Vec<Manifest>, Vec<ManifestError>) {
    load_dir_for(dir, ManifestRules::default())
}

/// Reads every manifest in `dir`, in name order, refusing what the runtime cannot run
/// (`rules`). Symbolic links are followed; a dangling one is reported. A missing
/// directory is no pods.
pub(crate) fn load_dir_for(
    dir: &Path,
    rules: ManifestRules,
) -> (Vec<Manifest>, Vec<ManifestError>) {
    let mut manifests = Vec::new();
    let mut errors = Vec::new();
    let mut paths: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .flatten()
            .filter(|e| is_manifest_name(&e.file_name().to_string_lossy()))
            .filter_map(|e| manifest_entry(&e))
            .filter_map(|entry| entry.map_err(|err| errors.push(err)).ok())
            .collect(),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(source) => {
            errors.push(ManifestError::Read {
                path: dir.to_path_buf(),
                source,
            });
            Vec::new()
        }
    };
    paths.sort();
    errors.sort_by(|a, b| a.path().cmp(b.path()));
    for path in paths {
        match load_file_for(&path, rules) {
            Ok(manifest) => manifests.push(manifest),
            Err(err) => errors.push(err),
        }
    }
    // Two files may not define the same pod, nor give two pods one uid (the uid names the
    // pod's record and cgroup): the first file (by name) wins, the other is reported.
    let mut seen = std::collections::BTreeSet::new();
    let mut uids: std::collections::BTreeMap<String, String> = std::collections::BTreeMap::new();
    manifests.retain(|m| {
        if !seen.insert(m.pod.key()) {
            errors.push(ManifestError::Duplicate {
                path: m.path.clone(),
                key: m.pod.key(),
            });
            return false;
        }
        match uids.entry(m.uid.clone()) {
            std::collections::btree_map::Entry::Occupied(first) => {
                errors.push(ManifestError::DuplicateUid {
                    path: m.path.clone(),
                    uid: m.uid.clone(),
                    key: first.get().clone(),
                });
                false
            }
            std::collections::btree_map::Entry::Vacant(slot) => {
                slot.insert(m.pod.key());
                true
            }
        }
    });
    (manifests, errors)
}

/// The largest manifest read: 1 MiB, the size Kubernetes allows a ConfigMap or a Secret
/// and below what etcd stores as one object, so no pod a cluster could hold is refused
/// (real pods take a few KiB), while a runaway file in the directory cannot make the
/// agent parse gigabytes or hold them in memory.
pub(crate) const MAX_MANIFEST_BYTES: u64 = 1 << 20;

/// Reads one manifest, with no rule of a runtime (see [`load_file_for`]).
#[cfg(test)]
pub(crate) fn load_file(path: &Path) -> Result<Manifest, ManifestError> {
    load_file_for(path, ManifestRules::default())
}

/// Reads one manifest (following symbolic links), refusing what the runtime cannot run.
pub(crate) fn load_file_for(path: &Path, rules: ManifestRules) -> Result<Manifest, ManifestError> {
    let read_error = |source| ManifestError::Read {
        path: path.to_path_buf(),
        source,
    };
    let too_large = |size| ManifestError::TooLarge {
        path: path.to_path_buf(),
        size,
    };
    // O_NONBLOCK: a FIFO named like a manifest must not hang the agent in open(2); it is
    // then refused as not a regular file.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(read_error)?;
    let meta = file.metadata().map_err(read_error)?;
    if !meta.is_file() {
        return Err(read_error(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file",
        )));
    }
    let size = meta.len();
    if size > MAX_MANIFEST_BYTES {
        return Err(too_large(size));
    }
    // The size can change after the stat (a file being written, a pipe): read one byte
    // past the limit at most, and refuse when it is there.
    let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    file.take(MAX_MANIFEST_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(read_error)?;
    if bytes.len() as u64 > MAX_MANIFEST_BYTES {
        return Err(too_large(bytes.len() as u64));
    }
    let text = String::from_utf8(bytes).map_err(|e| {
        read_error(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("not UTF-8 text: {e}"),
        ))
    })?;
    let origin = path.display().to_string();
    let pod = parse_pod(&text, &origin)
        .and_then(|pod| rules.check(&pod, &origin).map(|()| pod))
        .map_err(|source| ManifestError::Pod {
            path: path.to_path_buf(),
            source,
        })?;
    let uid = if pod.metadata.uid.is_empty() {
        format!(
            "{:016x}",
            fnv1a(&[
                pod.namespace().as_bytes(),
                pod.metadata.name.as_bytes(),
                text.as_bytes()
            ])
        )
    } else {
        pod.metadata.uid.clone()
    };
    Ok(Manifest {
        path: path.to_path_buf(),
        pod,
        uid,
    })
}

/// One version of the file at `path` (followed through links): its identity, size and
/// modification and change times, which a new version changes (an editor's rename, a
/// rewrite in place); `None` where it cannot be read.
pub(crate) fn file_version(path: &Path) -> Option<[i64; 6]> {
    let m = std::fs::metadata(path).ok()?;
    Some([
        m.dev() as i64,
        m.ino() as i64,
        m.size() as i64,
        m.mtime().saturating_mul(1_000_000_000) + m.mtime_nsec(),
        m.ctime().saturating_mul(1_000_000_000) + m.ctime_nsec(),
        i64::from(m.is_file()),
    ])
}

/// How often the files behind symbolic links among the manifests are looked at (the
/// kubelet reads its whole manifest directory every 20 s).
pub(crate) const LINK_CHECK: Duration = Duration::from_secs(5);

/// The files the symbolic links among the manifests of a directory lead to, each as the
/// identity and times of its current version (`None` while the link leads nowhere). The
/// directory's watch sees a link made, replaced or removed, not a change to the file it
/// leads to: two readings that differ say that the directory must be read again.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct LinkTargets(BTreeMap<PathBuf, Option<[i64; 6]>>);

impl LinkTargets {
    /// Reads them now (no links, or no directory: empty).
    pub(crate) fn read(dir: &Path) -> LinkTargets {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return LinkTargets::default();
        };
        let links = entries
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_symlink()))
            .filter(|e| is_manifest_name(&e.file_name().to_string_lossy()))
            .map(|e| (e.path(), file_version(&e.path())))
            .collect();
        LinkTargets(links)
    }

    /// Whether the directory has symbolic links among its manifests.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// FNV-1a over several byte strings, separated so ("ab","c") ≠ ("a","bc").
fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut hash = 0xcbf2_9ce4_8422_2325u64;
    for part in parts {
        for byte in part.iter().chain(std::iter::once(&0xff)) {
            hash ^= u64::from(*byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    hash
}

#[cfg(test)]
mod tests;
