//! The agent beside a kubelet (`runPods: false` with `monitor.podList`): pods it did not
//! start, in cgroups laid out as the kubelet's cgroupfs driver lays them out, listed in a
//! PodList file. In shadow mode it reports the kill it would make and touches nothing;
//! in act mode it kills the hog's cgroup and nothing else. Run as root.
use std::os::unix::process::ExitStatusExt;
use std::process::Command;
use std::time::Duration;

use monitor_bench::laid::Driver;
use monitor_tests::kubelet_laid::KubeletNode;
use monitor_tests::node::alive;
use monitor_tests::{Feature, agent_metrics, hog, require, wait_until};

/// Eviction keys: a hard threshold 150 MiB under the pods cgroup's 512 MiB.
const EVICTION: &str =
    "evictionHard: {allocatableMemory.available: 150Mi}\nhousekeepingInterval: 1s";

/// The node both tests start from: a Guaranteed sleeper, a BestEffort hog waiting for
/// `go`, a cgroup no listed pod claims (with a process in it), and a listed pod without
/// a cgroup. Returns the node, the hog's pid and the bystanders' pids.
fn laid_node(driver: Driver) -> (KubeletNode, u32, Vec<u32>, std::path::PathBuf) {
    let mut node = KubeletNode::with_driver(512, driver);
    let go = node.dir.path().join("go");
    let db = node.pod("db", "Guaranteed", true, true);
    let batch = node.pod("batch", "BestEffort", true, true);
    let stray = node.pod("stray", "BestEffort", false, true);
    node.pod("ghost", "Burstable", true, false);
    let sleep = || {
        let mut command = Command::new("sleep");
        command.arg("600");
        command
    };
    let db_pid = node.run_in(db, sleep());
    let stray_pid = node.run_in(stray, sleep());
    let hog_pid = node.run_in(
        batch,
        hog(&[
            "after",
            &go.display().to_string(),
            "anon",
            "700",
            "8",
            "20",
            "60",
        ]),
    );
    node.write_pod_list();
    (node, hog_pid, vec![db_pid, stray_pid], go)
}

/// The hog's exit, once it has one.
fn hog_status(node: &mut KubeletNode, pid: u32) -> Option<std::process::ExitStatus> {
    node.processes
        .iter_mut()
        .find(|p| p.id() == pid)
        .and_then(|p| p.try_wait().ok().flatten())
}

/// The listing's reports: the listed pod without a cgroup, the cgroup without a pod.
fn assert_reports(node: &KubeletNode, log: &str) {
    assert!(
        log.lines()
            .any(|l| l.contains("PodCgroupMissing") && l.contains("shop/ghost")),
        "the listed pod without a cgroup is reported\n{log}"
    );
    let stray = &node.pods[2].uid;
    assert!(
        log.lines()
            .any(|l| l.contains("UnlistedPodCgroup") && l.contains(stray.as_str())),
        "the cgroup no listed pod claims is reported\n{log}"
    );
}

#[test]
fn a_shadow_agent_reports_the_kill_it_would_make_and_touches_nothing() {
    if !require(
        "a_shadow_agent_reports_the_kill_it_would_make",
        &[Feature::Root],
    ) {
        return;
    }
    let (mut node, hog_pid, bystanders, go) = laid_node(Driver::Cgroupfs);
    let before = node.settings();
    let agent = node.race(EVICTION, "", &["--shadow"], &go);
    // Nothing stops the hog: it runs on to the pods cgroup's limit, where the kernel's
    // OOM killer ends it.
    wait_until(
        "the kernel OOM-kills the hog",
        Duration::from_secs(60),
        || hog_status(&mut node, hog_pid).is_some(),
    );
    wait_until(
        "the would-be kill is booked",
        Duration::from_secs(10),
        || node.log().contains("WouldKill") || node.log().contains("WouldEvict"),
    );
    let log = node.log();
    assert!(node.oom_kills() >= 1, "the hog ran to its limit\n{log}");
    assert!(
        log.lines()
            .any(|l| (l.contains("WouldKill") || l.contains("WouldEvict"))
                && l.contains("shop/batch")),
        "the would-be action names the hog's pod\n{log}"
    );
    assert!(
        log.lines()
            .any(|l| l.contains("hot path (shadow): would kill")
                && l.contains("pod=shop/batch")
                && l.contains("decision_us=")),
        "the hot path decided the kill at the crossing, with its time\n{log}"
    );
    assert!(
        !log.contains("cgroup.kill written") && !log.contains("Evicted"),
        "a shadow agent kills nobody\n{log}"
    );
    assert_reports(&node, &log);
    for pid in &bystanders {
        assert!(alive(*pid), "bystander {pid} untouched");
    }
    assert_eq!(node.settings(), before, "no cgroup setting written");
    let socket = node.dir.path().join("monitor.sock");
    let metrics = agent_metrics(&socket);
    let shadowed: u64 = metrics
        .lines()
        .filter(|l| l.starts_with("monitor_shadow_actions_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    assert!(shadowed >= 1, "counted in the metric\n{metrics}");
    stop(agent);
}

#[test]
fn an_acting_agent_kills_the_hog_cgroup_of_a_kubelet_pod_and_nothing_else() {
    if !require(
        "an_acting_agent_kills_the_hog_cgroup_of_a_kubelet_pod",
        &[Feature::Root],
    ) {
        return;
    }
    // A pre-kill hook that leaves a trace: the hot path never runs it.
    let trace = std::env::temp_dir().join(format!("monitor-hook-trace-{}", std::process::id()));
    let _ = std::fs::remove_file(&trace);
    let hook = format!(
        "  preKillHook:\n    command: [/bin/sh, -c, \"cat > {}\"]\n",
        trace.display()
    );
    let (mut node, agent, before, log) = killed_by_the_hot_path(Driver::Cgroupfs, &hook);
    assert_eq!(node.settings(), before, "no cgroup setting written");
    assert!(!trace.exists(), "no hook runs on the hot path\n{log}");
    let _ = std::fs::remove_file(&trace);
    let decisions = cli(&node, &["decisions", "--pod", "shop/batch"]);
    assert!(
        decisions.contains("hotKill") && decisions.contains("crossing to kill"),
        "{decisions}"
    );
    stop(agent);

    // The pod is gone from the list (its controller deleted it); after a restart the
    // agent still says what it decided about it, and why.
    node.pods[1].listed = false;
    node.write_pod_list();
    let agent = node.start_agent(&node.dir.path().join("config.yaml"), &[], "info");
    wait_until(
        "the agent reads the pod list again",
        Duration::from_secs(20),
        || node.log().contains("pod list read"),
    );
    let mut explained = String::new();
    wait_until("explain answers", Duration::from_secs(20), || {
        explained = cli(&node, &["explain", "shop/batch"]);
        explained.contains("not running here")
    });
    assert!(
        explained.contains("hotKill") && explained.contains("allocatableMemory.available"),
        "{explained}"
    );
    let json = cli(&node, &["decisions", "--json", "--since", "1h"]);
    let v: serde_json::Value = serde_json::from_str(&json).expect(&json);
    assert!(
        v["decisions"].as_array().is_some_and(|d| d
            .iter()
            .any(|d| d["pod"] == "shop/batch" && d["action"] == "hotKill")),
        "{json}"
    );
    stop(agent);
}

/// `monitor ARGS --socket <the node's>`: its stdout (and stderr, for the failure).
fn cli(node: &KubeletNode, args: &[&str]) -> String {
    let out = Command::new(monitor_tests::helper_binary("monitor"))
        .args(args)
        .arg("--socket")
        .arg(node.dir.path().join("monitor.sock"))
        .output()
        .expect("running monitor");
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// SIGTERM, then up to 10 s for the agent to stop (SIGKILL on drop after that).
fn stop(mut agent: monitor_tests::KillOnDrop) {
    let pid = nix::unistd::Pid::from_raw(agent.id() as i32);
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
    let _ = monitor_tests::node::poll(Duration::from_secs(10), || {
        agent.try_wait().ok().flatten().is_some()
    });
}

#[test]
fn a_hung_pre_kill_hook_delays_a_soft_eviction_by_at_most_its_timeout() {
    if !require(
        "a_hung_pre_kill_hook_delays_a_soft_eviction",
        &[Feature::Root],
    ) {
        return;
    }
    let mut node = KubeletNode::new(512);
    let batch = node.pod("batch", "BestEffort", true, true);
    let term = node.dir.path().join("term");
    let mut grow = hog(&["anon", "260", "8", "20", "600"]);
    grow.env("HOG_TERM_FILE", &term);
    let hog_pid = node.run_in(batch, grow);
    node.write_pod_list();
    let document = node.dir.path().join("document.json");
    // The hook reads the decision, then hangs past its 1 s timeout.
    let hook = format!(
        "  preKillHook:\n    command: [/bin/sh, -c, \"cat > {}; sleep 30\"]\n    timeout: 1s\n",
        document.display()
    );
    let config = node.config(
        "evictionSoft: {allocatableMemory.available: 300Mi}\n\
         evictionSoftGracePeriod: {allocatableMemory.available: 1s}\n\
         evictionMaxPodGracePeriod: 10\n\
         evictionHard: {allocatableMemory.available: 20Mi}\nhousekeepingInterval: 1s",
        &hook,
    );
    let agent = node.start_agent(&config, &[], "info");
    // The hook's document appears when the hook starts.
    let mut started_ns = 0;
    wait_until("the hook starts", Duration::from_secs(60), || {
        let seen = std::fs::metadata(&document).is_ok_and(|m| m.len() > 0);
        if seen {
            started_ns = monitor_bench::util::monotonic_ns();
        }
        seen
    });
    wait_until("the pod gets SIGTERM", Duration::from_secs(20), || {
        std::fs::read_to_string(&term).is_ok_and(|t| t.starts_with("term "))
    });
    let term_ns: u64 = std::fs::read_to_string(&term).unwrap()[5..]
        .trim()
        .parse()
        .unwrap();
    let waited_ms = term_ns.saturating_sub(started_ns) / 1_000_000;
    let log = node.log();
    // The hook's timeout, then the SIGTERM at once (the test sees the document up to a
    // poll late, hence the lower bound's slack).
    assert!(
        (800..=1600).contains(&waited_ms),
        "SIGTERM {waited_ms} ms after the hook started\n{log}"
    );
    let read: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&document).unwrap()).unwrap();
    assert_eq!(read["pod"], "shop/batch", "{read}");
    assert_eq!(read["rank"], 1, "{read}");
    assert_eq!(read["signal"], "allocatableMemory.available", "{read}");
    assert_eq!(
        read["threshold"], "allocatableMemory.available<300Mi",
        "{read}"
    );
    assert_eq!(read["gracePeriodSeconds"], 10, "{read}");
    assert!(
        read["observed"].as_i64().is_some_and(|o| o < 300 << 20),
        "{read}"
    );
    assert!(
        log.lines()
            .any(|l| l.contains("PreKillHookFailed") && l.contains("killed")),
        "the hung hook is reported\n{log}"
    );
    wait_until("the pod's process is gone", Duration::from_secs(15), || {
        node.processes
            .iter_mut()
            .find(|p| p.id() == hog_pid)
            .is_some_and(|p| p.try_wait().ok().flatten().is_some())
    });
    let metrics = agent_metrics(&node.dir.path().join("monitor.sock"));
    assert!(
        metrics.contains("monitor_pre_kill_hooks_total{result=\"timed_out\"} 1"),
        "{metrics}"
    );
    stop(agent);
}

#[test]
fn pods_named_as_the_systemd_driver_names_them_are_found_and_protected() {
    if !require(
        "pods_named_as_the_systemd_driver_names_them",
        &[Feature::Root],
    ) {
        return;
    }
    // The same race as in act mode, the tree in the systemd driver's naming
    // (`…kubepods.slice/…kubepods-besteffort.slice/…-pod<uid with '_'>.slice`).
    let (node, agent, before, _) = killed_by_the_hot_path(Driver::Systemd, "");
    assert!(
        node.pods[1].relative.ends_with(&format!(
            "-kubepods-besteffort-pod{}.slice",
            node.pods[1].uid.replace('-', "_")
        )),
        "{}",
        node.pods[1].relative
    );
    assert_eq!(node.settings(), before, "no cgroup setting written");
    stop(agent);
}

/// The act-mode race on a tree in `driver`'s naming, with `monitor_keys`: the hog is
/// killed by the hot path through its cgroup before the kernel's OOM killer, the reports
/// are given, the bystanders run on. Returns the node, the agent, the settings before the
/// race and the log.
fn killed_by_the_hot_path(
    driver: Driver,
    monitor_keys: &str,
) -> (
    KubeletNode,
    monitor_tests::KillOnDrop,
    Vec<(std::path::PathBuf, String)>,
    String,
) {
    let (mut node, hog_pid, bystanders, go) = laid_node(driver);
    let before = node.settings();
    let agent = node.race(EVICTION, monitor_keys, &[], &go);
    wait_until("the hog is killed", Duration::from_secs(60), || {
        hog_status(&mut node, hog_pid).is_some()
    });
    let status = hog_status(&mut node, hog_pid).unwrap();
    let log = node.log();
    assert_eq!(status.signal(), Some(9), "{status:?}\n{log}");
    assert_eq!(
        node.oom_kills(),
        0,
        "the agent killed before the kernel\n{log}"
    );
    assert!(
        log.lines()
            .any(|l| l.contains("hot path: cgroup.kill written") && l.contains("pod=shop/batch")),
        "the hot path killed the hog's pod through its cgroup\n{log}"
    );
    assert_reports(&node, &log);
    std::thread::sleep(Duration::from_secs(2));
    for pid in &bystanders {
        assert!(alive(*pid), "bystander {pid} untouched\n{}", node.log());
    }
    (node, agent, before, log)
}
