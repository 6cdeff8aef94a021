//! Records and constants shared by the kernel-side programs (`monitor-ebpf`) and the
//! agent (`monitor`). Everything here is `#[repr(C)]` and `Copy` so both sides agree on
//! the byte layout of what crosses the BPF ring buffer.
#![no_std]

/// Name of the BPF ring buffer every program writes its [`PressureEvent`]s into.
pub const EVENTS_MAP: &str = "PRESSURE_EVENTS";
/// Name of the per-CPU array that counts events per [`EventKind`]: index `2 * kind` holds
/// events emitted, `2 * kind + 1` events suppressed by the in-kernel rate limit, and
/// index `2 * KIND_COUNT` ring-buffer reservations that failed because it was full.
pub const COUNTERS_MAP: &str = "PRESSURE_COUNTERS";
/// Name of the LRU hash map that remembers when each (cgroup, kind) last emitted.
pub const LAST_EMIT_MAP: &str = "LAST_EMIT";
/// Size of the ring buffer in bytes (a power of two, a multiple of the page size).
/// 256 KiB holds 8192 records: far more than the rate limit lets through between wakes.
pub const EVENTS_RING_BYTES: u32 = 256 * 1024;
/// How many (cgroup, kind) pairs the rate limiter tracks before evicting the oldest.
pub const LAST_EMIT_ENTRIES: u32 = 4096;
/// Globals the agent may set when it loads the object (`EbpfLoader::set_global`).
pub const GLOBAL_MIN_INTERVAL_NS: &str = "MIN_INTERVAL_NS";
pub const GLOBAL_MARK_VICTIM_PID_OFFSET: &str = "MARK_VICTIM_PID_OFFSET";
/// Default in-kernel rate limit: one record per (cgroup, kind) per millisecond. A reclaim
/// storm fires these tracepoints tens of thousands of times a second; the agent only
/// needs to be woken, and a synchronize takes about a millisecond anyway.
pub const DEFAULT_MIN_INTERVAL_NS: u64 = 1_000_000;
/// Offset of `pid` in the `oom:mark_victim` trace record on the kernels we know (the
/// 8-byte common header comes first). The agent reads the real offset from tracefs.
pub const DEFAULT_MARK_VICTIM_PID_OFFSET: u32 = 8;

/// The memory-pressure events the kernel-side programs report.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// `vmscan:mm_vmscan_memcg_reclaim_begin`: a cgroup hit its limit (or high) and reclaims.
    MemcgReclaim = 0,
    /// `vmscan:mm_vmscan_direct_reclaim_begin`: an allocation stalls in direct reclaim.
    DirectReclaim = 1,
    /// `vmscan:mm_vmscan_wakeup_kswapd`: the allocator woke kswapd (a zone fell below its
    /// low watermark): the earliest node-level sign of pressure.
    KswapdWake = 2,
    /// `oom:mark_victim`: the OOM killer chose a victim (we were too late, or a limit
    /// was hit with nothing to reclaim).
    OomVictim = 3,
}

/// Number of [`EventKind`] variants.
pub const KIND_COUNT: u32 = 4;

impl EventKind {
    pub const ALL: [EventKind; KIND_COUNT as usize] = [
        EventKind::MemcgReclaim,
        EventKind::DirectReclaim,
        EventKind::KswapdWake,
        EventKind::OomVictim,
    ];

    pub fn from_u32(raw: u32) -> Option<Self> {
        match raw {
            0 => Some(Self::MemcgReclaim),
            1 => Some(Self::DirectReclaim),
            2 => Some(Self::KswapdWake),
            3 => Some(Self::OomVictim),
            _ => None,
        }
    }

    /// Stable lower-case name used in logs and metrics.
    pub fn name(self) -> &'static str {
        match self {
            Self::MemcgReclaim => "memcg_reclaim",
            Self::DirectReclaim => "direct_reclaim",
            Self::KswapdWake => "kswapd_wake",
            Self::OomVictim => "oom_victim",
        }
    }
}

/// One record in the ring buffer.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PressureEvent {
    /// An [`EventKind`] as `u32`.
    pub kind: u32,
    /// Thread-group id (the process id userspace knows) of the task the event concerns:
    /// the allocating task for reclaim events, the victim for `OomVictim`.
    pub pid: u32,
    /// `bpf_ktime_get_ns()`: CLOCK_MONOTONIC nanoseconds, comparable with userspace
    /// `clock_gettime(CLOCK_MONOTONIC)`.
    pub timestamp_ns: u64,
    /// `bpf_get_current_cgroup_id()`: the cgroup v2 id (the inode number of the cgroup's
    /// directory in the unified hierarchy) of the current task.
    pub cgroup_id: u64,
    /// How many events of this (cgroup, kind) the rate limit suppressed before this one.
    pub suppressed: u32,
    pub _pad: u32,
}

/// Size of a [`PressureEvent`] in bytes.
pub const PRESSURE_EVENT_SIZE: usize = core::mem::size_of::<PressureEvent>();

/// Key of the rate limiter's map.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateKey {
    pub cgroup_id: u64,
    pub kind: u32,
    pub _pad: u32,
}

/// Value of the rate limiter's map.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateState {
    pub last_emit_ns: u64,
    pub suppressed: u32,
    pub _pad: u32,
}

#[cfg(feature = "user")]
mod user {
    // SAFETY: plain-old-data records: `#[repr(C)]`, only integer fields, explicit padding.
    unsafe impl aya::Pod for super::PressureEvent {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::RateKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::RateState {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_layout_has_no_hidden_padding() {
        assert_eq!(PRESSURE_EVENT_SIZE, 32);
        assert_eq!(core::mem::size_of::<RateKey>(), 16);
        assert_eq!(core::mem::size_of::<RateState>(), 16);
    }

    #[test]
    fn kinds_round_trip() {
        for kind in EventKind::ALL {
            assert_eq!(EventKind::from_u32(kind as u32), Some(kind));
        }
        assert_eq!(EventKind::from_u32(KIND_COUNT), None);
    }
}
