//! `vmscan:mm_vmscan_memcg_reclaim_begin`: a cgroup reached its limit (or memory.high) and the allocating task reclaims from it.
//! Runs in the allocating task's context, so the current pid and cgroup are the culprit's.
use aya_ebpf::{macros::tracepoint, programs::TracePointContext};
use monitor_common::{EventKind, LOG_TARGET_MEMCG_RECLAIM};

use crate::emit::{count, current_concerns_pods, emit};

#[tracepoint]
pub fn memcg_reclaim(ctx: TracePointContext) -> u32 {
    try_memcg_reclaim(&ctx)
}

fn try_memcg_reclaim(ctx: &TracePointContext) -> u32 {
    // A cgroup outside the pods reclaiming at its own limit is no pressure the agent
    // acts on: counted as suppressed, never sent.
    if !current_concerns_pods() {
        count(2 * EventKind::MemcgReclaim as u32 + 1);
        return 0;
    }
    emit(ctx, LOG_TARGET_MEMCG_RECLAIM, EventKind::MemcgReclaim, None)
}
