//! What the agent knows right now, shared between the synchronize loop (which writes it
//! after every synchronize), the pod runtime (pods and events) and the API (which only
//! reads it).
//! Everything here is plain data with `Serialize`, so the API returns it as JSON as is.
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use serde::Serialize;

use crate::notify::{SourceStatus, WakeSource};
use crate::observe::NodeObservation;

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
    /// "running", "exited(CODE)", "signaled(SIG)", "waiting".
    pub state: String,
}

/// An event, as `monitor events` shows it (Kubernetes' event vocabulary).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    /// Wall-clock time (RFC 3339).
    pub time: String,
    /// "Normal" or "Warning".
    pub kind: String,
    /// "Evicted", "Killing", "Started", "FailedAdmission", "Preempting", "BadManifest", ...
    pub reason: String,
    /// "namespace/name" of the pod, a manifest path, or "node".
    pub object: String,
    pub message: String,
}

/// Counters and histograms for `/metrics`.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Metrics {
    /// Evictions carried out, by signal name (or resource, for local storage limits).
    pub evictions: BTreeMap<String, u64>,
    /// Eviction attempts by how they ended ([`crate::runtime::port::EvictionOutcome::name`]).
    pub eviction_outcomes: BTreeMap<String, u64>,
    /// Wake-to-synchronize-start latency samples by source, as histogram buckets.
    pub wake_latency: BTreeMap<WakeSource, Histogram>,
    pub sync_duration: Histogram,
    pub synchronizes: u64,
    /// Synchronize passes that panicked (the loop survives them; each is a bug).
    pub synchronize_panics: u64,
    /// Victims of the kernel's OOM killer seen by the eBPF `oom:mark_victim` program, by
    /// pod ("namespace/name"; "" when the victim was in no pod or was gone too soon).
    pub kernel_oom_kills: BTreeMap<String, u64>,
    /// What garbage collection removed, by (trigger, kind): trigger "periodic" (the image
    /// GC period) or "eviction" (node-level reclaim under pressure); kind "container",
    /// "sandbox", "image" or "log".
    pub gc_removed: BTreeMap<String, BTreeMap<String, u64>>,
    /// Bytes garbage collection freed, by (trigger, kind): images by their size, logs by
    /// their disk usage.
    pub gc_freed_bytes: BTreeMap<String, BTreeMap<String, u64>>,
}

/// A Prometheus-style cumulative histogram in seconds.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Histogram {
    /// Upper bounds (seconds) and the count of samples at or below each.
    pub buckets: Vec<(f64, u64)>,
    pub sum: f64,
    pub count: u64,
}

/// Bucket bounds from 10 µs to 10 s: wake latencies live at the bottom, polling at the top.
pub const LATENCY_BUCKETS: [f64; 13] = [
    1e-5, 5e-5, 1e-4, 5e-4, 1e-3, 5e-3, 1e-2, 5e-2, 0.1, 0.5, 1.0, 5.0, 10.0,
];

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            buckets: LATENCY_BUCKETS.iter().map(|b| (*b, 0)).collect(),
            sum: 0.0,
            count: 0,
        }
    }
}

impl Histogram {
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

/// Everything shared. Read it with [`SharedState::read`], which clones a snapshot.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentState {
    pub sources: Vec<SourceStatus>,
    pub observation: Option<NodeObservation>,
    pub signals: Vec<SignalStatus>,
    pub conditions: Vec<String>,
    pub last_sync: Option<LastSync>,
    pub pods: Vec<PodView>,
    /// The newest events, oldest first, at most [`EVENTS_KEPT`].
    pub events: VecDeque<Event>,
    /// Events dropped from the front so far: `events[i]` is event number
    /// `events_dropped + i` since startup, which lets API clients page with `?since=N`.
    pub events_dropped: u64,
    /// The newest evictions and how they ended, oldest first, at most [`EVICTIONS_KEPT`].
    pub evictions: VecDeque<EvictionView>,
    pub metrics: Metrics,
}

/// Evictions kept in memory for the API.
pub const EVICTIONS_KEPT: usize = 64;

/// One eviction as the API shows it.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EvictionView {
    /// "namespace/name".
    pub pod: String,
    /// The signal whose threshold drove it; the resource for local storage limits.
    pub signal: String,
    pub grace_period_seconds: i64,
    /// "evicted", "already_gone", "timed_out" or "kill_failed".
    pub outcome: String,
    /// Details of a failure ("3 process(es) still alive after the kill timeout").
    pub detail: Option<String>,
    /// Kill attempts made (a failed kill is retried).
    pub attempts: u32,
    /// Wall-clock time it ended (RFC 3339).
    pub finished_at: String,
}

/// Events kept in memory (older ones are dropped).
pub const EVENTS_KEPT: usize = 1000;

/// A handle on the state, cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct SharedState {
    inner: Arc<Mutex<AgentState>>,
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

    /// Counts what one garbage collection removed: `removed` as (kind, count, bytes freed).
    pub fn record_gc(&self, trigger: &str, removed: &[(&str, u64, u64)]) {
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

    /// Records an event (and logs it).
    pub fn event(&self, kind: &str, reason: &str, object: &str, message: impl Into<String>) {
        let message = message.into();
        if kind == "Warning" {
            tracing::warn!(
                reason,
                object,
                at_ns = crate::clock::monotonic_ns(),
                "{message}"
            );
        } else {
            tracing::info!(
                reason,
                object,
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
            kind: kind.to_string(),
            reason: reason.to_string(),
            object: object.to_string(),
            message,
        });
    }
}

/// The wall clock in RFC 3339 (UTC, seconds), for events and reports only: decisions
/// never read it.
pub fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_is_cumulative() {
        let mut h = Histogram::default();
        h.observe(2e-5);
        h.observe(0.2);
        assert_eq!(h.count, 2);
        assert_eq!(h.buckets[0], (1e-5, 0));
        assert_eq!(h.buckets[1], (5e-5, 1));
        assert_eq!(h.buckets.last().unwrap().1, 2);
    }

    #[test]
    fn events_are_bounded() {
        let state = SharedState::default();
        for i in 0..EVENTS_KEPT + 5 {
            state.event("Normal", "Test", "node", format!("event {i}"));
        }
        let events = state.read().events;
        assert_eq!(events.len(), EVENTS_KEPT);
        assert_eq!(events.front().unwrap().message, "event 5");
        assert_eq!(state.read().events_dropped, 5);
    }

    #[test]
    fn rfc3339_looks_right() {
        let t = now_rfc3339();
        assert_eq!(t.len(), 20, "{t}");
        assert!(t.starts_with("20") && t.ends_with('Z'), "{t}");
    }
}
