//! Two agents on one containerd: two nodes' worth of pods (two cgroup roots, state
//! directories, log directories and API sockets) on ONE private containerd
//! ([`crate::containerd::Containerd`]), each agent's container GC, sandbox clean-up, log
//! deletion and image GC running against the runtime they share. Nothing of one may be
//! touched by the other.
//!
//! What belongs to an agent is read here without the agent's labels (which are what is
//! under test): its sandboxes are the ones its pod records name, its containers the ones
//! in those sandboxes, its logs the files under its own log directory, and the images it
//! holds are those of its containers. The count of foreign removals is taken while the
//! owner is stopped (its pods keep running, its dead containers stay), so whatever of it
//! goes meanwhile went by the other agent's hand.
//!
//! Both agents run a crash-looping pod (dead containers pile up; the two pods share one
//! explicit `metadata.uid`, so a collector that went by pod uid would mix them), a job
//! that succeeded (its dead container and stopped sandbox are kept), on an image only it
//! uses, and a sleeper.
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use monitor::runtime::cri::{CriClient, MANAGED_LABEL, POD_UID_LABEL, api};
use monitor::runtime::store::{Phase, PodRecord};

use crate::containerd::{BUSYBOX_IMAGE, Containerd};
use crate::node::poll_every;
use crate::oci::OciImage;
use crate::{Feature, TestTrees, monitor_run, parent_name};

/// What the two-agent tests need.
pub const FEATURES: &[Feature] = &[Feature::Root, Feature::Containerd];
/// The image filesystem (containerd's root) is a tmpfs of this size.
pub const IMAGE_DISK_MIB: u64 = 192;
/// Both agents' hard `imagefs.available` threshold.
pub const IMAGEFS_THRESHOLD: i64 = 48 << 20;
/// The uid both crash-looping pods give themselves.
pub const SHARED_UID: &str = "two-agents-shared-crash-uid";
/// The image of the pods everything runs on, but each agent's job.
pub const IMAGE: &str = BUSYBOX_IMAGE;

/// One agent of the two: its directory (manifests, state, logs, API socket, config and
/// its runs' logs), cgroup root and process.
pub struct Agent {
    pub name: String,
    dir: tempfile::TempDir,
    pub cgroup_root: String,
    child: Option<Child>,
    /// How many times it was started; run N logs to agent-N.log.
    pub runs: u32,
}

impl Agent {
    fn new(name: &str, socket: &Path) -> Agent {
        let cgroup_root = TestTrees::root(&format!("node-{name}"));
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(dir.path().join("pods")).unwrap();
        let config = format!(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
             staticPodPath: {pods}\nhousekeepingInterval: 1s\n\
             containerRuntimeEndpoint: unix://{socket}\nimageMinimumGCAge: 1s\n\
             evictionHard: {{imagefs.available: {threshold}Mi}}\n\
             monitor:\n  runtime: cri\n  imageGcPeriod: 1s\n  podsMemoryLimit: 512Mi\n  \
             cgroupRoot: {cgroup_root}\n  stateDir: {state}\n  podLogDir: {logs}\n  \
             socket: {sock}\n  restartBackoff: 1s\n",
            pods = dir.path().join("pods").display(),
            socket = socket.display(),
            threshold = IMAGEFS_THRESHOLD >> 20,
            state = dir.path().join("state").display(),
            logs = dir.path().join("logs").display(),
            sock = dir.path().join("monitor.sock").display(),
        );
        std::fs::write(dir.path().join("config.yaml"), config).unwrap();
        Agent {
            name: name.to_string(),
            dir,
            cgroup_root,
            child: None,
            runs: 0,
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The agent's pod log directory.
    pub fn log_dir(&self) -> PathBuf {
        self.path("logs")
    }

    /// Starts `monitor run`; its log goes to agent-<run>.log.
    pub fn start(&mut self) {
        self.runs += 1;
        let log = std::fs::File::create(self.log_path(self.runs)).unwrap();
        let child = monitor_run(&self.path("config.yaml"), &log)
            .env("RUST_LOG", "info")
            .spawn()
            .expect("start monitor run");
        self.child = Some(child);
    }

    /// Waits until the run started last logged "agent running"; false when it exited or
    /// `timeout` passed.
    pub fn wait_ready(&mut self, timeout: Duration) -> bool {
        let run = self.runs;
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if self.log(run).contains("agent running") {
                return true;
            }
            let exited = self
                .child
                .as_mut()
                .is_none_or(|c| c.try_wait().ok().flatten().is_some());
            if exited {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// Stops the agent with SIGTERM (pods keep running, as with the kubelet).
    pub fn stop(&mut self) {
        if let Some(child) = self.child.take() {
            crate::stop_agent(child);
        }
    }

    /// Kills the agent with SIGKILL, as a crash would, and reaps it.
    pub fn crash(&mut self) {
        if let Some(child) = self.child.take() {
            crate::crash_agent(child);
        }
    }

    fn log_path(&self, run: u32) -> PathBuf {
        self.path(&format!("agent-{run}.log"))
    }

    pub fn log(&self, run: u32) -> String {
        std::fs::read_to_string(self.log_path(run)).unwrap_or_default()
    }

    /// Every run's log.
    pub fn logs(&self) -> String {
        (1..=self.runs)
            .map(|run| format!("--- agent {} run {run} ---\n{}", self.name, self.log(run)))
            .collect()
    }

    /// Writes a manifest (aside, then renamed in).
    pub fn manifest(&self, file: &str, text: &str) {
        let tmp = self.path(&format!(".{file}.tmp"));
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, self.path("pods").join(file)).unwrap();
    }

    pub fn records(&self) -> Vec<PodRecord> {
        crate::pod_records(&self.path("state"))
    }

    pub fn record(&self, name: &str) -> Option<PodRecord> {
        self.records()
            .into_iter()
            .find(|r| r.pod.metadata.name == name)
    }

    /// The sandboxes its records name.
    pub fn recorded_sandboxes(&self) -> BTreeSet<String> {
        self.records()
            .into_iter()
            .filter_map(|r| r.sandbox_id)
            .collect()
    }

    /// Every file under its log directory.
    pub fn log_files(&self) -> BTreeSet<PathBuf> {
        fn walk(dir: &Path, out: &mut BTreeSet<PathBuf>) {
            for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                let path = entry.path();
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    walk(&path, out);
                } else {
                    out.insert(path);
                }
            }
        }
        let mut files = BTreeSet::new();
        walk(&self.log_dir(), &mut files);
        files
    }

    /// Its pods: a crash-looping one (uid [`SHARED_UID`]), a job that succeeds on an image
    /// of its own (`localhost/<name>-only:1`, which the caller imports), and a sleeper.
    pub fn write_pods(&self) {
        let name = &self.name;
        self.manifest(
            "crash.yaml",
            &pod(
                &format!("crash-{name}"),
                IMAGE,
                &["/bin/sh", "-c", "echo crashing; exit 1"],
                "OnFailure",
                Some(SHARED_UID),
            ),
        );
        self.manifest(
            "job.yaml",
            &pod(
                &format!("job-{name}"),
                &own_image(name),
                &["/bin/sh", "-c", "echo done"],
                "Never",
                None,
            ),
        );
        self.manifest(
            "sleeper.yaml",
            &pod(
                &format!("sleeper-{name}"),
                IMAGE,
                &["sleep", "1000"],
                "Always",
                None,
            ),
        );
    }

    /// Waits until its pods are where the scenario needs them: the job Succeeded, the
    /// sleeper running, the crash loop restarted at least `restarts` times.
    pub fn wait_pods(&self, restarts: u32, timeout: Duration) -> Result<(), String> {
        let name = &self.name;
        let ok = poll_every(timeout, Duration::from_millis(100), || {
            let job = self
                .record(&format!("job-{name}"))
                .is_some_and(|r| r.phase == Phase::Succeeded && r.sandbox_id.is_some());
            let sleeper = self
                .record(&format!("sleeper-{name}"))
                .is_some_and(|r| r.phase == Phase::Running && r.containers[0].pid.is_some());
            let crash = self
                .record(&format!("crash-{name}"))
                .is_some_and(|r| r.containers[0].restart_count >= restarts);
            job && sleeper && crash
        });
        if ok {
            Ok(())
        } else {
            Err(format!(
                "agent {name}'s pods did not get there in {timeout:?}: {:?}",
                self.records()
                    .iter()
                    .map(|r| (
                        r.pod.metadata.name.clone(),
                        r.phase,
                        r.containers[0].restart_count
                    ))
                    .collect::<Vec<_>>()
            ))
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The image only `agent`'s job uses.
pub fn own_image(agent: &str) -> String {
    format!("localhost/{agent}-only:1")
}

/// A pod manifest in namespace `demo`: one container `main` of `image` (present: pull
/// policy Never) running `command`, with `restart` as its policy and `uid` if given.
pub fn pod(name: &str, image: &str, command: &[&str], restart: &str, uid: Option<&str>) -> String {
    let command: Vec<String> = command.iter().map(|c| format!("{c:?}")).collect();
    let uid = uid.map_or(String::new(), |u| format!("  uid: {u}\n"));
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: demo\n{uid}spec:\n  \
         restartPolicy: {restart}\n  containers:\n  - name: main\n    image: {image}\n    \
         imagePullPolicy: Never\n    command: [{}]\n",
        command.join(", ")
    )
}

/// What an agent has in the runtime and on disk at one moment (see the module
/// documentation for how it is told without the labels).
#[derive(Clone, Debug, Default)]
pub struct Holdings {
    pub sandboxes: BTreeSet<String>,
    pub containers: BTreeSet<String>,
    /// The dead ones among `containers`.
    pub dead: BTreeSet<String>,
    pub logs: BTreeSet<PathBuf>,
    /// Image ids its containers hold.
    pub images: BTreeSet<String>,
}

/// What went of an earlier [`Holdings`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Removed {
    pub containers: Vec<String>,
    pub sandboxes: Vec<String>,
    pub logs: Vec<PathBuf>,
    pub images: Vec<String>,
}

impl Removed {
    pub fn none(&self) -> bool {
        self.containers.is_empty()
            && self.sandboxes.is_empty()
            && self.logs.is_empty()
            && self.images.is_empty()
    }
}

/// The runtime as one listing: containers, sandboxes, and image ids.
pub struct Listing {
    pub containers: Vec<api::Container>,
    pub sandboxes: Vec<api::PodSandbox>,
    pub images: Vec<api::Image>,
}

/// One private containerd and two agents on it. Dropped in order: the agents are stopped,
/// containerd removes its containers and images, then the test's cgroup trees go.
pub struct TwoAgents {
    pub a: Agent,
    pub b: Agent,
    pub containerd: Containerd,
    _trees: TestTrees,
}

impl TwoAgents {
    /// Starts the containerd (image filesystem on a [`IMAGE_DISK_MIB`] MiB tmpfs) and
    /// prepares agents `a` and `b` (not started; their pods written; their own images
    /// imported).
    pub fn new() -> Result<TwoAgents, String> {
        let _trees = TestTrees;
        let containerd = Containerd::start_with_image_disk(IMAGE_DISK_MIB)
            .map_err(|e| format!("starting a private containerd: {e:#}"))?;
        containerd.track_cgroup_parent(&parent_name());
        let a = Agent::new("a", containerd.socket());
        let b = Agent::new("b", containerd.socket());
        let two = TwoAgents {
            a,
            b,
            containerd,
            _trees,
        };
        for agent in [&two.a, &two.b] {
            two.import(&own_image(&agent.name), 0)?;
            agent.write_pods();
        }
        Ok(two)
    }

    /// Imports busybox under `name` with `filler` more bytes.
    pub fn import(&self, name: &str, filler: u64) -> Result<(), String> {
        self.containerd
            .import(&OciImage::busybox(name).with_filler(filler))
            .map_err(|e| format!("importing {name}: {e:#}"))
    }

    pub fn client<T>(
        &self,
        call: impl AsyncFnOnce(CriClient) -> Result<T, monitor::runtime::cri::CriError>,
    ) -> Result<T, String> {
        let socket = self.containerd.socket().to_path_buf();
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(async move {
                let client = CriClient::new(&socket)?;
                call(client).await
            })
            .map_err(|e| e.to_string())
    }

    /// Everything the runtime has.
    pub fn listing(&self) -> Result<Listing, String> {
        self.client(async |client| {
            Ok(Listing {
                containers: client.list_containers().await?,
                sandboxes: client.list_pod_sandboxes().await?,
                images: client.list_images().await?,
            })
        })
    }

    pub fn image_tags(&self) -> Vec<String> {
        self.listing()
            .map(|l| l.images.into_iter().flat_map(|i| i.repo_tags).collect())
            .unwrap_or_default()
    }

    pub fn has_image(&self, reference: &str) -> bool {
        self.image_tags().iter().any(|t| t == reference)
    }

    /// What `agent` holds now: the sandboxes its records name and the containers in them,
    /// its log files, and the images its containers hold; plus `extra` sandboxes (and
    /// their containers) counted as its.
    pub fn holdings(&self, agent: &Agent, extra: &[String]) -> Result<Holdings, String> {
        let mut sandboxes = agent.recorded_sandboxes();
        sandboxes.extend(extra.iter().cloned());
        let listing = self.listing()?;
        let theirs: Vec<&api::Container> = listing
            .containers
            .iter()
            .filter(|c| sandboxes.contains(&c.pod_sandbox_id))
            .collect();
        Ok(Holdings {
            sandboxes: listing
                .sandboxes
                .iter()
                .filter(|s| sandboxes.contains(&s.id))
                .map(|s| s.id.clone())
                .collect(),
            containers: theirs.iter().map(|c| c.id.clone()).collect(),
            dead: theirs
                .iter()
                .filter(|c| c.state == api::ContainerState::ContainerExited as i32)
                .map(|c| c.id.clone())
                .collect(),
            logs: agent.log_files(),
            images: theirs.iter().map(|c| c.image_ref.clone()).collect(),
        })
    }

    /// What of `before` is gone now.
    pub fn removed_since(&self, before: &Holdings) -> Result<Removed, String> {
        let listing = self.listing()?;
        let containers: BTreeSet<&str> = listing.containers.iter().map(|c| c.id.as_str()).collect();
        let sandboxes: BTreeSet<&str> = listing.sandboxes.iter().map(|s| s.id.as_str()).collect();
        let images: BTreeSet<&str> = listing.images.iter().map(|i| i.id.as_str()).collect();
        Ok(Removed {
            containers: before
                .containers
                .iter()
                .filter(|c| !containers.contains(c.as_str()))
                .cloned()
                .collect(),
            sandboxes: before
                .sandboxes
                .iter()
                .filter(|s| !sandboxes.contains(s.as_str()))
                .cloned()
                .collect(),
            logs: before
                .logs
                .iter()
                .filter(|l| !l.exists())
                .cloned()
                .collect(),
            images: before
                .images
                .iter()
                .filter(|i| !images.contains(i.as_str()))
                .cloned()
                .collect(),
        })
    }

    /// Sets a ballast file on the image filesystem so that `available` is `target` bytes.
    pub fn set_image_fs_available(&self, target: i64) {
        let ballast = self.containerd.root().join("ballast");
        let current = std::fs::metadata(&ballast).map_or(0, |m| m.len() as i64);
        let available = self.image_fs_available();
        let size = (current + available - target).max(0);
        std::fs::write(&ballast, vec![0x5a_u8; size as usize]).unwrap();
    }

    pub fn clear_ballast(&self) {
        let _ = std::fs::remove_file(self.containerd.root().join("ballast"));
    }

    pub fn image_fs_available(&self) -> i64 {
        let fs = monitor::observe::fs::statvfs(self.containerd.root()).unwrap();
        fs.available_bytes as i64
    }

    /// Puts the image filesystem under `imagefs.available` pressure that an unused image
    /// of 24 MiB, imported `name`d now, relieves: waits until the running agents have
    /// seen the image (past `imageMinimumGCAge`), then fills the disk to 4 MiB under the
    /// threshold and waits until the image is gone (their node-level reclaim). Returns
    /// whether it went within `timeout`. The ballast is cleared before returning.
    pub fn pressure(&self, name: &str, timeout: Duration) -> Result<bool, String> {
        self.import(name, 24 << 20)?;
        // Detected at the next image GC pass (every second), then 1 s old.
        std::thread::sleep(Duration::from_secs(3));
        self.set_image_fs_available(IMAGEFS_THRESHOLD - (4 << 20));
        let gone = poll_every(timeout, Duration::from_millis(200), || {
            !self.has_image(name)
        });
        self.clear_ballast();
        Ok(gone)
    }

    /// A dead container of an older agent, one that wrote `monitor.managed=true` and no
    /// instance label, in a stopped sandbox of its own, with a log file under `log_dir`:
    /// neither agent's records name it. Returns the sandbox id.
    pub fn older_agents_dead_container(&self, log_dir: &Path) -> Result<String, String> {
        let uid = "older-agent-pod-uid";
        let pod_logs = log_dir.join(format!("demo_older_{uid}"));
        std::fs::create_dir_all(pod_logs.join("main")).map_err(|e| e.to_string())?;
        let labels = |more: &[(&str, &str)]| {
            let mut labels: std::collections::HashMap<String, String> = [
                (MANAGED_LABEL.to_string(), "true".to_string()),
                (POD_UID_LABEL.to_string(), uid.to_string()),
            ]
            .into();
            labels.extend(more.iter().map(|(k, v)| (k.to_string(), v.to_string())));
            labels
        };
        let sandbox = crate::containerd::host_network_sandbox(
            "older",
            uid,
            "demo",
            &pod_logs,
            &format!("{}/older-agent", parent_name()),
            labels(&[]),
        );
        let container = api::ContainerConfig {
            metadata: Some(api::ContainerMetadata {
                name: "main".into(),
                attempt: 0,
            }),
            image: Some(api::ImageSpec {
                image: IMAGE.into(),
                ..api::ImageSpec::default()
            }),
            command: vec![
                "/bin/sh".into(),
                "-c".into(),
                "echo from an older agent".into(),
            ],
            labels: labels(&[("io.kubernetes.container.name", "main")]),
            log_path: "main/0.log".into(),
            ..api::ContainerConfig::default()
        };
        let id = self.client(async move |client| {
            let sandbox_id = client.run_pod_sandbox(sandbox.clone()).await?;
            let id = client
                .create_container(&sandbox_id, container, sandbox)
                .await?;
            client.start_container(&id).await?;
            Ok((sandbox_id, id))
        })?;
        let (sandbox_id, container_id) = id;
        let exited = poll_every(Duration::from_secs(20), Duration::from_millis(50), || {
            self.listing().is_ok_and(|l| {
                l.containers.iter().any(|c| {
                    c.id == container_id && c.state == api::ContainerState::ContainerExited as i32
                })
            })
        });
        if !exited {
            return Err("the older agent's container did not exit".into());
        }
        let stop = sandbox_id.clone();
        self.client(async move |client| client.stop_pod_sandbox(&stop).await)?;
        Ok(sandbox_id)
    }
}

/// The losses of a run of [`chaos`]. The foreign counts must stay zero; `own_collected`
/// must not (else neither agent's GC ran, and the zeros prove nothing).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    pub cycles: u32,
    /// Dead containers of the stopped agent removed while the other ran.
    pub foreign_containers: u32,
    pub foreign_sandboxes: u32,
    pub foreign_logs: u32,
    /// Images the stopped agent's containers held that went.
    pub foreign_images: u32,
    /// Dead containers the running agents removed of their own (from their ContainerGC
    /// events).
    pub own_collected: u32,
    /// Imagefs pressure rounds the running agent relieved by its node-level reclaim.
    pub reclaims: u32,
    pub panics: u32,
    /// Agent starts that did not reach "agent running".
    pub failed_starts: u32,
    pub findings: Vec<String>,
}

impl Tally {
    pub fn clean(&self) -> bool {
        self.foreign_containers == 0
            && self.foreign_sandboxes == 0
            && self.foreign_logs == 0
            && self.foreign_images == 0
            && self.own_collected > 0
            && self.reclaims == self.cycles
            && self.panics == 0
            && self.failed_starts == 0
    }

    /// The table `cargo xtask chaos` prints.
    pub fn table(&self, planned: u32) -> String {
        let mut out = String::from(
            "| cycles | foreign containers removed | foreign sandboxes removed | foreign logs removed | foreign images removed | own dead containers collected | reclaims | panics | failed starts |\n\
             |---|---|---|---|---|---|---|---|---|\n",
        );
        out.push_str(&format!(
            "| {}/{planned} | {} | {} | {} | {} | {} | {}/{} | {} | {} |\n",
            self.cycles,
            self.foreign_containers,
            self.foreign_sandboxes,
            self.foreign_logs,
            self.foreign_images,
            self.own_collected,
            self.reclaims,
            self.cycles,
            self.panics,
            self.failed_starts
        ));
        for finding in &self.findings {
            out.push_str(&format!("  - {finding}\n"));
        }
        out
    }

    fn count(&mut self, victim: &str, cycle: u32, removed: &Removed) {
        let n = |v: usize| u32::try_from(v).unwrap_or(u32::MAX);
        self.foreign_containers += n(removed.containers.len());
        self.foreign_sandboxes += n(removed.sandboxes.len());
        self.foreign_logs += n(removed.logs.len());
        self.foreign_images += n(removed.images.len());
        if !removed.none() {
            self.findings.push(format!(
                "cycle {cycle}: of stopped agent {victim}'s, the other removed {removed:?}"
            ));
        }
    }
}

/// Dead containers an agent's log says it removed (its ContainerGC events).
pub fn collected_in(log: &str) -> u32 {
    log.lines()
        .filter(|l| l.contains("ContainerGC"))
        .filter_map(|l| {
            let (_, after) = l.split_once("removed ")?;
            after.split_whitespace().next()?.parse::<u32>().ok()
        })
        .sum()
}

/// The chaos scenario: both agents run; each cycle one of them (in turn) is killed with
/// SIGKILL, its holdings are noted, the other runs its periodic GC and, under imagefs
/// pressure, its node-level reclaim (dead containers of finished pods, then unused
/// images); what of the stopped agent's went is counted; then it is started again.
pub fn chaos(cycles: u32) -> Tally {
    let mut tally = Tally::default();
    let mut two = match TwoAgents::new() {
        Ok(two) => two,
        Err(err) => {
            tally.findings.push(err);
            tally.failed_starts += 1;
            return tally;
        }
    };
    let mut started = true;
    for agent in [&mut two.a, &mut two.b] {
        agent.start();
        if !agent.wait_ready(Duration::from_secs(30)) {
            tally.failed_starts += 1;
            tally
                .findings
                .push(format!("agent {} did not start", agent.name));
            started = false;
        }
    }
    if !started {
        return finish(tally, &two);
    }
    for cycle in 0..cycles {
        let a_turn = cycle % 2 == 1;
        // Both must have dead containers and a finished job for the other to spare.
        for agent in [&two.a, &two.b] {
            if let Err(err) = agent.wait_pods(1, Duration::from_secs(60)) {
                tally.findings.push(format!("cycle {cycle}: {err}"));
                return finish(tally, &two);
            }
        }
        let victim_name = if a_turn { "a" } else { "b" };
        if a_turn {
            two.a.crash();
        } else {
            two.b.crash();
        }
        let before = match two.holdings(if a_turn { &two.a } else { &two.b }, &[]) {
            Ok(h) => h,
            Err(err) => {
                tally.findings.push(format!("cycle {cycle}: {err}"));
                return finish(tally, &two);
            }
        };
        if before.dead.is_empty() {
            tally.findings.push(format!(
                "cycle {cycle}: agent {victim_name} had no dead container to spare"
            ));
        }
        // The runner's periodic GC (every second), then its node-level reclaim.
        std::thread::sleep(Duration::from_secs(2));
        match two.pressure(
            &format!("localhost/unused-{cycle}:1"),
            Duration::from_secs(40),
        ) {
            Ok(true) => tally.reclaims += 1,
            Ok(false) => tally.findings.push(format!(
                "cycle {cycle}: the unused image was not reclaimed under imagefs pressure"
            )),
            Err(err) => tally.findings.push(format!("cycle {cycle}: {err}")),
        }
        std::thread::sleep(Duration::from_secs(2));
        match two.removed_since(&before) {
            Ok(removed) => tally.count(victim_name, cycle, &removed),
            Err(err) => tally.findings.push(format!("cycle {cycle}: {err}")),
        }
        let victim = if a_turn { &mut two.a } else { &mut two.b };
        victim.start();
        if !victim.wait_ready(Duration::from_secs(30)) {
            tally.failed_starts += 1;
            tally.findings.push(format!(
                "cycle {cycle}: agent {victim_name} did not start again"
            ));
            return finish(tally, &two);
        }
        tally.cycles += 1;
    }
    finish(tally, &two)
}

fn finish(mut tally: Tally, two: &TwoAgents) -> Tally {
    for agent in [&two.a, &two.b] {
        let logs = agent.logs();
        tally.own_collected += collected_in(&logs);
        let panics = logs.matches("panicked").count();
        tally.panics += u32::try_from(panics).unwrap_or(u32::MAX);
        if panics > 0 {
            tally
                .findings
                .push(format!("agent {} panicked:\n{logs}", agent.name));
        }
    }
    tally
}
