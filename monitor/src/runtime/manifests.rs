//! Pod manifests from a directory (the kubelet's staticPodPath): every `*.yaml`, `*.yml`
//! and `*.json` file holds one Pod. A file that does not parse is reported (naming the
//! file and the field) and skipped; the others still run.
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::policy::pod::{Pod, PodError, parse_pod};

/// A manifest that parsed.
#[derive(Clone, Debug, PartialEq)]
pub struct Manifest {
    pub path: PathBuf,
    pub pod: Pod,
    /// Stable identity of this version of the manifest: `metadata.uid` when given, else a
    /// hash of the pod's namespace, name and the file's content, so editing a file makes a
    /// new pod (the kubelet hashes static pods the same way).
    pub uid: String,
}

/// Why a manifest (or the directory) was skipped. Every message names the file, so the
/// text alone is enough for the BadManifest event.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
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
}

impl ManifestError {
    /// The file (or directory) skipped.
    pub fn path(&self) -> &Path {
        match self {
            ManifestError::Read { path, .. }
            | ManifestError::TooLarge { path, .. }
            | ManifestError::Pod { path, .. }
            | ManifestError::Duplicate { path, .. }
            | ManifestError::DuplicateUid { path, .. } => path,
        }
    }
}

/// Whether a directory entry is a manifest (editor swap files and dotfiles are not).
pub fn is_manifest_name(name: &str) -> bool {
    !name.starts_with('.')
        && [".yaml", ".yml", ".json"]
            .iter()
            .any(|ext| name.ends_with(ext))
}

/// Reads every manifest in `dir`, in name order. A missing directory is no pods.
pub fn load_dir(dir: &Path) -> (Vec<Manifest>, Vec<ManifestError>) {
    let mut manifests = Vec::new();
    let mut errors = Vec::new();
    let mut paths: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .flatten()
            .filter(|e| e.file_type().map(|t| t.is_file()).unwrap_or(false))
            .filter(|e| is_manifest_name(&e.file_name().to_string_lossy()))
            .map(|e| e.path())
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
    for path in paths {
        match load_file(&path) {
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
pub const MAX_MANIFEST_BYTES: u64 = 1 << 20;

pub fn load_file(path: &Path) -> Result<Manifest, ManifestError> {
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
    let pod =
        parse_pod(&text, &path.display().to_string()).map_err(|source| ManifestError::Pod {
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
mod tests {
    use super::*;

    const POD: &str = "apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec:\n  containers:\n  - name: c\n    image: busybox\n    command: [sleep, '100']\n";

    #[test]
    fn loads_good_files_and_reports_bad_ones_by_file_and_field() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("web.yaml"), POD).unwrap();
        std::fs::write(
            dir.path().join("bad.yaml"),
            "apiVersion: v1\nkind: Pod\nmetadata: {}\nspec: {containers: [{name: c, image: x}]}\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("notes.txt"), "ignored").unwrap();
        std::fs::write(dir.path().join(".web.yaml.swp"), "ignored").unwrap();
        let (ok, bad) = load_dir(dir.path());
        assert_eq!(ok.len(), 1);
        assert_eq!(ok[0].pod.key(), "default/web");
        assert_eq!(bad.len(), 1);
        let message = bad[0].to_string();
        assert!(
            message.contains("bad.yaml") && message.contains("metadata.name"),
            "{message}"
        );
        assert!(bad[0].path().ends_with("bad.yaml"));
    }

    #[test]
    fn uid_changes_with_content_and_is_stable_otherwise() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("web.yaml");
        std::fs::write(&path, POD).unwrap();
        let a = load_file(&path).unwrap().uid;
        assert_eq!(load_file(&path).unwrap().uid, a);
        std::fs::write(&path, POD.replace("'100'", "'200'")).unwrap();
        assert_ne!(load_file(&path).unwrap().uid, a);
    }

    #[test]
    fn duplicate_pods_keep_the_first_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.yaml"), POD).unwrap();
        std::fs::write(dir.path().join("b.yaml"), POD.replace("'100'", "'5'")).unwrap();
        let (ok, bad) = load_dir(dir.path());
        assert_eq!(ok.len(), 1);
        assert!(ok[0].path.ends_with("a.yaml"));
        let message = bad[0].to_string();
        assert!(message.contains("already defined"), "{message}");
        assert!(bad[0].path().ends_with("b.yaml"));
    }

    #[test]
    fn two_pods_with_one_uid_keep_the_first_file() {
        let dir = tempfile::tempdir().unwrap();
        let with_uid = |name: &str| {
            format!(
                "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, uid: same-uid}}\nspec:\n  containers:\n  - {{name: c, image: x, command: [/bin/true]}}\n"
            )
        };
        std::fs::write(dir.path().join("a.yaml"), with_uid("first")).unwrap();
        std::fs::write(dir.path().join("b.yaml"), with_uid("second")).unwrap();
        let (ok, bad) = load_dir(dir.path());
        assert_eq!(ok.len(), 1, "{bad:?}");
        assert_eq!(ok[0].pod.metadata.name, "first");
        let message = bad[0].to_string();
        assert!(
            message.contains("b.yaml")
                && message.contains("metadata.uid")
                && message.contains("first"),
            "{message}"
        );
    }

    #[test]
    fn a_manifest_larger_than_the_limit_is_refused_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("huge.yaml");
        // A valid pod padded with a comment past the limit: refused by its size alone.
        let mut text = POD.to_string();
        text.push('#');
        text.push_str(&"x".repeat(MAX_MANIFEST_BYTES as usize));
        std::fs::write(&path, &text).unwrap();
        let err = load_file(&path).expect_err("too large");
        assert!(matches!(err, ManifestError::TooLarge { .. }), "{err:?}");
        let message = err.to_string();
        assert!(
            message.contains("huge.yaml") && message.contains("1048576 bytes"),
            "{message}"
        );
        // At the limit it still loads.
        let mut fits = POD.to_string();
        fits.push('#');
        fits.push_str(&"x".repeat(MAX_MANIFEST_BYTES as usize - POD.len() - 1));
        assert_eq!(fits.len() as u64, MAX_MANIFEST_BYTES);
        std::fs::write(&path, &fits).unwrap();
        assert_eq!(load_file(&path).expect("fits").pod.key(), "default/web");
    }

    #[test]
    fn a_manifest_that_is_not_utf8_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("binary.yaml");
        std::fs::write(&path, [0xff, 0xfe, 0x00, 0x41]).unwrap();
        let message = load_file(&path).expect_err("not text").to_string();
        assert!(
            message.contains("binary.yaml") && message.contains("UTF-8"),
            "{message}"
        );
    }

    #[test]
    fn a_fifo_named_like_a_manifest_is_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pipe.yaml");
        nix::unistd::mkfifo(&path, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let message = load_file(&path).expect_err("a fifo").to_string();
        assert!(
            message.contains("pipe.yaml") && message.contains("not a regular file"),
            "{message}"
        );
    }

    #[test]
    fn a_missing_directory_is_no_pods() {
        let (ok, bad) = load_dir(Path::new("/nonexistent/monitor/pods"));
        assert!(ok.is_empty() && bad.is_empty());
    }
}
