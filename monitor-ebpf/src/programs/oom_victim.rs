//! `oom:mark_victim`: the OOM killer chose a victim. Runs in the context of the task that
//! ran the OOM killer, so the victim's pid is read from the trace record.
use aya_ebpf::{macros::tracepoint, programs::TracePointContext};
use monitor_common::{EventKind, LOG_TARGET_OOM_VICTIM};

use crate::emit::{emit, mark_victim_pid_offset, record_read_failed};

#[tracepoint]
pub fn oom_victim(ctx: TracePointContext) -> u32 {
    try_oom_victim(&ctx)
}

fn try_oom_victim(ctx: &TracePointContext) -> u32 {
    // SAFETY: `read_at` copies with bpf_probe_read from the trace record; the offset comes
    // from the event's tracefs format (or the long-standing default of 8).
    let pid = match unsafe { ctx.read_at::<i32>(mark_victim_pid_offset()) } {
        Ok(pid) => pid,
        Err(_) => {
            record_read_failed(ctx, LOG_TARGET_OOM_VICTIM);
            // Still a wake: the OOM killer ran, whoever it chose.
            0
        }
    };
    emit(
        ctx,
        LOG_TARGET_OOM_VICTIM,
        EventKind::OomVictim,
        Some(pid as u32),
    )
}
