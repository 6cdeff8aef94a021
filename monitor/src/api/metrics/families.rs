//! The metric families `/metrics` renders, in the order it renders them: the one place
//! their names, types, HELP texts, label names and histogram buckets are written (the
//! ladders themselves are in `state::buckets`, where the state makes each histogram with
//! them). The renderer begins each family from its entry here, and docs/operation.md's
//! metrics table is checked against this table.

use crate::state::buckets::{
    CROSSING_TO_KILL_BUCKETS, STATS_AGE_BUCKETS, SYNC_DURATION_BUCKETS, WAKE_TO_SYNC_BUCKETS,
};

/// The Prometheus type of a family (the 0.0.4 format's `# TYPE`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum FamilyType {
    Counter,
    Gauge,
    /// A gauge that is always 1, whose labels are the information (`*_info`): a gauge in
    /// the text format 0.0.4, OpenMetrics' `info` type.
    Info,
    /// With the upper bounds of its buckets, in seconds (`+Inf` is implied).
    Histogram(&'static [f64]),
}

impl FamilyType {
    /// As the text format 0.0.4's `# TYPE` line spells it.
    #[cfg(test)]
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            FamilyType::Counter => "counter",
            FamilyType::Gauge | FamilyType::Info => "gauge",
            FamilyType::Histogram(_) => "histogram",
        }
    }
}

/// One metric family: its name, type, HELP text and the names of its labels, in the order
/// its samples carry them (a histogram's buckets add `le`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Family {
    pub(crate) name: &'static str,
    pub(crate) kind: FamilyType,
    pub(crate) help: &'static str,
    pub(crate) labels: &'static [&'static str],
}

/// Every family, in the order `/metrics` renders them.
pub(super) const FAMILIES: &[Family] = &[
    BUILD_INFO,
    EVICTIONS_TOTAL,
    EVICTION_OUTCOMES_TOTAL,
    SHADOW_ACTIONS_TOTAL,
    PRE_KILL_HOOKS_TOTAL,
    RUNTIME_UNRESPONSIVE_CALLS_TOTAL,
    INEFFECTIVE_EVICTIONS_TOTAL,
    MEMORY_RECLAIMED_BYTES_TOTAL,
    MEMORY_RELIEF_PASSES_TOTAL,
    MEMORY_RELIEF_DURATION_SECONDS,
    HOT_WATCH_CPU_SECONDS_TOTAL,
    HOT_WATCH_REHEARSALS_TOTAL,
    EVICTION_STATS_AGE_SECONDS,
    PREEMPTIONS_TOTAL,
    ADMISSION_REJECTIONS_TOTAL,
    KERNEL_OOM_KILLS_TOTAL,
    NODE_OOM_KILLS_TOTAL,
    GC_REMOVED_TOTAL,
    GC_FREED_BYTES_TOTAL,
    IMAGE_GARBAGE_COLLECTED_TOTAL,
    SYNCHRONIZES_TOTAL,
    SYNCHRONIZE_PANICS_TOTAL,
    LAST_SYNCHRONIZE_TIMESTAMP_SECONDS,
    SYNC_DURATION_SECONDS,
    WAKE_TO_SYNC_SECONDS,
    CROSSING_TO_KILL_SECONDS,
    SIGNAL_AVAILABLE_BYTES,
    SIGNAL_CAPACITY_BYTES,
    SIGNAL_AVAILABLE_INODES,
    SIGNAL_CAPACITY_INODES,
    SIGNAL_AVAILABLE_PIDS,
    SIGNAL_CAPACITY_PIDS,
    THRESHOLD_MET,
    NODE_CONDITION,
    SOURCE_UP,
    SOURCE_STATE,
    PODS,
    PROCESS_CPU_SECONDS_TOTAL,
    PROCESS_RESIDENT_MEMORY_BYTES,
    PROCESS_VIRTUAL_MEMORY_BYTES,
    PROCESS_START_TIME_SECONDS,
    PROCESS_OPEN_FDS,
    PROCESS_MAX_FDS,
];

pub(super) const BUILD_INFO: Family = Family {
    name: "monitor_build_info",
    kind: FamilyType::Info,
    help: "Always 1; its labels name the running build: version (the package's) and revision (the git commit built, with -dirty when built from uncommitted changes; unknown when the build had no git).",
    labels: &["version", "revision"],
};

pub(super) const EVICTIONS_TOTAL: Family = Family {
    name: "monitor_evictions_total",
    kind: FamilyType::Counter,
    help: "Pods evicted by the agent, by eviction_signal: the signal whose threshold drove the eviction, or the local storage limit the pod exceeded (ephemeralpodfs.limit, ephemeralcontainerfs.limit, emptydirfs.limit). The kubelet's kubelet_evictions.",
    labels: &["eviction_signal"],
};

pub(super) const EVICTION_OUTCOMES_TOTAL: Family = Family {
    name: "monitor_eviction_outcomes_total",
    kind: FamilyType::Counter,
    help: "Evictions ended, by outcome: evicted, already_gone, timed_out or kill_failed (after retries).",
    labels: &["outcome"],
};

pub(super) const SHADOW_ACTIONS_TOTAL: Family = Family {
    name: "monitor_shadow_actions_total",
    kind: FamilyType::Counter,
    help: "Shadow mode (monitor.shadow): actions decided and not carried out, by action (evict: an eviction of the synchronize; kill: a hot kill at a hard memory crossing; reclaim: node-level reclaim) and eviction_signal. Each is also a WouldEvict, WouldKill or WouldReclaim event.",
    labels: &["action", "eviction_signal"],
};

pub(super) const PRE_KILL_HOOKS_TOTAL: Family = Family {
    name: "monitor_pre_kill_hooks_total",
    kind: FamilyType::Counter,
    help: "Runs of the pre-kill hook (monitor.preKillHook) before an eviction, by result: ok (exit 0), failed (another exit), timed_out (killed at its deadline), error (could not start). The eviction went on in every case.",
    labels: &["result"],
};

pub(super) const MEMORY_RECLAIMED_BYTES_TOTAL: Family = Family {
    name: "monitor_memory_reclaimed_bytes_total",
    kind: FamilyType::Counter,
    help: "Memory relief (monitor.memoryRelief): bytes the pods' working sets (usage − inactive_file, as the memory signals count them) fell by while the agent asked the kernel to reclaim their page cache (memory.reclaim, cgroup v2), by the pods' qos (BestEffort, Burstable; Guaranteed pods are never asked).",
    labels: &["qos"],
};

pub(super) const MEMORY_RELIEF_PASSES_TOTAL: Family = Family {
    name: "monitor_memory_relief_passes_total",
    kind: FamilyType::Counter,
    help: "Memory relief passes, by result: relieved (the pods gave back what the signal needed), stalled (a step made the pod's memory stall past memoryRelief.maxStall, the pass stopped), exhausted (the pods gave all they would, the signal is still short), failed (memory.reclaim could not be written).",
    labels: &["result"],
};

pub(super) const MEMORY_RELIEF_DURATION_SECONDS: Family = Family {
    name: "monitor_memory_relief_duration_seconds",
    kind: FamilyType::Histogram(SYNC_DURATION_BUCKETS),
    help: "Time a memory relief pass took, from its first write to memory.reclaim to its last (the synchronize observes afresh after it).",
    labels: &[],
};

pub(super) const RUNTIME_UNRESPONSIVE_CALLS_TOTAL: Family = Family {
    name: "monitor_runtime_unresponsive_calls_total",
    kind: FamilyType::Counter,
    help: "Calls to the container runtime made to stop a pod (evicted, preempted, removed or finished) that it left unanswered by the stop's deadline (an eviction's kill timeout), by CRI call. The pod was killed through its cgroups regardless; each silence is also a RuntimeUnresponsive event naming the pod.",
    labels: &["call"],
};

pub(super) const INEFFECTIVE_EVICTIONS_TOTAL: Family = Family {
    name: "monitor_ineffective_evictions_total",
    kind: FamilyType::Counter,
    help: "Evictions after which the signal came back by far less than the victim held (its memory stayed charged: page cache, tmpfs, shared pages), by eviction_signal. Each paces that signal to one eviction per housekeeping interval until the signal moves.",
    labels: &["eviction_signal"],
};

pub(super) const HOT_WATCH_CPU_SECONDS_TOTAL: Family = Family {
    name: "monitor_hot_watch_cpu_seconds_total",
    kind: FamilyType::Counter,
    help: "CPU time the hot path's watches used on the notifier threads, within their budget (10 ms at once, 2 % of one CPU over time).",
    labels: &[],
};

pub(super) const HOT_WATCH_REHEARSALS_TOTAL: Family = Family {
    name: "monitor_hot_watch_rehearsals_total",
    kind: FamilyType::Counter,
    help: "Rehearsals of the kill the hot path's watches ran, on their CPU budget: the confirmation's reads, the pick's, and signal 0 (a check, nothing sent) to the pod the pick named; nothing is decided or written. They keep the kill's system calls warm while a watch looks.",
    labels: &[],
};

pub(super) const EVICTION_STATS_AGE_SECONDS: Family = Family {
    name: "monitor_eviction_stats_age_seconds",
    kind: FamilyType::Histogram(STATS_AGE_BUCKETS),
    help: "Age of the observation a threshold eviction was decided on, from its read to the decision, by the eviction_signal of each threshold met. The kubelet's kubelet_eviction_stats_age_seconds. Kills of the hot path are not in it: they are confirmed on the kernel's counters at the crossing (see monitor_crossing_to_kill_seconds).",
    labels: &["eviction_signal"],
};

pub(super) const PREEMPTIONS_TOTAL: Family = Family {
    name: "monitor_preemptions_total",
    kind: FamilyType::Counter,
    help: "Pods preempted (stopped) to admit a critical pod, by preemption_signal: the first resource the critical pod lacked. The kubelet's kubelet_preemptions.",
    labels: &["preemption_signal"],
};

pub(super) const ADMISSION_REJECTIONS_TOTAL: Family = Family {
    name: "monitor_admission_rejections_total",
    kind: FamilyType::Counter,
    help: "Pods admission turned away, by reason: the pod status reason (Evicted for node pressure, OutOf<resource>, PodOSSelectorNodeLabelDoesNotMatch, PodOSNotSupported, NodeName, NodePorts, TaintToleration, UnexpectedAdmissionError when preemption found no pods to free enough); other OutOf reasons count as OutOfExtendedResources and anything else as Other. The kubelet's kubelet_admission_rejections_total.",
    labels: &["reason"],
};

pub(super) const KERNEL_OOM_KILLS_TOTAL: Family = Family {
    name: "monitor_kernel_oom_kills_total",
    kind: FamilyType::Counter,
    help: "Victims of the kernel OOM killer (eBPF oom:mark_victim), by the namespace and name of their pod (the labels of cAdvisor and kube-state-metrics); both empty for a victim outside any pod, gone before its pod was known, or held back by the in-kernel rate limit. Every one is a kill the agent did not prevent.",
    labels: &["namespace", "pod"],
};

pub(super) const NODE_OOM_KILLS_TOTAL: Family = Family {
    name: "monitor_node_oom_kills_total",
    kind: FamilyType::Counter,
    help: "OOM kills on the whole node since boot (/proc/vmstat oom_kill), whoever the victim.",
    labels: &[],
};

pub(super) const GC_REMOVED_TOTAL: Family = Family {
    name: "monitor_gc_removed_total",
    kind: FamilyType::Counter,
    help: "Dead containers, sandboxes, unused images and old container logs removed by garbage collection, by trigger (periodic, or eviction: node-level reclaim under pressure) and kind.",
    labels: &["trigger", "kind"],
};

pub(super) const GC_FREED_BYTES_TOTAL: Family = Family {
    name: "monitor_gc_freed_bytes_total",
    kind: FamilyType::Counter,
    help: "Bytes garbage collection freed, by trigger and kind: images by their size, logs by their disk usage (the space of removed containers is not measured).",
    labels: &["trigger", "kind"],
};

pub(super) const IMAGE_GARBAGE_COLLECTED_TOTAL: Family = Family {
    name: "kubelet_image_garbage_collected_total",
    kind: FamilyType::Counter,
    help: "Images garbage collection removed, by reason: age (unused longer than imageMaximumGCAge) or space (the image filesystem's thresholds, or node-level reclaim under pressure); the kubelet's own name and labels.",
    labels: &["reason"],
};

pub(super) const SYNCHRONIZES_TOTAL: Family = Family {
    name: "monitor_synchronizes_total",
    kind: FamilyType::Counter,
    help: "Synchronize passes (observe, decide, act) run by the synchronize loop.",
    labels: &[],
};

pub(super) const LAST_SYNCHRONIZE_TIMESTAMP_SECONDS: Family = Family {
    name: "monitor_last_synchronize_timestamp_seconds",
    kind: FamilyType::Gauge,
    help: "When the last synchronize pass ended, in seconds since the Unix epoch (0 before the first): time() minus it is how long the loop has been quiet.",
    labels: &[],
};

pub(super) const SYNCHRONIZE_PANICS_TOTAL: Family = Family {
    name: "monitor_synchronize_panics_total",
    kind: FamilyType::Counter,
    help: "Synchronize passes that panicked; the loop went on with the next wake. Each one is a bug.",
    labels: &[],
};

pub(super) const SYNC_DURATION_SECONDS: Family = Family {
    name: "monitor_sync_duration_seconds",
    kind: FamilyType::Histogram(SYNC_DURATION_BUCKETS),
    help: "Time one synchronize pass took.",
    labels: &[],
};

pub(super) const WAKE_TO_SYNC_SECONDS: Family = Family {
    name: "monitor_wake_to_sync_seconds",
    kind: FamilyType::Histogram(WAKE_TO_SYNC_BUCKETS),
    help: "Time from a wake-up reaching userspace to the start of the synchronize it caused, by wake source (every wake a synchronize coalesced counts).",
    labels: &["source"],
};

pub(super) const CROSSING_TO_KILL_SECONDS: Family = Family {
    name: "monitor_crossing_to_kill_seconds",
    kind: FamilyType::Histogram(CROSSING_TO_KILL_BUCKETS),
    help: "Hot kill path: time from a hard memory threshold's crossing to the cgroup.kill write, by the source whose notifier fired the kill and by stamp: kernel when the crossing detector's record stamped the crossing in the kernel, notifier when the crossing is the moment the notifier reached the agent (memcg eventfds and memory.events carry no stamp).",
    labels: &["source", "stamp"],
};

pub(super) const SIGNAL_AVAILABLE_BYTES: Family = Family {
    name: "monitor_signal_available_bytes",
    kind: FamilyType::Gauge,
    help: "Eviction signal: the amount available now, in bytes (memory.available, allocatableMemory.available, nodefs.available, imagefs.available, containerfs.available), by eviction_signal.",
    labels: &["eviction_signal"],
};

pub(super) const SIGNAL_CAPACITY_BYTES: Family = Family {
    name: "monitor_signal_capacity_bytes",
    kind: FamilyType::Gauge,
    help: "Eviction signal: the capacity its available amount and percentage thresholds are measured against, in bytes, by eviction_signal.",
    labels: &["eviction_signal"],
};

pub(super) const SIGNAL_AVAILABLE_INODES: Family = Family {
    name: "monitor_signal_available_inodes",
    kind: FamilyType::Gauge,
    help: "Eviction signal: the amount available now, in inodes (nodefs.inodesFree, imagefs.inodesFree, containerfs.inodesFree), by eviction_signal.",
    labels: &["eviction_signal"],
};

pub(super) const SIGNAL_CAPACITY_INODES: Family = Family {
    name: "monitor_signal_capacity_inodes",
    kind: FamilyType::Gauge,
    help: "Eviction signal: the capacity its available amount and percentage thresholds are measured against, in inodes, by eviction_signal.",
    labels: &["eviction_signal"],
};

pub(super) const SIGNAL_AVAILABLE_PIDS: Family = Family {
    name: "monitor_signal_available_pids",
    kind: FamilyType::Gauge,
    help: "Eviction signal: the amount available now, in pids (pid.available), by eviction_signal.",
    labels: &["eviction_signal"],
};

pub(super) const SIGNAL_CAPACITY_PIDS: Family = Family {
    name: "monitor_signal_capacity_pids",
    kind: FamilyType::Gauge,
    help: "Eviction signal: the capacity its available amount and percentage thresholds are measured against, in pids, by eviction_signal.",
    labels: &["eviction_signal"],
};

pub(super) const THRESHOLD_MET: Family = Family {
    name: "monitor_threshold_met",
    kind: FamilyType::Gauge,
    help: "1 when the signal is below this eviction threshold (hard or soft), else 0.",
    labels: &["eviction_signal", "threshold", "kind"],
};

pub(super) const NODE_CONDITION: Family = Family {
    name: "monitor_node_condition",
    kind: FamilyType::Gauge,
    help: "1 while the node reports this condition (MemoryPressure, DiskPressure, PIDPressure; the PSI contention conditions when the PSINodeCondition gate is on).",
    labels: &["condition"],
};

pub(super) const SOURCE_UP: Family = Family {
    name: "monitor_source_up",
    kind: FamilyType::Gauge,
    help: "1 when the event source started and runs, else 0 (monitor_source_state says why not). A source that ends or panics later turns 0.",
    labels: &["source"],
};

pub(super) const SOURCE_STATE: Family = Family {
    name: "monitor_source_state",
    kind: FamilyType::Gauge,
    help: "The event source's state: a series for each of running, disabled, failed and unsupported, 1 for the state it is in and 0 for the others, so that a change of state changes values, not series.",
    labels: &["source", "state"],
};

pub(super) const PODS: Family = Family {
    name: "monitor_pods",
    kind: FamilyType::Gauge,
    help: "Pods the agent runs, by phase.",
    labels: &["phase"],
};

// The standard process metrics of the Prometheus client libraries, with their names and
// HELP texts (client_golang's process collector), so that the dashboards and alerts
// written for any process work for the agent.

pub(super) const PROCESS_CPU_SECONDS_TOTAL: Family = Family {
    name: "process_cpu_seconds_total",
    kind: FamilyType::Counter,
    help: "Total user and system CPU time spent in seconds.",
    labels: &[],
};

pub(super) const PROCESS_RESIDENT_MEMORY_BYTES: Family = Family {
    name: "process_resident_memory_bytes",
    kind: FamilyType::Gauge,
    help: "Resident memory size in bytes.",
    labels: &[],
};

pub(super) const PROCESS_VIRTUAL_MEMORY_BYTES: Family = Family {
    name: "process_virtual_memory_bytes",
    kind: FamilyType::Gauge,
    help: "Virtual memory size in bytes.",
    labels: &[],
};

pub(super) const PROCESS_START_TIME_SECONDS: Family = Family {
    name: "process_start_time_seconds",
    kind: FamilyType::Gauge,
    help: "Start time of the process since unix epoch in seconds.",
    labels: &[],
};

pub(super) const PROCESS_OPEN_FDS: Family = Family {
    name: "process_open_fds",
    kind: FamilyType::Gauge,
    help: "Number of open file descriptors.",
    labels: &[],
};

pub(super) const PROCESS_MAX_FDS: Family = Family {
    name: "process_max_fds",
    kind: FamilyType::Gauge,
    help: "Maximum number of open file descriptors.",
    labels: &[],
};
