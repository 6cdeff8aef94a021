//! (c) Hostile input replayed at a running agent: manifests, configurations and API
//! requests that must be refused with an error naming the file and field, never a panic
//! or a lost pod.
use super::*;

/// One piece of hostile input and what became of it.
#[derive(Clone, Debug)]
pub struct Replay {
    pub input: String,
    /// Refused with an error naming the file (and field), or answered with an error.
    pub refused: bool,
    pub detail: String,
}

impl Replay {
    /// One input's outcome; `what_happened` describes it when it was not refused.
    fn new(
        input: impl Into<String>,
        refused: bool,
        what_happened: impl FnOnce() -> String,
    ) -> Replay {
        Replay {
            input: input.into(),
            refused,
            detail: if refused {
                String::new()
            } else {
                what_happened()
            },
        }
    }
}

/// Hostile pod manifests: (file, text, what the refusal must name).
pub(super) fn hostile_manifests(marker: &Path) -> Vec<(String, String, &'static str)> {
    let escape = marker.display().to_string();
    let sleep = |name: &str, meta: &str, spec: &str, container: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: demo\n{meta}spec:\n{spec}  containers:\n  - name: {container}\n    image: none\n    command: [\"/bin/sleep\", \"1000\"]\n"
        )
    };
    let huge_quantity = "    resources:\n      requests: {memory: 1e2147483645}\n";
    let mut out = vec![
        (
            "quantity-overflow.yaml".to_string(),
            format!("{}{huge_quantity}", sleep("overflow", "", "", "main")),
            "memory",
        ),
        (
            "name-escape.yaml".to_string(),
            sleep("../../../../tmp/escape", "", "", "main"),
            "name",
        ),
        (
            "namespace-escape.yaml".to_string(),
            sleep("ns", "", "", "main").replace("namespace: demo", "namespace: ../.."),
            "namespace",
        ),
        (
            "uid-escape.yaml".to_string(),
            sleep(
                "uid",
                &format!("  uid: \"../../../..{escape}\"\n"),
                "",
                "main",
            ),
            "uid",
        ),
        (
            "container-name.yaml".to_string(),
            sleep("container", "", "", "Bad_Name/.."),
            "name",
        ),
        (
            "not-yaml.yaml".to_string(),
            "\u{0}\u{1}{{{[[[: : :\n\t- - -".to_string(),
            "not-yaml.yaml",
        ),
        (
            "deep.yaml".to_string(),
            format!("{}{}", "[".repeat(10_000), "]".repeat(10_000)),
            "deep.yaml",
        ),
    ];
    // Two manifests with one uid: the second is refused.
    let uid = "11111111-2222-3333-4444-555555555555";
    out.push((
        "dup-a.yaml".to_string(),
        sleep("dup-a", &format!("  uid: {uid}\n"), "", "main"),
        "uid",
    ));
    out.push((
        "dup-b.yaml".to_string(),
        sleep("dup-b", &format!("  uid: {uid}\n"), "", "main"),
        "uid",
    ));
    out
}

/// Hostile configuration files for `monitor run`: (name, text, the key the error names).
pub(super) fn hostile_configs() -> Vec<(&'static str, &'static str, &'static str)> {
    vec![
        (
            "quantity overflow",
            "evictionHard: {memory.available: 1e2147483645}\n",
            "evictionHard",
        ),
        ("cgroupRoot /", "monitor: {cgroupRoot: /}\n", "cgroupRoot"),
        (
            "empty cgroupRoot",
            "monitor: {cgroupRoot: \"\"}\n",
            "cgroupRoot",
        ),
        (
            "restartBackoff 0s",
            "monitor: {restartBackoff: 0s}\n",
            "restartBackoff",
        ),
        (
            "reserved cpu overflow",
            "systemReserved: {cpu: \"99999999999999999999\"}\n",
            "systemReserved",
        ),
        (
            "type error",
            "monitor: {podsMemoryLimit: [1, 2]}\n",
            "podsMemoryLimit",
        ),
    ]
}

/// (c) Replays hostile input at a running agent (manifests, a corrupt record, raw bytes
/// on the API socket) and at `monitor run` (configs). Returns what became of each, and
/// the losses it caused (the agent must run on, the stable pods untouched, nothing
/// written outside its directories).
pub fn hostile_replay() -> (Vec<Replay>, Tally) {
    let mut tally = Tally::default();
    let mut replays = Vec::new();
    let mut node = Node::new(EVICTION);
    node.json_logs = true;
    node.start();
    assert!(
        wait_ready(&mut node, Duration::from_secs(30)),
        "the agent did not start:\n{}",
        node.log(1)
    );
    let mut stable = Stable::start(&mut node);

    // A path a manifest tries to reach outside the agent's directories.
    let marker = std::env::temp_dir().join(format!("monitor-chaos-escape-{}", std::process::id()));
    let _ = std::fs::remove_file(&marker);
    let _ = std::fs::remove_file(marker.with_extension("json"));
    for (file, text, names) in hostile_manifests(&marker) {
        node.manifest(&file, &text);
        let refused = poll(Duration::from_secs(10), || {
            node.log(node.runs)
                .lines()
                .any(|l| l.contains(&file) && l.contains(names) && l.contains("WARN"))
        });
        let dup_first = file == "dup-a.yaml";
        // The first of two manifests sharing a uid is a valid pod.
        replays.push(Replay::new(
            format!("manifest {file}"),
            refused || dup_first,
            || format!("no warning naming {file} and {names:?}"),
        ));
    }
    // A pod asking for a grace period near i64::MAX seconds, stopped: the stop waits
    // (for ever, in effect) without overflowing a clock, and the agent runs on.
    let forever = sleeper("forever", "").replace(
        "spec:\n",
        "spec:\n  terminationGracePeriodSeconds: 9223372036854775807\n",
    );
    node.manifest("forever.yaml", &forever);
    let started = poll(Duration::from_secs(10), || {
        node.record("forever")
            .is_some_and(|r| r.phase == Phase::Running)
    });
    node.remove_manifest("forever.yaml");
    std::thread::sleep(Duration::from_millis(500));
    let survived =
        node.agent_running() && !crate::agent_metrics(&node.path("monitor.sock")).is_empty();
    replays.push(Replay::new(
        "manifest terminationGracePeriodSeconds i64::MAX, stopped",
        started && survived,
        || format!("started {started}, agent answering after the stop {survived}"),
    ));

    // A record that is not JSON, and one for a uid no manifest has, before a restart.
    let records = node.path("state").join("pods");
    std::fs::create_dir_all(&records).ok();
    std::fs::write(records.join("corrupt.json"), b"{\"uid\": \0\0 not json").unwrap();
    node.crash();
    node.start();
    let started = wait_ready(&mut node, Duration::from_secs(30));
    let quarantined = poll(Duration::from_secs(5), || {
        std::fs::read_dir(&records)
            .into_iter()
            .flatten()
            .flatten()
            .any(|e| e.file_name().to_string_lossy().contains(".corrupt"))
    });
    replays.push(Replay::new(
        "corrupt pod record",
        started && quarantined,
        || {
            format!(
                "started {started}, quarantined {quarantined}; records {:?}",
                std::fs::read_dir(&records)
                    .map(|d| d.flatten().map(|e| e.file_name()).collect::<Vec<_>>())
            )
        },
    ));

    // Raw bytes on the API socket, then a request that must still be answered.
    let socket = node.path("monitor.sock");
    for (what, bytes) in [
        ("garbage", b"\x00\xff\x13\x37 not http\r\n\r\n".to_vec()),
        (
            "huge header",
            format!(
                "GET /status HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
                "a".repeat(1 << 20)
            )
            .into_bytes(),
        ),
        (
            "path traversal",
            b"GET /../../etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
        ),
        (
            "unknown method",
            b"BREW /status HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
        ),
    ] {
        let answer = raw_request(&socket, &bytes);
        let still = !crate::agent_metrics(&socket).is_empty();
        // An answer, if any, is an error status, never a page or a crash.
        let ok_answer = answer.is_empty()
            || answer.starts_with("HTTP/1.1 4")
            || answer.starts_with("HTTP/1.0 4");
        replays.push(Replay::new(
            format!("API {what}"),
            still && ok_answer,
            || {
                format!(
                    "answer {:?}, agent answering afterwards: {still}",
                    answer.chars().take(200).collect::<String>()
                )
            },
        ));
    }

    if !node.agent_running() {
        tally.pods_lost += 1;
        tally.findings.push(format!(
            "the agent died under hostile input:\n{}",
            node.log(node.runs)
        ));
    }
    stable.check(&node, &mut tally, "hostile input");
    for path in [marker.clone(), marker.with_extension("json")] {
        if path.exists() {
            tally.pods_lost += 1;
            tally.findings.push(format!(
                "a manifest wrote outside the agent's directories: {}",
                path.display()
            ));
            let _ = std::fs::remove_file(&path);
        }
    }
    node.stop();
    for run in 1..=node.runs {
        tally.panics += read_log(&node.log(run)).1;
    }
    drop(node);

    // Configurations: refused with the key named, exit status 1, never a panic (101).
    let dir = tempfile::tempdir().expect("tempdir");
    for (what, text, key) in hostile_configs() {
        let path = dir.path().join("config.yaml");
        let config = format!(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n{text}"
        );
        std::fs::write(&path, config).unwrap();
        let output = std::process::Command::new(crate::helper_binary("monitor"))
            .args(["run", "--config"])
            .arg(&path)
            .env("NO_COLOR", "1")
            .stdin(std::process::Stdio::null())
            .output()
            .expect("monitor run");
        let stderr = String::from_utf8_lossy(&output.stderr);
        let code = output.status.code();
        if code == Some(101) || stderr.contains("panicked at") {
            tally.panics += 1;
        }
        let refused = code == Some(1) && stderr.contains(key) && stderr.contains("config.yaml");
        replays.push(Replay::new(format!("config {what}"), refused, || {
            format!("exit {code:?}, stderr: {stderr}")
        }));
    }
    (replays, tally)
}

/// Sends `bytes` on the unix socket and returns what came back within 2 s.
pub(super) fn raw_request(socket: &Path, bytes: &[u8]) -> String {
    use std::io::{Read, Write};
    let Ok(mut stream) = std::os::unix::net::UnixStream::connect(socket) else {
        return String::new();
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let _ = stream.set_write_timeout(Some(Duration::from_secs(2)));
    let _ = stream.write_all(bytes);
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    String::from_utf8_lossy(&answer).into_owned()
}

/// The hostile-input table `cargo xtask chaos` prints.
pub fn replay_table(replays: &[Replay]) -> String {
    let mut out = String::from("| hostile input | refused, agent unharmed |\n|---|---|\n");
    for replay in replays {
        out.push_str(&format!(
            "| {} | {} |\n",
            replay.input,
            if replay.refused { "yes" } else { "NO" }
        ));
    }
    for replay in replays.iter().filter(|r| !r.refused) {
        out.push_str(&format!("  - {}: {}\n", replay.input, replay.detail));
    }
    out
}
