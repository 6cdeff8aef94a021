//! A real `monitor run` under hostile clients and input: its socket is root-only from the
//! moment it exists, `monitor status` / `monitor metrics` keep answering while slow
//! clients hold every connection the listener serves, and oversized manifests and event
//! messages are bounded.
use std::io::{ErrorKind, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use monitor_tests::node::poll_every;
use monitor_tests::{Feature, TestTrees, helper_binary, monitor_run, require, wait_until};

/// The listener's connection budget in the agent (`MAX_CONNECTIONS`).
const BUDGET: usize = 64;
/// The agent's write timeout, and what this test allows on top of it.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

struct Agent {
    child: Option<Child>,
    socket: PathBuf,
    log: PathBuf,
    _dir: tempfile::TempDir,
    _trees: TestTrees,
}

impl Agent {
    /// Starts the agent with `manifests` (file name, content) in its manifest directory.
    fn start(name: &str, manifests: &[(&str, Vec<u8>)]) -> Agent {
        Agent::start_with(name, manifests, "")
    }

    /// [`Agent::start`] with `settings` (top-level KubeletConfiguration lines) added.
    fn start_with(name: &str, manifests: &[(&str, Vec<u8>)], settings: &str) -> Agent {
        Agent::start_with_env(name, manifests, settings, &[])
    }

    /// [`Agent::start_with`] with `env` added to the agent's environment.
    fn start_with_env(
        name: &str,
        manifests: &[(&str, Vec<u8>)],
        settings: &str,
        env: &[(&str, &str)],
    ) -> Agent {
        Agent::start_config(name, manifests, settings, "", env)
    }

    /// [`Agent::start_with_env`] with `monitor_keys` (lines under `monitor:`, indented)
    /// added.
    fn start_config(
        name: &str,
        manifests: &[(&str, Vec<u8>)],
        settings: &str,
        monitor_keys: &str,
        env: &[(&str, &str)],
    ) -> Agent {
        let trees = TestTrees;
        let cgroup_root = TestTrees::root(name);
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("run/api.sock");
        std::fs::create_dir_all(dir.path().join("pods")).expect("pods dir");
        for (file, content) in manifests {
            std::fs::write(dir.path().join("pods").join(file), content).expect("manifest");
        }
        let config = format!(
            // Memory only: the kubelet's default disk thresholds would read this host's
            // own disk, whose free space the test does not control.
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nstaticPodPath: {}\n\
             evictionHard: {{memory.available: 100Mi}}\n{settings}\
             monitor:\n  cgroupRoot: {cgroup_root}\n  stateDir: {}\n  podLogDir: {}\n  socket: {}\n{monitor_keys}",
            dir.path().join("pods").display(),
            dir.path().join("state").display(),
            dir.path().join("logs").display(),
            socket.display(),
        );
        std::fs::write(dir.path().join("config.yaml"), config).expect("config");
        let log = dir.path().join("agent.log");
        let file = std::fs::File::create(&log).expect("log");
        // A permissive umask: the socket must not inherit it.
        let previous = nix::sys::stat::umask(nix::sys::stat::Mode::empty());
        let child = monitor_run(&dir.path().join("config.yaml"), &file)
            .envs(env.iter().copied())
            .spawn()
            .expect("start monitor run");
        nix::sys::stat::umask(previous);
        let agent = Agent {
            child: Some(child),
            socket,
            log,
            _dir: dir,
            _trees: trees,
        };
        wait_until(
            "the agent's first synchronize",
            Duration::from_secs(30),
            || agent.cli(&["status"]).1.contains("LAST SYNCHRONIZE\n  #"),
        );
        agent
    }

    /// Runs a client subcommand against this agent: (success, stdout, elapsed).
    fn cli(&self, args: &[&str]) -> (bool, String, Duration) {
        let started = Instant::now();
        let out = Command::new(helper_binary("monitor"))
            .args(args)
            .arg("--socket")
            .arg(&self.socket)
            .env("NO_COLOR", "1")
            .output()
            .expect("run monitor");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            started.elapsed(),
        )
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        if let Some(child) = self.child.take() {
            monitor_tests::stop_agent(child);
        }
    }
}

/// A client that sends half a request line and then nothing.
fn half_request(socket: &Path) -> UnixStream {
    let mut stream = UnixStream::connect(socket).expect("connect");
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x")
        .expect("write half a request");
    stream
}

/// A client that asks for many responses at once and never reads them.
fn never_reads(socket: &Path) -> UnixStream {
    let mut stream = UnixStream::connect(socket).expect("connect");
    let requests = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n".repeat(400);
    stream
        .write_all(requests.as_bytes())
        .expect("write pipelined requests");
    stream
}

/// The bytes the kernel holds for `stream` to read.
fn waiting_bytes(stream: &UnixStream) -> usize {
    let mut bytes: libc::c_int = 0;
    // SAFETY: FIONREAD writes one c_int through the pointer, which points at `bytes`; the
    // descriptor is open for as long as `stream` is borrowed.
    let rc = unsafe { libc::ioctl(stream.as_raw_fd(), libc::FIONREAD, &mut bytes) };
    assert_eq!(rc, 0, "FIONREAD: {}", std::io::Error::last_os_error());
    usize::try_from(bytes).unwrap_or(0)
}

#[test]
fn status_and_metrics_answer_while_slow_clients_hold_every_connection() {
    if !require(
        "status_and_metrics_answer_while_slow_clients_hold_every_connection",
        &[Feature::Root],
    ) {
        return;
    }
    let agent = Agent::start("api-slow", &[]);

    // The socket was made 0600 before anyone could reach it, whatever the agent's umask,
    // and nothing of its private making is left beside it.
    let meta = std::fs::symlink_metadata(&agent.socket).expect("socket");
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    let beside: Vec<String> = std::fs::read_dir(agent.socket.parent().expect("dir"))
        .expect("read dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(beside, ["api.sock"], "{beside:?}");

    let mut stalled: Vec<UnixStream> = (0..BUDGET).map(|_| half_request(&agent.socket)).collect();
    let readers_started = Instant::now();
    let mut silent: Vec<UnixStream> = (0..8).map(|_| never_reads(&agent.socket)).collect();
    // More half requests than the budget: the listener is full of clients that send nothing.
    stalled.extend((0..BUDGET / 2).map(|_| half_request(&agent.socket)));
    // Give the agent time to accept them all and fill the silent clients' sockets.
    std::thread::sleep(Duration::from_millis(300));

    let mut slowest = Duration::ZERO;
    for _ in 0..5 {
        for command in ["status", "metrics"] {
            let (ok, out, took) = agent.cli(&[command]);
            assert!(
                ok,
                "monitor {command} failed under slow clients:\n{}",
                agent.log()
            );
            assert!(
                took < Duration::from_secs(2),
                "monitor {command} took {took:?} under slow clients"
            );
            let expected = if command == "status" {
                "LAST SYNCHRONIZE"
            } else {
                "monitor_synchronizes_total"
            };
            assert!(out.contains(expected), "{out}");
            slowest = slowest.max(took);
        }
    }
    println!(
        "{} half requests and {} non-reading clients open: slowest monitor status/metrics {slowest:?}",
        stalled.len(),
        silent.len()
    );

    // A client that never reads is dropped after the write timeout: reading once it has
    // passed finds the responses the kernel had buffered, then the end of the connection,
    // far short of the 400 it asked for. The timeout runs from when the agent's writes to
    // that client stopped, which under emulation can be many seconds after it connected
    // (the agent renders every client's responses until its socket is full): each client
    // is read only once the bytes waiting for it have not grown for the timeout and more.
    let stalled_for = WRITE_TIMEOUT + Duration::from_secs(2);
    let mut last_growth: Vec<(usize, Instant)> =
        silent.iter().map(|_| (0, readers_started)).collect();
    let settled = poll_every(Duration::from_secs(90), Duration::from_millis(200), || {
        for (stream, (bytes, since)) in silent.iter().zip(&mut last_growth) {
            let now = waiting_bytes(stream);
            if now != *bytes {
                *bytes = now;
                *since = Instant::now();
            }
        }
        last_growth
            .iter()
            .all(|(bytes, since)| *bytes > 0 && since.elapsed() >= stalled_for)
    });
    assert!(
        settled,
        "the agent kept writing to non-reading clients for 90 s: {last_growth:?}"
    );
    for stream in &mut silent {
        stream
            .set_read_timeout(Some(WRITE_TIMEOUT * 3))
            .expect("read timeout");
        let mut got = Vec::new();
        match stream.read_to_end(&mut got) {
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
            Err(e) => panic!("the agent kept a non-reading client: {e}"),
        }
        let responses = String::from_utf8_lossy(&got)
            .matches("HTTP/1.1 200")
            .count();
        assert!(
            (1..400).contains(&responses),
            "{responses} of 400 responses were written"
        );
        println!(
            "a client that stopped reading: {responses} of 400 responses ({} bytes) reached it before it was dropped",
            got.len()
        );
    }
    drop(stalled);

    // The agent is still whole.
    let (ok, _, took) = agent.cli(&["status"]);
    assert!(ok && took < Duration::from_secs(2), "{}", agent.log());
}

#[test]
fn status_shows_the_age_of_the_last_synchronize() {
    if !require(
        "status_shows_the_age_of_the_last_synchronize",
        &[Feature::Root],
    ) {
        return;
    }
    let agent = Agent::start("api-age", &[]);
    let (ok, text, _) = agent.cli(&["status"]);
    assert!(ok, "{}", agent.log());
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with('#'))
        .unwrap_or_else(|| panic!("no synchronize line in\n{text}"));
    assert!(line.contains(" ago), woken by "), "{line}");

    let (ok, json, _) = agent.cli(&["status", "--json"]);
    assert!(ok);
    let value: serde_json::Value = serde_json::from_str(&json).expect("status --json");
    let age = value["lastSyncAgeSeconds"]
        .as_f64()
        .unwrap_or_else(|| panic!("no lastSyncAgeSeconds in {value}"));
    // The housekeeping timer synchronizes every 10 s on an idle node.
    assert!((0.0..=15.0).contains(&age), "age {age} s");
    assert!(value["lastSync"]["sequence"].as_u64().is_some(), "{value}");

    // Between two synchronizes the age grows with the wall clock.
    let sequence = value["lastSync"]["sequence"].clone();
    std::thread::sleep(Duration::from_millis(1500));
    let (_, json, _) = agent.cli(&["status", "--json"]);
    let later: serde_json::Value = serde_json::from_str(&json).expect("status --json");
    let later_age = later["lastSyncAgeSeconds"].as_f64().expect("age");
    if later["lastSync"]["sequence"] == sequence {
        assert!(later_age >= age + 1.4, "{age} s then {later_age} s");
    } else {
        assert!(later_age < 1.6, "a newer synchronize, {later_age} s old");
    }
}

#[test]
fn psi_contention_conditions_follow_the_real_pressure_files_with_their_gate() {
    if !require(
        "psi_contention_conditions_follow_the_real_pressure_files",
        &[Feature::Root],
    ) {
        return;
    }
    let files = [
        (
            "SystemMemoryContentionPressure",
            PathBuf::from("/proc/pressure/memory"),
        ),
        (
            "SystemDiskContentionPressure",
            PathBuf::from("/proc/pressure/io"),
        ),
    ];
    if !files.iter().all(|(_, f)| f.exists()) {
        monitor_tests::skip(
            "psi_contention_conditions",
            "this kernel has no /proc/pressure files (CONFIG_PSI off or psi=0)",
        );
        return;
    }
    let agent = Agent::start_with(
        "api-psi",
        &[],
        "featureGates: {PSINodeCondition: true}\nkubepodsDiskContentionThreshold: 0\n",
    );
    let (ok, json, _) = agent.cli(&["status", "--json"]);
    assert!(ok, "{}", agent.log());
    let value: serde_json::Value = serde_json::from_str(&json).expect("status --json");
    let reported = value["contentionConditions"]
        .as_array()
        .unwrap_or_else(|| panic!("no contentionConditions in {value}"));
    let types: Vec<&str> = reported.iter().filter_map(|c| c["type"].as_str()).collect();
    // The node's two files always; the pods cgroup's memory.pressure wherever cgroup2 is
    // mounted (v2, or beside v1 on a hybrid host); its io.pressure condition is switched
    // off by its threshold of 0.
    let mut expected: Vec<&str> = files.iter().map(|(name, _)| *name).collect();
    let cgroup2 = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .any(|l| l.contains(" - cgroup2 "));
    if cgroup2 {
        expected.push("KubepodsMemoryContentionPressure");
    }
    assert_eq!(types, expected, "{value}");
    for c in reported {
        let avg60 = c["averages"]["avg60"].as_f64().expect("avg60");
        assert!((0.0..=100.0).contains(&avg60), "{c}");
        assert_eq!(c["threshold"].as_f64(), Some(0.9), "the kubelet's default");
    }
    let (_, metrics, _) = agent.cli(&["metrics"]);
    for name in &expected {
        let line = format!("monitor_node_condition{{condition=\"{name}\"}}");
        assert!(metrics.contains(&line), "{line} missing:\n{metrics}");
    }
}

#[test]
fn oversized_manifests_are_refused_by_name_and_event_messages_are_bounded() {
    if !require(
        "oversized_manifests_are_refused_by_name_and_event_messages_are_bounded",
        &[Feature::Root],
    ) {
        return;
    }
    let pod = |name: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  containers:\n  - {{name: main, image: none, command: [/bin/sleep, '1000']}}\n"
        )
    };
    // 2 MiB: a valid pod padded with a comment.
    let mut huge = pod("huge").into_bytes();
    huge.extend(b"#");
    huge.extend(std::iter::repeat_n(b'x', 2 << 20));
    // A container name of 4000 characters: its error quotes it, past an event's bound.
    let long_name = "c".repeat(4000);
    let bad = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: longname}}\nspec:\n  containers:\n  - {{name: {long_name}, image: none, command: [/bin/true]}}\n"
    );
    let agent = Agent::start(
        "api-input",
        &[
            ("web.yaml", pod("web").into_bytes()),
            ("huge.yaml", huge),
            ("longname.yaml", bad.into_bytes()),
        ],
    );
    let events = || -> Vec<serde_json::Value> {
        let (_, json, _) = agent.cli(&["events", "--json"]);
        serde_json::from_str::<serde_json::Value>(&json)
            .ok()
            .and_then(|v| v["events"].as_array().cloned())
            .unwrap_or_default()
    };
    let mentions = |events: &[serde_json::Value], file: &str| {
        events
            .iter()
            .find(|e| e["message"].as_str().is_some_and(|m| m.contains(file)))
            .cloned()
    };
    wait_until(
        "events for both bad manifests",
        Duration::from_secs(20),
        || {
            let events = events();
            mentions(&events, "huge.yaml").is_some() && mentions(&events, "longname.yaml").is_some()
        },
    );
    let events = events();
    let huge = mentions(&events, "huge.yaml").expect("huge.yaml event");
    let message = huge["message"].as_str().expect("message");
    assert!(
        message.contains("larger than the 1048576 bytes a manifest may have"),
        "{huge}"
    );
    let long = mentions(&events, "longname.yaml").expect("longname.yaml event");
    let message = long["message"].as_str().expect("message");
    assert!(
        message.len() <= 1024 && message.ends_with('…'),
        "{} bytes: {message}",
        message.len()
    );
    for event in &events {
        let len = event["message"].as_str().map_or(0, str::len);
        assert!(len <= 1024, "an event of {len} bytes: {event}");
    }
    // The good manifest beside them runs.
    let web_running = poll_every(Duration::from_secs(20), Duration::from_millis(100), || {
        agent
            .cli(&["pods"])
            .1
            .lines()
            .any(|l| l.contains("default/web") && l.contains("Running"))
    });
    assert!(
        web_running,
        "default/web never ran: monitor pods says\n{}\nevents: {events:?}",
        agent.cli(&["pods"]).1
    );
    assert!(
        !agent.cli(&["pods"]).1.contains("default/huge"),
        "the oversized pod was started"
    );
}

/// The machine's hugepage pool, put back as it was when dropped.
struct HugepagePool {
    before: String,
}

const NR_HUGEPAGES: &str = "/proc/sys/vm/nr_hugepages";

impl HugepagePool {
    fn reserve(pages: u64) -> HugepagePool {
        let before = std::fs::read_to_string(NR_HUGEPAGES).expect("nr_hugepages");
        std::fs::write(NR_HUGEPAGES, pages.to_string()).expect("reserve hugepages");
        HugepagePool { before }
    }
}

impl Drop for HugepagePool {
    fn drop(&mut self) {
        let _ = std::fs::write(NR_HUGEPAGES, self.before.trim());
    }
}

/// A meminfo value in bytes.
fn meminfo(key: &str) -> u64 {
    let text = std::fs::read_to_string("/proc/meminfo").expect("meminfo");
    text.lines()
        .find_map(|l| {
            let rest = l.strip_prefix(key)?.strip_prefix(':')?;
            let mut words = rest.split_whitespace();
            let value: u64 = words.next()?.parse().ok()?;
            Some(if words.next() == Some("kB") {
                value * 1024
            } else {
                value
            })
        })
        .unwrap_or_else(|| panic!("no {key} in /proc/meminfo"))
}

/// With a real hugepage pool, the agent reads it and admits against an allocatable without
/// it (the kubelet's node status): a pod that fits in memory capacity less the hard
/// threshold, but not once the pool is left out, is refused.
#[test]
fn a_hugepage_pool_is_left_out_of_allocatable_memory() {
    if !require(
        "a_hugepage_pool_is_left_out_of_allocatable_memory",
        &[Feature::Root],
    ) {
        return;
    }
    if std::env::var_os("MONITOR_TEST_VM").is_none() {
        monitor_tests::skip(
            "a_hugepage_pool",
            "reserving hugepages changes the whole machine's memory; it runs in the test VM only",
        );
        return;
    }
    let _pool = HugepagePool::reserve(32);
    let hugepages = meminfo("Hugetlb");
    assert!(
        hugepages >= 32 * 2 * 1024 * 1024,
        "the pool holds {hugepages} bytes"
    );
    // evictionHard memory.available<100Mi (the test agent's): allocatable = MemTotal −
    // 100Mi − the pool. The pod asks for half a pool more than that.
    let allocatable = meminfo("MemTotal") - (100 << 20) - hugepages;
    let request = allocatable + hugepages / 2;
    let pod = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: big}}\nspec:\n  containers:\n  - {{name: main, image: none, command: [/bin/sleep, '1000'], resources: {{requests: {{memory: '{request}'}}}}}}\n"
    );
    let agent = Agent::start("api-hugepages", &[("big.yaml", pod.into_bytes())]);
    let (ok, json, _) = agent.cli(&["status", "--json"]);
    assert!(ok, "{}", agent.log());
    let status: serde_json::Value = serde_json::from_str(&json).expect("status --json");
    let memory = &status["observation"]["memory"];
    assert_eq!(
        memory["hugepages_bytes"].as_u64(),
        Some(hugepages),
        "{memory}"
    );
    if Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
        // cgroup v2: the meminfo-based working set already holds the pool.
        assert_eq!(
            memory["hugepages_left_out_bytes"].as_u64(),
            Some(0),
            "{memory}"
        );
    }
    let refused = poll_every(Duration::from_secs(20), Duration::from_millis(100), || {
        let (_, pods, _) = agent.cli(&["pods", "--json"]);
        serde_json::from_str::<serde_json::Value>(&pods)
            .ok()
            .and_then(|v| {
                v["pods"]
                    .as_array()?
                    .iter()
                    .find(|p| p["key"] == "default/big")
                    .map(|p| p["reason"] == "OutOfmemory")
            })
            .unwrap_or(false)
    });
    assert!(
        refused,
        "a pod asking {request} bytes of an allocatable of {allocatable} was not refused: {}\n{}",
        agent.cli(&["pods", "--json"]).1,
        agent.log()
    );
}

/// `monitor status --check` against `socket`: the exit code and stdout.
fn status_check(socket: &Path) -> (Option<i32>, String) {
    let out = Command::new(helper_binary("monitor"))
        .args(["status", "--check", "--socket"])
        .arg(socket)
        .output()
        .expect("run monitor status --check");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn status_check_reports_health_and_a_hangup_stops_the_agent_cleanly() {
    if !require(
        "status_check_reports_health_and_a_hangup_stops_the_agent_cleanly",
        &[Feature::Root],
    ) {
        return;
    }
    let mut agent = Agent::start("api-health", &[]);
    // Started and synchronized: healthy, exit 0.
    let (code, out) = status_check(&agent.socket);
    assert_eq!(code, Some(0), "{out}\n{}", agent.log());
    assert_eq!(out.trim(), "healthy");

    // SIGHUP is a clean stop: exit 0, the shutdown logged, the socket gone.
    let mut child = agent.child.take().expect("agent process");
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("pid"));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGHUP).expect("SIGHUP");
    let exited = poll_every(Duration::from_secs(15), Duration::from_millis(20), || {
        child.try_wait().ok().flatten().is_some()
    });
    if !exited {
        let _ = child.kill();
    }
    let status = child.wait().expect("wait");
    assert!(status.success(), "{status}\n{}", agent.log());
    assert!(agent.log().contains("hangup, stopping"), "{}", agent.log());
    assert!(!agent.socket.exists(), "the socket outlived the agent");

    // Nobody to ask: exit 2, not a false "unhealthy".
    let (code, _) = status_check(&agent.socket);
    assert_eq!(code, Some(2));
}

#[test]
fn the_service_manager_hears_ready_after_the_first_synchronize_then_the_watchdog() {
    if !require(
        "the_service_manager_hears_ready_after_the_first_synchronize_then_the_watchdog",
        &[Feature::Root],
    ) {
        return;
    }
    // The service manager's end of the notify protocol: a datagram socket.
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("notify.sock");
    let manager = std::os::unix::net::UnixDatagram::bind(&path).expect("bind");
    manager
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let path = path.display().to_string();
    // A 200 ms watchdog: fed every 100 ms while synchronizes keep finishing.
    let agent = Agent::start_with_env(
        "api-notify",
        &[],
        "",
        &[("NOTIFY_SOCKET", &path), ("WATCHDOG_USEC", "200000")],
    );
    let mut heard: Vec<String> = Vec::new();
    let mut buf = [0u8; 4096];
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(10)
        && heard.iter().filter(|m| m.contains("WATCHDOG=1")).count() < 3
    {
        let n = manager.recv(&mut buf).expect("a message from the agent");
        heard.push(String::from_utf8_lossy(&buf[..n]).into_owned());
    }
    assert!(
        heard.first().is_some_and(|m| m.contains("READY=1")),
        "{heard:?}\n{}",
        agent.log()
    );
    assert!(
        heard.iter().filter(|m| m.contains("WATCHDOG=1")).count() >= 3,
        "{heard:?}"
    );
    // A clean stop says so.
    drop(agent);
    let mut stopping = false;
    while let Ok(n) = manager.recv(&mut buf) {
        if String::from_utf8_lossy(&buf[..n]).contains("STOPPING=1") {
            stopping = true;
            break;
        }
    }
    assert!(stopping, "no STOPPING=1 after {heard:?}");
}

#[test]
fn an_idle_agent_logs_no_line_per_housekeeping_tick() {
    if !require(
        "an_idle_agent_logs_no_line_per_housekeeping_tick",
        &[Feature::Root],
    ) {
        return;
    }
    let agent = Agent::start_with("api-quiet", &[], "housekeepingInterval: 500ms\n");
    let first = agent.cli(&["status", "--json"]).1;
    let sequence = |json: &str| {
        serde_json::from_str::<serde_json::Value>(json).expect("status --json")["lastSync"]
            ["sequence"]
            .as_u64()
            .expect("sequence")
    };
    std::thread::sleep(Duration::from_secs(3));
    let later = agent.cli(&["status", "--json"]).1;
    // The timer kept synchronizing...
    assert!(sequence(&later) >= sequence(&first) + 3, "{first}\n{later}");
    // ...without a log line for each tick.
    let log = agent.log();
    let ticks = log
        .lines()
        .filter(|l| l.contains(" wake") && l.contains("source=timer"))
        .count();
    assert_eq!(ticks, 0, "{log}");
}

/// A free TCP port on the loopback (bound and let go: another process could take it in
/// between, which this host's tests do not do).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a loopback port")
        .port()
}

/// A plain HTTP/1.0 GET on the loopback: (status line, body).
fn http_get(port: u16, target: &str, accept: &str) -> std::io::Result<(String, String)> {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        stream,
        "GET {target} HTTP/1.0\r\nHost: 127.0.0.1\r\nAccept: {accept}\r\n\r\n"
    )?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply)?;
    let (head, body) = reply.split_once("\r\n\r\n").unwrap_or((&reply, ""));
    Ok((head.to_string(), body.to_string()))
}

/// A real Prometheus server scrapes the agent's TCP `/metrics`: it asks for OpenMetrics
/// first, gets it, and ingests every family under OpenMetrics' names (a counter family
/// without `_total`, the build info as an `info`); a client that asks for nothing in
/// particular gets the text format 0.0.4, which promtool's linter reads without a
/// complaint.
#[test]
fn a_real_prometheus_scrapes_openmetrics_and_a_plain_client_gets_the_text_format() {
    let test = "a_real_prometheus_scrapes_openmetrics_and_a_plain_client_gets_the_text_format";
    if !require(test, &[Feature::Root, Feature::Prometheus]) {
        return;
    }
    let metrics_port = free_port();
    let agent = Agent::start_config(
        "api-prometheus",
        &[],
        "",
        &format!("  metricsAddress: 127.0.0.1:{metrics_port}\n"),
        &[],
    );

    // A plain client: the text format, clean under promtool's linter.
    let (head, text) = http_get(metrics_port, "/metrics", "*/*").expect("GET /metrics");
    assert!(head.contains("text/plain; version=0.0.4"), "{head}");
    // The answer depends on Accept, and says so to any cache between.
    assert!(
        head.lines()
            .any(|line| line.eq_ignore_ascii_case("vary: accept")),
        "{head}"
    );
    assert!(!text.contains("# EOF"), "{text}");
    let mut lint = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start promtool");
    lint.stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("feed promtool");
    let lint = lint.wait_with_output().expect("promtool");
    assert!(
        lint.status.success(),
        "promtool check metrics: {}{}\n{text}",
        String::from_utf8_lossy(&lint.stdout),
        String::from_utf8_lossy(&lint.stderr)
    );

    // A real Prometheus, scraping every 500 ms with its own Accept header.
    let dir = tempfile::tempdir().expect("tempdir");
    let web_port = free_port();
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global: {{scrape_interval: 500ms, scrape_timeout: 400ms}}\n\
             scrape_configs:\n  - job_name: monitor\n    static_configs:\n      - targets: ['127.0.0.1:{metrics_port}']\n"
        ),
    )
    .expect("prometheus.yml");
    let log = std::fs::File::create(dir.path().join("prometheus.log")).expect("log");
    let mut server = Command::new("prometheus")
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.path().join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{web_port}"))
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start prometheus");
    struct Server<'a>(&'a mut std::process::Child);
    impl Drop for Server<'_> {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _server = Server(&mut server);
    let api = |query: &str| -> serde_json::Value {
        http_get(web_port, query, "application/json")
            .ok()
            .and_then(|(_, body)| serde_json::from_str(&body).ok())
            .unwrap_or(serde_json::Value::Null)
    };
    // Metadata a scrape stored, by the family name the format gave it.
    let typed = |metric: &str| -> Option<String> {
        let found = api(&format!(
            "/api/v1/targets/metadata?match_target=%7Bjob%3D%22monitor%22%7D&metric={metric}"
        ));
        found["data"][0]["type"].as_str().map(str::to_string)
    };
    let scraped = poll_every(Duration::from_secs(60), Duration::from_millis(250), || {
        let targets = api("/api/v1/targets");
        let target = &targets["data"]["activeTargets"][0];
        target["health"] == "up" && typed("monitor_build").is_some()
    });
    let targets = api("/api/v1/targets");
    assert!(
        scraped,
        "no clean OpenMetrics scrape: {targets}\n{}\n{}",
        std::fs::read_to_string(dir.path().join("prometheus.log")).unwrap_or_default(),
        agent.log()
    );
    assert_eq!(targets["data"]["activeTargets"][0]["lastError"], "");
    // OpenMetrics' family names, each with its type: the text format would have stored
    // monitor_build_info (a gauge) and monitor_synchronizes_total.
    assert_eq!(typed("monitor_build").as_deref(), Some("info"));
    assert_eq!(typed("monitor_synchronizes").as_deref(), Some("counter"));
    assert_eq!(
        typed("monitor_sync_duration_seconds").as_deref(),
        Some("histogram")
    );
    assert_eq!(typed("monitor_synchronizes_total"), None);
    // And the samples are there under the names the rules and the dashboard query.
    let info = api("/api/v1/query?query=monitor_build_info");
    let revision = &info["data"]["result"][0]["metric"]["revision"];
    assert!(revision.as_str().is_some_and(|r| !r.is_empty()), "{info}");
    let synchronizes = api("/api/v1/query?query=monitor_synchronizes_total");
    assert_eq!(
        synchronizes["data"]["result"].as_array().map(Vec::len),
        Some(1),
        "{synchronizes}"
    );
}
