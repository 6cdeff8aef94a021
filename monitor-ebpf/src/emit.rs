//! The shared tail of every program: rate-limit per (cgroup, kind), then write one record.
//! Failures are counted per CPU and logged (aya-log) only at the first and then every
//! [`LOG_EVERY`]th on a CPU: a tracepoint can fail at its own rate, the log must not.
use aya_ebpf::helpers::{
    bpf_get_current_ancestor_cgroup_id, bpf_get_current_cgroup_id, bpf_get_current_pid_tgid,
    bpf_ktime_get_ns,
};
use aya_log_ebpf::{error, warn};
use monitor_common::{
    COUNTER_RATE_MAP_FAILED, COUNTER_READ_FAILED, COUNTER_RING_FULL,
    DEFAULT_MARK_VICTIM_PID_OFFSET, DEFAULT_MIN_INTERVAL_NS, EventKind, LOG_EVERY, PODS_PATH_MAX,
    PodsPath, PressureEvent, RateKey, RateState,
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

/// The pods cgroup's path in the cgroup v2 hierarchy; set by the agent at load (all zero:
/// no filter).
#[unsafe(no_mangle)]
static PODS_PATH: PodsPath = PodsPath {
    ids: [0; PODS_PATH_MAX],
    level: 0,
    _pad: 0,
};

/// Whether the current task concerns the pods (see [`PodsPath`]).
#[inline(always)]
pub fn current_concerns_pods() -> bool {
    // SAFETY: as in `mark_victim_pid_offset`.
    let path = unsafe { core::ptr::read_volatile(&PODS_PATH) };
    if path.level == 0 {
        return true;
    }
    // SAFETY: these helpers take no pointers and are allowed in tracepoint programs
    // (the ancestor one since Linux 5.10; it returns 0 above the task's own level).
    let (cgroup_id, ancestor) = unsafe {
        (
            bpf_get_current_cgroup_id(),
            bpf_get_current_ancestor_cgroup_id(path.level as i32),
        )
    };
    path.concerns_pods(cgroup_id, ancestor)
}

fn min_interval_ns() -> u64 {
    // SAFETY: as in `mark_victim_pid_offset`.
    unsafe { core::ptr::read_volatile(&MIN_INTERVAL_NS) }
}

/// Adds one to this CPU's counter `index` and returns its new value (0: no such slot).
#[inline(always)]
pub fn count(index: u32) -> u64 {
    match PRESSURE_COUNTERS.get_ptr_mut(index) {
        // SAFETY: a per-CPU slot: no other CPU writes it, and BPF programs do not nest on
        // one CPU for tracepoints of this kind.
        Some(slot) => unsafe {
            *slot += 1;
            *slot
        },
        None => 0,
    }
}

/// Whether the `n`th failure of a kind on this CPU gets a log record.
#[inline(always)]
pub fn worth_logging(n: u64) -> bool {
    n == 1 || n % LOG_EVERY == 0
}

/// Counts a ring-buffer reservation that failed; the count when it is worth a log
/// record, else 0.
#[inline(always)]
pub fn dropped() -> u64 {
    let n = count(COUNTER_RING_FULL);
    if worth_logging(n) { n } else { 0 }
}

/// A read of the trace record that failed: counted, and logged when worth it. The
/// offsets come from the event's tracefs format, so this means a format we misread.
#[inline(always)]
pub fn record_read_failed<C>(ctx: &C, log_target: &'static str) {
    let n = count(COUNTER_READ_FAILED);
    if worth_logging(n) {
        error!(
            ctx,
            target: log_target,
            "reading the trace record failed ({} so far on this CPU): field offset from tracefs wrong?",
            n
        );
    }
}

/// Rate-limit, then reserve and submit one record. `pid` is the task the event concerns
/// (`None`: the current task); `log_target` names the program in its log records.
#[inline(always)]
pub fn emit<C>(ctx: &C, log_target: &'static str, kind: EventKind, pid: Option<u32>) -> u32 {
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
    } else if LAST_EMIT
        .insert(
            &key,
            &RateState {
                last_emit_ns: now,
                suppressed: 0,
                _pad: 0,
            },
            0,
        )
        .is_err()
    {
        let n = count(COUNTER_RATE_MAP_FAILED);
        if worth_logging(n) {
            warn!(
                ctx,
                target: log_target,
                "rate limiter map LAST_EMIT refused an insert ({} so far on this CPU): this cgroup's records go unlimited",
                n
            );
        }
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
    if PRESSURE_EVENTS.output::<PressureEvent>(&record, 0).is_ok() {
        count(2 * kind as u32);
    } else {
        let n = dropped();
        if n != 0 {
            warn!(
                ctx,
                target: log_target,
                "ring buffer PRESSURE_EVENTS full, record dropped ({} so far on this CPU): the agent reads it too slowly",
                n
            );
        }
    }
    0
}
