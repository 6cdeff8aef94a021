//! The `monitor` binary as a user runs it: `monitor run` logs which event sources started,
//! and the client subcommands talk to it over its root-only socket; `completions` and `man`
//! describe the same command line; `--log-format` shapes the log lines.
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use monitor_tests::node::poll_every;
use monitor_tests::{
    Feature, KillOnDrop, TestTrees, helper_binary, monitor_run, require, wait_until,
};

fn monitor(args: &[&str]) -> std::process::Output {
    Command::new(helper_binary("monitor"))
        .args(args)
        .output()
        .expect("run monitor")
}

/// Writes `dir/config.yaml`: a 256 MiB bounded node whose manifests, state, logs and
/// socket are in `dir`, under `cgroup_root`; `extra` (whole lines) goes at the top level.
fn write_config(dir: &Path, socket: &Path, cgroup_root: &str, extra: &str) {
    let config = format!(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n{extra}staticPodPath: {}\n\
         evictionHard: {{allocatableMemory.available: 50Mi}}\nmonitor:\n  podsMemoryLimit: 256Mi\n  cgroupRoot: {cgroup_root}\n  \
         stateDir: {}\n  podLogDir: {}\n  socket: {}\n",
        dir.join("pods").display(),
        dir.join("state").display(),
        dir.join("logs").display(),
        socket.display(),
    );
    std::fs::write(dir.join("config.yaml"), config).unwrap();
}

/// `monitor run` on a 256 MiB bounded node whose manifests, state, logs and socket are in
/// `dir`; returns the agent and the path of its log.
fn start_agent(dir: &Path, socket: &Path, cgroup_root: &str) -> (KillOnDrop, std::path::PathBuf) {
    write_config(dir, socket, cgroup_root, "");
    let log_path = dir.join("agent.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let agent = monitor_run(&dir.join("config.yaml"), &log)
        .spawn()
        .expect("start monitor run");
    (KillOnDrop(agent), log_path)
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
    let (mut agent, log_path) = start_agent(dir.path(), &socket, &cgroup_root);
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
    // The socket from the environment, as crictl takes its endpoint; --socket wins.
    let from_env = Command::new(helper_binary("monitor"))
        .arg("pods")
        .env("MONITOR_SOCKET", &socket)
        .output()
        .expect("run monitor");
    assert!(
        String::from_utf8_lossy(&from_env.stdout).contains("default/web"),
        "MONITOR_SOCKET: {}",
        String::from_utf8_lossy(&from_env.stderr)
    );
    let overridden = Command::new(helper_binary("monitor"))
        .args(["pods", "--socket", &socket_arg])
        .env("MONITOR_SOCKET", dir.path().join("nobody.sock"))
        .output()
        .expect("run monitor");
    assert!(
        overridden.status.success(),
        "--socket wins over MONITOR_SOCKET"
    );

    // `events --follow`: the events so far, then one recorded after it started (a pod
    // whose manifest appears now), until it is stopped.
    let mut follow = Command::new(helper_binary("monitor"))
        .args(["events", "--follow", "--socket", &socket_arg])
        .stdout(Stdio::piped())
        .spawn()
        .expect("run monitor events --follow");
    let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let reader = {
        let stdout = follow.stdout.take().expect("stdout");
        let lines = lines.clone();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                lines.lock().unwrap().push(line);
            }
        })
    };
    let followed = |needle: &str| lines.lock().unwrap().iter().any(|l| l.contains(needle));
    wait_until(
        "`events --follow` to print the events so far",
        Duration::from_secs(10),
        || followed("default/web"),
    );
    std::fs::write(
        dir.path().join("pods/late.yaml"),
        "apiVersion: v1\nkind: Pod\nmetadata: {name: late}\nspec:\n  containers:\n  - {name: main, image: none, command: [/bin/sleep, '1000']}\n",
    )
    .unwrap();
    wait_until(
        "`events --follow` to print the late pod's start",
        Duration::from_secs(30),
        || {
            lines
                .lock()
                .unwrap()
                .iter()
                .any(|l| l.contains("default/late") && l.contains("Started"))
        },
    );
    {
        let printed = lines.lock().unwrap();
        assert_eq!(
            printed.first().map(String::as_str),
            Some("TIME\tTYPE\tREASON\tOBJECT\tMESSAGE"),
            "{printed:?}"
        );
        assert_eq!(
            printed.iter().filter(|l| l.starts_with("TIME")).count(),
            1,
            "one header: {printed:?}"
        );
    }
    let _ = follow.kill();
    let _ = follow.wait();
    let _ = reader.join();
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
        let oom_lines = || -> Vec<String> {
            let out = monitor(&["metrics", "--socket", &socket_arg]);
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .filter(|l| l.contains("oom_kills_total"))
                .map(str::to_string)
                .collect()
        };
        let counted = poll_every(Duration::from_secs(30), Duration::from_millis(50), || {
            oom_lines().iter().any(|l| {
                l.starts_with(
                    "monitor_kernel_oom_kills_total{namespace=\"default\",pod=\"oomer\"} ",
                ) && !l.ends_with(" 0")
            })
        });
        // On failure, what the agent counted and logged: an OOM kill counted under
        // an empty namespace and pod (the pod not known yet) reads differently from none
        // at all.
        assert!(
            counted,
            "the kernel OOM kill of default/oomer never reached the metrics: {:?}\n{}",
            oom_lines(),
            read_log()
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

/// `monitor explain` against a running agent: two pods and a critical one, ranked by the
/// policy on the last synchronize's stats; the answer names the rank, the rule and the
/// hot path's victim.
#[test]
fn explain_says_where_a_pod_stands_in_the_ranking() {
    if !require("explain_says_where_a_pod_stands", &[Feature::Root]) {
        return;
    }
    let _trees = TestTrees;
    let cgroup_root = TestTrees::root("explain");
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("api.sock");
    std::fs::create_dir_all(dir.path().join("pods")).unwrap();
    let manifest = |name: &str, extra: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n{extra}  containers:\n  - name: main\n    image: none\n    command: [/bin/sleep, '1000']\n"
        )
    };
    // low: BestEffort at priority -5, above its (zero) request; web: within a 100Mi
    // request; node-agent: critical by priority.
    for (name, extra) in [
        ("low", "  priority: -5\n"),
        ("web", ""),
        ("node-agent", "  priority: 2000001000\n"),
    ] {
        let mut text = manifest(name, extra);
        if name == "web" {
            text += "    resources: {requests: {memory: 100Mi}}\n";
        }
        std::fs::write(dir.path().join(format!("pods/{name}.yaml")), text).unwrap();
    }
    let (mut agent, log_path) = start_agent(dir.path(), &socket, &cgroup_root);
    let read_log = || std::fs::read_to_string(&log_path).unwrap_or_default();
    let socket_arg = socket.to_string_lossy().to_string();
    let explain = |pod: &str| monitor(&["explain", pod, "--socket", &socket_arg]);

    // The pods start, then a synchronize ranks all three (the timer paces it).
    let mut last = String::new();
    let ranked = poll_every(Duration::from_secs(40), Duration::from_millis(200), || {
        let out = explain("low");
        last = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        out.status.success() && last.contains("of 2 (1 = evicted first)")
    });
    assert!(
        ranked,
        "explain low never ranked both pods: {last}\n{}",
        read_log()
    );
    println!("monitor explain low:\n{last}");
    assert!(
        last.contains("POD default/low: BestEffort, priority -5")
            && last.contains("allocatableMemory.available")
            && last.contains("hard threshold allocatableMemory.available<50Mi")
            && last.contains("rank 1 of 2 (1 = evicted first)")
            && last.contains("before default/web: by "),
        "{last}"
    );
    assert!(
        last.contains("hot path: this pod is the armed victim"),
        "the hot path arms the first-ranked pod: {last}"
    );

    let web = explain("default/web");
    let web_text = String::from_utf8_lossy(&web.stdout);
    assert!(web.status.success(), "{web:?}");
    assert!(
        web_text.contains("POD default/web: Burstable, priority 0")
            && web_text.contains("request 100Mi: within its request")
            && web_text.contains("rank 2 of 2")
            && web_text.contains("after default/low: by ")
            && web_text.contains("hot path: armed with default/low, not this pod"),
        "{web_text}"
    );

    let critical = explain("node-agent");
    let critical_text = String::from_utf8_lossy(&critical.stdout);
    assert!(
        critical.status.success() && critical_text.contains("never evicted"),
        "{critical:?}"
    );

    let json = monitor(&["explain", "low", "--socket", &socket_arg, "--json"]);
    let value: serde_json::Value =
        serde_json::from_slice(&json.stdout).expect("explain --json is JSON");
    let signal = &value["signals"][0];
    assert_eq!(signal["signal"], "allocatableMemory.available", "{value}");
    assert_eq!(signal["rank"], 1, "{value}");
    assert_eq!(signal["candidates"], 2, "{value}");
    assert!(signal["usage"].as_u64().is_some_and(|u| u > 0), "{value}");

    let unknown = explain("nope");
    assert!(!unknown.status.success());
    let why = String::from_utf8_lossy(&unknown.stderr);
    assert!(
        why.contains("the agent answered 404 to GET /explain?pod=nope")
            && why.contains("no pod named nope"),
        "{why}"
    );

    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(agent.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let status = agent.wait().expect("agent exits");
    assert!(status.success(), "exit status {status:?}:\n{}", read_log());
}

const SUBCOMMANDS: [&str; 9] = [
    "run",
    "simulate",
    "status",
    "pods",
    "events",
    "metrics",
    "explain",
    "completions",
    "man",
];

#[test]
fn completions_cover_every_subcommand_in_every_shell() {
    let bash = monitor(&["completions", "bash"]);
    assert!(bash.status.success(), "{bash:?}");
    let script = String::from_utf8_lossy(&bash.stdout);
    assert!(
        script.contains("_monitor()"),
        "not a bash completion:\n{script}"
    );
    for sub in SUBCOMMANDS {
        // The word list bash offers after `monitor`.
        assert!(
            script.contains(&format!(" {sub} ")) || script.contains(&format!(" {sub}\"")),
            "bash completion without `{sub}`:\n{script}"
        );
    }
    assert!(script.contains("--log-format"), "{script}");
    for shell in ["zsh", "fish", "elvish", "powershell"] {
        let out = monitor(&["completions", shell]);
        assert!(out.status.success(), "{shell}: {out:?}");
        let script = String::from_utf8_lossy(&out.stdout);
        for sub in ["status", "simulate"] {
            assert!(
                script.contains(sub),
                "{shell} completion without `{sub}`:\n{script}"
            );
        }
    }
}

#[test]
fn completions_refuse_an_unknown_shell_naming_the_known_ones() {
    let out = monitor(&["completions", "tcsh"]);
    assert!(!out.status.success(), "{out:?}");
    assert!(out.stdout.is_empty(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("invalid value 'tcsh'")
            && stderr.contains("bash")
            && stderr.contains("zsh"),
        "{stderr}"
    );
    let missing = monitor(&["completions"]);
    assert!(!missing.status.success(), "{missing:?}");
    assert!(String::from_utf8_lossy(&missing.stderr).contains("<SHELL>"));
}

#[test]
fn man_prints_one_roff_page_with_every_command() {
    let out = monitor(&["man"]);
    assert!(out.status.success(), "{out:?}");
    let page = String::from_utf8(out.stdout).expect("the man page is UTF-8");
    // Only string definitions may come before the title.
    let title = page
        .lines()
        .find(|line| !line.starts_with(".ie ") && !line.starts_with(".el "))
        .unwrap_or_default();
    assert!(title.starts_with(".TH monitor 8 "), "{page}");
    assert_eq!(page.matches(".TH ").count(), 1, "{page}");
    for section in [
        ".SH NAME",
        ".SH SYNOPSIS",
        ".SH OPTIONS",
        ".SH COMMANDS",
        ".SH ENVIRONMENT",
        ".SH FILES",
        ".SH SIGNALS",
        ".SH EXIT STATUS",
        ".SH EXAMPLES",
    ] {
        assert!(page.contains(section), "no {section}:\n{page}");
    }
    // FILES names the paths the agent really uses by default, as check-config prints them.
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.yaml");
    std::fs::write(&empty, "").unwrap();
    let effective = monitor(&[
        "check-config",
        "--config",
        &empty.to_string_lossy(),
        "--output",
        "json",
    ]);
    assert!(effective.status.success(), "{effective:?}");
    let effective: serde_json::Value =
        serde_json::from_slice(&effective.stdout).expect("check-config prints JSON");
    for path in [
        &effective["monitor"]["socket"],
        &effective["monitor"]["stateDir"],
        &effective["monitor"]["podLogDir"],
    ] {
        let path = path.as_str().expect("a default path");
        let path = path.trim_end_matches('/');
        assert!(
            page.contains(&format!("\\fI{path}")),
            "FILES does not name the default {path}:\n{page}"
        );
    }
    for sub in SUBCOMMANDS {
        assert!(
            page.contains(&format!(".SS \"monitor {sub}\"")),
            "no `monitor {sub}` in the page:\n{page}"
        );
    }
    // Each command's own options, and the global flag.
    for option in [
        "\\-\\-scenario",
        "\\-\\-socket",
        "\\-\\-log\\-format",
        "KUBELET_FLAGS",
    ] {
        assert!(page.contains(option), "no {option}:\n{page}");
    }
}

/// `monitor run` on a configuration that names an unknown key (a warning) and an invalid
/// metrics address (an error at start, before anything is touched): it logs a few lines and
/// exits. Its stderr goes to a file, as under systemd with `StandardError=file:`.
fn run_failing_agent(extra_args: &[&str]) -> (std::process::ExitStatus, String) {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        format!(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nnotAKubeletKey: 1\n\
             monitor:\n  metricsAddress: not-an-address\n  runPods: false\n  stateDir: {}\n  socket: {}\n  \
             sources: {{ebpf: false, memcgThresholds: false, memoryEvents: false, psi: false}}\n",
            dir.path().join("state").display(),
            dir.path().join("api.sock").display(),
        ),
    )
    .unwrap();
    let log_path = dir.path().join("stderr.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut child = Command::new(helper_binary("monitor"))
        .args(extra_args)
        .arg("run")
        .arg("--config")
        .arg(&config)
        .env_remove("RUST_LOG")
        .env_remove("NO_COLOR")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start monitor run");
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for monitor run") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "monitor run did not stop on a bad metricsAddress:\n{}",
                std::fs::read_to_string(&log_path).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (status, std::fs::read_to_string(&log_path).unwrap())
}

#[test]
fn json_log_format_writes_one_json_object_per_line() {
    let (status, stderr) = run_failing_agent(&["--log-format", "json"]);
    assert!(!status.success(), "{status:?}\n{stderr}");
    let lines: Vec<serde_json::Value> = stderr
        .lines()
        .map(|line| {
            let value: serde_json::Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("not a JSON line ({e}): {line:?}\n{stderr}"));
            assert!(value["level"].is_string(), "no level: {line}");
            assert!(value["fields"]["message"].is_string(), "no message: {line}");
            value
        })
        .collect();
    assert!(
        lines.iter().any(|l| l["level"] == "WARN"
            && l["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("notAKubeletKey"))),
        "no warning naming the unknown key:\n{stderr}"
    );
    // The error that stops the agent is a JSON line too, and the last one.
    let last = lines.last().expect("at least one log line");
    assert_eq!(last["level"], "ERROR", "{stderr}");
    assert!(
        last["fields"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "{stderr}"
    );

    // The flag is global: accepted after the subcommand as well.
    let out = monitor(&["status", "--log-format", "yaml"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("invalid value 'yaml'") && stderr.contains("json"),
        "{stderr}"
    );
}

#[test]
fn text_log_lines_in_a_file_have_no_colour() {
    let (status, stderr) = run_failing_agent(&[]);
    assert!(!status.success(), "{status:?}\n{stderr}");
    assert!(
        stderr.contains("WARN") && stderr.contains("notAKubeletKey"),
        "{stderr}"
    );
    assert!(
        stderr.contains("monitor: "),
        "the error that stops the agent:\n{stderr}"
    );
    assert!(
        !stderr.contains("\x1b["),
        "escape codes in a file: {stderr:?}"
    );
}

/// A whole `/configz` answer captured from a real node (kubelet 1.31 or later, kubeadm's
/// layout, the systemd cgroup driver, cri-dockerd as its runtime; published with a
/// node-audit tool's documentation, reindented here, not edited): 80 keys as the kubelet
/// serves them. check-config takes it with its thresholds and warns of exactly the keys
/// that do something else here, each by name, and of nothing else.
#[test]
fn check_config_of_a_captured_configz_warns_only_of_the_keys_that_change_meaning() {
    // Embedded: the VM's guest has the test binaries, not the source tree.
    let dir = tempfile::tempdir().expect("tempdir");
    let capture = dir.path().join("configz-captured-1.31.json");
    std::fs::write(
        &capture,
        include_str!("../fixtures/configz-captured-1.31.json"),
    )
    .expect("write the capture");
    let capture = capture.to_str().expect("utf-8");
    let out = monitor(&["check-config", "--config", capture, "--output", "json"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let effective: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    for (signal, value) in [
        ("memory.available", "100Mi"),
        ("nodefs.available", "10%"),
        ("nodefs.inodesFree", "5%"),
        ("imagefs.available", "15%"),
        ("imagefs.inodesFree", "5%"),
    ] {
        assert_eq!(effective["evictionHard"][signal], value, "{effective}");
    }
    assert_eq!(effective["evictionPressureTransitionPeriod"], "5m0s");
    assert_eq!(effective["imageGCHighThresholdPercent"], 85);
    assert_eq!(effective["imageMinimumGCAge"], "2m0s");
    let mut warned: Vec<&str> = Vec::new();
    for line in stderr.lines().filter(|l| !l.trim().is_empty()) {
        let key = line
            .split_once("configz-captured-1.31.json: ")
            .and_then(|(_, rest)| rest.split(':').next())
            .unwrap_or_else(|| panic!("a line that is no warning of a key: {line}\n{stderr}"));
        warned.push(key);
    }
    warned.sort_unstable();
    assert_eq!(
        warned,
        ["cgroupDriver", "logging", "memorySwap"],
        "{stderr}"
    );
}

#[test]
fn check_config_prints_the_effective_configuration_of_a_configz_capture() {
    // Needs no root: it only reads the file.
    let dir = tempfile::tempdir().expect("tempdir");
    // The shape `kubectl get --raw /api/v1/nodes/NODE/proxy/configz` prints, with a key
    // the agent does not follow as the kubelet does.
    let capture = dir.path().join("configz.json");
    std::fs::write(
        &capture,
        r#"{"kubeletconfig":{"enableServer":true,"cgroupDriver":"systemd","evictionHard":{"memory.available":"300Mi","nodefs.available":"7%"},"evictionPressureTransitionPeriod":"30s","kind":"KubeletConfiguration","apiVersion":"kubelet.config.k8s.io/v1beta1"}}"#,
    )
    .expect("write");
    let capture = capture.to_str().expect("utf-8");
    let flags = [
        "--eviction-soft=memory.available<1Gi",
        "--eviction-soft-grace-period=memory.available=1m",
    ];
    let json = monitor(
        &[
            &["check-config", "--config", capture, "--output", "json"][..],
            &flags[..],
        ]
        .concat(),
    );
    let stderr = String::from_utf8_lossy(&json.stderr);
    assert!(json.status.success(), "{stderr}");
    let effective: serde_json::Value = serde_json::from_slice(&json.stdout).expect("JSON");
    // The capture's thresholds, not the defaults, and the flags over them.
    assert_eq!(
        effective["evictionHard"]["memory.available"], "300Mi",
        "{effective}"
    );
    assert_eq!(
        effective["evictionHard"]["nodefs.available"], "7%",
        "{effective}"
    );
    assert!(
        effective["evictionHard"].get("imagefs.available").is_none(),
        "{effective}"
    );
    assert_eq!(
        effective["evictionSoft"]["memory.available"], "1Gi",
        "{effective}"
    );
    assert_eq!(effective["evictionPressureTransitionPeriod"], "30s");
    assert_eq!(
        effective["monitor"]["hotKill"], true,
        "defaults filled in: {effective}"
    );
    // The key that does something else here is named on stderr.
    assert!(
        stderr.contains("cgroupDriver") && stderr.contains("monitor.podList"),
        "{stderr}"
    );
    // The printed YAML is a configuration `monitor run --config` takes, quietly, and
    // the same one.
    let yaml = monitor(&[&["check-config", "--config", capture][..], &flags[..]].concat());
    assert!(yaml.status.success());
    let effective_file = dir.path().join("effective.yaml");
    std::fs::write(&effective_file, &yaml.stdout).expect("write");
    let again = monitor(&[
        "check-config",
        "--config",
        effective_file.to_str().expect("utf-8"),
    ]);
    assert!(again.status.success());
    assert!(
        again.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    assert_eq!(again.stdout, yaml.stdout);

    // A configuration the agent would refuse: exit 1, the file and key named.
    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, "evictionHard: {memory.available: lots}\n").expect("write");
    let refused = monitor(&["check-config", "--config", bad.to_str().expect("utf-8")]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("bad.yaml") && stderr.contains("memory.available"),
        "{stderr}"
    );
}

/// One datagram of the journal's native protocol as `KEY=value` pairs (values without a
/// newline: the binary form, `KEY\n<le64 length><value>\n`, is read too).
fn journal_fields(datagram: &[u8]) -> Vec<(String, String)> {
    let mut fields = Vec::new();
    let mut rest = datagram;
    while !rest.is_empty() {
        let Some(end) = rest.iter().position(|&b| b == b'\n') else {
            break;
        };
        let line = &rest[..end];
        if let Some(eq) = line.iter().position(|&b| b == b'=') {
            fields.push((
                String::from_utf8_lossy(&line[..eq]).into_owned(),
                String::from_utf8_lossy(&line[eq + 1..]).into_owned(),
            ));
            rest = &rest[end + 1..];
        } else {
            // KEY\n, then the value's length and the value.
            let key = String::from_utf8_lossy(line).into_owned();
            let after = &rest[end + 1..];
            let Some(len) = after
                .get(..8)
                .map(|b| u64::from_le_bytes(b.try_into().unwrap()) as usize)
            else {
                break;
            };
            let value = after.get(8..8 + len).unwrap_or_default();
            fields.push((key, String::from_utf8_lossy(value).into_owned()));
            rest = after.get(8 + len + 1..).unwrap_or_default();
        }
    }
    fields
}

/// `--log-format journald` sends each line to the journal's native socket with its own
/// priority and its fields as journal fields, and so does the default format when stderr
/// is the journal's stream (JOURNAL_STREAM names it, as systemd sets it). The agent runs
/// in a mount namespace of its own whose /run/systemd/journal is a directory of the
/// test's, where the test listens in the journal's place: the host's journal, if any,
/// sees nothing.
#[test]
fn journald_log_format_gives_each_line_its_priority_and_fields() {
    if !require("journald_log_format", &[Feature::Root]) {
        return;
    }
    journald_run(JournalBy::Flag);
    journald_run(JournalBy::JournalStream);
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum JournalBy {
    /// `--log-format journald`.
    Flag,
    /// No flag; JOURNAL_STREAM names the agent's stderr.
    JournalStream,
}

/// A directory with a one-pod static pod path and a configuration for it (with one
/// unknown key, warned about at start) in `config.yaml`, for an agent under `cgroup_root`.
fn journal_agent_dir(cgroup_root: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("pods")).unwrap();
    std::fs::write(
        dir.path().join("pods/web.yaml"),
        "apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec:\n  containers:\n  - {name: main, image: none, command: [/bin/sleep, '1000']}\n",
    )
    .unwrap();
    write_config(
        dir.path(),
        &dir.path().join("api.sock"),
        cgroup_root,
        "notAKubeletKey: 1\n",
    );
    dir
}

/// `"$2" "$4" run --config "$3"` in a mount namespace of its own with an empty /run, after
/// `extra` (shell, may use "$1"): `sh -c` arguments for `unshare`.
fn in_private_run(
    command: &mut Command,
    extra: &str,
    journal_dir: &std::path::Path,
    dir: &std::path::Path,
    format_flag: &str,
) {
    command
        .args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg(format!(
            "mkdir -p /run && mount -t tmpfs tmpfs /run {extra} \
             && exec \"$2\" \"$4\" run --config \"$3\""
        ))
        .arg("sh")
        .arg(journal_dir)
        .arg(helper_binary("monitor"))
        .arg(dir.join("config.yaml"))
        .arg(format_flag)
        .env_remove("RUST_LOG")
        .env_remove("JOURNAL_STREAM");
}

/// The "device:inode" systemd would put in JOURNAL_STREAM for `file`.
fn journal_stream_of(file: &std::fs::File) -> String {
    use std::os::unix::fs::MetadataExt;
    let m = file.metadata().unwrap();
    format!("{}:{}", m.dev(), m.ino())
}

/// Stderr is the journal's stream but the journal's socket is out of reach (a private
/// /run): `auto` logs text on stderr with one warning and the agent runs; an explicit
/// `journald` refuses to start and names the socket.
#[test]
fn auto_log_format_falls_back_to_text_when_the_journal_is_out_of_reach() {
    if !require("auto_log_format_falls_back", &[Feature::Root]) {
        return;
    }
    let _trees = TestTrees;
    let cgroup_root = TestTrees::root("cli-nojournal");
    let dir = journal_agent_dir(&cgroup_root);
    let empty = dir.path().join("no-journal");
    std::fs::create_dir_all(&empty).unwrap();
    for flag in ["--log-format=auto", "--log-format=journald"] {
        let stderr_path = dir.path().join("stderr.log");
        let stderr_file = std::fs::File::create(&stderr_path).unwrap();
        let mut command = Command::new("unshare");
        in_private_run(&mut command, "", &empty, dir.path(), flag);
        command.env("JOURNAL_STREAM", journal_stream_of(&stderr_file));
        let mut agent = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr_file)
            .spawn()
            .expect("start monitor run in a mount namespace");
        let stderr = || std::fs::read_to_string(&stderr_path).unwrap_or_default();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline
            && !stderr().contains("agent running")
            && matches!(agent.try_wait(), Ok(None))
        {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(agent.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let status = agent.wait().expect("agent exits");
        let stderr = stderr();
        if flag == "--log-format=auto" {
            assert!(status.success(), "{status:?}\n{stderr}");
            assert!(stderr.contains("agent running"), "{stderr}");
            assert_eq!(
                stderr.matches("cannot be reached").count(),
                1,
                "one warning about the journal:\n{stderr}"
            );
            assert!(
                stderr.contains("WARN") && stderr.contains("/run/systemd/journal/socket"),
                "{stderr}"
            );
        } else {
            assert!(!status.success(), "{status:?}\n{stderr}");
            assert!(!stderr.contains("agent running"), "{stderr}");
            assert!(
                stderr.contains("--log-format journald")
                    && stderr.contains("/run/systemd/journal/socket"),
                "{stderr}"
            );
        }
    }
}

fn journald_run(by: JournalBy) {
    let _trees = TestTrees;
    let cgroup_root = TestTrees::root("cli-journal");
    let dir = journal_agent_dir(&cgroup_root);
    let journal_dir = dir.path().join("journal");
    std::fs::create_dir_all(&journal_dir).unwrap();
    let journal = std::os::unix::net::UnixDatagram::bind(journal_dir.join("socket")).unwrap();
    journal
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let stderr_path = dir.path().join("stderr.log");
    let stderr_file = std::fs::File::create(&stderr_path).unwrap();
    let journal_stream = journal_stream_of(&stderr_file);
    let format_flag = match by {
        JournalBy::Flag => "--log-format=journald",
        // A harmless global flag in its place.
        JournalBy::JournalStream => "--log-format=auto",
    };
    let mut command = Command::new("unshare");
    in_private_run(
        &mut command,
        "&& mkdir -p /run/systemd/journal && mount --bind \"$1\" /run/systemd/journal",
        &journal_dir,
        dir.path(),
        format_flag,
    );
    if by == JournalBy::JournalStream {
        command.env("JOURNAL_STREAM", &journal_stream);
    }
    let mut agent = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr_file)
        .spawn()
        .expect("start monitor run in a mount namespace");
    let mut records: Vec<Vec<(String, String)>> = Vec::new();
    let field = |record: &[(String, String)], key: &str| {
        record
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
    };
    let started_web = |records: &[Vec<(String, String)>]| {
        records.iter().any(|r| {
            field(r, "REASON").as_deref() == Some("Started")
                && field(r, "POD").as_deref() == Some("default/web")
        })
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut buf = vec![0u8; 64 * 1024];
    while Instant::now() < deadline && !started_web(&records) {
        // An agent that could not start (the namespace's mounts, its configuration)
        // says why on stderr: no use waiting.
        if matches!(agent.try_wait(), Ok(Some(_))) {
            break;
        }
        // The layer's first datagram is empty, a probe the journal discards.
        if let Ok(n) = journal.recv(&mut buf)
            && n > 0
        {
            records.push(journal_fields(&buf[..n]));
        }
    }
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(agent.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let status = agent.wait().expect("agent exits");
    let stderr = std::fs::read_to_string(&stderr_path).unwrap_or_default();
    let shown: Vec<String> = records
        .iter()
        .map(|r| {
            r.iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    assert!(
        started_web(&records),
        "{by:?}: no Started event for default/web with POD= and REASON=:\n{}\nstderr:\n{stderr}",
        shown.join("\n")
    );
    assert!(status.success(), "{status:?}\n{stderr}");
    // Each line at its own priority: the unknown key's warning at 4, routine lines at 5.
    let warning = records
        .iter()
        .find(|r| field(r, "MESSAGE").is_some_and(|m| m.contains("notAKubeletKey")))
        .unwrap_or_else(|| panic!("no warning about the unknown key:\n{}", shown.join("\n")));
    assert_eq!(
        field(warning, "PRIORITY").as_deref(),
        Some("4"),
        "{warning:?}"
    );
    assert!(
        records.iter().any(
            |r| field(r, "MESSAGE").is_some_and(|m| m.contains("agent running"))
                && field(r, "PRIORITY").as_deref() == Some("5")
        ),
        "{}",
        shown.join("\n")
    );
    assert!(
        records
            .iter()
            .all(|r| field(r, "SYSLOG_IDENTIFIER").as_deref() == Some("monitor")),
        "{}",
        shown.join("\n")
    );
    // Nothing went to stderr but what the journal could not take.
    assert!(
        !stderr.contains("agent running"),
        "the log went to stderr:\n{stderr}"
    );
}

/// `--config-dir`: the kubelet's drop-ins (`*.conf`, in name order) merge over the file,
/// maps key by key and lists whole, and flags come last; a bad drop-in is refused by name.
#[test]
fn check_config_merges_a_drop_in_directory_as_the_kubelet_does() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
         evictionHard: {memory.available: 100Mi, nodefs.available: 10%}\nmaxPods: 110\n\
         monitor: {socket: /run/base.sock}\n",
    )
    .expect("write");
    let drop_ins = dir.path().join("config.d");
    std::fs::create_dir(&drop_ins).expect("mkdir");
    // Read in name order: 10 then 20; the .yaml file is not a drop-in.
    std::fs::write(
        drop_ins.join("20-later.conf"),
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: 30\n",
    )
    .expect("write");
    std::fs::write(
        drop_ins.join("10-node.conf"),
        "kind: KubeletConfiguration\nevictionHard: {memory.available: 1Gi}\nmaxPods: 20\n\
         monitor: {stateDir: /var/lib/other}\n",
    )
    .expect("write");
    std::fs::write(drop_ins.join("99-ignored.yaml"), "maxPods: 1\n").expect("write");
    let (config, drop_ins_arg) = (
        config.to_str().expect("utf-8"),
        drop_ins.to_str().expect("utf-8"),
    );
    let out = monitor(&[
        "check-config",
        "--config",
        config,
        "--config-dir",
        drop_ins_arg,
        "--output",
        "json",
        "--eviction-hard=nodefs.available<5%",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let effective: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(
        effective["maxPods"], 30,
        "the later drop-in wins: {effective}"
    );
    // The flag comes last and, as the kubelet's --eviction-hard, sets the whole map.
    assert_eq!(
        effective["evictionHard"],
        serde_json::json!({"nodefs.available": "5%"}),
        "{effective}"
    );
    assert_eq!(
        effective["monitor"]["socket"], "/run/base.sock",
        "the file's monitor keys stay: {effective}"
    );
    assert_eq!(
        effective["monitor"]["stateDir"], "/var/lib/other",
        "the drop-in's monitor keys merge in: {effective}"
    );
    // Without the flag: the drop-in's memory threshold beside the file's nodefs one.
    let merged = monitor(&[
        "check-config",
        "--config",
        config,
        "--config-dir",
        drop_ins_arg,
        "--output",
        "json",
    ]);
    let merged: serde_json::Value = serde_json::from_slice(&merged.stdout).expect("JSON");
    assert_eq!(
        merged["evictionHard"]["memory.available"], "1Gi",
        "{merged}"
    );
    assert_eq!(
        merged["evictionHard"]["nodefs.available"], "10%",
        "{merged}"
    );

    // A drop-in of another kind is refused, naming it.
    std::fs::write(
        dir.path().join("config.d/30-proxy.conf"),
        "kind: KubeProxyConfiguration\n",
    )
    .expect("write");
    let refused = monitor(&[
        "check-config",
        "--config",
        config,
        "--config-dir",
        drop_ins_arg,
    ]);
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("30-proxy.conf") && stderr.contains("kind is \"KubeProxyConfiguration\""),
        "{stderr}"
    );
}

/// The safe first run of the README: the trial's manifests on a bounded node of the
/// test's, the agent stopped (its pods keep running), then `monitor cleanup` removes the
/// pods it ran (processes, cgroups, records, logs) and what it made around them; while an
/// agent answers, cleanup refuses.
#[test]
fn cleanup_removes_what_the_stopped_agent_left_and_nothing_while_it_runs() {
    if !require("cleanup", &[Feature::Root]) {
        return;
    }
    let _trees = TestTrees;
    let cgroup_root = TestTrees::root("cli-cleanup");
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("api.sock");
    let pods = dir.path().join("pods");
    std::fs::create_dir_all(&pods).unwrap();
    for (name, text) in [
        (
            "web.yaml",
            include_str!("../../packaging/examples/trial/pods/web.yaml"),
        ),
        (
            "batch.yaml",
            include_str!("../../packaging/examples/trial/pods/batch.yaml"),
        ),
    ] {
        std::fs::write(pods.join(name), text).unwrap();
    }
    let (mut agent, log_path) = start_agent(dir.path(), &socket, &cgroup_root);
    let config = dir.path().join("config.yaml");
    let config_arg = config.to_string_lossy().to_string();
    let socket_arg = socket.to_string_lossy().to_string();
    let pids = || -> Vec<u32> {
        let out = monitor(&["pods", "--json", "--socket", &socket_arg]);
        let value: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        value["pods"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|p| p["containers"].as_array().cloned().unwrap_or_default())
            .filter_map(|c| c["pid"].as_u64())
            .map(|pid| pid as u32)
            .collect()
    };
    wait_until("both trial pods running", Duration::from_secs(30), || {
        pids().len() == 2
    });
    let running = pids();

    let refused = monitor(&["cleanup", "--config", &config_arg]);
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("an agent is running"),
        "{refused:?}"
    );
    assert!(
        running.iter().all(|&pid| monitor_tests::node::alive(pid)),
        "a refused cleanup touched a pod"
    );

    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(agent.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let status = agent.wait().expect("agent exits");
    assert!(
        status.success(),
        "{}",
        std::fs::read_to_string(&log_path).unwrap_or_default()
    );
    assert!(
        running.iter().all(|&pid| monitor_tests::node::alive(pid)),
        "the pods outlive the agent"
    );

    // A decision record, as an agent that decided something leaves it: the agent's own.
    std::fs::write(
        dir.path().join("state").join("decisions.jsonl"),
        "{\"at\":\"2026-11-27T10:00:00Z\",\"action\":\"evict\",\"message\":\"m\"}\n",
    )
    .expect("a decision record");
    let out = monitor(&["cleanup", "--config", &config_arg]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(stdout.contains("decision record"), "{stdout}");
    for pod in ["default/web", "default/batch"] {
        assert!(
            stdout.contains(&format!("removed: pod {pod}:")),
            "{pod} not removed:\n{stdout}"
        );
    }
    wait_until("the pods' processes to die", Duration::from_secs(5), || {
        running.iter().all(|&pid| !monitor_tests::node::alive(pid))
    });
    let memory_root = monitor_tests::cgroup_mounts()
        .into_iter()
        .map(|mount| mount.join(&cgroup_root))
        .find(|p| p.exists());
    assert_eq!(
        memory_root, None,
        "the agent's cgroup tree is gone:\n{stdout}"
    );
    for gone in ["state", "logs", "api.sock"] {
        assert!(
            !dir.path().join(gone).exists(),
            "{gone} is still there:\n{stdout}"
        );
    }
    // The manifests and the configuration are the operator's: left.
    assert!(pods.join("web.yaml").exists() && config.exists());
    let again = monitor(&["cleanup", "--config", &config_arg]);
    assert!(again.status.success(), "{again:?}");
}

/// The trial configuration of the README loads, and keeps everything under
/// /tmp/monitor-trial and its own cgroup root.
#[test]
fn the_trial_configuration_stays_in_its_own_corner() {
    // Embedded: the VM runs this test without the repository.
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("trial.yaml");
    std::fs::write(
        &config,
        include_str!("../../packaging/examples/trial/config.yaml"),
    )
    .unwrap();
    let out = monitor(&[
        "check-config",
        "--config",
        &config.to_string_lossy(),
        "--output",
        "json",
    ]);
    assert!(out.status.success(), "{out:?}");
    let effective: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(effective["staticPodPath"], "/tmp/monitor-trial/pods");
    assert_eq!(effective["monitor"]["cgroupRoot"], "monitor-trial");
    assert!(
        effective["monitor"]["podsMemoryLimit"].is_string(),
        "{effective}"
    );
    for key in ["stateDir", "podLogDir", "socket"] {
        let path = effective["monitor"][key].as_str().unwrap_or_default();
        assert!(path.starts_with("/tmp/monitor-trial/"), "{key}: {path}");
    }
}
