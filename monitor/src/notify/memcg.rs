//! cgroup v1 memory thresholds: the kernel signals an eventfd when a cgroup's
//! `memory.usage_in_bytes` crosses a registered value (either way). Documented in
//! Documentation/admin-guide/cgroup-v1/memory.rst, "Memory thresholds"; since 2.6.34.
//!
//! As the kubelet's memory threshold notifier does, the value is
//! `capacity − eviction threshold + inactive_file`: usage counts reclaimable page cache,
//! the signal does not. Because inactive_file moves, the synchronize loop re-arms every threshold
//! after each synchronize through the `watch` channel given to [`spawn`].
use std::collections::HashMap;
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use nix::sys::eventfd::{EfdFlags, EventFd};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::{Hook, WakeDetail, WakeSender, WakeSource, lock, realtime};

/// The eviction threshold a level stands for, so that the hot path can word an eviction
/// for the crossing it saw: the signal, and the threshold's quantity in bytes (a
/// percentage resolved against the signal's capacity when armed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArmedThreshold {
    pub(crate) signal: crate::policy::signal::Signal,
    pub(crate) quantity_bytes: u64,
    /// The signal's capacity when armed (a percentage threshold is worded against it).
    pub(crate) capacity_bytes: u64,
    /// Not a threshold but memory relief's level above it (see
    /// [`crate::policy::relief`]): its crossing only wakes a synchronize.
    pub(crate) relief: bool,
}

/// One threshold to arm.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ThresholdSpec {
    /// The cgroup directory (in the v1 memory hierarchy).
    pub cgroup: PathBuf,
    /// Value of memory.usage_in_bytes at which to wake.
    pub usage_bytes: u64,
    /// From a hard threshold (on cgroup v2 only those become memory.high).
    pub hard: bool,
    /// The observation it was armed from already had usage at or past the level: the
    /// synchronize at hand knows, so registering it needs no wake of its own.
    pub passed_when_armed: bool,
    /// The eviction threshold it stands for (`None` in tests of the notifiers alone).
    pub threshold: Option<ArmedThreshold>,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum ThresholdError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("eventfd: {0}")]
    EventFd(nix::Error),
}

/// A registered threshold: the eventfd the kernel signals, and the usage file it watches
/// (the registration lives as long as the eventfd is open).
pub(crate) struct Registration {
    eventfd: EventFd,
    _usage: OwnedFd,
    spec: ThresholdSpec,
}

/// Registers one threshold with the kernel.
pub(crate) fn register(spec: &ThresholdSpec) -> Result<Registration, ThresholdError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ThresholdError::Io { path, source }
    };
    let usage_path = spec.cgroup.join("memory.usage_in_bytes");
    let usage: OwnedFd = std::fs::File::open(&usage_path)
        .map_err(io(&usage_path))?
        .into();
    let eventfd = EventFd::from_value_and_flags(0, EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK)
        .map_err(ThresholdError::EventFd)?;
    let control_path = spec.cgroup.join("cgroup.event_control");
    let line = format!(
        "{} {} {}",
        eventfd.as_fd().as_raw_fd(),
        usage.as_raw_fd(),
        spec.usage_bytes
    );
    std::fs::OpenOptions::new()
        .write(true)
        .open(&control_path)
        .and_then(|mut f| f.write_all(line.as_bytes()))
        .map_err(io(&control_path))?;
    Ok(Registration {
        eventfd,
        _usage: usage,
        spec: spec.clone(),
    })
}

impl Registration {
    /// The descriptor the kernel signals.
    pub(crate) fn eventfd(&self) -> BorrowedFd<'_> {
        self.eventfd.as_fd()
    }
}

/// Whether the cgroup's usage is at or past the spec's level now.
fn already_crossed(spec: &ThresholdSpec) -> bool {
    std::fs::read_to_string(spec.cgroup.join("memory.usage_in_bytes"))
        .ok()
        .and_then(|text| text.trim().parse::<u64>().ok())
        .is_some_and(|usage| usage >= spec.usage_bytes)
}

/// Name of the thread that hears the thresholds.
pub(crate) const WAITER_THREAD: &str = "monitor-memcg";

/// A threshold's key on the waiter: a serial number, and in the lowest bits whether it is
/// hard and whether it is an early one, so that the hot path is told before anything else
/// is looked up.
fn key(serial: u64, hard: bool, early: bool) -> u64 {
    (serial << 2) | (u64::from(early) << 1) | u64::from(hard)
}
const KEY_HARD: u64 = 1;
const KEY_EARLY: u64 = 2;

/// How far below a hard level its early threshold is armed. The kernel checks a cgroup's
/// thresholds once per 128 page events on a CPU, and a CPU may hold up to a charge batch
/// (64 pages) charged ahead: a crossing can be signalled that many pages late per CPU.
/// Capped at 8 MiB.
pub(crate) fn early_margin() -> u64 {
    let page = nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
        .ok()
        .flatten()
        .unwrap_or(4096) as u64;
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    (192 * page * cpus).min(8 << 20)
}

/// The thresholds to register for `wanted`: each as it is, and for each hard one an
/// early one `margin` below it, when the margin is not 0 (never checked as already
/// passed at registration: it is only a head start).
fn with_early(wanted: &[ThresholdSpec], margin: u64) -> Vec<(ThresholdSpec, bool)> {
    let mut out: Vec<(ThresholdSpec, bool)> = wanted.iter().map(|s| (s.clone(), false)).collect();
    let hard = wanted
        .iter()
        .filter(|s| margin > 0 && s.hard && !s.passed_when_armed);
    for spec in hard {
        if let Some(usage_bytes) = spec.usage_bytes.checked_sub(margin).filter(|b| *b > 0) {
            out.push((
                ThresholdSpec {
                    usage_bytes,
                    passed_when_armed: true,
                    ..spec.clone()
                },
                true,
            ));
        }
    }
    out
}

/// Runs the source: keeps exactly the thresholds in `specs` armed, re-arming whenever the
/// loop publishes a new set. Registration failures are logged once per change.
/// The eventfds are heard by a real-time thread ([`realtime::Waiter`]), which tells a
/// hard threshold's crossing to `hook` (the hot path) before it queues the wake; this
/// task only (re)registers. Returns the task and the thread's scheduling.
pub(crate) fn spawn(
    mut specs: watch::Receiver<Vec<ThresholdSpec>>,
    wakes: WakeSender,
    hook: Hook,
) -> std::io::Result<(JoinHandle<()>, String)> {
    // What each key stands for, for the wake's detail.
    let armed: Arc<Mutex<HashMap<u64, ThresholdSpec>>> = Arc::default();
    // Early thresholds only serve the hot path.
    let margin = if hook.is_some() { early_margin() } else { 0 };
    let mut waiter = realtime::Waiter::start(WAITER_THREAD, Some(realtime::PRIORITY), {
        let armed = armed.clone();
        let hook = hook.clone();
        let wakes = wakes.clone();
        move |key| {
            if key & KEY_EARLY != 0 {
                // A head start: the hot path watches for the crossing itself. Only its
                // kill calls for a synchronize (the exact threshold wakes for the rest).
                if let Some(hook) = &hook
                    && hook.early_crossing(WakeSource::MemcgThreshold, margin, key)
                {
                    wakes.wake(WakeSource::MemcgThreshold, WakeDetail::None);
                }
                return true;
            }
            if key & KEY_HARD != 0
                && let Some(hook) = &hook
            {
                hook.hard_crossing(WakeSource::MemcgThreshold);
            }
            let detail =
                lock(&armed)
                    .get(&key)
                    .map_or(WakeDetail::None, |spec| WakeDetail::Threshold {
                        cgroup: spec.cgroup.clone(),
                        threshold_bytes: spec.usage_bytes,
                    });
            wakes.wake(WakeSource::MemcgThreshold, detail);
            true
        }
    })?;
    let scheduling = waiter.scheduling.clone();
    let task = tokio::spawn(async move {
        let mut serial = 0u64;
        let mut registered: Vec<(u64, Registration)> = Vec::new();
        loop {
            let wanted = with_early(&specs.borrow_and_update(), margin);
            let mut next = Vec::with_capacity(wanted.len());
            for (spec, early) in &wanted {
                // A level the kernel already holds stays registered: registering costs
                // the kernel an RCU grace period, and the old one has been signalling
                // every crossing since its own registration.
                let same = |(key, r): &(u64, Registration)| {
                    (key & KEY_EARLY != 0) == *early
                        && r.spec.cgroup == spec.cgroup
                        && r.spec.usage_bytes == spec.usage_bytes
                        && r.spec.hard == spec.hard
                };
                if let Some(index) = registered.iter().position(same) {
                    next.push(registered.swap_remove(index));
                    continue;
                }
                let registration = match register(spec) {
                    Ok(registration) => registration,
                    Err(err) => {
                        tracing::warn!("memcg threshold not armed: {err}");
                        continue;
                    }
                };
                serial += 1;
                let key = key(serial, spec.hard, *early);
                lock(&armed).insert(key, spec.clone());
                if let Err(err) = waiter.watch(registration.eventfd(), key, realtime::Trigger::Edge)
                {
                    tracing::warn!(
                        "memcg threshold on {} not armed: epoll: {err}",
                        spec.cgroup.display()
                    );
                    lock(&armed).remove(&key);
                    continue;
                }
                // The kernel signals crossings only: usage that passed the level between
                // the observation and this registration would never be signalled, so it
                // is checked once here, and signalled as the kernel would, so that the
                // thread handles it (the hot path runs there, never on this task). (A
                // level already passed at the observation is known to that synchronize:
                // no wake, or every re-arm under pressure would cause another synchronize.)
                if !spec.passed_when_armed && already_crossed(spec) {
                    let _ = registration.eventfd.write(1);
                }
                next.push((key, registration));
            }
            // The new set is armed before the old goes: no gap without a threshold.
            // Closing an eventfd unregisters it in the kernel.
            for (key, old) in std::mem::replace(&mut registered, next) {
                let _ = waiter.unwatch(old.eventfd());
                lock(&armed).remove(&key);
            }
            tracing::debug!(count = registered.len(), "memcg thresholds armed");
            tokio::select! {
                changed = specs.changed() => if changed.is_err() { return },
                () = waiter.ended() => {
                    tracing::error!("the memcg threshold thread stopped; the source stops");
                    return;
                }
            }
        }
    });
    Ok((task, scheduling))
}

/// cgroup v2 has no usage thresholds. Its stand-in: `memory.high` at the usage where the
/// pods cgroup crosses a HARD threshold, its own or the node's carried by it (the specs
/// come from [`crate::notify::arming::v2_high_specs`]). The kernel then raises the `high` counter of
/// memory.events (which the memory.events source watches) the moment usage crosses, and
/// throttles the allocating task in reclaim above it, which buys time for the eviction
/// that follows at once. Only hard thresholds: soft ones allow running over them for a
/// grace period, and throttling would change that. Never on the root cgroup (it has no
/// memory.high). Cgroups that drop out of the set get `max` back.
pub(crate) fn spawn_v2_high(
    mut specs: watch::Receiver<Vec<ThresholdSpec>>,
    memory_root: PathBuf,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut written: Vec<PathBuf> = Vec::new();
        loop {
            let highs = v2_high_values(&specs.borrow_and_update(), &memory_root);
            for cgroup in written
                .iter()
                .filter(|c| !highs.iter().any(|(h, _)| h == *c))
            {
                write_high(cgroup, "max");
            }
            for (cgroup, bytes) in &highs {
                write_high(cgroup, &bytes.to_string());
            }
            written = highs.into_iter().map(|(c, _)| c).collect();
            if specs.changed().await.is_err() {
                // The agent stops: lift the throttle it put in place.
                for cgroup in &written {
                    write_high(cgroup, "max");
                }
                return;
            }
        }
    })
}

/// memory.high per cgroup: the lowest hard-threshold usage, root excluded.
pub(crate) fn v2_high_values(specs: &[ThresholdSpec], memory_root: &Path) -> Vec<(PathBuf, u64)> {
    let mut out: Vec<(PathBuf, u64)> = Vec::new();
    for spec in specs.iter().filter(|s| s.hard && s.cgroup != memory_root) {
        match out.iter_mut().find(|(c, _)| *c == spec.cgroup) {
            Some((_, bytes)) => *bytes = (*bytes).min(spec.usage_bytes),
            None => out.push((spec.cgroup.clone(), spec.usage_bytes)),
        }
    }
    out
}

/// Extended attribute on the cgroup directory that marks a memory.high as the agent's
/// and keeps the value it replaced, so that a later run can put it back even after this
/// one was killed with -9 (a fresh boot starts with fresh cgroups, without either).
pub const HIGH_XATTR: &str = "user.monitor.replaced_memory_high";

fn write_high(cgroup: &Path, value: &str) {
    let path = cgroup.join("memory.high");
    let lifting = value == "max";
    if !lifting && matches!(xattr::get(cgroup, HIGH_XATTR), Ok(None)) {
        // First write: remember what was there before.
        let before = std::fs::read_to_string(&path).unwrap_or_else(|_| "max".into());
        if let Err(err) = xattr::set(cgroup, HIGH_XATTR, before.trim().as_bytes()) {
            tracing::warn!(
                "cannot mark {} as set by the agent ({err}); a crash would leave it in place",
                path.display()
            );
        }
    }
    if let Err(err) = std::fs::write(&path, value) {
        tracing::warn!("writing {value} to {}: {err}", path.display());
        return;
    }
    if lifting {
        let _ = xattr::remove(cgroup, HIGH_XATTR);
    }
}

/// Puts back the memory.high a previous run of the agent replaced and did not lift
/// (it was killed, or the node lost power before the cgroup went away).
pub(crate) fn lift_stale_high(cgroup: &Path) {
    let Ok(Some(before)) = xattr::get(cgroup, HIGH_XATTR) else {
        return;
    };
    let before = String::from_utf8_lossy(&before).trim().to_string();
    let value = if before.is_empty() {
        "max".to_string()
    } else {
        before
    };
    let path = cgroup.join("memory.high");
    match std::fs::write(&path, &value) {
        Ok(()) => {
            let _ = xattr::remove(cgroup, HIGH_XATTR);
            tracing::warn!(
                "{}: put back {value}, replaced by an earlier run of the agent that did not stop cleanly",
                path.display()
            );
        }
        Err(err) => tracing::warn!("{}: putting back {value}: {err}", path.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_level_already_passed_at_registration_is_noticed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let spec = |usage_bytes| ThresholdSpec {
            cgroup: dir.path().to_path_buf(),
            usage_bytes,
            hard: false,
            passed_when_armed: false,
            threshold: None,
        };
        assert!(
            !already_crossed(&spec(100)),
            "no usage file: nothing to say"
        );
        std::fs::write(dir.path().join("memory.usage_in_bytes"), "4096\n").expect("usage");
        assert!(already_crossed(&spec(4096)));
        assert!(already_crossed(&spec(100)));
        assert!(!already_crossed(&spec(4097)));
    }

    #[test]
    fn hard_levels_not_yet_passed_get_an_early_threshold_below_them() {
        let spec = |usage_bytes, hard, passed_when_armed| ThresholdSpec {
            cgroup: "/cg".into(),
            usage_bytes,
            hard,
            passed_when_armed,
            threshold: None,
        };
        let wanted = vec![
            spec(1000, true, false),
            spec(900, false, false),
            spec(800, true, true),
            spec(50, true, false),
        ];
        let out = with_early(&wanted, 100);
        let early: Vec<u64> = out
            .iter()
            .filter(|(_, early)| *early)
            .map(|(s, _)| s.usage_bytes)
            .collect();
        // Soft, already passed, and too low for the margin: none.
        assert_eq!(early, vec![900]);
        assert!(
            out.iter()
                .filter(|(_, early)| *early)
                .all(|(s, _)| s.hard && s.passed_when_armed)
        );
        assert_eq!(out.iter().filter(|(_, early)| !early).count(), wanted.len());
        assert_eq!(
            with_early(&wanted, 0).len(),
            wanted.len(),
            "no hot path: no early ones"
        );
        assert!(early_margin() >= 192 * 4096 && early_margin() <= 8 << 20);
    }

    #[test]
    fn v2_high_takes_the_lowest_hard_threshold_and_never_the_root() {
        let spec = |cgroup: &str, usage_bytes, hard| ThresholdSpec {
            cgroup: cgroup.into(),
            usage_bytes,
            hard,
            passed_when_armed: false,
            threshold: None,
        };
        let specs = vec![
            spec("/cg", 900, true),
            spec("/cg/pods", 800, true),
            spec("/cg/pods", 700, true),
            spec("/cg/pods", 500, false),
        ];
        assert_eq!(
            v2_high_values(&specs, Path::new("/cg")),
            vec![(PathBuf::from("/cg/pods"), 700)]
        );
    }
}
