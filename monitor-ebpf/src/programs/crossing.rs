//! The crossing detector: on the memory charge path, compare the charged memory cgroup's
//! usage, and its ancestors', with the levels the agent armed in `CROSSING_LEVELS`, and
//! write one record when an armed level is reached.
//!
//! Three attach points, one check; the agent loads the first the kernel allows:
//! - `fexit/page_counter_try_charge`: after a page counter was charged. A memory cgroup
//!   charges its `memory` counter (and its ancestors') only when the charging CPU's
//!   stock of pre-charged pages runs out, a batch of 64 pages at a time, so this runs
//!   about once per 64 pages charged and every call is looked at: usage moves only
//!   there. The other page counters (swap, v1 kmem and tcp, hugetlb) are told apart by
//!   `cgroup->subsys[memory_cgrp_id]`, which points back at the memory cgroup only for
//!   its own `memory` counter. Needs BPF trampolines (ftrace direct calls).
//! - `fexit/try_charge_memcg`: after every charge (a page or a folio), with the
//!   `struct mem_cgroup *` charged; sampled. Needs BPF trampolines.
//! - `tp_btf/mod_memcg_lruvec_state` (kernels with the memcg tracepoints): fires about
//!   five times per page charged or uncharged; only the hits that add are counted.
//!
//! The page counters move in steps of the per-CPU charge batch (64 pages), so looking at
//! every hit buys nothing: each program adds up, per CPU, the pages its hits move and
//! looks once they reach `SAMPLE_EVERY_*` (16 pages charged, or 64 page-count units of
//! the tracepoint, about 13 pages), which keeps the walk's cost off most hits. The walk
//! itself goes straight to the ancestors at the depths the agent armed levels at (a few
//! kernel reads and a map lookup each), where it would otherwise look up every ancestor
//! up to the root. A crossing is then seen a few pages late
//! at most, and a huge page is looked at at once.
//!
//! A level flagged `LEVEL_EARLY` (a little below a hard one: the agent's head start)
//! re-arms itself once usage falls below its `rearm_below_bytes`, so it tells every rise
//! through it; the other levels fire once per arming.
//!
//! Kernel structures are read with `bpf_probe_read_kernel` at offsets the agent took
//! from the running kernel's BTF (`MEMCG_LAYOUT`); a zero layout disables the check.
//! A failed read or a full ring buffer is logged once the walk is over (never inside
//! its loop, which would copy the logging code into every unrolled step), paced by
//! the per-CPU failure counters.
use aya_ebpf::{
    helpers::{bpf_get_smp_processor_id, bpf_ktime_get_ns, bpf_probe_read_kernel},
    macros::{btf_tracepoint, fexit},
    programs::{BtfTracePointContext, FExitContext},
};
use aya_log_ebpf::{error, warn};
use monitor_common::{
    ARMED_DEPTHS_MAX, COUNTER_READ_FAILED, DEFAULT_SAMPLE_EVERY_CHARGE,
    DEFAULT_SAMPLE_EVERY_LRUVEC, DEPTH_LIMIT, EventKind, LEVEL_ARMED, LEVEL_EARLY, LEVEL_FIRED,
    LEVEL_WAIT_BELOW, LEVELS_PER_CGROUP, LOG_TARGET_CROSSING_CHARGE, LOG_TARGET_CROSSING_COUNTER,
    LOG_TARGET_CROSSING_LRUVEC, MAX_CGROUP_DEPTH, MemcgLayout, PressureEvent,
};

use crate::emit::{count, dropped, worth_logging};
use crate::maps::{ARMED_DEPTHS, CROSSING_LEVELS, PRESSURE_EVENTS};

/// Offsets from the kernel's BTF; set by the agent at load.
#[unsafe(no_mangle)]
static MEMCG_LAYOUT: MemcgLayout = MemcgLayout {
    memcg_css_cgroup: 0,
    memcg_memory: 0,
    counter_usage: 0,
    counter_parent: 0,
    cgroup_kn: 0,
    kn_id: 0,
    page_shift: 12,
    cgroup_memory_css: 0,
    cgroup_level: 0,
    cgroup_ancestors: 0,
};

/// One charge in this many per CPU is looked at by `crossing_charge`; set at load.
#[unsafe(no_mangle)]
static SAMPLE_EVERY_CHARGE: u32 = DEFAULT_SAMPLE_EVERY_CHARGE;

/// One hit in this many per CPU is looked at by `crossing_lruvec`; set at load.
#[unsafe(no_mangle)]
static SAMPLE_EVERY_LRUVEC: u32 = DEFAULT_SAMPLE_EVERY_LRUVEC;

#[fexit(function = "page_counter_try_charge")]
pub fn crossing_counter(ctx: FExitContext) -> i32 {
    // page_counter_try_charge(counter, nr_pages, fail) -> bool, the return value after
    // the three arguments. Only a charge that succeeded moved the counters; a bool
    // leaves the register's upper bytes undefined, so only the low one is read.
    let charged: u64 = ctx.arg(3);
    if charged as u8 == 0 {
        return 0;
    }
    // SAFETY: a read of a plain global, volatile so the loader's value is used.
    let layout = unsafe { core::ptr::read_volatile(&MEMCG_LAYOUT) };
    if layout.cgroup_memory_css == 0 {
        return 0;
    }
    let counter: *const u8 = ctx.arg(0);
    // container_of, if this is a memory cgroup's `memory` counter.
    let memcg = counter.wrapping_sub(layout.memcg_memory as usize);
    if is_memory_counter(memcg, &layout) {
        check(&ctx, LOG_TARGET_CROSSING_COUNTER, memcg);
    }
    0
}

/// Whether `memcg` (a page counter less the `memory` field's offset) is a memory cgroup:
/// its css's cgroup has it as its memory css. For another page counter the first read
/// lands on some other field, and its value is not a cgroup pointing back here (a failed
/// read is part of that answer, not an error).
#[inline(always)]
fn is_memory_counter(memcg: *const u8, layout: &MemcgLayout) -> bool {
    let Some(cgroup) = read::<*const u8>(memcg, layout.memcg_css_cgroup) else {
        return false;
    };
    read::<*const u8>(cgroup, layout.cgroup_memory_css) == Some(memcg)
}

#[fexit(function = "try_charge_memcg")]
pub fn crossing_charge(ctx: FExitContext) -> i32 {
    // try_charge_memcg(memcg, gfp_mask, nr_pages): weigh the charge by its pages, so a
    // huge page (512) is always looked at.
    let pages: u64 = ctx.arg(2);
    // SAFETY: a read of a plain global, volatile so the loader's value is used.
    if sampled(0, pages as u32, unsafe {
        core::ptr::read_volatile(&SAMPLE_EVERY_CHARGE)
    }) {
        let memcg: *const u8 = ctx.arg(0);
        check(&ctx, LOG_TARGET_CROSSING_CHARGE, memcg);
    }
    0
}

#[btf_tracepoint(function = "mod_memcg_lruvec_state")]
pub fn crossing_lruvec(ctx: BtfTracePointContext) -> i32 {
    // (memcg, item, val): weigh the hit by how much the counter moved, in pages for the
    // page counts (a huge page moves NR_ANON_THPS and the LRU sizes by 512). A counter
    // going down is memory being freed or moved, never a crossing: those hits (a killed
    // victim's teardown makes about five per page) are not counted and walk nothing.
    let val: u64 = ctx.arg(2);
    let val = val as i32;
    if val <= 0 {
        return 0;
    }
    let weight = val.unsigned_abs();
    // SAFETY: as above.
    if sampled(1, weight, unsafe {
        core::ptr::read_volatile(&SAMPLE_EVERY_LRUVEC)
    }) {
        let memcg: *const u8 = ctx.arg(0);
        check(&ctx, LOG_TARGET_CROSSING_LRUVEC, memcg);
    }
    0
}

/// CPUs with a hit counter of their own; more share them (a shared counter only loses
/// counts, which moves a sample by a hit or two).
const SAMPLE_CPUS: usize = 256;

/// Weight counters, one 64-byte line per CPU so that CPUs do not bounce a cache line: a
/// global (no map lookup on the path every hit takes) instead of a per-CPU map.
#[unsafe(no_mangle)]
static mut SAMPLE_HITS: [[u32; 16]; SAMPLE_CPUS] = [[0; 16]; SAMPLE_CPUS];

/// Adds `weight` (at least 1) to this CPU's counter in `slot` (0 or 1); true, and the
/// counter starts again, once it reaches `every`: a look at least every `every` units,
/// and at every hit that alone weighs as much.
#[inline(always)]
fn sampled(slot: usize, weight: u32, every: u32) -> bool {
    // SAFETY: takes no arguments.
    let cpu = unsafe { bpf_get_smp_processor_id() } as usize & (SAMPLE_CPUS - 1);
    // SAFETY: the index is masked into the array; programs of one attach point do not
    // nest on a CPU, and a racing CPU sharing the line can only lose a count.
    unsafe {
        let counter = &mut (*core::ptr::addr_of_mut!(SAMPLE_HITS))[cpu][slot & 15];
        let total = counter.saturating_add(weight.max(1));
        if total >= every {
            *counter = 0;
            true
        } else {
            *counter = total;
            false
        }
    }
}

/// Reads a `T` at `base + offset` in kernel memory.
#[inline(always)]
fn read<T>(base: *const u8, offset: u32) -> Option<T> {
    // SAFETY: bpf_probe_read_kernel checks the address: a bad one returns an error.
    unsafe { bpf_probe_read_kernel(base.wrapping_add(offset as usize).cast::<T>()) }.ok()
}

#[inline(always)]
fn check<C>(ctx: &C, log_target: &'static str, memcg: *const u8) {
    // SAFETY: a read of a plain global, volatile so the loader's value is used.
    let layout = unsafe { core::ptr::read_volatile(&MEMCG_LAYOUT) };
    if layout.kn_id == 0 {
        return;
    }
    let mut drops = 0;
    if walk(memcg, &layout, &mut drops).is_none() {
        let n = count(COUNTER_READ_FAILED);
        if worth_logging(n) {
            error!(
                ctx,
                target: log_target,
                "reading a memory cgroup failed ({} so far on this CPU): struct offsets from BTF wrong?",
                n
            );
        }
    }
    if drops != 0 {
        warn!(
            ctx,
            target: log_target,
            "ring buffer PRESSURE_EVENTS full, crossing record dropped ({} so far on this CPU): the agent reads it too slowly",
            drops
        );
    }
}

/// Looks at `memcg` and its ancestors; `None` when a read failed. `drops` is set to the
/// drop count when a record was dropped and that count is worth a log record.
///
/// With the armed depths known (see `monitor_common::ArmedDepths`), only the ancestors at
/// those depths are looked at, reached through `cgroup->ancestors[]`; else every
/// ancestor up to the root, through the page counters' parent pointers.
#[inline(always)]
fn walk(memcg: *const u8, layout: &MemcgLayout, drops: &mut u64) -> Option<()> {
    if layout.cgroup_level != 0
        && layout.cgroup_ancestors != 0
        && layout.cgroup_memory_css != 0
        && let Some(depths) = ARMED_DEPTHS.get(0)
        && depths.count != 0
    {
        return look_at_depths(memcg, layout, depths, drops);
    }
    let mut memcg = memcg;
    for _ in 0..MAX_CGROUP_DEPTH {
        if memcg.is_null() {
            return Some(());
        }
        look(memcg, cgroup_id(memcg, layout)?, layout, drops)?;
        let counter = memcg.wrapping_add(layout.memcg_memory as usize);
        let parent = read::<*const u8>(counter, layout.counter_parent)?;
        if parent.is_null() {
            return Some(());
        }
        // container_of: the parent counter is the `memory` counter of the parent memcg.
        memcg = parent.wrapping_sub(layout.memcg_memory as usize);
    }
    Some(())
}

/// Looks at the ancestors of `memcg` (itself included) at the armed depths.
#[inline(always)]
fn look_at_depths(
    memcg: *const u8,
    layout: &MemcgLayout,
    depths: &monitor_common::ArmedDepths,
    drops: &mut u64,
) -> Option<()> {
    let cgroup = read::<*const u8>(memcg, layout.memcg_css_cgroup)?;
    let level = read::<i32>(cgroup, layout.cgroup_level)?;
    for index in 0..ARMED_DEPTHS_MAX {
        if index as u32 >= depths.count {
            break;
        }
        let depth = depths.depths[index];
        // `ancestors[]` holds `level + 1` entries, the root first.
        if depth >= DEPTH_LIMIT || depth as i64 > level as i64 {
            continue;
        }
        let slot = layout.cgroup_ancestors as usize + depth as usize * 8;
        let ancestor = read::<*const u8>(cgroup, slot as u32)?;
        // Its memory css, which is its `struct mem_cgroup`.
        let ancestor_memcg = read::<*const u8>(ancestor, layout.cgroup_memory_css)?;
        if !ancestor_memcg.is_null() {
            let kn = read::<*const u8>(ancestor, layout.cgroup_kn)?;
            let id = read::<u64>(kn, layout.kn_id)?;
            look(ancestor_memcg, id, layout, drops)?;
        }
    }
    Some(())
}

/// Compares `memcg`'s usage with the levels armed on it (its cgroup's id is `id`), if
/// any, and fires those reached.
#[inline(always)]
fn look(memcg: *const u8, id: u64, layout: &MemcgLayout, drops: &mut u64) -> Option<()> {
    // SAFETY: the pointer comes from a successful lookup in a map whose values live as
    // long as their entry; the agent replaces entries, it does not free them under us
    // (hash map values are RCU-protected).
    let Some(levels) = CROSSING_LEVELS.get_ptr_mut(&id) else {
        return Some(());
    };
    let counter = memcg.wrapping_add(layout.memcg_memory as usize);
    let pages = read::<u64>(counter, layout.counter_usage)?;
    let usage = pages << (layout.page_shift & 63);
    // SAFETY: see above; a racing update can at worst fire one level twice or miss a
    // re-arm, which the agent's next synchronize repairs.
    let levels = unsafe { &mut (*levels).levels };
    for index in 0..LEVELS_PER_CGROUP {
        let level = &mut levels[index];
        if level.state == LEVEL_ARMED && usage >= level.level_bytes {
            // An early level tells every rise through it; the others once per arming.
            level.state = if level.flags & LEVEL_EARLY != 0 {
                LEVEL_WAIT_BELOW
            } else {
                LEVEL_FIRED
            };
            let n = emit(id, usage, level.level_bytes, level.flags);
            if n != 0 {
                *drops = n;
            }
        } else if level.state == LEVEL_WAIT_BELOW && usage < level.rearm_below_bytes {
            level.state = LEVEL_ARMED;
        }
    }
    Some(())
}

/// `memcg->css.cgroup->kn->id`.
#[inline(always)]
fn cgroup_id(memcg: *const u8, layout: &MemcgLayout) -> Option<u64> {
    let cgroup = read::<*const u8>(memcg, layout.memcg_css_cgroup)?;
    let kn = read::<*const u8>(cgroup, layout.cgroup_kn)?;
    read::<u64>(kn, layout.kn_id)
}

/// Writes one crossing record; when the ring buffer is full, returns the drop count if
/// it is worth a log record (else 0).
#[inline(always)]
fn emit(cgroup_id: u64, usage: u64, level: u64, flags: u32) -> u64 {
    let record = PressureEvent {
        kind: EventKind::Crossing as u32,
        pid: 0,
        // SAFETY: takes no arguments; allowed in tracing programs.
        timestamp_ns: unsafe { bpf_ktime_get_ns() },
        cgroup_id,
        suppressed: 0,
        level_flags: flags,
        usage_bytes: usage,
        level_bytes: level,
    };
    if PRESSURE_EVENTS.output::<PressureEvent>(&record, 0).is_ok() {
        count(2 * EventKind::Crossing as u32);
        0
    } else {
        dropped()
    }
}
