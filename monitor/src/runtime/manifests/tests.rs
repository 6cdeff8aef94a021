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
        message.contains("b.yaml") && message.contains("metadata.uid") && message.contains("first"),
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

/// A pod whose second container is `container` (YAML flow mapping fields).
fn two_containers(container: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: web}}\nspec:\n  containers:\n  - {{name: a, command: [/bin/true]}}\n  - {{name: b{container}}}\n"
    )
}

#[rstest::rstest]
#[case::empty_command(", command: []", Some("spec.containers[1].command: nothing to run"))]
#[case::no_command_no_args("", Some("spec.containers[1].command: nothing to run"))]
#[case::empty_args(", args: []", Some("spec.containers[1].command: nothing to run"))]
#[case::empty_program(
    ", command: ['', x]",
    Some("spec.containers[1].command[0]: nothing to run")
)]
#[case::empty_program_in_args(", args: ['']", Some("spec.containers[1].args[0]: nothing to run"))]
#[case::args_name_the_program(", args: [/bin/sleep, '1']", None)]
#[case::command(", command: [/bin/sleep], args: ['1']", None)]
fn the_process_runtime_refuses_a_container_with_nothing_to_run(
    #[case] container: &str,
    #[case] refused: Option<&str>,
) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("web.yaml");
    std::fs::write(&path, two_containers(container)).unwrap();
    match (
        load_file_for(&path, ManifestRules::PROCESS_RUNTIME),
        refused,
    ) {
        (Ok(_), None) => {}
        (Err(err), Some(field)) => {
            assert!(matches!(err, ManifestError::Pod { .. }), "{err:?}");
            let message = err.to_string();
            assert!(
                message.starts_with(&format!("{}: {field}", path.display())),
                "{message}"
            );
            assert!(err.path().ends_with("web.yaml"));
        }
        (result, refused) => panic!("{container}: {result:?}, expected {refused:?}"),
    }
    // A container runtime runs the image's entrypoint: nothing refused there.
    load_file_for(&path, ManifestRules::CONTAINER_RUNTIME)
        .unwrap_or_else(|e| panic!("{container}: {e}"));
}

#[test]
fn the_runtime_decides_the_rules_and_the_directory_reports_the_refusal() {
    assert_eq!(
        ManifestRules::for_runtime(false),
        ManifestRules::PROCESS_RUNTIME
    );
    assert_eq!(
        ManifestRules::for_runtime(true),
        ManifestRules::CONTAINER_RUNTIME
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.yaml"), POD).unwrap();
    let other = two_containers(", command: []").replace("name: web", "name: other");
    std::fs::write(dir.path().join("b.yaml"), other).unwrap();
    let (ok, bad) = load_dir_for(dir.path(), ManifestRules::PROCESS_RUNTIME);
    assert_eq!(ok.len(), 1);
    assert!(ok[0].path.ends_with("a.yaml"));
    assert_eq!(bad.len(), 1);
    assert!(bad[0].path().ends_with("b.yaml"));
    let message = bad[0].to_string();
    assert!(
        message.contains("b.yaml: spec.containers[1].command"),
        "{message}"
    );
    // Without the process runtime's rule both load.
    assert_eq!(load_dir(dir.path()).0.len(), 2);
}

#[test]
fn an_unknown_restart_policy_is_refused_naming_the_file_and_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("web.yaml");
    std::fs::write(
        &path,
        POD.replace("spec:\n", "spec:\n  restartPolicy: Sometimes\n"),
    )
    .unwrap();
    let (ok, bad) = load_dir_for(dir.path(), ManifestRules::PROCESS_RUNTIME);
    assert!(ok.is_empty());
    assert_eq!(bad.len(), 1);
    assert!(bad[0].path().ends_with("web.yaml"));
    let message = bad[0].to_string();
    assert!(
        message.starts_with(&format!(
            "{}: spec.restartPolicy: \"Sometimes\"",
            path.display()
        )),
        "{message}"
    );
}

#[test]
fn a_symlinked_manifest_is_loaded_and_follows_its_target() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("pods");
    std::fs::create_dir(&dir).unwrap();
    let target = root.path().join("elsewhere.yaml");
    std::fs::write(&target, POD).unwrap();
    let link = dir.join("web.yaml");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    // A link to a directory is no more a manifest than a directory is.
    std::os::unix::fs::symlink(root.path(), dir.join("dir.yaml")).unwrap();

    let (ok, bad) = load_dir_for(&dir, ManifestRules::PROCESS_RUNTIME);
    assert!(bad.is_empty(), "{bad:?}");
    assert_eq!(ok.len(), 1);
    assert_eq!(ok[0].path, link, "known by the link's name");
    assert_eq!(ok[0].pod.key(), "default/web");
    let links = LinkTargets::read(&dir);
    assert!(!links.is_empty());
    assert_eq!(LinkTargets::read(&dir), links, "nothing changed");

    // The target changes: the next reading differs, the next load sees the new pod.
    std::fs::write(&target, POD.replace("'100'", "'200'")).unwrap();
    assert_ne!(LinkTargets::read(&dir), links);
    let (again, _) = load_dir_for(&dir, ManifestRules::PROCESS_RUNTIME);
    assert_eq!(again.len(), 1);
    assert_ne!(again[0].uid, ok[0].uid, "a new version of the pod");
    assert_eq!(again[0].pod.spec.containers[0].command, ["sleep", "200"]);
}

#[test]
fn a_dangling_link_is_reported_by_name() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("pods");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("web.yaml"), POD).unwrap();
    let gone = root.path().join("gone.yaml");
    let link = dir.join("db.yaml");
    std::os::unix::fs::symlink(&gone, &link).unwrap();
    let before = LinkTargets::read(&dir);

    let (ok, bad) = load_dir_for(&dir, ManifestRules::PROCESS_RUNTIME);
    assert_eq!(ok.len(), 1, "the other manifests still run");
    assert_eq!(bad.len(), 1);
    assert!(
        matches!(bad[0], ManifestError::Dangling { .. }),
        "{:?}",
        bad[0]
    );
    assert_eq!(bad[0].path(), link);
    let message = bad[0].to_string();
    assert_eq!(
        message,
        format!(
            "{}: a symbolic link to {}, which does not exist",
            link.display(),
            gone.display()
        )
    );

    // The target appears: the link is a manifest, and the reading says it changed.
    std::fs::write(&gone, POD.replace("name: web", "name: db")).unwrap();
    assert_ne!(LinkTargets::read(&dir), before);
    let (ok, bad) = load_dir_for(&dir, ManifestRules::PROCESS_RUNTIME);
    assert!(bad.is_empty(), "{bad:?}");
    assert_eq!(ok.len(), 2);
}

#[test]
fn a_missing_directory_is_no_pods() {
    let (ok, bad) = load_dir(Path::new("/nonexistent/monitor/pods"));
    assert!(ok.is_empty() && bad.is_empty());
}
