//! Every map of the kernel side, in one place. Names must match `monitor_common`'s
//! `*_MAP` constants, which the agent uses to find them. (aya-log-ebpf adds its own
//! `AYA_LOGS` ring buffer for the log records.)
use aya_ebpf::{
    macros::map,
    maps::{Array, HashMap, LruHashMap, PerCpuArray, RingBuf},
};
use monitor_common::{
    ArmedDepths, ArmedLevels, COUNTER_SLOTS, EVENTS_RING_BYTES, LAST_EMIT_ENTRIES, LEVELS_ENTRIES,
    PressureEvent as _Record, RateKey, RateState,
};

/// The one ring buffer all programs write [`monitor_common::PressureEvent`]s into.
#[map(name = "PRESSURE_EVENTS")]
pub static PRESSURE_EVENTS: RingBuf = RingBuf::with_byte_size(EVENTS_RING_BYTES, 0);

/// Per-CPU counters: emitted and suppressed per kind, then the failures (ring buffer
/// full, rate limiter insert, reads); the failure counts also pace their log records.
#[map(name = "PRESSURE_COUNTERS")]
pub static PRESSURE_COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(COUNTER_SLOTS, 0);

/// When each (cgroup, kind) last emitted, for the in-kernel rate limit.
#[map(name = "LAST_EMIT")]
pub static LAST_EMIT: LruHashMap<RateKey, RateState> =
    LruHashMap::with_max_entries(LAST_EMIT_ENTRIES, 0);

/// The crossing detector's armed levels, keyed by memory cgroup id; written by the agent
/// after every synchronize, moved to fired (or re-armed) by the detector.
#[map(name = "CROSSING_LEVELS")]
pub static CROSSING_LEVELS: HashMap<u64, ArmedLevels> =
    HashMap::with_max_entries(LEVELS_ENTRIES, 0);

/// The depths of the cgroups in `CROSSING_LEVELS` (one entry), written by the agent with
/// the levels: the detector looks up only the ancestors at those depths.
#[map(name = "ARMED_DEPTHS")]
pub static ARMED_DEPTHS: Array<ArmedDepths> = Array::with_max_entries(1, 0);

// Keep the record type referenced so a layout change breaks this crate's build too.
const _: usize = core::mem::size_of::<_Record>();
