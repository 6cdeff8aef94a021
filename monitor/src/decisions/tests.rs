use super::*;

fn decision(n: usize, pod: &str) -> Decision {
    Decision {
        at: format!("2026-11-27T10:{:02}:{:02}Z", n / 60 % 60, n % 60),
        action: "evict".into(),
        shadow: false,
        pod: Some(pod.into()),
        uid: Some(format!("uid-{n}")),
        signal: Some("memory.available".into()),
        message: format!("decision {n}"),
        signals: vec![SignalSeen {
            signal: "memory.available".into(),
            available: 100,
            capacity: 1000,
        }],
        thresholds_met: vec!["memory.available<500Mi".into()],
        ranking: vec![Ranked {
            pod: pod.into(),
            qos: "BestEffort".into(),
            priority: 0,
            usage: Some(42),
            request: None,
        }],
        timings: Timings::default(),
    }
}

#[test]
fn decisions_survive_a_restart_and_the_last_thousand_are_always_kept() {
    let dir = tempfile::tempdir().unwrap();
    let (mut file, loaded) = DecisionFile::open(dir.path()).unwrap();
    assert!(loaded.decisions.is_empty() && loaded.notes.is_empty());
    for n in 0..2500 {
        file.append(&decision(n, "shop/web")).unwrap();
    }
    drop(file);
    let (_, loaded) = DecisionFile::open(dir.path()).unwrap();
    assert_eq!(loaded.decisions.len(), KEPT);
    assert_eq!(loaded.decisions.back().unwrap().message, "decision 2499");
    assert_eq!(loaded.decisions.front().unwrap().message, "decision 1500");
    assert!(loaded.notes.is_empty(), "{:?}", loaded.notes);
    // Bounded on disk: two files of at most KEPT lines.
    for name in [FILE, ROTATED] {
        let text = std::fs::read_to_string(dir.path().join(name)).unwrap();
        assert!(text.lines().count() <= KEPT, "{name}");
    }
}

#[test]
fn a_torn_last_line_is_cut_off_and_the_rest_kept() {
    let dir = tempfile::tempdir().unwrap();
    let (mut file, _) = DecisionFile::open(dir.path()).unwrap();
    file.append(&decision(1, "shop/web")).unwrap();
    file.append(&decision(2, "shop/api")).unwrap();
    drop(file);
    let path = dir.path().join(FILE);
    let mut text = std::fs::read_to_string(&path).unwrap();
    text.push_str(r#"{"at":"2026-11-27T10:00:03Z","act"#);
    std::fs::write(&path, &text).unwrap();
    let (mut file, loaded) = DecisionFile::open(dir.path()).unwrap();
    assert_eq!(loaded.decisions.len(), 2);
    assert!(loaded.notes[0].contains("torn"), "{:?}", loaded.notes);
    file.append(&decision(3, "shop/db")).unwrap();
    let (_, loaded) = DecisionFile::open(dir.path()).unwrap();
    assert_eq!(
        loaded
            .decisions
            .iter()
            .map(|d| d.message.as_str())
            .collect::<Vec<_>>(),
        ["decision 1", "decision 2", "decision 3"]
    );
    assert!(loaded.notes.is_empty());
}

#[test]
fn a_corrupt_record_is_set_aside_and_reported_never_fatal() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(FILE), "not json at all\n{}\n").unwrap();
    let (mut file, loaded) = DecisionFile::open(dir.path()).unwrap();
    assert!(loaded.decisions.is_empty());
    assert_eq!(loaded.notes.len(), 1, "{:?}", loaded.notes);
    assert!(
        loaded.notes[0].contains("decisions.jsonl") && loaded.notes[0].contains("line 1"),
        "{}",
        loaded.notes[0]
    );
    assert!(dir.path().join("decisions.jsonl.corrupt").exists());
    file.append(&decision(1, "shop/web")).unwrap();
    let (_, loaded) = DecisionFile::open(dir.path()).unwrap();
    assert_eq!(loaded.decisions.len(), 1);
}

#[test]
fn decisions_are_selected_by_pod_and_time() {
    let all: Vec<Decision> = (0..6)
        .map(|n| decision(n, if n % 2 == 0 { "shop/web" } else { "lab/web" }))
        .collect();
    let messages = |pod, since| -> Vec<String> {
        select(&all, pod, since)
            .into_iter()
            .map(|d| d.message.clone())
            .collect()
    };
    assert_eq!(messages(Some("shop/web"), None).len(), 3);
    assert_eq!(messages(Some("web"), None).len(), 6);
    assert_eq!(
        messages(Some("lab/web"), Some("2026-11-27T10:00:03Z")),
        ["decision 3", "decision 5"]
    );
    assert!(messages(Some("shop/db"), None).is_empty());
}
