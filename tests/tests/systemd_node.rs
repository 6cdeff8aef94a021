//! The Debian package on a real systemd node: a Debian 12 root filesystem built with
//! debootstrap, systemd as PID 1, cgroup v2 (`cargo xtask vm` boots it after the kernel
//! matrix and runs only this test there). Everything goes through systemd as an operator
//! would drive it: `dpkg -i` enables and starts the unit, the agent runs with the unit's
//! real sandboxing, a hog is evicted before the kernel OOM killer, `systemctl restart`
//! keeps the pods (the new agent adopts them), `systemctl stop` leaves them running, and
//! `dpkg -P` leaves nothing behind.
//!
//! The cgroup tree follows systemd's single-writer rule: the agent runs in
//! `system.slice/monitor.service`, and the pods in the scope `monitor-pods.scope` that
//! systemd delegates to the agent (the packaged `monitor.systemdScope`); nothing is
//! created at the hierarchy's root or in systemd's slices. The pods are outside the
//! service's cgroup, which is why stopping the service (systemd kills every process of
//! that cgroup) leaves them.
use std::path::Path;
use std::process::Command;
use std::str::FromStr;
use std::time::Duration;

use monitor_tests::installed::{
    CGROUP_ROOT, CONFIG, PACKAGE, PODS, STATE, UNIT, assert_notifiers_run_fifo, bound_the_node,
    cgroups, dpkg, field, filesystem, may_install, metrics, run, start_web_and_batch,
    wait_for_record,
};
use monitor_tests::wait_until;

/// Set by the systemd node's test runner; nowhere else does this test install anything.
const NODE_VARIABLE: &str = "MONITOR_TEST_SYSTEMD_NODE";
/// Where the node carries the test programs (beside the package).
const HOG: &str = "/usr/local/bin/hog";
/// The packaged `monitor.systemdScope`, and its cgroup.
const SCOPE: &str = "monitor-pods.scope";
const SCOPE_TREE: &str = "system.slice/monitor-pods.scope";
/// Trees systemd and the journal write to on their own while the test runs.
const SYSTEMD_OWN: &[&str] = &[
    "/run",
    "/var/log/journal",
    "/var/lib/systemd",
    "/var/cache",
    "/var/tmp",
    "/root",
];

#[test]
fn systemd_node_installs_evicts_restarts_stops_and_purges() {
    let name = "systemd_node_installs_evicts_restarts_stops_and_purges";
    if !may_install(
        name,
        NODE_VARIABLE,
        "on the systemd node VM (cargo xtask vm)",
    ) {
        return;
    }
    let init = std::fs::read_to_string("/proc/1/comm").unwrap();
    assert_eq!(init.trim(), "systemd", "PID 1 is systemd");
    let files_before = filesystem(SYSTEMD_OWN);

    // Install: the package enables the unit and starts it (Type=notify: started means
    // the agent said READY=1).
    println!("dpkg -i {PACKAGE}:\n{}", dpkg(&["-i", PACKAGE]));
    assert_eq!(systemctl_value(&["is-enabled", "monitor"]), "enabled");
    assert_eq!(systemctl_value(&["is-active", "monitor"]), "active");

    // Bound the node and restart, as the README says after editing the configuration.
    bound_the_node();
    systemctl(&["restart", "monitor"]);
    let pid = main_pid();
    let journal = || journal("monitor");

    // The unit's sandboxing as the kernel applies it to the agent.
    let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    assert_eq!(cgroup.trim(), "0::/system.slice/monitor.service");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let bounding = unit_capabilities();
    assert_eq!(field(&status, "CapBnd:"), Some(bounding), "{status}");
    assert_eq!(field(&status, "CapEff:"), Some(bounding), "{status}");
    assert_eq!(field(&status, "NoNewPrivs:"), Some(1));
    let oom_score_adj = std::fs::read_to_string(format!("/proc/{pid}/oom_score_adj")).unwrap();
    assert_eq!(oom_score_adj.trim(), "-999");
    let mounts = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap();
    for (point, access) in [
        // ProtectSystem=full
        ("/usr", "ro"),
        ("/etc", "ro"),
        // ProtectHome=read-only
        ("/home", "ro"),
        // ProtectKernelTunables, with ReadWritePaths=/sys/fs/cgroup
        ("/proc/sys", "ro"),
        ("/sys", "ro"),
        ("/sys/fs/cgroup", "rw"),
    ] {
        assert_eq!(
            mount_access(&mounts, point),
            Some(access),
            "{point} as the agent sees it\n{mounts}"
        );
    }
    // Real-time priority for the notifier threads, from the unit's LimitRTPRIO alone.
    assert_notifiers_run_fifo(pid, &journal());
    let mut metrics_text = String::new();
    wait_until("the eBPF source's state", Duration::from_secs(60), || {
        metrics_text = metrics();
        metrics_text.contains("monitor_source_up{source=\"ebpf\"}")
    });
    assert!(
        metrics_text
            .lines()
            .any(|l| l == "monitor_source_up{source=\"ebpf\"} 1"),
        "the eBPF source runs under the unit's sandboxing\n{metrics_text}\n{}",
        journal()
    );

    // A hog evicted before the kernel OOM killer; the Guaranteed pod keeps running.
    let oom = monitor_tests::OomCounter::new(&format!("{SCOPE_TREE}/kubepods"));
    start_web_and_batch(HOG);
    let evicted = wait_for_record("batch", Duration::from_secs(120), journal, |r| {
        r.phase == monitor::runtime::store::Phase::Failed
    });
    assert_eq!(evicted.reason.as_deref(), Some("Evicted"), "{evicted:?}");
    assert_eq!(oom.kills(), 0, "the kernel OOM killer fired\n{}", journal());
    let web = wait_for_record("web", Duration::from_secs(30), journal, |r| {
        r.phase == monitor::runtime::store::Phase::Running
    });
    let web_pid = web.containers[0].pid.expect("web runs");
    let web_cgroup = std::fs::read_to_string(format!("/proc/{web_pid}/cgroup")).unwrap();
    assert!(
        web_cgroup.starts_with(&format!("0::/{SCOPE_TREE}/kubepods/")),
        "the pod runs in the scope delegated to the agent, outside the service: {web_cgroup}"
    );
    // The single-writer rule: the scope is delegated, its own cgroup holds no process
    // (the holder sits in a leaf), and nothing of the agent's is at the root.
    assert_eq!(
        systemctl_value(&["show", "--property=Delegate", "--value", SCOPE]),
        "yes"
    );
    let scope_dir = Path::new("/sys/fs/cgroup").join(SCOPE_TREE);
    let own = std::fs::read_to_string(scope_dir.join("cgroup.procs")).unwrap();
    assert!(
        own.trim().is_empty(),
        "processes in the scope's own cgroup: {own}"
    );
    let holder = std::fs::read_to_string(scope_dir.join("holder/cgroup.procs")).unwrap();
    assert_eq!(holder.lines().count(), 1, "one holder process: {holder}");
    let at_root = Path::new("/sys/fs/cgroup").join(CGROUP_ROOT);
    assert!(
        !at_root.exists(),
        "{} made beside systemd's slices",
        at_root.display()
    );

    // Restart: a new agent process adopts the running pod.
    systemctl(&["restart", "monitor"]);
    let restarted = main_pid();
    assert_ne!(restarted, pid, "systemctl restart started a new agent");
    wait_until(
        "the restarted agent adopts the pods",
        Duration::from_secs(60),
        || journal_of(restarted).contains("re-took running pods: demo/web"),
    );
    assert!(alive(web_pid), "web survives the agent's restart");
    let web = wait_for_record("web", Duration::from_secs(30), journal, |r| {
        r.phase == monitor::runtime::store::Phase::Running
    });
    assert_eq!(
        (web.containers[0].pid, web.containers[0].restart_count),
        (Some(web_pid), 0),
        "web adopted, not restarted"
    );

    // Stop: systemd kills the service's cgroup; the pods, outside it, keep running.
    systemctl(&["stop", "monitor"]);
    assert_eq!(systemctl_value(&["is-active", "monitor"]), "inactive");
    assert!(!alive(restarted), "the agent stopped");
    std::thread::sleep(Duration::from_secs(2));
    assert!(alive(web_pid), "systemctl stop leaves the pods running");
    assert_eq!(systemctl_value(&["is-active", SCOPE]), "active");

    // Pods are stopped through their manifests, by a running agent.
    systemctl(&["start", "monitor"]);
    for file in ["web.yaml", "batch.yaml"] {
        std::fs::remove_file(Path::new(PODS).join(file)).unwrap();
    }
    wait_until("the pods stopped", Duration::from_secs(60), || {
        monitor_tests::pod_records(Path::new(STATE)).is_empty() && !alive(web_pid)
    });

    // Remove stops the agent and keeps the configuration; purge leaves nothing.
    println!("dpkg -r monitor:\n{}", dpkg(&["-r", "monitor"]));
    assert_eq!(systemctl_value(&["is-active", "monitor"]), "inactive");
    assert!(!Path::new(UNIT).exists(), "{UNIT} left after dpkg -r");
    assert!(Path::new(CONFIG).exists(), "dpkg -r keeps the conffile");
    println!("dpkg -P monitor:\n{}", dpkg(&["-P", "monitor"]));
    let files_after = filesystem(SYSTEMD_OWN);
    let left: Vec<_> = files_after.difference(&files_before).collect();
    let lost: Vec<_> = files_before.difference(&files_after).collect();
    assert!(
        left.is_empty() && lost.is_empty(),
        "after purge: left behind {left:?}, removed though not the package's {lost:?}"
    );
    for gone in [
        "/run/monitor",
        "/etc/systemd/system/multi-user.target.wants/monitor.service",
    ] {
        assert!(!Path::new(gone).exists(), "{gone} left after dpkg -P");
    }
    assert_ne!(
        systemctl_value(&["is-active", SCOPE]),
        "active",
        "the scope ends at purge"
    );
    let ours: Vec<_> = cgroups()
        .into_iter()
        .filter(|c| c.to_string_lossy().contains("monitor"))
        .collect();
    assert!(ours.is_empty(), "cgroups left after dpkg -P: {ours:?}");
}

/// `systemctl ARGS`, which must succeed.
fn systemctl(args: &[&str]) -> String {
    run("systemctl", args)
}

/// The one-word answer of `systemctl is-active` and the like, whatever its exit status
/// (non-zero for "inactive").
fn systemctl_value(args: &[&str]) -> String {
    let out = Command::new("systemctl")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("systemctl {args:?}: {e}"));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn main_pid() -> u32 {
    let pid = systemctl(&["show", "--property=MainPID", "--value", "monitor"]);
    let pid: u32 = pid
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("MainPID {pid:?}: {e}"));
    assert_ne!(
        pid,
        0,
        "monitor.service has no main process\n{}",
        journal("monitor")
    );
    pid
}

/// The unit's journal, its messages only.
fn journal(unit: &str) -> String {
    run("journalctl", &["--no-pager", "-o", "cat", "-u", unit])
}

/// What one process of the agent logged.
fn journal_of(pid: u32) -> String {
    run(
        "journalctl",
        &["--no-pager", "-o", "cat", &format!("_PID={pid}")],
    )
}

fn alive(pid: u32) -> bool {
    monitor_tests::node::alive(pid)
}

/// The capability mask of the installed unit's CapabilityBoundingSet.
fn unit_capabilities() -> u64 {
    let text = std::fs::read_to_string(UNIT).unwrap();
    let values = monitor_bench::util::unit_values(&text, "CapabilityBoundingSet");
    assert_eq!(values.len(), 1, "{UNIT}: CapabilityBoundingSet {values:?}");
    values[0]
        .split_whitespace()
        .map(|name| {
            let cap = caps::Capability::from_str(name)
                .unwrap_or_else(|e| panic!("{UNIT}: CapabilityBoundingSet {name}: {e}"));
            1u64 << cap.index()
        })
        .sum()
}

/// "ro" or "rw": how `point` is mounted in a /proc/<pid>/mountinfo, from the last (the
/// visible) mount on it.
fn mount_access<'a>(mountinfo: &'a str, point: &str) -> Option<&'a str> {
    mountinfo
        .lines()
        .filter_map(|line| {
            let mut fields = line.split(' ');
            let mount_point = fields.nth(4)?;
            let options = fields.next()?;
            (mount_point == point).then(|| options.split(',').next())?
        })
        .next_back()
}

#[test]
fn the_visible_mount_decides_access() {
    let mountinfo = "\
22 1 254:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw
30 22 0:26 / /sys rw,nosuid shared:7 - sysfs sysfs rw
41 30 0:26 / /sys ro,nosuid,nodev,noexec - sysfs sysfs rw
42 41 0:27 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw";
    assert_eq!(mount_access(mountinfo, "/sys"), Some("ro"));
    assert_eq!(mount_access(mountinfo, "/sys/fs/cgroup"), Some("rw"));
    assert_eq!(mount_access(mountinfo, "/usr"), None);
}
