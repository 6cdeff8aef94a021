//! The eBPF source: loads the embedded kernel-side object, attaches the crossing
//! detector ([`super::detector`]) and the reclaim/OOM tracepoints, and turns ring-buffer
//! records into wakes.
//!
//! Needs CAP_BPF + CAP_PERFMON (or CAP_SYS_ADMIN), a kernel ≥ 5.8 (BPF ring buffer) and
//! tracefs for the tracepoint ids: when tracefs is not mounted we mount it at
//! /sys/kernel/tracing. Each tracepoint attaches on its own: a kernel that lacks one still
//! gets the others, and the status says which attached. The programs' own log goes into
//! tracing through [`super::ebpf_log`].
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use aya::maps::{Array, HashMap, MapData, PerCpuArray, RingBuf};
use aya::programs::{BtfTracePoint, FExit, TracePoint};
use aya::{Btf, Ebpf, EbpfLoader};
use monitor_common::{
    COUNTER_RATE_MAP_FAILED, COUNTER_READ_FAILED, COUNTER_RING_FULL, COUNTERS_MAP,
    DEFAULT_MARK_VICTIM_PID_OFFSET, DEFAULT_SAMPLE_EVERY_CHARGE, DEFAULT_SAMPLE_EVERY_LRUVEC,
    DEFAULT_SIGNAL_PID_OFFSET, DEFAULT_SIGNAL_SIG_OFFSET, DEPTHS_MAP, EVENTS_MAP, EventKind,
    GLOBAL_AGENT_TGID, GLOBAL_MARK_VICTIM_PID_OFFSET, GLOBAL_MEMCG_LAYOUT, GLOBAL_MIN_INTERVAL_NS,
    GLOBAL_PODS_PATH, GLOBAL_SAMPLE_EVERY_CHARGE, GLOBAL_SAMPLE_EVERY_LRUVEC,
    GLOBAL_SIGNAL_PID_OFFSET, GLOBAL_SIGNAL_SIG_OFFSET, KIND_COUNT, LEVEL_EARLY, LEVEL_HARD,
    LEVELS_MAP, MemcgLayout, PRESSURE_EVENT_SIZE, PodsPath, PressureEvent,
};

use crate::clock::monotonic_ns;

use super::detector::{AttachPoint, CgroupDepths, Detector, VMLINUX_BTF, memcg_layout};
use super::ebpf_log::{self, KernelLog};
use super::{Hook, SourceStatus, WakeDetail, WakeSender, WakeSource, realtime};

/// The kernel-side object, built by build.rs. Empty when built with AYA_BUILD_SKIP=1.
static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/monitor-ebpf"));

/// (program name in the object, tracepoint category, tracepoint name, kind).
pub(crate) const PROGRAMS: [(&str, &str, &str, EventKind); 5] = [
    (
        "memcg_reclaim",
        "vmscan",
        "mm_vmscan_memcg_reclaim_begin",
        EventKind::MemcgReclaim,
    ),
    (
        "direct_reclaim",
        "vmscan",
        "mm_vmscan_direct_reclaim_begin",
        EventKind::DirectReclaim,
    ),
    (
        "kswapd_wake",
        "vmscan",
        "mm_vmscan_wakeup_kswapd",
        EventKind::KswapdWake,
    ),
    ("oom_victim", "oom", "mark_victim", EventKind::OomVictim),
    (
        "kill_signal",
        "signal",
        "signal_generate",
        EventKind::KillSignal,
    ),
];

const TRACEFS: &str = "/sys/kernel/tracing";

#[derive(Debug, thiserror::Error)]
pub enum EbpfError {
    #[error(
        "this binary was built without its eBPF object (AYA_BUILD_SKIP); rebuild with `cargo xtask setup` done"
    )]
    NotBuilt,
    #[error("tracefs: {0}")]
    Tracefs(String),
    #[error("loading the eBPF object: {0}")]
    Load(#[from] aya::EbpfError),
    #[error("no tracepoint attached: {0}")]
    NoneAttached(String),
    #[error("ring buffer {EVENTS_MAP}: {0}")]
    RingBuf(String),
}

/// Settings of the eBPF source.
#[derive(Clone, Debug)]
pub struct EbpfSettings {
    /// In-kernel rate limit per (cgroup, kind).
    pub min_interval_ns: u64,
    /// Load this object instead of the embedded one (tests use it to make loading fail).
    pub object_override: Option<Vec<u8>>,
    /// The crossing detector's attach points, tried in order; empty: no detector.
    pub detector: Vec<AttachPoint>,
    /// The charge program looks once this many pages were charged on a CPU.
    pub sample_every_charge: u32,
    /// The tracepoint program looks once its hits moved this many units on a CPU.
    pub sample_every_lruvec: u32,
    /// Size of the records' ring buffer in bytes (a power of two, a multiple of the page
    /// size); tests shrink it to make it overflow.
    pub ring_bytes: u32,
    /// The process whose SIGKILLs the kernel stamps (`signal:signal_generate`); `None`:
    /// this one. The benchmark's crossing probe names the agent it watches.
    pub kills_by: Option<u32>,
    /// Where the pods cgroup sits in the cgroup v2 hierarchy: memcg reclaim records of
    /// tasks neither in its tree nor on its path are dropped in the kernel. `None`: kept.
    pub pods_path: Option<PodsPath>,
    /// The ring reader's SCHED_FIFO priority; `None`: it stays SCHED_OTHER. The
    /// benchmark's crossing probe takes `None`: its records carry kernel stamps, so it
    /// needs no haste, and at real-time priority its reader took the CPU from the agent's
    /// watch it measures (about 45 µs at each record, several per race).
    pub ring_priority: Option<i32>,
    /// The detector walks every ancestor of a charged cgroup up to the root, as on a
    /// kernel whose depths it cannot tell, instead of going to the armed depths: the
    /// benchmark measures what going there saves.
    pub walk_every_ancestor: bool,
}

impl Default for EbpfSettings {
    fn default() -> Self {
        EbpfSettings {
            min_interval_ns: monitor_common::DEFAULT_MIN_INTERVAL_NS,
            object_override: None,
            detector: AttachPoint::ALL.to_vec(),
            sample_every_charge: DEFAULT_SAMPLE_EVERY_CHARGE,
            sample_every_lruvec: DEFAULT_SAMPLE_EVERY_LRUVEC,
            ring_bytes: monitor_common::EVENTS_RING_BYTES,
            kills_by: None,
            pods_path: None,
            ring_priority: Some(realtime::RING_PRIORITY),
            walk_every_ancestor: false,
        }
    }
}

/// The [`PodsPath`] of `pods`, a directory under the cgroup2 mount `mount`: the cgroup
/// ids (directory inode numbers) of the mount's root and of each directory down to it.
pub(crate) fn pods_path(mount: &Path, pods: &Path) -> Result<PodsPath, String> {
    use std::os::unix::fs::MetadataExt;
    let relative = pods
        .strip_prefix(mount)
        .map_err(|_| format!("{} is not under {}", pods.display(), mount.display()))?;
    let mut path = PodsPath::default();
    let mut dir = mount.to_path_buf();
    let mut level = 0usize;
    let id = |dir: &Path| {
        std::fs::metadata(dir)
            .map(|m| m.ino())
            .map_err(|e| format!("{}: {e}", dir.display()))
    };
    path.ids[0] = id(&dir)?;
    for part in relative.components() {
        level += 1;
        if level >= monitor_common::PODS_PATH_MAX {
            return Err(format!(
                "{} is more than {} levels deep",
                pods.display(),
                monitor_common::PODS_PATH_MAX - 1
            ));
        }
        dir.push(part);
        path.ids[level] = id(&dir)?;
    }
    path.level = u32::try_from(level).unwrap_or(0);
    Ok(path)
}

/// Counters the programs keep (summed over CPUs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KernelCounters {
    pub emitted: [u64; KIND_COUNT as usize],
    pub suppressed: [u64; KIND_COUNT as usize],
    /// Records dropped because the ring buffer was full.
    pub ring_full: u64,
    /// Inserts into the rate limiter's map that failed.
    pub(crate) rate_map_failed: u64,
    /// Reads of trace records or kernel memory that failed.
    pub(crate) read_failed: u64,
}

/// A running eBPF source. Dropping it detaches the programs.
pub struct EbpfSource {
    pub status: SourceStatus,
    /// The thread that reads the ring (asleep in epoll with no timeout: an idle agent is
    /// not woken for nothing), and the ring's descriptor it watches.
    _consumer: realtime::Waiter,
    _polled: OwnedFd,
    /// The crossing detector, when one attached; `Err` says why none did.
    pub detector: Result<Arc<Detector>, String>,
    counters: PerCpuArray<MapData, u64>,
    /// The programs' log, forwarded into tracing.
    pub kernel_log: KernelLog,
    /// Kept alive: dropping the `Ebpf` detaches every program.
    _ebpf: Ebpf,
}

impl EbpfSource {
    pub fn counters(&self) -> KernelCounters {
        let mut out = KernelCounters::default();
        let read = |index: u32| -> u64 {
            self.counters
                .get(&index, 0)
                .map(|per_cpu| per_cpu.iter().sum())
                .unwrap_or(0)
        };
        for kind in 0..KIND_COUNT {
            out.emitted[kind as usize] = read(2 * kind);
            out.suppressed[kind as usize] = read(2 * kind + 1);
        }
        out.ring_full = read(COUNTER_RING_FULL);
        out.rate_map_failed = read(COUNTER_RATE_MAP_FAILED);
        out.read_failed = read(COUNTER_READ_FAILED);
        out
    }
}

/// Loads, attaches, and starts the thread that reads the ring buffer.
/// Reclaim records are told to `hook` first (the hot path): on cgroup v2, reclaim in the
/// pods cgroup is the first the kernel shows of a crossing of its `memory.high`.
pub fn start(
    settings: &EbpfSettings,
    wakes: WakeSender,
    hook: Hook,
) -> Result<EbpfSource, EbpfError> {
    let object = settings.object_override.as_deref().unwrap_or(EBPF_OBJECT);
    if object.is_empty() {
        return Err(EbpfError::NotBuilt);
    }
    let tracefs = ensure_tracefs()?;
    let pid_offset = mark_victim_pid_offset(&tracefs);
    let signal_format =
        std::fs::read_to_string(tracefs.join("events/signal/signal_generate/format"))
            .unwrap_or_default();
    let sig_offset = parse_field_offset(&signal_format, "sig").unwrap_or(DEFAULT_SIGNAL_SIG_OFFSET);
    let target_offset =
        parse_field_offset(&signal_format, "pid").unwrap_or(DEFAULT_SIGNAL_PID_OFFSET);
    let agent_tgid = settings.kills_by.unwrap_or_else(std::process::id);
    // Without the offsets the detector stays off (a zero layout makes it do nothing).
    let layout = if settings.detector.is_empty() {
        Err("switched off by configuration (sources.crossingDetector is empty)".to_string())
    } else {
        memcg_layout(Path::new(VMLINUX_BTF)).map_err(|e| e.to_string())
    };
    let log_level = ebpf_log::kernel_level();
    let mut ebpf = EbpfLoader::new()
        .map_max_entries(EVENTS_MAP, settings.ring_bytes)
        // Absent from an object whose programs do not log.
        .override_global(aya_log::LEVEL, &log_level, false)
        .override_global(GLOBAL_MIN_INTERVAL_NS, &settings.min_interval_ns, true)
        .override_global(GLOBAL_MARK_VICTIM_PID_OFFSET, &pid_offset, true)
        .override_global(GLOBAL_SIGNAL_SIG_OFFSET, &sig_offset, true)
        .override_global(GLOBAL_SIGNAL_PID_OFFSET, &target_offset, true)
        .override_global(GLOBAL_AGENT_TGID, &agent_tgid, true)
        .override_global(
            GLOBAL_PODS_PATH,
            settings.pods_path.as_ref().unwrap_or(&PodsPath::default()),
            true,
        )
        .override_global(
            GLOBAL_MEMCG_LAYOUT,
            layout.as_ref().unwrap_or(&MemcgLayout::default()),
            true,
        )
        .override_global(
            GLOBAL_SAMPLE_EVERY_CHARGE,
            &settings.sample_every_charge.max(1),
            true,
        )
        .override_global(
            GLOBAL_SAMPLE_EVERY_LRUVEC,
            &settings.sample_every_lruvec.max(1),
            true,
        )
        .load(object)?;
    // Before any program loads: the logger takes the log map out of `ebpf`.
    let (kernel_log, not_forwarded) = ebpf_log::start(&mut ebpf);
    if let Some(why) = &not_forwarded {
        tracing::warn!("the eBPF programs' log is not forwarded: {why}");
    }
    let detector = layout.and_then(|_| attach_detector(&mut ebpf, &settings.detector));

    let mut attached = Vec::new();
    let mut failed = Vec::new();
    for (program, category, tracepoint, _) in PROGRAMS {
        match attach(&mut ebpf, program, category, tracepoint) {
            Ok(()) => attached.push(format!("{category}:{tracepoint}")),
            Err(err) => failed.push(format!("{category}:{tracepoint} ({err})")),
        }
    }
    if attached.is_empty() && detector.is_err() {
        return Err(EbpfError::NoneAttached(failed.join("; ")));
    }
    let ring = ebpf
        .take_map(EVENTS_MAP)
        .ok_or_else(|| EbpfError::RingBuf("not in the object".into()))?;
    let ring = RingBuf::try_from(ring).map_err(|e| EbpfError::RingBuf(e.to_string()))?;
    let counters = ebpf
        .take_map(monitor_common::COUNTERS_MAP)
        .ok_or_else(|| EbpfError::RingBuf(format!("{COUNTERS_MAP} not in the object")))?;
    let counters =
        PerCpuArray::try_from(counters).map_err(|e| EbpfError::RingBuf(e.to_string()))?;
    let detector = detector.and_then(|(attach, tried)| {
        let map = ebpf
            .take_map(LEVELS_MAP)
            .ok_or_else(|| format!("{LEVELS_MAP} not in the object"))?;
        let map = HashMap::try_from(map).map_err(|e| format!("{LEVELS_MAP}: {e}"))?;
        let depths = ebpf
            .take_map(DEPTHS_MAP)
            .and_then(|depths| Array::try_from(depths).ok())
            .filter(|_| !settings.walk_every_ancestor);
        let detector = Detector::new(attach, map, depths, CgroupDepths::of_this_process());
        Ok((Arc::new(detector), tried))
    });
    let early_margin = match &detector {
        Ok((detector, _)) => detector.early_margin_cell(),
        Err(_) => Arc::default(),
    };
    let (consumer, polled) =
        spawn_consumer(ring, wakes, hook, early_margin, settings.ring_priority)
            .map_err(|e| EbpfError::RingBuf(format!("starting its consumer thread: {e}")))?;
    let mut detail = match &detector {
        Ok((detector, refused)) => {
            let looks = match detector.attach {
                AttachPoint::CounterFexit => "a look at every charge batch".to_string(),
                AttachPoint::ChargeFexit => format!(
                    "a look per {} pages per CPU",
                    settings.sample_every_charge.max(1)
                ),
                AttachPoint::LruvecTracepoint => format!(
                    "a look per {} pages per CPU",
                    settings.sample_every_lruvec.max(1)
                ),
            };
            let mut text = format!(
                "crossing detector on {} (levels armed after every synchronize, {looks})",
                detector.attach.name(),
            );
            if !refused.is_empty() {
                text.push_str(&format!(", refused: {}", refused.join("; ")));
            }
            text
        }
        Err(why) => format!("no crossing detector: {why}"),
    };
    detail.push_str(&format!(
        "; tracepoints {} (ring buffer {} KiB, rate limit {} µs per cgroup and kind)",
        attached.join(", "),
        settings.ring_bytes / 1024,
        settings.min_interval_ns / 1000
    ));
    if !failed.is_empty() {
        detail.push_str(&format!("; not attached: {}", failed.join("; ")));
    }
    detail.push_str(&format!(
        "; records read by thread {CONSUMER_THREAD} ({})",
        consumer.scheduling
    ));
    match &not_forwarded {
        None => detail.push_str("; the programs' log forwarded to tracing"),
        Some(why) => detail.push_str(&format!("; the programs' log not forwarded: {why}")),
    }
    Ok(EbpfSource {
        status: SourceStatus::running(WakeSource::Ebpf, detail),
        _consumer: consumer,
        _polled: polled,
        detector: detector.map(|(d, _)| d),
        counters,
        kernel_log,
        _ebpf: ebpf,
    })
}

/// Loads and attaches the first detector program the kernel accepts. Returns it with
/// the attach points refused before it (and why), or why none attached.
fn attach_detector(
    ebpf: &mut Ebpf,
    choices: &[AttachPoint],
) -> Result<(AttachPoint, Vec<String>), String> {
    let btf = Btf::from_sys_fs().map_err(|e| format!("kernel BTF: {e}"))?;
    let mut refused = Vec::new();
    for &attach in choices {
        let result = (|| -> Result<(), AttachError> {
            let program =
                ebpf.program_mut(attach.program())
                    .ok_or_else(|| AttachError::Missing {
                        program: attach.program().to_string(),
                    })?;
            match attach {
                AttachPoint::CounterFexit | AttachPoint::ChargeFexit => {
                    let program: &mut FExit = program.try_into()?;
                    program.load(attach.target(), &btf)?;
                    program.attach()?;
                }
                AttachPoint::LruvecTracepoint => {
                    let program: &mut BtfTracePoint = program.try_into()?;
                    program.load(attach.target(), &btf)?;
                    program.attach()?;
                }
            }
            Ok(())
        })();
        match result {
            Ok(()) => return Ok((attach, refused)),
            Err(err) => refused.push(format!("{} ({})", attach.name(), error_chain(&err))),
        }
    }
    Err(format!(
        "every attach point refused: {}",
        refused.join("; ")
    ))
}

/// An error and its sources in one line (aya's load errors keep the kernel's reason in
/// their source).
fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(inner) = source {
        let inner_text = inner.to_string();
        if !text.contains(&inner_text) {
            text.push_str(": ");
            text.push_str(&inner_text);
        }
        source = inner.source();
    }
    text
}

/// Why one tracepoint program was not attached (the others still may be; the caller
/// names the tracepoint).
#[derive(Debug, thiserror::Error)]
enum AttachError {
    #[error("program {program} missing from the object")]
    Missing { program: String },
    /// Not a tracepoint program, or the kernel refused to load or attach it.
    #[error(transparent)]
    Program(#[from] aya::programs::ProgramError),
}

fn attach(
    ebpf: &mut Ebpf,
    program: &str,
    category: &str,
    tracepoint: &str,
) -> Result<(), AttachError> {
    let program: &mut TracePoint = ebpf
        .program_mut(program)
        .ok_or_else(|| AttachError::Missing {
            program: program.to_string(),
        })?
        .try_into()?;
    program.load()?;
    program.attach(category, tracepoint)?;
    Ok(())
}

/// Name of the thread that reads the ring buffer.
pub(crate) const CONSUMER_THREAD: &str = "monitor-kernel";

/// Starts the thread that reads the ring buffer ([`realtime::Waiter`]). It runs at
/// real-time priority where the kernel permits it, so a crossing record is read, and the
/// hot path's kill written, as soon as it is in the ring, even with every CPU busy with
/// allocating pods. Returns the thread, and the ring's descriptor it watches (a duplicate:
/// the thread owns the ring itself).
fn spawn_consumer(
    mut ring: RingBuf<MapData>,
    wakes: WakeSender,
    hook: Hook,
    early_margin: Arc<AtomicU64>,
    priority: Option<i32>,
) -> std::io::Result<(realtime::Waiter, OwnedFd)> {
    let polled = ring.as_fd().try_clone_to_owned()?;
    let mut reader = Drain {
        early_margin,
        ..Drain::default()
    };
    let waiter = realtime::Waiter::start(CONSUMER_THREAD, priority, move |_| {
        let mut batch = std::mem::take(&mut reader.batch);
        while let Some(item) = ring.next() {
            if let Some(event) = decode(&item) {
                batch.push(event);
            }
        }
        reader.handle(&batch, monotonic_ns(), &wakes, &hook);
        batch.clear();
        reader.batch = batch;
        true
    })?;
    waiter.watch(polled.as_fd(), 0, realtime::Trigger::Level)?;
    Ok((waiter, polled))
}

/// Two charges on two CPUs can both see a level armed and both record its crossing (the
/// program's change of the level's state is not atomic). A second record of the same
/// level of the same cgroup within this window is the same crossing: it is dropped, so
/// each arming yields one record. (A genuine second crossing needs usage to fall a
/// hysteresis below the level first.)
const SAME_CROSSING_NS: u64 = 1_000_000;

fn same_crossing(first: &PressureEvent, next: &PressureEvent) -> bool {
    first.cgroup_id == next.cgroup_id
        && first.level_bytes == next.level_bytes
        && next.timestamp_ns.saturating_sub(first.timestamp_ns) < SAME_CROSSING_NS
}

/// Reclaim records wake a synchronize (and the hot path looks at its levels) at most this
/// often; a threshold's crossing or an OOM victim always wakes one. A pod reclaiming at
/// its own limit records up to a thousand times a second, and the notifiers at the
/// levels carry every crossing: these records are a second opinion. At 100 ms the
/// synchronizes they caused cost 2.4 % of a core beside a pod re-reading a file twice
/// its limit (`cargo xtask bench --adversarial-only`, row (c)); at 250 ms, 2 %.
pub(crate) const RECLAIM_WAKE_INTERVAL_NS: u64 = 250_000_000;
/// While reclaim goes on without any crossing, each wake it causes doubles the interval
/// to the next, up to this: a pod that lives at its own limit costs a synchronize every
/// 2 s, not four a second. A crossing or an OOM record starts again from
/// [`RECLAIM_WAKE_INTERVAL_NS`].
pub(crate) const RECLAIM_WAKE_INTERVAL_MAX_NS: u64 = 2_000_000_000;

/// The ring reader's state between drains.
#[derive(Debug, Default)]
struct Drain {
    /// How far below its hard level an early level is armed (the detector's margin).
    early_margin: Arc<AtomicU64>,
    /// The last crossing record, to drop its duplicates.
    last_crossing: Option<PressureEvent>,
    /// CLOCK_MONOTONIC ns of the last wake a reclaim record caused.
    last_reclaim_wake_ns: u64,
    /// The least time from that wake to the next one a reclaim record causes (0 before
    /// the first).
    reclaim_interval_ns: u64,
    /// Reused between drains.
    batch: Vec<PressureEvent>,
}

/// What one drain asks of the hot path and the loop.
#[derive(Debug, Default, PartialEq)]
struct Actions {
    /// Whether the hot path looks at its levels (at most once per drain).
    hot_check: bool,
    /// The early level whose record starts the hot path's watch (at most one per drain:
    /// one watch covers every level), by (cgroup id, level).
    early: Option<(u64, u64)>,
    /// The records that wake the loop, in ring order (crossings, OOM victims, and at most
    /// one reclaim record).
    wakes: Vec<PressureEvent>,
    /// SIGKILLs the kernel stamped (logged only).
    kills: Vec<PressureEvent>,
}

impl Drain {
    /// Decides what a drained batch calls for, at `now_ns`: the whole ring is read
    /// before anything is done, so a burst of reclaim records costs one hot-path look
    /// and at most one wake, and never delays a crossing behind them.
    fn plan(&mut self, batch: &[PressureEvent], now_ns: u64) -> Actions {
        let mut actions = Actions::default();
        let mut crossed = false;
        let mut reclaim: Option<PressureEvent> = None;
        for event in batch {
            match EventKind::from_u32(event.kind) {
                Some(EventKind::Crossing) => {
                    if self
                        .last_crossing
                        .as_ref()
                        .is_some_and(|last| same_crossing(last, event))
                    {
                        continue;
                    }
                    self.last_crossing = Some(*event);
                    if event.level_flags & LEVEL_EARLY != 0 {
                        // A head start, not a crossing: the hot path watches the level
                        // itself, and only its kill calls for a synchronize (the record at
                        // the hard level wakes one for the rest).
                        actions.early = Some((event.cgroup_id, event.level_bytes));
                        continue;
                    }
                    // The detector's record carries the kernel's own numbers: a hard
                    // level goes to the hot path first, which confirms it.
                    actions.hot_check |= event.level_flags & LEVEL_HARD != 0;
                    crossed = true;
                    actions.wakes.push(*event);
                }
                Some(EventKind::KillSignal) => actions.kills.push(*event),
                Some(EventKind::OomVictim) => {
                    crossed = true;
                    actions.wakes.push(*event);
                }
                _ => reclaim = Some(*event),
            }
        }
        if crossed {
            self.reclaim_interval_ns = RECLAIM_WAKE_INTERVAL_NS;
        }
        if let Some(event) = reclaim
            && (crossed
                || now_ns.saturating_sub(self.last_reclaim_wake_ns) >= self.reclaim_interval_ns)
        {
            self.last_reclaim_wake_ns = now_ns;
            if !crossed {
                self.reclaim_interval_ns = match self.reclaim_interval_ns {
                    0 => RECLAIM_WAKE_INTERVAL_NS,
                    gap => gap.saturating_mul(2).min(RECLAIM_WAKE_INTERVAL_MAX_NS),
                };
            }
            // Reclaim starts as usage reaches a limit or memory.high: the hot path
            // confirms a hard level against the counters itself. A second opinion (the
            // notifiers at the levels carry the crossing), so at the wakes' pace: a pod
            // reclaiming at its own limit records up to a thousand times a second.
            actions.hot_check |= matches!(
                EventKind::from_u32(event.kind),
                Some(EventKind::MemcgReclaim | EventKind::DirectReclaim)
            );
            actions.wakes.push(event);
        }
        actions
    }

    /// Carries out [`Drain::plan`]: the hot path first, then the wakes.
    fn handle(&mut self, batch: &[PressureEvent], now_ns: u64, wakes: &WakeSender, hook: &Hook) {
        let actions = self.plan(batch, now_ns);
        if let Some(hook) = hook {
            if actions.hot_check {
                hook.hard_crossing(WakeSource::Ebpf);
            }
            // After the hard look: a level already reached needs no watch.
            if let Some((cgroup_id, level)) = actions.early
                && hook.early_crossing(
                    WakeSource::Ebpf,
                    self.early_margin.load(Ordering::Relaxed),
                    cgroup_id ^ level,
                )
            {
                // Watched and killed here (no watcher thread): book it.
                wakes.wake(WakeSource::Ebpf, WakeDetail::None);
            }
        }
        for event in actions.kills {
            // The kernel's stamp of one of our kills: logged, nothing to wake for.
            tracing::info!(
                target_pid = event.pid,
                at_ns = event.timestamp_ns,
                "kernel: SIGKILL generated by the agent"
            );
        }
        for event in actions.wakes {
            let memcg = if event.kind == EventKind::Crossing as u32 {
                None
            } else {
                // On a v1 memory controller the record's cgroup id (unified hierarchy)
                // does not name the memcg; the task's /proc entry does, while it lives.
                std::fs::read_to_string(format!("/proc/{}/cgroup", event.pid))
                    .ok()
                    .and_then(|text| crate::observe::parse::memory_cgroup_of(&text))
            };
            wakes.wake(WakeSource::Ebpf, WakeDetail::Kernel { event, memcg });
        }
    }
}

/// Copies a record out of the ring; a short record (a layout mismatch) is skipped.
pub(crate) fn decode(bytes: &[u8]) -> Option<PressureEvent> {
    if bytes.len() < PRESSURE_EVENT_SIZE {
        return None;
    }
    // SAFETY: the length is checked, PressureEvent is plain old data valid for any bit
    // pattern, and read_unaligned makes no alignment assumption about the ring's bytes.
    Some(unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<PressureEvent>()) })
}

/// Makes sure tracefs is mounted (aya looks up tracepoint ids there) and returns its path.
fn ensure_tracefs() -> Result<PathBuf, EbpfError> {
    for candidate in [TRACEFS, "/sys/kernel/debug/tracing"] {
        if Path::new(candidate).join("events").is_dir() {
            return Ok(PathBuf::from(candidate));
        }
    }
    nix::mount::mount(
        Some("tracefs"),
        TRACEFS,
        Some("tracefs"),
        nix::mount::MsFlags::empty(),
        None::<&str>,
    )
    .map_err(|e| {
        EbpfError::Tracefs(format!(
            "not mounted, and mounting it at {TRACEFS} failed: {e}"
        ))
    })?;
    tracing::info!("mounted tracefs at {TRACEFS} to attach tracepoints");
    Ok(PathBuf::from(TRACEFS))
}

/// Reads the offset of `pid` in oom:mark_victim records from its tracefs format.
fn mark_victim_pid_offset(tracefs: &Path) -> u32 {
    let path = tracefs.join("events/oom/mark_victim/format");
    std::fs::read_to_string(&path)
        .ok()
        .and_then(|text| parse_field_offset(&text, "pid"))
        .unwrap_or(DEFAULT_MARK_VICTIM_PID_OFFSET)
}

/// Finds `offset:N` of a field in a tracefs event format ("field:int pid;\toffset:8;...").
pub(crate) fn parse_field_offset(format: &str, field: &str) -> Option<u32> {
    format.lines().find_map(|line| {
        let decl = line.trim().strip_prefix("field:")?.split(';').next()?;
        if decl.split_whitespace().last()? != field {
            return None;
        }
        line.split(';')
            .find_map(|part| part.trim().strip_prefix("offset:")?.parse().ok())
    })
}

#[cfg(test)]
mod tests;
