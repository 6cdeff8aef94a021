//! `vmscan:mm_vmscan_memcg_reclaim_begin`: a cgroup reached its limit (or memory.high) and the allocating task reclaims from it.
//! Runs in the allocating task's context, so the current pid and cgroup are the culprit's.
use aya_ebpf::{macros::tracepoint, programs::TracePointContext};
use monitor_common::{EventKind, LOG_TARGET_MEMCG_RECLAIM};

use crate::emit::emit;

#[tracepoint]
pub fn memcg_reclaim(ctx: TracePointContext) -> u32 {
    try_memcg_reclaim(&ctx)
}

fn try_memcg_reclaim(ctx: &TracePointContext) -> u32 {
    emit(ctx, LOG_TARGET_MEMCG_RECLAIM, EventKind::MemcgReclaim, None)
}
