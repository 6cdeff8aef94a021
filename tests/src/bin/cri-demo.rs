//! `cargo xtask demo --runtime cri`: the agent on a real containerd, in two races.
//!
//! Usage: `cri-demo <monitor binary> [--keep]` (root). Each race starts a private
//! containerd (its own root, state and socket; images built here from busybox) and
//! `monitor run` with `monitor.runtime: cri`.
//!
//! - Disk: the image filesystem is a 256 MiB tmpfs holding three unused images and the
//!   writable layers of a crash-looping job's dead containers. A pod then writes into its
//!   own writable layer until `imagefs.available` falls under its hard threshold; the
//!   agent's node-level reclaim (dead containers, then unused images) must bring it back
//!   above the threshold without evicting any pod.
//! - Memory: on a 1 GiB bounded node, a containerised best-effort job allocates as fast
//!   as the kernel lets it; the agent must evict it (stop and remove its sandbox) before
//!   the kernel OOM killer fires, leaving the guaranteed service alone.
//!
//! Each race prints a timeline and its verdict; the exit status is non-zero when a race
//! failed.
use std::path::{Path, PathBuf};
use std::process::{Child, ExitCode};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use monitor::runtime::cri::{CriClient, MANAGED_LABEL, POD_UID_LABEL, api};
use monitor::runtime::store::{Phase, PodRecord};
use monitor_bench::util::{field, monotonic_ns, wait};
use monitor_tests::TestTrees;
use monitor_tests::containerd::{BUSYBOX_IMAGE, Containerd};
use monitor_tests::oci::OciImage;

const MIB: i64 = 1 << 20;

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let Some(monitor) = args.next().map(PathBuf::from) else {
        eprintln!("usage: cri-demo <monitor binary> [--keep]");
        return ExitCode::from(2);
    };
    let keep = args.any(|a| a == "--keep");
    let mut failed = 0;
    for (name, race) in [
        ("disk", disk_race as fn(&Path, bool) -> Result<()>),
        ("memory", memory_race),
    ] {
        println!("\n=== {name} race on containerd ===");
        match race(&monitor, keep) {
            Ok(()) => println!("{name} race: PASS"),
            Err(err) => {
                failed += 1;
                println!("{name} race: FAIL: {err:#}");
            }
        }
    }
    if failed > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// One node: a private containerd, a directory with the config, manifests, state and
/// the agent's log, a cgroup root, and the agent. Dropping it stops the agent, then
/// containerd (with its containers and images), then removes the cgroups.
struct Node {
    dir: PathBuf,
    keep: bool,
    agent: Option<Child>,
    containerd: Containerd,
    cgroup_root: String,
    _trees: TestTrees,
}

impl Node {
    fn new(name: &str, keep: bool, image_disk_mib: Option<u64>, kubelet: &str) -> Result<Node> {
        let _trees = TestTrees;
        let cgroup_root = TestTrees::root(name);
        let containerd = match image_disk_mib {
            Some(mib) => Containerd::start_with_image_disk(mib),
            None => Containerd::start(),
        }?;
        containerd.track_cgroup_parent(&monitor_tests::parent_name());
        let dir =
            std::env::temp_dir().join(format!("monitor-cri-demo-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("pods"))?;
        let config = format!(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
             staticPodPath: {pods}\ncontainerRuntimeEndpoint: unix://{socket}\n{kubelet}\n\
             monitor:\n  runtime: cri\n  podsMemoryLimit: 1Gi\n  cgroupRoot: {cgroup_root}\n  \
             stateDir: {state}\n  podLogDir: {logs}\n  socket: {sock}\n  restartBackoff: 1s\n",
            pods = dir.join("pods").display(),
            socket = containerd.socket().display(),
            state = dir.join("state").display(),
            logs = dir.join("logs").display(),
            sock = dir.join("monitor.sock").display(),
        );
        std::fs::write(dir.join("config.yaml"), config)?;
        Ok(Node {
            dir,
            keep,
            agent: None,
            containerd,
            cgroup_root,
            _trees,
        })
    }

    fn start(&mut self, monitor: &Path) -> Result<()> {
        let log = std::fs::File::create(self.dir.join("agent.log"))?;
        self.agent = Some(
            monitor_bench::util::monitor_run(monitor, &self.dir.join("config.yaml"), &log)?
                .env("RUST_LOG", "info")
                .spawn()
                .context("starting monitor run")?,
        );
        Ok(())
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("agent.log")).unwrap_or_default()
    }

    fn manifest(&self, name: &str, text: &str) -> Result<()> {
        let tmp = self.dir.join(format!(".{name}.yaml"));
        std::fs::write(&tmp, text)?;
        std::fs::rename(&tmp, self.dir.join("pods").join(format!("{name}.yaml")))?;
        Ok(())
    }

    fn records(&self) -> Vec<PodRecord> {
        monitor_tests::pod_records(&self.dir.join("state"))
    }

    fn record(&self, name: &str) -> Option<PodRecord> {
        self.records()
            .into_iter()
            .find(|r| r.pod.metadata.name == name)
    }

    fn wait_running(&self, name: &str) -> Result<PodRecord> {
        wait(&format!("{name} running"), Duration::from_secs(30), || {
            self.record(name).is_some_and(|r| {
                r.phase == Phase::Running && r.containers.iter().all(|c| c.pid.unwrap_or(0) > 0)
            })
        })
        .with_context(|| format!("agent log:\n{}", tail(&self.log(), 30)))?;
        self.record(name).context("record")
    }

    /// The runtime's containers and sandboxes of ours, and its image tags.
    fn runtime(&self) -> Result<(Vec<api::Container>, Vec<api::PodSandbox>, Vec<String>)> {
        let socket = self.containerd.socket().to_path_buf();
        block_on(async move {
            let client = CriClient::new(&socket)?;
            let ours = |labels: &std::collections::HashMap<String, String>| {
                labels.get(MANAGED_LABEL).is_some_and(|v| v == "true")
            };
            let containers = client.list_containers().await?;
            let sandboxes = client.list_pod_sandboxes().await?;
            let images = client.list_images().await?;
            Ok((
                containers.into_iter().filter(|c| ours(&c.labels)).collect(),
                sandboxes.into_iter().filter(|s| ours(&s.labels)).collect(),
                images.into_iter().flat_map(|i| i.repo_tags).collect(),
            ))
        })
    }

    fn image_fs_available(&self) -> i64 {
        image_fs_available(self.containerd.root())
    }

    fn pods_memory_dir(&self) -> Result<(PathBuf, bool)> {
        let layout = monitor::observe::CgroupLayout::detect()?;
        let v1 = layout.version == monitor::observe::CgroupVersion::V1;
        Ok((
            layout.memory_root.join(&self.cgroup_root).join("kubepods"),
            v1,
        ))
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(agent) = self.agent.take() {
            monitor_tests::stop_agent(agent);
        }
        if self.keep {
            println!("kept {}", self.dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

fn block_on<T>(
    future: impl std::future::Future<Output = Result<T, monitor::runtime::cri::CriError>>,
) -> Result<T> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    Ok(runtime.block_on(future)?)
}

/// The `at_ns` of the first log line after `after_ns` that contains `needle`.
fn logged_at(log: &str, needle: &str, after_ns: u64) -> Option<u64> {
    log.lines().find_map(|l| {
        let at: u64 = field(l, "at_ns")?.parse().ok()?;
        (l.contains(needle) && at >= after_ns).then_some(at)
    })
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

fn pod(name: &str, command: &str, resources: &str, extra: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: demo\nspec:\n{extra}  \
         containers:\n  - name: main\n    image: {BUSYBOX_IMAGE}\n    \
         command: [\"/bin/sh\", \"-c\", {command:?}]\n{resources}"
    )
}

const GUARANTEED: &str = "    resources:\n      requests: {cpu: 100m, memory: 64Mi}\n      limits: {cpu: 100m, memory: 64Mi}\n";

/// A sampler thread: `read()` every millisecond, stamped, until `stop`.
fn sampler(
    stop: Arc<AtomicBool>,
    read: impl Fn() -> i64 + Send + 'static,
) -> std::thread::JoinHandle<Vec<(u64, i64)>> {
    std::thread::spawn(move || {
        let mut samples = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            samples.push((monotonic_ns(), read()));
            std::thread::sleep(Duration::from_millis(1));
        }
        samples
    })
}

fn print_timeline(origin: u64, mut timeline: Vec<(u64, String)>) {
    timeline.sort_by_key(|(at, _)| *at);
    for (at, what) in &timeline {
        println!("  {:>9.1} ms  {what}", (*at as f64 - origin as f64) / 1e6);
    }
}

fn disk_race(monitor: &Path, keep: bool) -> Result<()> {
    const THRESHOLD_MIB: i64 = 64;
    let mut node = Node::new(
        "cri-disk",
        keep,
        Some(256),
        &format!(
            "housekeepingInterval: 1s\nimageMinimumGCAge: 1s\n\
             evictionHard: {{imagefs.available: {THRESHOLD_MIB}Mi, memory.available: 100Mi}}\n\
             evictionMinimumReclaim: {{imagefs.available: 16Mi}}"
        ),
    )?;
    let old = [
        "localhost/tools:1",
        "localhost/release:1",
        "localhost/release:2",
    ];
    for name in old {
        node.containerd
            .import(&OciImage::busybox(name).with_filler(24 << 20))?;
    }
    node.manifest(
        "service",
        &pod("service", "exec sleep 3600", GUARANTEED, ""),
    )?;
    // Each run leaves 8 MiB in its writable layer, then fails: dead containers pile up.
    node.manifest(
        "job",
        &pod(
            "job",
            "dd if=/dev/urandom of=/scratch bs=1M count=8 2>/dev/null; exit 1",
            "",
            "",
        ),
    )?;
    node.start(monitor)?;
    node.wait_running("service")?;
    wait("four dead job containers", Duration::from_secs(60), || {
        node.runtime().is_ok_and(|(containers, _, _)| {
            containers
                .iter()
                .filter(|c| {
                    c.metadata.as_ref().is_some_and(|m| m.name == "main")
                        && c.state == api::ContainerState::ContainerExited as i32
                        && node
                            .record("job")
                            .is_some_and(|r| c.labels.get(POD_UID_LABEL) == Some(&r.uid))
                })
                .count()
                >= 4
        })
    })?;
    let (containers, _, images) = node.runtime()?;
    let dead_before = containers
        .iter()
        .filter(|c| c.state == api::ContainerState::ContainerExited as i32)
        .count();
    let available_before = node.image_fs_available();
    println!(
        "image filesystem: 256 MiB tmpfs, {} MiB available; {} dead containers, images {:?}",
        available_before / MIB,
        dead_before,
        images
    );

    // The writer: 1 MiB every 20 ms into its own writable layer, 160 MiB in all.
    let stop = Arc::new(AtomicBool::new(false));
    let root = node.containerd.root().to_path_buf();
    let samples = sampler(stop.clone(), move || image_fs_available(&root));
    let origin = monotonic_ns();
    node.manifest(
        "writer",
        &pod(
            "writer",
            "for i in $(seq 160); do dd if=/dev/zero of=/data bs=1M count=1 seek=$i conv=notrunc 2>/dev/null; sleep 0.02; done; exec sleep 3600",
            "",
            "",
        ),
    )?;
    let threshold = THRESHOLD_MIB * MIB;
    let relieved = wait(
        "the image filesystem relieved",
        Duration::from_secs(60),
        || {
            logged_at(
                &node.log(),
                "node-level reclaim for ephemeral-storage",
                origin,
            )
            .is_some()
                && node.image_fs_available() > threshold
        },
    );
    // Let the writer finish, then look.
    std::thread::sleep(Duration::from_secs(5));
    stop.store(true, Ordering::Relaxed);
    let samples = samples
        .join()
        .map_err(|_| anyhow::anyhow!("sampler panicked"))?;
    relieved.with_context(|| format!("agent log:\n{}", tail(&node.log(), 40)))?;
    let log = node.log();

    let crossing = samples
        .iter()
        .find(|(_, available)| *available < threshold)
        .map(|(at, _)| *at);
    let lowest = samples.iter().map(|(_, a)| *a).min().unwrap_or(0);
    let reclaim_line = log
        .lines()
        .find(|l| {
            l.contains("node-level reclaim for ephemeral-storage")
                && field(l, "at_ns")
                    .and_then(|a| a.parse::<u64>().ok())
                    .is_some_and(|a| a >= origin)
        })
        .unwrap_or_default()
        .to_string();
    let reclaim_at = logged_at(&log, "node-level reclaim for ephemeral-storage", origin);
    let back = reclaim_at.and_then(|r| {
        samples
            .iter()
            .find(|(at, available)| *at > r && *available > threshold)
    });
    let mut timeline = vec![(origin, "writer pod created".to_string())];
    if let Some(c) = crossing {
        timeline.push((
            c,
            format!("imagefs.available under {THRESHOLD_MIB} MiB (1 ms sampler)"),
        ));
    }
    if let Some(r) = reclaim_at {
        let what = reclaim_line
            .split("node-level reclaim")
            .nth(1)
            .and_then(|s| s.split(" reason=").next())
            .unwrap_or("");
        timeline.push((r, format!("agent: node-level reclaim{what}")));
    }
    if let Some((at, available)) = back {
        timeline.push((
            *at,
            format!("imagefs.available back to {} MiB", available / MIB),
        ));
    }
    print_timeline(origin, timeline);
    let (containers, sandboxes, images_after) = node.runtime()?;
    let dead_after = containers
        .iter()
        .filter(|c| c.state == api::ContainerState::ContainerExited as i32)
        .count();
    println!(
        "  lowest imagefs.available {} MiB; dead containers {dead_before} -> {dead_after}; images left {:?}; {} sandboxes",
        lowest / MIB,
        images_after,
        sandboxes.len()
    );

    // Verdict.
    if let Some(line) = log.lines().find(|l| l.contains("reason=\"Evicted\"")) {
        bail!("a pod was evicted: {line}");
    }
    for name in ["service", "writer"] {
        let record = node.record(name).context("record")?;
        if record.phase != Phase::Running {
            bail!("{name} is {:?}, not running", record.phase);
        }
    }
    if old
        .iter()
        .any(|image| images_after.iter().any(|t| t == image))
    {
        bail!("unused images were kept: {images_after:?}");
    }
    if dead_after >= dead_before {
        bail!("no dead container was removed ({dead_before} -> {dead_after})");
    }
    Ok(())
}

fn memory_race(monitor: &Path, keep: bool) -> Result<()> {
    const THRESHOLD_MIB: i64 = 200;
    let mut node = Node::new(
        "cri-memory",
        keep,
        None,
        &format!(
            "evictionHard: {{allocatableMemory.available: {THRESHOLD_MIB}Mi, memory.available: 100Mi}}"
        ),
    )?;
    node.manifest(
        "service",
        &pod("service", "exec sleep 3600", GUARANTEED, ""),
    )?;
    node.start(monitor)?;
    let service = node.wait_running("service")?;
    let (pods_dir, v1) = node.pods_memory_dir()?;
    let oom = monitor_tests::OomCounter::new(&format!("{}/kubepods", node.cgroup_root));
    let stop = Arc::new(AtomicBool::new(false));
    let dir = pods_dir.clone();
    let samples = sampler(stop.clone(), move || working_set(&dir, v1));
    let origin = monotonic_ns();
    // busybox dd with a 1500 MiB block: one read from /dev/zero fills it at kernel speed.
    node.manifest(
        "batch",
        &pod(
            "batch",
            "exec dd if=/dev/zero of=/dev/null bs=1500M count=1",
            "",
            "",
        ),
    )?;
    let ended = wait("the batch pod to end", Duration::from_secs(60), || {
        node.record("batch").is_some_and(|r| r.phase.is_terminal())
    });
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    let samples = samples
        .join()
        .map_err(|_| anyhow::anyhow!("sampler panicked"))?;
    ended.with_context(|| format!("agent log:\n{}", tail(&node.log(), 40)))?;
    let batch = node.record("batch").context("batch record")?;
    wait("the batch sandbox removed", Duration::from_secs(30), || {
        node.runtime().is_ok_and(|(_, sandboxes, _)| {
            !sandboxes
                .iter()
                .any(|s| s.metadata.as_ref().is_some_and(|m| m.uid == batch.uid))
        })
    })?;
    let removed_at = monotonic_ns();
    let log = node.log();
    let oom_kills = oom.kills();

    let threshold = (1024 - THRESHOLD_MIB) * MIB;
    let sampled = samples
        .iter()
        .find(|(_, ws)| *ws >= threshold)
        .map(|(at, _)| *at);
    let kernel_crossing = log
        .lines()
        .filter(|l| field(l, "kind") == Some("crossing"))
        .filter_map(|l| field(l, "crossed_ns")?.parse::<u64>().ok())
        .find(|ns| *ns >= origin);
    let hot = log.lines().find_map(|l| {
        (l.contains("hot path: cgroup.kill written") && field(l, "pod") == Some("demo/batch"))
            .then_some(())?;
        Some((
            field(l, "detected_ns")?.parse::<u64>().ok()?,
            field(l, "source")?.to_string(),
            field(l, "at_ns")?.parse::<u64>().ok()?,
        ))
    });
    let signal = logged_at(&log, "kernel: SIGKILL generated by the agent", origin);
    let killing = hot
        .as_ref()
        .map(|h| h.2)
        .or_else(|| logged_at(&log, "reason=\"Killing\" object=\"demo/batch\"", origin));
    let freed = killing.and_then(|k| samples.iter().find(|(at, ws)| *at > k && *ws < threshold));
    let peak = samples.iter().map(|(_, ws)| *ws).max().unwrap_or(0);
    let mut timeline = vec![(origin, "batch pod created".to_string())];
    if let Some(c) = kernel_crossing {
        timeline.push((c, "working set crossed the threshold (kernel stamp)".into()));
    }
    if let Some(c) = sampled {
        timeline.push((c, "working set crossed the threshold (1 ms sampler)".into()));
    }
    if let Some((detected, source, killed)) = &hot {
        timeline.push((*detected, format!("agent woken by {source} (hot path)")));
        timeline.push((
            *killed,
            "demo/batch killed: cgroup kill by the hot path".into(),
        ));
    } else if let Some(k) = killing {
        timeline.push((k, "demo/batch killed (eviction)".into()));
    }
    if let Some(s) = signal {
        timeline.push((s, "kernel: SIGKILL generated by the agent".into()));
    }
    if let Some((at, ws)) = freed {
        timeline.push((
            *at,
            format!("working set back under the threshold: {} MiB", ws / MIB),
        ));
    }
    timeline.push((
        removed_at,
        "batch sandbox gone from containerd (seen by the demo)".into(),
    ));
    print_timeline(origin, timeline);
    println!(
        "  peak working set {} MiB of 1024 MiB; kernel OOM kills in the pods cgroup: {oom_kills}",
        peak / MIB
    );

    // Verdict.
    if oom_kills > 0 {
        bail!("the kernel OOM killer fired ({oom_kills} kill(s))");
    }
    if batch.reason.as_deref() != Some("Evicted") {
        bail!(
            "batch ended as {:?} ({:?}), not evicted",
            batch.phase,
            batch.reason
        );
    }
    let now = node.record("service").context("service record")?;
    if now.phase != Phase::Running || now.containers[0].pid != service.containers[0].pid {
        bail!("the wrong pod died: service is {:?}", now.phase);
    }
    std::thread::sleep(Duration::from_secs(2));
    let (containers, _, _) = node.runtime()?;
    if containers
        .iter()
        .any(|c| c.labels.get(POD_UID_LABEL) == Some(&batch.uid))
    {
        bail!("the evicted pod has containers again");
    }
    Ok(())
}

/// Bytes available on the filesystem at `path`, as the agent reads it (0 when unreadable).
fn image_fs_available(path: &Path) -> i64 {
    monitor::observe::fs::statvfs(path).map_or(0, |fs| fs.available_bytes as i64)
}

/// The working set of a memory cgroup: usage less inactive file pages.
fn working_set(dir: &Path, v1: bool) -> i64 {
    let read = |file: &str| std::fs::read_to_string(dir.join(file)).unwrap_or_default();
    let (usage, stat, key) = if v1 {
        (
            read("memory.usage_in_bytes"),
            read("memory.stat"),
            "total_inactive_file",
        )
    } else {
        (read("memory.current"), read("memory.stat"), "inactive_file")
    };
    let usage: i64 = usage.trim().parse().unwrap_or(0);
    let inactive: i64 = monitor::observe::parse::flat_keyed(&stat)
        .get(key)
        .map_or(0, |v| *v as i64);
    (usage - inactive).max(0)
}
