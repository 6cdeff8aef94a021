//! `oom:mark_victim`: the OOM killer chose a victim. Runs in the context of the task that
//! ran the OOM killer, so the victim's pid is read from the trace record.
use aya_ebpf::{macros::tracepoint, programs::TracePointContext};
use monitor_common::EventKind;

use crate::emit::{emit, mark_victim_pid_offset};

#[tracepoint]
pub fn oom_victim(ctx: TracePointContext) -> u32 {
    try_oom_victim(&ctx)
}

fn try_oom_victim(ctx: &TracePointContext) -> u32 {
    // SAFETY: `read_at` copies with bpf_probe_read from the trace record; the offset comes
    // from the event's tracefs format (or the long-standing default of 8).
    let pid = unsafe { ctx.read_at::<i32>(mark_victim_pid_offset()) }.unwrap_or(0);
    emit(EventKind::OomVictim, Some(pid as u32))
}
