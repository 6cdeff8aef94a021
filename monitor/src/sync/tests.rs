//! The synchronize loop on paused time: scripted observations, a recording fake runtime,
//! the real policy and the real loop. Time moves only when every task waits, so grace
//! periods of minutes pass at once and every timing below is exact.
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{broadcast, mpsc};
use tokio::time::Instant;

use super::*;
use crate::config::parse_agent_config;
use crate::notify::{CrossingHook, Wake, WakeSender, WakeSource, wake_channel};
use crate::observe::{FsStats, NodeMemory, NodeObservation, ObserveError, PidStats};
use crate::policy::eviction::{EvictionDecision, ReclaimResult};
use crate::policy::signal::Signal;
use crate::policy::stats::{PodStats, PodWithStats};
use crate::policy::testing::pod;
use crate::policy::types::{NodeConditionType, Resource};
use crate::runtime::port::{
    ActivePods, BoxFuture, ConditionsSink, EvictionOutcome, NodeReclaim, PodKiller, Ports,
};
use crate::state::SharedState;
use crate::sync::eviction::Wait;

const GI: u64 = 1 << 30;
const MI: u64 = 1 << 20;

/// Node memory capacity in the tests.
const CAPACITY: u64 = 8 * GI;

/// hard memory.available<1Gi; soft memory.available<2Gi for 30 s, pods get at most 10 s.
const KUBELET: &str = "\
evictionHard: {memory.available: 1Gi, nodefs.available: 10%}
evictionSoft: {memory.available: 2Gi}
evictionSoftGracePeriod: {memory.available: 30s}
evictionMaxPodGracePeriod: 10
";

/// One kill the fake runtime was asked for.
#[derive(Clone, Debug, PartialEq)]
struct KillCall {
    pod: String,
    grace_period_seconds: i64,
    kill_timeout: Duration,
    /// Paused-time offset from the test's start.
    at: Duration,
}

/// The node as the fake runtime and observer see it.
struct Node {
    origin: Instant,
    /// Memory used outside the pods.
    base_usage: u64,
    /// Pods whose processes exist: key, working set, and whether they were told to go
    /// (a pod being evicted is no candidate any more, but its memory counts until it is
    /// gone, as with a real runtime).
    pods: Vec<(String, u64, bool)>,
    /// How long a kill takes beyond the grace period.
    kill_delay: Duration,
    /// Where the fake pods' `cgroup.kill` files are, when the hot path is tested.
    kill_dir: Option<std::path::PathBuf>,
    nodefs_available: u64,
    kills: Vec<KillCall>,
    /// Outcomes the next kills return, in order; then `Evicted`.
    scripted: Vec<EvictionOutcome>,
    reclaims: Vec<(Resource, Signal)>,
    reclaim_frees: u64,
    /// The reclaim removes dead containers whose space the runtime frees later.
    reclaim_releases_later: bool,
    conditions: Vec<NodeConditionType>,
    /// The pods whose containers' memory a pass asked for, in order.
    container_reads: Vec<String>,
    /// What each pass asked the pods' stats for.
    needs_seen: Vec<crate::runtime::port::StatsNeeds>,
    /// The node filesystem does not answer: the observation leaves it out.
    nodefs_hung: bool,
    /// An evicted pod's memory stays charged (page cache, tmpfs): its working set moves
    /// to the rest of the node instead of being freed.
    unfreeable: bool,
    /// Each kill answers `AlreadyGone`: the pod's exit was handled before the eviction
    /// was booked (as after a hot kill), though the kill did end it.
    gone_before_booking: bool,
    /// Runs once in the next read of the pods, as if it happened while a pass reads.
    during_read: Option<Box<dyn FnOnce() + Send>>,
}

#[derive(Clone)]
struct Fake(Arc<Mutex<Node>>);

impl Fake {
    fn new(base_usage: u64, pods: &[(&str, u64)]) -> Fake {
        Fake(Arc::new(Mutex::new(Node {
            origin: Instant::now(),
            base_usage,
            pods: pods
                .iter()
                .map(|(k, ws)| (k.to_string(), *ws, false))
                .collect(),
            kill_delay: Duration::ZERO,
            kill_dir: None,
            nodefs_available: 50 * GI,
            kills: Vec::new(),
            scripted: Vec::new(),
            reclaims: Vec::new(),
            reclaim_frees: 0,
            reclaim_releases_later: false,
            conditions: Vec::new(),
            container_reads: Vec::new(),
            needs_seen: Vec::new(),
            nodefs_hung: false,
            unfreeable: false,
            gone_before_booking: false,
            during_read: None,
        })))
    }

    fn node(&self) -> std::sync::MutexGuard<'_, Node> {
        self.0.lock().expect("fake node lock")
    }

    fn kills(&self) -> Vec<KillCall> {
        self.node().kills.clone()
    }
}

impl Observe for Fake {
    fn observe(&mut self) -> Result<NodeObservation, ObserveError> {
        let node = self.node();
        let usage = node.base_usage + node.pods.iter().map(|(_, ws, _)| ws).sum::<u64>();
        Ok(NodeObservation {
            taken_at_ns: 0,
            memory: NodeMemory {
                capacity_bytes: CAPACITY,
                usage_bytes: usage,
                inactive_file_bytes: 0,
                working_set_bytes: usage,
                available_bytes: CAPACITY - usage,
                ..NodeMemory::default()
            },
            allocatable: None,
            nodefs: (!node.nodefs_hung).then_some(FsStats {
                capacity_bytes: 100 * GI,
                available_bytes: node.nodefs_available,
                inodes: 1000,
                inodes_free: 900,
            }),
            imagefs: None,
            pids: Some(PidStats {
                max: 4096,
                current: 100,
            }),
            pressure: Default::default(),
            dedicated_imagefs: false,
            failed: if node.nodefs_hung {
                vec![
                    "nodefs: /: no answer after 2s; its signals are left out until it answers"
                        .into(),
                ]
            } else {
                Vec::new()
            },
        })
    }
}

impl ActivePods for Fake {
    fn active_pods(&self, needs: crate::runtime::port::StatsNeeds) -> Vec<PodWithStats> {
        let during_read = self.node().during_read.take();
        if let Some(run) = during_read {
            run();
        }
        let mut node = self.node();
        node.needs_seen.push(needs);
        node.pods
            .iter()
            .filter(|(_, _, evicted)| !evicted)
            .map(|(key, ws, _)| {
                let (namespace, name) = key.split_once('/').expect("namespace/name");
                let mut pod = pod(name, "", "");
                pod.metadata.namespace = namespace.into();
                pod.spec.termination_grace_period_seconds = Some(60);
                PodWithStats {
                    pod: pod.into(),
                    stats: PodStats {
                        memory_working_set_bytes: Some(*ws),
                        // As a runtime lists them: the container's memory is read only
                        // when asked for.
                        containers: vec![crate::policy::stats::ContainerStats {
                            name: "c".into(),
                            ..Default::default()
                        }],
                        ..PodStats::default()
                    },
                }
            })
            .collect()
    }

    /// The pod's one container holds all its memory.
    fn add_container_memory(&self, pod: &mut PodWithStats) {
        let mut node = self.node();
        let key = pod.pod.key();
        node.container_reads.push(key);
        for container in &mut pod.stats.containers {
            container.memory_working_set_bytes = pod.stats.memory_working_set_bytes;
        }
    }
}

impl PodKiller for Fake {
    /// A pod leaves when its grace period ends (it handles SIGTERM by exiting at the last
    /// moment), unless an outcome is scripted.
    fn evict(&self, decision: &EvictionDecision) -> BoxFuture<EvictionOutcome> {
        let fake = self.clone();
        let decision = decision.clone();
        Box::pin(async move {
            let scripted = {
                let mut node = fake.node();
                let at = node.origin.elapsed();
                node.kills.push(KillCall {
                    pod: decision.pod_key.clone(),
                    grace_period_seconds: decision.grace_period_seconds,
                    kill_timeout: decision.kill_timeout,
                    at,
                });
                for pod in node.pods.iter_mut().filter(|p| p.0 == decision.pod_key) {
                    pod.2 = true;
                }
                let scripted = (!node.scripted.is_empty()).then(|| node.scripted.remove(0));
                (scripted, node.kill_delay)
            };
            let (scripted, delay) = scripted;
            let grace = u64::try_from(decision.grace_period_seconds).unwrap_or(0);
            tokio::time::sleep(Duration::from_secs(grace) + delay).await;
            match scripted {
                Some(outcome) => outcome,
                None => {
                    let mut node = fake.node();
                    let held: u64 = node
                        .pods
                        .iter()
                        .filter(|(k, _, _)| *k == decision.pod_key)
                        .map(|(_, ws, _)| ws)
                        .sum();
                    if node.unfreeable {
                        node.base_usage += held;
                    }
                    node.pods.retain(|(k, _, _)| *k != decision.pod_key);
                    if node.gone_before_booking {
                        EvictionOutcome::AlreadyGone
                    } else {
                        EvictionOutcome::Evicted
                    }
                }
            }
        })
    }

    fn kill_switch(&self, pod_key: &str) -> Option<crate::runtime::port::KillSwitch> {
        let path = self.kill_file(pod_key)?;
        let dir = path.parent()?.to_path_buf();
        let switch = crate::runtime::port::KillSwitch::open(pod_key, &path).ok()?;
        Some(switch.with_memory(crate::observe::CgroupReader::new(
            crate::observe::CgroupVersion::V1,
            dir,
        )))
    }
}

impl Fake {
    /// The fake `cgroup.kill` of a pod, in a directory of its own with its usage as the
    /// fake node holds it (created on first use).
    fn kill_file(&self, pod: &str) -> Option<std::path::PathBuf> {
        let (dir, usage) = {
            let node = self.node();
            let usage = node
                .pods
                .iter()
                .find(|(key, _, _)| key == pod)
                .map_or(0, |(_, ws, _)| *ws);
            (node.kill_dir.clone()?, usage)
        };
        let dir = dir.join(pod.replace('/', "_"));
        std::fs::create_dir_all(&dir).expect("fake pod cgroup");
        std::fs::write(dir.join("memory.usage_in_bytes"), format!("{usage}\n"))
            .expect("fake usage");
        let path = dir.join("cgroup.kill");
        if !path.exists() {
            std::fs::write(&path, "").expect("fake cgroup.kill");
        }
        Some(path)
    }
}

impl NodeReclaim for Fake {
    fn reclaim(&self, resource: Resource, signal: Signal) -> ReclaimResult {
        let mut node = self.node();
        node.reclaims.push((resource, signal));
        node.nodefs_available += node.reclaim_frees;
        ReclaimResult {
            freed_bytes: node.reclaim_frees,
            freed_inodes: 0,
            released_later: node.reclaim_releases_later,
        }
    }
}

impl ConditionsSink for Fake {
    fn conditions_changed(&self, conditions: &[NodeConditionType]) {
        self.node().conditions = conditions.to_vec();
    }
}

/// A running loop and its handles.
struct Harness {
    fake: Fake,
    hot: Option<Arc<HotPath>>,
    wakes: WakeSender,
    reports: broadcast::Receiver<SyncReport>,
    state: SharedState,
}

impl Harness {
    /// Starts the loop after `pending` wakes are already queued (so they coalesce).
    fn start(fake: Fake, pending: usize) -> Harness {
        Harness::start_with(fake, pending, KUBELET)
    }

    /// [`Harness::start`] with another configuration file (its `monitor:` block applies).
    fn start_with(fake: Fake, pending: usize, config: &str) -> Harness {
        Harness::start_full(fake, pending, config, false)
    }

    /// [`Harness::start`] with the hot kill path.
    fn start_hot(fake: Fake, pending: usize) -> Harness {
        Harness::start_full(fake, pending, KUBELET, true)
    }

    fn start_full(fake: Fake, pending: usize, config: &str, hot: bool) -> Harness {
        let kubelet = parse_agent_config(config, "kubelet.yaml", &[])
            .expect("test config")
            .kubelet;
        let (wakes, rx): (WakeSender, mpsc::Receiver<Wake>) = wake_channel();
        for _ in 0..pending {
            wakes.wake(WakeSource::Timer, crate::notify::WakeDetail::None);
        }
        let state = SharedState::default();
        let (reports, subscriber) = broadcast::channel(64);
        let hot = hot.then(|| Arc::new(HotPath::new()));
        let mut eviction = EvictionSync::new(
            kubelet,
            Ports::of(Arc::new(fake.clone())),
            state.clone(),
            wakes.clone(),
        );
        if let Some(hot) = &hot {
            eviction = eviction.with_hot_path(hot.clone());
        }
        let sync_loop = SyncLoop {
            observer: fake.clone(),
            eviction,
            arming: None,
            reports,
            state: state.clone(),
            origin: Instant::now(),
        };
        tokio::spawn(sync_loop.run(rx));
        Harness {
            fake,
            hot,
            wakes,
            reports: subscriber,
            state,
        }
    }

    fn wake(&self) {
        self.wakes
            .wake(WakeSource::Timer, crate::notify::WakeDetail::None);
    }

    /// The next report, failing the test after `within` of paused time.
    async fn next(&mut self, within: Duration) -> SyncReport {
        match tokio::time::timeout(within, self.reports.recv()).await {
            Ok(Ok(report)) => report,
            Ok(Err(err)) => panic!("report channel: {err}"),
            Err(_) => panic!("no synchronize within {within:?}"),
        }
    }

    /// Asserts that no synchronize happens for `quiet` of paused time.
    async fn none_for(&mut self, quiet: Duration) {
        if let Ok(report) = tokio::time::timeout(quiet, self.reports.recv()).await {
            panic!("unexpected synchronize: {report:?}");
        }
    }
}

fn started(report: &SyncReport) -> Vec<(String, i64)> {
    report
        .pass
        .as_ref()
        .map(|p| {
            p.started
                .iter()
                .map(|d| (d.pod_key.clone(), d.grace_period_seconds))
                .collect()
        })
        .unwrap_or_default()
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

#[tokio::test(start_paused = true)]
async fn a_burst_of_wakes_is_one_synchronize() {
    let mut h = Harness::start(Fake::new(GI, &[("default/a", GI)]), 5);
    let report = h.next(secs(1)).await;
    assert_eq!(report.sequence, 1);
    assert_eq!(report.wakes.len(), 5, "all pending wakes coalesce");
    assert_eq!(report.sources(), vec![WakeSource::Timer]);
    // Calm node: no deadline, no eviction, so nothing wakes the loop again.
    h.none_for(secs(600)).await;
}

#[tokio::test(start_paused = true)]
async fn a_soft_threshold_evicts_when_its_grace_period_ends_without_another_wake() {
    // 8Gi − 6.5Gi = 1.5Gi available: under the soft 2Gi, above the hard 1Gi.
    let mut h = Harness::start(
        Fake::new(5 * GI, &[("default/small", GI / 2), ("default/big", GI)]),
        1,
    );
    let first = h.next(secs(1)).await;
    let pass = first.pass.as_ref().expect("observed");
    assert_eq!(pass.outcome.thresholds_met.len(), 1);
    assert!(!pass.outcome.thresholds_met[0].grace_period_met);
    assert!(started(&first).is_empty(), "grace period running");

    // The loop wakes itself 1 ms past the 30 s grace period: no timer, no kernel event.
    let second = h.next(secs(60)).await;
    assert_eq!(second.sources(), vec![WakeSource::Deadline]);
    assert_eq!(second.now, secs(30) + Duration::from_millis(1));
    // The biggest user goes, with min(its 60 s, evictionMaxPodGracePeriod 10 s).
    assert_eq!(started(&second), vec![("default/big".to_string(), 10)]);
    let kills = h.fake.kills();
    assert_eq!(kills.len(), 1);
    assert_eq!(kills[0].kill_timeout, secs(15), "1.5 × grace");
}

#[tokio::test(start_paused = true)]
async fn containers_memory_is_read_for_the_pod_a_memory_eviction_picks_and_named_in_its_message() {
    // 8Gi − 7.5Gi = 0.5Gi available: under the hard 1Gi.
    let pods: Vec<(String, u64)> = (0..20)
        .map(|i| (format!("default/pod{i:02}"), GI / 8 + i * MI))
        .collect();
    let pods: Vec<(&str, u64)> = pods.iter().map(|(k, ws)| (k.as_str(), *ws)).collect();
    let fake = Fake::new(5 * GI, &pods);
    // The eviction stays under way: no second pass looks for another victim.
    fake.node().kill_delay = secs(3600);
    let mut h = Harness::start(fake, 1);
    let report = h.next(secs(1)).await;
    let pass = report.pass.as_ref().expect("observed");
    let decision = pass.started.first().expect("a hard eviction");
    assert_eq!(decision.pod_key, "default/pod19", "the biggest user");
    assert!(
        decision.message.contains("Container c was using"),
        "the message names the victim's container: {}",
        decision.message
    );
    // One read for the one memory signal configured, of the victim alone: never all 20.
    assert_eq!(
        h.fake.node().container_reads,
        vec!["default/pod19".to_string()]
    );
}

#[tokio::test(start_paused = true)]
async fn a_hard_crossing_during_a_soft_grace_period_acts_at_once_on_another_pod() {
    let mut h = Harness::start(
        Fake::new(5 * GI, &[("default/small", GI / 2), ("default/big", GI)]),
        1,
    );
    h.next(secs(1)).await;
    let soft = h.next(secs(60)).await;
    assert_eq!(started(&soft), vec![("default/big".to_string(), 10)]);

    // Two seconds into big's 10 s grace period the node crosses the hard threshold.
    tokio::time::sleep(secs(2)).await;
    h.fake.node().base_usage = 6 * GI + GI / 2;
    h.wake();
    let hard = h.next(secs(1)).await;
    assert_eq!(
        started(&hard),
        vec![("default/small".to_string(), 0)],
        "immediate, on the pod that is not already going: {}",
        hard.summary
    );
    let kills = h.fake.kills();
    assert_eq!(kills.len(), 2);
    assert!(
        kills[1].at < kills[0].at + secs(10),
        "the hard eviction did not wait for the soft one: {kills:?}"
    );
    assert_eq!(kills[1].at, kills[0].at + secs(2));
}

#[tokio::test(start_paused = true)]
async fn with_a_1_s_hard_grace_period_a_hard_crossing_still_counts_as_immediate() {
    // The kubelet >= 1.31 behaviour: hard evictions get 1 s (SIGTERM, then SIGKILL).
    let config = format!("{KUBELET}monitor: {{hardEvictionGracePeriodSeconds: 1}}\n");
    let mut h = Harness::start_with(
        Fake::new(5 * GI, &[("default/small", GI / 2), ("default/big", GI)]),
        1,
        &config,
    );
    h.next(secs(1)).await;
    let soft = h.next(secs(60)).await;
    assert_eq!(started(&soft), vec![("default/big".to_string(), 10)]);

    // Two seconds into big's 10 s grace period the node crosses the hard threshold: a
    // grace of 1 s must not make it wait for the soft eviction.
    tokio::time::sleep(secs(2)).await;
    h.fake.node().base_usage = 6 * GI + GI / 2;
    h.wake();
    let hard = h.next(secs(1)).await;
    assert_eq!(
        started(&hard),
        vec![("default/small".to_string(), 1)],
        "{}",
        hard.summary
    );
    assert!(hard.pass.as_ref().expect("observed").started[0].immediate);
    let kills = h.fake.kills();
    assert_eq!(kills.len(), 2);
    assert_eq!(kills[1].at, kills[0].at + secs(2));
    assert_eq!(kills[1].kill_timeout, secs(2), "max(2 s, 1.5 × 1 s)");
}

#[tokio::test(start_paused = true)]
async fn one_eviction_at_a_time_and_stale_pressure_never_evicts_twice() {
    // 8Gi − 7.5Gi = 0.5Gi available: hard threshold met; each pod frees about 100Mi, so
    // pressure stays after each eviction.
    let fake = Fake::new(
        7 * GI + GI / 2 - 300 * MI,
        &[
            ("default/a", 100 * MI),
            ("default/b", 110 * MI),
            ("default/c", 90 * MI),
        ],
    );
    // A kill takes 500 ms to empty the pod's cgroups.
    fake.node().kill_delay = Duration::from_millis(500);
    let mut h = Harness::start(fake, 1);
    let first = h.next(secs(1)).await;
    assert_eq!(started(&first), vec![("default/b".to_string(), 0)]);
    // A wake while b is still going: the stats still count b's memory, so the policy
    // would pick a; the loop holds that back.
    tokio::time::sleep(Duration::from_millis(100)).await;
    h.wake();
    let during = h.next(secs(1)).await;
    assert!(started(&during).is_empty(), "{}", during.summary);
    let deferred = &during.pass.as_ref().expect("observed").deferred;
    assert_eq!(deferred.len(), 1, "{}", during.summary);
    assert_eq!(deferred[0].decision.pod_key, "default/a");
    assert_eq!(deferred[0].wait, Wait::UnderWay);
    // b is gone: the loop decides again at once on fresh stats, and the next pod goes.
    let after = h.next(secs(1)).await;
    assert_eq!(after.sources(), vec![WakeSource::Eviction]);
    assert_eq!(after.now, first.now + Duration::from_millis(500));
    let pass = after.pass.as_ref().expect("observed");
    assert_eq!(pass.finished.len(), 1);
    assert_eq!(pass.finished[0].outcome, EvictionOutcome::Evicted);
    assert_eq!(started(&after), vec![("default/a".to_string(), 0)]);
    let kills: Vec<String> = h.fake.kills().into_iter().map(|k| k.pod).collect();
    assert_eq!(kills, vec!["default/b", "default/a"]);
}

#[tokio::test(start_paused = true)]
async fn an_eviction_under_way_defers_the_next_decision_on_the_same_pressure() {
    // Soft pressure only; the victim takes its whole 10 s grace period to leave.
    let mut h = Harness::start(
        Fake::new(5 * GI, &[("default/small", GI / 2), ("default/big", GI)]),
        1,
    );
    h.next(secs(1)).await;
    let soft = h.next(secs(60)).await;
    assert_eq!(started(&soft), vec![("default/big".to_string(), 10)]);
    // Wakes during big's grace period: the soft threshold is still met on stats that
    // still count big's memory, so small must not be evicted for it.
    for _ in 0..3 {
        tokio::time::sleep(secs(2)).await;
        h.wake();
        let report = h.next(secs(1)).await;
        assert!(started(&report).is_empty(), "{}", report.summary);
        let pass = report.pass.as_ref().expect("observed");
        assert_eq!(pass.deferred.len(), 1, "{}", report.summary);
    }
    // When big is gone the loop decides again at once, on fresh stats: resolved.
    let done = h.next(secs(10)).await;
    assert_eq!(done.sources(), vec![WakeSource::Eviction]);
    assert_eq!(done.now, soft.now + secs(10));
    assert!(started(&done).is_empty(), "{}", done.summary);
    assert_eq!(h.fake.kills().len(), 1);
    assert_eq!(h.state.read().metrics.evictions["memory.available"], 1);
}

#[tokio::test(start_paused = true)]
async fn a_failed_kill_is_retried_at_once_a_bounded_number_of_times_and_reported() {
    let mut h = Harness::start(Fake::new(7 * GI, &[("default/stuck", 600 * MI)]), 0);
    h.fake.node().scripted = vec![EvictionOutcome::TimedOut { alive: 2 }; 5];
    h.wake();
    let first = h.next(secs(1)).await;
    assert_eq!(started(&first), vec![("default/stuck".to_string(), 0)]);
    let done = h.next(secs(60)).await;
    let pass = done.pass.as_ref().expect("observed");
    assert_eq!(pass.finished.len(), 1, "{}", done.summary);
    assert_eq!(pass.finished[0].attempts, eviction::MAX_KILL_ATTEMPTS);
    assert_eq!(
        pass.finished[0].outcome,
        EvictionOutcome::TimedOut { alive: 2 }
    );
    let kills = h.fake.kills();
    assert_eq!(kills.len(), 3);
    assert!(kills.iter().all(|k| k.grace_period_seconds == 0));
    let state = h.state.read();
    assert_eq!(state.metrics.eviction_outcomes["timed_out"], 1);
    assert!(!state.metrics.evictions.contains_key("memory.available"));
    let view = state.evictions.back().expect("recorded");
    assert_eq!((view.outcome.as_str(), view.attempts), ("timed_out", 3));
    assert!(
        state
            .events
            .iter()
            .any(|e| e.reason == "EvictionFailed" && e.object == "default/stuck"),
        "{:?}",
        state.events
    );
}

#[tokio::test(start_paused = true)]
async fn a_hung_filesystem_turns_its_signals_off_once_and_memory_still_evicts() {
    // 8Gi − 7.5Gi = 0.5Gi available: under the hard memory.available<1Gi.
    let fake = Fake::new(7 * GI, &[("default/p", GI / 2)]);
    fake.node().nodefs_hung = true;
    fake.node().kill_delay = secs(3600);
    let mut h = Harness::start(fake, 1);
    let first = h.next(secs(1)).await;
    assert_eq!(
        started(&first),
        vec![("default/p".to_string(), 0)],
        "{}",
        first.summary
    );
    let pass = first.pass.as_ref().expect("observed");
    assert!(
        !pass.observations.contains_key(&Signal::NodeFsAvailable),
        "no nodefs signal without its statvfs: {:?}",
        pass.observations.keys()
    );
    h.wake();
    h.next(secs(1)).await;
    h.fake.node().nodefs_hung = false;
    h.wake();
    h.next(secs(1)).await;
    let state = h.state.read();
    let reasons: Vec<&str> = state
        .events
        .iter()
        .filter(|e| e.reason.starts_with("Signal"))
        .map(|e| e.reason.as_str())
        .collect();
    assert_eq!(
        reasons,
        vec!["SignalUnavailable", "SignalRestored"],
        "said once each"
    );
}

#[tokio::test(start_paused = true)]
async fn a_kill_that_fails_once_succeeds_on_its_retry() {
    let mut h = Harness::start(Fake::new(7 * GI, &[("default/p", 600 * MI)]), 0);
    h.fake.node().scripted = vec![EvictionOutcome::KillFailed("EBUSY".into())];
    h.wake();
    h.next(secs(1)).await;
    let done = h.next(secs(60)).await;
    let finished = &done.pass.as_ref().expect("observed").finished;
    assert_eq!(finished[0].outcome, EvictionOutcome::Evicted);
    assert_eq!(finished[0].attempts, 2);
    assert_eq!(h.state.read().metrics.evictions["memory.available"], 1);
}

#[tokio::test(start_paused = true)]
async fn node_level_reclaim_runs_off_the_loop_and_spares_the_pods_when_enough() {
    let fake = Fake::new(GI, &[("default/a", GI)]);
    // nodefs 5Gi of 100Gi free: under the hard 10 %.
    fake.node().nodefs_available = 5 * GI;
    fake.node().reclaim_frees = 20 * GI;
    let mut h = Harness::start(fake, 1);
    let report = h.next(secs(1)).await;
    let pass = report.pass.as_ref().expect("observed");
    assert_eq!(
        h.fake.node().reclaims,
        vec![(Resource::EphemeralStorage, Signal::NodeFsAvailable)]
    );
    assert!(pass.outcome.node_reclaim.sufficient, "{}", report.summary);
    assert!(started(&report).is_empty());
    assert_eq!(
        h.fake.node().conditions,
        vec![NodeConditionType::DiskPressure]
    );
}

/// A reclaim that removed dead containers, whose writable layers the runtime deletes in
/// the background: the disk signal's eviction waits for the space to show, up to
/// [`eviction::RECLAIM_SETTLE`]; it starts then if the space never came.
#[rstest::rstest]
#[case::the_space_shows(true)]
#[case::the_space_never_shows(false)]
#[tokio::test(start_paused = true)]
async fn a_reclaim_freeing_in_the_background_holds_the_disk_eviction_for_a_while(
    #[case] space_shows: bool,
) {
    let fake = Fake::new(GI, &[("default/a", GI)]);
    // nodefs 5Gi of 100Gi free: under the hard 10 %.
    fake.node().nodefs_available = 5 * GI;
    fake.node().reclaim_releases_later = true;
    let mut h = Harness::start(fake, 1);
    let first = h.next(secs(1)).await;
    assert!(started(&first).is_empty(), "{}", first.summary);
    let deferred = &first.pass.as_ref().expect("observed").deferred;
    assert_eq!(deferred.len(), 1, "{}", first.summary);
    assert_eq!(deferred[0].wait, Wait::ReclaimSettling);
    assert!(
        first.summary.contains("still freeing the dead containers"),
        "{}",
        first.summary
    );
    if space_shows {
        // The runtime's collection ran: the next pass sees the space and evicts nobody.
        h.fake.node().nodefs_available = 30 * GI;
        h.wake();
        let next = h.next(secs(1)).await;
        assert!(started(&next).is_empty(), "{}", next.summary);
        assert!(
            next.pass
                .as_ref()
                .expect("observed")
                .outcome
                .thresholds_met
                .is_empty()
        );
        h.none_for(secs(30)).await;
        assert!(h.fake.kills().is_empty());
        return;
    }
    // A pass before the time is up still waits, though its reclaim removed nothing new.
    h.fake.node().reclaim_releases_later = false;
    tokio::time::sleep(secs(2)).await;
    h.wake();
    let waiting = h.next(secs(1)).await;
    assert!(started(&waiting).is_empty(), "{}", waiting.summary);
    // The loop wakes itself when the wait is over, and the eviction starts on the fresh
    // observation.
    let due = h.next(secs(5)).await;
    let waited = due.now - first.now;
    assert!(
        waited >= eviction::RECLAIM_SETTLE && waited < eviction::RECLAIM_SETTLE + secs(1),
        "{waited:?}: {}",
        due.summary
    );
    assert_eq!(started(&due), vec![("default/a".to_string(), 0)]);
    // The wait is granted once per episode: another reclaim removing dead containers does
    // not hold the next eviction back again.
    assert_eq!(h.fake.node().reclaims.len(), 3);
}

#[tokio::test(start_paused = true)]
async fn every_pods_disk_usage_is_read_only_while_a_disk_threshold_is_met_or_near() {
    // nodefs.available<10% of 100Gi: 50Gi free is calm, 9Gi is under it.
    let mut h = Harness::start(Fake::new(3 * GI, &[("default/a", GI)]), 1);
    h.next(secs(1)).await;
    h.fake.node().nodefs_available = 9 * GI;
    h.wake();
    h.next(secs(1)).await;
    let seen = h.fake.node().needs_seen.clone();
    let disk: Vec<bool> = seen.iter().map(|n| n.disk).collect();
    assert_eq!(&disk[..2], &[false, true], "{seen:?}");
    assert!(
        seen.iter().all(|n| n.local_storage_limits),
        "pods with local storage limits are always read: {seen:?}"
    );
}

#[rstest::rstest]
// The kubelet's defaults: memory and disk thresholds, no pid one: no process walk.
#[case::defaults("{}\n", false, true, true, true)]
#[case::pid_threshold(
    "evictionHard: {pid.available: 10%}\nlocalStorageCapacityIsolation: false\n",
    true,
    false,
    false,
    false
)]
#[case::memory_only(
    "evictionHard: {memory.available: 1Gi}\nlocalStorageCapacityIsolation: false\n",
    false,
    false,
    false,
    true
)]
#[case::local_storage_limits_need_disk_of_the_limited_pods(
    "evictionHard: {memory.available: 1Gi}\n",
    false,
    false,
    true,
    true
)]
fn the_pod_stats_read_follow_the_thresholds(
    #[case] yaml: &str,
    #[case] processes: bool,
    #[case] disk: bool,
    #[case] local_storage_limits: bool,
    #[case] container_memory: bool,
) {
    let (kubelet, _) =
        crate::config::kubelet::load_kubelet_config(yaml, "kubelet.yaml").expect("config");
    assert_eq!(
        eviction::stats_needs(&kubelet),
        crate::runtime::port::StatsNeeds {
            processes,
            disk,
            local_storage_limits,
            container_memory
        },
        "{yaml}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_hot_kill_made_while_a_pass_reads_counts_as_that_pass_s_eviction_under_way() {
    // 8Gi − 5Gi = 3Gi available: calm.
    let fake = Fake::new(
        3 * GI + GI / 2,
        &[("default/small", GI / 2), ("default/big", GI)],
    );
    let dir = tempfile::tempdir().expect("tempdir");
    fake.node().kill_dir = Some(dir.path().to_path_buf());
    fake.node().kill_delay = Duration::from_millis(500);
    let mut h = Harness::start_hot(fake, 1);
    let calm = h.next(secs(1)).await;
    assert!(started(&calm).is_empty());
    let hot = h.hot.clone().expect("hot path");
    assert_eq!(hot.armed_pod().as_deref(), Some("default/big"));
    std::fs::write(dir.path().join("memory.usage_in_bytes"), "7000\n").expect("usage");
    std::fs::write(dir.path().join("memory.stat"), "total_inactive_file 0\n").expect("stat");
    hot.set_levels(
        crate::observe::CgroupVersion::V1,
        &[crate::notify::memcg::ThresholdSpec {
            cgroup: dir.path().to_path_buf(),
            usage_bytes: 7000,
            hard: true,
            passed_when_armed: false,
            threshold: None,
        }],
        |_| 0,
    );
    // The node is under the hard threshold, and the crossing reaches the hot path while
    // the next pass reads the pods, after it took the kills made before it: big is killed
    // then, its processes are gone from what the pass reads, and its memory still counts.
    h.fake.node().base_usage = 6 * GI + GI / 2;
    let (crossing, fake) = (hot.clone(), h.fake.clone());
    h.fake.node().during_read = Some(Box::new(move || {
        crossing.hard_crossing(WakeSource::MemcgThreshold);
        for pod in &mut fake.node().pods {
            pod.2 |= pod.0 == "default/big";
        }
    }));
    tokio::time::sleep(secs(1)).await;
    h.wake();
    let next = h.next(secs(1)).await;
    let kill = h.fake.kill_file("default/big").expect("kill file");
    assert_eq!(std::fs::read_to_string(&kill).expect("read"), "1");
    let pass = next.pass.as_ref().expect("observed");
    assert_eq!(pass.hot_kills.len(), 1, "{}", next.summary);
    // Nobody else is evicted for the pressure big's kill answers: the pass's pick on its
    // stats (small, the one pod it read) waits for big's eviction.
    assert_eq!(
        started(&next),
        Vec::<(String, i64)>::new(),
        "{}",
        next.summary
    );
    assert_eq!(
        pass.deferred
            .iter()
            .map(|d| d.decision.pod_key.as_str())
            .collect::<Vec<_>>(),
        vec!["default/small"],
        "{}",
        next.summary
    );
    assert!(
        h.fake.kills().iter().all(|k| k.pod != "default/small"),
        "small was not killed: {}",
        next.summary
    );
}

#[tokio::test(start_paused = true)]
async fn the_hot_path_kills_the_pre_ranked_victim_and_the_next_pass_records_it_once() {
    // 8Gi − 5Gi = 3Gi available: calm.
    let fake = Fake::new(
        3 * GI + GI / 2,
        &[("default/small", GI / 2), ("default/big", GI)],
    );
    let dir = tempfile::tempdir().expect("tempdir");
    fake.node().kill_dir = Some(dir.path().to_path_buf());
    // The runtime's bookkeeping of the eviction takes 500 ms (waiting for the cgroup to
    // empty): long enough to look at the pass while it runs.
    fake.node().kill_delay = Duration::from_millis(500);
    let mut h = Harness::start_hot(fake, 1);
    let calm = h.next(secs(1)).await;
    assert!(started(&calm).is_empty());
    let hot = h.hot.clone().expect("hot path");
    // Armed on the stats just read: the biggest user, as the memory ranking says.
    assert_eq!(hot.armed_pod().as_deref(), Some("default/big"));

    // The kernel's counter (a usage file here) reaches the hard level and the notifier
    // tells the hot path: the victim's cgroup.kill is written at once, no synchronize.
    let usage = dir.path().join("memory.usage_in_bytes");
    std::fs::write(&usage, "7000\n").expect("usage");
    std::fs::write(dir.path().join("memory.stat"), "total_inactive_file 0\n").expect("stat");
    hot.set_levels(
        crate::observe::CgroupVersion::V1,
        &[crate::notify::memcg::ThresholdSpec {
            cgroup: dir.path().to_path_buf(),
            usage_bytes: 7000,
            hard: true,
            passed_when_armed: false,
            threshold: None,
        }],
        |_| 0,
    );
    hot.hard_crossing(WakeSource::MemcgThreshold);
    let kill = h.fake.kill_file("default/big").expect("kill file");
    assert_eq!(std::fs::read_to_string(&kill).expect("read"), "1");
    assert!(h.fake.kills().is_empty(), "no synchronize ran yet");

    // The wake that follows: the node is under the hard threshold on these stats (big's
    // memory is not freed yet), and the pass records big's eviction, nobody else's.
    h.fake.node().base_usage = 6 * GI + GI / 2;
    // A second later (stats of the same instant would be stale to the policy).
    tokio::time::sleep(secs(1)).await;
    h.wake();
    let next = h.next(secs(1)).await;
    let pass = next.pass.as_ref().expect("observed");
    assert_eq!(pass.hot_kills.len(), 1, "{}", next.summary);
    assert_eq!(
        started(&next),
        Vec::<(String, i64)>::new(),
        "{}",
        next.summary
    );
    assert_eq!(
        pass.deferred
            .iter()
            .map(|d| d.decision.pod_key.as_str())
            .collect::<Vec<_>>(),
        vec!["default/small"],
        "the hot kill counts as the immediate eviction under way: {}",
        next.summary
    );
    assert_eq!(
        h.fake
            .kills()
            .into_iter()
            .map(|k| k.pod)
            .collect::<Vec<_>>(),
        vec!["default/big"],
        "the runtime carries out big's eviction once (records, cgroups)"
    );
    assert!(
        hot.armed_pod().is_none(),
        "disarmed while that eviction runs"
    );
    assert!(
        next.summary.contains("hot path killed default/big"),
        "{}",
        next.summary
    );
    // Booked in one place with its eviction: one HotKill event and one crossing→kill
    // sample, by the synchronize that took the kill over.
    let state = h.state.read();
    let hot_kill_events: Vec<_> = state
        .events
        .iter()
        .filter(|e| e.reason == "HotKill")
        .collect();
    assert_eq!(hot_kill_events.len(), 1, "{:?}", state.events);
    assert_eq!(hot_kill_events[0].object, "default/big");
    let samples: u64 = state
        .metrics
        .crossing_to_kill
        .get(&WakeSource::MemcgThreshold)
        .map(|by_stamp| by_stamp.values().map(|h| h.count).sum())
        .unwrap_or(0);
    assert_eq!(samples, 1, "{:?}", state.metrics.crossing_to_kill);
}

#[tokio::test(start_paused = true)]
async fn evictions_that_free_nothing_are_reported_and_paced_to_one_per_housekeeping_interval() {
    evictions_that_free_nothing_are_paced(false).await;
}

#[tokio::test(start_paused = true)]
async fn a_pod_found_gone_at_its_booking_is_judged_and_paced_all_the_same() {
    evictions_that_free_nothing_are_paced(true).await;
}

/// 8Gi − 7.5Gi = 0.5Gi available: under the hard 1Gi. No pod's eviction gives its memory
/// back (it stays charged), so the threshold stays met whoever goes. With
/// `gone_before_booking`, every eviction finds its pod gone already (`AlreadyGone`).
async fn evictions_that_free_nothing_are_paced(gone_before_booking: bool) {
    let fake = Fake::new(
        3 * GI + GI / 2,
        &[
            ("default/a", GI + 3 * MI),
            ("default/b", GI + 2 * MI),
            ("default/c", GI + MI),
            ("default/d", GI),
        ],
    );
    fake.node().unfreeable = true;
    fake.node().gone_before_booking = gone_before_booking;
    let mut h = Harness::start(fake, 1);
    let first = h.next(secs(1)).await;
    assert_eq!(
        started(&first),
        vec![("default/a".to_string(), 0)],
        "the first hard eviction is immediate"
    );
    // Run the loop for a minute of paused time.
    let until = Instant::now() + secs(60);
    while Instant::now() < until {
        if tokio::time::timeout(secs(60), h.reports.recv())
            .await
            .is_err()
        {
            break;
        }
    }
    let kills = h.fake.kills();
    let at: Vec<(String, u64)> = kills
        .iter()
        .map(|k| (k.pod.clone(), k.at.as_secs()))
        .collect();
    // a at once; then one per housekeeping interval (10 s), not one per synchronize.
    assert_eq!(at.len(), 4, "{at:?}");
    for pair in kills.windows(2) {
        assert!(
            pair[1].at >= pair[0].at + secs(10),
            "evictions for a signal that does not move are one housekeeping interval apart: {at:?}"
        );
    }
    let state = h.state.read();
    let ineffective: Vec<&str> = state
        .events
        .iter()
        .filter(|e| e.reason == "EvictionIneffective")
        .map(|e| e.object.as_str())
        .collect();
    assert_eq!(
        ineffective,
        vec!["default/a", "default/b", "default/c", "default/d"],
        "each judged once it ended"
    );
    assert_eq!(
        state.metrics.ineffective_evictions.get("memory.available"),
        Some(&4)
    );
}

#[tokio::test(start_paused = true)]
async fn an_eviction_that_frees_its_memory_is_not_paced() {
    // 8Gi − 7.75Gi = 0.25Gi available, and evicted pods give their memory back: a goes,
    // then b at the very next pass (a freed what it held, the threshold is still met
    // after a alone), no pacing, no warning.
    let fake = Fake::new(
        6 * GI + GI / 2,
        &[
            ("default/a", GI / 2 + MI),
            ("default/b", GI / 2),
            ("default/c", GI / 4),
        ],
    );
    // The eviction takes a second: the next pass's stats are newer than the first's.
    fake.node().kill_delay = secs(1);
    let mut h = Harness::start(fake, 1);
    let first = h.next(secs(1)).await;
    assert_eq!(started(&first), vec![("default/a".to_string(), 0)]);
    let second = h.next(secs(2)).await;
    assert_eq!(
        second.pass.as_ref().expect("observed").finished.len(),
        1,
        "{}",
        second.summary
    );
    assert_eq!(
        started(&second),
        vec![("default/b".to_string(), 0)],
        "{}",
        second.summary
    );
    assert!(
        !h.state
            .read()
            .events
            .iter()
            .any(|e| e.reason == "EvictionIneffective"),
        "a freed what it held"
    );
}
