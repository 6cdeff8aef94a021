//! Jobs that finish after an agent restart: the agent adopted their processes (it is not
//! their parent any more) and still reads their real exit status, so the phase follows
//! the restart policy as for its own children. Run as root, one test at a time.
use std::time::Duration;

use monitor::runtime::store::Phase;
use monitor_tests::node::{Node, pod, poll};
use monitor_tests::{Feature, require, wait_until};

/// A job that waits for `gate` to exist, then exits `code`.
fn gated_job(name: &str, gate: &std::path::Path, code: i32, policy: &str) -> String {
    let script = format!(
        "while [ ! -e {} ]; do sleep 0.05; done; exit {code}",
        gate.display()
    );
    pod(
        name,
        "",
        &["/bin/sh", "-c", &script],
        &format!("  restartPolicy: {policy}\n"),
    )
}

/// A node with two jobs, `never` (restartPolicy Never) and `onfailure` (OnFailure), that
/// exit `code` once the returned gate file exists.
fn node_with_gated_jobs(code: i32) -> (Node, std::path::PathBuf) {
    let node = Node::new("evictionHard: {allocatableMemory.available: 50Mi}");
    let gate = node.path("go");
    node.manifest("never.yaml", &gated_job("never", &gate, code, "Never"));
    node.manifest(
        "onfailure.yaml",
        &gated_job("onfailure", &gate, code, "OnFailure"),
    );
    (node, gate)
}

/// Starts the agent, waits for `jobs` to run, stops it with SIGTERM (the jobs keep
/// running) and starts it again, until it has adopted them. Returns the jobs' pids.
fn restart_with_running_jobs(node: &mut Node, jobs: &[&str]) -> Vec<u32> {
    node.start();
    let pids: Vec<u32> = jobs
        .iter()
        .map(|job| node.wait_running(job).containers[0].pid.expect("a pid"))
        .collect();
    node.stop();
    for pid in &pids {
        assert!(
            monitor_tests::node::alive(*pid),
            "job {pid} keeps running while the agent is down"
        );
    }
    node.start();
    wait_until(
        &format!("adoption\n{}", node.log(node.runs)),
        Duration::from_secs(10),
        || node.log(node.runs).contains("Adopted"),
    );
    for (job, pid) in jobs.iter().zip(&pids) {
        let record = node.record(job).expect("a record");
        assert_eq!(
            (record.containers[0].pid, record.containers[0].restart_count),
            (Some(*pid), 0),
            "{job} adopted, not restarted"
        );
    }
    pids
}

/// Exit 0 after the restart: Succeeded under Never and OnFailure, not run again. The
/// orphans' new parent is this test (a child subreaper) and it reaps them only at the end,
/// so the status comes from the zombie, on any kernel. (Where init reaps orphans at once,
/// as the VM's shell does, only the pidfd keeps the status, from Linux 6.15: the next
/// test.)
#[test]
fn an_adopted_job_that_exits_0_succeeds() {
    if !require("an_adopted_job_that_exits_0_succeeds", &[Feature::Root]) {
        return;
    }
    let _subreaper = Subreaper::become_one();
    let (mut node, gate) = node_with_gated_jobs(0);
    let pids = restart_with_running_jobs(&mut node, &["never", "onfailure"]);

    std::fs::write(&gate, "").expect("open the gate");
    for job in ["never", "onfailure"] {
        let record = node.wait_phase(job, Phase::Succeeded, Duration::from_secs(15));
        let c = &record.containers[0];
        assert_eq!(
            (c.last_exit, c.exit_code_unknown, c.restart_count, c.done),
            (Some(0), false, 0, true),
            "{job}: {record:?}\n{}",
            node.log(2)
        );
    }
    assert!(
        node.log(2)
            .contains("adopted process exited (0), read through"),
        "{}",
        node.log(2)
    );
    // Our zombies now: reaped, so none outlives the test.
    for pid in pids {
        let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid as i32), None);
    }
}

/// Exit 3 after the restart, with the orphans reaped at once by their new parent (as
/// init does on a node; here the test is that parent, a child subreaper): the kernel
/// keeps the status for the agent's pidfd. Never: Failed with exit 3; OnFailure: run
/// again.
#[test]
fn an_adopted_job_that_exits_3_fails_with_its_code() {
    if !require(
        "an_adopted_job_that_exits_3_fails_with_its_code",
        &[Feature::Root],
    ) {
        return;
    }
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut parts = release
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|p| p.parse::<u32>().ok());
    if (parts.next().unwrap_or(0), parts.next().unwrap_or(0)) < (6, 15) {
        println!(
            "SKIP: an_adopted_job_that_exits_3_fails_with_its_code: PIDFD_INFO_EXIT needs Linux 6.15 (this is {})",
            release.trim()
        );
        return;
    }
    let _subreaper = Subreaper::become_one();
    let (mut node, gate) = node_with_gated_jobs(3);
    let pids = restart_with_running_jobs(&mut node, &["never", "onfailure"]);
    // They are our children now: reaped the moment they exit.
    let reapers: Vec<_> = pids
        .iter()
        .map(|pid| {
            let pid = nix::unistd::Pid::from_raw(*pid as i32);
            std::thread::spawn(move || nix::sys::wait::waitpid(pid, None))
        })
        .collect();

    std::fs::write(&gate, "").expect("open the gate");
    let never = node.wait_phase("never", Phase::Failed, Duration::from_secs(15));
    let c = &never.containers[0];
    assert_eq!(
        (c.last_exit, c.exit_code_unknown, c.restart_count),
        (Some(3), false, 0),
        "{never:?}\n{}",
        node.log(2)
    );
    assert!(
        poll(Duration::from_secs(15), || node
            .record("onfailure")
            .is_some_and(|r| r.containers[0].restart_count >= 1)),
        "OnFailure runs a job that exited 3 again: {:?}\n{}",
        node.record("onfailure"),
        node.log(2)
    );
    for reaper in reapers {
        let status = reaper.join().expect("reaper thread");
        assert!(
            matches!(status, Ok(nix::sys::wait::WaitStatus::Exited(_, 3))),
            "the job exited 3: {status:?}"
        );
    }
    assert!(
        node.log(2)
            .contains("adopted process exited (3), read through"),
        "{}",
        node.log(2)
    );
}

/// This test process as a child subreaper (orphans of its descendants become its
/// children) until the guard drops, however the test ends.
struct Subreaper;

impl Subreaper {
    fn become_one() -> Subreaper {
        // SAFETY: prctl(PR_SET_CHILD_SUBREAPER, 1) only changes who inherits orphans of
        // our descendants; no memory is passed.
        let rc = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
        assert_eq!(rc, 0, "PR_SET_CHILD_SUBREAPER");
        Subreaper
    }
}

impl Drop for Subreaper {
    fn drop(&mut self) {
        // SAFETY: as in become_one; 0 clears the attribute.
        unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0) };
    }
}

/// A job that ends while the agent is down leaves no status the agent can read (no pidfd
/// of its existed at the exit). Said so, and counted as a failure: Never fails with
/// reason ExitCodeUnknown, no code made up.
#[test]
fn a_job_that_ends_while_the_agent_is_down_fails_with_exit_code_unknown() {
    if !require(
        "a_job_that_ends_while_the_agent_is_down_fails_with_exit_code_unknown",
        &[Feature::Root],
    ) {
        return;
    }
    let mut node = Node::new("evictionHard: {allocatableMemory.available: 50Mi}");
    let gate = node.path("go");
    node.manifest("never.yaml", &gated_job("never", &gate, 0, "Never"));
    node.start();
    let pid = node.wait_running("never").containers[0].pid.expect("a pid");
    node.stop();
    std::fs::write(&gate, "").expect("open the gate");
    wait_until("the job ends", Duration::from_secs(10), || {
        !monitor_tests::node::alive(pid)
    });
    node.start();
    let record = node.wait_phase("never", Phase::Failed, Duration::from_secs(15));
    let c = &record.containers[0];
    assert_eq!(
        (c.last_exit, c.exit_code_unknown, c.restart_count),
        (None, true, 0),
        "{record:?}\n{}",
        node.log(2)
    );
    // The record is saved before the exit's event is logged: wait for the line.
    let logged = monitor_tests::node::poll(Duration::from_secs(5), || {
        node.log(2).contains("status unknown: ExitCodeUnknown")
    });
    assert!(logged, "{}", node.log(2));
    // The container's state and reason as `monitor pods` shows them.
    let out = std::process::Command::new(monitor_tests::helper_binary("monitor"))
        .args(["pods", "--json", "--socket"])
        .arg(node.path("monitor.sock"))
        .output()
        .expect("monitor pods");
    let pods: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("monitor pods --json: {e}: {out:?}"));
    let container = pods["pods"]
        .as_array()
        .and_then(|pods| pods.iter().find(|p| p["key"] == "demo/never"))
        .map(|p| p["containers"][0].clone())
        .unwrap_or_else(|| panic!("demo/never in {pods}"));
    assert_eq!(
        (&container["state"], &container["reason"]),
        (
            &serde_json::json!("exited(unknown)"),
            &serde_json::json!("ExitCodeUnknown")
        ),
        "{pods}"
    );
}

/// The kubelet removes orphaned pod cgroups; so does the agent at its start, but only
/// where there is no record at all. A pod whose record was removed while the agent was
/// down and a process someone left in `<root>/kubepods/besteffort/pod<uid>` are killed and
/// their cgroups removed, each named in an event; a pod whose record is corrupt (set aside
/// as `.corrupt`) is left running, at that start and at the next.
#[test]
fn orphan_pod_cgroups_without_a_record_are_killed_at_start_and_corrupt_ones_left_alone() {
    if !require("orphan_pod_cgroups_without_a_record", &[Feature::Root]) {
        return;
    }
    use monitor_tests::node::{BURSTABLE, alive, sleeper};
    let mut node = Node::new("evictionHard: {allocatableMemory.available: 50Mi}");
    node.manifest("forgotten.yaml", &sleeper("forgotten", BURSTABLE));
    node.manifest("corrupt.yaml", &sleeper("corrupt", BURSTABLE));
    node.start();
    let forgotten = node.wait_running("forgotten");
    let corrupt = node.wait_running("corrupt");
    node.stop();
    // While the agent is down: one record goes (the manifest too: nothing is to run it
    // again), one is damaged, and a stray process appears in a pod cgroup of its own.
    node.remove_manifest("forgotten.yaml");
    let records = node.path("state").join("pods");
    std::fs::remove_file(records.join(format!("{}.json", forgotten.uid))).unwrap();
    std::fs::write(
        records.join(format!("{}.json", corrupt.uid)),
        "{\"uid\": 12",
    )
    .unwrap();
    let stray_uid = "0e7f3a52-stray-4c1d-9d6a-orphan000001";
    let stray = StrayPod::spawn(&node.cgroup_root, stray_uid);
    let (fp, cp) = (
        forgotten.containers[0].pid.unwrap(),
        corrupt.containers[0].pid.unwrap(),
    );
    assert!(alive(fp) && alive(cp) && alive(stray.pid));
    let forgotten_dirs = pod_dirs(&node.cgroup_root, "burstable", &forgotten.uid);
    assert!(forgotten_dirs.iter().all(|d| d.exists()));

    node.start();
    wait_until(
        &format!("both orphans reported\n{}", node.log(2)),
        Duration::from_secs(15),
        || {
            let log = node.log(2);
            log.matches("OrphanPodKilled").count() >= 2 && log.contains("agent running")
        },
    );
    let log = node.log(2);
    for uid in [&forgotten.uid, stray_uid] {
        assert!(
            log.lines()
                .any(|l| l.contains("OrphanPodKilled") && l.contains(&format!("pod{uid}"))),
            "no event names pod{uid}:\n{log}"
        );
    }
    assert!(
        poll(Duration::from_secs(5), || !alive(fp) && !alive(stray.pid)),
        "the orphans' processes live on\n{log}"
    );
    for dir in forgotten_dirs
        .iter()
        .chain(&pod_dirs(&node.cgroup_root, "besteffort", stray_uid))
    {
        assert!(!dir.exists(), "{} was not removed\n{log}", dir.display());
    }
    // The corrupt one: reported, left running, its cgroup kept, no second copy.
    assert!(
        log.contains("StateQuarantined") && log.contains("UnmanagedPod"),
        "{log}"
    );
    assert!(alive(cp), "a pod with a corrupt record was killed\n{log}");
    assert!(
        pod_dirs(&node.cgroup_root, "burstable", &corrupt.uid)
            .iter()
            .all(|d| d.exists())
    );
    assert!(node.record("corrupt").is_none() && node.record("forgotten").is_none());

    // The next start finds the record set aside, not missing: still left alone.
    node.stop();
    node.start();
    wait_until(
        &format!("the third start\n{}", node.log(3)),
        Duration::from_secs(15),
        || node.log(3).contains("agent running"),
    );
    std::thread::sleep(Duration::from_millis(500));
    let log = node.log(3);
    assert!(alive(cp), "killed at the next start\n{log}");
    assert!(
        log.contains("UnmanagedPod") && !log.contains("OrphanPodKilled"),
        "{log}"
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(cp as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
}

/// The pod cgroup directories of `uid` in the `tier` (burstable, besteffort) of an
/// agent's root, in the memory hierarchy and the cgroup2 one (v1 hosts' unified mirror).
fn pod_dirs(cgroup_root: &str, tier: &str, uid: &str) -> Vec<std::path::PathBuf> {
    let layout = monitor::observe::CgroupLayout::detect().expect("cgroup layout");
    let relative = format!("{cgroup_root}/kubepods/{tier}/pod{uid}");
    let mut dirs = vec![layout.memory_root.join(&relative)];
    if let Some(unified) = layout.unified_root.filter(|u| *u != layout.memory_root) {
        dirs.push(unified.join(&relative));
    }
    dirs
}

/// A process no agent started, in a best-effort pod cgroup made by hand (what a run cut
/// short, or an operator, could leave). Killed on drop if still alive; its cgroups go
/// with the node's test trees.
struct StrayPod {
    pid: u32,
    child: std::process::Child,
}

impl StrayPod {
    fn spawn(cgroup_root: &str, uid: &str) -> StrayPod {
        let dirs = pod_dirs(cgroup_root, "besteffort", uid);
        for dir in &dirs {
            std::fs::create_dir_all(dir)
                .unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
        }
        let procs: Vec<_> = dirs.iter().map(|d| d.join("cgroup.procs")).collect();
        let mut command = std::process::Command::new("/bin/sleep");
        command.arg("1000").stdin(std::process::Stdio::null());
        monitor_tests::join_before_exec(&mut command, &procs);
        let child = command.spawn().expect("spawning the stray process");
        StrayPod {
            pid: child.id(),
            child,
        }
    }
}

impl Drop for StrayPod {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
