//! The synchronize loop: wait for any wake, coalesce what is pending, take a FRESH
//! observation, run the eviction pass on it, re-arm the kernel's memory notifiers, and
//! publish a report. One task runs it, so a synchronize never runs twice at once and a
//! burst of wakes becomes one synchronize.
//!
//! Time: the policy's `now` and the grace-period deadlines come from one clock,
//! `tokio::time::Instant` measured from the loop's origin, so tests run the loop on paused
//! time. CLOCK_MONOTONIC ([`crate::clock`]) only stamps wakes and reports for logs.
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use tokio::sync::{broadcast, mpsc, watch};
use tokio::time::Instant;
use tracing::Instrument;

use super::eviction::{EvictionPass, EvictionSync, summarize};
use super::hot::HotPath;
use crate::clock::monotonic_ns;
use crate::events::EventReason;
use crate::notify::arming::{
    MemoryThresholds, detector_specs, notifier_specs, pods_usage, threshold_specs,
};
use crate::notify::detector::Detector;
use crate::notify::memcg::ThresholdSpec;
use crate::notify::{Wake, WakeDetail, WakeSource};
use crate::observe::{CgroupVersion, NodeObservation, ObserveError, Observer};
use crate::policy::types::Time;
use crate::state::SharedState;

/// Where fresh observations come from: the node's kernel files in the agent, a script in
/// the loop's tests.
pub trait Observe: Send + 'static {
    fn observe(&mut self) -> Result<NodeObservation, ObserveError>;
}

impl Observe for Observer {
    fn observe(&mut self) -> Result<NodeObservation, ObserveError> {
        Observer::observe(self)
    }
}

/// The kernel memory notifiers to re-arm after every synchronize.
pub struct Arming {
    pub(crate) thresholds: MemoryThresholds,
    pub(crate) version: CgroupVersion,
    /// The memory hierarchy's root directory.
    pub(crate) memory_root: PathBuf,
    /// The pods cgroup, relative to the memory root.
    pub(crate) pods_cgroup: Option<String>,
    /// The memcg notifier task's levels (v1 eventfd thresholds, or the v2 memory.high
    /// stand-in); only a changed set is sent. `None` when that notifier does not run.
    pub(crate) levels: Option<watch::Sender<Vec<ThresholdSpec>>>,
    /// The eBPF crossing detector, when it runs: all its levels are rewritten after
    /// every synchronize, so a level that fired arms again.
    pub(crate) detector: Option<Arc<Detector>>,
    /// The hot path confirms crossings against the same levels.
    pub(crate) hot: Option<Arc<HotPath>>,
}

impl Arming {
    fn rearm(&self, observation: &NodeObservation) {
        let pods_cgroup = self.pods_cgroup.as_deref();
        let thresholds = threshold_specs(
            observation,
            &self.thresholds,
            &self.memory_root,
            pods_cgroup,
        );
        let detector_levels = self.detector.as_ref().map(|detector| {
            let specs = detector_specs(&thresholds, observation, &self.memory_root, pods_cgroup);
            // Its levels all sit on the pods cgroup, whose usage was just observed.
            let pods = pods_usage(observation, &self.memory_root, pods_cgroup);
            detector.arm_seen(&specs, |dir| {
                pods.as_ref()
                    .filter(|(pods_dir, _)| pods_dir == dir)
                    .map(|(_, usage)| *usage)
            });
            specs
        });
        let specs = notifier_specs(
            thresholds,
            observation,
            self.version,
            &self.memory_root,
            pods_cgroup,
        );
        if let Some(hot) = &self.hot {
            // With the detector, the hot path confirms against the detector's levels (on
            // cgroup v2 nothing else carries them).
            let specs = detector_levels.as_deref().unwrap_or(&specs);
            // The page cache each level was armed with: the node's at the memory root,
            // the pods cgroup's elsewhere (the v2 stand-ins all sit on the pods cgroup).
            let node_inactive = observation.memory.inactive_file_bytes;
            let pods_inactive = observation
                .allocatable
                .as_ref()
                .and_then(|a| a.stats.inactive_file_bytes)
                .unwrap_or(0);
            let root = self.memory_root.clone();
            hot.set_levels(self.version, specs, |cgroup| {
                if cgroup == root {
                    node_inactive
                } else {
                    pods_inactive
                }
            });
        }
        // Only a changed set re-registers with the kernel.
        if let Some(levels) = &self.levels {
            levels.send_if_modified(|current| {
                if *current == specs {
                    return false;
                }
                *current = specs;
                true
            });
        }
    }
}

/// The pod whose cgroup holds `memcg` (a path in the memory hierarchy, as
/// /proc/PID/cgroup shows it, read when the kernel's record arrived). A pod that no
/// longer holds a cgroup (its last container's exit was handled before this pass: the
/// OOM kill ended the pod) is found by its UID in the path, as pod cgroups are named:
/// `pod<uid>` (cgroupfs) or `…-pod<uid with _ for ->.slice` (systemd).
fn pod_of_cgroup(pods: &[crate::state::PodView], memcg: &str) -> Option<String> {
    let memcg = memcg.trim_matches('/');
    let by_cgroup = pods.iter().find(|pod| {
        pod.cgroup.as_deref().is_some_and(|cgroup| {
            let cgroup = cgroup.trim_matches('/');
            !cgroup.is_empty()
                && memcg
                    .strip_prefix(cgroup)
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
        })
    });
    let by_uid = || {
        pods.iter().find(|pod| {
            let cgroupfs = format!("pod{}", pod.uid);
            let systemd = format!("-pod{}.slice", pod.uid.replace('-', "_"));
            !pod.uid.is_empty()
                && memcg
                    .split('/')
                    .any(|part| part == cgroupfs || part.ends_with(&systemd))
        })
    };
    by_cgroup.or_else(by_uid).map(|pod| pod.key.clone())
}

/// One synchronize, as published to subscribers (API, metrics, tests).
#[derive(Clone, Debug)]
pub struct SyncReport {
    /// 1 for the first synchronize after start.
    pub sequence: u64,
    /// The wakes this synchronize coalesced, in arrival order.
    pub wakes: Vec<Wake>,
    /// CLOCK_MONOTONIC ns when the synchronize started and ended.
    pub started_ns: u64,
    pub(crate) finished_ns: u64,
    /// Policy time of the synchronize (since the loop started).
    pub(crate) now: Time,
    /// The fresh observation, or why it could not be taken (shared: reports are cloned
    /// to every subscriber).
    pub observation: Result<NodeObservation, Arc<ObserveError>>,
    /// What the eviction pass decided and did; `None` when the observation failed. Read
    /// whole by the loop's tests; the API and the log take the summary below.
    #[cfg_attr(not(test), expect(dead_code, reason = "read whole by the tests only"))]
    pub(crate) pass: Option<EvictionPass>,
    /// The same, in a line.
    pub(crate) summary: String,
}

impl SyncReport {
    /// Wake-to-synchronize-start latency of the first wake.
    pub(crate) fn wake_latency(&self) -> Option<Duration> {
        self.wakes
            .first()
            .map(|w| Duration::from_nanos(self.started_ns.saturating_sub(w.received_ns)))
    }

    pub fn sources(&self) -> Vec<WakeSource> {
        let mut sources: Vec<WakeSource> = self.wakes.iter().map(|w| w.source).collect();
        sources.dedup();
        sources
    }
}

/// How many of a batch's wakes are logged one by one at info level.
const WAKES_LOGGED_PER_SYNC: usize = 8;

/// A grace-period deadline wakes the loop this long after it, so the grace period has
/// surely passed when the policy looks.
const DEADLINE_MARGIN: Duration = Duration::from_millis(1);

pub struct SyncLoop<O> {
    pub(crate) observer: O,
    pub(crate) eviction: EvictionSync,
    /// `None` when no memory notifier runs.
    pub(crate) arming: Option<Arming>,
    pub(crate) reports: broadcast::Sender<SyncReport>,
    /// Where the API reads the last synchronize, observation and metrics.
    pub(crate) state: SharedState,
    /// The origin of policy time.
    pub(crate) origin: Instant,
}

impl<O: Observe> SyncLoop<O> {
    /// Runs until every wake sender is gone.
    pub(crate) async fn run(mut self, mut wakes: mpsc::Receiver<Wake>) {
        let mut sequence = 0;
        let mut deadline: Option<Instant> = None;
        loop {
            let mut batch = Vec::new();
            let next_deadline = async {
                match deadline {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                first = wakes.recv() => match first {
                    Some(first) => batch.push(first),
                    None => return,
                },
                () = next_deadline => batch.push(Wake {
                    source: WakeSource::Deadline,
                    received_ns: monotonic_ns(),
                    detail: WakeDetail::None,
                }),
            }
            while let Ok(more) = wakes.try_recv() {
                batch.push(more);
            }
            sequence += 1;
            // A bug in one pass (a panic in a reader, the policy or a port) must not end
            // the loop: the node would then never be protected again while the API still
            // answered. The pass is reported as failed and the next wake runs a new one.
            let pass = AssertUnwindSafe(self.synchronize_once(sequence, batch)).catch_unwind();
            let report = match pass.await {
                Ok(report) => report,
                Err(panic) => {
                    self.record_panic(sequence, panic.as_ref());
                    continue;
                }
            };
            deadline = self
                .eviction
                .next_deadline(report.now)
                .map(|at| self.origin + at + DEADLINE_MARGIN);
            self.publish(&report);
            // No subscribers is fine.
            let _ = self.reports.send(report);
        }
    }

    fn record_panic(&self, sequence: u64, panic: &(dyn std::any::Any + Send)) {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".to_string());
        tracing::error!("synchronize {sequence} panicked: {what}; the loop goes on");
        self.state.event(
            EventReason::SynchronizeFailed,
            "node",
            format!("synchronize {sequence} panicked: {what}; the next wake runs a new one"),
        );
        self.state.lock().metrics.synchronize_panics += 1;
    }

    /// Records the synchronize in the shared state (API, metrics).
    fn publish(&self, report: &SyncReport) {
        let mut state = self.state.lock();
        let duration = Duration::from_nanos(report.finished_ns.saturating_sub(report.started_ns));
        for wake in &report.wakes {
            if let WakeDetail::Kernel { event, memcg } = &wake.detail
                && event.kind == monitor_common::EventKind::OomVictim as u32
            {
                // The kernel's OOM killer chose a victim: whose pod was it?
                let pod = memcg
                    .as_deref()
                    .and_then(|memcg| pod_of_cgroup(&state.pods, memcg))
                    .unwrap_or_default();
                *state.metrics.kernel_oom_kills.entry(pod).or_default() += 1;
                // Victims the in-kernel rate limit held back since the last record: their
                // pods are unknown.
                if event.suppressed > 0 {
                    *state
                        .metrics
                        .kernel_oom_kills
                        .entry(String::new())
                        .or_default() += u64::from(event.suppressed);
                }
            }
            let latency = report.started_ns.saturating_sub(wake.received_ns) as f64 / 1e9;
            state.metrics.observe_wake_to_sync(wake.source, latency);
        }
        state.metrics.sync_duration.observe(duration.as_secs_f64());
        state.metrics.synchronizes += 1;
        state.last_sync = Some(crate::state::LastSync {
            sequence: report.sequence,
            at: crate::state::now_rfc3339(),
            wake_sources: report.sources(),
            wake_latency_us: report
                .wake_latency()
                .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
                .unwrap_or(0),
            duration_us: u64::try_from(duration.as_micros()).unwrap_or(u64::MAX),
            summary: report.summary.clone(),
            finished_ns: monotonic_ns(),
            finished_unix_seconds: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64()),
        });
        state.observation = report.observation.as_ref().ok().cloned();
    }

    /// One synchronize pass, in a span of its own: every line it logs (and every line of
    /// the evictions it starts, in their `evict` spans under it) carries its sequence
    /// number and what woke it, as fields in the JSON and journal formats.
    async fn synchronize_once(&mut self, sequence: u64, wakes: Vec<Wake>) -> SyncReport {
        let mut sources: Vec<&str> = wakes.iter().map(|w| w.source.name()).collect();
        sources.sort_unstable();
        sources.dedup();
        let span = tracing::info_span!("synchronize", sequence, wake = %sources.join(","));
        self.synchronize_in_span(sequence, wakes)
            .instrument(span)
            .await
    }

    async fn synchronize_in_span(&mut self, sequence: u64, wakes: Vec<Wake>) -> SyncReport {
        let started_ns = monotonic_ns();
        let now = Instant::now().saturating_duration_since(self.origin);
        log_wakes(sequence, &wakes, started_ns);
        let mut observation = super::eviction::blocking(|| self.observer.observe());
        // Memory relief comes before the eviction pass, which then judges the thresholds
        // on a fresh observation of what relief left.
        if let Ok(node) = &observation
            && self.eviction.relieve(node, now).is_some()
        {
            observation = super::eviction::blocking(|| self.observer.observe());
        }
        let (pass, summary) = match &observation {
            Ok(observation) => {
                let pass = self.eviction.synchronize(observation, now, &wakes).await;
                if let Some(arming) = &self.arming {
                    arming.rearm(observation);
                }
                let summary = summarize(&pass);
                if pass.outcome.thresholds_met.is_empty() && pass.finished.is_empty() {
                    tracing::debug!("synchronize: {summary}");
                } else {
                    tracing::info!("synchronize: {summary}");
                }
                (Some(pass), summary)
            }
            Err(err) => {
                tracing::error!(
                    "synchronize {sequence}: observation failed, nothing decided: {err}"
                );
                (None, format!("observation failed: {err}"))
            }
        };
        let finished_ns = monotonic_ns();
        tracing::debug!(
            sequence,
            duration_us = finished_ns.saturating_sub(started_ns) / 1000,
            "synchronize done: {summary}"
        );
        SyncReport {
            sequence,
            wakes,
            started_ns,
            finished_ns,
            now,
            observation: observation.map_err(Arc::new),
            pass,
            summary,
        }
    }
}

fn log_wakes(sequence: u64, wakes: &[Wake], started_ns: u64) {
    for wake in wakes.iter().take(WAKES_LOGGED_PER_SYNC) {
        let latency_us = started_ns.saturating_sub(wake.received_ns) / 1000;
        // CLOCK_MONOTONIC, so tools can line wakes up with kernel and hog timestamps.
        let at_ns = wake.received_ns;
        match &wake.detail {
            WakeDetail::Kernel { event, .. }
                if event.kind == monitor_common::EventKind::Crossing as u32 =>
            {
                tracing::info!(
                    sequence,
                    source = %wake.source,
                    at_ns,
                    latency_us,
                    kernel_to_sync_us = started_ns.saturating_sub(event.timestamp_ns) / 1000,
                    kind = "crossing",
                    crossed_ns = event.timestamp_ns,
                    cgroup_id = event.cgroup_id,
                    usage_bytes = event.usage_bytes,
                    level_bytes = event.level_bytes,
                    hard = event.level_flags & monitor_common::LEVEL_HARD != 0,
                    "wake"
                )
            }
            WakeDetail::Kernel { event, memcg } => tracing::info!(
                sequence,
                source = %wake.source,
                at_ns,
                latency_us,
                kernel_to_sync_us = started_ns.saturating_sub(event.timestamp_ns) / 1000,
                kind = wake.detail.kernel_kind().map(|k| k.name()).unwrap_or("unknown"),
                pid = event.pid,
                cgroup_id = event.cgroup_id,
                memcg = memcg.as_deref().unwrap_or("?"),
                "wake"
            ),
            WakeDetail::Threshold {
                cgroup,
                threshold_bytes,
            } => tracing::info!(
                sequence, source = %wake.source, at_ns, latency_us, cgroup = %cgroup.display(), threshold_bytes, "wake"
            ),
            WakeDetail::MemoryEvents { file } | WakeDetail::Psi { file } => {
                tracing::info!(sequence, source = %wake.source, at_ns, latency_us, file = %file.display(), "wake")
            }
            // The housekeeping tick is routine: at info it would be a line every interval
            // (8,640 a day at the default 10 s) saying nothing happened.
            WakeDetail::None if wake.source == WakeSource::Timer => {
                tracing::debug!(sequence, source = %wake.source, at_ns, latency_us, "wake")
            }
            WakeDetail::None => {
                tracing::info!(sequence, source = %wake.source, at_ns, latency_us, "wake")
            }
        }
    }
    if wakes.len() > WAKES_LOGGED_PER_SYNC {
        tracing::info!(
            sequence,
            "… and {} more wakes coalesced",
            wakes.len() - WAKES_LOGGED_PER_SYNC
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::kubelet::default_kubelet_config;
    use crate::notify::wake_channel;
    use crate::observe::{FsStats, NodeMemory, PidStats};
    use crate::runtime::port::Ports;

    #[test]
    fn an_oom_victim_is_attributed_to_the_pod_whose_cgroup_holds_it() {
        let pod = |key: &str, cgroup: Option<&str>| crate::state::PodView {
            key: key.into(),
            uid: "u".into(),
            qos_class: "Burstable".into(),
            priority: 0,
            phase: "Running".into(),
            reason: None,
            message: None,
            conditions: vec![],
            cgroup: cgroup.map(str::to_string),
            memory_working_set_bytes: None,
            containers: vec![],
        };
        let pods = vec![
            pod("default/none", None),
            pod("default/a", Some("monitor/kubepods/burstable/poda")),
            pod("default/ab", Some("/monitor/kubepods/burstable/podab")),
        ];
        let of = |memcg| pod_of_cgroup(&pods, memcg);
        assert_eq!(
            of("/monitor/kubepods/burstable/poda/main").as_deref(),
            Some("default/a")
        );
        assert_eq!(
            of("/monitor/kubepods/burstable/podab").as_deref(),
            Some("default/ab")
        );
        // A prefix of the name is not the pod.
        assert_eq!(of("/monitor/kubepods/burstable/podabc/main"), None);
        assert_eq!(of("/system.slice/sshd.service"), None);

        // A pod that let go of its cgroup (its last container's exit was handled before
        // the pass that books the OOM kill): found by its UID in the path.
        let mut gone = pod("default/gone", None);
        gone.uid = "1f2e-77".into();
        let pods = vec![pod("default/none", None), gone];
        let of = |memcg| pod_of_cgroup(&pods, memcg);
        assert_eq!(
            of("/monitor/kubepods/burstable/pod1f2e-77/main").as_deref(),
            Some("default/gone")
        );
        assert_eq!(
            of("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1f2e_77.slice/cri-containerd-abc.scope").as_deref(),
            Some("default/gone")
        );
        assert_eq!(of("/monitor/kubepods/burstable/pod1f2e-778/main"), None);
    }

    /// Panics on its first observation, then observes a calm node.
    struct PanicsOnce {
        calls: u32,
    }

    impl Observe for PanicsOnce {
        fn observe(&mut self) -> Result<NodeObservation, ObserveError> {
            self.calls += 1;
            assert!(self.calls > 1, "a reader bug");
            Ok(NodeObservation {
                taken_at_ns: 0,
                memory: NodeMemory {
                    capacity_bytes: 1 << 33,
                    usage_bytes: 1 << 30,
                    inactive_file_bytes: 0,
                    working_set_bytes: 1 << 30,
                    available_bytes: (1 << 33) - (1 << 30),
                    ..NodeMemory::default()
                },
                allocatable: None,
                nodefs: Some(FsStats {
                    capacity_bytes: 1 << 40,
                    available_bytes: 1 << 39,
                    inodes: 100,
                    inodes_free: 90,
                }),
                imagefs: None,
                pids: Some(PidStats {
                    max: 4096,
                    current: 10,
                }),
                pressure: Default::default(),
                dedicated_imagefs: false,
                failed: Vec::new(),
            })
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_panicking_pass_is_reported_and_the_loop_goes_on() {
        let (wakes, rx) = wake_channel();
        let state = SharedState::default();
        let (reports, mut subscriber) = broadcast::channel(8);
        let sync_loop = SyncLoop {
            observer: PanicsOnce { calls: 0 },
            eviction: EvictionSync::new(
                default_kubelet_config(),
                Ports::none(),
                state.clone(),
                wakes.clone(),
            ),
            arming: None,
            reports,
            state: state.clone(),
            origin: Instant::now(),
        };
        let task = tokio::spawn(sync_loop.run(rx));
        wakes.wake(WakeSource::Timer, WakeDetail::None);
        tokio::time::sleep(Duration::from_secs(1)).await;
        wakes.wake(WakeSource::Timer, WakeDetail::None);
        let report = tokio::time::timeout(Duration::from_secs(5), subscriber.recv())
            .await
            .expect("a synchronize after the panic")
            .expect("report");
        assert_eq!(report.sequence, 2, "the first pass panicked");
        assert!(report.observation.is_ok());
        assert!(!task.is_finished(), "the loop is still running");
        let state = state.read();
        assert_eq!(state.metrics.synchronize_panics, 1);
        assert!(
            state
                .events
                .iter()
                .any(|e| e.reason == "SynchronizeFailed" && e.message.contains("a reader bug")),
            "{:?}",
            state.events
        );
    }
}
