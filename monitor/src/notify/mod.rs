//! Event sources. Each runs as its own task and only WAKES the synchronize loop
//! ([`crate::sync`]) through one bounded channel; no source carries decisions or stats
//! (the loop observes afresh). The sources whose records can fire the hot path (eBPF,
//! memcg thresholds, memory.events) are read on real-time threads of their own
//! ([`realtime`]), never on an async worker.
//!
//! | source | kernel interface | min kernel |
//! |---|---|---|
//! | [`ebpf`] | crossing detector (fexit or tp_btf on the memcg charge path, [`detector`]) and tracepoints vmscan/oom → BPF ring buffer | 5.8 (detector: 5.5 + BTF) |
//! | [`memcg`] | cgroup v1 `cgroup.event_control` + eventfd on `memory.usage_in_bytes` | 2.6.34 (v1 only) |
//! | [`memory_events`] | inotify `IN_MODIFY` on cgroup v2 `memory.events` | 4.5 (v2 only) |
//! | [`psi`] | PSI triggers, `POLLPRI` on `memory.pressure` files | 5.2 (cgroup files: v2) |
//! | [`timer`] | the housekeeping interval (fallback) | — |
use std::fmt;
use std::path::PathBuf;

use monitor_common::{EventKind, PressureEvent};
use tokio::sync::mpsc;

pub mod arming;
pub mod detector;
pub mod ebpf;
pub(crate) mod ebpf_log;
pub mod memcg;
pub(crate) mod memory_events;
pub(crate) mod psi;
pub(crate) mod realtime;
pub(crate) mod timer;

/// Which source woke the manager.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WakeSource {
    Ebpf,
    MemcgThreshold,
    MemoryEvents,
    Psi,
    Timer,
    /// The loop's own first synchronize at startup, and explicit requests (API, tests).
    Request,
    /// A soft threshold's grace period ends now: the loop woke itself for it.
    Deadline,
    /// An eviction finished: decide again at once, on fresh stats.
    Eviction,
}

impl WakeSource {
    pub(crate) const ALL: [WakeSource; 8] = [
        WakeSource::Ebpf,
        WakeSource::MemcgThreshold,
        WakeSource::MemoryEvents,
        WakeSource::Psi,
        WakeSource::Timer,
        WakeSource::Request,
        WakeSource::Deadline,
        WakeSource::Eviction,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            WakeSource::Ebpf => "ebpf",
            WakeSource::MemcgThreshold => "memcg_threshold",
            WakeSource::MemoryEvents => "memory_events",
            WakeSource::Psi => "psi",
            WakeSource::Timer => "timer",
            WakeSource::Request => "request",
            WakeSource::Deadline => "deadline",
            WakeSource::Eviction => "eviction",
        }
    }
}

impl fmt::Display for WakeSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a source knows about why it woke us (for logs, metrics and tests only).
#[derive(Clone, Debug, PartialEq)]
pub enum WakeDetail {
    None,
    /// A record from the eBPF ring buffer, with the memory cgroup of its task (from
    /// /proc/PID/cgroup when the event arrived; `None` when the task was gone).
    Kernel {
        event: PressureEvent,
        memcg: Option<String>,
    },
    /// A memcg v1 threshold fired.
    Threshold {
        cgroup: PathBuf,
        threshold_bytes: u64,
    },
    /// A watched memory.events file changed.
    MemoryEvents {
        file: PathBuf,
    },
    /// A PSI trigger fired.
    Psi {
        file: PathBuf,
    },
}

impl WakeDetail {
    /// The eBPF event kind, when this wake is a kernel record.
    pub fn kernel_kind(&self) -> Option<EventKind> {
        match self {
            WakeDetail::Kernel { event, .. } => EventKind::from_u32(event.kind),
            _ => None,
        }
    }
}

/// Told by a source the moment it sees a hard memory threshold's notifier fire, before
/// its wake is queued, so a kill can follow without waiting for a synchronize (the hot
/// path, [`crate::sync::hot`]). The hook confirms the crossing itself: a notifier also
/// fires on the way down (memcg v1) or for other counters (memory.events).
pub trait CrossingHook: Send + Sync {
    fn hard_crossing(&self, source: WakeSource);

    /// An early notifier, armed `margin` bytes below a hard level, fired: the hook may
    /// watch for the crossing itself for a short while. Whether it killed.
    /// `level` names the early notifier (rests are kept per notifier).
    fn early_crossing(&self, _source: WakeSource, _margin: u64, _level: u64) -> bool {
        false
    }
}

/// The hook a source calls, when the hot path runs.
pub(crate) type Hook = Option<std::sync::Arc<dyn CrossingHook>>;

/// One wake-up.
#[derive(Clone, Debug, PartialEq)]
pub struct Wake {
    pub source: WakeSource,
    /// When userspace received it (CLOCK_MONOTONIC ns).
    pub received_ns: u64,
    pub detail: WakeDetail,
}

/// Capacity of the wake channel. A full channel already holds a pending wake, so a
/// source that finds it full drops its wake: the loop will synchronize anyway.
pub(crate) const WAKE_CHANNEL_CAPACITY: usize = 1024;

/// The sending half every source holds.
#[derive(Clone, Debug)]
pub struct WakeSender {
    tx: mpsc::Sender<Wake>,
}

impl WakeSender {
    pub(crate) fn wake(&self, source: WakeSource, detail: WakeDetail) {
        let wake = Wake {
            source,
            received_ns: crate::clock::monotonic_ns(),
            detail,
        };
        // Full: a synchronize is already due. Closed: the agent is shutting down.
        let _ = self.tx.try_send(wake);
    }
}

/// Creates the one wake channel.
pub fn wake_channel() -> (WakeSender, mpsc::Receiver<Wake>) {
    let (tx, rx) = mpsc::channel(WAKE_CHANNEL_CAPACITY);
    (WakeSender { tx }, rx)
}

/// Whether a source started, and if not, why. Reported once at startup.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct SourceStatus {
    pub(crate) source: WakeSource,
    pub state: SourceState,
    /// What it watches, or why it did not start.
    pub detail: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SourceState {
    Running,
    Disabled,
    Failed,
    /// The kernel or cgroup version has no such interface.
    Unsupported,
}

impl SourceStatus {
    pub fn running(source: WakeSource, detail: impl Into<String>) -> Self {
        SourceStatus {
            source,
            state: SourceState::Running,
            detail: detail.into(),
        }
    }
    pub(crate) fn disabled(source: WakeSource) -> Self {
        SourceStatus {
            source,
            state: SourceState::Disabled,
            detail: "switched off by configuration".into(),
        }
    }
    /// Off, for a reason other than the configuration.
    pub(crate) fn disabled_because(source: WakeSource, why: impl Into<String>) -> Self {
        SourceStatus {
            source,
            state: SourceState::Disabled,
            detail: why.into(),
        }
    }
    pub(crate) fn failed(source: WakeSource, why: impl fmt::Display) -> Self {
        SourceStatus {
            source,
            state: SourceState::Failed,
            detail: why.to_string(),
        }
    }
    pub fn unsupported(source: WakeSource, why: impl Into<String>) -> Self {
        SourceStatus {
            source,
            state: SourceState::Unsupported,
            detail: why.into(),
        }
    }

    /// Logs the status once, at a level that matches it.
    pub(crate) fn log(&self) {
        match self.state {
            SourceState::Running => {
                tracing::info!(source = %self.source, "event source started: {}", self.detail)
            }
            SourceState::Disabled => {
                tracing::info!(source = %self.source, "event source disabled: {}", self.detail)
            }
            SourceState::Unsupported => {
                tracing::warn!(source = %self.source, "event source not available here: {}", self.detail)
            }
            SourceState::Failed => {
                tracing::warn!(source = %self.source, "event source failed to start: {}", self.detail)
            }
        }
    }
}

/// Locks a map a source shares with its thread; a panic elsewhere leaves it usable.
pub(crate) fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Registers an owned descriptor with tokio's reactor.
pub(crate) fn async_fd<T: std::os::fd::AsRawFd>(
    inner: T,
    interest: tokio::io::Interest,
) -> std::io::Result<tokio::io::unix::AsyncFd<T>> {
    // SAFETY: every caller hands over an owning wrapper (File, EventFd, RingBuf) whose
    // descriptor stays open and unchanged until the wrapper, now owned by the AsyncFd, drops.
    unsafe { tokio::io::unix::AsyncFd::register_with_interest(inner, interest) }
        .map_err(|e| e.into_parts().1)
}
