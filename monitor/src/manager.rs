//! The manager loop: wait for any wake, coalesce what is pending, take a FRESH observation,
//! synchronize, re-arm the memcg thresholds, publish a report. One task runs it, so a
//! synchronize never runs twice at once, and a burst of wakes becomes one synchronize.
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::sync::{broadcast, mpsc, watch};

use crate::notify::memcg::ThresholdSpec;
use crate::notify::{Wake, WakeDetail, WakeSource};
use crate::observe::{NodeObservation, ObserveError, Observer, monotonic_ns};
use crate::policy::quantity::QuantityOrPercent;
use crate::policy::types::Time;

/// What one synchronize decided, in a line for logs and reports.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct SyncSummary {
    pub text: String,
}

/// The decision step the manager runs on every fresh observation.
pub trait Synchronizer: Send + 'static {
    fn synchronize(
        &mut self,
        observation: &NodeObservation,
        wakes: &[Wake],
        now: Time,
    ) -> SyncSummary;

    /// What the last synchronize decided to do (evictions), awaited before the next
    /// synchronize. When there was something, the manager synchronizes again at once, on
    /// a fresh observation, so it never decides twice on the same stale stats.
    fn act(&mut self) -> Option<crate::decide::BoxFuture<()>> {
        None
    }

    /// When the decision will change with time alone (a grace period ends), the manager
    /// wakes itself then instead of waiting for the next timer tick.
    fn next_deadline(&self, _now: Time) -> Option<Time> {
        None
    }
}

/// The memory thresholds to arm as kernel notifiers, as eviction threshold values of the
/// memory.available (node) and allocatableMemory.available (pods cgroup) signals.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MemoryThresholds {
    pub node: Vec<MemoryThreshold>,
    pub pods: Vec<MemoryThreshold>,
}

/// One memory eviction threshold.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MemoryThreshold {
    pub value: QuantityOrPercent,
    /// A hard threshold (acts at once); soft ones wait for their grace period.
    pub hard: bool,
}

/// The usage values at which the kernel must wake us: for each threshold T on a signal
/// with capacity C, the signal crosses when working set = C − T, i.e. when
/// usage = C − T + inactive_file (the kubelet's memory threshold notifier computes the
/// same). Thresholds at or above capacity are skipped (always met: nothing to wait for).
pub fn threshold_specs(
    observation: &NodeObservation,
    thresholds: &MemoryThresholds,
    memory_root: &Path,
    pods_cgroup: Option<&str>,
) -> Vec<ThresholdSpec> {
    let mut specs = Vec::new();
    let mut add =
        |cgroup: PathBuf, capacity: u64, inactive_file: u64, values: &[MemoryThreshold]| {
            for threshold in values {
                let quantity = threshold.value.resolve(capacity as i64).max(0) as u64;
                if quantity >= capacity {
                    continue;
                }
                let usage_bytes = capacity - quantity + inactive_file;
                let spec = ThresholdSpec {
                    cgroup: cgroup.clone(),
                    usage_bytes,
                    hard: threshold.hard,
                };
                if !specs.contains(&spec) {
                    specs.push(spec);
                }
            }
        };
    let memory = &observation.memory;
    add(
        memory_root.to_path_buf(),
        memory.capacity_bytes,
        memory.inactive_file_bytes,
        &thresholds.node,
    );
    if let (Some(cgroup), Some(pods)) = (pods_cgroup, &observation.allocatable) {
        add(
            memory_root.join(cgroup.trim_start_matches('/')),
            pods.capacity_bytes,
            pods.stats.inactive_file_bytes.unwrap_or(0),
            &thresholds.pods,
        );
    }
    specs
}

/// The memory.high values that stand in for usage thresholds on cgroup v2 (see
/// [`crate::notify::memcg::spawn_v2_high`]), from the specs of [`threshold_specs`]:
/// - only hard thresholds (soft ones may be exceeded for their grace period);
/// - the root has no memory.high, so the node's thresholds ride on the pods cgroup: the
///   node crosses once its usage grows by (threshold usage − node usage now), and while
///   the rest of the node holds still that growth is the pods'. Re-armed after every
///   synchronize, the offset follows the rest of the node;
/// - thresholds already crossed are left out: the synchronize at hand acts on them, and a
///   memory.high below the usage would only throttle the pods.
pub fn v2_high_specs(
    specs: &[ThresholdSpec],
    observation: &NodeObservation,
    memory_root: &Path,
    pods_cgroup: Option<&str>,
) -> Vec<ThresholdSpec> {
    let (Some(cgroup), Some(pods)) = (pods_cgroup, &observation.allocatable) else {
        return Vec::new();
    };
    let pods_dir = memory_root.join(cgroup.trim_start_matches('/'));
    let pods_usage = pods.stats.usage_bytes;
    let node_usage = observation.memory.usage_bytes;
    specs
        .iter()
        .filter(|spec| spec.hard)
        .filter_map(|spec| {
            let usage_bytes = if spec.cgroup == pods_dir {
                spec.usage_bytes
            } else if spec.cgroup == memory_root {
                pods_usage.checked_add(spec.usage_bytes.checked_sub(node_usage)?)?
            } else {
                return None;
            };
            (usage_bytes > pods_usage).then(|| ThresholdSpec {
                cgroup: pods_dir.clone(),
                usage_bytes,
                hard: true,
            })
        })
        .collect()
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
    pub finished_ns: u64,
    pub observation: Result<NodeObservation, String>,
    pub summary: SyncSummary,
}

impl SyncReport {
    /// Wake-to-synchronize-start latency of the first wake.
    pub fn wake_latency(&self) -> Option<Duration> {
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

pub struct Manager<S> {
    pub observer: Observer,
    pub synchronizer: S,
    pub memory_thresholds: MemoryThresholds,
    /// Publishes the memcg thresholds to arm; `None` when that source does not run.
    pub memcg_thresholds: Option<watch::Sender<Vec<ThresholdSpec>>>,
    pub reports: broadcast::Sender<SyncReport>,
    /// The origin of policy time ([`Time`] is measured from it).
    pub origin_ns: u64,
    /// Where the API reads the last synchronize, observation and metrics.
    pub state: crate::state::SharedState,
}

impl<S: Synchronizer> Manager<S> {
    /// Runs until every wake sender is gone.
    pub async fn run(mut self, mut wakes: mpsc::Receiver<Wake>) {
        let mut sequence = 0;
        let mut again = false;
        let mut deadline: Option<tokio::time::Instant> = None;
        loop {
            let mut batch = Vec::new();
            if again {
                // After acting (an eviction), decide again at once on fresh stats.
                batch.push(Wake {
                    source: WakeSource::Request,
                    received_ns: monotonic_ns(),
                    detail: WakeDetail::None,
                });
            } else {
                let deadline = async {
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
                    () = deadline => batch.push(Wake {
                        source: WakeSource::Deadline,
                        received_ns: monotonic_ns(),
                        detail: WakeDetail::None,
                    }),
                }
            }
            while let Ok(more) = wakes.try_recv() {
                batch.push(more);
            }
            sequence += 1;
            let report = self.synchronize_once(sequence, batch);
            let now = Duration::from_nanos(report.started_ns.saturating_sub(self.origin_ns));
            // A millisecond past the deadline, so the grace period has surely passed.
            deadline = self.synchronizer.next_deadline(now).map(|at| {
                tokio::time::Instant::now() + at.saturating_sub(now) + Duration::from_millis(1)
            });
            self.publish(&report);
            // No subscribers is fine.
            let _ = self.reports.send(report);
            again = match self.synchronizer.act() {
                Some(act) => {
                    act.await;
                    true
                }
                None => false,
            };
        }
    }

    /// Records the synchronize in the shared state (API, metrics).
    fn publish(&self, report: &SyncReport) {
        let mut state = self.state.lock();
        let duration = Duration::from_nanos(report.finished_ns.saturating_sub(report.started_ns));
        for wake in &report.wakes {
            let latency = report.started_ns.saturating_sub(wake.received_ns) as f64 / 1e9;
            state
                .metrics
                .wake_latency
                .entry(wake.source)
                .or_default()
                .observe(latency);
        }
        state.metrics.sync_duration.observe(duration.as_secs_f64());
        state.metrics.synchronizes += 1;
        state.last_sync = Some(crate::state::LastSync {
            sequence: report.sequence,
            at: crate::state::now_rfc3339(),
            wake_sources: report.sources(),
            wake_latency_us: report
                .wake_latency()
                .map(|d| d.as_micros() as u64)
                .unwrap_or(0),
            duration_us: duration.as_micros() as u64,
            summary: report.summary.text.clone(),
        });
        state.observation = report.observation.as_ref().ok().cloned();
    }

    fn synchronize_once(&mut self, sequence: u64, wakes: Vec<Wake>) -> SyncReport {
        let started_ns = monotonic_ns();
        log_wakes(sequence, &wakes, started_ns);
        let observation = self.observer.observe();
        let now = Duration::from_nanos(started_ns.saturating_sub(self.origin_ns));
        let summary = match &observation {
            Ok(observation) => {
                let summary = self.synchronizer.synchronize(observation, &wakes, now);
                self.rearm(observation);
                summary
            }
            Err(err) => {
                tracing::error!(
                    "synchronize {sequence}: observation failed, nothing decided: {err}"
                );
                SyncSummary {
                    text: format!("observation failed: {err}"),
                }
            }
        };
        let finished_ns = monotonic_ns();
        tracing::debug!(
            sequence,
            duration_us = (finished_ns - started_ns) / 1000,
            "synchronize done: {}",
            summary.text
        );
        SyncReport {
            sequence,
            wakes,
            started_ns,
            finished_ns,
            observation: observation.map_err(|e: ObserveError| e.to_string()),
            summary,
        }
    }

    fn rearm(&self, observation: &NodeObservation) {
        let Some(tx) = &self.memcg_thresholds else {
            return;
        };
        let root = self.observer.reader().root();
        let pods_cgroup = self.observer.config().pods_cgroup.as_deref();
        let mut specs = threshold_specs(observation, &self.memory_thresholds, root, pods_cgroup);
        if self.observer.reader().version() == crate::observe::CgroupVersion::V2 {
            specs = v2_high_specs(&specs, observation, root, pods_cgroup);
        }
        // Only a changed set re-registers with the kernel.
        tx.send_if_modified(|current| {
            if *current == specs {
                return false;
            }
            *current = specs;
            true
        });
    }
}

fn log_wakes(sequence: u64, wakes: &[Wake], started_ns: u64) {
    for wake in wakes.iter().take(WAKES_LOGGED_PER_SYNC) {
        let latency_us = started_ns.saturating_sub(wake.received_ns) / 1000;
        // CLOCK_MONOTONIC, so tools can line wakes up with kernel and hog timestamps.
        let at_ns = wake.received_ns;
        match &wake.detail {
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
    use crate::observe::{AllocatableMemory, FsStats, MemoryStats, NodeMemory, PidStats};
    use crate::policy::quantity::Quantity;

    fn observation() -> NodeObservation {
        NodeObservation {
            taken_at_ns: 0,
            memory: NodeMemory {
                capacity_bytes: 10_000,
                usage_bytes: 5_000,
                inactive_file_bytes: 1_000,
                working_set_bytes: 4_000,
                available_bytes: 6_000,
            },
            allocatable: Some(AllocatableMemory {
                capacity_bytes: 2_000,
                stats: MemoryStats {
                    usage_bytes: 500,
                    inactive_file_bytes: Some(100),
                    limit_bytes: Some(2_000),
                    working_set_bytes: 400,
                },
                available_bytes: 1_600,
            }),
            nodefs: FsStats::default(),
            imagefs: None,
            pids: PidStats::default(),
            psi: None,
        }
    }

    fn hard(units: i64) -> MemoryThreshold {
        MemoryThreshold {
            value: QuantityOrPercent::Quantity(Quantity::from_units(units)),
            hard: true,
        }
    }

    #[test]
    fn thresholds_follow_capacity_and_inactive_file() {
        let thresholds = MemoryThresholds {
            node: vec![
                hard(1_000),
                MemoryThreshold {
                    value: QuantityOrPercent::Percent(0.5),
                    hard: false,
                },
            ],
            pods: vec![hard(300)],
        };
        let specs = threshold_specs(&observation(), &thresholds, Path::new("/cg"), Some("/pods"));
        let spec = |cgroup: &str, usage_bytes, hard| ThresholdSpec {
            cgroup: cgroup.into(),
            usage_bytes,
            hard,
        };
        assert_eq!(
            specs,
            vec![
                // 10000 − 1000 + 1000 inactive
                spec("/cg", 10_000, true),
                // 10000 − 5000 + 1000
                spec("/cg", 6_000, false),
                // 2000 − 300 + 100
                spec("/cg/pods", 1_800, true),
            ]
        );
    }

    #[test]
    fn v2_node_thresholds_ride_on_the_pods_cgroup_and_crossed_ones_are_left_out() {
        let spec = |cgroup: &str, usage_bytes, hard| ThresholdSpec {
            cgroup: cgroup.into(),
            usage_bytes,
            hard,
        };
        // Node usage 5000, pods usage 500 (see observation()).
        let specs = vec![
            // The node may grow by 1000 more: the pods cgroup by as much, to 1500.
            spec("/cg", 6_000, true),
            // Soft: never a memory.high.
            spec("/cg", 5_500, false),
            // Already crossed (node usage 5000 ≥ 4000): left out.
            spec("/cg", 4_000, true),
            // The pods cgroup's own threshold stays as it is.
            spec("/cg/pods", 1_800, true),
            // Crossed on the pods cgroup (usage 500): left out.
            spec("/cg/pods", 450, true),
        ];
        assert_eq!(
            v2_high_specs(&specs, &observation(), Path::new("/cg"), Some("/pods")),
            vec![spec("/cg/pods", 1_500, true), spec("/cg/pods", 1_800, true)]
        );
        // Without a pods cgroup nothing can carry them.
        assert!(v2_high_specs(&specs, &observation(), Path::new("/cg"), None).is_empty());
    }

    #[test]
    fn thresholds_at_or_above_capacity_are_not_armed() {
        let thresholds = MemoryThresholds {
            node: vec![
                hard(10_000),
                MemoryThreshold {
                    value: QuantityOrPercent::Percent(1.0),
                    hard: true,
                },
            ],
            pods: vec![],
        };
        assert!(threshold_specs(&observation(), &thresholds, Path::new("/cg"), None).is_empty());
    }
}
