//! Memory relief in a synchronize (the policy's part is [`crate::policy::relief`]): when
//! a memory signal falls below its relief level, the pods' page cache is reclaimed
//! through their cgroups' `memory.reclaim` (cgroup v2, Linux 5.19+), BestEffort pods
//! first, in steps of `memoryRelief.step`. A step that makes the pod's memory stall (PSI
//! `full` of its `memory.pressure`) for more than `memoryRelief.maxStall` of the step's
//! time stops the pass: the pod was refaulting what was taken, and taking more would
//! only slow it. The loop observes the node afresh after a pass, so the eviction pass
//! that follows judges the thresholds on what relief left.
//!
//! Relief never runs on the hot path, and a pass is not planned for a signal whose hard
//! threshold is met: that is answered by eviction, exactly as without relief.
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::*;
use crate::decisions::Decision;
use crate::events::EventReason;
use crate::policy::relief::{self, ReliefCandidate, ReliefPlan, ReliefSettings};
use crate::policy::types::QosClass;

/// The longest one pass writes for: the synchronize waits for it. (The hot path does not:
/// it kills on its own thread. With the hot path off, a hard crossing that comes during a
/// pass is answered when the pass ends, at most this much later.)
const PASS_DEADLINE: Duration = Duration::from_secs(1);

/// How a pass ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReliefEnd {
    /// The pods gave back what the signal needed.
    Relieved,
    /// A step made a pod's memory stall past `maxStall`.
    Stalled,
    /// The pods gave all they would (or the pass ran out of time); the signal is short.
    Exhausted,
    /// `memory.reclaim` could not be written.
    Failed,
}

impl ReliefEnd {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ReliefEnd::Relieved => "relieved",
            ReliefEnd::Stalled => "stalled",
            ReliefEnd::Exhausted => "exhausted",
            ReliefEnd::Failed => "failed",
        }
    }
}

/// What one pod gave in a pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Given {
    pub(crate) pod_key: String,
    pub(crate) qos: QosClass,
    pub(crate) asked: u64,
    /// How much its memory cgroup's working set fell across the writes.
    pub(crate) freed: u64,
}

/// One relief pass carried out.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ReliefPass {
    pub(crate) plan: ReliefPlan,
    pub(crate) given: Vec<Given>,
    pub(crate) end: ReliefEnd,
    /// Why it ended where it did, in words ("default/web stalled 23% of a step").
    pub(crate) detail: String,
    pub(crate) took: Duration,
}

impl ReliefPass {
    pub(crate) fn freed(&self) -> u64 {
        self.given.iter().map(|g| g.freed).sum()
    }
}

/// Relief as one synchronize runs it.
#[derive(Debug)]
pub(crate) struct Relief {
    pub(crate) settings: ReliefSettings,
    /// No pass before this time: one that stalled, ran dry or failed is not tried again
    /// before a housekeeping interval has passed.
    pub(crate) not_before: Option<Time>,
}

impl EvictionSync {
    /// Memory relief: on (with its settings) or off.
    pub(crate) fn with_relief(mut self, settings: Option<ReliefSettings>) -> Self {
        self.relief = settings.map(|settings| Relief {
            settings,
            not_before: None,
        });
        self
    }

    /// A relief pass on `node`, when a memory signal is below its relief level; the loop
    /// observes afresh after one that reclaimed (or tried). In shadow mode the pass is only
    /// reported (a `WouldReclaim` event), and `None` is returned.
    pub(crate) fn relieve(&mut self, node: &NodeObservation, now: Time) -> Option<ReliefPass> {
        let relief = self.relief.as_ref()?;
        if relief.not_before.is_some_and(|at| now < at) {
            return None;
        }
        let settings = relief.settings;
        let observations = self.node_observations(node, fs_layout(node), now);
        let need = relief::need(&settings, &self.kubelet.eviction.thresholds, &observations)?;
        let (candidates, dirs) = blocking(|| self.relief_candidates());
        let plan = relief::plan(need, &candidates)?;
        if self.shadow.is_some() {
            self.would_relieve(&plan, &observations);
            if let Some(relief) = &mut self.relief {
                relief.not_before = Some(now + self.kubelet.housekeeping_interval);
            }
            return None;
        }
        let pass = blocking(|| carry_out(&plan, &dirs, &settings));
        self.book_relief(&pass, &observations);
        if let Some(relief) = &mut self.relief {
            relief.not_before =
                (pass.end != ReliefEnd::Relieved).then(|| now + self.kubelet.housekeeping_interval);
        }
        Some(pass)
    }

    /// The pods relief may ask, with their page cache as read now, and their memory
    /// cgroups. Guaranteed pods and pods being evicted are left out.
    fn relief_candidates(&self) -> (Vec<ReliefCandidate>, HashMap<String, PathBuf>) {
        let mut candidates = Vec::new();
        let mut dirs = HashMap::new();
        for (pod, dir) in self.ports.pods.memory_cgroups() {
            let key = pod.key();
            let qos = pod.qos_class();
            if qos == QosClass::Guaranteed || self.in_flight.iter().any(|e| e.pod_key == key) {
                continue;
            }
            let Ok(file_bytes) = file_bytes(&dir) else {
                continue;
            };
            candidates.push(ReliefCandidate {
                pod_key: key.clone(),
                qos,
                file_bytes,
            });
            dirs.insert(key, dir);
        }
        (candidates, dirs)
    }

    /// Event, metrics, log and decision record of a pass.
    fn book_relief(&self, pass: &ReliefPass, observations: &Observations) {
        let message = relief_message(pass);
        // An event is logged as it is recorded; a pass that wrote and freed nothing is
        // only logged.
        match pass.end {
            ReliefEnd::Failed => tracing::warn!("{message}"),
            ReliefEnd::Exhausted if pass.freed() == 0 => tracing::info!("{message}"),
            _ => self
                .state
                .event(EventReason::MemoryReclaimed, "node", message.clone()),
        }
        {
            let mut state = self.state.lock();
            if let Some(status) = &mut state.memory_relief {
                status.last_pass = Some((crate::state::now_rfc3339(), message.clone()));
            }
            let metrics = &mut state.metrics;
            for given in &pass.given {
                *metrics
                    .memory_reclaimed_bytes
                    .entry(given.qos.as_str().to_string())
                    .or_default() += given.freed;
            }
            *metrics
                .memory_relief_passes
                .entry(pass.end.as_str().to_string())
                .or_default() += 1;
            metrics
                .memory_relief_duration
                .observe(pass.took.as_secs_f64());
        }
        self.state
            .record_decision(relief_record(&pass.plan, message, false, observations));
    }

    /// Shadow mode: the pass that would have run, reported.
    fn would_relieve(&self, plan: &ReliefPlan, observations: &Observations) {
        let pods: Vec<String> = plan
            .requests
            .iter()
            .map(|r| {
                format!(
                    "{} ({}, {})",
                    r.pod_key,
                    r.qos.as_str(),
                    format_bytes(r.bytes)
                )
            })
            .collect();
        let message = format!(
            "shadow: would reclaim {} of page cache for {} ({}) from {}; nothing written",
            format_bytes(plan.requested_bytes()),
            plan.need.signal.as_str(),
            level_text(plan),
            pods.join(", ")
        );
        if let Some(status) = &mut self.state.lock().memory_relief {
            status.last_pass = Some((crate::state::now_rfc3339(), message.clone()));
        }
        self.state
            .event(EventReason::WouldReclaim, "node", message.clone());
        self.state
            .lock()
            .metrics
            .count_shadow_action("reclaim", plan.need.signal.as_str());
        self.state
            .record_decision(relief_record(plan, message, true, observations));
    }
}

/// How the pods cgroup and the node stand against the relief level, in words.
fn level_text(plan: &ReliefPlan) -> String {
    let need = &plan.need;
    format!(
        "available {} below the relief level {} = threshold {} + margin",
        format_bytes(need.available.max(0) as u64),
        format_bytes(need.relief_level.max(0) as u64),
        format_bytes(need.threshold.max(0) as u64)
    )
}

fn relief_message(pass: &ReliefPass) -> String {
    let pods: Vec<String> = pass
        .given
        .iter()
        .map(|g| {
            format!(
                "{} ({}, {} of {} asked)",
                g.pod_key,
                g.qos.as_str(),
                format_bytes(g.freed),
                format_bytes(g.asked)
            )
        })
        .collect();
    format!(
        "memory relief for {} ({}): reclaimed {} of page cache in {} ms from {}; {}: {}",
        pass.plan.need.signal.as_str(),
        level_text(&pass.plan),
        format_bytes(pass.freed()),
        pass.took.as_millis(),
        if pods.is_empty() {
            "no pod".to_string()
        } else {
            pods.join(", ")
        },
        pass.end.as_str(),
        pass.detail
    )
}

fn relief_record(
    plan: &ReliefPlan,
    message: String,
    shadow: bool,
    observations: &Observations,
) -> Decision {
    record::node_action("relieve", plan.need.signal, message, shadow, observations)
}

fn format_bytes(bytes: u64) -> String {
    format_value_bytes(i64::try_from(bytes).unwrap_or(i64::MAX))
}

/// Carries out `plan`: each pod in turn, in steps, until the pods gave what the signal
/// needs, a step stalls a pod past `settings.max_stall`, or the pass's time is up.
fn carry_out(
    plan: &ReliefPlan,
    dirs: &HashMap<String, PathBuf>,
    settings: &ReliefSettings,
) -> ReliefPass {
    let started = std::time::Instant::now();
    let mut given = Vec::new();
    let mut freed_total = 0u64;
    let mut end = ReliefEnd::Exhausted;
    let mut detail = "the pods gave what they would".to_string();
    'pods: for request in &plan.requests {
        let Some(dir) = dirs.get(&request.pod_key) else {
            continue;
        };
        let mut pod = Given {
            pod_key: request.pod_key.clone(),
            qos: request.qos,
            asked: 0,
            freed: 0,
        };
        while pod.asked < request.bytes {
            if freed_total >= plan.need.wanted_bytes {
                break;
            }
            if started.elapsed() >= PASS_DEADLINE {
                detail = format!("the pass ran out of its {} s", PASS_DEADLINE.as_secs());
                given.push(pod);
                break 'pods;
            }
            let step = (request.bytes - pod.asked).min(settings.step_bytes.max(1));
            match step_once(dir, step) {
                Ok(outcome) => {
                    pod.asked += step;
                    pod.freed += outcome.freed;
                    freed_total += outcome.freed;
                    if outcome.stall_share > settings.max_stall {
                        end = ReliefEnd::Stalled;
                        detail = format!(
                            "{} stalled {:.0}% of a step (bound {:.0}%)",
                            request.pod_key,
                            outcome.stall_share * 100.0,
                            settings.max_stall * 100.0
                        );
                        given.push(pod);
                        break 'pods;
                    }
                    if !outcome.complete {
                        // The kernel found no more to take here at this priority.
                        break;
                    }
                }
                Err(err) => {
                    end = ReliefEnd::Failed;
                    detail = format!("{}: {err}", dir.join("memory.reclaim").display());
                    given.push(pod);
                    break 'pods;
                }
            }
        }
        given.push(pod);
    }
    if end == ReliefEnd::Exhausted && freed_total >= plan.need.wanted_bytes {
        end = ReliefEnd::Relieved;
        detail = format!(
            "the pods gave the {} wanted",
            format_bytes(plan.need.wanted_bytes)
        );
    }
    ReliefPass {
        plan: plan.clone(),
        given,
        end,
        detail,
        took: started.elapsed(),
    }
}

/// One write to a pod's `memory.reclaim`, with what it did.
struct StepOutcome {
    /// The fall of the cgroup's working set across the write.
    freed: u64,
    /// The PSI `full` stall of the cgroup over the write, as a share of its time.
    stall_share: f64,
    /// The kernel reclaimed all that was asked (it answers EAGAIN when it could not).
    complete: bool,
}

fn step_once(dir: &Path, bytes: u64) -> std::io::Result<StepOutcome> {
    let before = working_set_bytes(dir)?;
    let stall_before = full_stall_us(dir).unwrap_or(0);
    let started = std::time::Instant::now();
    let complete = match reclaim(dir, bytes) {
        Ok(()) => true,
        Err(err) if err.raw_os_error() == Some(nix::libc::EAGAIN) => false,
        Err(err) => return Err(err),
    };
    let took_us = started.elapsed().as_micros().max(1) as f64;
    let stall = full_stall_us(dir)
        .unwrap_or(stall_before)
        .saturating_sub(stall_before);
    let after = working_set_bytes(dir)?;
    Ok(StepOutcome {
        freed: before.saturating_sub(after),
        stall_share: stall as f64 / took_us,
        complete,
    })
}

/// The cgroup's working set as the memory signals count it: usage − inactive_file.
/// What relief frees is measured on it, so a step that only took pages the signal did
/// not count (inactive file pages) frees nothing.
fn working_set_bytes(dir: &Path) -> std::io::Result<u64> {
    let usage = usage_bytes(dir)?;
    let path = dir.join("memory.stat");
    let text = std::fs::read_to_string(&path)?;
    let inactive = stat_value(&text, "inactive_file")
        .ok_or_else(|| bad_file(&path, "no `inactive_file` line"))?;
    Ok(usage.saturating_sub(inactive))
}

/// The cgroup's page cache reclaim can take without swap: `file` of memory.stat less
/// `shmem` (tmpfs and shared memory count as file pages but can only go to swap).
pub(crate) fn file_bytes(dir: &Path) -> std::io::Result<u64> {
    let path = dir.join("memory.stat");
    let text = std::fs::read_to_string(&path)?;
    let file = stat_value(&text, "file").ok_or_else(|| bad_file(&path, "no `file` line"))?;
    Ok(file.saturating_sub(stat_value(&text, "shmem").unwrap_or(0)))
}

/// The value of `key` in a flat-keyed file (`memory.stat`).
fn stat_value(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (name, value) = line.split_once(' ')?;
        (name == key).then(|| value.trim().parse().ok()).flatten()
    })
}

/// Microseconds every task of the cgroup stalled on memory (`full ... total=` of its
/// memory.pressure).
pub(crate) fn full_stall_us(dir: &Path) -> std::io::Result<u64> {
    let path = dir.join("memory.pressure");
    let text = std::fs::read_to_string(&path)?;
    full_total(&text).ok_or_else(|| bad_file(&path, "no `full ... total=` line"))
}

fn full_total(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("full "))?;
    line.split_whitespace()
        .find_map(|field| field.strip_prefix("total="))?
        .parse()
        .ok()
}

fn usage_bytes(dir: &Path) -> std::io::Result<u64> {
    let path = dir.join("memory.current");
    let text = std::fs::read_to_string(&path)?;
    text.trim()
        .parse()
        .map_err(|_| bad_file(&path, "not a number of bytes"))
}

/// Asks the kernel to reclaim `bytes` from the cgroup. EAGAIN: it reclaimed less.
fn reclaim(dir: &Path, bytes: u64) -> std::io::Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.join("memory.reclaim"))?;
    file.write_all(bytes.to_string().as_bytes())
}

fn bad_file(path: &Path, what: &str) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!("{}: {what}", path.display()),
    )
}

/// Whether memory relief can run on this node: `None` when it can, or why not (said at
/// start, and shown by `monitor status`). `dir` is the pods cgroup's directory (or the
/// memory root).
pub(crate) fn unsupported(version: crate::observe::CgroupVersion, dir: &Path) -> Option<String> {
    if version != crate::observe::CgroupVersion::V2 {
        return Some(
            "cgroup v1 has no memory.reclaim: relief needs cgroup v2 (Linux 5.19+); nothing is reclaimed, and the thresholds act as without it".into(),
        );
    }
    (!dir.join("memory.reclaim").exists()).then(|| {
        format!(
            "{} is missing: this kernel has no memory.reclaim (Linux 5.19+); the thresholds act as without relief",
            dir.join("memory.reclaim").display()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernel_files_are_read_as_the_kernel_writes_them() {
        let stat = "anon 1000\nfile 41943040\nkernel 5\nshmem 1048576\nfile_mapped 10\n";
        assert_eq!(stat_value(stat, "file"), Some(41943040));
        assert_eq!(stat_value(stat, "shmem"), Some(1048576));
        assert_eq!(stat_value(stat, "file_dirty"), None);
        assert_eq!(stat_value("file x\n", "file"), None);
        let pressure = "some avg10=0.00 avg60=0.00 avg300=0.00 total=120\n\
                        full avg10=0.00 avg60=0.00 avg300=0.00 total=77\n";
        assert_eq!(full_total(pressure), Some(77));
        assert_eq!(full_total("some avg10=0.00 total=3\n"), None);
        assert_eq!(full_total("full avg10=0.00 total=x\n"), None);
    }

    #[test]
    fn cgroup_v1_is_unsupported_and_says_why() {
        let why = unsupported(crate::observe::CgroupVersion::V1, Path::new("/nonexistent"))
            .expect("v1 is unsupported");
        assert!(
            why.contains("cgroup v1") && why.contains("memory.reclaim"),
            "{why}"
        );
        let why = unsupported(crate::observe::CgroupVersion::V2, Path::new("/nonexistent"))
            .expect("no memory.reclaim");
        assert!(why.contains("/nonexistent/memory.reclaim"), "{why}");
    }

    #[test]
    fn a_missing_cgroup_fails_the_step_with_its_path() {
        let dir = tempfile::tempdir().unwrap();
        let err = step_once(&dir.path().join("gone"), 1 << 20)
            .err()
            .expect("no cgroup");
        assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
        let err = file_bytes(dir.path()).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
        std::fs::write(dir.path().join("memory.stat"), "anon 3\n").unwrap();
        let err = file_bytes(dir.path()).unwrap_err().to_string();
        assert!(err.contains("memory.stat") && err.contains("file"), "{err}");
        // tmpfs pages count as file pages, and no reclaim without swap takes them.
        std::fs::write(dir.path().join("memory.stat"), "file 300\nshmem 100\n").unwrap();
        assert_eq!(file_bytes(dir.path()).unwrap(), 200);
    }
}
