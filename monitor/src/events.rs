//! The reasons of the agent's events (`monitor events`, the log): each one a name, spelled
//! as the kubelet spells its events where the kubelet has the same one (Evicted, Killing,
//! Preempting, Started, BackOff, FailedAdmission, FailedKillPod,
//! FailedCreatePodSandBox, ...), and a type, Normal or Warning.
use crate::policy::contention::ContentionCondition;

/// Kubernetes' event types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EventType {
    Normal,
    Warning,
}

impl EventType {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// Why an event was recorded. A reason whose type depends on what happened carries that.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventReason {
    // Node-pressure evictions and the hot path.
    /// A pod evicted for node pressure (the pod's status reason too).
    Evicted,
    /// A pod stopped so that a critical pod is admitted (the pod's status reason too).
    Preempted,
    /// A critical pod admitted after preempting others.
    Preempting,
    /// A pod being stopped: evicted, preempted, or its manifest removed or changed.
    Killing,
    /// The hot path killed a pod at a hard memory threshold's crossing.
    HotKill,
    /// An eviction that did not end with the pod gone.
    EvictionFailed,
    /// An eviction after which the signal came back by far less than the victim held.
    EvictionIneffective,
    /// A signal that cannot be read: its thresholds are not judged.
    SignalUnavailable,
    /// A signal that reads again.
    SignalRestored,
    /// A PSI contention condition the node now has (`present`) or no longer has.
    Contention {
        condition: ContentionCondition,
        present: bool,
    },

    // Pods.
    /// A pod's containers started.
    Started,
    /// A container that could not be started.
    Failed,
    /// A pod whose sandbox the container runtime could not create.
    FailedCreatePodSandBox,
    /// A pod admission turned away.
    FailedAdmission,
    /// A manifest that cannot be read as a pod.
    BadManifest,
    /// A container that exited and is not restarted; a Warning when it `failed`.
    Exited { failed: bool },
    /// A container that exited and is restarted after a back-off; a Warning when it
    /// `failed`.
    BackOff { failed: bool },
    /// A pod that could not be stopped.
    FailedKill,
    /// The container runtime answered a call to stop a pod with an error.
    FailedKillPod,
    /// The container runtime left calls to stop a pod unanswered by the deadline.
    RuntimeUnresponsive,
    /// The agent cannot give containers a negative `oom_score_adj`.
    OomScoreAdj,
    /// The manifest directory cannot be watched, or is `watched` again (Normal).
    ManifestDir { watched: bool },

    // The pods' records and cgroups, across restarts of the agent.
    /// A pod record that could not be written.
    StateWrite,
    /// A pod record that could not be read, set aside.
    StateQuarantined,
    /// A pod record that could not be read.
    StateUnreadable,
    /// A pod's cgroups that could not be removed.
    CgroupCleanup,
    /// Running pods of an earlier run taken over.
    Adopted,
    /// A pod admitted but not started when the agent stopped, admitted again.
    PendingReadmitted,
    /// A pod whose cgroup is gone, started afresh.
    PodCgroupGone,
    /// A pod cgroup with processes whose record cannot be read: left running, unmanaged.
    UnmanagedPod,
    /// A pod cgroup no record claims, killed.
    OrphanPodKilled,
    /// A pod cgroup no record claims that could not be killed.
    OrphanPodNotKilled,

    // Garbage collection.
    /// Dead containers and sandboxes removed.
    ContainerGC,
    /// Unused images removed.
    ImageGC,
    /// A garbage collection that failed.
    FailedGC,
    /// The records of image use could not be read.
    ImageRecordsUnreadable,
    /// Memory relief reclaimed pods' page cache before a memory threshold was met.
    MemoryReclaimed,

    // Pods a kubelet runs (monitor.podList), and the shadow mode.
    /// The pod list cannot be read or parsed: the previous one stays in use.
    PodListUnreadable,
    /// A listed pod with no cgroup under the kubelet's tree: not protected, not ranked.
    PodCgroupMissing,
    /// A pod cgroup under the kubelet's tree that no listed pod claims: left alone.
    UnlistedPodCgroup,
    /// An eviction a shadow agent would have carried out.
    WouldEvict,
    /// A hot kill a shadow agent would have made at a hard memory crossing.
    WouldKill,
    /// A node-level reclaim a shadow agent would have run.
    WouldReclaim,
    /// The decision record had a torn line cut off or a file set aside at start.
    DecisionRecordRepaired,
    /// The pre-kill hook failed, hung or could not start; the eviction went on.
    PreKillHookFailed,

    // The agent itself.
    /// An event source ended; the agent runs on the others.
    SourceFailed,
    /// A task of the agent ended.
    TaskFailed,
    /// A synchronize pass panicked.
    SynchronizeFailed,
}

impl EventReason {
    /// The reason as events and the log spell it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            EventReason::Evicted => "Evicted",
            EventReason::Preempted => "Preempted",
            EventReason::Preempting => "Preempting",
            EventReason::Killing => "Killing",
            EventReason::HotKill => "HotKill",
            EventReason::EvictionFailed => "EvictionFailed",
            EventReason::EvictionIneffective => "EvictionIneffective",
            EventReason::SignalUnavailable => "SignalUnavailable",
            EventReason::SignalRestored => "SignalRestored",
            EventReason::Contention { condition, .. } => condition.as_str(),
            EventReason::Started => "Started",
            EventReason::Failed => "Failed",
            EventReason::FailedCreatePodSandBox => "FailedCreatePodSandBox",
            EventReason::FailedAdmission => "FailedAdmission",
            EventReason::BadManifest => "BadManifest",
            EventReason::Exited { .. } => "Exited",
            EventReason::BackOff { .. } => "BackOff",
            EventReason::FailedKill => "FailedKill",
            EventReason::FailedKillPod => "FailedKillPod",
            EventReason::RuntimeUnresponsive => "RuntimeUnresponsive",
            EventReason::OomScoreAdj => "OomScoreAdj",
            EventReason::ManifestDir { .. } => "ManifestDir",
            EventReason::StateWrite => "StateWrite",
            EventReason::StateQuarantined => "StateQuarantined",
            EventReason::StateUnreadable => "StateUnreadable",
            EventReason::CgroupCleanup => "CgroupCleanup",
            EventReason::Adopted => "Adopted",
            EventReason::PendingReadmitted => "PendingReadmitted",
            EventReason::PodCgroupGone => "PodCgroupGone",
            EventReason::UnmanagedPod => "UnmanagedPod",
            EventReason::OrphanPodKilled => "OrphanPodKilled",
            EventReason::OrphanPodNotKilled => "OrphanPodNotKilled",
            EventReason::ContainerGC => "ContainerGC",
            EventReason::ImageGC => "ImageGC",
            EventReason::FailedGC => "FailedGC",
            EventReason::ImageRecordsUnreadable => "ImageRecordsUnreadable",
            EventReason::MemoryReclaimed => "MemoryReclaimed",
            EventReason::PodListUnreadable => "PodListUnreadable",
            EventReason::PodCgroupMissing => "PodCgroupMissing",
            EventReason::UnlistedPodCgroup => "UnlistedPodCgroup",
            EventReason::WouldEvict => "WouldEvict",
            EventReason::WouldKill => "WouldKill",
            EventReason::WouldReclaim => "WouldReclaim",
            EventReason::DecisionRecordRepaired => "DecisionRecordRepaired",
            EventReason::PreKillHookFailed => "PreKillHookFailed",
            EventReason::SourceFailed => "SourceFailed",
            EventReason::TaskFailed => "TaskFailed",
            EventReason::SynchronizeFailed => "SynchronizeFailed",
        }
    }

    /// Normal, or Warning for what someone may have to look into.
    pub(crate) fn event_type(self) -> EventType {
        match self {
            EventReason::Preempting
            | EventReason::Killing
            | EventReason::HotKill
            | EventReason::SignalRestored
            | EventReason::Started
            | EventReason::Adopted
            | EventReason::PendingReadmitted
            | EventReason::PodCgroupGone
            | EventReason::ContainerGC
            | EventReason::ImageGC
            | EventReason::MemoryReclaimed
            | EventReason::Contention { present: false, .. }
            | EventReason::Exited { failed: false }
            | EventReason::BackOff { failed: false }
            | EventReason::ManifestDir { watched: true }
            | EventReason::WouldReclaim => EventType::Normal,
            EventReason::Evicted
            | EventReason::WouldEvict
            | EventReason::WouldKill
            | EventReason::PodListUnreadable
            | EventReason::DecisionRecordRepaired
            | EventReason::PreKillHookFailed
            | EventReason::PodCgroupMissing
            | EventReason::UnlistedPodCgroup
            | EventReason::Preempted
            | EventReason::EvictionFailed
            | EventReason::EvictionIneffective
            | EventReason::SignalUnavailable
            | EventReason::Failed
            | EventReason::FailedCreatePodSandBox
            | EventReason::FailedAdmission
            | EventReason::BadManifest
            | EventReason::FailedKill
            | EventReason::FailedKillPod
            | EventReason::RuntimeUnresponsive
            | EventReason::OomScoreAdj
            | EventReason::StateWrite
            | EventReason::StateQuarantined
            | EventReason::StateUnreadable
            | EventReason::CgroupCleanup
            | EventReason::UnmanagedPod
            | EventReason::OrphanPodKilled
            | EventReason::OrphanPodNotKilled
            | EventReason::FailedGC
            | EventReason::ImageRecordsUnreadable
            | EventReason::SourceFailed
            | EventReason::TaskFailed
            | EventReason::SynchronizeFailed
            | EventReason::Contention { present: true, .. }
            | EventReason::Exited { failed: true }
            | EventReason::BackOff { failed: true }
            | EventReason::ManifestDir { watched: false } => EventType::Warning,
        }
    }
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;

    #[rstest]
    #[case(EventReason::Evicted, "Evicted", EventType::Warning)]
    #[case(EventReason::Killing, "Killing", EventType::Normal)]
    #[case(
        EventReason::EvictionIneffective,
        "EvictionIneffective",
        EventType::Warning
    )]
    #[case(EventReason::BackOff { failed: false }, "BackOff", EventType::Normal)]
    #[case(EventReason::Exited { failed: true }, "Exited", EventType::Warning)]
    #[case(EventReason::ManifestDir { watched: true }, "ManifestDir", EventType::Normal)]
    #[case(EventReason::ManifestDir { watched: false }, "ManifestDir", EventType::Warning)]
    #[case(
        EventReason::Contention { condition: ContentionCondition::SystemMemory, present: true },
        "SystemMemoryContentionPressure",
        EventType::Warning
    )]
    #[case(
        EventReason::Contention { condition: ContentionCondition::KubepodsDisk, present: false },
        "KubepodsDiskContentionPressure",
        EventType::Normal
    )]
    fn reasons_are_spelled_and_typed(
        #[case] reason: EventReason,
        #[case] spelled: &str,
        #[case] kind: EventType,
    ) {
        assert_eq!(reason.as_str(), spelled);
        assert_eq!(reason.event_type(), kind);
    }
}
