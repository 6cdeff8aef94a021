//! The kubelet's configuration drop-in directory (`--config-dir`): every `*.conf` file in
//! it, in the byte order of their names, is a KubeletConfiguration merged over the main
//! file as the kubelet merges them: a mapping key by key and recursively (so a drop-in
//! setting `evictionHard: {memory.available: 1Gi}` keeps the file's other signals, and
//! the `monitor:` block merges the same way), a list or a scalar replaced whole. Flags
//! apply after the drop-ins.
use std::path::{Path, PathBuf};

use serde_yaml_ng::{Mapping, Value};

/// What a drop-in directory refuses, naming the file and the field.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DropInError {
    #[error("--config-dir {}: {source}", dir.display())]
    ReadDir {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: not YAML: {source}", path.display())]
    Yaml {
        path: PathBuf,
        source: serde_yaml_ng::Error,
    },
    #[error("{}: a drop-in is a mapping (a KubeletConfiguration), not {found}", path.display())]
    NotAMapping { path: PathBuf, found: &'static str },
    #[error("{}: {field} is {found:?}, the main configuration's is {expected:?}: a drop-in must be the same kind of document", path.display())]
    OtherDocument {
        path: PathBuf,
        field: &'static str,
        found: String,
        expected: String,
    },
}

/// The drop-in files of `dir`: regular files (or links to them) named `*.conf`, in the
/// byte order of their names, as the kubelet reads them.
pub(crate) fn drop_in_files(dir: &Path) -> Result<Vec<PathBuf>, DropInError> {
    let entries = std::fs::read_dir(dir).map_err(|source| DropInError::ReadDir {
        dir: dir.to_path_buf(),
        source,
    })?;
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| DropInError::ReadDir {
            dir: dir.to_path_buf(),
            source,
        })?;
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "conf") && path.is_file() {
            files.push(path);
        }
    }
    files.sort_by(|a, b| a.file_name().cmp(&b.file_name()));
    Ok(files)
}

/// Merges each of `drop_ins` (path, text) over `base`, a parsed main configuration,
/// in order.
pub(crate) fn merge_drop_ins(
    base: Value,
    drop_ins: &[(PathBuf, String)],
) -> Result<Value, DropInError> {
    let mut merged = base;
    for (path, text) in drop_ins {
        let drop_in: Value = serde_yaml_ng::from_str(text).map_err(|source| DropInError::Yaml {
            path: path.clone(),
            source,
        })?;
        let drop_in = match drop_in {
            Value::Mapping(mapping) => mapping,
            // An empty file changes nothing.
            Value::Null => continue,
            other => {
                return Err(DropInError::NotAMapping {
                    path: path.clone(),
                    found: kind_of(&other),
                });
            }
        };
        for field in ["apiVersion", "kind"] {
            let expected = merged.get(field).and_then(Value::as_str);
            let found = drop_in.get(field).and_then(Value::as_str);
            if let (Some(expected), Some(found)) = (expected, found)
                && expected != found
            {
                return Err(DropInError::OtherDocument {
                    path: path.clone(),
                    field,
                    found: found.to_string(),
                    expected: expected.to_string(),
                });
            }
        }
        merge_into(&mut merged, Value::Mapping(drop_in));
    }
    Ok(merged)
}

/// `over` merged into `into`: mappings key by key, recursively; anything else replaced.
fn merge_into(into: &mut Value, over: Value) {
    match (into, over) {
        (Value::Mapping(into), Value::Mapping(over)) => merge_mappings(into, over),
        (into, over) => *into = over,
    }
}

fn merge_mappings(into: &mut Mapping, over: Mapping) {
    for (key, value) in over {
        match into.get_mut(&key) {
            Some(existing) => merge_into(existing, value),
            None => {
                into.insert(key, value);
            }
        }
    }
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "empty",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Sequence(_) => "a list",
        Value::Mapping(_) => "a mapping",
        Value::Tagged(_) => "a tagged value",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn yaml(text: &str) -> Value {
        serde_yaml_ng::from_str(text).expect("yaml")
    }

    fn merged(base: &str, drop_ins: &[&str]) -> Result<Value, DropInError> {
        let drop_ins: Vec<(PathBuf, String)> = drop_ins
            .iter()
            .enumerate()
            .map(|(i, text)| (PathBuf::from(format!("/d/{i}.conf")), text.to_string()))
            .collect();
        merge_drop_ins(yaml(base), &drop_ins)
    }

    const BASE: &str = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
        evictionHard: {memory.available: 100Mi, nodefs.available: 10%}\n\
        clusterDNS: [10.0.0.1, 10.0.0.2]\nmaxPods: 110\nmonitor: {socket: /run/a.sock, sources: {psi: true, ebpf: true}}\n";

    /// The kubelet's rules: structures and maps merge key by key, lists and scalars are
    /// replaced, later files win.
    #[test]
    fn maps_merge_key_by_key_lists_and_scalars_are_replaced_later_files_win() {
        let result = merged(
            BASE,
            &[
                "evictionHard: {memory.available: 1Gi}\nclusterDNS: [10.0.0.9]\nmaxPods: 50\n",
                "kind: KubeletConfiguration\nmaxPods: 60\nmonitor: {sources: {psi: false}}\n",
            ],
        )
        .expect("merges");
        assert_eq!(
            result,
            yaml(
                "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
                 evictionHard: {memory.available: 1Gi, nodefs.available: 10%}\n\
                 clusterDNS: [10.0.0.9]\nmaxPods: 60\nmonitor: {socket: /run/a.sock, sources: {psi: false, ebpf: true}}\n"
            )
        );
    }

    #[test]
    fn an_empty_drop_in_changes_nothing() {
        assert_eq!(
            merged(BASE, &["", "# only a comment\n"]).unwrap(),
            yaml(BASE)
        );
    }

    /// Refusals name the file and the field.
    #[rstest::rstest]
    #[case::other_kind(
        "kind: KubeProxyConfiguration\n",
        "/d/0.conf: kind is \"KubeProxyConfiguration\""
    )]
    #[case::other_version(
        "apiVersion: kubelet.config.k8s.io/v1\n",
        "/d/0.conf: apiVersion is \"kubelet.config.k8s.io/v1\""
    )]
    #[case::list(
        "- a\n- b\n",
        "/d/0.conf: a drop-in is a mapping (a KubeletConfiguration), not a list"
    )]
    #[case::bad_yaml("evictionHard: {\n", "/d/0.conf: not YAML")]
    fn a_bad_drop_in_is_refused_naming_the_file(#[case] text: &str, #[case] expected: &str) {
        let err = merged(BASE, &[text]).expect_err("refused").to_string();
        assert!(err.starts_with(expected), "{err}");
    }

    #[test]
    fn only_conf_files_in_name_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        for name in [
            "20-b.conf",
            "10-a.conf",
            "notes.txt",
            "30-c.conf.bak",
            "05-z.conf",
        ] {
            std::fs::write(dir.path().join(name), "").expect("write");
        }
        std::fs::create_dir(dir.path().join("40-dir.conf")).expect("mkdir");
        let names: Vec<String> = drop_in_files(dir.path())
            .expect("reads")
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["05-z.conf", "10-a.conf", "20-b.conf"]);
        let missing = drop_in_files(&dir.path().join("nope")).expect_err("no dir");
        assert!(
            missing.to_string().starts_with("--config-dir "),
            "{missing}"
        );
    }
}
