//! Reads the agent's log (RUST_LOG=info,monitor::sync=debug, NO_COLOR=1): the wakes of
//! each synchronize, when each synchronize ran, and the pod events.
//!
//! Wake lines carry `sequence`, `source`, `at_ns` (CLOCK_MONOTONIC when userspace received
//! the wake) and `latency_us` (received → synchronize start); `synchronize done` lines
//! carry `sequence` and `duration_us`. Event lines carry `reason`, `object` and `at_ns`.
use crate::demo::field;

/// One synchronize of the agent, as its log lines describe it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Sync {
    pub(crate) sequence: u64,
    /// CLOCK_MONOTONIC of the earliest wake received for this synchronize.
    pub(crate) first_wake_ns: u64,
    /// Sources of its wakes, earliest first ("timer", "ebpf", "memcg-threshold", ...).
    pub(crate) sources: Vec<String>,
    /// When it started (wake received + its latency; microsecond resolution).
    pub(crate) started_ns: u64,
    /// Its duration, when the debug line was logged.
    pub(crate) duration_ns: Option<u64>,
}

impl Sync {
    pub(crate) fn finished_ns(&self) -> Option<u64> {
        self.duration_ns.map(|d| self.started_ns.saturating_add(d))
    }
}

/// Every synchronize with at least one logged wake, in sequence order.
pub(crate) fn syncs(log: &str) -> Vec<Sync> {
    let mut out: Vec<Sync> = Vec::new();
    let mut durations: Vec<(u64, u64)> = Vec::new();
    for line in log.lines() {
        let Some(sequence) = field(line, "sequence").and_then(|s| s.parse::<u64>().ok()) else {
            continue;
        };
        if line.contains(" synchronize done") {
            if let Some(us) = field(line, "duration_us").and_then(|v| v.parse::<u64>().ok()) {
                durations.push((sequence, us.saturating_mul(1000)));
            }
            continue;
        }
        if !line.contains(" wake ") && !line.ends_with(" wake") {
            continue;
        }
        let (Some(source), Some(at_ns), Some(latency_us)) = (
            field(line, "source"),
            field(line, "at_ns").and_then(|v| v.parse::<u64>().ok()),
            field(line, "latency_us").and_then(|v| v.parse::<u64>().ok()),
        ) else {
            continue;
        };
        let started = at_ns.saturating_add(latency_us.saturating_mul(1000));
        match out.iter_mut().find(|s| s.sequence == sequence) {
            Some(sync) => {
                if at_ns < sync.first_wake_ns {
                    sync.first_wake_ns = at_ns;
                    sync.sources.insert(0, source.to_string());
                } else if !sync.sources.iter().any(|s| s == source) {
                    sync.sources.push(source.to_string());
                }
                sync.started_ns = sync.started_ns.max(started);
            }
            None => out.push(Sync {
                sequence,
                first_wake_ns: at_ns,
                sources: vec![source.to_string()],
                started_ns: started,
                duration_ns: None,
            }),
        }
    }
    for (sequence, duration) in durations {
        if let Some(sync) = out.iter_mut().find(|s| s.sequence == sequence) {
            sync.duration_ns = Some(duration);
        }
    }
    out.sort_by_key(|s| s.sequence);
    out
}

/// CLOCK_MONOTONIC of the first event `reason` about `object` ("ns/name") at or after `after_ns`.
pub(crate) fn event(log: &str, reason: &str, object: &str, after_ns: u64) -> Option<u64> {
    log.lines().find_map(|l| {
        let at: u64 = field(l, "at_ns")?.parse().ok()?;
        (field(l, "reason") == Some(reason) && field(l, "object") == Some(object) && at >= after_ns)
            .then_some(at)
    })
}

/// The agent's hot kill path killed `object` (its "hot path: cgroup.kill written" line):
/// when the notifier told it, which source that was, and when the kill was written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct HotKill {
    pub(crate) detected_ns: u64,
    pub(crate) source: String,
    pub(crate) killed_ns: u64,
}

pub(crate) fn hot_kill(log: &str, object: &str, after_ns: u64) -> Option<HotKill> {
    log.lines().find_map(|l| {
        if !l.contains("hot path: cgroup.kill written") || field(l, "pod") != Some(object) {
            return None;
        }
        let killed_ns: u64 = field(l, "at_ns")?.parse().ok()?;
        (killed_ns >= after_ns).then_some(())?;
        Some(HotKill {
            detected_ns: field(l, "detected_ns")?.parse().ok()?,
            source: field(l, "source")?.to_string(),
            killed_ns,
        })
    })
}

/// The synchronize that decided a kill sent at `kill_ns`: the last one started before it.
pub(crate) fn deciding_sync(syncs: &[Sync], kill_ns: u64) -> Option<&Sync> {
    syncs
        .iter()
        .filter(|s| s.started_ns <= kill_ns)
        .max_by_key(|s| s.started_ns)
}

/// The first synchronize started at or after `ns`.
pub(crate) fn first_sync_after(syncs: &[Sync], ns: u64) -> Option<&Sync> {
    syncs
        .iter()
        .filter(|s| s.started_ns >= ns)
        .min_by_key(|s| s.started_ns)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    const LOG: &str = "\
2026-01-01T00:00:00Z  INFO monitor::sync::run: wake sequence=3 source=timer at_ns=1000000 latency_us=5
2026-01-01T00:00:00Z DEBUG monitor::sync::run: synchronize done: nothing sequence=3 duration_us=40
2026-01-01T00:00:00Z  INFO monitor::sync::run: wake sequence=4 source=ebpf at_ns=5000000 latency_us=20 kernel_to_sync_us=30 kind=high
2026-01-01T00:00:00Z  INFO monitor::sync::run: wake sequence=4 source=psi at_ns=4990000 latency_us=30 file=/proc/pressure/memory
2026-01-01T00:00:00Z  INFO monitor::state: event type=Normal reason=\"Killing\" object=\"demo/hog\" at_ns=5200000
2026-01-01T00:00:00Z  INFO monitor::state: event type=Normal reason=\"Evicted\" object=\"demo/hog\" at_ns=9000000
";

    #[test]
    fn hot_kills_are_read_with_their_source_and_stamps() {
        let log = "\
2026-01-01T00:00:00Z  INFO monitor::sync::hot: hot path: cgroup.kill written pod=demo/hog source=memcg_threshold detected_ns=4000000 at_ns=4000050
2026-01-01T00:00:00Z  INFO monitor::sync::hot: hot path: cgroup.kill written pod=demo/other source=memory_events detected_ns=1 at_ns=2
";
        assert_eq!(
            hot_kill(log, "demo/hog", 0),
            Some(HotKill {
                detected_ns: 4_000_000,
                source: "memcg_threshold".into(),
                killed_ns: 4_000_050,
            })
        );
        assert_eq!(
            hot_kill(log, "demo/hog", 5_000_000),
            None,
            "before the window"
        );
        assert_eq!(hot_kill(log, "demo/none", 0), None);
    }

    #[test]
    fn wakes_are_grouped_per_synchronize_with_their_duration() {
        let s = syncs(LOG);
        assert_eq!(s.len(), 2, "{s:?}");
        assert_eq!(
            (
                s[0].sequence,
                s[0].sources[0].as_str(),
                s[0].started_ns,
                s[0].finished_ns()
            ),
            (3, "timer", 1_005_000, Some(1_045_000))
        );
        // The earliest wake names the source, even when logged second.
        assert_eq!(
            (s[1].sources[0].as_str(), s[1].first_wake_ns),
            ("psi", 4_990_000)
        );
        assert_eq!(s[1].sources, vec!["psi".to_string(), "ebpf".to_string()]);
        assert_eq!(s[1].started_ns, 5_020_000);
        assert_eq!(s[1].duration_ns, None);
    }

    #[rstest]
    #[case::killing("Killing", "demo/hog", 0, Some(5_200_000))]
    #[case::evicted("Evicted", "demo/hog", 0, Some(9_000_000))]
    #[case::other_pod("Killing", "demo/ballast", 0, None)]
    #[case::before_the_window("Killing", "demo/hog", 6_000_000, None)]
    fn events_are_found_by_reason_object_and_time(
        #[case] reason: &str,
        #[case] object: &str,
        #[case] after: u64,
        #[case] expected: Option<u64>,
    ) {
        assert_eq!(event(LOG, reason, object, after), expected);
    }

    #[rstest]
    #[case::kill_after_second(5_200_000, Some(4))]
    #[case::kill_between(2_000_000, Some(3))]
    #[case::kill_before_any(1_000, None)]
    fn the_deciding_sync_is_the_last_started_before_the_kill(
        #[case] kill: u64,
        #[case] expected: Option<u64>,
    ) {
        let s = syncs(LOG);
        assert_eq!(deciding_sync(&s, kill).map(|s| s.sequence), expected);
    }

    #[rstest]
    #[case::at_start(0, Some(3))]
    #[case::between(2_000_000, Some(4))]
    #[case::after_all(6_000_000, None)]
    fn first_sync_after_a_crossing(#[case] ns: u64, #[case] expected: Option<u64>) {
        let s = syncs(LOG);
        assert_eq!(first_sync_after(&s, ns).map(|s| s.sequence), expected);
    }
}
