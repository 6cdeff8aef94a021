//! The VM's own preconditions, checked from inside the guest: cgroup v2 is mounted at
//! /sys/fs/cgroup and the memory controller is available and enabled for children.
//!
//! `cargo xtask vm` exports `MONITOR_TEST_VM` (the guest's kernel release); there a missing
//! controller fails. On a host without cgroup v2 at /sys/fs/cgroup (the build machines
//! mount cgroup v1 there) the test prints `SKIP:` and returns.
use std::fs;

const ROOT: &str = "/sys/fs/cgroup";

fn controllers(file: &str) -> Option<Vec<String>> {
    let text = fs::read_to_string(format!("{ROOT}/{file}")).ok()?;
    Some(text.split_whitespace().map(str::to_string).collect())
}

#[test]
fn cgroup_v2_memory_controller_is_available_to_children() {
    let in_vm = std::env::var("MONITOR_TEST_VM").ok();
    let Some(available) = controllers("cgroup.controllers") else {
        assert!(
            in_vm.is_none(),
            "kernel {in_vm:?}: no {ROOT}/cgroup.controllers: cgroup2 is not mounted"
        );
        monitor_tests::skip(
            "cgroup_v2_memory_controller",
            &format!("{ROOT} is not a cgroup v2 mount on this host"),
        );
        return;
    };
    assert!(
        available.iter().any(|c| c == "memory"),
        "kernel {in_vm:?}: memory controller missing from {ROOT}/cgroup.controllers: {available:?}"
    );
    if in_vm.is_some() {
        let enabled = controllers("cgroup.subtree_control").unwrap_or_default();
        for needed in ["memory", "pids", "cpu"] {
            assert!(
                enabled.iter().any(|c| c == needed),
                "kernel {in_vm:?}: {needed} not enabled in {ROOT}/cgroup.subtree_control: {enabled:?}"
            );
        }
    }
}

/// The helper programs `cargo xtask vm` copies into the guest's /bin are static and run
/// there; the agent is the first of them.
#[test]
fn guest_helper_binaries_run() {
    if std::env::var_os("MONITOR_TEST_VM").is_none() {
        monitor_tests::skip(
            "guest_helper_binaries",
            "not inside the cargo xtask vm guest, which puts the agent on PATH",
        );
        return;
    }
    let out = std::process::Command::new("monitor")
        .arg("--version")
        .output()
        .unwrap_or_else(|e| panic!("running `monitor --version` from PATH: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "monitor --version: {} {stdout}",
        out.status
    );
    assert!(
        stdout.starts_with("monitor "),
        "monitor --version printed {stdout:?}"
    );
}
