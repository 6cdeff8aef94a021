//! Helpers for the privileged integration tests: cgroups of our own (created under a
//! dedicated `monitor-test-<pid>` parent, removed on drop even when a test fails), a
//! memory hog confined to them, and SKIP reporting.
//!
//! Safety on a shared machine: every cgroup made here lives under `monitor-test-<pid>`;
//! every process killed here was spawned here; every hog runs under a memory limit.
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use monitor::observe::{CgroupLayout, CgroupVersion};

pub mod chaos;
pub mod containerd;
pub mod installed;
pub mod kubelet_laid;
pub mod node;
pub mod oci;
pub mod registry;
pub mod trust;
pub mod two_agents;
pub mod wedged;

/// Kernel features a test may need. `MONITOR_TEST_REQUIRE` (comma-separated names, set
/// by `cargo xtask test` from what the machine offers) turns a skip of a listed feature
/// into a failure: a path this machine supports must not be skipped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Feature {
    Root,
    Ebpf,
    CgroupV1Memory,
    CgroupV2Memory,
    Psi,
    /// A private containerd can run here: root, containerd, runc, ctr and a static busybox.
    Containerd,
    /// A Prometheus server to scrape the agent (Debian's prometheus package, which
    /// `cargo xtask setup` installs on the host; the VMs' payload has none).
    Prometheus,
}

impl Feature {
    pub fn name(self) -> &'static str {
        match self {
            Feature::Root => "root",
            Feature::Ebpf => "ebpf",
            Feature::CgroupV1Memory => "cgroup-v1-memory",
            Feature::CgroupV2Memory => "cgroup-v2-memory",
            Feature::Psi => "psi",
            Feature::Containerd => "containerd",
            Feature::Prometheus => "prometheus",
        }
    }

    /// Why this machine lacks the feature, or `None` when it has it.
    pub fn missing(self) -> Option<String> {
        match self {
            Feature::Root => {
                (!nix::unistd::geteuid().is_root()).then(|| "not running as root".into())
            }
            Feature::Ebpf => (!Path::new("/sys/kernel/btf/vmlinux").exists()
                && !Path::new("/sys/fs/bpf").exists())
            .then(|| "no BPF support visible (/sys/fs/bpf)".into()),
            Feature::CgroupV1Memory => match layout() {
                Some(l) if l.version == CgroupVersion::V1 => None,
                _ => Some("the memory controller is not on cgroup v1 here".into()),
            },
            Feature::CgroupV2Memory => match layout() {
                Some(l) if l.version == CgroupVersion::V2 => None,
                _ => Some(
                    "the memory controller is not on cgroup v2 here (the VM suite covers it)"
                        .into(),
                ),
            },
            Feature::Psi => std::fs::read_to_string("/proc/pressure/memory")
                .err()
                .map(|e| format!("no PSI (/proc/pressure/memory: {e})")),
            // Set by `cargo xtask vm` in the boots that carry no containerd, with why.
            Feature::Containerd => std::env::var("MONITOR_TEST_NO_CONTAINERD")
                .ok()
                .or_else(|| {
                    Feature::Root
                        .missing()
                        .map(|reason| format!("a private containerd needs root ({reason})"))
                        .or_else(containerd::available)
                }),
            Feature::Prometheus => std::process::Command::new("prometheus")
                .arg("--version")
                .output()
                .err()
                .map(|e| format!("no prometheus server to run ({e})")),
        }
    }
}

fn layout() -> Option<CgroupLayout> {
    CgroupLayout::detect().ok()
}

/// Says that `test` is skipped and why: `SKIP: <test>: <reason>`, straight to the process's
/// stdout (the test harness captures `println!` of passing tests, and `cargo xtask test`
/// counts these lines).
pub fn skip(test: &str, reason: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stdout(), "SKIP: {test}: {reason}");
}

/// Returns `true` when every feature is present. Otherwise prints `SKIP: <test>: <reason>`
/// and returns `false` — or panics when the feature is required on this machine.
pub fn require(test: &str, features: &[Feature]) -> bool {
    // Inside `cargo xtask vm` (MONITOR_TEST_VM is set) the VM offers all of these.
    let in_vm = std::env::var_os("MONITOR_TEST_VM").is_some();
    let required: Vec<String> = std::env::var("MONITOR_TEST_REQUIRE")
        .unwrap_or_else(|_| {
            if in_vm && std::env::var_os("MONITOR_TEST_NO_CONTAINERD").is_some() {
                "root,cgroup-v2-memory,psi,ebpf".into()
            } else if in_vm {
                "root,cgroup-v2-memory,psi,ebpf,containerd".into()
            } else {
                String::new()
            }
        })
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    for feature in features {
        if let Some(reason) = feature.missing() {
            if required.iter().any(|r| r == feature.name()) {
                panic!(
                    "{test}: feature {} is required on this machine but missing: {reason}",
                    feature.name()
                );
            }
            skip(test, &reason);
            return false;
        }
    }
    true
}

/// Initialises test logging once (RUST_LOG controls it).
pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_test_writer()
        .try_init();
}

/// The name of this test process's parent cgroup.
pub fn parent_name() -> String {
    format!("monitor-test-{}", std::process::id())
}

pub use monitor_bench::util::{field as log_field, join_before_exec, remove_cgroup_dir};

/// Mount points of every cgroup hierarchy (v1 controllers and cgroup2).
pub fn cgroup_mounts() -> Vec<PathBuf> {
    let mut mounts = monitor_bench::util::cgroup_mounts().0;
    mounts.sort();
    mounts.dedup();
    mounts
}

/// Removes `monitor-test-<pid>` parents left by test processes that are gone (a killed
/// run cannot clean up after itself). Only our own naming pattern is touched.
pub fn cleanup_stale() {
    for root in cgroup_mounts() {
        let Ok(entries) = std::fs::read_dir(&root) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().to_string();
            // `monitor_test_<pid>.slice`: the same parent in the systemd driver's naming.
            let Some(pid) = name
                .strip_prefix("monitor-test-")
                .or_else(|| {
                    name.strip_prefix("monitor_test_")
                        .and_then(|n| n.strip_suffix(".slice"))
                })
                .and_then(|p| p.parse::<u32>().ok())
            else {
                continue;
            };
            if Path::new(&format!("/proc/{pid}")).exists() {
                continue;
            }
            remove_tree(&entry.path());
        }
    }
}

/// Kills every process in a cgroup tree we created, then removes it bottom-up.
fn remove_tree(dir: &Path) {
    if let Err(e) = monitor_bench::util::remove_cgroup_tree(dir) {
        eprintln!(
            "warning: could not remove test cgroup {}: {e}",
            dir.display()
        );
    }
}

/// The OOM kill counter of a memory cgroup directory (`oom_kill` of memory.oom_control on
/// v1, memory.events on v2: hierarchical, a kill below counts); 0 when unreadable.
pub fn memcg_oom_kills(dir: &Path, version: CgroupVersion) -> u64 {
    let file = match version {
        CgroupVersion::V1 => "memory.oom_control",
        CgroupVersion::V2 => "memory.events",
    };
    let text = std::fs::read_to_string(dir.join(file)).unwrap_or_default();
    monitor::observe::parse::flat_keyed(&text)
        .get("oom_kill")
        .copied()
        .unwrap_or(0)
}

/// memory.available as the agent computes it on cgroup v2: MemFree + Inactive(file)
/// (capacity − (MemTotal − MemFree − inactive file)).
pub fn node_available_v2() -> u64 {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
    let map = monitor::observe::parse::flat_keyed(&meminfo);
    map["MemFree"] + map["Inactive(file)"]
}

/// OOM kills on the whole node since boot (`oom_kill` of /proc/vmstat).
pub fn node_oom_kills() -> u64 {
    let text = std::fs::read_to_string("/proc/vmstat").unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("oom_kill "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// Counts the kernel's OOM kills among pods from the moment it is made.
///
/// cgroup v2 counts a kill in the victim's cgroup and every ancestor (memory.events), so
/// the pods cgroup's counter holds them all. cgroup v1 counts it only in the victim's
/// own cgroup, which goes with its pod: there the node's count since the start stands in
/// (the integration tests run one at a time; a kill elsewhere on the node fails a test,
/// never hides one).
#[derive(Clone, Debug)]
pub struct OomCounter {
    /// The pods cgroup's directory in the memory hierarchy.
    pods_dir: PathBuf,
    version: CgroupVersion,
    /// v1: the node's count when made.
    node_at_start: u64,
}

impl OomCounter {
    /// For the pods cgroup `pods_relative` (relative to the memory hierarchy's root).
    pub fn new(pods_relative: &str) -> OomCounter {
        let layout = monitor::observe::CgroupLayout::detect().expect("cgroup layout");
        OomCounter {
            pods_dir: layout.memory_root.join(pods_relative),
            version: layout.version,
            node_at_start: node_oom_kills(),
        }
    }

    /// OOM kills among the pods so far (v1: on the node since this counter was made).
    pub fn kills(&self) -> u64 {
        match self.version {
            CgroupVersion::V2 => memcg_oom_kills(&self.pods_dir, self.version),
            CgroupVersion::V1 => node_oom_kills().saturating_sub(self.node_at_start),
        }
    }
}

/// Stops an agent the test started: SIGTERM (pods keep running, as with the kubelet),
/// SIGKILL after 10 s.
pub fn stop_agent(mut child: Child) {
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
    let deadline = Instant::now() + Duration::from_secs(10);
    while child.try_wait().ok().flatten().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Kills an agent the test started with SIGKILL, as a crash or the OOM killer would, and
/// reaps it.
pub fn crash_agent(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// The pod records an agent keeps in `state_dir` (none when it has none yet).
pub fn pod_records(state_dir: &Path) -> Vec<monitor::runtime::store::PodRecord> {
    monitor::runtime::store::StateStore::open(state_dir)
        .map(|s| s.load_all().0)
        .unwrap_or_default()
}

/// A cgroup of our own in the memory hierarchy, mirrored in the cgroup2 hierarchy when one
/// is mounted beside v1 (so eBPF cgroup ids and per-cgroup PSI name it too). Removed on
/// drop, with every process in it killed first.
pub struct TestCgroup {
    /// Path relative to the memory root, e.g. `monitor-test-123/hog`.
    pub relative: String,
    /// Directory in the memory hierarchy.
    pub memory_dir: PathBuf,
    /// Directory in the cgroup2 hierarchy (v2 hosts: the same as `memory_dir`).
    pub unified_dir: Option<PathBuf>,
    pub version: CgroupVersion,
    parents: Vec<PathBuf>,
}

impl TestCgroup {
    /// Creates `<root>/monitor-test-<pid>/<name>` with a memory limit.
    pub fn new(name: &str, memory_limit: u64) -> TestCgroup {
        cleanup_stale();
        let layout = layout().expect("a cgroup hierarchy with the memory controller");
        let parent = parent_name();
        let relative = format!("{parent}/{name}");
        let mut parents = Vec::new();
        let mut create = |root: &Path| -> PathBuf {
            let p = root.join(&parent);
            if !p.exists() {
                std::fs::create_dir(&p).unwrap_or_else(|e| panic!("creating {}: {e}", p.display()));
            }
            if layout.version == CgroupVersion::V2 && root == layout.memory_root {
                // Let children use the memory (and pids) controllers.
                let _ = std::fs::write(root.join("cgroup.subtree_control"), "+memory +pids");
                let _ = std::fs::write(p.join("cgroup.subtree_control"), "+memory +pids");
            }
            parents.push(p.clone());
            let dir = p.join(name);
            if dir.exists() {
                remove_tree(&dir);
            }
            std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
            dir
        };
        let memory_dir = create(&layout.memory_root);
        let unified_dir = match (&layout.unified_root, layout.version) {
            (Some(_), CgroupVersion::V2) => Some(memory_dir.clone()),
            (Some(root), CgroupVersion::V1) => Some(create(root)),
            (None, _) => None,
        };
        let limit_file = match layout.version {
            CgroupVersion::V1 => "memory.limit_in_bytes",
            CgroupVersion::V2 => "memory.max",
        };
        let cg = TestCgroup {
            relative,
            memory_dir,
            unified_dir,
            version: layout.version,
            parents,
        };
        cg.write(limit_file, &memory_limit.to_string());
        cg
    }

    /// The memory cgroup `names` below this one, each inside the one before (a pod's
    /// container: `&["pod", "container"]`), created with the memory controller on for
    /// the children on cgroup v2; removed with this cgroup.
    pub fn descendant(&self, names: &[&str]) -> PathBuf {
        let mut dir = self.memory_dir.clone();
        for name in names {
            if self.version == CgroupVersion::V2 {
                let control = dir.join("cgroup.subtree_control");
                std::fs::write(&control, "+memory")
                    .unwrap_or_else(|e| panic!("writing {}: {e}", control.display()));
            }
            dir = dir.join(name);
            std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
        }
        dir
    }

    /// Writes a file in the memory directory.
    pub fn write(&self, file: &str, value: &str) {
        let path = self.memory_dir.join(file);
        std::fs::write(&path, value)
            .unwrap_or_else(|e| panic!("writing {value:?} to {}: {e}", path.display()));
    }

    pub fn read(&self, file: &str) -> String {
        let path = self.memory_dir.join(file);
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
    }

    /// The cgroup2 id (inode number of the unified directory), as eBPF reports it.
    pub fn unified_id(&self) -> Option<u64> {
        use std::os::unix::fs::MetadataExt;
        self.unified_dir
            .as_ref()
            .and_then(|d| std::fs::metadata(d).ok())
            .map(|m| m.ino())
    }

    /// Files a process must write "0" to, to join this cgroup in every hierarchy.
    pub fn procs_files(&self) -> Vec<PathBuf> {
        let mut files = vec![self.memory_dir.join("cgroup.procs")];
        if let Some(u) = &self.unified_dir
            && *u != self.memory_dir
        {
            files.push(u.join("cgroup.procs"));
        }
        files
    }

    /// Spawns `command` inside this cgroup: the child joins it before exec, so not one
    /// page it touches is charged elsewhere.
    pub fn spawn(&self, mut command: Command) -> Child {
        join_before_exec(&mut command, &self.procs_files());
        command
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {command:?} in {}: {e}", self.relative))
    }

    /// The OOM kills this cgroup saw (v1 memory.oom_control / v2 memory.events).
    pub fn oom_kills(&self) -> u64 {
        let text = match self.version {
            CgroupVersion::V1 => self.read("memory.oom_control"),
            CgroupVersion::V2 => self.read("memory.events"),
        };
        monitor::observe::parse::flat_keyed(&text)
            .get("oom_kill")
            .copied()
            .unwrap_or(0)
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        remove_tree(&self.memory_dir);
        if let Some(u) = &self.unified_dir {
            remove_tree(u);
        }
        // The parent goes when its last child does.
        for parent in &self.parents {
            let empty = std::fs::read_dir(parent)
                .map(|d| {
                    !d.flatten()
                        .any(|e| e.file_type().map(|t| t.is_dir()).unwrap_or(false))
                })
                .unwrap_or(false);
            if empty {
                remove_tree(parent);
            }
        }
    }
}

/// Removes this process's `monitor-test-<pid>` tree in every hierarchy on drop (for
/// tests whose cgroups an agent creates), killing what runs inside first.
pub struct TestTrees;

impl TestTrees {
    /// The cgroup root an agent under test should use: `monitor-test-<pid>/<name>`.
    pub fn root(name: &str) -> String {
        cleanup_stale();
        format!("{}/{name}", parent_name())
    }
}

impl Drop for TestTrees {
    fn drop(&mut self) {
        for mount in cgroup_mounts() {
            let dir = mount.join(parent_name());
            if dir.exists() {
                remove_tree(&dir);
            }
        }
    }
}

/// A child process killed (SIGKILL) and reaped when dropped, unless it has already
/// exited: a test that fails halfway leaves no agent running behind it.
pub struct KillOnDrop(pub std::process::Child);

impl std::ops::Deref for KillOnDrop {
    type Target = std::process::Child;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for KillOnDrop {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// `monitor run --config CONFIG`, uncoloured, stdin closed, stdout and stderr appended
/// to `log`; the caller adds what else it needs and spawns it.
pub fn monitor_run(config: &Path, log: &std::fs::File) -> Command {
    monitor_bench::util::monitor_run(&helper_binary("monitor"), config, log).expect("log file")
}

/// `monitor pods` against the agent on `socket`: its table.
pub fn agent_pods(socket: &Path) -> String {
    let out = std::process::Command::new(helper_binary("monitor"))
        .args(["pods", "--socket"])
        .arg(socket)
        .env("NO_COLOR", "1")
        .output()
        .expect("monitor pods");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `monitor metrics` against the agent serving `socket`: the exposition text.
pub fn agent_metrics(socket: &Path) -> String {
    let out = std::process::Command::new(helper_binary("monitor"))
        .args(["metrics", "--socket"])
        .arg(socket)
        .env("NO_COLOR", "1")
        .output()
        .expect("monitor metrics");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Finds a helper binary: beside the test executables (cargo's target directory), else on
/// PATH (the VM puts helpers in /bin).
pub fn helper_binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let beside = exe
        .parent()
        .and_then(Path::parent)
        .map(|dir| dir.join(name));
    if let Some(path) = beside.filter(|p| p.exists()) {
        return path;
    }
    std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .map(|dir| dir.join(name))
        .find(|p| p.exists())
        .unwrap_or_else(|| panic!("{name} is not built: run the tests with `cargo xtask test`"))
}

/// The memory hog (tests/src/bin/hog.rs) as a command.
pub fn hog(args: &[&str]) -> Command {
    let path = helper_binary("hog");
    let mut command = Command::new(path);
    command.args(args).stdin(Stdio::null());
    command
}

/// Waits until `check` returns true, or panics with `what` after `timeout`.
pub fn wait_until(what: &str, timeout: Duration, check: impl FnMut() -> bool) {
    if let Err(err) = monitor_bench::util::wait(what, timeout, check) {
        panic!("{err}");
    }
}

/// The kubelet's default configuration with its memory thresholds only: its default disk
/// thresholds (nodefs.available<10%, imagefs.available<15%) would read this host's own
/// disk, whose free space a test does not control, and put the test node under disk
/// pressure on a machine that happens to be nearly full.
pub fn memory_only_kubelet_config() -> monitor::config::kubelet::KubeletConfig {
    use monitor::policy::signal::Signal;
    let mut config = monitor::config::kubelet::default_kubelet_config();
    config.eviction.thresholds.retain(|t| {
        matches!(
            t.signal,
            Signal::MemoryAvailable | Signal::AllocatableMemoryAvailable
        )
    });
    config
}

/// The soft and hard values of one line of `/proc/<pid>/limits` ("Max open files").
pub fn proc_limit(pid: u32, name: &str) -> (String, String) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits"))
        .unwrap_or_else(|e| panic!("reading /proc/{pid}/limits: {e}"));
    let line = limits
        .lines()
        .find(|l| l.starts_with(name))
        .unwrap_or_else(|| panic!("no {name} in {limits}"));
    let mut values = line[name.len()..].split_whitespace();
    let (soft, hard) = (values.next().unwrap(), values.next().unwrap());
    (soft.to_string(), hard.to_string())
}

/// A field of a `stat` file (`/proc/<pid>/stat`, `/proc/<pid>/task/<tid>/stat`) by its
/// number in proc(5), counted after the command (which may hold spaces); `None` when the
/// file is gone.
pub fn stat_field(stat_file: &std::path::Path, field: usize) -> Option<String> {
    let stat = std::fs::read_to_string(stat_file).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(field - 3).map(str::to_string)
}
