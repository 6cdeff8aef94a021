//! The `monitor` binary as a user runs it: `monitor run` logs which event sources started,
//! and the client subcommands talk to it over its root-only socket; `completions` and `man`
//! describe the same command line; `--log-format` shapes the log lines.
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use monitor_tests::node::poll_every;
use monitor_tests::{Feature, TestTrees, helper_binary, monitor_run, require, wait_until};

fn monitor(args: &[&str]) -> std::process::Output {
    Command::new(helper_binary("monitor"))
        .args(args)
        .output()
        .expect("run monitor")
}

/// `monitor run` on a 256 MiB bounded node whose manifests, state, logs and socket are in
/// `dir`; returns the agent and the path of its log.
fn start_agent(
    dir: &Path,
    socket: &Path,
    cgroup_root: &str,
) -> (std::process::Child, std::path::PathBuf) {
    let config = format!(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nstaticPodPath: {}\n\
         evictionHard: {{allocatableMemory.available: 50Mi}}\nmonitor:\n  podsMemoryLimit: 256Mi\n  cgroupRoot: {cgroup_root}\n  \
         stateDir: {}\n  podLogDir: {}\n  socket: {}\n",
        dir.join("pods").display(),
        dir.join("state").display(),
        dir.join("logs").display(),
        socket.display(),
    );
    std::fs::write(dir.join("config.yaml"), config).unwrap();
    let log_path = dir.join("agent.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let agent = monitor_run(&dir.join("config.yaml"), &log)
        .spawn()
        .expect("start monitor run");
    (agent, log_path)
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
                l.starts_with("monitor_kernel_oom_kills_total{pod=\"default/oomer\"} ")
                    && !l.ends_with(" 0")
            })
        });
        // On failure, what the agent counted and logged: an OOM kill counted under
        // pod="" (the pod not known yet) reads differently from none at all.
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
    for section in [".SH NAME", ".SH SYNOPSIS", ".SH OPTIONS", ".SH COMMANDS"] {
        assert!(page.contains(section), "no {section}:\n{page}");
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
        stderr.contains("cgroupDriver") && stderr.contains("not followed"),
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
