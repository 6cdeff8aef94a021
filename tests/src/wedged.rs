//! The wedged-runtime scenario: the agent's pods run on a private containerd, which is
//! stopped with SIGSTOP (only the fixture's own containerd process) just before a pod
//! grows past the node's hard threshold. The eviction must not wait on the runtime:
//!
//! - the hog's memory is freed (through the pod's cgroup) within 1 s of the crossing;
//! - no other pod is evicted;
//! - the runtime's silence is reported: a `RuntimeUnresponsive` event naming the pod, and
//!   `monitor_runtime_unresponsive_calls_total` counting the calls left unanswered.
//!
//! containerd is resumed (SIGCONT) at the end of each cycle, and by a guard whatever
//! happens. The node is the tests' bounded node (a 512 MiB pods cgroup,
//! `allocatableMemory.available<150Mi` hard: the pods' working set crosses at about
//! 362 MiB) with the hot kill path off, so that the eviction itself is what kills.
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use monitor::runtime::store::{Phase, PodRecord};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::chaos::{EVICTION, wait_ready};
use crate::containerd::{BUSYBOX_IMAGE, Containerd};
use crate::node::{MIB, Node, alive, poll_every};
use monitor_bench::util::monotonic_ns;

/// How soon after the crossing the hog's memory must be back.
pub const FREED_WITHIN: Duration = Duration::from_secs(1);

/// The working set of the pods cgroup at which `allocatableMemory.available<150Mi` is met
/// on the 512 MiB node.
const THRESHOLD_BYTES: i64 = (512 - 150) * MIB as i64;

/// The metric that counts the calls the runtime left unanswered.
pub const UNRESPONSIVE_METRIC: &str = "monitor_runtime_unresponsive_calls_total";

/// Resources of the bystander: guaranteed, so it ranks after the hog.
const BYSTANDER: &str = "    resources:\n      requests: {cpu: 100m, memory: 64Mi}\n      limits: {cpu: 100m, memory: 64Mi}\n";

/// Resources of the hog: a small request (burstable: admission takes it while the node
/// still reports MemoryPressure from the previous cycle), no limit.
const HOG: &str = "    resources:\n      requests: {memory: 16Mi}\n";

/// A pod on the CRI runtime: one container `main` of the busybox image running `script`
/// with `/bin/sh -c`.
pub fn cri_pod(name: &str, resources: &str, script: &str, restart: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: demo\nspec:\n  \
         restartPolicy: {restart}\n  containers:\n  - name: main\n    image: {BUSYBOX_IMAGE}\n    \
         imagePullPolicy: Never\n    command: [\"/bin/sh\", \"-c\", {script:?}]\n{resources}"
    )
}

/// The hog's script: it waits for `/go` in its own root, then allocates 700 MiB (past the
/// 512 MiB node) 4 MiB at a time, about 300 MiB/s, and holds it.
const HOG_SCRIPT: &str = "while [ ! -e /go ]; do usleep 20000; done; \
     exec awk 'BEGIN { s = sprintf(\"%4194304s\", \"\"); \
     for (i = 0; i < 175; i++) { a[i] = s i; system(\"usleep 10000\") }; system(\"sleep 600\") }'";

/// containerd stopped with SIGSTOP; resumed with SIGCONT when dropped (also when the test
/// panics). Only the fixture's own containerd process is ever signalled.
pub struct Paused<'a> {
    pid: Pid,
    _containerd: std::marker::PhantomData<&'a Containerd>,
}

impl<'a> Paused<'a> {
    /// Stops `containerd` and waits until the kernel says it is stopped.
    pub fn new(containerd: &'a Containerd) -> Paused<'a> {
        let pid = containerd
            .pid()
            .expect("the fixture's containerd runs (its pid is known)");
        let pid = Pid::from_raw(i32::try_from(pid).expect("a pid"));
        kill(pid, Signal::SIGSTOP).expect("SIGSTOP to the test's containerd");
        let paused = Paused {
            pid,
            _containerd: std::marker::PhantomData,
        };
        let stopped = poll_every(Duration::from_secs(2), Duration::from_millis(1), || {
            process_state(pid) == Some('T')
        });
        assert!(stopped, "containerd {pid} did not stop");
        paused
    }
}

impl Drop for Paused<'_> {
    fn drop(&mut self) {
        let _ = kill(self.pid, Signal::SIGCONT);
    }
}

/// The state letter of `/proc/<pid>/stat` ('R', 'S', 'T', …).
fn process_state(pid: Pid) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// The agent on a private containerd, the hot path off, with one guaranteed bystander pod.
/// Dropped: the agent is stopped, then containerd (with its containers), then the cgroups.
pub struct WedgedNode {
    pub containerd: Containerd,
    pub node: Node,
    pub bystander: PodRecord,
    /// The hogs started so far (each cycle's is `hog-<n>`).
    hogs: u32,
}

impl WedgedNode {
    /// Starts containerd and the agent, and the bystander; panics when either fails.
    pub fn start() -> WedgedNode {
        let containerd =
            Containerd::start().unwrap_or_else(|e| panic!("starting a private containerd: {e:#}"));
        containerd.track_cgroup_parent(&crate::parent_name());
        let mut node = Node::with_agent_keys(
            &format!(
                "{EVICTION}\ncontainerRuntimeEndpoint: unix://{}",
                containerd.socket().display()
            ),
            "  runtime: cri\n  hotKill: false\n  imageGcPeriod: 1s\n",
        );
        node.start();
        assert!(
            wait_ready(&mut node, Duration::from_secs(30)),
            "the agent did not start:\n{}",
            node.log(node.runs)
        );
        node.manifest(
            "bystander.yaml",
            &cri_pod("bystander", BYSTANDER, "exec sleep 100000", "Always"),
        );
        let bystander = wait_started(&node, "bystander");
        WedgedNode {
            containerd,
            node,
            bystander,
            hogs: 0,
        }
    }

    /// The agent's log (its only run).
    pub fn log(&self) -> String {
        self.node.log(self.node.runs)
    }

    /// The calls the agent counts as left unanswered by the runtime, all calls summed.
    pub fn unresponsive_calls(&self) -> u64 {
        crate::agent_metrics(&self.node.path("monitor.sock"))
            .lines()
            .filter(|l| l.starts_with(&format!("{UNRESPONSIVE_METRIC}{{")))
            .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
            .map(|v| v as u64)
            .sum()
    }

    /// The pod `monitor status --json` names as the runtime's last silence.
    pub fn silence_in_status(&self) -> Option<String> {
        let out = std::process::Command::new(crate::helper_binary("monitor"))
            .args(["status", "--json", "--socket"])
            .arg(self.node.path("monitor.sock"))
            .output()
            .ok()?;
        let status: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        status["runtimeSilence"]["pod"].as_str().map(str::to_string)
    }

    /// One cycle: a hog starts and waits; containerd is stopped; the hog grows past the
    /// threshold; what the agent did is measured; containerd is resumed and the hog's pod
    /// removed.
    pub fn cycle(&mut self) -> Cycle {
        let name = format!("hog-{}", self.hogs);
        self.hogs += 1;
        let file = format!("{name}.yaml");
        self.node
            .manifest(&file, &cri_pod(&name, HOG, HOG_SCRIPT, "Never"));
        let hog = wait_started(&self.node, &name);
        let hog_pid = hog.containers[0].pid.expect("the hog's pid");
        let metric_before = self.unresponsive_calls();
        let oom_before = self.node.pods_oom_kills();
        let log_before = self.log().len();
        let pods_dir = self.node.memory_root().join("kubepods");
        let hog_dir = pods_dir.join("burstable").join(format!("pod{}", hog.uid));
        assert!(hog_dir.is_dir(), "no cgroup {}", hog_dir.display());
        let mut cycle = Cycle {
            name: name.clone(),
            ..Cycle::default()
        };
        {
            let _paused = Paused::new(&self.containerd);
            let sampler = Sampler::start(pods_dir, hog_dir);
            std::fs::write(format!("/proc/{hog_pid}/root/go"), "")
                .unwrap_or_else(|e| panic!("starting the hog (pid {hog_pid}): {e}"));
            let sampled = sampler.until_freed(Duration::from_secs(10));
            // The runtime's silence is said once the eviction's deadline (2 s) has passed.
            let needle = format!("reason=\"RuntimeUnresponsive\" object=\"demo/{name}\"");
            cycle.event = poll_every(Duration::from_secs(8), Duration::from_millis(50), || {
                self.log()[log_before..].contains(&needle)
            });
            let log = self.log();
            let killing = logged_at(
                &log[log_before..],
                &format!("reason=\"Killing\" object=\"demo/{name}\""),
            );
            // The crossing: the sampler's first sample over the threshold. When the agent
            // evicted the hog between two samples (the sampler's peak then stays within
            // one allocation step of the threshold), the sampler's first sample within
            // that step stands in: the real crossing came after it, so the times measured
            // from it are, if anything, too long.
            // Under emulation the sampler can miss the whole climb (its thread not run for
            // tens of ms while the hog and the agent's real-time threads hold the CPUs):
            // then the agent's own eviction stamp stands in, which comes after the real
            // crossing, so the times measured from it are shorter than the truth; the
            // table says which cycles were seen so.
            let killing_instant = killing.map(|k| {
                Instant::now()
                    .checked_sub(Duration::from_nanos(monotonic_ns().saturating_sub(k)))
                    .unwrap_or_else(Instant::now)
            });
            let crossed = sampled
                .crossed
                .or(sampled.near.filter(|_| killing.is_some()))
                .or(killing_instant);
            cycle.crossing_seen_by = match (sampled.crossed, sampled.near, crossed) {
                (Some(_), _, _) => "sampler",
                (None, Some(_), Some(_)) => "sampler, one step before the agent's eviction",
                (None, None, Some(_)) => {
                    "the agent's eviction alone (the sampler missed the climb)"
                }
                (None, _, None) => "nobody",
            };
            let crossed_ns = crossed.map(instant_ns);
            cycle.peak_bytes = sampled.peak;
            // Seen from the eviction stamp alone, the memory counts as freed at the first
            // low sample after the eviction: later than the truth, if anything.
            let freed = sampled.freed.or_else(|| {
                let killed = killing_instant.filter(|_| sampled.near.is_none())?;
                sampled.lows.iter().copied().find(|low| *low >= killed)
            });
            cycle.crossing_to_freed = match (crossed, freed) {
                (Some(c), Some(f)) => Some(f.saturating_duration_since(c)),
                _ => None,
            };
            cycle.crossed = crossed.is_some();
            cycle.unanswered_calls = self.unresponsive_calls().saturating_sub(metric_before);
            cycle.status_names_it =
                self.silence_in_status().as_deref() == Some(format!("demo/{name}").as_str());
            cycle.crossing_to_kill = crossed_ns
                .zip(killing)
                .map(|(c, k)| Duration::from_nanos(k.saturating_sub(c)));
            cycle.hog_alive = alive(hog_pid);
            cycle.agent_lines = log[log_before..]
                .lines()
                .filter(|l| l.contains(&name) || l.contains("hot path"))
                .take(40)
                .collect::<Vec<_>>()
                .join("\n");
            // A moment for a wrong second eviction to show, still without a runtime.
            std::thread::sleep(Duration::from_millis(500));
            cycle.bystander = self.node.record("bystander");
            cycle.hog = self.node.record(&name);
        }
        let bystander = cycle.bystander.as_ref();
        cycle.bystander_evicted = !bystander.is_some_and(|b| {
            b.phase == Phase::Running
                && b.containers[0].pid == self.bystander.containers[0].pid
                && b.containers[0].pid.is_some_and(alive)
        });
        cycle.oom_kills = self.node.pods_oom_kills().saturating_sub(oom_before);
        // containerd answers again: the pod goes, and the runtime forgets its sandbox.
        self.node.remove_manifest(&file);
        cycle.removed = poll_every(Duration::from_secs(30), Duration::from_millis(50), || {
            self.node.record(&name).is_none()
        });
        cycle
    }
}

impl Drop for WedgedNode {
    fn drop(&mut self) {
        // The agent first: it must not see its runtime go away under it.
        self.node.stop();
    }
}

/// Waits until every container of pod `name` runs on the runtime; panics after 60 s.
fn wait_started(node: &Node, name: &str) -> PodRecord {
    let started = poll_every(Duration::from_secs(60), Duration::from_millis(50), || {
        node.record(name).is_some_and(|r| {
            r.phase == Phase::Running
                && r.containers
                    .iter()
                    .all(|c| c.pid.is_some_and(|p| p > 0) && c.container_id.is_some())
        })
    });
    assert!(
        started,
        "pod {name} did not start: {:?}\n{}",
        node.record(name),
        node.log(node.runs)
    );
    node.record(name).expect("its record")
}

/// What one cycle saw.
#[derive(Clone, Debug, Default)]
pub struct Cycle {
    pub name: String,
    /// The pods' working set reached the threshold.
    pub crossed: bool,
    /// Who saw the crossing first: the test's sampler, or (when the hot path killed the
    /// hog between two samples) the agent.
    pub crossing_seen_by: &'static str,
    /// From the first sample at or over the threshold to the first at which the hog's
    /// cgroup holds less than 32 MiB.
    pub crossing_to_freed: Option<Duration>,
    /// From the crossing to the agent's `Killing` event for the hog.
    pub crossing_to_kill: Option<Duration>,
    pub peak_bytes: i64,
    /// A `RuntimeUnresponsive` event named the hog.
    pub event: bool,
    /// How much `monitor_runtime_unresponsive_calls_total` grew.
    pub unanswered_calls: u64,
    /// `monitor status` named the hog as the runtime's last silence.
    pub status_names_it: bool,
    pub hog_alive: bool,
    pub bystander_evicted: bool,
    pub oom_kills: u64,
    pub bystander: Option<PodRecord>,
    pub hog: Option<PodRecord>,
    /// The hog's pod went once its manifest was removed (containerd answering again).
    pub removed: bool,
    /// The agent's log lines of the cycle that name the hog or the hot path (at most 40),
    /// to tell what happened when the cycle lost.
    pub agent_lines: String,
}

impl Cycle {
    /// Freed within [`FREED_WITHIN`] of the crossing.
    pub fn freed_in_time(&self) -> bool {
        self.crossing_to_freed.is_some_and(|d| d <= FREED_WITHIN) && !self.hog_alive
    }

    /// The silence was reported by event, metric and status.
    pub fn silence_reported(&self) -> bool {
        self.event && self.unanswered_calls > 0 && self.status_names_it
    }

    /// The hog's record says it was evicted.
    pub fn hog_evicted(&self) -> bool {
        self.hog
            .as_ref()
            .is_some_and(|h| h.phase == Phase::Failed && h.reason.as_deref() == Some("Evicted"))
    }

    pub fn summary(&self) -> String {
        format!(
            "{}: crossed {} (seen by {}), killing {}, freed {}, peak {} MiB, hog alive {}, hog record {:?}/{:?}, \
             RuntimeUnresponsive event {}, unanswered calls {}, in status {}, bystander {:?}, \
             OOM kills {}, removed after resume {}",
            self.name,
            self.crossed,
            self.crossing_seen_by,
            self.crossing_to_kill
                .map_or("not seen".to_string(), |d| format!(
                    "{:.1} ms after the crossing",
                    ms(d)
                )),
            self.crossing_to_freed
                .map_or("never".to_string(), |d| format!(
                    "{:.1} ms after the crossing",
                    ms(d)
                )),
            self.peak_bytes / MIB as i64,
            self.hog_alive,
            self.hog.as_ref().map(|h| h.phase),
            self.hog.as_ref().and_then(|h| h.reason.clone()),
            self.event,
            self.unanswered_calls,
            self.status_names_it,
            self.bystander.as_ref().map(|b| (b.phase, b.reason.clone())),
            self.oom_kills,
            self.removed,
        )
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The losses of the wedged-runtime scenario over its cycles; every loss column must stay
/// zero.
#[derive(Clone, Debug, Default)]
pub struct WedgedTally {
    pub cycles: u32,
    /// The hog's memory not back within 1 s of the crossing (or never crossed).
    pub memory_not_freed: u32,
    /// A pod other than the hog evicted (or not running any more).
    pub bystanders_evicted: u32,
    /// No `RuntimeUnresponsive` event, no unanswered call counted, or not in `monitor status`.
    pub silence_unreported: u32,
    /// Kernel OOM kills in the pods cgroup.
    pub oom_kills: u64,
    /// Crossing to freed, per cycle.
    pub freed_after: Vec<Duration>,
    pub findings: Vec<String>,
}

impl WedgedTally {
    pub fn clean(&self) -> bool {
        self.memory_not_freed == 0
            && self.bystanders_evicted == 0
            && self.silence_unreported == 0
            && self.oom_kills == 0
    }

    pub fn add(&mut self, cycle: &Cycle) {
        self.cycles += 1;
        let mut lost = false;
        if !cycle.freed_in_time() {
            self.memory_not_freed += 1;
            lost = true;
        }
        if cycle.bystander_evicted {
            self.bystanders_evicted += 1;
            lost = true;
        }
        if !cycle.silence_reported() {
            self.silence_unreported += 1;
            lost = true;
        }
        self.oom_kills += cycle.oom_kills;
        lost |= cycle.oom_kills > 0;
        if let Some(d) = cycle.crossing_to_freed {
            self.freed_after.push(d);
        }
        if lost {
            self.findings
                .push(format!("{}\n{}", cycle.summary(), cycle.agent_lines));
        } else if !cycle.hog_evicted() || !cycle.removed {
            self.findings.push(format!("note: {}", cycle.summary()));
        }
    }

    /// The table `cargo xtask chaos` prints.
    pub fn table(&self, planned: u32) -> String {
        let mut freed = self.freed_after.clone();
        freed.sort();
        let stat = |q: f64| {
            freed
                .get(((freed.len() as f64 - 1.0) * q).floor() as usize)
                .map_or("-".to_string(), |d| format!("{:.1}", ms(*d)))
        };
        let mut out = String::from(
            "| scenario | cycles | memory not freed within 1 s | bystanders evicted | silence not reported | OOM kills | crossing → freed ms (p50 / max) |\n\
             |---|---|---|---|---|---|---|\n",
        );
        out.push_str(&format!(
            "| wedged runtime | {}/{planned} | {} | {} | {} | {} | {} / {} |\n",
            self.cycles,
            self.memory_not_freed,
            self.bystanders_evicted,
            self.silence_unreported,
            self.oom_kills,
            stat(0.5),
            stat(1.0),
        ));
        for finding in &self.findings {
            out.push_str(&format!("  - wedged runtime: {finding}\n"));
        }
        out
    }
}

/// The scenario for `cycles` cycles on one node.
pub fn wedged_runtime(cycles: u32) -> WedgedTally {
    let mut tally = WedgedTally::default();
    let mut node = WedgedNode::start();
    for _ in 0..cycles {
        let cycle = node.cycle();
        tally.add(&cycle);
        if !cycle.removed {
            // The node is not back to its start: a further cycle would measure that.
            tally.findings.push(format!(
                "{}: its pod was not removed after containerd resumed; cycles stop here\n{}",
                cycle.name,
                tail(&node.log(), 40)
            ));
            break;
        }
    }
    tally
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// What is left of a killed pod's memory when it counts as freed.
const FREED_BELOW_BYTES: i64 = 32 * MIB as i64;

/// Samples memory cgroups every millisecond on a thread of its own.
struct Sampler {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Sampled>,
}

/// What the sampler saw.
#[derive(Default)]
struct Sampled {
    crossed: Option<Instant>,
    near: Option<Instant>,
    freed: Option<Instant>,
    /// When the hog's cgroup held less than [`FREED_BELOW_BYTES`] (or was gone).
    lows: Vec<Instant>,
    peak: i64,
}

/// How far below the threshold the sampler's peak may stay when the agent killed the hog
/// between two samples: one 4 MiB allocation step of the hog, and as much again for the
/// pages faulted in while the sample was read.
const NEAR_BYTES: i64 = 8 * MIB as i64;

/// An `Instant` as CLOCK_MONOTONIC ns (Rust's `Instant` is that clock on Linux).
fn instant_ns(at: Instant) -> u64 {
    monotonic_ns().saturating_sub(u64::try_from(at.elapsed().as_nanos()).unwrap_or(0))
}

/// The `at_ns` of the first line of `log` that contains `needle`.
fn logged_at(log: &str, needle: &str) -> Option<u64> {
    log.lines().find_map(|l| {
        if !l.contains(needle) {
            return None;
        }
        let start = l.find(" at_ns=")? + " at_ns=".len();
        l[start..].split_whitespace().next()?.parse().ok()
    })
}

impl Sampler {
    /// Watches `pods` (the pods cgroup) and `pod` (the hog's own): the first sample at
    /// which the pods' working set is at or over the threshold, the first at which it is
    /// within [`NEAR_BYTES`] of it, the first one after that at which the hog's cgroup
    /// holds less than [`FREED_BELOW_BYTES`] (or is gone), and the pods' peak.
    fn start(pods: std::path::PathBuf, pod: std::path::PathBuf) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut seen = Sampled::default();
            while !stopping.load(Ordering::Relaxed) && seen.freed.is_none() {
                let ws = working_set(&pods);
                let at = Instant::now();
                seen.peak = seen.peak.max(ws);
                if seen.crossed.is_none() && ws >= THRESHOLD_BYTES {
                    seen.crossed = Some(at);
                }
                if seen.near.is_none() && ws >= THRESHOLD_BYTES - NEAR_BYTES {
                    seen.near = Some(at);
                }
                let hog = usage(&pod);
                if seen.near.is_some() && hog < FREED_BELOW_BYTES {
                    seen.freed = Some(Instant::now());
                }
                // Under emulation the sampler's thread may not run through the whole
                // climb and see neither the crossing nor the approach: the times of the
                // samples with the hog's cgroup low are kept, for the cycle to judge
                // against the agent's eviction stamp.
                if hog < FREED_BELOW_BYTES {
                    seen.lows.push(at);
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            seen
        });
        Sampler { stop, thread }
    }

    /// Waits until the memory is freed after a crossing, or `timeout`.
    fn until_freed(self, timeout: Duration) -> Sampled {
        let deadline = Instant::now() + timeout;
        while !self.thread.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().expect("the sampler")
    }
}

/// A memory cgroup's usage (v1 or v2 file); 0 once it is gone.
fn usage(dir: &Path) -> i64 {
    std::fs::read_to_string(dir.join("memory.usage_in_bytes"))
        .or_else(|_| std::fs::read_to_string(dir.join("memory.current")))
        .ok()
        .and_then(|u| u.trim().parse().ok())
        .unwrap_or(0)
}

/// A memory cgroup's working set: usage less inactive file pages (v1 or v2 files).
fn working_set(dir: &Path) -> i64 {
    let stat = std::fs::read_to_string(dir.join("memory.stat")).unwrap_or_default();
    let stat = monitor::observe::parse::flat_keyed(&stat);
    let inactive = stat
        .get("total_inactive_file")
        .or_else(|| stat.get("inactive_file"))
        .map_or(0, |v| *v as i64);
    (usage(dir) - inactive).max(0)
}
