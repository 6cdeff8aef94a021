//! A node for one test: the `monitor run` binary on a bounded node (its pods cgroup has a
//! memory limit), with a temp dir for manifests, state and logs, and a cgroup root under
//! `monitor-test-<pid>` that is removed, with whatever runs in it, when the node drops.
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use monitor::runtime::store::{Phase, PodRecord};
/// A disk with real, reclaimable page cache, shared with the bench.
pub use monitor_bench::util::LoopDisk;

use crate::{TestTrees, monitor_run};

pub const MIB: u64 = 1 << 20;

/// Resources of a guaranteed container (requests equal limits).
pub const GUARANTEED: &str = "    resources:\n      requests: {cpu: 200m, memory: 64Mi}\n      limits: {cpu: 200m, memory: 64Mi}\n";
/// Resources of a burstable container (requests below limits).
pub const BURSTABLE: &str =
    "    resources:\n      requests: {cpu: 100m, memory: 32Mi}\n      limits: {memory: 128Mi}\n";

pub struct Node {
    dir: tempfile::TempDir,
    pub cgroup_root: String,
    agent: Option<Child>,
    /// How many times the agent was started; run N logs to agent-N.log.
    pub runs: u32,
    /// A small tmpfs that is the node filesystem (nodefs and the pods' logs), if any.
    pub disk: Option<PathBuf>,
    /// Log in JSON lines (`--log-format json`), for tests that read the events back.
    pub json_logs: bool,
    /// The agent's RUST_LOG (`info` when `None`).
    pub log_filter: Option<String>,
    oom: crate::OomCounter,
    // Dropped last: kills whatever the agent left running in our cgroups, removes them.
    _trees: TestTrees,
}

impl Node {
    /// `eviction` is YAML for the eviction keys of the KubeletConfiguration.
    pub fn new(eviction: &str) -> Node {
        Node::build(eviction, None, "")
    }

    /// A node whose filesystem (nodefs signals and pod logs) is a tmpfs of `disk_mib` MiB
    /// of our own, so disk pressure is real and bounded.
    pub fn with_disk(eviction: &str, disk_mib: u64) -> Node {
        Node::build(eviction, Some(disk_mib), "")
    }

    /// A node with more keys under `monitor:` (YAML lines indented by two spaces).
    pub fn with_agent_keys(eviction: &str, keys: &str) -> Node {
        Node::build(eviction, None, keys)
    }

    fn build(eviction: &str, disk_mib: Option<u64>, agent_keys: &str) -> Node {
        let _trees = TestTrees;
        let cgroup_root = TestTrees::root("node");
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(dir.path().join("pods")).unwrap();
        let disk = disk_mib.map(|mib| {
            let disk = dir.path().join("disk");
            mount_tmpfs(&disk, mib);
            disk
        });
        let logs = match &disk {
            Some(disk) => disk.join("logs"),
            None => dir.path().join("logs"),
        };
        let nodefs = match &disk {
            Some(disk) => format!("  nodefsPath: {}\n", disk.display()),
            None => String::new(),
        };
        let config = format!(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
             staticPodPath: {pods}\n{housekeeping}{eviction}\n\
             monitor:\n  podsMemoryLimit: 512Mi\n  cgroupRoot: {cgroup_root}\n  stateDir: {state}\n  \
             podLogDir: {logs}\n  socket: {sock}\n  restartBackoff: 1s\n{nodefs}{agent_keys}",
            pods = dir.path().join("pods").display(),
            state = dir.path().join("state").display(),
            logs = logs.display(),
            sock = dir.path().join("monitor.sock").display(),
            housekeeping = if eviction.contains("housekeepingInterval") {
                ""
            } else {
                "housekeepingInterval: 10s\n"
            },
        );
        std::fs::write(dir.path().join("config.yaml"), config).unwrap();
        Node {
            dir,
            oom: crate::OomCounter::new(&format!("{cgroup_root}/kubepods")),
            cgroup_root,
            agent: None,
            runs: 0,
            disk,
            json_logs: false,
            log_filter: None,
            _trees,
        }
    }

    /// Bytes available on the node filesystem tmpfs (what nodefs.available reads).
    pub fn disk_available(&self) -> u64 {
        let disk = self.disk.as_ref().expect("a node with a disk");
        let st = nix::sys::statvfs::statvfs(disk).unwrap();
        st.blocks_available() as u64 * st.fragment_size() as u64
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Starts `monitor run`; its log goes to agent-<run>.log.
    pub fn start(&mut self) {
        self.runs += 1;
        let log = std::fs::File::create(self.log_path(self.runs)).unwrap();
        let mut command = monitor_run(&self.path("config.yaml"), &log);
        if self.json_logs {
            command.args(["--log-format", "json"]);
        }
        let child = command
            .env("RUST_LOG", self.log_filter.as_deref().unwrap_or("info"))
            .spawn()
            .expect("start monitor run");
        self.agent = Some(child);
    }

    /// The running agent's pid, if one was started and not stopped.
    pub fn agent_pid(&self) -> Option<u32> {
        self.agent.as_ref().map(Child::id)
    }

    /// Whether the agent started last is still running (false once it exited).
    pub fn agent_running(&mut self) -> bool {
        self.agent
            .as_mut()
            .is_some_and(|child| child.try_wait().ok().flatten().is_none())
    }

    pub fn log_path(&self, run: u32) -> PathBuf {
        self.path(&format!("agent-{run}.log"))
    }

    pub fn log(&self, run: u32) -> String {
        std::fs::read_to_string(self.log_path(run)).unwrap_or_default()
    }

    /// Stops the agent with SIGTERM (pods keep running, as with the kubelet).
    pub fn stop(&mut self) {
        if let Some(child) = self.agent.take() {
            crate::stop_agent(child);
        }
    }

    /// Kills the agent with SIGKILL, as a crash or the OOM killer would, and reaps it.
    pub fn crash(&mut self) {
        if let Some(child) = self.agent.take() {
            crate::crash_agent(child);
        }
    }

    /// Writes a manifest into the manifest directory. Written aside and renamed in: the
    /// agent never reads a half-written file.
    pub fn manifest(&self, file: &str, text: &str) {
        let tmp = self.path(&format!(".{file}.tmp"));
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, self.path("pods").join(file)).unwrap();
    }

    /// Removes a manifest: the agent stops and removes its pod.
    pub fn remove_manifest(&self, file: &str) {
        std::fs::remove_file(self.path("pods").join(file))
            .unwrap_or_else(|e| panic!("removing manifest {file}: {e}"));
    }

    pub fn records(&self) -> Vec<PodRecord> {
        crate::pod_records(&self.path("state"))
    }

    pub fn record(&self, name: &str) -> Option<PodRecord> {
        self.records()
            .into_iter()
            .find(|r| r.pod.metadata.name == name)
    }

    /// Waits until every container of the pod has a process, and returns the record.
    pub fn wait_running(&self, name: &str) -> PodRecord {
        let ok = poll(Duration::from_secs(20), || {
            self.record(name).is_some_and(|r| {
                r.phase == Phase::Running && r.containers.iter().all(|c| c.pid.is_some())
            })
        });
        assert!(
            ok,
            "timed out waiting for pod {name} running; agent log:\n{}",
            self.log(self.runs)
        );
        self.record(name).unwrap()
    }

    pub fn wait_phase(&self, name: &str, phase: Phase, timeout: Duration) -> PodRecord {
        let ok = poll(timeout, || {
            self.record(name).is_some_and(|r| r.phase == phase)
        });
        assert!(
            ok,
            "timed out waiting for pod {name} {phase:?}: {:?}; agent log:\n{}",
            self.record(name),
            self.log(self.runs)
        );
        self.record(name).unwrap()
    }

    /// Whether `monitor metrics` against this node's agent has the sample `line`.
    pub fn has_metric(&self, line: &str) -> bool {
        crate::agent_metrics(&self.path("monitor.sock"))
            .lines()
            .any(|l| l == line)
    }

    /// `monitor pods` against this node's agent: its table.
    pub fn pods_table(&self) -> String {
        crate::agent_pods(&self.path("monitor.sock"))
    }

    /// The pods root's OOM kill counter (hierarchical: any pod's OOM kill counts).
    /// The kernel's OOM kills among the pods since this node was made (see
    /// [`crate::OomCounter`]).
    pub fn pods_oom_kills(&self) -> u64 {
        self.oom.kills()
    }

    /// The node's cgroup root in the memory hierarchy.
    pub fn memory_root(&self) -> PathBuf {
        monitor::observe::CgroupLayout::detect()
            .expect("cgroup layout")
            .memory_root
            .join(&self.cgroup_root)
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.stop();
        if let Some(disk) = &self.disk {
            // Lazy: pods still holding log files open are killed when the trees drop.
            let _ = nix::mount::umount2(disk.as_path(), nix::mount::MntFlags::MNT_DETACH);
        }
    }
}

/// Polls `check` every 10 ms until it holds (true) or `timeout` passes (false).
pub fn poll(timeout: Duration, check: impl FnMut() -> bool) -> bool {
    poll_every(timeout, Duration::from_millis(10), check)
}

/// Polls `check` every `pause` until it holds (true) or `timeout` passes (false): for a
/// check that costs a process or a request, which should not run every 10 ms.
pub fn poll_every(timeout: Duration, pause: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while !check() {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(pause);
    }
    true
}

/// Whether a process runs (a zombie does not).
pub fn alive(pid: u32) -> bool {
    // Signal 0: existence check.
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), None).is_ok()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .unwrap_or_default()
            .contains(") Z ")
}

/// A pod manifest in namespace `demo` with one container `main`; `resources` and `extra`
/// (spec keys) are YAML lines as the constants above.
pub fn pod(name: &str, resources: &str, command: &[&str], extra: &str) -> String {
    let command: Vec<String> = command.iter().map(|c| format!("\"{c}\"")).collect();
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: demo\nspec:\n{extra}  containers:\n  - name: main\n    image: none\n    command: [{}]\n{resources}",
        command.join(", ")
    )
}

/// A pod that sleeps.
pub fn sleeper(name: &str, resources: &str) -> String {
    pod(name, resources, &["/bin/sleep", "1000"], "")
}

/// Mounts a tmpfs of `mib` MiB of our own at `dir` (created).
pub fn mount_tmpfs(dir: &Path, mib: u64) {
    std::fs::create_dir_all(dir).expect("tmpfs mount point");
    nix::mount::mount(
        Some("monitor-test"),
        dir,
        Some("tmpfs"),
        nix::mount::MsFlags::MS_NOSUID | nix::mount::MsFlags::MS_NODEV,
        Some(format!("size={mib}m,mode=0700").as_str()),
    )
    .unwrap_or_else(|e| panic!("mounting a tmpfs at {}: {e}", dir.display()));
}

/// Every directory below `dir`, depth first.
pub fn walk_dirs(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if entry.file_type().map(|t| t.is_dir()).unwrap_or(false) {
            out.push(entry.path().display().to_string());
            out.extend(walk_dirs(&entry.path()));
        }
    }
    out
}

/// Writes a file of `mib` MiB at `path` outside any test cgroup and drops it from the page
/// cache, so the first to read it later has every page charged to its own cgroup.
pub fn cold_file(path: &Path, mib: u64) {
    use std::io::Write;
    let mut f = std::fs::File::create(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let block = vec![7u8; MIB as usize];
    for _ in 0..mib {
        f.write_all(&block).expect("write the file");
    }
    f.sync_all().expect("fsync");
    nix::fcntl::posix_fadvise(
        &f,
        0,
        0,
        nix::fcntl::PosixFadviseAdvice::POSIX_FADV_DONTNEED,
    )
    .expect("fadvise");
}
