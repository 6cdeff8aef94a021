//! The pick on fresh working sets at a confirmed crossing, the kill, and the reap.
use super::*;

impl HotPath {
    /// The victim at a crossing of `threshold`'s level (`None`: a level armed with no
    /// threshold, the first hard memory signal configured), by the policy's ranking on
    /// the candidates' working sets read now: its index among the candidates, its working
    /// set, and what the eviction is worded from after the kill ([`Pick::decision`]).
    fn pick(armed: &Armed, threshold: Option<ArmedThreshold>) -> Option<Pick> {
        let config = armed.config.clone()?;
        let signal = match threshold {
            Some(t) => t.signal,
            None => [Signal::MemoryAvailable, Signal::AllocatableMemoryAvailable]
                .into_iter()
                .find(|s| {
                    config
                        .thresholds
                        .iter()
                        .any(|t| t.signal == *s && t.is_hard())
                })?,
        };
        if !config
            .thresholds
            .iter()
            .any(|t| t.signal == signal && t.is_hard())
        {
            return None;
        }
        // The victim: the first by the policy's memory key among those read, critical
        // pods left out, the earlier of equals (as `hard_eviction_victim` ranks them; the
        // pods it needs are built after the kill, and checked against this pick there).
        let mut victim: Option<(usize, MemoryRankKey)> = None;
        // Read in the order of the last ranking, and only as far as needed: once, for
        // every candidate not read, what its parent's usage leaves beyond its siblings
        // read could not make it rank before the victim so far, the rest cannot change
        // the pick (a key only falls as the working set grows, and of equal keys the
        // earlier candidate goes first). A critical pod read never ends the reads: it
        // cannot be the victim. Each parent's usage is read once, when first needed.
        let mut bounds = Bounds::new(&armed.holders);
        let mut read: Vec<(usize, u64)> = Vec::with_capacity(armed.candidates.len());
        for (index, candidate) in armed.candidates.iter().enumerate() {
            if let Some((_, best)) = victim
                && armed.candidates[index..].iter().all(|other| {
                    bounds
                        .left_for(other)
                        .is_some_and(|left| best <= other.key_at(left))
                })
            {
                break;
            }
            // A candidate whose cgroup cannot be read is gone: nobody to kill there.
            let Some((usage, working_set)) = candidate.usage_now() else {
                continue;
            };
            bounds.note_read(candidate, usage);
            let key = candidate.key_at(working_set);
            if !candidate.critical && victim.is_none_or(|(_, best)| key < best) {
                victim = Some((read.len(), key));
            }
            read.push((index, working_set));
        }
        let (position, _) = victim?;
        let (index, working_set) = read[position];
        Some(Pick {
            index,
            position,
            working_set,
            read,
            signal,
            config,
        })
    }
}

/// What a rehearsal of the kill found (see [`HotPath::rehearse`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Rehearsal {
    /// The level its confirmation found reached, if one was: the watch kills there.
    pub(super) reached: Option<usize>,
    /// How many of the picked pod's processes exist (0 without a pick).
    pub(super) alive: usize,
}

impl HotPath {
    /// Runs the kill's path short of the kill, for a watch (every [`WATCH_REHEARSE`]):
    /// the confirmation's reads of every level through its own descriptors, the pick's
    /// reads of the candidates, and, through the pidfds of the pod it picks, signal 0 (a
    /// check that the process exists; nothing is sent). Nothing is decided or written
    /// here. What it keeps from going cold is the code and data the kill runs, in the
    /// agent and in the kernel; see [`WATCH_REHEARSE`]. Its confirmation reads the
    /// working set, which the watch's looks do not: a level it finds reached (the page
    /// cache went while the usage stood) is the watch's to kill at.
    pub(super) fn rehearse(&self) -> Rehearsal {
        let armed = self.lock();
        let crossing = Self::crossed(&armed.levels, None).ok();
        // Short of a crossing, the pick a crossing of the first threshold armed would make.
        let threshold = match crossing {
            Some(crossing) => crossing.threshold,
            None => armed.levels.iter().find_map(|level| level.threshold),
        };
        let alive = Self::pick(&armed, threshold)
            .map_or(0, |pick| armed.candidates[pick.index].switch.rehearse());
        let reached = crossing.map(|crossing| crossing.level);
        self.rehearsals
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Rehearsal { reached, alive }
    }

    /// How many times the watches rehearsed the kill.
    pub(crate) fn rehearsals(&self) -> u64 {
        self.rehearsals.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// The containers' memory in the eviction message is that of the kill, not of the last
/// synchronize: a pod's only container holds what the pod holds (beside, on containerd,
/// its sandbox's pause process), and with several containers none is named, since none
/// was read at the kill.
fn fresh_container_memory(pod: &mut PodWithStats, working_set: u64) {
    match pod.stats.containers.as_mut_slice() {
        [only] => only.memory_working_set_bytes = Some(working_set),
        containers => {
            for container in containers {
                container.memory_working_set_bytes = None;
            }
        }
    }
}

/// What the candidates' parents hold beyond the candidates read so far, during one pick.
struct Bounds<'a> {
    holders: &'a [CgroupReader],
    /// Per holder: its usage (read when first needed; `None` inside if it failed).
    usage: Vec<Option<Option<u64>>>,
    /// Per holder: the usage of its candidates read.
    read: Vec<u64>,
}

impl<'a> Bounds<'a> {
    fn new(holders: &'a [CgroupReader]) -> Bounds<'a> {
        Bounds {
            holders,
            usage: vec![None; holders.len()],
            read: vec![0; holders.len()],
        }
    }

    fn note_read(&mut self, candidate: &Candidate, usage: u64) {
        if let Some(read) = candidate.holder.and_then(|h| self.read.get_mut(h)) {
            *read = read.saturating_add(usage);
        }
    }

    /// The most memory `candidate` (not read) can hold now; `None` if unknown.
    fn left_for(&mut self, candidate: &Candidate) -> Option<u64> {
        let h = candidate.holder?;
        let holder = self.holders.get(h)?;
        let usage = *self.usage[h].get_or_insert_with(|| holder.usage_bytes("").ok());
        Some(usage?.saturating_sub(self.read[h]))
    }
}

/// The hot path's choice at a crossing.
struct Pick {
    /// Among the candidates, and among those read (`read`).
    index: usize,
    position: usize,
    /// The victim's working set as read.
    working_set: u64,
    /// The candidates read, in order: their index and working set.
    read: Vec<(usize, u64)>,
    signal: Signal,
    config: Arc<EvictionConfig>,
}

impl Pick {
    /// The eviction, in the kubelet's words, on the numbers read at the crossing (worded
    /// after the kill: the pods' copies and the message cost tens of microseconds). The
    /// policy's ranking runs again on those pods; were its first not the pod killed, the
    /// decision is still that kill's, and the disagreement is logged as the bug it is.
    fn decision(&self, armed: &Armed, crossing: &Crossing) -> Option<EvictionDecision> {
        let pods = self
            .read
            .iter()
            .map(|&(index, working_set)| {
                let mut pod = armed.candidates[index].pod.clone();
                pod.stats.memory_working_set_bytes = Some(working_set);
                fresh_container_memory(&mut pod, working_set);
                pod
            })
            .collect();
        let input = SyncInput {
            observations: crossing.observations(),
            pods,
            fs_layout: armed.fs_layout,
        };
        let ranked = hard_eviction_victim(&input, self.signal);
        if ranked != Some(self.position) {
            tracing::error!(
                killed = self.position,
                ranked = ?ranked,
                "hot path: the policy's ranking on the numbers read picks another pod than the one killed"
            );
        }
        hard_eviction_of(&self.config, &input, self.signal, self.position)
    }
}

/// On a thread of its own: raises the killed victim's threads to nice -20 at once (its
/// exit frees its memory on its own CPU time), then reaps its memory
/// (`process_mrelease`) if the victim has not freed it by itself [`REAP_AFTER`] the
/// kill: the reap unmaps the memory from the calling thread and takes as long as freeing
/// it does (60-90 ms for the bench's hog of about 370 MiB), and a notifier thread must
/// not be deaf, nor its wake for the booking held back, that long. Logs how long it took.
fn reap(victim: Candidate, pod: String, killed_ns: u64) {
    let spawned = std::thread::Builder::new()
        .name(REAPER_THREAD.into())
        .spawn(move || {
            let hastened = victim.switch.hasten_exit();
            std::thread::sleep(REAP_AFTER);
            let reaped = victim.switch.release_memory();
            tracing::info!(
                pod = %pod,
                hastened,
                reaped,
                reap_us = monotonic_ns().saturating_sub(killed_ns) / 1000,
                "hot path: victim's memory reaped"
            );
        });
    if let Err(err) = spawned {
        // The victim still exits and frees its memory itself, only later.
        tracing::warn!("hot path: no thread to reap the victim's memory: {err}");
    }
}

/// How long a killed victim has to free its memory by itself before it is reaped (as the
/// kernel's OOM reaper waits before it reaps). A reap started at the kill races the
/// victim's exit over the same memory: in the bench's race beside 110 pods the working set
/// then came back under the threshold only when the whole reap ended (60-90 ms) in half
/// the trials; left to exit by itself, SIGKILL->freed was 7.8 / 14.5 ms p50 / p99. The reap
/// stays for a victim that cannot exit (blocked in the kernel, frozen).
pub(crate) const REAP_AFTER: Duration = Duration::from_millis(20);

/// Name of the thread that reaps a killed victim's memory.
pub(crate) const REAPER_THREAD: &str = "monitor-reaper";

/// What one look at the levels found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Look {
    Killed,
    /// No hard level reached by the working set (or the kill could not be written).
    NotReached,
    /// Nobody to kill.
    Disarmed,
}

impl HotPath {
    /// Kills the victim picked on fresh working sets if a hard level is reached now.
    /// `watched`: for a watch, when the notifier that started it told the hot path (for
    /// the log) and which of the levels it saw reached (looked at first).
    pub(super) fn kill_if_crossed(
        &self,
        source: WakeSource,
        detected_ns: u64,
        watched: Option<(u64, usize)>,
    ) -> Look {
        let watched_from_ns = watched.map(|(told_ns, _)| told_ns);
        let mut armed = self.lock();
        if armed.candidates.is_empty() {
            tracing::debug!(
                source = %source,
                detected_ns,
                "hot path: told, but no victim is armed: {}",
                armed.unarmed.as_str()
            );
            return Look::Disarmed;
        }
        let locked_ns = monotonic_ns();
        // This thread's CPU time from here to the kill, beside the wall time: a kill that
        // took long while its thread ran the whole time was computing or waiting on a
        // CPU it held; one whose thread ran little was kept off its CPU.
        let locked_cpu_ns = super::watch::thread_cpu_ns();
        let crossing = match Self::crossed(&armed.levels, watched.map(|(_, level)| level)) {
            Ok(crossing) => crossing,
            Err(nearest) => {
                if watched_from_ns.is_some() {
                    // A watch looks again shortly; its log line comes at its end.
                    return Look::NotReached;
                }
                // A notifier armed on usage also fires for page cache, and on the way down.
                let (working_set, level) = nearest.unwrap_or_default();
                tracing::debug!(
                    source = %source,
                    detected_ns,
                    working_set,
                    level,
                    "hot path: told, but no hard level is reached"
                );
                return Look::NotReached;
            }
        };
        let confirmed_ns = monotonic_ns();
        let Some(pick) = Self::pick(&armed, crossing.threshold) else {
            tracing::debug!(source = %source, detected_ns, "hot path: a level is reached, but no candidate is left to kill");
            return Look::Disarmed;
        };
        let (index, victim_working_set) = (pick.index, pick.working_set);
        let picked_ns = monotonic_ns();
        // Shadow mode: the same pick, and the same timings up to here; nothing written.
        let fired = if self.shadow {
            Ok(())
        } else {
            armed.candidates[index].switch.fire()
        };
        let killed_ns = monotonic_ns();
        let kill_cpu_us = super::watch::thread_cpu_ns().saturating_sub(locked_cpu_ns) / 1000;
        let decision = pick.decision(&armed, &crossing);
        match (fired, decision) {
            (Ok(()), Some(decision)) => {
                // Disarmed until a synchronize has booked this kill and it has ended.
                let mut candidates = std::mem::take(&mut armed.candidates);
                armed.unarmed = super::Unarmed::Killed;
                let victim = candidates.swap_remove(index);
                let path = victim.switch.path.clone();
                armed.fired.push(HotKill {
                    decision: decision.clone(),
                    source,
                    detected_ns,
                    killed_ns,
                    level_bytes: crossing.level_working_set,
                    working_set_bytes: crossing.working_set,
                    victim_working_set_bytes: victim_working_set,
                    signal_available: crossing
                        .threshold
                        .and_then(|t| crossing.observations().get(&t.signal).map(|o| o.available)),
                    candidates_read: pick.read.len(),
                    path: path.clone(),
                    shadow: self.shadow,
                });
                drop(armed);
                drop(candidates);
                if self.shadow {
                    tracing::info!(
                        pod = %decision.pod_key,
                        source = %source,
                        detected_ns,
                        at_ns = killed_ns,
                        decision_us = killed_ns.saturating_sub(detected_ns) / 1000,
                        candidates_read = pick.read.len(),
                        level_bytes = crossing.level_working_set,
                        working_set_bytes = crossing.working_set,
                        victim_working_set_bytes = victim_working_set,
                        "hot path (shadow): would kill; nothing written"
                    );
                    return Look::Killed;
                }
                reap(victim, decision.pod_key.clone(), killed_ns);
                tracing::info!(
                    pod = %decision.pod_key,
                    source = %source,
                    detected_ns,
                    at_ns = killed_ns,
                    watched_from_ns = watched_from_ns.unwrap_or(0),
                    // Where the time from the look to the kill went: the lock, the
                    // confirmation (the levels' reads), the pick (the candidates' reads
                    // and the ranking) and the write (the kernel signals every process
                    // of the cgroup in it).
                    lock_us = locked_ns.saturating_sub(detected_ns) / 1000,
                    confirm_us = confirmed_ns.saturating_sub(locked_ns) / 1000,
                    pick_us = picked_ns.saturating_sub(confirmed_ns) / 1000,
                    candidates_read = pick.read.len(),
                    write_us = killed_ns.saturating_sub(picked_ns) / 1000,
                    // CPU time this thread ran from the lock to the kill.
                    cpu_us = kill_cpu_us,
                    level_bytes = crossing.level_working_set,
                    working_set_bytes = crossing.working_set,
                    victim_working_set_bytes = victim_working_set,
                    "hot path: cgroup.kill written"
                );
                // Its event, metric and eviction are booked by the synchronize this kill
                // wakes (see EvictionSync::book_hot_kill).
                Look::Killed
            }
            (Err(err), _) => {
                // The normal path evicts at the synchronize this wake causes.
                tracing::warn!(
                    pod = %armed.candidates[index].switch.pod_key,
                    "hot path: writing {} failed: {err}",
                    armed.candidates[index].switch.path.display()
                );
                Look::NotReached
            }
            (Ok(()), None) => {
                // Cannot happen: the pick checked that the signal has a hard threshold.
                tracing::error!(
                    pod = %armed.candidates[index].switch.pod_key,
                    "hot path: killed, but the policy words no eviction for it"
                );
                Look::Killed
            }
        }
    }
}
