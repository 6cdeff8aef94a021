//! The private containerd fixture itself (tests/src/containerd/): it starts with its
//! images, imports more, runs containers, leaves nothing behind, and two instances do not
//! see each other. Run as root, one at a time:
//! `cargo test -p monitor-tests --test containerd_fixture -- --test-threads=1`.
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use monitor_tests::containerd::{
    BUSYBOX_IMAGE, Containerd, PAUSE_IMAGE, cleanup_stale, mounts_under,
};
use monitor_tests::oci::OciImage;
use monitor_tests::{Feature, parent_name, require};

const FEATURES: &[Feature] = &[Feature::Root, Feature::Containerd];

/// `ctr run` arguments that keep the container's runc state and cgroup ours: runc root in
/// the instance directory, cgroup under `monitor-test-<pid>/containerd-fixture` (tracked
/// from `monitor-test-<pid>` on, so that the fixture removes the parents too).
fn run_args(containerd: &Containerd, detach: bool, id: &str, command: &[&str]) -> Vec<String> {
    let parent = format!("{}/containerd-fixture", parent_name());
    containerd.track_cgroup_parent(&parent_name());
    let mut args: Vec<String> = vec!["run".into()];
    args.push(if detach { "-d" } else { "--rm" }.into());
    args.push("--runc-root".into());
    args.push(containerd.runc_root().to_string_lossy().into_owned());
    args.push("--cgroup".into());
    args.push(format!("/{parent}/{id}"));
    if monitor_tests::containerd::root_is_initramfs() {
        // As the fixture's CRI configuration does: pivot_root cannot leave an initramfs.
        args.push("--no-pivot".into());
    }
    args.push(BUSYBOX_IMAGE.into());
    args.push(id.into());
    args.extend(command.iter().map(|s| s.to_string()));
    args
}

fn ctr_run(containerd: &Containerd, detach: bool, id: &str, command: &[&str]) -> String {
    let args = run_args(containerd, detach, id, command);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    containerd
        .ctr(&args)
        .unwrap_or_else(|e| panic!("ctr run {id}: {e:#}"))
}

/// Processes whose command line contains `needle`.
fn processes_naming(needle: &str) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| *pid != std::process::id() as i32)
        .filter(|pid| {
            let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let text = String::from_utf8_lossy(&raw).replace('\0', " ");
            text.contains(needle) && !is_zombie(*pid)
        })
        .collect()
}

fn is_zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            let after = s[s.rfind(')')? + 1..].to_string();
            after.split_whitespace().next().map(|st| st == "Z")
        })
        .unwrap_or(true)
}

fn alive(pid: i32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists() && !is_zombie(pid)
}

#[test]
fn starts_with_images_imports_more_and_runs_a_container() {
    if !require(
        "starts_with_images_imports_more_and_runs_a_container",
        FEATURES,
    ) {
        return;
    }
    let containerd = Containerd::start().expect("starting the private containerd");
    assert!(containerd.socket().exists());
    assert!(containerd.socket().starts_with(containerd.dir()));
    assert!(containerd.root().starts_with(containerd.dir()));

    // The CRI plugin loaded with the private config (its sandbox image is ours).
    let plugins = containerd.ctr(&["plugins", "ls"]).unwrap();
    let cri = plugins
        .lines()
        .find(|l| {
            l.split_whitespace()
                .take(2)
                .eq(["io.containerd.grpc.v1", "cri"])
        })
        .unwrap_or_else(|| panic!("no CRI plugin in\n{plugins}"));
    assert!(
        cri.trim_end().ends_with("ok"),
        "{cri}\n{}",
        containerd.log_tail(40)
    );

    let listed = containerd.ctr(&["images", "ls", "-q"]).unwrap();
    let names: Vec<&str> = listed.lines().collect();
    assert!(names.contains(&PAUSE_IMAGE), "{listed}");
    assert!(names.contains(&BUSYBOX_IMAGE), "{listed}");

    let big = OciImage::busybox("localhost/filler:2m").with_filler(2 << 20);
    containerd.import(&big).unwrap();
    let big_digest = containerd.image_digest(big.name()).unwrap();
    let busybox_digest = containerd.image_digest(BUSYBOX_IMAGE).unwrap();
    let pause_digest = containerd.image_digest(PAUSE_IMAGE).unwrap();
    assert!(big_digest.starts_with("sha256:"), "{big_digest}");
    assert_ne!(big_digest, busybox_digest);
    assert_ne!(pause_digest, busybox_digest);
    // The filler is incompressible: the image's content is over 2 MiB.
    let listing = containerd.ctr(&["images", "ls"]).unwrap();
    eprintln!("{listing}");

    // The archive is deterministic: built again, the same manifest digest.
    let scratch = containerd.dir().join("again.tar");
    let built = big.write_archive(&scratch).unwrap();
    assert_eq!(built.manifest_digest, big_digest);
    assert!(built.layer_size > 2 << 20, "{built:?}");
    std::fs::remove_file(&scratch).unwrap();

    // A container from the imported image runs.
    let out = ctr_run(&containerd, false, "echo-hi", &["/bin/echo", "hi"]);
    assert_eq!(out.trim(), "hi");
    let out = ctr_run(
        &containerd,
        false,
        "shell",
        &["/bin/sh", "-c", "wc -c < /etc/passwd; id -u"],
    );
    assert_eq!(out.split_whitespace().collect::<Vec<_>>(), ["30", "0"]);
}

#[test]
fn drop_leaves_nothing_behind() {
    if !require("drop_leaves_nothing_behind", FEATURES) {
        return;
    }
    let containerd = Containerd::start().expect("starting the private containerd");
    let dir: PathBuf = containerd.dir().to_path_buf();
    let socket = containerd.socket().to_string_lossy().into_owned();
    let pid = containerd.pid().expect("containerd's pid") as i32;
    assert!(alive(pid));

    // A container still running at drop time: its task, shim, rootfs mount and cgroup
    // must all go.
    ctr_run(&containerd, true, "sleeper", &["/bin/sleep", "1000"]);
    let tasks = containerd.ctr(&["tasks", "ls"]).unwrap();
    assert!(
        tasks.contains("sleeper") && tasks.contains("RUNNING"),
        "{tasks}"
    );
    let shims = processes_naming(&format!("-address {socket}"));
    assert!(!shims.is_empty(), "no shim names {socket}");
    let sleepers: Vec<i32> = processes_naming("/bin/sleep 1000")
        .into_iter()
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/cgroup"))
                .unwrap_or_default()
                .contains("containerd-fixture/sleeper")
        })
        .collect();
    assert_eq!(sleepers.len(), 1, "the container's sleep");
    assert!(
        !mounts_under(&dir).is_empty(),
        "the container's rootfs is mounted"
    );
    let cgroup = monitor_tests::cgroup_mounts()
        .into_iter()
        .map(|m| m.join(parent_name()).join("containerd-fixture"))
        .find(|p| p.exists())
        .expect("the container's cgroup parent");

    drop(containerd);

    assert!(!dir.exists(), "{} is still there", dir.display());
    assert!(!alive(pid), "containerd {pid} still runs");
    for p in shims.iter().chain(&sleepers) {
        assert!(!alive(*p), "process {p} still runs");
    }
    assert!(
        processes_naming(&socket).is_empty(),
        "processes name {socket}"
    );
    assert!(mounts_under(&dir).is_empty(), "{:?}", mounts_under(&dir));
    assert!(!cgroup.exists(), "{} is still there", cgroup.display());
}

#[test]
fn two_instances_are_independent() {
    if !require("two_instances_are_independent", FEATURES) {
        return;
    }
    let a = Containerd::start().expect("starting the first containerd");
    let b = Containerd::start().expect("starting the second containerd");
    assert_ne!(a.socket(), b.socket());
    assert_ne!(a.dir(), b.dir());
    let only_a = OciImage::busybox("localhost/only-a:1").with_filler(4096);
    a.import(&only_a).unwrap();
    assert!(
        a.ctr(&["images", "ls", "-q"])
            .unwrap()
            .contains("localhost/only-a:1")
    );
    assert!(
        !b.ctr(&["images", "ls", "-q"])
            .unwrap()
            .contains("localhost/only-a:1")
    );
    assert!(
        b.ctr(&["images", "ls", "-q"])
            .unwrap()
            .contains(BUSYBOX_IMAGE)
    );
    let b_dir = b.dir().to_path_buf();
    drop(b);
    assert!(!b_dir.exists());
    // The first one still works after the second is gone.
    assert_eq!(
        ctr_run(&a, false, "after-b", &["/bin/echo", "still"]).trim(),
        "still"
    );
}

const CRASH_HELPER: &str = "crash_helper_leaves_an_instance_running";

/// Run in a child process by `stale_instances_are_cleaned_up`: starts an instance with a
/// running container, says where it is, and waits to be SIGKILLed (so no drop runs).
#[test]
#[ignore = "a helper that stale_instances_are_cleaned_up runs in a child process"]
fn crash_helper_leaves_an_instance_running() {
    if std::env::var_os("MONITOR_TEST_CRASH_HELPER").is_none() {
        return;
    }
    let containerd = Containerd::start().expect("starting the private containerd");
    ctr_run(&containerd, true, "orphan", &["/bin/sleep", "1000"]);
    let cgroup = format!("{}/containerd-fixture/orphan", parent_name());
    println!(
        "READY {} {} {cgroup}",
        containerd.dir().display(),
        containerd.pid().unwrap()
    );
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

#[test]
fn stale_instances_are_cleaned_up() {
    if !require("stale_instances_are_cleaned_up", FEATURES) {
        return;
    }
    let mut helper = Command::new(std::env::current_exe().unwrap())
        .args([CRASH_HELPER, "--exact", "--ignored", "--nocapture"])
        .env("MONITOR_TEST_CRASH_HELPER", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut ready = None;
    for line in BufReader::new(helper.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        if let Some(rest) = line.strip_prefix("READY ") {
            ready = Some(rest.to_string());
            break;
        }
    }
    // The helper "crashes": no drop runs.
    helper.kill().unwrap();
    helper.wait().unwrap();
    let ready = ready.expect("the helper started an instance");
    let fields: Vec<&str> = ready.split_whitespace().collect();
    let (dir, pid, cgroup) = (
        PathBuf::from(fields[0]),
        fields[1].parse::<i32>().unwrap(),
        fields[2],
    );
    let socket = dir.join("containerd.sock").to_string_lossy().into_owned();
    assert!(dir.exists());
    assert!(alive(pid), "containerd outlives the crashed test process");
    // containerd names its config, the shim our socket: both are in the directory.
    let orphans = processes_naming(&dir.to_string_lossy());
    assert!(orphans.contains(&pid), "containerd among {orphans:?}");
    assert!(
        !processes_naming(&format!("-address {socket}")).is_empty(),
        "a shim"
    );
    let container_cgroups: Vec<PathBuf> = monitor_tests::cgroup_mounts()
        .into_iter()
        .map(|m| m.join(cgroup))
        .filter(|p| p.exists())
        .collect();
    assert!(!container_cgroups.is_empty());
    let sleepers: Vec<i32> = container_cgroups
        .iter()
        .flat_map(|c| {
            std::fs::read_to_string(c.join("cgroup.procs"))
                .unwrap_or_default()
                .lines()
                .filter_map(|l| l.parse::<i32>().ok())
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(!sleepers.is_empty(), "the container runs");

    cleanup_stale();

    assert!(!dir.exists(), "{} is still there", dir.display());
    for p in orphans.iter().chain(&sleepers) {
        assert!(!alive(*p), "process {p} still runs");
    }
    assert!(mounts_under(&dir).is_empty(), "{:?}", mounts_under(&dir));
    for c in &container_cgroups {
        assert!(!c.exists(), "{} is still there", c.display());
    }
    // The helper's monitor-test-<pid> parent was tracked, and went too.
    let helper_parent = Path::new(cgroup).components().next().unwrap();
    for m in monitor_tests::cgroup_mounts() {
        assert!(!m.join(helper_parent).exists());
    }
}
