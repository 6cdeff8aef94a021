//! The agent on a real container runtime: `monitor run` with `monitor.runtime: cri`
//! against a private containerd (tests/src/containerd/) whose images are built here.
//! Pods become sandboxes and containers; eviction, container GC and image GC act on
//! the runtime's real containers and images. Run as root, one test at a time
//! (`cargo xtask test`).
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Child;
use std::time::{Duration, Instant};

use monitor::observe::CgroupVersion;
use monitor::runtime::cri::{CriClient, MANAGED_LABEL, POD_UID_LABEL, api};
use monitor::runtime::store::{Phase, PodRecord};
use monitor_tests::containerd::{BUSYBOX_IMAGE, Containerd, PAUSE_IMAGE};
use monitor_tests::oci::OciImage;
use monitor_tests::registry::Registry;
use monitor_tests::{Feature, TestTrees, monitor_run, parent_name, require};

const FEATURES: &[Feature] = &[Feature::Root, Feature::Containerd];
const MIB: i64 = 1 << 20;

/// A node on containerd: its own containerd, a temp dir for manifests, state and logs,
/// a cgroup root under `monitor-test-<pid>`, and the agent process.
struct Node {
    dir: tempfile::TempDir,
    cgroup_root: String,
    agent: Option<Child>,
    runs: u32,
    oom: monitor_tests::OomCounter,
    // Dropped in this order: the agent is stopped (above, in Drop), containerd removes
    // its containers and images, then the test's cgroup trees go.
    containerd: Containerd,
    _trees: TestTrees,
}

impl Node {
    /// `kubelet` is YAML for more KubeletConfiguration keys (eviction, image GC);
    /// `image_disk_mib` puts containerd's root on a tmpfs of that size.
    fn new(kubelet: &str, image_disk_mib: Option<u64>) -> Node {
        let _trees = TestTrees;
        let cgroup_root = TestTrees::root("node");
        let containerd = match image_disk_mib {
            Some(mib) => Containerd::start_with_image_disk(mib),
            None => Containerd::start(),
        }
        .unwrap_or_else(|e| panic!("starting a private containerd: {e:#}"));
        containerd.track_cgroup_parent(&parent_name());
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(dir.path().join("pods")).unwrap();
        // Without thresholds of its own a test gets memory only: the kubelet's default
        // disk thresholds would read this host's own disk, whose free space the test does
        // not control.
        let kubelet = if kubelet.contains("evictionHard") {
            kubelet.to_string()
        } else {
            format!("evictionHard: {{memory.available: 100Mi}}\n{kubelet}")
        };
        let config = format!(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
             staticPodPath: {pods}\n{housekeeping}\
             containerRuntimeEndpoint: unix://{socket}\n{kubelet}\n\
             monitor:\n  runtime: cri\n  imageGcPeriod: 1s\n  podsMemoryLimit: 512Mi\n  \
             cgroupRoot: {cgroup_root}\n  stateDir: {state}\n  podLogDir: {logs}\n  \
             socket: {sock}\n  restartBackoff: 1s\n",
            pods = dir.path().join("pods").display(),
            socket = containerd.socket().display(),
            state = dir.path().join("state").display(),
            logs = dir.path().join("logs").display(),
            sock = dir.path().join("monitor.sock").display(),
            housekeeping = if kubelet.contains("housekeepingInterval") {
                ""
            } else {
                "housekeepingInterval: 10s\n"
            },
        );
        std::fs::write(dir.path().join("config.yaml"), config).unwrap();
        Node {
            dir,
            oom: monitor_tests::OomCounter::new(&format!("{cgroup_root}/kubepods")),
            cgroup_root,
            agent: None,
            runs: 0,
            containerd,
            _trees,
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn start(&mut self) {
        self.runs += 1;
        let log = std::fs::File::create(self.log_path(self.runs)).unwrap();
        let child = monitor_run(&self.path("config.yaml"), &log)
            .env("RUST_LOG", "info")
            .spawn()
            .expect("start monitor run");
        self.agent = Some(child);
    }

    fn log_path(&self, run: u32) -> PathBuf {
        self.path(&format!("agent-{run}.log"))
    }

    /// Every run's agent log, then the end of containerd's.
    fn logs(&self) -> String {
        let mut all = String::new();
        for run in 1..=self.runs {
            all += &std::fs::read_to_string(self.log_path(run)).unwrap_or_default();
        }
        all + "\n--- containerd ---\n" + &self.containerd.log_tail(30)
    }

    /// Stops the agent with SIGTERM (pods keep running, as with the kubelet).
    fn stop(&mut self) {
        if let Some(child) = self.agent.take() {
            monitor_tests::stop_agent(child);
        }
    }

    fn manifest(&self, file: &str, text: &str) {
        let tmp = self.path(&format!(".{file}.tmp"));
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, self.path("pods").join(file)).unwrap();
    }

    fn remove_manifest(&self, file: &str) {
        std::fs::remove_file(self.path("pods").join(file)).unwrap();
    }

    fn record(&self, name: &str) -> Option<PodRecord> {
        monitor_tests::pod_records(&self.path("state"))
            .into_iter()
            .find(|r| r.pod.metadata.name == name)
    }

    fn wait_record(
        &self,
        what: &str,
        timeout: Duration,
        check: impl Fn(&PodRecord) -> bool,
        name: &str,
    ) -> PodRecord {
        let ok = poll(timeout, || self.record(name).is_some_and(|r| check(&r)));
        assert!(
            ok,
            "timed out waiting for pod {name} {what}: {:?}\n{}",
            self.record(name),
            self.logs()
        );
        self.record(name).unwrap()
    }

    /// Waits until the pod has ended Failed, and checks that it was evicted.
    fn wait_evicted(&self, name: &str) -> PodRecord {
        let evicted = self.wait_record(
            "evicted",
            Duration::from_secs(60),
            |r| r.phase == Phase::Failed,
            name,
        );
        assert_eq!(evicted.reason.as_deref(), Some("Evicted"), "{evicted:?}");
        evicted
    }

    /// Waits until every container of the pod runs in the runtime, and returns the record.
    fn wait_running(&self, name: &str) -> PodRecord {
        self.wait_record(
            "running",
            Duration::from_secs(30),
            |r| {
                r.phase == Phase::Running
                    && r.containers
                        .iter()
                        .all(|c| c.pid.is_some_and(|p| p > 0) && c.container_id.is_some())
            },
            name,
        )
    }

    /// `monitor metrics` against this node's agent.
    fn metrics(&self) -> String {
        monitor_tests::agent_metrics(&self.path("monitor.sock"))
    }

    /// The runtime's containers and sandboxes that carry the agent's label.
    fn runtime(&self) -> (Vec<api::Container>, Vec<api::PodSandbox>) {
        let socket = self.containerd.socket().to_path_buf();
        block_on(async move {
            let client = CriClient::new(&socket).expect("client");
            let ours = |labels: &std::collections::HashMap<String, String>| {
                labels.get(MANAGED_LABEL).is_some_and(|v| v == "true")
            };
            let containers = client.list_containers().await.expect("ListContainers");
            let sandboxes = client.list_pod_sandboxes().await.expect("ListPodSandbox");
            (
                containers.into_iter().filter(|c| ours(&c.labels)).collect(),
                sandboxes.into_iter().filter(|s| ours(&s.labels)).collect(),
            )
        })
    }

    /// The runtime's containers of pod `uid`.
    fn containers_of(&self, uid: &str) -> Vec<api::Container> {
        self.runtime()
            .0
            .into_iter()
            .filter(|c| c.labels.get(POD_UID_LABEL).map(String::as_str) == Some(uid))
            .collect()
    }

    fn sandboxes_of(&self, uid: &str) -> Vec<api::PodSandbox> {
        self.runtime()
            .1
            .into_iter()
            .filter(|s| s.metadata.as_ref().is_some_and(|m| m.uid == uid))
            .collect()
    }

    /// The image references the runtime lists (tags), one entry per tag.
    fn image_tags(&self) -> Vec<String> {
        let socket = self.containerd.socket().to_path_buf();
        block_on(async move {
            let client = CriClient::new(&socket).expect("client");
            let images = client.list_images().await.expect("ListImages");
            images.into_iter().flat_map(|i| i.repo_tags).collect()
        })
    }

    fn has_image(&self, reference: &str) -> bool {
        self.image_tags().iter().any(|t| t == reference)
    }

    /// The image collector's records as the agent persisted them, by first repo tag.
    fn image_records(&self) -> BTreeMap<String, serde_json::Value> {
        let text =
            std::fs::read_to_string(self.path("state").join("images.json")).unwrap_or_default();
        let Ok(file) = serde_json::from_str::<serde_json::Value>(&text) else {
            return BTreeMap::new();
        };
        file["records"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter_map(|r| Some((r["repoTags"].get(0)?.as_str()?.to_string(), r)))
            .collect()
    }

    fn import(&self, image: &OciImage) {
        self.containerd
            .import(image)
            .unwrap_or_else(|e| panic!("importing {}: {e:#}", image.name()));
    }

    /// The image filesystem (containerd's root, a tmpfs here): capacity and available
    /// bytes, as the agent reads them.
    fn image_fs(&self) -> (i64, i64) {
        let fs = monitor::observe::fs::statvfs(self.containerd.root()).unwrap();
        (fs.capacity_bytes as i64, fs.available_bytes as i64)
    }

    /// Sets a ballast file on the image filesystem so that `available` is `target` bytes.
    fn set_image_fs_available(&self, target: i64) {
        let ballast = self.containerd.root().join("ballast");
        let current = std::fs::metadata(&ballast).map_or(0, |m| m.len() as i64);
        let (_, available) = self.image_fs();
        let size = (current + available - target).max(0);
        let bytes = vec![0x5a_u8; size as usize];
        std::fs::write(&ballast, bytes).unwrap();
    }

    /// The kernel's OOM kills among the pods since the node was made.
    fn pods_oom_kills(&self) -> u64 {
        self.oom.kills()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.stop();
    }
}

fn block_on<T>(future: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(future)
}

fn poll(timeout: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while !check() {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    true
}

fn alive(pid: u32) -> bool {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), None).is_ok()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .unwrap_or_default()
            .contains(") Z ")
}

/// A pod manifest: one container `main` of `image` (present: pull policy Never) running
/// `command`.
fn pod(name: &str, image: &str, command: &[&str], resources: &str, extra: &str) -> String {
    pod_pulling(name, image, "Never", command, resources, extra)
}

fn pod_pulling(
    name: &str,
    image: &str,
    pull: &str,
    command: &[&str],
    resources: &str,
    extra: &str,
) -> String {
    let command: Vec<String> = command.iter().map(|c| format!("{c:?}")).collect();
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: demo\nspec:\n{extra}  \
         containers:\n  - name: main\n    image: {image}\n    imagePullPolicy: {pull}\n    \
         command: [{}]\n{resources}",
        command.join(", ")
    )
}

const GUARANTEED: &str = "    resources:\n      requests: {cpu: 200m, memory: 64Mi}\n      limits: {cpu: 200m, memory: 64Mi}\n";

/// The memory hierarchy path of a process.
fn memcg_of(pid: u32) -> String {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
    monitor::observe::parse::memory_cgroup_of(&text).unwrap_or_default()
}

#[test]
fn containerised_pods_run_in_their_qos_cgroups_log_and_restart() {
    if !require("containerised_pods_run", FEATURES) {
        return;
    }
    let mut node = Node::new("", None);
    node.manifest(
        "web.yaml",
        &pod(
            "web",
            BUSYBOX_IMAGE,
            &[
                "/bin/sh",
                "-c",
                "echo hello from $GREETING in $(pwd); exec sleep 1000",
            ],
            &format!(
                "{GUARANTEED}    env:\n    - {{name: GREETING, value: web}}\n    workingDir: /etc\n"
            ),
            "",
        ),
    );
    node.manifest(
        "crash.yaml",
        &pod(
            "crash",
            BUSYBOX_IMAGE,
            &["/bin/sh", "-c", "echo crashing; exit 3"],
            "",
            "  restartPolicy: OnFailure\n",
        ),
    );
    node.start();
    let web = node.wait_running("web");
    let pid = web.containers[0].pid.unwrap();
    assert!(alive(pid));
    // The container's main process is in a cgroup below the pod's, in the Guaranteed
    // tier (directly under kubepods), made by the runtime from our cgroup parent.
    let memcg = memcg_of(pid);
    let pod_cgroup = format!("/{}/kubepods/pod{}/", node.cgroup_root, web.uid);
    assert!(
        memcg.starts_with(&pod_cgroup),
        "{memcg} is not under {pod_cgroup}"
    );
    // The runtime set the container's memory limit from the pod spec (64Mi).
    let layout = monitor::observe::CgroupLayout::detect().unwrap();
    let limit_file = match layout.version {
        CgroupVersion::V1 => "memory.limit_in_bytes",
        CgroupVersion::V2 => "memory.max",
    };
    let container_dir = layout.memory_root.join(memcg.trim_start_matches('/'));
    let limit = std::fs::read_to_string(container_dir.join(limit_file)).unwrap();
    assert_eq!(
        limit.trim(),
        (64 * MIB).to_string(),
        "{}",
        container_dir.display()
    );
    // On v2 the whole container goes when the OOM killer picks one of its processes
    // (memory.oom.group in the CRI unified map, as the kubelet sends it).
    if layout.version == CgroupVersion::V2 {
        let group = std::fs::read_to_string(container_dir.join("memory.oom.group")).unwrap();
        assert_eq!(group.trim(), "1", "{}", container_dir.display());
    }
    // Its log is where the kubelet puts it, in the CRI log format, with env and workdir.
    let log = node
        .path("logs")
        .join(format!("demo_web_{}", web.uid))
        .join("main/0.log");
    assert!(
        poll(Duration::from_secs(10), || std::fs::read_to_string(&log)
            .is_ok_and(|t| t.contains("stdout F hello from web in /etc"))),
        "{}: {:?}",
        log.display(),
        std::fs::read_to_string(&log)
    );
    assert_eq!(node.sandboxes_of(&web.uid).len(), 1);
    // The crashing pod restarts with back-off; container GC keeps only its most
    // recent dead container (maxPerPodContainer 1), and removes the others' logs.
    let crash = node.wait_record(
        "restarted twice",
        Duration::from_secs(40),
        |r| r.containers[0].restart_count >= 2,
        "crash",
    );
    assert!(
        poll(Duration::from_secs(10), || {
            let dead = node
                .containers_of(&crash.uid)
                .into_iter()
                .filter(|c| c.state == api::ContainerState::ContainerExited as i32)
                .count();
            let logs = std::fs::read_dir(
                node.path("logs")
                    .join(format!("demo_crash_{}", crash.uid))
                    .join("main"),
            )
            .map_or(0, |d| d.count());
            dead <= 1 && logs <= 2
        }),
        "dead containers of the crashing pod were not collected: {:?}\n{}",
        node.containers_of(&crash.uid),
        node.logs()
    );
    // A deleted pod's sandbox and containers are removed.
    node.remove_manifest("web.yaml");
    assert!(
        poll(Duration::from_secs(30), || node
            .sandboxes_of(&web.uid)
            .is_empty()
            && node.containers_of(&web.uid).is_empty()),
        "web's sandbox was not removed: {:?}\n{}",
        node.sandboxes_of(&web.uid),
        node.logs()
    );
    assert!(!alive(pid));
}

#[test]
fn a_containerised_hog_is_evicted_before_the_oom_killer_and_its_sandbox_removed() {
    if !require("a_containerised_hog_is_evicted", FEATURES) {
        return;
    }
    let mut node = Node::new("evictionHard: {allocatableMemory.available: 150Mi}", None);
    node.manifest(
        "guaranteed.yaml",
        &pod(
            "guaranteed",
            BUSYBOX_IMAGE,
            &["sleep", "1000"],
            GUARANTEED,
            "",
        ),
    );
    node.start();
    let guaranteed = node.wait_running("guaranteed");
    // busybox dd with a 700 MiB block: one read from /dev/zero fills it at kernel speed,
    // past the 512 MiB bounded node in well under a second.
    node.manifest(
        "batch.yaml",
        &pod(
            "batch",
            BUSYBOX_IMAGE,
            &["dd", "if=/dev/zero", "of=/dev/null", "bs=700M", "count=1"],
            "",
            "",
        ),
    );
    let evicted = node.wait_evicted("batch");
    assert_eq!(
        node.pods_oom_kills(),
        0,
        "the kernel OOM killer fired first\n{}",
        node.logs()
    );
    // Its sandbox was stopped and removed, with its containers.
    assert!(
        poll(Duration::from_secs(30), || node
            .sandboxes_of(&evicted.uid)
            .is_empty()
            && node.containers_of(&evicted.uid).is_empty()),
        "the evicted pod's sandbox is still there: {:?} {:?}\n{}",
        node.sandboxes_of(&evicted.uid),
        node.containers_of(&evicted.uid),
        node.logs()
    );
    // It is never restarted (restartPolicy Always notwithstanding).
    std::thread::sleep(Duration::from_secs(3));
    let after = node.record("batch").unwrap();
    assert_eq!(after.phase, Phase::Failed);
    assert!(node.containers_of(&evicted.uid).is_empty());
    assert!(node.sandboxes_of(&evicted.uid).is_empty());
    // The guaranteed pod was not touched.
    let still = node.record("guaranteed").unwrap();
    assert_eq!(still.phase, Phase::Running);
    assert_eq!(still.containers[0].pid, guaranteed.containers[0].pid);
    assert!(alive(still.containers[0].pid.unwrap()));
}

/// The image filesystem's `available` that leaves `to_free` bytes to free down to the
/// low threshold (the kubelet's arithmetic: `capacity × (100 − low)% − available`).
fn available_for(capacity: i64, low_percent: i64, to_free: i64) -> i64 {
    capacity * (100 - low_percent) / 100 - to_free
}

#[test]
fn image_gc_frees_the_least_recently_used_unused_images_down_to_the_low_threshold() {
    if !require("image_gc_frees", FEATURES) {
        return;
    }
    // Close thresholds, so that the least to free at the high threshold (5 % of 256 MiB)
    // is less than one image.
    const HIGH: i64 = 50;
    const LOW: i64 = 45;
    let mut node = Node::new(
        &format!(
            "imageGCHighThresholdPercent: {HIGH}\nimageGCLowThresholdPercent: {LOW}\n\
             imageMinimumGCAge: 12s"
        ),
        Some(256),
    );
    let (old, used, young) = (
        "localhost/old:1",
        "localhost/used-once:1",
        "localhost/young:1",
    );
    for name in [old, used] {
        node.import(&OciImage::busybox(name).with_filler(16 << 20));
    }
    node.manifest(
        "keep.yaml",
        &pod("keep", BUSYBOX_IMAGE, &["sleep", "1000"], "", ""),
    );
    node.manifest("user.yaml", &pod("user", used, &["sleep", "1000"], "", ""));
    node.start();
    node.wait_running("keep");
    let user = node.wait_running("user");
    // The collector has seen `used` in use; then its pod goes, and so do its containers.
    assert!(
        poll(Duration::from_secs(20), || node
            .image_records()
            .get(used)
            .is_some_and(
                |r| r["lastUsed"] != serde_json::json!({"secs": 0, "nanos": 0})
            )),
        "no last-used time for {used}: {:?}\n{}",
        node.image_records(),
        node.logs()
    );
    node.remove_manifest("user.yaml");
    assert!(
        poll(Duration::from_secs(30), || node
            .containers_of(&user.uid)
            .is_empty()),
        "{}",
        node.logs()
    );
    // Below the high threshold nothing goes, whatever the images' ages.
    let (capacity, available) = node.image_fs();
    assert!(
        100 - available * 100 / capacity < HIGH,
        "the image filesystem starts too full: {available} of {capacity} available"
    );
    std::thread::sleep(Duration::from_secs(14));
    for image in [old, used, BUSYBOX_IMAGE, PAUSE_IMAGE] {
        assert!(node.has_image(image), "{image} went below the threshold");
    }

    // The records (first detected, last used) survive an agent restart.
    let before = node.image_records();
    node.stop();
    node.start();
    node.wait_running("keep");
    std::thread::sleep(Duration::from_secs(3));
    let after = node.image_records();
    for image in [old, used] {
        assert_eq!(
            before[image]["firstDetected"], after[image]["firstDetected"],
            "{image}: first detected time lost over a restart"
        );
        assert_eq!(
            before[image]["lastUsed"], after[image]["lastUsed"],
            "{image}: last used time lost over a restart"
        );
    }

    // Just above the high threshold, with less to free than the least recently used
    // image's size: only that one goes (never used sorts before used once).
    let size = |image: &str| node.image_records()[image]["sizeBytes"].as_i64().unwrap();
    let (old_size, used_size) = (size(old), size(used));
    let target = capacity * (100 - HIGH) / 100 - MIB / 4;
    let to_free = capacity * (100 - LOW) / 100 - target;
    assert!(
        to_free < old_size,
        "{old}: {old_size} bytes, less than the {to_free} to free"
    );
    node.set_image_fs_available(target);
    assert!(
        poll(Duration::from_secs(20), || !node.has_image(old)),
        "{old} was not collected: {:?}\n{}",
        node.image_tags(),
        node.logs()
    );
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        node.has_image(used),
        "{used} went too: not least recently used first"
    );

    // More to free than `used`: it goes; a just-imported image is too young to go,
    // the image of the running pod is in use and the sandbox image is pinned.
    node.import(&OciImage::busybox(young).with_filler(16 << 20));
    let target = available_for(capacity, LOW, used_size + 32 * MIB);
    assert!(100 - target * 100 / capacity >= HIGH);
    node.set_image_fs_available(target);
    assert!(
        poll(Duration::from_secs(20), || !node.has_image(used)),
        "{used} was not collected: {:?}\n{}",
        node.image_tags(),
        node.logs()
    );
    std::thread::sleep(Duration::from_secs(2));
    for image in [young, BUSYBOX_IMAGE, PAUSE_IMAGE] {
        assert!(
            node.has_image(image),
            "{image} was collected:\n{}",
            node.logs()
        );
    }
    assert!(
        node.logs().contains("ImageGC"),
        "an event reports the collection"
    );
    // Counted under the kubelet's own name and reason: both went for space.
    let metrics = node.metrics();
    for line in [
        "kubelet_image_garbage_collected_total{reason=\"space\"} 2",
        "kubelet_image_garbage_collected_total{reason=\"age\"} 0",
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "no {line} in\n{metrics}"
        );
    }
}

#[test]
fn imagefs_pressure_removes_dead_containers_and_unused_images_before_evicting() {
    if !require("imagefs_pressure_removes", FEATURES) {
        return;
    }
    let mut node = Node::new(
        // Periodic image GC off (high threshold 100 %): only the eviction path acts.
        "imageGCHighThresholdPercent: 100\nimageGCLowThresholdPercent: 90\n\
         imageMinimumGCAge: 1s\nevictionHard: {imagefs.available: 32Mi}\n\
         evictionMinimumReclaim: {imagefs.available: 4Mi}",
        Some(160),
    );
    let unused = "localhost/unused:1";
    node.import(&OciImage::busybox(unused).with_filler(24 << 20));
    node.manifest(
        "keep.yaml",
        &pod("keep", BUSYBOX_IMAGE, &["sleep", "1000"], GUARANTEED, ""),
    );
    node.manifest(
        "done.yaml",
        &pod(
            "done",
            BUSYBOX_IMAGE,
            &["/bin/sh", "-c", "echo done"],
            "",
            "  restartPolicy: Never\n",
        ),
    );
    node.start();
    let keep = node.wait_running("keep");
    let done = node.wait_record(
        "succeeded",
        Duration::from_secs(30),
        |r| r.phase == Phase::Succeeded,
        "done",
    );
    // The periodic container GC keeps a finished pod's last container.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(node.containers_of(&done.uid).len(), 1, "{}", node.logs());

    // Below the hard threshold, by less than the unused image frees.
    node.set_image_fs_available(24 * MIB);
    assert!(
        poll(Duration::from_secs(30), || !node.has_image(unused)),
        "the unused image was not removed under imagefs pressure: {:?}\n{}",
        node.image_tags(),
        node.logs()
    );
    assert!(
        poll(Duration::from_secs(10), || node
            .containers_of(&done.uid)
            .is_empty()),
        "the dead container was not removed: {:?}\n{}",
        node.containers_of(&done.uid),
        node.logs()
    );
    // The reclaim sufficed: no pod was evicted.
    std::thread::sleep(Duration::from_secs(3));
    let still = node.record("keep").unwrap();
    assert_eq!(still.phase, Phase::Running, "{}", node.logs());
    assert_eq!(still.containers[0].pid, keep.containers[0].pid);
    assert!(
        !node.logs().contains("Evicted"),
        "a pod was evicted:\n{}",
        node.logs()
    );
    assert!(node.has_image(BUSYBOX_IMAGE) && node.has_image(PAUSE_IMAGE));
    // The collection is counted in the metrics.
    let metrics = node.metrics();
    for line in [
        "monitor_gc_removed_total{trigger=\"eviction\",kind=\"image\"} 1",
        "monitor_gc_removed_total{trigger=\"eviction\",kind=\"container\"} 1",
        "kubelet_image_garbage_collected_total{reason=\"space\"} 1",
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "no {line} in\n{metrics}"
        );
    }
    let freed = metrics
        .lines()
        .find_map(|l| {
            l.strip_prefix("monitor_gc_freed_bytes_total{trigger=\"eviction\",kind=\"image\"} ")
        })
        .and_then(|v| v.parse::<i64>().ok())
        .unwrap_or(0);
    assert!(freed > 24 * MIB, "image bytes freed: {freed}");
}

#[test]
fn imagefs_pressure_evicts_the_pod_filling_its_writable_layer_when_gc_is_not_enough() {
    if !require("imagefs_pressure_evicts", FEATURES) {
        return;
    }
    let mut node = Node::new(
        "housekeepingInterval: 1s\nimageMinimumGCAge: 1s\n\
         evictionHard: {imagefs.available: 48Mi}",
        Some(128),
    );
    node.manifest(
        "quiet.yaml",
        &pod("quiet", BUSYBOX_IMAGE, &["sleep", "1000"], "", ""),
    );
    node.start();
    let quiet = node.wait_running("quiet");
    // 1 MiB every 20 ms into its own writable layer (the image filesystem), up to 120 MiB:
    // there is nothing to collect, so the agent must evict it.
    node.manifest(
        "writer.yaml",
        &pod(
            "writer",
            BUSYBOX_IMAGE,
            &[
                "/bin/sh",
                "-c",
                "for i in $(seq 120); do dd if=/dev/zero of=/data bs=1M count=1 seek=$i conv=notrunc 2>/dev/null; sleep 0.02; done; exec sleep 1000",
            ],
            "",
            "",
        ),
    );
    let evicted = node.wait_evicted("writer");
    // The message names the container and its usage: the writable layer was measured.
    let message = evicted.message.clone().unwrap_or_default();
    assert!(
        message.contains("ephemeral-storage") && message.contains("Container main was using"),
        "{message}"
    );
    // Its sandbox and writable layer are gone: the image filesystem is relieved.
    assert!(
        poll(Duration::from_secs(30), || node
            .sandboxes_of(&evicted.uid)
            .is_empty()
            && node.image_fs().1 > 48 * MIB),
        "{:?} {:?}\n{}",
        node.sandboxes_of(&evicted.uid),
        node.image_fs(),
        node.logs()
    );
    let still = node.record("quiet").unwrap();
    assert_eq!(still.phase, Phase::Running, "{}", node.logs());
    assert_eq!(still.containers[0].pid, quiet.containers[0].pid);
}

#[test]
fn image_pull_policies_are_honoured_against_a_registry() {
    if !require("image_pull_policies", FEATURES) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("app.tar");
    OciImage::busybox("registry.test/app:v1")
        .write_archive(&archive)
        .unwrap();
    let registry = Registry::serve(&[("app", &archive)]).unwrap();
    let image = format!("{}/app:v1", registry.host());
    let mut node = Node::new("", None);
    // Never, and the image is absent: the container cannot start.
    node.manifest(
        "never.yaml",
        &pod_pulling("never", &image, "Never", &["sleep", "1000"], "", ""),
    );
    node.start();
    assert!(
        poll(Duration::from_secs(20), || node
            .logs()
            .contains("ErrImageNeverPull")),
        "{}",
        node.logs()
    );
    assert_eq!(registry.manifest_requests("app"), 0, "Never pulled");
    assert!(!node.has_image(&image));
    node.remove_manifest("never.yaml");

    // IfNotPresent: pulled once, then used as it is.
    node.manifest(
        "once.yaml",
        &pod_pulling(
            "once",
            &image,
            "IfNotPresent",
            &["/bin/sh", "-c", "sleep 1; exit 1"],
            "",
            "",
        ),
    );
    node.wait_record(
        "restarted twice",
        Duration::from_secs(40),
        |r| r.containers[0].restart_count >= 2,
        "once",
    );
    assert!(node.has_image(&image), "{:?}", node.image_tags());
    let after_once = registry.manifest_requests("app");
    assert!(after_once > 0, "IfNotPresent did not pull an absent image");
    node.remove_manifest("once.yaml");

    // Always: every start asks the registry again, although the image is present.
    node.manifest(
        "always.yaml",
        &pod_pulling(
            "always",
            &image,
            "Always",
            &["/bin/sh", "-c", "sleep 1; exit 1"],
            "",
            "",
        ),
    );
    node.wait_record(
        "restarted twice",
        Duration::from_secs(40),
        |r| r.containers[0].restart_count >= 2,
        "always",
    );
    let after_always = registry.manifest_requests("app");
    assert!(
        after_always >= after_once + 3,
        "Always pulled {} times for 3 starts",
        after_always - after_once
    );
    // IfNotPresent with the image there asked nothing more: its restarts did not pull.
    assert!(
        after_once <= 2,
        "IfNotPresent pulled on restarts: {after_once} manifest requests"
    );
}

#[test]
fn a_deleted_pod_gets_its_termination_grace_period_through_the_runtime() {
    if !require("termination_grace_period", FEATURES) {
        return;
    }
    let mut node = Node::new("", None);
    // One pod ends on SIGTERM after half a second; the other ignores it and must be
    // killed when its 2 s grace period is over.
    node.manifest(
        "polite.yaml",
        &pod(
            "polite",
            BUSYBOX_IMAGE,
            &[
                "/bin/sh",
                "-c",
                "trap 'echo got TERM; sleep 0.5; exit 0' TERM; while true; do sleep 0.1; done",
            ],
            "",
            "  terminationGracePeriodSeconds: 10\n",
        ),
    );
    node.manifest(
        "stubborn.yaml",
        &pod(
            "stubborn",
            BUSYBOX_IMAGE,
            &[
                "/bin/sh",
                "-c",
                "trap '' TERM; while true; do sleep 0.1; done",
            ],
            "",
            "  terminationGracePeriodSeconds: 2\n",
        ),
    );
    node.start();
    let polite = node.wait_running("polite");
    let stubborn = node.wait_running("stubborn");
    let log = node
        .path("logs")
        .join(format!("demo_polite_{}", polite.uid))
        .join("main/0.log");
    let (polite_pid, stubborn_pid) = (
        polite.containers[0].pid.unwrap(),
        stubborn.containers[0].pid.unwrap(),
    );
    let removed = Instant::now();
    node.remove_manifest("polite.yaml");
    node.remove_manifest("stubborn.yaml");
    let mut got_term = false;
    let mut polite_gone = None;
    let mut stubborn_gone = None;
    while removed.elapsed() < Duration::from_secs(15)
        && (polite_gone.is_none() || stubborn_gone.is_none())
    {
        got_term |= std::fs::read_to_string(&log).is_ok_and(|t| t.contains("got TERM"));
        if polite_gone.is_none() && !alive(polite_pid) {
            polite_gone = Some(removed.elapsed());
        }
        if stubborn_gone.is_none() && !alive(stubborn_pid) {
            stubborn_gone = Some(removed.elapsed());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        got_term,
        "the polite pod never saw SIGTERM\n{}",
        node.logs()
    );
    let polite_gone = polite_gone.expect("the polite pod ended");
    let stubborn_gone = stubborn_gone.expect("the stubborn pod was killed");
    assert!(
        polite_gone >= Duration::from_millis(400) && polite_gone < Duration::from_secs(5),
        "the polite pod ended {polite_gone:?} after its deletion: its own half second, not 10 s"
    );
    assert!(
        stubborn_gone >= Duration::from_millis(1900) && stubborn_gone < Duration::from_secs(6),
        "the stubborn pod died {stubborn_gone:?} after its deletion, its grace period is 2 s"
    );
}

#[test]
fn an_unreachable_runtime_stops_the_agent_with_the_endpoint_named() {
    if !require("an_unreachable_runtime", &[Feature::Root]) {
        return;
    }
    let _trees = TestTrees;
    let cgroup_root = TestTrees::root("unreachable");
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("nobody-listens.sock");
    let config = format!(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
         staticPodPath: {pods}\ncontainerRuntimeEndpoint: unix://{socket}\n\
         monitor:\n  runtime: cri\n  cgroupRoot: {cgroup_root}\n  stateDir: {state}\n  \
         podLogDir: {logs}\n  socket: {sock}\n",
        pods = dir.path().join("pods").display(),
        socket = socket.display(),
        state = dir.path().join("state").display(),
        logs = dir.path().join("logs").display(),
        sock = dir.path().join("monitor.sock").display(),
    );
    std::fs::create_dir_all(dir.path().join("pods")).unwrap();
    std::fs::write(dir.path().join("config.yaml"), config).unwrap();
    let log_path = dir.path().join("agent.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut agent = monitor_run(&dir.path().join("config.yaml"), &log)
        .spawn()
        .unwrap();
    let status = poll(Duration::from_secs(20), || {
        agent.try_wait().ok().flatten().is_some()
    });
    if !status {
        monitor_tests::stop_agent(agent);
        panic!(
            "the agent kept running without its runtime:\n{}",
            std::fs::read_to_string(&log_path).unwrap_or_default()
        );
    }
    let code = agent.wait().unwrap();
    let text = std::fs::read_to_string(&log_path).unwrap_or_default();
    assert!(!code.success(), "{text}");
    assert!(
        text.contains("containerRuntimeEndpoint") && text.contains("nobody-listens.sock"),
        "the error names the setting and the socket:\n{text}"
    );
}

#[test]
fn a_stopped_containerd_holds_up_no_eviction_and_its_silence_is_reported() {
    if !require("a_stopped_containerd_holds_up_no_eviction", FEATURES) {
        return;
    }
    use monitor_tests::wedged::{FREED_WITHIN, UNRESPONSIVE_METRIC, WedgedNode};
    let mut node = WedgedNode::start();
    let cycle = node.cycle();
    // Straight to stdout: the measurement is the point of the test.
    let _ = std::io::Write::write_all(
        &mut std::io::stdout(),
        format!("wedged containerd: {}\n", cycle.summary()).as_bytes(),
    );
    assert!(cycle.crossed, "the hog never crossed: {}", cycle.summary());
    assert!(
        cycle.freed_in_time(),
        "the hog's memory was not freed within {FREED_WITHIN:?} of the crossing with containerd stopped: {}\n{}",
        cycle.summary(),
        node.log()
    );
    assert_eq!(cycle.oom_kills, 0, "{}", cycle.summary());
    assert!(
        !cycle.bystander_evicted,
        "a bystander went: {}\n{}",
        cycle.summary(),
        node.log()
    );
    assert!(
        cycle.hog_evicted(),
        "the hog is not booked evicted: {}",
        cycle.summary()
    );
    assert!(
        cycle.event,
        "no RuntimeUnresponsive event names the hog: {}\n{}",
        cycle.summary(),
        node.log()
    );
    assert!(
        cycle.unanswered_calls > 0,
        "{UNRESPONSIVE_METRIC} did not count the silence: {}",
        cycle.summary()
    );
    // containerd answers again: the evicted pod's sandbox and containers go, the pod
    // with its manifest, and the bystander is untouched.
    assert!(cycle.removed, "{}\n{}", cycle.summary(), node.log());
    let hog_uid = cycle
        .hog
        .as_ref()
        .map(|h| h.uid.clone())
        .unwrap_or_default();
    let socket = node.containerd.socket().to_path_buf();
    let left = || {
        let socket = socket.clone();
        let uid = hog_uid.clone();
        block_on(async move {
            let client = CriClient::new(&socket).expect("client");
            let sandboxes = client.list_pod_sandboxes().await.unwrap_or_default();
            sandboxes
                .into_iter()
                .filter(|s| s.metadata.as_ref().is_some_and(|m| m.uid == uid))
                .count()
        })
    };
    assert!(
        poll(Duration::from_secs(30), || left() == 0),
        "the evicted pod's sandbox is still in containerd after it resumed\n{}",
        node.log()
    );
    let bystander = node.node.record("bystander").expect("bystander record");
    assert_eq!(bystander.phase, Phase::Running);
    assert_eq!(
        bystander.containers[0].pid,
        node.bystander.containers[0].pid
    );
}

/// Two agents (two nodes' worth of pods: two cgroup roots, state and log directories) on
/// ONE containerd. Agent B runs a crash loop, a job that succeeded on an image only it
/// uses, and a sleeper; an older agent (`monitor.managed=true`, no instance label) left a
/// dead container in a sandbox of its own; B is killed with SIGKILL as in a crash (its
/// pods keep running, its dead containers stay; `cargo xtask chaos` repeats this, each
/// agent in turn). Agent A, with the same pods of its own (its crash loop has B's pod
/// uid), runs its periodic container GC and, under imagefs pressure, its node-level
/// reclaim: nothing of B's or the older agent's goes (0 foreign containers, sandboxes,
/// logs and images), while A collects its own.
#[test]
fn two_agents_on_one_containerd_never_collect_each_others_containers_sandboxes_or_logs() {
    use monitor::runtime::cri::INSTANCE_LABEL;
    use monitor_tests::two_agents::{self, TwoAgents, collected_in, own_image};
    if !require("two_agents_on_one_containerd", two_agents::FEATURES) {
        return;
    }
    let mut two = TwoAgents::new().unwrap_or_else(|e| panic!("{e}"));
    two.b.start();
    assert!(
        two.b.wait_ready(Duration::from_secs(30)),
        "{}",
        two.b.logs()
    );
    two.b
        .wait_pods(2, Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("{e}\n{}", two.b.logs()));
    let older = two
        .older_agents_dead_container(&two.b.log_dir())
        .unwrap_or_else(|e| panic!("{e}\n{}", two.containerd.log_tail(30)));
    two.b.crash();
    let before = two
        .holdings(&two.b, std::slice::from_ref(&older))
        .unwrap_or_else(|e| panic!("{e}"));
    // The job's, the crash loop's last and the older agent's, at least.
    assert!(before.dead.len() >= 3, "{before:?}");
    assert!(before.sandboxes.len() >= 4, "{before:?}");
    assert!(before.logs.len() >= 3, "{before:?}");

    two.a.start();
    assert!(
        two.a.wait_ready(Duration::from_secs(30)),
        "{}",
        two.a.logs()
    );
    two.a
        .wait_pods(3, Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("{e}\n{}", two.a.logs()));
    // Several periodic passes (every second), then the eviction path's reclaim.
    std::thread::sleep(Duration::from_secs(3));
    let reclaimed = two
        .pressure("localhost/unused:1", Duration::from_secs(40))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        reclaimed,
        "agent a's node-level reclaim did not free the unused image\n{}",
        two.a.logs()
    );
    std::thread::sleep(Duration::from_secs(2));
    let removed = two.removed_since(&before).unwrap_or_else(|e| panic!("{e}"));
    let own = collected_in(&two.a.logs());
    let _ = std::io::Write::write_all(
        &mut std::io::stdout(),
        format!(
            "two agents on one containerd: of b's and the older agent's, a removed {} container(s), {} sandbox(es), {} log(s), {} image(s); a collected {own} dead container(s) of its own\n",
            removed.containers.len(),
            removed.sandboxes.len(),
            removed.logs.len(),
            removed.images.len()
        )
        .as_bytes(),
    );
    assert!(
        removed.none(),
        "agent a removed what is not its own: {removed:?}\n{}",
        two.a.logs()
    );
    assert!(two.has_image(&own_image("b")), "{:?}", two.image_tags());
    // A's GC did run on its own: dead containers of its crash loop, and under pressure
    // the finished job's.
    assert!(own > 0, "agent a collected nothing\n{}", two.a.logs());
    let job = two.a.record("job-a").and_then(|r| r.sandbox_id);
    let listing = two.listing().unwrap_or_else(|e| panic!("{e}"));
    assert!(
        !listing
            .containers
            .iter()
            .any(|c| Some(&c.pod_sandbox_id) == job.as_ref()),
        "a's finished job kept its dead container through the reclaim\n{}",
        two.a.logs()
    );
    // Each agent's sandboxes carry its own instance label, and the two differ.
    let instance = |agent: &monitor_tests::two_agents::Agent| -> BTreeMap<String, String> {
        let recorded = agent.recorded_sandboxes();
        listing
            .sandboxes
            .iter()
            .filter(|s| recorded.contains(&s.id))
            .map(|s| {
                (
                    s.id.clone(),
                    s.labels.get(INSTANCE_LABEL).cloned().unwrap_or_default(),
                )
            })
            .collect()
    };
    let (a, b) = (instance(&two.a), instance(&two.b));
    let values = |m: &BTreeMap<String, String>| -> std::collections::BTreeSet<String> {
        m.values().cloned().collect()
    };
    assert_eq!(values(&a).len(), 1, "{a:?}");
    assert_eq!(values(&b).len(), 1, "{b:?}");
    assert_ne!(values(&a), values(&b));
    assert!(values(&a).iter().all(|v| v.contains("node-a")), "{a:?}");
}
