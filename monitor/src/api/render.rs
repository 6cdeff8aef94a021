//! The CLI's tables (`monitor status | pods | events`), as plain functions of the state.
//!
//! Columns are padded like kubectl's printers (tabwriter, three spaces apart) and every
//! cell is made printable: pod names, reasons and messages come from manifests and
//! processes, and a terminal must not interpret escape sequences hidden in them.
use std::str::FromStr;

use super::metrics::source_state;
use crate::policy::explain::Explanation;
use crate::policy::signal::Signal;
use crate::policy::types::Resource;
use crate::state::{AgentState, Event, SignalStatus};

const MI: f64 = 1024.0 * 1024.0;

/// Sources, signals against thresholds, node conditions and the last synchronize (its
/// age taken at monotonic time `now_ns`).
pub(crate) fn render_status(state: &AgentState, now_ns: u64) -> String {
    let mut out = String::new();

    out += "EVENT SOURCES\n";
    if state.sources.is_empty() {
        out += "  (none reported yet)\n";
    } else {
        let rows = state
            .sources
            .iter()
            .map(|s| {
                vec![
                    s.source.name().to_string(),
                    source_state(s.state).to_string(),
                    s.detail.clone(),
                ]
            })
            .collect();
        out += &indent(&table(&["SOURCE", "STATE", "DETAIL"], rows));
    }

    out += "\nSIGNALS\n";
    if state.signals.is_empty() {
        out += "  (no observation yet)\n";
    }
    for signal in &state.signals {
        out += &format!(
            "  {}: {} available of {} ({})\n",
            clean(&signal.signal),
            amount(signal, signal.available),
            amount(signal, signal.capacity),
            percent(signal.available, signal.capacity),
        );
        for t in &signal.thresholds {
            let mut line = format!(
                "    {} threshold {}<{} (= {}): {}",
                clean(&t.kind),
                clean(&signal.signal),
                clean(&t.value),
                amount(signal, t.quantity),
                if t.met { "met" } else { "not met" },
            );
            if let Some(grace) = &t.grace_period {
                let state = match (t.met, t.grace_period_met) {
                    (_, true) => "elapsed",
                    (true, false) => "running",
                    (false, false) => "not started",
                };
                line += &format!(", grace period {} {state}", clean(grace));
            }
            out += &line;
            out.push('\n');
        }
    }

    out += "\nCONDITIONS\n";
    if state.conditions.is_empty() {
        out += "  none (no pressure)\n";
    } else {
        for c in &state.conditions {
            out += &format!("  {}\n", clean(c));
        }
    }
    for c in &state.contention {
        out += &format!(
            "  {} {}: full stall avg10 {:.2} %, avg60 {:.2} % (threshold {:.0} %)\n",
            c.condition,
            if c.status { "True" } else { "False" },
            c.averages.avg10,
            c.averages.avg60,
            c.threshold * 100.0
        );
    }

    if let Some(relief) = &state.memory_relief {
        out += "\nMEMORY RELIEF\n";
        out += &format!("  {}: {}\n", relief.state, clean(&relief.detail));
        if let Some((at, pass)) = &relief.last_pass {
            out += &format!("  last pass {}: {}\n", clean(at), clean(pass));
        }
    }

    if !state.evictions.is_empty() {
        out += "\nEVICTIONS (newest last)\n";
        for e in state.evictions.iter().rev().take(10).rev() {
            out += &format!(
                "  {} {} ({}, grace {} s): {}{}\n",
                clean(&e.finished_at),
                clean(&e.pod),
                clean(&e.signal),
                e.grace_period_seconds,
                clean(&e.outcome),
                match &e.detail {
                    Some(detail) => format!(" after {} attempt(s): {}", e.attempts, clean(detail)),
                    None => String::new(),
                },
            );
        }
    }

    if let Some(silence) = &state.runtime_silence {
        out += &format!(
            "\nCONTAINER RUNTIME\n  last silence at {}: {} left unanswered while stopping {} ({} unanswered call(s) since start; the pod was killed through its cgroups)\n",
            clean(&silence.time),
            clean(&silence.calls.join(", ")),
            clean(&silence.pod),
            silence.total_calls,
        );
    }

    out += "\nLAST SYNCHRONIZE\n";
    match &state.last_sync {
        None => out += "  none yet\n",
        Some(sync) => {
            let sources: Vec<&str> = sync.wake_sources.iter().map(|s| s.name()).collect();
            let woken_by = if sources.is_empty() {
                "-".to_string()
            } else {
                sources.join(", ")
            };
            out += &format!(
                "  #{} at {} ({} ago), woken by {woken_by}: wake latency {}, took {}\n",
                sync.sequence,
                clean(&sync.at),
                age(sync.age(now_ns)),
                micros(sync.wake_latency_us),
                micros(sync.duration_us),
            );
            if !sync.summary.is_empty() {
                out += &format!("  {}\n", clean(&sync.summary));
            }
        }
    }
    out
}

/// KEY, READY (running containers of all), STATUS (as `kubectl get pods` words it, see
/// [`pod_status`]), RESTARTS (summed over containers), QOS, PHASE, REASON (the pod's
/// own), MEMORY (working set).
pub(crate) fn render_pods(state: &AgentState) -> String {
    if state.pods.is_empty() {
        return "No pods.\n".into();
    }
    let rows = state
        .pods
        .iter()
        .map(|p| {
            let restarts = p
                .containers
                .iter()
                .fold(0u32, |sum, c| sum.saturating_add(c.restart_count));
            let running = p.containers.iter().filter(|c| c.state == "running").count();
            vec![
                p.key.clone(),
                format!("{running}/{}", p.containers.len()),
                pod_status(p),
                restarts.to_string(),
                p.qos_class.clone(),
                p.phase.clone(),
                p.reason.clone().unwrap_or_else(|| "-".into()),
                p.memory_working_set_bytes
                    .map(|b| mebibytes(b as f64))
                    .unwrap_or_else(|| "-".into()),
            ]
        })
        .collect();
    table(
        &[
            "KEY", "READY", "STATUS", "RESTARTS", "QOS", "PHASE", "REASON", "MEMORY",
        ],
        rows,
    )
}

/// A pod's STATUS as `kubectl get pods` words it: a pod being stopped is Terminating; a
/// finished pod shows its own reason (Evicted, Preempted) when it has one; otherwise the
/// first container that is not running says why (its reason, such as CrashLoopBackOff,
/// else Completed for exit 0 and Error for any other end), and a pod with a container
/// still running is Running even if another completed.
fn pod_status(p: &crate::state::PodView) -> String {
    if p.phase == "Terminating" {
        return p.phase.clone();
    }
    let finished = matches!(p.phase.as_str(), "Succeeded" | "Failed");
    if finished && let Some(reason) = &p.reason {
        return reason.clone();
    }
    let mut status = p.reason.clone().unwrap_or_else(|| p.phase.clone());
    let mut running = false;
    // Last to first, so that the first container not running has the last word.
    for c in p.containers.iter().rev() {
        if c.state == "running" {
            running = true;
        } else if let Some(reason) = &c.reason {
            status = reason.clone();
        } else if c.state == "exited(0)" {
            status = "Completed".into();
        } else if c.state.starts_with("exited(") || c.state.starts_with("signaled(") {
            status = "Error".into();
        }
    }
    if status == "Completed" && running {
        status = "Running".into();
    }
    status
}

/// Decisions from the record, oldest first: a head line each (time, action, pod, signal),
/// then the kubelet's words, what was met and observed, the first pods of the ranking and
/// the timings.
pub(crate) fn render_decisions(decisions: &[&crate::decisions::Decision]) -> String {
    if decisions.is_empty() {
        return "No decisions.\n".to_string();
    }
    let mut out = String::new();
    for d in decisions {
        out.push_str(&format!(
            "{}  {}{}  {}  {}\n",
            d.at,
            d.action,
            if d.shadow {
                " (shadow: not carried out)"
            } else {
                ""
            },
            d.pod.as_deref().unwrap_or("node"),
            d.signal.as_deref().unwrap_or("-"),
        ));
        out.push_str(&format!("  {}\n", d.message));
        if !d.thresholds_met.is_empty() {
            out.push_str(&format!(
                "  thresholds met: {}\n",
                d.thresholds_met.join(", ")
            ));
        }
        let signals: Vec<String> = d
            .signals
            .iter()
            .filter(|s| d.signal.as_deref() == Some(s.signal.as_str()) || d.signal.is_none())
            .map(|s| {
                if s.capacity > 0 {
                    format!(
                        "{} {} of {}",
                        s.signal,
                        mebibytes(s.available as f64),
                        mebibytes(s.capacity as f64)
                    )
                } else {
                    format!("{} {}", s.signal, mebibytes(s.available as f64))
                }
            })
            .collect();
        if !signals.is_empty() {
            out.push_str(&format!("  observed: {}\n", signals.join(", ")));
        }
        for (rank, r) in d.ranking.iter().enumerate() {
            out.push_str(&format!(
                "  {}. {} {} priority {} usage {} request {}\n",
                rank + 1,
                r.pod,
                r.qos,
                r.priority,
                r.usage.map_or("-".to_string(), |u| u.to_string()),
                r.request.map_or("-".to_string(), |q| q.to_string()),
            ));
        }
        let t = &d.timings;
        if let Some(us) = t.crossing_to_kill_us {
            out.push_str(&format!(
                "  crossing to kill {} ({})\n",
                micros(us),
                t.source.as_deref().unwrap_or("-")
            ));
        }
        if let Some(us) = t.observed_to_decision_us {
            out.push_str(&format!("  observation to decision {}\n", micros(us)));
        }
    }
    out
}

/// TIME, TYPE, REASON, OBJECT, MESSAGE, oldest first.
#[cfg(test)]
pub(crate) fn render_events(state: &AgentState) -> String {
    render_event_list(state.events.iter())
}

pub(crate) fn render_event_list<'a>(events: impl Iterator<Item = &'a Event>) -> String {
    let rows: Vec<Vec<String>> = events
        .map(|e| {
            vec![
                e.time.clone(),
                e.kind.clone(),
                e.reason.clone(),
                e.object.clone(),
                e.message.clone(),
            ]
        })
        .collect();
    if rows.is_empty() {
        return "No events.\n".into();
    }
    table(&["TIME", "TYPE", "REASON", "OBJECT", "MESSAGE"], rows)
}

/// Whether a signal counts bytes (memory, filesystems) or items (inodes, pids).
fn is_bytes(signal: &SignalStatus) -> bool {
    Signal::from_str(&signal.signal).is_ok_and(Signal::is_bytes)
}

fn amount(signal: &SignalStatus, value: i64) -> String {
    if signal.signal == Signal::MemoryStall.as_str() {
        // The share of time not fully stalled on memory.
        crate::policy::signal::format_amount(Signal::MemoryStall, value)
    } else if is_bytes(signal) {
        mebibytes(value as f64)
    } else {
        value.to_string()
    }
}

/// Mebibytes, like the quantities in thresholds (`500Mi`): whole above 100Mi, one decimal
/// below.
fn mebibytes(bytes: f64) -> String {
    let mi = bytes / MI;
    if mi.abs() >= 100.0 {
        format!("{mi:.0}Mi")
    } else {
        format!("{mi:.1}Mi")
    }
}

fn percent(part: i64, whole: i64) -> String {
    if whole <= 0 {
        return "-%".into();
    }
    format!("{:.1}%", part as f64 * 100.0 / whole as f64)
}

fn micros(us: u64) -> String {
    if us >= 1_000_000 {
        format!("{:.2}s", us as f64 / 1e6)
    } else if us >= 1_000 {
        format!("{:.2}ms", us as f64 / 1e3)
    } else {
        format!("{us}µs")
    }
}

/// An age for a reader: 850ms, 2.5s, 3m12s, 2h05m.
fn age(d: std::time::Duration) -> String {
    let secs = d.as_secs();
    if secs == 0 {
        format!("{}ms", d.as_millis())
    } else if secs < 60 {
        format!("{:.1}s", d.as_secs_f64())
    } else if secs < 3600 {
        format!("{}m{:02}s", secs / 60, secs % 60)
    } else {
        format!("{}h{:02}m", secs / 3600, secs % 3600 / 60)
    }
}

/// Control characters (escape sequences, line breaks) shown escaped, so one cell stays on
/// one line and cannot drive the terminal.
fn clean(text: &str) -> String {
    text.chars()
        .flat_map(|c| {
            if c.is_control() {
                c.escape_default().collect::<Vec<_>>()
            } else {
                vec![c]
            }
        })
        .collect()
}

/// Columns padded to their widest cell, three spaces apart; the last column is not padded.
fn table(header: &[&str], rows: Vec<Vec<String>>) -> String {
    let rows: Vec<Vec<String>> = std::iter::once(header.iter().map(|h| h.to_string()).collect())
        .chain(rows)
        .map(|row: Vec<String>| row.iter().map(|cell| clean(cell)).collect())
        .collect();
    let mut widths = vec![0usize; header.len()];
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in rows {
        let last = row.len().saturating_sub(1);
        let mut line = String::new();
        for (i, (cell, w)) in row.iter().zip(&widths).enumerate() {
            if i == last {
                line += cell;
            } else {
                line += &format!("{cell:<w$}   ");
            }
        }
        out += line.trim_end();
        out.push('\n');
    }
    out
}

fn indent(text: &str) -> String {
    text.lines().map(|l| format!("  {l}\n")).collect()
}

/// `monitor explain POD`: the pod, the hot path, then per signal its thresholds, the
/// pod's numbers and its place in the ranking.
pub(crate) fn render_explanation(e: &Explanation) -> String {
    let mut out = format!(
        "POD {}: {}, priority {}\n",
        clean(&e.pod),
        e.qos_class,
        e.priority
    );
    if e.critical {
        out +=
            "  critical (static, mirror or priority >= 2000000000): never evicted, never ranked\n";
    }
    out += &match (e.hot_path, e.hot_path_victim.as_deref()) {
        (false, _) => "  hot path: off\n".to_string(),
        (true, None) => "  hot path: no victim armed (no hard memory threshold that kills at once, or no candidate)\n".to_string(),
        (true, Some(_)) if e.is_hot_path_victim() => {
            "  hot path: this pod is the armed victim: a hard memory threshold's crossing kills it at once\n".to_string()
        }
        (true, Some(other)) => format!("  hot path: armed with {}, not this pod\n", clean(other)),
    };
    if e.signals.is_empty() {
        out += "\nno eviction thresholds are configured\n";
    }
    for s in &e.signals {
        let signal = s.signal;
        let show = |v: i64| {
            if signal.is_bytes() {
                mebibytes(v as f64)
            } else {
                v.to_string()
            }
        };
        out += &format!("\n{signal}");
        match (s.available, s.capacity) {
            (Some(available), Some(capacity)) => {
                out += &format!(": {} available of {}", show(available), show(capacity));
            }
            _ => out += ": not observed",
        }
        out += if s.met {
            " (threshold met)\n"
        } else {
            " (no threshold met)\n"
        };
        for t in &s.thresholds {
            let resolved = t
                .quantity
                .map(|q| format!(" (= {})", show(q)))
                .unwrap_or_default();
            out += &format!(
                "  {} threshold {signal}<{}{resolved}: {}\n",
                t.kind,
                clean(&t.value),
                if t.met { "met" } else { "not met" }
            );
        }
        let resource = s.resource.as_str();
        let usage = |v: u64| show(i64::try_from(v).unwrap_or(i64::MAX));
        out += &match (s.usage, s.request) {
            (None, _)
                if s.resource == Resource::EphemeralStorage || s.resource == Resource::Inodes =>
            {
                format!(
                    "  {resource}: not read at the last synchronize (pods' disk usage is read only while a disk threshold is met or near; the ranking then counts it as 0)\n"
                )
            }
            (None, _) => format!("  {resource}: no stats found for this pod\n"),
            (Some(u), Some(r)) => format!(
                "  {resource}: usage {}, request {}{}\n",
                usage(u),
                show(r),
                match s.exceeds_request {
                    Some(true) => ": above its request",
                    Some(false) => ": within its request",
                    None => "",
                }
            ),
            (Some(u), None) => format!(
                "  {resource}: usage {}{}\n",
                usage(u),
                match s.exceeds_request {
                    Some(true) => " (above zero: ranks among the pods over their request)",
                    _ => "",
                }
            ),
        };
        match s.rank {
            None => out += "  rank: none (critical)\n",
            Some(rank) => {
                out += &format!(
                    "  rank {rank} of {} (1 = evicted first){}\n",
                    s.candidates,
                    if rank == 1 && s.met {
                        ": first in line while this signal is met"
                    } else {
                        ""
                    }
                );
                if let Some(n) = &s.before {
                    out += &format!("    after {}: by {}\n", clean(&n.pod), n.rule);
                }
                if let Some(n) = &s.after {
                    out += &format!("    before {}: by {}\n", clean(&n.pod), n.rule);
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;
    use crate::notify::{SourceStatus, WakeSource};
    use crate::state::{ContainerView, LastSync, PodView, ThresholdStatus};

    fn signal(name: &str, available: i64, capacity: i64) -> SignalStatus {
        SignalStatus {
            signal: name.into(),
            available,
            capacity,
            thresholds: vec![],
        }
    }

    fn status_state() -> AgentState {
        let mut s = AgentState {
            conditions: vec!["MemoryPressure".into()],
            ..AgentState::default()
        };
        s.sources = vec![
            SourceStatus::running(WakeSource::Ebpf, "tracepoints vmscan, oom"),
            SourceStatus::failed(WakeSource::Psi, "memory.pressure: permission denied"),
        ];
        let mut memory = signal("memory.available", 400 << 20, 8 << 30);
        memory.thresholds = vec![
            ThresholdStatus {
                value: "100Mi".into(),
                quantity: 100 << 20,
                kind: "hard".into(),
                grace_period: None,
                met: false,
                grace_period_met: false,
            },
            ThresholdStatus {
                value: "10%".into(),
                quantity: 858_993_459,
                kind: "soft".into(),
                grace_period: Some("1m30s".into()),
                met: true,
                grace_period_met: false,
            },
        ];
        s.signals = vec![memory, signal("pid.available", 4_000_000, 4_194_304)];
        s.last_sync = Some(LastSync {
            finished_unix_seconds: 0.0,
            sequence: 17,
            at: "2025-01-02T03:04:05Z".into(),
            wake_sources: vec![WakeSource::Psi, WakeSource::Ebpf],
            wake_latency_us: 1_250,
            duration_us: 640,
            summary: "soft threshold met, waiting for grace period".into(),
            finished_ns: 1_000_000_000,
        });
        s.evictions.push_back(crate::state::EvictionView {
            pod: "default/stuck".into(),
            signal: "memory.available".into(),
            grace_period_seconds: 0,
            outcome: "timed_out".into(),
            detail: Some("2 process(es) still alive after the kill timeout".into()),
            attempts: 3,
            finished_at: "2025-01-02T03:04:06Z".into(),
        });
        s.runtime_silence = Some(crate::state::RuntimeSilence {
            time: "2025-01-02T03:04:07Z".into(),
            pod: "default/hog".into(),
            calls: vec!["StopPodSandbox".into(), "RemovePodSandbox".into()],
            total_calls: 5,
        });
        s
    }

    #[rstest]
    #[case::source_row("ebpf     running   tracepoints vmscan, oom")]
    #[case::failed_source("psi      failed    memory.pressure: permission denied")]
    #[case::bytes_signal("memory.available: 400Mi available of 8192Mi (4.9%)")]
    #[case::count_signal("pid.available: 4000000 available of 4194304 (95.4%)")]
    #[case::hard("hard threshold memory.available<100Mi (= 100Mi): not met")]
    #[case::soft_grace(
        "soft threshold memory.available<10% (= 819Mi): met, grace period 1m30s running"
    )]
    #[case::condition("  MemoryPressure")]
    #[case::last_sync(
        "#17 at 2025-01-02T03:04:05Z (2.5s ago), woken by psi, ebpf: wake latency 1.25ms, took 640µs"
    )]
    #[case::summary("soft threshold met, waiting for grace period")]
    #[case::eviction(
        "default/stuck (memory.available, grace 0 s): timed_out after 3 attempt(s): 2 process(es) still alive"
    )]
    #[case::runtime_silence(
        "last silence at 2025-01-02T03:04:07Z: StopPodSandbox, RemovePodSandbox left unanswered while stopping default/hog (5 unanswered call(s) since start"
    )]
    fn status_shows(#[case] expected: &str) {
        let text = render_status(&status_state(), 3_500_000_000);
        assert!(text.contains(expected), "{expected:?} not in\n{text}");
    }

    #[rstest]
    #[case(850, "850ms")]
    #[case(2_500, "2.5s")]
    #[case(192_000, "3m12s")]
    #[case(7_500_000, "2h05m")]
    fn ages_read_at_a_glance(#[case] ms: u64, #[case] expected: &str) {
        assert_eq!(age(std::time::Duration::from_millis(ms)), expected);
    }

    #[test]
    fn status_of_a_fresh_agent_says_so() {
        let text = render_status(&AgentState::default(), 0);
        for expected in [
            "(none reported yet)",
            "(no observation yet)",
            "none (no pressure)",
            "none yet",
        ] {
            assert!(text.contains(expected), "{expected:?} not in\n{text}");
        }
    }

    fn pod(key: &str, reason: Option<&str>, memory: Option<u64>, restarts: &[u32]) -> PodView {
        PodView {
            key: key.into(),
            uid: "uid".into(),
            qos_class: "BestEffort".into(),
            priority: 0,
            phase: "Failed".into(),
            reason: reason.map(Into::into),
            message: None,
            conditions: vec![],
            cgroup: None,
            memory_working_set_bytes: memory,
            containers: restarts
                .iter()
                .map(|r| ContainerView {
                    name: "c".into(),
                    pid: None,
                    restart_count: *r,
                    state: "running".into(),
                    reason: None,
                })
                .collect(),
        }
    }

    #[test]
    fn pods_table_has_aligned_columns() {
        let s = AgentState {
            pods: vec![
                pod("default/hog", Some("Evicted"), Some(300 << 20), &[1, 2]),
                pod("kube-system/dns", None, None, &[u32::MAX, 1]),
            ],
            ..AgentState::default()
        };
        let text = render_pods(&s);
        let expected = "\
KEY               READY   STATUS    RESTARTS     QOS          PHASE    REASON    MEMORY
default/hog       2/2     Evicted   3            BestEffort   Failed   Evicted   300Mi
kube-system/dns   2/2     Failed    4294967295   BestEffort   Failed   -         -
";
        assert_eq!(text, expected);
    }

    fn container(state: &str, reason: Option<&str>) -> ContainerView {
        ContainerView {
            name: "c".into(),
            pid: (state == "running").then_some(1),
            restart_count: 0,
            state: state.into(),
            reason: reason.map(Into::into),
        }
    }

    /// STATUS as kubectl words it, from the pod's phase and reason and its containers.
    #[rstest::rstest]
    #[case::running("Running", None, &[("running", None)], "Running")]
    #[case::crash_loop(
        "Running",
        None,
        &[("running", None), ("exited(3)", Some("CrashLoopBackOff"))],
        "CrashLoopBackOff"
    )]
    #[case::first_not_running_wins(
        "Running",
        None,
        &[("exited(3)", Some("CrashLoopBackOff")), ("exited(1)", None)],
        "CrashLoopBackOff"
    )]
    #[case::completed_beside_running("Running", None, &[("exited(0)", None), ("running", None)], "Running")]
    #[case::succeeded("Succeeded", None, &[("exited(0)", None)], "Completed")]
    #[case::failed("Failed", None, &[("signaled(9)", None)], "Error")]
    #[case::evicted("Failed", Some("Evicted"), &[("signaled(9)", None)], "Evicted")]
    #[case::terminating("Terminating", None, &[("running", None)], "Terminating")]
    #[case::pending("Pending", None, &[("waiting", None)], "Pending")]
    #[case::unknown_exit(
        "Running",
        None,
        &[("exited(unknown)", Some("ExitCodeUnknown"))],
        "ExitCodeUnknown"
    )]
    fn pod_status_words_it_as_kubectl_does(
        #[case] phase: &str,
        #[case] reason: Option<&str>,
        #[case] containers: &[(&str, Option<&str>)],
        #[case] expected: &str,
    ) {
        let mut p = pod("default/p", reason, None, &[]);
        p.phase = phase.into();
        p.containers = containers
            .iter()
            .map(|(state, reason)| container(state, *reason))
            .collect();
        assert_eq!(pod_status(&p), expected);
    }

    #[test]
    fn events_table_escapes_control_characters() {
        let mut s = AgentState::default();
        s.events.push_back(Event {
            time: "2025-01-02T03:04:05Z".into(),
            kind: "Warning".into(),
            reason: "Evicted".into(),
            object: "default/hog".into(),
            message: "The node was low on resource: memory.\n\u{1b}[31mred".into(),
        });
        let text = render_events(&s);
        assert_eq!(
            text,
            "TIME                   TYPE      REASON    OBJECT        MESSAGE\n\
             2025-01-02T03:04:05Z   Warning   Evicted   default/hog   The node was low on resource: memory.\\n\\u{1b}[31mred\n"
        );
    }

    #[rstest]
    #[case::none(&[], "No events.\n")]
    fn events_empty(#[case] events: &[Event], #[case] expected: &str) {
        assert_eq!(render_event_list(events.iter()), expected);
    }

    #[rstest]
    #[case(0.0, "0.0Mi")]
    #[case(512.0 * 1024.0, "0.5Mi")]
    #[case(100.0 * MI, "100Mi")]
    #[case(-2.0 * MI, "-2.0Mi")]
    fn formats_mebibytes(#[case] bytes: f64, #[case] text: &str) {
        assert_eq!(mebibytes(bytes), text);
    }

    #[rstest]
    #[case(999, "999µs")]
    #[case(1_500, "1.50ms")]
    #[case(2_000_000, "2.00s")]
    fn formats_micros(#[case] us: u64, #[case] text: &str) {
        assert_eq!(micros(us), text);
    }

    #[test]
    fn percent_of_zero_capacity_is_unknown() {
        assert_eq!(percent(5, 0), "-%");
    }
}
