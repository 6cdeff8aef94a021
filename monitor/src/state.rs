//! What the agent knows right now, shared between the synchronize loop (which writes it
//! after every synchronize), the pod runtime (pods and events) and the API (which only
//! reads it).
//! Everything here is plain data with `Serialize`, so the API returns it as JSON as is.
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use monitor_common::{EventKind, LEVEL_HARD};
use serde::Serialize;

pub(crate) mod buckets;
use crate::events::{EventReason, EventType};
use crate::notify::{SourceStatus, Wake, WakeDetail, WakeSource};
use crate::observe::NodeObservation;
use crate::policy::eviction::{EvictionDecision, EvictionReason, ThresholdMet};
use buckets::{
    CROSSING_TO_KILL_BUCKETS, STATS_AGE_BUCKETS, SYNC_DURATION_BUCKETS, WAKE_TO_SYNC_BUCKETS,
};

/// One threshold of one signal, as `monitor status` shows it.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ThresholdStatus {
    /// As configured: "500Mi" or "10%".
    pub value: String,
    /// The value resolved against the signal's capacity now.
    pub quantity: i64,
    /// "hard" or "soft".
    pub kind: String,
    /// Soft thresholds: the grace period ("1m30s").
    pub grace_period: Option<String>,
    pub met: bool,
    pub grace_period_met: bool,
}

/// One eviction signal against its thresholds.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SignalStatus {
    pub signal: String,
    pub available: i64,
    pub capacity: i64,
    pub thresholds: Vec<ThresholdStatus>,
}

/// The last synchronize.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LastSync {
    pub sequence: u64,
    /// Wall-clock time (RFC 3339).
    pub at: String,
    pub wake_sources: Vec<WakeSource>,
    pub wake_latency_us: u64,
    pub duration_us: u64,
    pub summary: String,
    /// CLOCK_MONOTONIC when it finished: its age is read against this, so a wall-clock
    /// step (NTP, a manual `date`) cannot make a stalled loop look fresh.
    #[serde(skip)]
    pub finished_ns: u64,
    /// The same instant on the wall clock, in seconds since the Unix epoch (the metric
    /// alert rules compare with `time()`).
    #[serde(skip)]
    pub finished_unix_seconds: f64,
}

impl LastSync {
    /// How long ago it finished, at monotonic time `now_ns`.
    pub(crate) fn age(&self, now_ns: u64) -> std::time::Duration {
        std::time::Duration::from_nanos(now_ns.saturating_sub(self.finished_ns))
    }
}

/// A pod as `monitor pods` shows it.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodView {
    /// "namespace/name".
    pub key: String,
    pub uid: String,
    pub qos_class: String,
    pub priority: i32,
    /// Pending, Running, Succeeded, Failed.
    pub phase: String,
    pub reason: Option<String>,
    pub message: Option<String>,
    /// The pod's status conditions, each in the API's PodCondition shape (`type`,
    /// `status`, `reason`, `message`, `lastTransitionTime`): `DisruptionTarget` on a pod
    /// evicted or preempted. Like `phase`, `reason` and `message`, a field of the pod's
    /// `status` shown at the top of its entry; left out when empty, as the API's
    /// `omitempty` does.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<crate::policy::condition::PodCondition>,
    /// The pod's cgroup (relative to the memory hierarchy's root).
    pub cgroup: Option<String>,
    pub memory_working_set_bytes: Option<u64>,
    pub containers: Vec<ContainerView>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerView {
    pub name: String,
    pub pid: Option<u32>,
    pub restart_count: u32,
    /// "running", "exited(CODE)", "signaled(SIG)", "exited(unknown)", "waiting".
    pub state: String,
    /// Why the container is not running, when that is worth a word: "CrashLoopBackOff"
    /// while it waits out its restart back-off after an exit (`state` is that exit),
    /// "ExitCodeUnknown" when its last exit status could not be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// An event, as `monitor events` shows it (Kubernetes' event vocabulary).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    /// Wall-clock time (RFC 3339).
    pub(crate) time: String,
    /// "Normal" or "Warning" ([`EventType`]).
    pub(crate) kind: String,
    /// "Evicted", "Killing", "Started", "FailedAdmission", "Preempting", "BadManifest", ...
    /// ([`EventReason`]).
    pub(crate) reason: String,
    /// "namespace/name" of the pod, a manifest path, or "node".
    pub(crate) object: String,
    pub(crate) message: String,
}

/// Counters and histograms for `/metrics`. Where the kubelet has the metric, the keys are
/// its label values (see `api/metrics.rs`). Histograms are observed through the methods
/// below, which make each with its family's buckets.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Metrics {
    /// Evictions carried out, by the kubelet's `eviction_signal`: the signal whose threshold
    /// drove the eviction, or for a local storage limit `ephemeralpodfs.limit`,
    /// `ephemeralcontainerfs.limit` or `emptydirfs.limit` ([`eviction_signal`]).
    pub evictions: BTreeMap<String, u64>,
    /// Eviction attempts by how they ended ([`crate::runtime::port::EvictionOutcome::name`]).
    pub(crate) eviction_outcomes: BTreeMap<String, u64>,
    /// Shadow mode: the actions decided and not carried out, by (action, eviction_signal).
    pub(crate) shadow_actions: BTreeMap<(String, String), u64>,
    /// Runs of the pre-kill hook, by result (ok, failed, timed_out, error).
    pub(crate) pre_kill_hooks: BTreeMap<String, u64>,
    /// Evictions that freed far less of their signal than the victim held (its page cache
    /// stayed charged, tmpfs, shared pages), by eviction_signal: each one paces the
    /// signal's next evictions to one per housekeeping interval.
    pub(crate) ineffective_evictions: BTreeMap<String, u64>,
    /// Memory relief: bytes the pods gave back, by qos.
    pub(crate) memory_reclaimed_bytes: BTreeMap<String, u64>,
    /// Memory relief passes, by result (relieved, stalled, exhausted, failed).
    pub(crate) memory_relief_passes: BTreeMap<String, u64>,
    /// How long each memory relief pass took.
    pub(crate) memory_relief_duration: Histogram,
    /// Calls to the container runtime made to stop a pod (evicted, preempted, removed or
    /// finished) that it left unanswered by the stop's deadline, by CRI call. The pod was
    /// killed through its cgroups regardless.
    pub(crate) runtime_unresponsive_calls: BTreeMap<String, u64>,
    /// CPU time the hot path's watches used, in seconds (bounded by their budget).
    pub(crate) hot_watch_cpu_seconds: f64,
    /// Rehearsals of the kill the hot path's watches ran.
    pub(crate) hot_watch_rehearsals: u64,
    /// Age of the observation a threshold eviction was decided on (from its read to the
    /// decision), by the signal of each threshold met: the kubelet's
    /// `eviction_stats_age_seconds`.
    pub(crate) eviction_stats_age: BTreeMap<String, Histogram>,
    /// Pods preempted to admit a critical pod, by the kubelet's `preemption_signal`: the
    /// first resource the critical pod lacked ("" when none was named).
    pub(crate) preemptions: BTreeMap<String, u64>,
    /// Pods admission turned away, by reason ([`admission_rejection_reason`]).
    pub(crate) admission_rejections: BTreeMap<String, u64>,
    /// Wake-to-synchronize-start latency samples by source, as histogram buckets.
    pub wake_latency: BTreeMap<WakeSource, Histogram>,
    /// Kills of the hot path, from the crossing to the `cgroup.kill` write, by the source
    /// whose notifier fired the kill and by what stamped the crossing ([`CrossingStamp`]).
    pub(crate) crossing_to_kill: BTreeMap<WakeSource, BTreeMap<String, Histogram>>,
    pub sync_duration: Histogram,
    pub synchronizes: u64,
    /// Synchronize passes that panicked (the loop survives them; each is a bug).
    pub(crate) synchronize_panics: u64,
    /// Victims of the kernel's OOM killer seen by the eBPF `oom:mark_victim` program, by
    /// pod ("namespace/name"; "" when the victim was in no pod, was gone too soon, or was
    /// one of the records the in-kernel rate limit suppressed).
    pub(crate) kernel_oom_kills: BTreeMap<String, u64>,
    /// What garbage collection removed, by (trigger, kind): trigger "periodic" (the image
    /// GC period) or "eviction" (node-level reclaim under pressure); kind "container",
    /// "sandbox", "image" or "log".
    pub(crate) gc_removed: BTreeMap<String, BTreeMap<String, u64>>,
    /// Bytes garbage collection freed, by (trigger, kind): images by their size, logs by
    /// their disk usage (containers and sandboxes are not measured).
    pub(crate) gc_freed_bytes: BTreeMap<String, BTreeMap<String, u64>>,
    /// Images garbage collection removed, by the kubelet's reason: "age" (unused longer
    /// than imageMaximumGCAge) or "space" (the image filesystem's thresholds, or
    /// node-level reclaim under pressure).
    pub(crate) images_collected: BTreeMap<String, u64>,
}

/// The kubelet's `eviction_signal` of an eviction: the signal whose threshold drove it, or
/// for a local storage limit the kubelet's pseudo-signal of that limit
/// (pkg/kubelet/eviction: signalEphemeralPodFsLimit, signalEphemeralContainerFsLimit,
/// signalEmptyDirFsLimit).
pub(crate) fn eviction_signal(decision: &EvictionDecision) -> &'static str {
    match (decision.signal, decision.reason) {
        (Some(signal), _) => signal.as_str(),
        (None, EvictionReason::PodEphemeralStorageLimit) => "ephemeralpodfs.limit",
        (None, EvictionReason::ContainerEphemeralStorageLimit) => "ephemeralcontainerfs.limit",
        (None, EvictionReason::EmptyDirSizeLimit) => "emptydirfs.limit",
        (None, EvictionReason::Threshold) => decision.resource.as_str(),
    }
}

/// The pod status reasons admission gives, each its own `reason` of
/// `monitor_admission_rejections_total`.
pub(crate) const ADMISSION_REJECTION_REASONS: [&str; 11] = [
    "Evicted",
    "NodeName",
    "NodePorts",
    "OutOfcpu",
    "OutOfephemeral-storage",
    "OutOfmemory",
    "OutOfpods",
    "PodOSNotSupported",
    "PodOSSelectorNodeLabelDoesNotMatch",
    "TaintToleration",
    "UnexpectedAdmissionError",
];

/// The `reason` label of an admission rejection. As in the kubelet (recordAdmissionRejection),
/// the label stays bounded: a known reason is itself, a lack of any other (extended)
/// resource is "OutOfExtendedResources", anything else "Other".
pub(crate) fn admission_rejection_reason(reason: &str) -> &str {
    if ADMISSION_REJECTION_REASONS.contains(&reason) {
        reason
    } else if reason.starts_with("OutOf") {
        "OutOfExtendedResources"
    } else {
        "Other"
    }
}

/// The `preemption_signal` values known ahead: the resources admission checks.
pub(crate) const PREEMPTION_SIGNALS: [&str; 4] = ["cpu", "ephemeral-storage", "memory", "pods"];

/// What a hot kill's crossing time was taken from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CrossingStamp {
    /// The kernel's clock in the crossing detector's record, at the charge that crossed.
    Kernel,
    /// The moment the notifier reached the hot path in the agent: memcg eventfds and
    /// memory.events carry no stamp of their own.
    Notifier,
}

impl CrossingStamp {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            CrossingStamp::Kernel => "kernel",
            CrossingStamp::Notifier => "notifier",
        }
    }

    /// The crossing of a hot kill that `source` fired: the source queues its wake right
    /// after the hot path returns, so the kill's own wake is the first of that source
    /// received at or after `killed_ns`. When that wake is a hard level's record of the
    /// crossing detector, its kernel stamp is the crossing; otherwise (another notifier, a
    /// reclaim record, or a wake that fell into the next synchronize) the crossing is
    /// `detected_ns`, when the hot path was called.
    pub(crate) fn of_kill(
        source: WakeSource,
        detected_ns: u64,
        killed_ns: u64,
        wakes: &[Wake],
    ) -> (CrossingStamp, u64) {
        let own_wake = wakes
            .iter()
            .find(|w| w.source == source && w.received_ns >= killed_ns);
        match own_wake.map(|w| &w.detail) {
            Some(WakeDetail::Kernel { event, .. })
                if event.kind == EventKind::Crossing as u32
                    && event.level_flags & LEVEL_HARD != 0
                    && event.timestamp_ns <= detected_ns =>
            {
                (CrossingStamp::Kernel, event.timestamp_ns)
            }
            _ => (CrossingStamp::Notifier, detected_ns),
        }
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            evictions: BTreeMap::new(),
            eviction_outcomes: BTreeMap::new(),
            shadow_actions: BTreeMap::new(),
            pre_kill_hooks: BTreeMap::new(),
            ineffective_evictions: BTreeMap::new(),
            memory_reclaimed_bytes: BTreeMap::new(),
            memory_relief_passes: BTreeMap::new(),
            memory_relief_duration: Histogram::new(SYNC_DURATION_BUCKETS),
            runtime_unresponsive_calls: BTreeMap::new(),
            hot_watch_cpu_seconds: 0.0,
            hot_watch_rehearsals: 0,
            eviction_stats_age: BTreeMap::new(),
            preemptions: BTreeMap::new(),
            admission_rejections: BTreeMap::new(),
            wake_latency: BTreeMap::new(),
            crossing_to_kill: BTreeMap::new(),
            sync_duration: Histogram::new(SYNC_DURATION_BUCKETS),
            synchronizes: 0,
            synchronize_panics: 0,
            kernel_oom_kills: BTreeMap::new(),
            gc_removed: BTreeMap::new(),
            gc_freed_bytes: BTreeMap::new(),
            images_collected: BTreeMap::new(),
        }
    }
}

impl Metrics {
    /// Records the time from a wake of `source` reaching the agent to the start of the
    /// synchronize it caused.
    pub fn observe_wake_to_sync(&mut self, source: WakeSource, seconds: f64) {
        self.wake_latency
            .entry(source)
            .or_insert_with(|| Histogram::new(WAKE_TO_SYNC_BUCKETS))
            .observe(seconds);
    }

    /// Records the age of the observation an eviction was decided on, for one threshold
    /// of `signal` met.
    pub(crate) fn observe_stats_age(&mut self, signal: &str, seconds: f64) {
        self.eviction_stats_age
            .entry(signal.to_string())
            .or_insert_with(|| Histogram::new(STATS_AGE_BUCKETS))
            .observe(seconds);
    }

    /// Counts an eviction carried out (the pod is gone).
    pub(crate) fn count_eviction(&mut self, decision: &EvictionDecision) {
        *self
            .evictions
            .entry(eviction_signal(decision).to_string())
            .or_default() += 1;
    }

    /// Counts one action a shadow agent decided and did not carry out: `action` is
    /// `evict`, `kill` (the hot path) or `reclaim`.
    pub(crate) fn count_shadow_action(&mut self, action: &str, eviction_signal: &str) {
        *self
            .shadow_actions
            .entry((action.to_string(), eviction_signal.to_string()))
            .or_default() += 1;
    }

    /// Records one kill of the hot path, fired by `source`'s notifier; `wakes` are the wakes
    /// of the synchronize that took the kill over.
    pub(crate) fn observe_hot_kill(
        &mut self,
        source: WakeSource,
        detected_ns: u64,
        killed_ns: u64,
        wakes: &[Wake],
    ) {
        let (stamp, crossing_ns) = CrossingStamp::of_kill(source, detected_ns, killed_ns, wakes);
        self.crossing_to_kill
            .entry(source)
            .or_default()
            .entry(stamp.as_str().to_string())
            .or_insert_with(|| Histogram::new(CROSSING_TO_KILL_BUCKETS))
            .observe(killed_ns.saturating_sub(crossing_ns) as f64 / 1e9);
    }
}

/// A Prometheus-style cumulative histogram in seconds.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Histogram {
    /// Upper bounds (seconds) and the count of samples at or below each.
    pub(crate) buckets: Vec<(f64, u64)>,
    pub(crate) sum: f64,
    pub(crate) count: u64,
}

impl Histogram {
    /// An empty histogram with buckets at `bounds` (increasing, `+Inf` implied).
    pub(crate) fn new(bounds: &[f64]) -> Histogram {
        Histogram {
            buckets: bounds.iter().map(|b| (*b, 0)).collect(),
            sum: 0.0,
            count: 0,
        }
    }

    pub fn observe(&mut self, seconds: f64) {
        for (bound, count) in &mut self.buckets {
            if seconds <= *bound {
                *count += 1;
            }
        }
        self.sum += seconds;
        self.count += 1;
    }
}

/// Memory relief as `monitor status` shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct MemoryReliefStatus {
    /// `active`, `shadow` (reported only), `off` or `unsupported`.
    pub(crate) state: &'static str,
    /// Its settings, or why it does not run.
    pub(crate) detail: String,
    /// The last pass, in words, and when it ended (RFC 3339).
    pub(crate) last_pass: Option<(String, String)>,
}

/// Everything shared. Read it with [`SharedState::read`], which clones a snapshot.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentState {
    pub sources: Vec<SourceStatus>,
    pub(crate) observation: Option<NodeObservation>,
    pub signals: Vec<SignalStatus>,
    pub conditions: Vec<String>,
    /// The PSI contention conditions reported (with the PSINodeCondition gate on).
    pub(crate) contention: Vec<crate::policy::contention::ContentionStatus>,
    /// Memory relief: whether it runs here, and its last pass.
    pub(crate) memory_relief: Option<MemoryReliefStatus>,
    pub last_sync: Option<LastSync>,
    pub pods: Vec<PodView>,
    /// The newest events, oldest first, at most [`EVENTS_KEPT`].
    pub events: VecDeque<Event>,
    /// Events dropped from the front so far: `events[i]` is event number
    /// `events_dropped + i` since startup, which lets API clients page with `?since=N`.
    pub events_dropped: u64,
    /// The newest evictions and how they ended, oldest first, at most [`EVICTIONS_KEPT`].
    pub(crate) evictions: VecDeque<EvictionView>,
    pub metrics: Metrics,
    /// The last time the container runtime left calls to stop a pod unanswered.
    pub(crate) runtime_silence: Option<RuntimeSilence>,
    /// What the last eviction pass ranked, for `monitor explain` (shared: reading the
    /// state clones it).
    #[serde(skip)]
    pub(crate) ranking: Option<Arc<RankingSnapshot>>,
    /// The housekeeping interval: the longest the loop goes without a synchronize
    /// (`/healthz` calls it stalled past a few of them). Zero until the agent starts.
    #[serde(skip)]
    pub(crate) housekeeping: std::time::Duration,
    /// The last decisions, oldest first, at most [`crate::decisions::KEPT`] (also in the
    /// record file, which outlives the agent).
    #[serde(skip)]
    pub(crate) decisions: VecDeque<Arc<crate::decisions::Decision>>,
}

/// The inputs of the last eviction pass: the pods and stats it read, the observations and
/// the thresholds it judged them by, and the hot path's victim it armed.
#[derive(Debug, Default)]
pub(crate) struct RankingSnapshot {
    pub(crate) input: crate::policy::eviction::SyncInput,
    pub(crate) thresholds: Vec<crate::policy::signal::Threshold>,
    /// Whether the hot kill path runs.
    pub(crate) hot_path: bool,
    /// The pod the hot path holds ready, if any.
    pub(crate) hot_victim: Option<String>,
}

/// Calls the container runtime did not answer by a stop's deadline (the pod was killed
/// through its cgroups regardless).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RuntimeSilence {
    /// Wall-clock time (RFC 3339) when the deadline passed.
    pub(crate) time: String,
    /// "namespace/name" of the pod being stopped.
    pub(crate) pod: String,
    /// The CRI calls left unanswered.
    pub(crate) calls: Vec<String>,
    /// Every unanswered call since start.
    pub(crate) total_calls: u64,
}

impl RuntimeSilence {
    pub(crate) fn now(pod: &str, calls: &[&str], total_calls: u64) -> RuntimeSilence {
        RuntimeSilence {
            time: now_rfc3339(),
            pod: pod.to_string(),
            calls: calls.iter().map(|c| (*c).to_string()).collect(),
            total_calls,
        }
    }
}

/// Evictions kept in memory for the API.
pub(crate) const EVICTIONS_KEPT: usize = 64;

/// One eviction as the API shows it.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct EvictionView {
    /// "namespace/name".
    pub(crate) pod: String,
    /// The signal whose threshold drove it; the resource for local storage limits.
    pub(crate) signal: String,
    pub(crate) grace_period_seconds: i64,
    /// "evicted", "already_gone", "timed_out" or "kill_failed".
    pub(crate) outcome: String,
    /// Details of a failure ("3 process(es) still alive after the kill timeout").
    pub(crate) detail: Option<String>,
    /// Kill attempts made (a failed kill is retried).
    pub(crate) attempts: u32,
    /// Wall-clock time it ended (RFC 3339).
    pub(crate) finished_at: String,
}

/// Events kept in memory (older ones are dropped).
pub(crate) const EVENTS_KEPT: usize = 1000;

/// A handle on the state, cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct SharedState {
    inner: Arc<Mutex<AgentState>>,
    /// The decision record's file, once opened ([`SharedState::open_decision_record`]).
    record: Arc<Mutex<Option<crate::decisions::DecisionFile>>>,
}

impl SharedState {
    /// Locks for an update. Never held across an await.
    pub fn lock(&self) -> MutexGuard<'_, AgentState> {
        // A panic while holding the lock leaves plain data behind: still usable.
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A snapshot.
    pub fn read(&self) -> AgentState {
        self.lock().clone()
    }

    /// Opens the decision record in `dir` and takes back the decisions it holds; what
    /// had to be repaired or set aside is a `DecisionRecordRepaired` event.
    pub(crate) fn open_decision_record(&self, dir: &std::path::Path) -> std::io::Result<()> {
        let (file, loaded) = crate::decisions::DecisionFile::open(dir)?;
        for note in loaded.notes {
            self.event(EventReason::DecisionRecordRepaired, "node", note);
        }
        self.lock().decisions = loaded.decisions.into_iter().map(Arc::new).collect();
        *self.record.lock().unwrap_or_else(|p| p.into_inner()) = Some(file);
        Ok(())
    }

    /// Records a decision: kept for the API and appended to the record file. A write
    /// that fails is logged; the decision stays in memory.
    pub(crate) fn record_decision(&self, decision: crate::decisions::Decision) {
        let mut record = self.record.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(file) = record.as_mut()
            && let Err(err) = file.append(&decision)
        {
            tracing::warn!("decision record: {err}");
        }
        drop(record);
        let mut state = self.lock();
        if state.decisions.len() >= crate::decisions::KEPT {
            state.decisions.pop_front();
        }
        state.decisions.push_back(Arc::new(decision));
    }

    /// Counts the images one garbage collection removed, by the kubelet's reason.
    pub(crate) fn record_images_collected(&self, by_age: u64, for_space: u64) {
        let mut state = self.lock();
        let collected = &mut state.metrics.images_collected;
        *collected.entry("age".into()).or_default() += by_age;
        *collected.entry("space".into()).or_default() += for_space;
    }

    /// Counts what one garbage collection removed: `removed` as (kind, count, bytes freed).
    pub(crate) fn record_gc(&self, trigger: &str, removed: &[(&str, u64, u64)]) {
        let mut state = self.lock();
        let metrics = &mut state.metrics;
        for (kind, count, bytes) in removed {
            *metrics
                .gc_removed
                .entry(trigger.to_string())
                .or_default()
                .entry(kind.to_string())
                .or_default() += count;
            *metrics
                .gc_freed_bytes
                .entry(trigger.to_string())
                .or_default()
                .entry(kind.to_string())
                .or_default() += bytes;
        }
    }

    /// Records the age of the observation taken at `taken_at_ns` for an eviction decided
    /// now on the thresholds `met`: one sample per threshold whose grace period has passed,
    /// as the kubelet does. An observation without a stamp (0) is not counted.
    pub(crate) fn record_stats_age(&self, taken_at_ns: u64, met: &[ThresholdMet]) {
        if taken_at_ns == 0 {
            return;
        }
        let age = crate::clock::monotonic_ns().saturating_sub(taken_at_ns) as f64 / 1e9;
        let mut state = self.lock();
        for m in met.iter().filter(|m| m.grace_period_met) {
            state
                .metrics
                .observe_stats_age(m.threshold.signal.as_str(), age);
        }
    }

    /// Counts a pod preempted (gone) to admit a critical pod that lacked `resource` first.
    pub(crate) fn record_preemption(&self, resource: &str) {
        *self
            .lock()
            .metrics
            .preemptions
            .entry(resource.to_string())
            .or_default() += 1;
    }

    /// Counts a pod admission rejected with the pod status reason `reason`.
    pub(crate) fn record_admission_rejection(&self, reason: &str) {
        *self
            .lock()
            .metrics
            .admission_rejections
            .entry(admission_rejection_reason(reason).to_string())
            .or_default() += 1;
    }

    /// Records an event (and logs it): a Warning or Normal one as `reason` is.
    pub fn event(&self, reason: EventReason, object: &str, message: impl Into<String>) {
        let message = bounded_note(message.into());
        let kind = reason.event_type();
        let reason = reason.as_str();
        // A pod ("namespace/name") is also its own field, as the journal's POD=.
        let pod = object.contains('/').then_some(object);
        if kind == EventType::Warning {
            tracing::warn!(
                reason,
                object,
                pod,
                at_ns = crate::clock::monotonic_ns(),
                "{message}"
            );
        } else {
            tracing::info!(
                reason,
                object,
                pod,
                at_ns = crate::clock::monotonic_ns(),
                "{message}"
            );
        }
        let mut state = self.lock();
        if state.events.len() >= EVENTS_KEPT {
            state.events.pop_front();
            state.events_dropped = state.events_dropped.saturating_add(1);
        }
        state.events.push_back(Event {
            time: now_rfc3339(),
            kind: kind.as_str().to_string(),
            reason: reason.to_string(),
            object: object.to_string(),
            message,
        });
    }
}

/// The most an event's message keeps, in bytes: the kubelet's events carry a note of at
/// most 1 KiB (events.k8s.io/v1), and messages quote manifests and process output.
pub(crate) const EVENT_MESSAGE_MAX_BYTES: usize = 1024;

/// `message` cut to [`EVENT_MESSAGE_MAX_BYTES`] on a character boundary, marked with "…"
/// where it was cut.
pub(crate) fn bounded_note(mut message: String) -> String {
    if message.len() <= EVENT_MESSAGE_MAX_BYTES {
        return message;
    }
    const MARK: &str = "…";
    let mut end = EVENT_MESSAGE_MAX_BYTES - MARK.len();
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    message.truncate(end);
    message.push_str(MARK);
    message
}

/// The wall clock in RFC 3339 (UTC, seconds), for events and reports only: decisions
/// never read it.
pub(crate) fn now_rfc3339() -> String {
    let now = time::OffsetDateTime::now_utc();
    // Whole seconds: the events' resolution; the formatter then writes no fraction.
    let now = now.replace_nanosecond(0).unwrap_or(now);
    now.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|_| String::from("1970-01-01T00:00:00Z"))
}

#[cfg(test)]
mod tests;
