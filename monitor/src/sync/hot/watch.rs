//! The close watch after an early notifier or a crossing short of its working set, within
//! its CPU budget, and the notifier hooks that start it.
use super::kill::Look;
use super::*;

/// The watches' CPU allowance (a token bucket of thread CPU time).
#[derive(Debug)]
pub(super) struct WatchBudget {
    pub(super) left_ns: u64,
    pub(super) refilled_at_ns: u64,
}

impl WatchBudget {
    pub(super) fn full() -> WatchBudget {
        WatchBudget {
            left_ns: WATCH_BUDGET.as_nanos() as u64,
            refilled_at_ns: monotonic_ns(),
        }
    }

    /// What is left now.
    pub(super) fn refill(&mut self, now_ns: u64) -> u64 {
        let elapsed = now_ns.saturating_sub(self.refilled_at_ns);
        let gained = u128::from(elapsed) * WATCH_REFILL_PER_SEC.as_nanos() / 1_000_000_000;
        self.left_ns = (self.left_ns + u64::try_from(gained).unwrap_or(u64::MAX))
            .min(WATCH_BUDGET.as_nanos() as u64);
        self.refilled_at_ns = now_ns;
        self.left_ns
    }
}

thread_local! {
    /// The descriptors a watch on this thread reads the levels' usage through, its own.
    /// A kernfs file's reads are serialized on a lock of its open file: a watch that read
    /// through the descriptors the confirmation reads (or through another thread's
    /// watch's) would make a confirmation on another thread wait behind its back-to-back
    /// reads.
    static WATCH_FILES: Arc<OpenFiles> = Arc::new(OpenFiles::with_budget(LEVEL_FILES_KEPT));
}

/// A watch running: set while it lives.
pub(super) struct Watching<'a>(&'a std::sync::atomic::AtomicBool);

impl<'a> Watching<'a> {
    /// `None` when a watch runs already.
    pub(super) fn take(hot: &'a HotPath) -> Option<Watching<'a>> {
        use std::sync::atomic::Ordering;
        hot.watching
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .ok()
            .map(|_| Watching(&hot.watching))
    }
}

impl Drop for Watching<'_> {
    fn drop(&mut self) {
        self.0.store(false, std::sync::atomic::Ordering::Release);
    }
}

/// The calling thread's CPU time, ns.
pub(super) fn thread_cpu_ns() -> u64 {
    match nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID) {
        Ok(ts) => {
            u64::try_from(ts.tv_sec()).unwrap_or(0) * 1_000_000_000
                + u64::try_from(ts.tv_nsec()).unwrap_or(0)
        }
        Err(_) => 0,
    }
}

/// Moves a spinning watch off its CPU when the usage it watches stands still
/// ([`WATCH_STILL`]), at most [`WATCH_MOVES`] times per watch, and gives the thread its
/// CPUs back when dropped.
///
/// Why: the kernel wakes a real-time thread on the CPU it last ran on, whatever runs
/// there. When that is the CPU of the task whose charge woke it (the allocator the watch
/// is there for), the watch keeps that task off its CPU, and the load balancer moves it
/// to an idle CPU only at a later tick: on a 250 Hz kernel the allocator stood still
/// 2-8 ms while the other CPU was idle, and the watch spent its allowance waiting for a
/// rise it was holding back. Nothing tells the watch which CPU the allocator is on, so
/// it goes by the usage: once it has not moved for a while, the watch leaves its CPU; if
/// the usage still stands, the allocator was not there, and the second move leaves the
/// CPU the first one may have taken from it.
pub(super) struct CpuMoves {
    /// The thread's CPUs when the watch began (restored on drop), once it has moved.
    original: Option<nix::sched::CpuSet>,
    moves: u32,
}

impl CpuMoves {
    pub(super) fn new() -> CpuMoves {
        CpuMoves {
            original: None,
            moves: 0,
        }
    }

    /// Leaves the CPU this thread runs on for another it may run on; the CPU left and the
    /// one it runs on now. `None` when it may run on one CPU only, has moved
    /// [`WATCH_MOVES`] times, or the kernel refused.
    pub(super) fn leave_this_cpu(&mut self) -> Option<(usize, usize)> {
        use nix::sched::{sched_getaffinity, sched_getcpu, sched_setaffinity};
        use nix::unistd::Pid;
        if self.moves >= WATCH_MOVES {
            return None;
        }
        let this = Pid::from_raw(0);
        let original = match &self.original {
            Some(set) => *set,
            None => sched_getaffinity(this).ok()?,
        };
        let cpu = sched_getcpu().ok()?;
        let mut others = original;
        others.unset(cpu).ok()?;
        // With no other CPU (or none the thread's cpuset allows) the kernel refuses the
        // set (EINVAL) and the thread stays where it is.
        sched_setaffinity(this, &others).ok()?;
        self.original = Some(original);
        self.moves += 1;
        Some((cpu, sched_getcpu().unwrap_or(usize::MAX)))
    }
}

impl Drop for CpuMoves {
    fn drop(&mut self) {
        if let Some(original) = self.original.take() {
            // Back to every CPU the thread had: the kernel leaves it where it runs.
            let _ = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &original);
        }
    }
}

/// Whether this process may run on more than one CPU now.
pub(super) fn more_than_one_cpu() -> bool {
    std::thread::available_parallelism().is_ok_and(|n| n.get() > 1)
}

impl HotPath {
    /// Starts the thread that runs the watches the eBPF ring reader would otherwise run
    /// itself (a watch lasts up to [`WATCH_WINDOW`], and meanwhile crossing and OOM
    /// records would wait in the ring). It runs at the memcg notifier's real-time
    /// priority where the kernel permits it; returns what it got. A watch that kills
    /// wakes the loop through `wakes`, which books the kill (an early record wakes
    /// nothing itself). The thread ends when the hot path is dropped.
    pub(crate) fn start_watcher(
        self: &Arc<Self>,
        wakes: crate::notify::WakeSender,
    ) -> std::io::Result<String> {
        let (tx, rx) = std::sync::mpsc::channel::<WatchRequest>();
        let (got_tx, got_rx) = std::sync::mpsc::channel();
        let hot = Arc::downgrade(self);
        std::thread::Builder::new()
            .name(WATCHER_THREAD.into())
            .spawn(move || {
                let _ = got_tx.send(crate::notify::realtime::realtime_priority(
                    crate::notify::realtime::PRIORITY,
                ));
                while let Ok(request) = rx.recv() {
                    let Some(hot) = hot.upgrade() else { return };
                    match request {
                        WatchRequest::Watch {
                            source,
                            margin,
                            told_ns,
                        } => {
                            if hot.watch(source, margin, told_ns) {
                                wakes.wake(source, crate::notify::WakeDetail::None);
                            }
                        }
                        WatchRequest::Prime => hot.prime_watch(),
                    }
                }
            })?;
        *self.watcher.lock().unwrap_or_else(|p| p.into_inner()) = Some(tx);
        Ok(got_rx.recv().unwrap_or_default())
    }

    /// Runs a watch here, or hands it to the watcher thread when `source` is the ring
    /// reader and the thread runs.
    pub(super) fn watch_from(&self, source: WakeSource, margin: u64, told_ns: u64) -> bool {
        if source == WakeSource::Ebpf
            && let Some(tx) = self
                .watcher
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .as_ref()
            && tx
                .send(WatchRequest::Watch {
                    source,
                    margin,
                    told_ns,
                })
                .is_ok()
        {
            return false;
        }
        self.watch(source, margin, told_ns)
    }
}

impl HotPath {
    /// A hard notifier's look: kill if the working set is at a level, else watch (the
    /// notifier will not fire again for it). Whether it killed here.
    fn hard_look(&self, source: WakeSource, told_ns: u64) -> bool {
        match self.kill_if_crossed(source, told_ns, None) {
            Look::Killed => true,
            Look::NotReached => self.watch_from(source, 0, told_ns),
            Look::Disarmed => false,
        }
    }

    /// The look a hard notifier left to a watch, if one is left (taken once).
    fn take_left_look(&self) -> Option<(WakeSource, u64)> {
        self.hard_told
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
    }

    /// Takes the look a hard notifier left while a watch ran, once that watch has ended
    /// (its flag is down, so a notifier after this takes its own look). Whether it
    /// killed.
    pub(super) fn take_left_hard_look(&self) -> bool {
        match self.take_left_look() {
            Some((source, told_ns)) => self.hard_look(source, told_ns),
            None => false,
        }
    }
}

impl CrossingHook for HotPath {
    /// A notifier at a hard level fired. If its usage is there but the working set is not
    /// quite (page cache grew since the level was armed, or the kernel's statistics lag
    /// its usage counter), the level is watched as after an early notifier: the
    /// notifier will not fire again for it.
    ///
    /// While a watch runs, the look is left to it: it reads every level within
    /// microseconds and kills at the level, and two threads confirming one crossing at
    /// once slowed each other (the second waited about 40 µs for the lock, then read 5-10
    /// times slower than alone). The watch looks once more as it ends; if it ended just
    /// now, the look is taken here, once.
    fn hard_crossing(&self, source: WakeSource) {
        use std::sync::atomic::Ordering;
        let told_ns = monotonic_ns();
        if self.watching.load(Ordering::Acquire) {
            *self.hard_told.lock().unwrap_or_else(|p| p.into_inner()) = Some((source, told_ns));
            if self.watching.load(Ordering::Acquire) {
                return;
            }
            // The watch ended meanwhile: whichever of it and this thread takes the look
            // left, takes it.
            if self.take_left_look().is_none() {
                return;
            }
        }
        // The source wakes the loop after this returns, which books a kill made here.
        self.hard_look(source, told_ns);
    }

    /// An early notifier fired a little below a hard level (its kernel check is coarser
    /// than the headroom wants): watch the usage closely, for a bounded time and CPU,
    /// and kill the moment a level is reached. The notifier at the level itself stays
    /// armed, so a crossing after the window (or after usage fell back) is still heard.
    fn early_crossing(&self, source: WakeSource, margin: u64, level: u64) -> bool {
        use std::sync::atomic::Ordering;
        let now_ns = monotonic_ns();
        let rest_ns = WATCH_REST.as_nanos() as u64;
        let last = self.last_watch_end_ns.load(Ordering::Relaxed);
        if last != 0 && now_ns < last.saturating_add(rest_ns) {
            return false;
        }
        {
            let mut armed = self.lock();
            let window_ns = FLAP_WINDOW.as_nanos() as u64;
            let fires = armed.early_fires.entry(level).or_default();
            if fires.len() >= EARLY_FIRES_PER_ARMING as usize {
                // Rested until the levels are set again, however long ago it flapped.
                return false;
            }
            fires.retain(|at| now_ns.saturating_sub(*at) < window_ns);
            fires.push(now_ns);
            if fires.len() == EARLY_FIRES_PER_ARMING as usize {
                tracing::debug!(source = %source, level, "hot path: an early notifier keeps firing; resting it until the next synchronize");
            }
        }
        tracing::debug!(source = %source, told_ns = now_ns, margin, "hot path: an early notifier fired; watching the levels");
        self.watch_from(source, margin, now_ns)
    }
}

impl HotPath {
    /// Reads every level's usage, back to back for [`WATCH_SPIN`] (where more than
    /// one CPU is usable; farther below a level, as long as `pace_ns` allows between
    /// looks) and then every [`WATCH_POLL`], for up to
    /// [`WATCH_WINDOW`] and while the CPU budget lasts: at a level's usage, the working
    /// set is checked and the victim killed once it is there too. Stops when usage is
    /// `margin` or more below every level. Whether it killed.
    ///
    /// One watch at a time. A watch reads every level, so a second one (the other
    /// source's early notifier at the same rise) would add nothing but a second real-time
    /// thread taking a CPU from the pods and from the first watch's kill. A hard notifier
    /// that fired meanwhile left its look to this watch; once the watch is over, that look
    /// is taken here, and its kill counts as the watch's, so that the caller's wake books it.
    pub(super) fn watch(&self, source: WakeSource, margin: u64, told_ns: u64) -> bool {
        let Some(watching) = Watching::take(self) else {
            tracing::debug!(source = %source, told_ns, "hot path: a watch runs already");
            return false;
        };
        let killed = self.watch_held(source, margin, told_ns);
        drop(watching);
        self.take_left_hard_look() || killed
    }

    /// Reads every level's files once through this thread's descriptors, opening those of
    /// levels set since the last watch and closing those of levels gone. A watch's first
    /// look otherwise opened them: in the cgroup v2 VM, under emulation, that first look
    /// took 17-26 ms (against 0.2 ms for a confirmation's reads) and the kill waited on it.
    ///
    /// It does not count as a watch (a hard notifier meanwhile takes its own look): the
    /// descriptors are this thread's, and nothing here kills.
    fn prime_watch(&self) {
        let levels: Vec<Level> = WATCH_FILES.with(|files| {
            self.lock()
                .levels
                .iter()
                .map(|level| level.reading_through(files.clone()))
                .collect()
        });
        for level in &levels {
            level.read_once();
        }
        WATCH_FILES.with(|files| files.sweep());
    }

    /// [`HotPath::watch`] once it holds the one watch.
    fn watch_held(&self, source: WakeSource, margin: u64, told_ns: u64) -> bool {
        let mut levels: Vec<Level> = {
            let armed = self.lock();
            if armed.candidates.is_empty() {
                return false;
            }
            WATCH_FILES.with(|files| {
                armed
                    .levels
                    .iter()
                    .map(|level| level.reading_through(files.clone()))
                    .collect()
            })
        };
        let left = {
            let mut budget = self.budget.lock().unwrap_or_else(|p| p.into_inner());
            budget.refill(monotonic_ns())
        };
        // An early notifier's watch (started `margin` below the levels) leaves the
        // reserve to a hard notifier's, whose level is closer.
        let allowance = if margin > 0 {
            left.saturating_sub(WATCH_HARD_RESERVE.as_nanos() as u64)
        } else {
            left
        };
        if allowance == 0 {
            tracing::debug!(source = %source, margin, "hot path: watch skipped, its CPU budget is spent (an early watch leaves the reserve to a hard notifier's)");
            return false;
        }
        let cpu_start = thread_cpu_ns();
        // On the watch's CPU time, as its looks are.
        for level in &mut levels {
            level.lower_to_page_cache_now();
        }
        let killed = self.watch_levels(source, margin, told_ns, &levels, cpu_start, allowance);
        // The files this watch read stay open for the next; one it did not read (its
        // level was replaced since) is closed here.
        WATCH_FILES.with(|files| files.sweep());
        let used = thread_cpu_ns().saturating_sub(cpu_start);
        self.watch_cpu_ns
            .fetch_add(used, std::sync::atomic::Ordering::Relaxed);
        let mut budget = self.budget.lock().unwrap_or_else(|p| p.into_inner());
        budget.refill(monotonic_ns());
        budget.left_ns = budget.left_ns.saturating_sub(used);
        killed
    }

    fn watch_levels(
        &self,
        source: WakeSource,
        margin: u64,
        told_ns: u64,
        levels: &[Level],
        cpu_start: u64,
        allowance: u64,
    ) -> bool {
        let started = std::time::Instant::now();
        let spin_until = started
            + if self.spin {
                WATCH_SPIN
            } else {
                Duration::ZERO
            };
        let until = started + WATCH_WINDOW;
        let mut looks = 0u32;
        // Each level's first usage read by this watch, and when: its rate of rise.
        let mut first: Vec<Option<(u64, u64)>> = vec![None; levels.len()];
        // Each level's last value, and since when none has moved (see `CpuMoves`).
        let mut last: Vec<Option<u64>> = vec![None; levels.len()];
        let mut still_since = started;
        let mut moves = CpuMoves::new();
        // When this watch first saw a usage at its level while the working set was short
        // of it (page cache grown since arming): the kill waits for the working set.
        let mut usage_at_level: Option<std::time::Instant> = None;
        // The value and level of the last look, for the log of a watch that ends below.
        let mut seen = (0u64, 0u64);
        // When the next rehearsal of the kill is due (the first look rehearses).
        let mut rehearse_at = started;
        // The sleeps the levels' distance allowed (see `pace_ns`), and the longest any of
        // them overran what it asked (the thread waited that long for its CPU).
        let (mut paced_sleeps, mut overslept) = (0u32, Duration::ZERO);
        loop {
            // The first level seen reached, and whether every level is below its early
            // one. A rehearsal confirms the working set: a level it found reached is.
            let (mut reached, mut all_below) = (None, true);
            if std::time::Instant::now() >= rehearse_at {
                let began = std::time::Instant::now();
                reached = self.rehearse().reached;
                rehearse_at = rehearse_due(began, began.elapsed());
            }
            // How long the levels let the watch sleep before its next look.
            let mut pause_ns = u64::MAX;
            for (index, ((level, first), last)) in levels
                .iter()
                .zip(first.iter_mut())
                .zip(last.iter_mut())
                .enumerate()
            {
                let Some((value, at)) = level.watched_now() else {
                    continue;
                };
                if last.replace(value).is_some_and(|was| was != value) {
                    still_since = std::time::Instant::now();
                }
                let read_ns = monotonic_ns();
                if value >= at {
                    reached.get_or_insert(index);
                }
                seen = (value, at);
                let below = if margin == 0 { WATCH_SLACK } else { margin };
                let near = value >= at.saturating_sub(below.max(level.watch_margin));
                all_below &= !near;
                if near {
                    pause_ns =
                        pause_ns.min(pace_ns(at, level.watch_margin, value, read_ns, *first));
                }
                first.get_or_insert((value, read_ns));
            }
            // After the reads: the moment the crossing was seen.
            let now_ns = monotonic_ns();
            if let Some(index) = reached {
                match self.kill_if_crossed(source, now_ns, Some((told_ns, index))) {
                    Look::Killed => {
                        tracing::debug!(
                            source = %source,
                            told_ns,
                            looks,
                            watched_us = started.elapsed().as_micros() as u64,
                            cpu_us = thread_cpu_ns().saturating_sub(cpu_start) / 1000,
                            usage_at_level_us = usage_at_level
                                .map_or(0, |at| at.elapsed().as_micros() as u64),
                            paced_sleeps,
                            overslept_us = overslept.as_micros() as u64,
                            "hot path: the watch saw a level reached and killed"
                        );
                        return true;
                    }
                    Look::Disarmed => return false,
                    Look::NotReached => {
                        usage_at_level.get_or_insert_with(std::time::Instant::now);
                    }
                }
            } else if all_below {
                // Under every early level: it fired on the way down, or usage fell back.
                tracing::debug!(
                    source = %source,
                    told_ns,
                    looks,
                    usage = seen.0,
                    level = seen.1,
                    margin,
                    "hot path: watch ended, the usage is below every early level"
                );
                return false;
            }
            looks += 1;
            // The thread's CPU clock costs a system call (less than a read of a level):
            // looked at every 8 reads while spinning and after every read once the watch
            // sleeps between them, so a watch overruns its allowance by a few reads at most.
            let now = std::time::Instant::now();
            let paced = pause_ns != 0 && pause_ns != u64::MAX;
            let check = looks.is_multiple_of(8) || now >= spin_until || paced;
            if check && thread_cpu_ns().saturating_sub(cpu_start) >= allowance {
                tracing::debug!(source = %source, told_ns, "hot path: watch ended, its CPU budget is spent");
                self.last_watch_end_ns
                    .store(monotonic_ns(), std::sync::atomic::Ordering::Relaxed);
                return false;
            }
            if now >= until {
                tracing::debug!(source = %source, told_ns, "hot path: watched a level, not reached within the window");
                self.last_watch_end_ns
                    .store(monotonic_ns(), std::sync::atomic::Ordering::Relaxed);
                return false;
            }
            if paced {
                let asked = Duration::from_nanos(pause_ns);
                let from = std::time::Instant::now();
                std::thread::sleep(asked);
                paced_sleeps += 1;
                overslept = overslept.max(from.elapsed().saturating_sub(asked));
            } else if now < spin_until {
                if now.saturating_duration_since(still_since) < WATCH_STILL {
                    std::hint::spin_loop();
                } else if let Some((left, on)) = moves.leave_this_cpu() {
                    tracing::debug!(
                        source = %source,
                        told_ns,
                        left,
                        on,
                        still_us = now.saturating_duration_since(still_since).as_micros() as u64,
                        "hot path: the usage stood still while the watch spun; it left its CPU (the allocator may wait behind it there)"
                    );
                    still_since = std::time::Instant::now();
                } else {
                    // It has moved as often as it may, and the usage still stands:
                    // whatever holds the allocator back, the spin does not help it, and
                    // spent the allowance before the level came (the kill then waited
                    // for the detector's record at the level, 100-400 µs late, in the
                    // host race beside 1000 pods, the other CPU busy with a
                    // synchronize). It sleeps between its looks until the usage moves.
                    std::thread::sleep(WATCH_POLL);
                }
            } else {
                std::thread::sleep(WATCH_POLL);
            }
        }
    }
}

/// When a watch rehearses the kill again, after one that began at `began` and took
/// `took`: [`WATCH_REHEARSE`] later, or later still where a rehearsal is slow (an
/// emulated machine's system calls), so that rehearsals take at most a tenth of the watch.
pub(super) fn rehearse_due(began: std::time::Instant, took: Duration) -> std::time::Instant {
    began + WATCH_REHEARSE.max(took * 10)
}

/// How long a watch may sleep before it looks again at a level `at`, whose watched value
/// (see `Level::watched_now`) was `value` at `now_ns` (`first`: the watch's first read of
/// it, and when); 0: look again at once.
///
/// A cgroup's level (`watch_margin` 0): its notifier fires a few pages off, and the watch
/// is there to kill within microseconds of the level. It looks again at once while the
/// usage rises fast enough to get there within [`WATCH_CREEP`], and within
/// [`WATCH_SPIN_NEAR`] of it. Farther below a usage that creeps, it sleeps half the time
/// an allocator rising at [`WATCH_FASTEST_RISE`] takes to get there, and at most
/// [`WATCH_PACE_NEAR_MAX`], so that the allocator has the watch's CPU meanwhile.
///
/// The node's level is told by a notifier on the pods cgroup, megabytes off either way,
/// and meminfo costs more to read: the watch sleeps half the time the node, rising as
/// fast as it has since the watch's first look, takes to get there, and at most
/// [`WATCH_PACE_MAX`] (also while it does not rise), so that its CPU budget lasts as far
/// as the level.
pub(super) fn pace_ns(
    at: u64,
    watch_margin: u64,
    value: u64,
    now_ns: u64,
    first: Option<(u64, u64)>,
) -> u64 {
    if value >= at {
        return 0;
    }
    // The time to the level at the rise seen since the watch's first read.
    let to_level_ns = first.and_then(|(first_value, first_ns)| {
        let (rise, elapsed) = (
            value.saturating_sub(first_value),
            now_ns.saturating_sub(first_ns),
        );
        (rise > 0 && elapsed > 0)
            .then(|| u128::from(at - value) * u128::from(elapsed) / u128::from(rise))
    });
    if watch_margin == 0 {
        // Standing still is left to the spin (see `CpuMoves`).
        let to_go = at - value;
        let creeping = to_level_ns.is_some_and(|ns| ns > WATCH_CREEP.as_nanos());
        if to_go <= WATCH_SPIN_NEAR || !creeping {
            return 0;
        }
        let at_fastest_ns = u128::from(to_go) * 1_000_000_000 / u128::from(WATCH_FASTEST_RISE);
        return u64::try_from(at_fastest_ns / 2)
            .unwrap_or(u64::MAX)
            .min(WATCH_PACE_NEAR_MAX.as_nanos() as u64);
    }
    let max = WATCH_PACE_MAX.as_nanos() as u64;
    match (first, to_level_ns) {
        // One more read gives a rate.
        (None, _) => 0,
        // Not rising.
        (Some(_), None) => max,
        (Some(_), Some(ns)) => u64::try_from(ns / 2).unwrap_or(u64::MAX).min(max),
    }
}
