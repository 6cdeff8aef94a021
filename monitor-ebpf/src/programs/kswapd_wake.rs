//! `vmscan:mm_vmscan_wakeup_kswapd`: the allocator woke kswapd because a zone fell below its low watermark.
//! Runs in the allocating task's context, so the current pid and cgroup are the culprit's.
use aya_ebpf::{macros::tracepoint, programs::TracePointContext};
use monitor_common::{EventKind, LOG_TARGET_KSWAPD_WAKE};

use crate::emit::emit;

#[tracepoint]
pub fn kswapd_wake(ctx: TracePointContext) -> u32 {
    try_kswapd_wake(&ctx)
}

fn try_kswapd_wake(ctx: &TracePointContext) -> u32 {
    emit(ctx, LOG_TARGET_KSWAPD_WAKE, EventKind::KswapdWake, None)
}
