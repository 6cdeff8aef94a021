//! The `monitor` binary as a user runs it: `monitor run` logs which event sources started,
//! and the client subcommands talk to it over its root-only socket.
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use monitor_tests::{Feature, TestTrees, helper_binary, monitor_run, require, wait_until};

fn monitor(args: &[&str]) -> std::process::Output {
    Command::new(helper_binary("monitor"))
        .args(args)
        .output()
        .expect("run monitor")
}

#[test]
fn run_logs_its_sources_and_answers_status_pods_events_metrics() {
    if !require("run_logs_its_sources", &[Feature::Root]) {
        return;
    }
    let _trees = TestTrees;
    let cgroup_root = TestTrees::root("cli");
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("api.sock");
    std::fs::create_dir_all(dir.path().join("pods")).unwrap();
    std::fs::write(
        dir.path().join("pods/web.yaml"),
        "apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec:\n  containers:\n  - {name: main, image: none, command: [/bin/sleep, '1000']}\n",
    )
    .unwrap();
    // A pod that outgrows its own memory limit (slowly: a few seconds, so the kernel sources
    // are up): the kernel's OOM killer ends it, and the agent counts the kill against the pod.
    std::fs::write(
        dir.path().join("pods/oomer.yaml"),
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: oomer}}\nspec:\n  restartPolicy: Never\n  containers:\n  - name: main\n    image: none\n    command: [{}, anon, '100', '1', '100', '60']\n    resources: {{limits: {{memory: 32Mi}}}}\n",
            helper_binary("hog").display()
        ),
    )
    .unwrap();
    let config = format!(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nstaticPodPath: {}\n\
         evictionHard: {{allocatableMemory.available: 50Mi}}\nmonitor:\n  podsMemoryLimit: 256Mi\n  cgroupRoot: {cgroup_root}\n  \
         stateDir: {}\n  podLogDir: {}\n  socket: {}\n",
        dir.path().join("pods").display(),
        dir.path().join("state").display(),
        dir.path().join("logs").display(),
        socket.display(),
    );
    std::fs::write(dir.path().join("config.yaml"), config).unwrap();
    let log_path = dir.path().join("agent.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut agent = monitor_run(&dir.path().join("config.yaml"), &log)
        .spawn()
        .expect("start monitor run");
    let read_log = || std::fs::read_to_string(&log_path).unwrap_or_default();
    wait_until(
        "the agent to answer on its socket",
        Duration::from_secs(20),
        || {
            monitor(&["status", "--socket", &socket.to_string_lossy()])
                .status
                .success()
        },
    );

    // Every source reports once whether it started, and why not.
    wait_until(
        "the agent to start its sources",
        Duration::from_secs(20),
        || read_log().contains("agent running"),
    );
    let text = read_log();
    for source in ["ebpf", "memcg_threshold", "memory_events", "psi", "timer"] {
        let line = text
            .lines()
            .find(|l| l.contains("event source") && l.contains(&format!("source={source}")))
            .unwrap_or_else(|| panic!("no start-up line for source {source}:\n{text}"));
        assert!(
            line.contains("started")
                || line.contains("not available")
                || line.contains("failed")
                || line.contains("disabled"),
            "{line}"
        );
    }
    assert!(
        text.contains("event source started") && text.contains("source=timer"),
        "{text}"
    );

    // The socket is root-only.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&socket).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);

    let socket_arg = socket.to_string_lossy().to_string();
    // The first synchronize fills the signals (slow under emulation: wait for it).
    wait_until(
        "signals in `monitor status`",
        Duration::from_secs(20),
        || {
            let out = monitor(&["status", "--socket", &socket_arg]);
            let text = String::from_utf8_lossy(&out.stdout);
            text.contains("memory.available") && text.contains("allocatableMemory.available")
        },
    );
    let json = monitor(&["status", "--socket", &socket_arg, "--json"]);
    let value: serde_json::Value =
        serde_json::from_slice(&json.stdout).expect("status --json is JSON");
    assert!(
        value["sources"].as_array().is_some_and(|s| s.len() >= 5),
        "status --json: {value}"
    );

    wait_until("the pod in `monitor pods`", Duration::from_secs(20), || {
        let out = monitor(&["pods", "--socket", &socket_arg]);
        String::from_utf8_lossy(&out.stdout).contains("default/web")
    });
    let events = monitor(&["events", "--socket", &socket_arg]);
    assert!(
        String::from_utf8_lossy(&events.stdout).contains("Started"),
        "{}",
        String::from_utf8_lossy(&events.stdout)
    );
    let metrics = monitor(&["metrics", "--socket", &socket_arg]);
    let metrics = String::from_utf8_lossy(&metrics.stdout);
    assert!(
        metrics.contains("monitor_synchronizes_total")
            && metrics.contains("monitor_wake_to_sync_seconds_bucket"),
        "{metrics}"
    );

    if Feature::Ebpf.missing().is_none() {
        wait_until(
            "the kernel OOM kill of default/oomer in the metrics",
            Duration::from_secs(30),
            || {
                let out = monitor(&["metrics", "--socket", &socket_arg]);
                String::from_utf8_lossy(&out.stdout).lines().any(|l| {
                    l.starts_with("monitor_kernel_oom_kills_total{pod=\"default/oomer\"} ")
                        && !l.ends_with(" 0")
                })
            },
        );
    }

    // SIGTERM: a clean exit, the socket removed, the pod left running (adopted next time).
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(agent.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let status = agent.wait().expect("agent exits");
    assert!(status.success(), "exit status {status:?}:\n{}", read_log());
    assert!(!Path::new(&socket).exists(), "socket removed on exit");
    let stopped = monitor(&["status", "--socket", &socket_arg]);
    assert!(!stopped.status.success());
    assert!(String::from_utf8_lossy(&stopped.stderr).contains("is the agent running?"));
}
