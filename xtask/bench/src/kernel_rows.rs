//! The report's rows on what the kernel saw in the races: kills stamped by the kernel
//! (the crossing probe's record and `signal:signal_generate`), the node race's kills
//! against its sampled crossing, the agent's use of memory.high, and the crossing
//! detector's share of the pods' CPU.
use crate::stats::{ms, percentile, ratio, times};
use crate::trial::Trial;

/// The (rate, mode) pairs of `trials`, each once, in the order they first come.
fn groups<'a>(trials: impl Iterator<Item = &'a Trial>) -> Vec<(&'a str, &'a str)> {
    let mut groups: Vec<(&str, &str)> = Vec::new();
    for t in trials {
        if !groups.contains(&(t.rate.as_str(), t.mode.as_str())) {
            groups.push((&t.rate, &t.mode));
        }
    }
    groups
}

/// Per rate and mode: the crossing probe's record to the kernel's SIGKILL, both
/// stamped in the kernel.
pub(crate) fn kernel_stamped_kills(trials: &[Trial]) -> Vec<String> {
    groups(
        trials
            .iter()
            .filter(|t| t.kernel_crossing_to_kill_us.is_some()),
    )
    .into_iter()
        .map(|(rate, mode)| {
            let mut us: Vec<f64> = trials
                .iter()
                .filter(|t| t.rate == rate && t.mode == mode)
                .filter_map(|t| t.kernel_crossing_to_kill_us)
                .collect();
            us.sort_by(f64::total_cmp);
            let at = |q: f64| us[((us.len() - 1) as f64 * q).round() as usize];
            format!(
                "- kernel-stamped crossing→SIGKILL ({rate}, {mode}; probe's crossing record → signal:signal_generate): p50 / p99 / max {:.0} / {:.0} / {:.0} µs over {} trials",
                at(0.5),
                at(0.99),
                at(1.0),
                us.len()
            )
        })
        .collect()
}

/// The node-level race's kills, per rate and mode: the crossing from the 1 ms sampler of
/// /proc/meminfo (the node's signal is no cgroup's, so nothing in the kernel stamps it)
/// to the killer's SIGKILL as the kernel stamped it; then the agent (all sources) against
/// the earlyoom peer by that measure.
pub(crate) fn node_kernel_kills(trials: &[Trial]) -> Vec<String> {
    let node: Vec<(&Trial, f64)> = trials
        .iter()
        .filter(|t| t.kernel_crossing_to_kill_us.is_none())
        .filter_map(|t| Some((t, t.kernel_kill_ms? - t.crossing_ms?)))
        .collect();
    let groups = groups(node.iter().map(|(t, _)| *t));
    let of = |rate: &str, mode: &str| -> Vec<f64> {
        node.iter()
            .filter(|(t, _)| t.rate == rate && t.mode == mode)
            .map(|(_, ms)| *ms)
            .collect()
    };
    let mut out: Vec<String> = groups
        .iter()
        .map(|(rate, mode)| {
            let times_ms = of(rate, mode);
            let at = |p: f64| ms(percentile(&times_ms, p));
            format!(
                "- crossing (1 ms sampler) → SIGKILL (signal:signal_generate) ({rate}, {mode}): p50 / p99 / max {} / {} / {} ms over {} trials",
                at(50.0),
                at(99.0),
                at(100.0),
                times_ms.len()
            )
        })
        .collect();
    for (rate, mode) in &groups {
        if *mode != crate::peer::MODE {
            continue;
        }
        let peer = percentile(&of(rate, mode), 50.0);
        for (agent_mode, sources) in crate::peer::RIVALS {
            let agent = percentile(&of(rate, agent_mode), 50.0);
            if let (Some(peer), Some(agent)) = (peer, agent) {
                out.push(format!(
                    "- same node-level race ({rate}), crossing → kernel-stamped SIGKILL p50: agent ({sources}) {} ms, earlyoom {} ms (earlyoom / agent = {})",
                    ms(Some(agent)),
                    ms(Some(peer)),
                    times(ratio(Some(peer), Some(agent)))
                ));
            }
        }
    }
    out
}

/// On cgroup v2 (the VM), per rate and mode: in how many trials the agent set the pods
/// cgroup's memory.high (the throttling stand-in for a usage threshold).
pub(crate) fn memory_high_use(trials: &[Trial]) -> Vec<String> {
    groups(trials.iter().filter(|t| t.memory_high_set.is_some()))
        .into_iter()
        .map(|(rate, mode)| {
            let of: Vec<&Trial> = trials
                .iter()
                .filter(|t| t.rate == rate && t.mode == mode && t.memory_high_set.is_some())
                .collect();
            let set = of.iter().filter(|t| t.memory_high_set == Some(true)).count();
            format!(
                "- memory.high of the pods cgroup set by the agent ({rate}, {mode}): {set} of {} trials",
                of.len()
            )
        })
        .collect()
}

/// The crossing detector's CPU as a share of the CPU of the pods whose charges it
/// watches: its programs' run time (kernel.bpf_stats_enabled; the tracepoint or
/// trampoline dispatch around each run is not included) over the pods cgroup's CPU
/// time, summed over the trials of each rate where it ran.
pub(crate) fn detector_share(trials: &[Trial]) -> Vec<String> {
    let mut rates: Vec<&str> = Vec::new();
    for t in trials {
        if !rates.contains(&t.rate.as_str()) {
            rates.push(&t.rate);
        }
    }
    let mut out = Vec::new();
    for rate in rates {
        let (mut run_ns, mut runs, mut cpu_ns, mut n) = (0u64, 0u64, 0u64, 0);
        let mut names: Vec<&str> = Vec::new();
        for t in trials.iter().filter(|t| t.rate == rate) {
            let (Some(cpu), detector) = (
                t.pods_cpu_ns,
                t.bpf
                    .iter()
                    .filter(|p| p.name.starts_with("crossing"))
                    .collect::<Vec<_>>(),
            ) else {
                continue;
            };
            if detector.iter().all(|p| p.run_cnt == 0) {
                continue;
            }
            for p in detector {
                run_ns += p.run_time_ns;
                runs += p.run_cnt;
                if !names.contains(&p.name.as_str()) {
                    names.push(&p.name);
                }
            }
            cpu_ns += cpu;
            n += 1;
        }
        if n == 0 || cpu_ns == 0 {
            continue;
        }
        out.push(format!(
            "- crossing detector ({}) at the {rate} rate: {:.2} % of the allocating pods' CPU ({} runs, {:.0} ns per run, {:.1} ms of {:.0} ms pods CPU over {n} trials)",
            names.join(", "),
            run_ns as f64 * 100.0 / cpu_ns as f64,
            runs,
            run_ns as f64 / runs.max(1) as f64,
            run_ns as f64 / 1e6,
            cpu_ns as f64 / 1e6,
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trial(mode: &str, extra: &str) -> Trial {
        serde_json::from_str(&format!(
            r#"{{"mode":"{mode}","rate":"full","trial":1,"node_mib":1024,"phase_delay_ms":0,
               "peak_mib":0,"oom_kills":0,"oom_first":false,"sync_durations_ms":[]{extra}}}"#
        ))
        .expect("trial JSON")
    }

    #[test]
    fn detector_share_is_its_run_time_over_the_pods_cpu() {
        let bpf = |runs: u64, ns: u64| {
            format!(
                r#","bpf":[{{"name":"crossing_lruvec","prog_id":1,"run_time_ns":{ns},"run_cnt":{runs}}},
                   {{"name":"oom_victim","prog_id":2,"run_time_ns":999,"run_cnt":1}}]"#
            )
        };
        let trials = vec![
            trial(
                "ebpf",
                &format!("{},\"pods_cpu_ns\":1000000", bpf(10, 1000)),
            ),
            trial(
                "ebpf",
                &format!("{},\"pods_cpu_ns\":3000000", bpf(30, 3000)),
            ),
            // No detector runs, or no CPU figure: left out.
            trial("memcg", &format!("{},\"pods_cpu_ns\":5000000", bpf(0, 0))),
            trial("ebpf", &bpf(5, 5000)),
        ];
        assert_eq!(
            detector_share(&trials),
            vec![
                "- crossing detector (crossing_lruvec) at the full rate: 0.10 % of the allocating pods' CPU (40 runs, 100 ns per run, 0.0 ms of 4 ms pods CPU over 2 trials)"
            ]
        );
    }

    #[test]
    fn memory_high_and_kernel_stamps_are_summed_per_mode() {
        let trials = vec![
            trial(
                "ebpf",
                r#","memory_high_set":false,"kernel_crossing_to_kill_us":200.0"#,
            ),
            trial(
                "ebpf",
                r#","memory_high_set":false,"kernel_crossing_to_kill_us":100.0"#,
            ),
            trial("memcg", r#","memory_high_set":true"#),
            trial("poll-1s", ""),
        ];
        assert_eq!(
            memory_high_use(&trials),
            vec![
                "- memory.high of the pods cgroup set by the agent (full, ebpf): 0 of 2 trials",
                "- memory.high of the pods cgroup set by the agent (full, memcg): 1 of 1 trials",
            ]
        );
        assert_eq!(
            kernel_stamped_kills(&trials),
            vec![
                "- kernel-stamped crossing→SIGKILL (full, ebpf; probe's crossing record → signal:signal_generate): p50 / p99 / max 200 / 200 / 200 µs over 2 trials"
            ]
        );
        // Node races (no kernel crossing): the sampler's crossing to the kernel's SIGKILL.
        assert!(node_kernel_kills(&trials).is_empty());
    }

    #[test]
    fn node_races_compare_the_sampler_crossing_with_the_kernels_sigkill() {
        let node = |mode: &str, crossing: f64, killed: f64| {
            trial(
                mode,
                &format!(r#","crossing_ms":{crossing},"kernel_kill_ms":{killed}"#),
            )
        };
        let trials = vec![
            node("all", 100.0, 102.0),
            node("all", 100.0, 104.0),
            node("all", 100.0, 150.0),
            node("earlyoom", 90.0, 130.0),
            node("earlyoom", 90.0, 170.0),
            // A pods race: its kernel-stamped row is the other function's.
            trial(
                "all",
                r#","crossing_ms":1.0,"kernel_kill_ms":2.0,"kernel_crossing_to_kill_us":200.0"#,
            ),
        ];
        assert_eq!(
            node_kernel_kills(&trials),
            vec![
                "- crossing (1 ms sampler) → SIGKILL (signal:signal_generate) (full, all): p50 / p99 / max 4.00 / 50.0 / 50.0 ms over 3 trials",
                "- crossing (1 ms sampler) → SIGKILL (signal:signal_generate) (full, earlyoom): p50 / p99 / max 40.0 / 80.0 / 80.0 ms over 2 trials",
                "- same node-level race (full), crossing → kernel-stamped SIGKILL p50: agent (all sources) 4.00 ms, earlyoom 40.0 ms (earlyoom / agent = 10×)",
            ]
        );
    }
}
