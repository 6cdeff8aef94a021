//! The shared tail of every program: rate-limit per (cgroup, kind), then write one record.
use aya_ebpf::helpers::{bpf_get_current_cgroup_id, bpf_get_current_pid_tgid, bpf_ktime_get_ns};
use monitor_common::{
    DEFAULT_MARK_VICTIM_PID_OFFSET, DEFAULT_MIN_INTERVAL_NS, EventKind, KIND_COUNT, PressureEvent,
    RateKey, RateState,
};

use crate::maps::{LAST_EMIT, PRESSURE_COUNTERS, PRESSURE_EVENTS};

/// Minimum time between two records of the same (cgroup, kind); set by the agent at load.
#[unsafe(no_mangle)]
static MIN_INTERVAL_NS: u64 = DEFAULT_MIN_INTERVAL_NS;

/// Offset of `pid` in the `oom:mark_victim` record; set by the agent from tracefs.
#[unsafe(no_mangle)]
static MARK_VICTIM_PID_OFFSET: u32 = DEFAULT_MARK_VICTIM_PID_OFFSET;

pub fn mark_victim_pid_offset() -> usize {
    // SAFETY: a read of a plain global; volatile so the compiler keeps the load that the
    // loader's `set_global` rewrites instead of folding in the default.
    unsafe { core::ptr::read_volatile(&MARK_VICTIM_PID_OFFSET) as usize }
}

fn min_interval_ns() -> u64 {
    // SAFETY: as in `mark_victim_pid_offset`.
    unsafe { core::ptr::read_volatile(&MIN_INTERVAL_NS) }
}

pub fn count(index: u32) {
    if let Some(slot) = PRESSURE_COUNTERS.get_ptr_mut(index) {
        // SAFETY: a per-CPU slot: no other CPU writes it, and BPF programs do not nest on
        // one CPU for tracepoints of this kind.
        unsafe { *slot += 1 };
    }
}

/// Rate-limit, then reserve and submit one record. `pid` is the task the event concerns
/// (`None`: the current task).
#[inline(always)]
pub fn emit(kind: EventKind, pid: Option<u32>) -> u32 {
    // SAFETY: these helpers take no pointers and are allowed in tracepoint programs.
    let (now, cgroup_id, pid_tgid) = unsafe {
        (
            bpf_ktime_get_ns(),
            bpf_get_current_cgroup_id(),
            bpf_get_current_pid_tgid(),
        )
    };
    let key = RateKey {
        cgroup_id,
        kind: kind as u32,
        _pad: 0,
    };
    let mut suppressed = 0;
    if let Some(state) = LAST_EMIT.get_ptr_mut(&key) {
        // SAFETY: the pointer comes from a successful lookup; a racing update on another
        // CPU can at worst let one extra record through, which is harmless.
        let state = unsafe { &mut *state };
        if now.wrapping_sub(state.last_emit_ns) < min_interval_ns() {
            state.suppressed = state.suppressed.wrapping_add(1);
            count(2 * kind as u32 + 1);
            return 0;
        }
        suppressed = state.suppressed;
        state.last_emit_ns = now;
        state.suppressed = 0;
    } else {
        let _ = LAST_EMIT.insert(
            &key,
            &RateState {
                last_emit_ns: now,
                suppressed: 0,
                _pad: 0,
            },
            0,
        );
    }
    let record = PressureEvent {
        kind: kind as u32,
        pid: pid.unwrap_or((pid_tgid >> 32) as u32),
        timestamp_ns: now,
        cgroup_id,
        suppressed,
        level_flags: 0,
        usage_bytes: 0,
        level_bytes: 0,
    };
    match PRESSURE_EVENTS.output::<PressureEvent>(&record, 0) {
        Ok(()) => count(2 * kind as u32),
        Err(_) => count(2 * KIND_COUNT),
    }
    0
}
