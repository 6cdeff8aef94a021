use super::*;

fn written(text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pods.json");
    std::fs::write(&path, text).unwrap();
    (dir, path)
}

const LIST: &str = r#"{"apiVersion": "v1", "kind": "PodList", "items": [
  {"metadata": {"name": "web", "namespace": "shop", "uid": "7c1d0e2a-1111-2222-3333-444455556666"},
   "spec": {"containers": [{"name": "app", "image": "nginx",
     "resources": {"requests": {"memory": "64Mi"}}}]},
   "status": {"phase": "Running", "qosClass": "Burstable"}}
]}"#;

#[test]
fn a_pod_list_reads_as_kubectl_writes_it() {
    let (_dir, path) = written(LIST);
    let pods = read_pod_list(&path).unwrap();
    assert_eq!(pods.len(), 1);
    assert_eq!(pods[0].key(), "shop/web");
    assert_eq!(pods[0].qos_class(), QosClass::Burstable);
}

#[test]
fn a_bad_pod_list_is_refused_naming_the_file_and_the_place() {
    let (_dir, path) = written(&LIST.replace("64Mi", "64 apples"));
    let err = read_pod_list(&path).unwrap_err();
    assert!(err.contains("pods.json"), "{err}");
    assert!(err.contains("resources.requests.memory"), "{err}");
    let (_dir, path) =
        written(&LIST.replace(r#", "uid": "7c1d0e2a-1111-2222-3333-444455556666""#, ""));
    let err = read_pod_list(&path).unwrap_err();
    assert!(
        err.contains("pods.json") && err.contains("metadata.uid") && err.contains("shop/web"),
        "{err}"
    );
    // A uid that would lead out of the kubelet's tree is refused, not followed.
    let (_dir, path) = written(&LIST.replace(
        "7c1d0e2a-1111-2222-3333-444455556666",
        "../../system.slice/sshd.service",
    ));
    let err = read_pod_list(&path).unwrap_err();
    assert!(
        err.contains("metadata.uid") && err.contains("system.slice"),
        "{err}"
    );
    let err = read_pod_list(Path::new("/nonexistent/pods.json")).unwrap_err();
    assert!(err.contains("/nonexistent/pods.json"), "{err}");
}

#[test]
fn a_rewritten_file_has_a_new_stamp() {
    let (_dir, path) = written(LIST);
    let before = crate::runtime::manifests::file_version(&path).unwrap();
    assert_eq!(crate::runtime::manifests::file_version(&path), Some(before));
    std::thread::sleep(Duration::from_millis(10));
    std::fs::write(&path, LIST.replace("web", "api")).unwrap();
    assert_ne!(crate::runtime::manifests::file_version(&path), Some(before));
}
