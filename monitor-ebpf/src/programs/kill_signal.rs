//! `signal:signal_generate`: the agent's own process sent SIGKILL. This is the kernel's
//! stamp of a kill (the hot path's `cgroup.kill` write signals every task of the pod from
//! the writing thread), so a kill's latency can be measured at the signal itself. Other
//! processes' signals are dropped after two loads; one record per millisecond at most
//! (the shared rate limit: a pod's first task carries the stamp).
use aya_ebpf::{
    helpers::bpf_get_current_pid_tgid, macros::tracepoint, programs::TracePointContext,
};
use monitor_common::{
    DEFAULT_SIGNAL_PID_OFFSET, DEFAULT_SIGNAL_SIG_OFFSET, EventKind, LOG_TARGET_KILL_SIGNAL,
};

use crate::emit::{emit, record_read_failed};

/// Offsets in the trace record and the agent's process id; set by the agent at load.
#[unsafe(no_mangle)]
static SIGNAL_SIG_OFFSET: u32 = DEFAULT_SIGNAL_SIG_OFFSET;
#[unsafe(no_mangle)]
static SIGNAL_PID_OFFSET: u32 = DEFAULT_SIGNAL_PID_OFFSET;
#[unsafe(no_mangle)]
static AGENT_TGID: u32 = 0;

const SIGKILL: i32 = 9;

#[tracepoint]
pub fn kill_signal(ctx: TracePointContext) -> u32 {
    try_kill_signal(&ctx)
}

fn try_kill_signal(ctx: &TracePointContext) -> u32 {
    // SAFETY: reads of plain globals, volatile so the loader's values are used.
    let (sig_offset, pid_offset, agent) = unsafe {
        (
            core::ptr::read_volatile(&SIGNAL_SIG_OFFSET),
            core::ptr::read_volatile(&SIGNAL_PID_OFFSET),
            core::ptr::read_volatile(&AGENT_TGID),
        )
    };
    let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
    if agent == 0 || tgid != agent {
        return 0;
    }
    // SAFETY: `read_at` copies with bpf_probe_read from the trace record, at offsets from
    // the event's tracefs format.
    let read = unsafe {
        (
            ctx.read_at::<i32>(sig_offset as usize),
            ctx.read_at::<i32>(pid_offset as usize),
        )
    };
    let (Ok(sig), Ok(pid)) = read else {
        record_read_failed(ctx, LOG_TARGET_KILL_SIGNAL);
        return 0;
    };
    if sig != SIGKILL {
        return 0;
    }
    emit(
        ctx,
        LOG_TARGET_KILL_SIGNAL,
        EventKind::KillSignal,
        Some(pid as u32),
    )
}
