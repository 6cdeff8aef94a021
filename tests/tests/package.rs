//! The Debian package `cargo xtask dist` builds, used as a node's operator would: installed
//! with dpkg, the agent started as its systemd unit says, pods evicted, status and metrics
//! read, then removed and purged with nothing left behind.
//!
//! It installs files system-wide (/usr, /etc, /lib, /var), so it runs only inside the VM
//! (`cargo xtask vm --test package`, `cargo xtask dist --test-vm`), whose run packs the
//! package at /packages/monitor.deb. The guest has busybox's dpkg and no systemd: the
//! test starts `ExecStart` itself with what the unit sets that a process can carry
//! (capability bounding set, no_new_privs, resource limits, oom_score_adj, the state,
//! runtime and logs directories). The unit itself, run by systemd with its mount
//! sandboxing, is tested on the systemd node (`systemd_node.rs`).
use std::collections::BTreeSet;
use std::ffi::CString;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::str::FromStr;
use std::time::Duration;

use monitor_tests::installed::{
    CGROUP_ROOT, CONFIG, PACKAGE, PODS, SOCKET, STANDARD_DIRS, STATE, UNIT,
    assert_notifiers_run_fifo, bound_the_node, cgroups, dpkg, field, filesystem, may_install,
    metrics, read, run, start_web_and_batch, wait_for_record,
};
use monitor_tests::wait_until;
use nix::sys::resource::{Resource, setrlimit};

/// The configuration the package installs loads as it is, naming the directories the
/// unit creates and purging removes. Runs everywhere: it installs nothing.
#[test]
fn the_packaged_config_loads_with_the_units_directories() {
    let text = include_str!("../../packaging/config.yaml");
    let loaded = monitor::config::parse_agent_config(text, "packaging/config.yaml", &[])
        .expect("the packaged config loads");
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    let settings = &loaded.agent.settings;
    assert_eq!(settings.state_dir, Path::new(STATE));
    assert_eq!(settings.socket, Path::new(SOCKET));
    assert_eq!(settings.socket, Path::new(monitor::api::DEFAULT_SOCKET));
    assert_eq!(settings.pod_log_dir, Path::new("/var/log/monitor/pods"));
    assert_eq!(settings.cgroup_root, CGROUP_ROOT);
    assert_eq!(loaded.kubelet.static_pod_path.as_deref(), Some(PODS));
}

#[test]
fn the_package_installs_evicts_and_purges_without_a_trace() {
    let name = "the_package_installs_evicts_and_purges_without_a_trace";
    if !may_install(
        name,
        "MONITOR_TEST_VM",
        "in the VM (cargo xtask dist --test-vm)",
    ) {
        return;
    }

    // The guest has no dpkg database, and no /run or /var/log for the unit's directories.
    for dir in ["/var/lib/dpkg/info", "/var/log", "/run"] {
        std::fs::create_dir_all(dir).unwrap();
    }
    if !Path::new("/var/lib/dpkg/status").exists() {
        std::fs::write("/var/lib/dpkg/status", "").unwrap();
    }
    let files_before = filesystem(&[]);
    let cgroups_before = cgroups();

    // Install.
    let installed = dpkg(&["-i", PACKAGE]);
    println!("dpkg -i {PACKAGE}:\n{installed}");
    for file in [
        "/usr/bin/monitor",
        UNIT,
        CONFIG,
        "/usr/share/man/man8/monitor.8.gz",
        "/usr/share/bash-completion/completions/monitor",
        "/usr/share/zsh/vendor-completions/_monitor",
        "/usr/share/fish/vendor_completions.d/monitor.fish",
        "/usr/share/doc/monitor/copyright",
        "/usr/share/doc/monitor/examples/prometheus/monitor.rules.yaml",
        "/usr/share/doc/monitor/examples/grafana/monitor.dashboard.json",
    ] {
        assert!(Path::new(file).is_file(), "{file} not installed");
    }
    assert!(Path::new(PODS).is_dir());
    let version = run("/usr/bin/monitor", &["--version"]);
    assert!(version.starts_with("monitor "), "{version}");

    bound_the_node();

    // Start the agent as the unit does.
    let unit = Unit::read(Path::new(UNIT));
    let log_path = PathBuf::from("agent.log");
    let mut agent = Agent(Some(unit.start(&log_path)), log_path.clone());
    let pid = agent.pid();
    wait_until(
        "the agent's socket (the unit's RuntimeDirectory)",
        Duration::from_secs(60),
        || Path::new(SOCKET).exists() || agent.exited(),
    );
    assert!(!agent.exited(), "the agent exited:\n{}", read(&log_path));
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    assert_eq!(
        field(&status, "CapEff:"),
        Some(unit.capability_mask()),
        "the agent holds exactly the unit's capabilities\n{status}"
    );
    assert_eq!(field(&status, "NoNewPrivs:"), Some(1));
    let oom_score_adj = std::fs::read_to_string(format!("/proc/{pid}/oom_score_adj")).unwrap();
    assert_eq!(oom_score_adj.trim(), "-999");

    // With only those capabilities and limits the agent has eBPF, real-time priority and
    // locked memory. The API answers before the sources have started: wait for them.
    let ebpf_up = "monitor_source_up{source=\"ebpf\"} 1";
    let mut metrics_text = String::new();
    wait_until("the eBPF source's state", Duration::from_secs(60), || {
        metrics_text = metrics();
        metrics_text.contains("monitor_source_up{source=\"ebpf\"}")
    });
    assert!(
        metrics_text.lines().any(|l| l == ebpf_up),
        "the eBPF source runs with the unit's capabilities\n{metrics_text}"
    );
    let log = read(&log_path);
    assert!(log.contains("memory locked"), "{log}");
    // Every kernel notifier thread runs SCHED_FIFO under the unit's limits, as the
    // kernel itself reports it.
    assert_notifiers_run_fifo(pid, &log);

    // Pods: a Guaranteed service and a best-effort hog that runs past the bounded node.
    let oom = monitor_tests::OomCounter::new(&format!("{CGROUP_ROOT}/kubepods"));
    start_web_and_batch("/bin/hog");
    let evicted = wait_for_record(
        "batch",
        Duration::from_secs(90),
        || read(&log_path),
        |r| r.phase == monitor::runtime::store::Phase::Failed,
    );
    assert_eq!(evicted.reason.as_deref(), Some("Evicted"), "{evicted:?}");
    assert_eq!(
        oom.kills(),
        0,
        "the kernel OOM killer fired in the pods cgroup\n{}",
        read(&log_path)
    );
    let web = wait_for_record(
        "web",
        Duration::from_secs(30),
        || read(&log_path),
        |r| r.phase == monitor::runtime::store::Phase::Running,
    );
    assert!(web.containers[0].pid.is_some(), "{web:?}");
    // The unit grants the agent real-time priority and unlimited locked memory for its
    // notifier threads; a pod gets neither, and runs on the ordinary scheduler.
    let web_pid = web.containers[0].pid.unwrap();
    let soft = |name| monitor_tests::proc_limit(web_pid, name).0;
    assert_eq!(soft("Max realtime priority"), "0");
    let locked = soft("Max locked memory");
    assert!(
        locked.parse::<u64>().is_ok_and(|b| b <= 8 << 20),
        "locked memory {locked}"
    );
    let stat = PathBuf::from(format!("/proc/{web_pid}/stat"));
    assert_eq!(
        monitor_tests::stat_field(&stat, 41).as_deref(),
        Some("0"),
        "policy"
    );

    // What an operator reads: `monitor status` and `/metrics` on the default socket.
    let status = run("/usr/bin/monitor", &["status"]);
    println!("monitor status:\n{status}");
    assert!(status.contains("allocatableMemory.available"), "{status}");
    let ebpf = status
        .lines()
        .find(|l| l.trim_start().starts_with("ebpf "))
        .unwrap_or_default();
    assert!(
        ebpf.contains("running") && !ebpf.contains("not attached"),
        "every eBPF program attached with the unit's capabilities: {ebpf}"
    );
    let samples = |metrics_text: &str, family: &str| -> Vec<(String, f64)> {
        metrics_text
            .lines()
            .filter(|l| l.starts_with(family))
            .filter_map(|l| l.rsplit_once(' '))
            .filter(|(series, _)| series == &family || series[family.len()..].starts_with('{'))
            .map(|(series, value)| (series.to_string(), value.parse().unwrap_or(f64::NAN)))
            .collect()
    };
    let evictions = |metrics_text: &str| -> f64 {
        samples(metrics_text, "monitor_evictions_total")
            .iter()
            .map(|s| s.1)
            .sum()
    };
    // The record turns Failed when the pod is stopped; the eviction is counted when it
    // ends (the pod's processes gone), a moment later.
    let mut metrics_text = metrics();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while evictions(&metrics_text) < 1.0 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        metrics_text = metrics();
    }
    let samples = |family: &str| samples(&metrics_text, family);
    assert_eq!(
        evictions(&metrics_text),
        1.0,
        "one eviction counted\n{metrics_text}"
    );
    let pod_oom = samples("monitor_kernel_oom_kills_total");
    assert!(
        !pod_oom.is_empty() && pod_oom.iter().all(|s| s.1 == 0.0),
        "no kernel OOM kill of a pod: {pod_oom:?}"
    );
    assert_eq!(
        samples("monitor_node_oom_kills_total").len(),
        1,
        "{metrics_text}"
    );
    println!("monitor metrics (OOM kills and evictions):");
    for line in metrics_text.lines().filter(|l| {
        l.starts_with("monitor_kernel_oom_kills_total")
            || l.starts_with("monitor_node_oom_kills_total")
            || l.starts_with("monitor_evictions_total")
    }) {
        println!("  {line}");
    }

    // Stop: the pods' manifests go first (the agent stops them), then the agent, as
    // `systemctl stop` does (SIGTERM).
    let web_pid = web.containers[0].pid.unwrap();
    for file in ["web.yaml", "batch.yaml"] {
        std::fs::remove_file(Path::new(PODS).join(file)).unwrap();
    }
    wait_until("the pods stopped", Duration::from_secs(60), || {
        monitor_tests::pod_records(Path::new(STATE)).is_empty()
            && !Path::new(&format!("/proc/{web_pid}")).exists()
    });
    agent.stop();

    // Remove: the program goes, the edited configuration and the state stay.
    let removed = dpkg(&["-r", "monitor"]);
    println!("dpkg -r monitor:\n{removed}");
    for gone in ["/usr/bin/monitor", UNIT, "/usr/share/man/man8/monitor.8.gz"] {
        assert!(!Path::new(gone).exists(), "{gone} left after dpkg -r");
    }
    assert!(Path::new(CONFIG).exists(), "dpkg -r keeps the conffile");
    assert!(Path::new(STATE).exists(), "dpkg -r keeps the state");

    // Purge: nothing of it left, in files or cgroups.
    let purged = dpkg(&["-P", "monitor"]);
    println!("dpkg -P monitor:\n{purged}");
    let files_after = filesystem(&[]);
    let cgroups_after = cgroups();
    // busybox's dpkg does not track who owns a directory: it may keep or drop an empty
    // standard one (/usr/bin, ...) that every node has anyway. Files in them still count.
    let standard = |p: &&PathBuf| !STANDARD_DIRS.iter().any(|d| p.as_path() == Path::new(d));
    let files_before: BTreeSet<PathBuf> = files_before.iter().filter(standard).cloned().collect();
    let files_after: BTreeSet<PathBuf> = files_after.iter().filter(standard).cloned().collect();
    let left: Vec<_> = files_after.difference(&files_before).collect();
    let lost: Vec<_> = files_before.difference(&files_after).collect();
    assert!(
        left.is_empty() && lost.is_empty(),
        "after purge: left behind {left:?}, removed though not the package's {lost:?}"
    );
    assert_eq!(
        cgroups_after, cgroups_before,
        "the agent's cgroups are gone after purge"
    );
}

/// The agent process the test started and its log; stopped on drop whatever happens,
/// its log shown when the test failed.
struct Agent(Option<Child>, PathBuf);

impl Agent {
    fn pid(&self) -> u32 {
        self.0.as_ref().expect("running").id()
    }

    fn exited(&mut self) -> bool {
        self.0
            .as_mut()
            .is_none_or(|c| c.try_wait().ok().flatten().is_some())
    }

    fn stop(&mut self) {
        if let Some(child) = self.0.take() {
            monitor_tests::stop_agent(child);
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.stop();
        if std::thread::panicking() {
            println!("agent log ({}):\n{}", self.1.display(), read(&self.1));
        }
    }
}

/// What the systemd unit sets for its process.
struct Unit {
    exec_start: Vec<String>,
    /// Capability numbers of CapabilityBoundingSet.
    capabilities: Vec<u8>,
    /// (resource, value) of the Limit*= keys.
    limits: Vec<(Resource, libc::rlim_t)>,
    oom_score_adj: String,
    no_new_privileges: bool,
    /// (directory, mode) of StateDirectory, RuntimeDirectory and LogsDirectory.
    directories: Vec<(PathBuf, u32)>,
}

impl Unit {
    fn read(path: &Path) -> Unit {
        let text = std::fs::read_to_string(path).unwrap();
        let values = |key: &str| monitor_bench::util::unit_values(&text, key);
        let one = |key: &str| -> Option<String> {
            let all = values(key);
            assert!(all.len() <= 1, "{key} set {} times in {UNIT}", all.len());
            all.into_iter().next()
        };
        let exec_start: Vec<String> = one("ExecStart")
            .expect("ExecStart")
            .split_whitespace()
            .map(str::to_string)
            .collect();
        let capabilities = one("CapabilityBoundingSet")
            .expect("CapabilityBoundingSet")
            .split_whitespace()
            .map(|name| {
                caps::Capability::from_str(name)
                    .unwrap_or_else(|e| panic!("{UNIT}: CapabilityBoundingSet {name}: {e}"))
                    .index()
            })
            .collect();
        let limit = |value: String| -> libc::rlim_t {
            if value == "infinity" {
                libc::RLIM_INFINITY
            } else {
                value
                    .parse()
                    .unwrap_or_else(|e| panic!("{UNIT}: limit {value}: {e}"))
            }
        };
        let mut limits = Vec::new();
        for (key, resource) in [
            ("LimitRTPRIO", Resource::RLIMIT_RTPRIO),
            ("LimitMEMLOCK", Resource::RLIMIT_MEMLOCK),
            ("LimitNOFILE", Resource::RLIMIT_NOFILE),
        ] {
            if let Some(value) = one(key) {
                limits.push((resource, limit(value)));
            }
        }
        let mode = |key: &str, default: u32| -> u32 {
            one(key).map_or(default, |m| {
                u32::from_str_radix(&m, 8).unwrap_or_else(|e| panic!("{UNIT}: {key}={m}: {e}"))
            })
        };
        let mut directories = Vec::new();
        for (key, base) in [
            ("StateDirectory", "/var/lib"),
            ("RuntimeDirectory", "/run"),
            ("LogsDirectory", "/var/log"),
        ] {
            if let Some(name) = one(key) {
                directories.push((
                    Path::new(base).join(name),
                    mode(&format!("{key}Mode"), 0o755),
                ));
            }
        }
        Unit {
            exec_start,
            capabilities,
            limits,
            oom_score_adj: one("OOMScoreAdjust").unwrap_or_else(|| "0".into()),
            no_new_privileges: one("NoNewPrivileges").as_deref() == Some("yes"),
            directories,
        }
    }

    /// CapEff of a root process whose bounding set is the unit's.
    fn capability_mask(&self) -> u64 {
        self.capabilities.iter().map(|c| 1u64 << c).sum()
    }

    /// Starts ExecStart as systemd would for this unit, output to `log` (the journal's
    /// stand-in).
    fn start(&self, log: &Path) -> Child {
        for (dir, mode) in &self.directories {
            std::fs::create_dir_all(dir).unwrap();
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(*mode)).unwrap();
        }
        let last_cap: u8 = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
            .expect("cap_last_cap")
            .trim()
            .parse()
            .expect("cap_last_cap is a number");
        let drop: Vec<libc::c_ulong> = (0..=last_cap)
            .filter(|c| !self.capabilities.contains(c))
            .map(libc::c_ulong::from)
            .collect();
        let limits = self.limits.clone();
        let oom_path = CString::new("/proc/self/oom_score_adj").unwrap();
        let oom = self.oom_score_adj.clone().into_bytes();
        let no_new_privileges = self.no_new_privileges;
        let log = std::fs::File::create(log).unwrap();
        let mut command = Command::new(&self.exec_start[0]);
        command
            .args(&self.exec_start[1..])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        // SAFETY: the closure runs in the forked child before exec and makes only system
        // calls (setrlimit, open, write, close, prctl) on data prepared before the fork.
        unsafe {
            command.pre_exec(move || {
                for (resource, value) in &limits {
                    setrlimit(*resource, *value, *value)?;
                }
                let fd = libc::open(oom_path.as_ptr(), libc::O_WRONLY);
                if fd < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                let written = libc::write(fd, oom.as_ptr().cast(), oom.len());
                libc::close(fd);
                if written != oom.len() as isize {
                    return Err(std::io::Error::last_os_error());
                }
                if no_new_privileges && libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                for cap in &drop {
                    if libc::prctl(libc::PR_CAPBSET_DROP, *cap, 0, 0, 0) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        command.spawn().expect("start the unit's ExecStart")
    }
}
