//! `vmscan:mm_vmscan_direct_reclaim_begin`: an allocation stalls in node-level direct reclaim.
//! Runs in the allocating task's context, so the current pid and cgroup are the culprit's.
use aya_ebpf::{macros::tracepoint, programs::TracePointContext};
use monitor_common::{EventKind, LOG_TARGET_DIRECT_RECLAIM};

use crate::emit::emit;

#[tracepoint]
pub fn direct_reclaim(ctx: TracePointContext) -> u32 {
    try_direct_reclaim(&ctx)
}

fn try_direct_reclaim(ctx: &TracePointContext) -> u32 {
    emit(
        ctx,
        LOG_TARGET_DIRECT_RECLAIM,
        EventKind::DirectReclaim,
        None,
    )
}
