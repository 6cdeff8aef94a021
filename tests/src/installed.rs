//! The agent as its Debian package installs it in the VM: where the package puts things,
//! and what the `package` test (busybox, no systemd) and the `systemd_node` test (Debian
//! with systemd as PID 1) both do to it: run dpkg and the CLI, write manifests, read pod
//! records, the agent's threads and the filesystem and cgroup trees around an install.
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Where the VM run puts the package.
pub const PACKAGE: &str = "/packages/monitor.deb";
pub const UNIT: &str = "/lib/systemd/system/monitor.service";
pub const CONFIG: &str = "/etc/monitor/config.yaml";
pub const PODS: &str = "/etc/monitor/pods";
pub const STATE: &str = "/var/lib/monitor";
pub const SOCKET: &str = "/run/monitor/monitor.sock";
/// The packaged configuration's `cgroupRoot`.
pub const CGROUP_ROOT: &str = "monitor";

/// Directories of every Debian node the package puts files in.
pub const STANDARD_DIRS: &[&str] = &[
    "/lib",
    "/lib/systemd",
    "/lib/systemd/system",
    "/usr",
    "/usr/bin",
    "/usr/share",
    "/usr/share/doc",
    "/usr/share/man",
    "/usr/share/man/man8",
    "/usr/share/bash-completion",
    "/usr/share/bash-completion/completions",
    "/usr/share/zsh",
    "/usr/share/zsh/vendor-completions",
    "/usr/share/fish",
    "/usr/share/fish/vendor_completions.d",
];

/// `dpkg ARGS`; its output, or a panic naming it.
pub fn dpkg(args: &[&str]) -> String {
    run("dpkg", args)
}

pub fn run(program: &str, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .unwrap_or_else(|e| panic!("{program} {args:?}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "{program} {args:?}: {}\n{text}",
        out.status
    );
    text
}

pub fn metrics() -> String {
    run("/usr/bin/monitor", &["metrics"])
}

/// One thread of the agent, as /proc/<pid>/task/<tid>/stat shows it.
#[derive(Debug)]
pub struct ThreadSched {
    pub name: String,
    /// Field 41: 0 SCHED_OTHER, 1 SCHED_FIFO, 2 SCHED_RR.
    pub policy: u64,
    /// Field 40.
    pub rt_priority: u64,
}

/// The agent's kernel notifier threads (named monitor-kernel, monitor-memcg,
/// monitor-events) with their scheduling.
pub fn notifier_threads(pid: u32) -> Vec<ThreadSched> {
    let mut threads = Vec::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
    {
        let stat = entry.path().join("stat");
        let Some(name) = std::fs::read_to_string(entry.path().join("comm"))
            .ok()
            .map(|c| c.trim_end().to_string())
        else {
            continue;
        };
        if !["monitor-kernel", "monitor-memcg", "monitor-events"].contains(&name.as_str()) {
            continue;
        }
        let number = |n: usize| -> u64 {
            crate::stat_field(&stat, n)
                .and_then(|f| f.parse().ok())
                .unwrap_or_else(|| panic!("field {n} of {}", stat.display()))
        };
        threads.push(ThreadSched {
            name,
            rt_priority: number(40),
            policy: number(41),
        });
    }
    threads
}

/// Asserts that the agent `pid` runs its kernel notifier threads, the eBPF ring reader
/// among them, SCHED_FIFO at priority 10 or more, as the kernel reports them; `log` is
/// shown when not.
pub fn assert_notifiers_run_fifo(pid: u32, log: &str) {
    let notifiers = notifier_threads(pid);
    assert!(
        notifiers.iter().any(|t| t.name == "monitor-kernel"),
        "the eBPF ring reader runs: {notifiers:?}"
    );
    for thread in &notifiers {
        assert_eq!(
            thread.policy, 1,
            "{} runs SCHED_FIFO (policy 1), not {}: {notifiers:?}\n{log}",
            thread.name, thread.policy
        );
        assert!(thread.rt_priority >= 10, "{notifiers:?}");
    }
}

pub fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// A `Name:\t<hex>` or `Name:\t<decimal>` field of /proc/<pid>/status.
pub fn field(status: &str, name: &str) -> Option<u64> {
    let value = status
        .lines()
        .find_map(|l| l.strip_prefix(name))?
        .trim()
        .to_string();
    if name.starts_with("Cap") {
        u64::from_str_radix(&value, 16).ok()
    } else {
        value.parse().ok()
    }
}

pub fn manifest(file: &str, text: &str) {
    // Written aside and renamed in: the agent never reads a half-written file.
    let tmp = Path::new(PODS).join(format!(".{file}.tmp"));
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, Path::new(PODS).join(file)).unwrap();
}

pub fn pod(name: &str, command: &[&str], resources: &str) -> String {
    let command: Vec<String> = command.iter().map(|c| format!("\"{c}\"")).collect();
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: demo\nspec:\n  containers:\n  - name: main\n    image: none\n    command: [{}]\n{resources}",
        command.join(", ")
    )
}

pub fn wait_for_record(
    name: &str,
    timeout: Duration,
    log: impl Fn() -> String,
    check: impl Fn(&monitor::runtime::store::PodRecord) -> bool,
) -> monitor::runtime::store::PodRecord {
    let find = || {
        crate::pod_records(Path::new(STATE))
            .into_iter()
            .find(|r| r.pod.metadata.name == name)
    };
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if let Some(record) = find().filter(|r| check(r)) {
            return record;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "pod {name} not as expected after {timeout:?}: {:?}\nagent log:\n{}",
            find(),
            log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Every path of the guest's filesystem but the kernel's (/proc, /sys, /dev), the
/// tests' scratch space (/tmp), dpkg's own database (which records the purge), the
/// test run's own files and the trees in `also_skip` (what the init system writes).
pub fn filesystem(also_skip: &[&str]) -> BTreeSet<PathBuf> {
    let skip = [
        "/proc",
        "/sys",
        "/dev",
        "/tmp",
        "/var/lib/dpkg",
        "/packages",
        "/tests",
        "/xtask-vm",
    ];
    let mut paths = BTreeSet::new();
    let mut dirs = vec![PathBuf::from("/")];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if skip.iter().chain(also_skip).any(|s| path == Path::new(s)) {
                continue;
            }
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                dirs.push(path.clone());
            }
            paths.insert(path);
        }
    }
    paths
}

/// Every directory of the cgroup2 hierarchy.
pub fn cgroups() -> BTreeSet<PathBuf> {
    let mut found = BTreeSet::new();
    let mut dirs = vec![PathBuf::from("/sys/fs/cgroup")];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                found.insert(entry.path());
                dirs.push(entry.path());
            }
        }
    }
    found
}

/// Whether a test that installs the package system-wide may run here: only where the VM
/// run set `variable` (it prints why not, as a SKIP, elsewhere), as root with cgroup v2
/// memory and eBPF, and with the package packed at [`PACKAGE`].
pub fn may_install(name: &str, variable: &str, where_it_runs: &str) -> bool {
    if std::env::var_os(variable).is_none() {
        crate::skip(
            name,
            &format!("installs the package system-wide; runs only {where_it_runs}"),
        );
        return false;
    }
    if !crate::require(
        name,
        &[
            crate::Feature::Root,
            crate::Feature::CgroupV2Memory,
            crate::Feature::Ebpf,
        ],
    ) {
        return false;
    }
    assert!(
        Path::new(PACKAGE).exists(),
        "{PACKAGE} is missing: the VM run packs it when the test is built"
    );
    true
}

/// Edits the packaged configuration as an operator bounding a node would: every pod
/// together under 320 MiB, eviction 100 MiB before that.
pub fn bound_the_node() {
    let config = std::fs::read_to_string(CONFIG).unwrap();
    for anchor in ["\nevictionHard:\n", "\nmonitor:\n"] {
        assert!(config.contains(anchor), "{CONFIG} has no {anchor:?}");
    }
    let config = config
        .replace(
            "\nevictionHard:\n",
            "\nevictionHard:\n  allocatableMemory.available: \"100Mi\"\n",
        )
        .replace("\nmonitor:\n", "\nmonitor:\n  podsMemoryLimit: 320Mi\n");
    std::fs::write(CONFIG, config).unwrap();
}

/// The pods both tests run: a Guaranteed service and a best-effort hog (the program at
/// `hog`) that grows past the bounded node.
pub fn start_web_and_batch(hog: &str) {
    manifest(
        "web.yaml",
        &pod(
            "web",
            &["/bin/sleep", "1000"],
            "    resources:\n      requests: {cpu: 100m, memory: 32Mi}\n      limits: {cpu: 100m, memory: 32Mi}\n",
        ),
    );
    manifest(
        "batch.yaml",
        &pod("batch", &[hog, "anon", "600", "4", "0", "60"], ""),
    );
}
