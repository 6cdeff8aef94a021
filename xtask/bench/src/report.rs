//! Summaries of the trials, the table printed on stdout, and docs/benchmark.md, the page
//! written whole from them.
use std::fmt::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::stats::{Spread, ms, ratio, times};
use crate::trial::Trial;
use crate::{adversarial, bpf, costs, kernel_rows, scaling};

/// One mode at one rate.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Summary {
    pub(crate) rate: String,
    pub(crate) mode: String,
    pub(crate) polling: bool,
    /// Trials asked for and trials that completed.
    pub(crate) planned: u32,
    pub(crate) trials: usize,
    pub(crate) crossing_to_wake: Spread,
    pub(crate) crossing_to_kill: Spread,
    /// Trials in which the kernel OOM killer did not fire / completed trials.
    pub(crate) oom_avoided: usize,
    pub(crate) oom_avoided_fraction: Option<f64>,
    /// Wake sources of the deciding synchronizes, with counts.
    pub(crate) wake_sources: Vec<(String, usize)>,
    pub(crate) measured_rate_mib_s_p50: Option<f64>,
    pub(crate) crossing_error_ms_max: Option<f64>,
}

/// A row of the table: trials of one mode at one rate.
pub(crate) struct Group {
    pub(crate) rate: String,
    pub(crate) mode: String,
    pub(crate) polling: bool,
    pub(crate) planned: u32,
}

pub(crate) fn summaries(trials: &[Trial], groups: &[Group]) -> Vec<Summary> {
    let mut out = Vec::new();
    for g in groups {
        {
            let ts: Vec<&Trial> = trials
                .iter()
                .filter(|t| t.rate == g.rate && t.mode == g.mode)
                .collect();
            let values = |f: fn(&Trial) -> Option<f64>| -> Vec<f64> {
                ts.iter().filter_map(|t| f(t)).collect()
            };
            let avoided = ts.iter().filter(|t| t.oom_kills == 0).count();
            let mut sources: Vec<(String, usize)> = Vec::new();
            for t in &ts {
                let s = t.wake_source.clone().unwrap_or_else(|| "none".into());
                match sources.iter_mut().find(|(n, _)| *n == s) {
                    Some((_, c)) => *c += 1,
                    None => sources.push((s, 1)),
                }
            }
            sources.sort_by_key(|s| std::cmp::Reverse(s.1));
            out.push(Summary {
                rate: g.rate.clone(),
                mode: g.mode.clone(),
                polling: g.polling,
                planned: g.planned,
                trials: ts.len(),
                crossing_to_wake: Spread::of(&values(|t| t.crossing_to_wake_ms)),
                crossing_to_kill: Spread::of(&values(|t| t.crossing_to_kill_ms)),
                oom_avoided: avoided,
                oom_avoided_fraction: (!ts.is_empty()).then(|| avoided as f64 / ts.len() as f64),
                wake_sources: sources,
                measured_rate_mib_s_p50: crate::stats::percentile(
                    &values(|t| t.measured_rate_mib_s),
                    50.0,
                ),
                crossing_error_ms_max: values(|t| t.crossing_error_ms).into_iter().reduce(f64::max),
            });
        }
    }
    out
}

/// How many times longer polling took than an event-driven mode, p50 over p50.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Ratio {
    pub(crate) rate: String,
    pub(crate) mode: String,
    pub(crate) baseline: String,
    pub(crate) wake_ratio: Option<f64>,
    pub(crate) kill_ratio: Option<f64>,
}

pub(crate) fn ratios(summaries: &[Summary]) -> Vec<Ratio> {
    let mut out = Vec::new();
    for s in summaries.iter().filter(|s| !s.polling) {
        for b in summaries.iter().filter(|b| b.polling && b.rate == s.rate) {
            out.push(Ratio {
                rate: s.rate.clone(),
                mode: s.mode.clone(),
                baseline: b.mode.clone(),
                wake_ratio: ratio(b.crossing_to_wake.p50_ms, s.crossing_to_wake.p50_ms),
                kill_ratio: ratio(b.crossing_to_kill.p50_ms, s.crossing_to_kill.p50_ms),
            });
        }
    }
    out
}

/// The agent (all sources, and the crossing detector alone) against the earlyoom peer on
/// the same node-level race, one line per race (headroom) with earlyoom in it.
fn versus_peer(summaries: &[Summary]) -> Vec<String> {
    let fraction = |x: &Summary| format!("{}/{}", x.oom_avoided, x.trials);
    let mut out = Vec::new();
    for peer in summaries.iter().filter(|x| x.mode == crate::peer::MODE) {
        for (mode, sources) in crate::peer::RIVALS {
            let Some(agent) = summaries
                .iter()
                .find(|x| x.rate == peer.rate && x.mode == mode)
            else {
                continue;
            };
            out.push(format!(
                "Same node-level race ({}), agent ({sources}) vs earlyoom: crossing→kill p50 {} ms vs {} ms (earlyoom p50 / agent p50 = {}), OOM killer avoided {} vs {}.",
                peer.rate,
                ms(agent.crossing_to_kill.p50_ms),
                ms(peer.crossing_to_kill.p50_ms),
                times(ratio(
                    peer.crossing_to_kill.p50_ms,
                    agent.crossing_to_kill.p50_ms
                )),
                fraction(agent),
                fraction(peer),
            ));
        }
    }
    out
}

pub(crate) fn trial_line(t: &Trial) -> String {
    format!(
        "bench: {:<4} {:<10} #{:<2} crossing {:>7} ms  wake {:>7} ({})  kill {:>7}  freed {:>7}  oom_kills {}{}",
        t.rate,
        t.mode,
        t.trial,
        ms(t.crossing_ms),
        ms(t.wake_ms),
        t.wake_source.as_deref().unwrap_or("none"),
        ms(t.kill_ms),
        ms(t.freed_ms),
        t.oom_kills,
        if t.oom_first {
            " (OOM killer first)"
        } else {
            ""
        }
    )
}

fn spread(s: &Spread) -> String {
    format!("{} / {} / {}", ms(s.p50_ms), ms(s.p99_ms), ms(s.max_ms))
}

/// The whole table, Markdown, as printed and as put in docs/benchmark.md.
pub(crate) fn table(results: &Results) -> String {
    let summaries = &results.summaries;
    let ratios = &results.ratios;
    let (bpf, bpf_vm) = (&results.bpf, &results.bpf_vm);
    let vm_kernel = results.vm_kernel.as_deref();
    let idle = results.idle.as_ref();
    let (sync, policy) = (&results.sync_scaling, &results.policy_bench);
    let trials = &results.trials;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "Latency (ms from the working set crossing the threshold; p50 / p99 / max; \"none\" = never within the trial):\n"
    );
    let _ = writeln!(
        s,
        "| rate | mode | trials | rate MiB/s | crossing→wake | crossing→kill | woke | OOM killer avoided | wake sources |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|");
    for x in summaries {
        let sources: Vec<String> = x
            .wake_sources
            .iter()
            .map(|(n, c)| format!("{n}×{c}"))
            .collect();
        let _ = writeln!(
            s,
            "| {} | {} | {}/{} | {} | {} | {} | {}/{} | {}/{} ({}) | {} |",
            x.rate,
            x.mode,
            x.trials,
            x.planned,
            x.measured_rate_mib_s_p50
                .map(|r| format!("{r:.0}"))
                .unwrap_or_else(|| "?".into()),
            spread(&x.crossing_to_wake),
            spread(&x.crossing_to_kill),
            x.crossing_to_wake.count,
            x.trials,
            x.oom_avoided,
            x.trials,
            x.oom_avoided_fraction
                .map(|f| format!("{:.0} %", f * 100.0))
                .unwrap_or_else(|| "n/a".into()),
            sources.join(" "),
        );
    }
    let _ = writeln!(
        s,
        "\nPolling p50 / event-driven p50 (same run; n/a where either never happened):\n"
    );
    let _ = writeln!(
        s,
        "| rate | mode | vs poll-10s wake / kill | vs poll-1s wake / kill | vs poll-100ms wake / kill |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|");
    let mut keys: Vec<(String, String)> = Vec::new();
    for r in ratios {
        let k = (r.rate.clone(), r.mode.clone());
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    for (rate, mode) in keys {
        let cell = |baseline: &str| {
            ratios
                .iter()
                .find(|r| r.rate == rate && r.mode == mode && r.baseline == baseline)
                .map(|r| format!("{} / {}", times(r.wake_ratio), times(r.kill_ratio)))
                .unwrap_or_else(|| "not run".into())
        };
        let _ = writeln!(
            s,
            "| {rate} | {mode} | {} | {} | {} |",
            cell("poll-10s"),
            cell("poll-1s"),
            cell("poll-100ms")
        );
    }
    for line in versus_peer(summaries) {
        let _ = writeln!(s, "\n{line}");
    }
    let _ = writeln!(s, "\nCosts:\n");
    match idle {
        Some(i) => {
            let _ = writeln!(
                s,
                "- idle agent (all sources, {} pods) over {} s: CPU {:.3} % ({:.1} ms, read from {}), RSS {} KiB (peak {} KiB)",
                i.pods,
                i.seconds,
                i.cpu_percent,
                i.cpu_ms,
                if i.cpu_source.is_empty() {
                    "/proc/PID/stat"
                } else {
                    &i.cpu_source
                },
                i.rss_kib,
                i.rss_peak_kib
            );
        }
        None => {
            let _ = writeln!(s, "- idle agent: not measured (--idle-seconds 0)");
        }
    }
    if bpf.is_empty() {
        let _ = writeln!(
            s,
            "- eBPF programs: none seen (no eBPF mode ran, or run-time statistics unavailable)"
        );
    }
    let vm = format!(
        "in the VM ({}, under qemu)",
        vm_kernel.unwrap_or("kernel unknown")
    );
    for (p, place) in bpf
        .iter()
        .map(|p| (p, "on this host"))
        .chain(bpf_vm.iter().map(|p| (p, vm.as_str())))
    {
        let _ = writeln!(
            s,
            "- eBPF {} {place}: {} runs, {} ns total, {} ns per run (kernel.bpf_stats_enabled, summed over the eBPF trials)",
            p.name,
            p.run_cnt,
            p.run_time_ns,
            p.ns_per_run
                .map(|n| format!("{n:.0}"))
                .unwrap_or_else(|| "n/a".into())
        );
    }
    for line in kernel_rows::detector_share(trials)
        .into_iter()
        .chain(kernel_rows::memory_high_use(trials))
        .chain(kernel_rows::kernel_stamped_kills(trials))
        .chain(kernel_rows::node_kernel_kills(trials))
    {
        let _ = writeln!(s, "{line}");
    }
    for x in sync {
        let _ = writeln!(
            s,
            "- synchronize with {} pods ({} running; real cgroups, {} synchronizes): p50 / p99 / max {} ms, agent RSS {} KiB",
            x.pods,
            x.running,
            x.synchronizes,
            spread(&x.duration),
            x.rss_kib
        );
    }
    for p in policy {
        let _ = writeln!(
            s,
            "- policy alone (criterion, EvictionManager::synchronize, {} pods, threshold met): {:.1} µs [{:.1} – {:.1}]",
            p.pods, p.estimate_us, p.low_us, p.high_us
        );
    }
    let race_syncs: Vec<f64> = trials
        .iter()
        .flat_map(|t| t.sync_durations_ms.iter().copied())
        .collect();
    let all = Spread::of(&race_syncs);
    let _ = writeln!(
        s,
        "- synchronize during the races (3 pods): p50 / p99 / max {} ms over {} synchronizes",
        spread(&all),
        all.count
    );
    s
}

/// The generated page, relative to the workspace root, and the directory of its plots.
pub(crate) const PAGE: &str = "docs/benchmark.md";
const PLOTS: &str = "docs/bench";

/// When and on what a run was made: the page's "Run" line.
pub(crate) struct RunInfo<'a> {
    /// When the run ended (RFC 3339, UTC); `None` for JSON written before it was kept.
    pub(crate) date: Option<&'a str>,
    /// `git describe --always --dirty` of the workspace that was built and measured.
    pub(crate) build: Option<&'a str>,
    pub(crate) kernel: &'a str,
    pub(crate) cgroup: &'a str,
    /// Whether the VM rows ran.
    pub(crate) vm: bool,
}

/// Writes docs/benchmark.md whole and copies the plots to docs/bench/, removing the
/// plots of an earlier run that this one did not draw (dated runs kept in subdirectories
/// of docs/bench/ are left alone).
pub(crate) fn write_docs(root: &Path, run: &RunInfo, table: &str, plots: &[PathBuf]) -> Result<()> {
    let dir = root.join(PLOTS);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut names = Vec::new();
    for plot in plots {
        let Some(name) = plot.file_name() else {
            continue;
        };
        let to = dir.join(name);
        std::fs::copy(plot, &to)
            .with_context(|| format!("copying {} to {}", plot.display(), to.display()))?;
        names.push(name.to_string_lossy().to_string());
    }
    for entry in std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        let name = path.file_name().map(|n| n.to_string_lossy().to_string());
        if path.is_file()
            && path.extension().is_some_and(|e| e == "svg")
            && !name.is_some_and(|n| names.contains(&n))
        {
            std::fs::remove_file(&path)
                .with_context(|| format!("removing the stale plot {}", path.display()))?;
        }
    }
    let path = root.join(PAGE);
    std::fs::write(&path, page(run, table, &names))
        .with_context(|| format!("writing {}", path.display()))
}

/// The whole of docs/benchmark.md: title, what the run measured, the table, the plots.
/// Paths are relative to docs/.
pub(crate) fn page(run: &RunInfo, table: &str, plots: &[String]) -> String {
    let date = run.date.unwrap_or("not recorded");
    let build = run
        .build
        .map_or_else(|| "not recorded".to_string(), |b| format!("`{b}`"));
    let mut s = format!(
        "# Benchmark\n\nThis page is written whole by `cargo xtask bench --docs` from one run of the benchmark (`cargo xtask bench --replot --docs` writes it again from that run's JSON, `target/bench/bench.json`); edit `xtask/bench/src/report.rs`, not the page. Hand-written, dated notes on other runs and on single changes: [benchmark-history.md](benchmark-history.md).\n\nRun: {}, build {}, kernel {}, cgroup {}.\n\nThe pressure race, as root: node = pods cgroup limited to 1 GiB, hard threshold allocatableMemory.available<200Mi, a guaranteed 600 MiB ballast and a best-effort hog; crossing from a 1 ms sampler of the pods cgroup's working set.",
        date, build, run.kernel, run.cgroup
    );
    if run.vm {
        s.push_str(" Rows `vm-v2` run the same race in a 2 GiB VM on cgroup v2 under qemu emulation (TCG: compare them with each other, not with the host); rows `vm-v2-node` race on the whole VM instead (no pods limit, crossing from a 1 ms sampler of /proc/meminfo), the race earlyoom (Debian package) runs beside them. On the node the kernel's OOM killer fires near its free-page reserve (vm.min_free_kbytes), not at 0, so a node race's headroom is measured from there, for both killers: the agent's memory.available threshold is the reserve plus the headroom, and earlyoom's `-M` is what MemAvailable reads at that same free memory (MemAvailable leaves out the kernel's reserves, so a `-M` of the headroom itself would give earlyoom some 70 MiB more room than the agent on this VM).");
    }
    let _ = write!(s, "\n\n{}\n", table.trim_end());
    // The CDF of every mode tells the story; the stages and one mode's trials explain it.
    for preferred in [
        "cdf-kill-full.svg",
        "stages.svg",
        "full-all.svg",
        "full-poll-10s.svg",
    ] {
        if plots.iter().any(|n| n == preferred) {
            let _ = write!(s, "\n![{preferred}]({}/{preferred})\n", plots_link());
        }
    }
    if !plots.is_empty() {
        let all: Vec<String> = plots
            .iter()
            .map(|n| format!("[{n}]({}/{n})", plots_link()))
            .collect();
        let _ = write!(s, "\nAll plots of this run: {}\n", all.join(" · "));
    }
    s
}

/// docs/bench/ as the page links it.
fn plots_link() -> &'static str {
    PLOTS.trim_start_matches("docs/")
}

/// Everything one run measured: the JSON written under target/bench/, read back by
/// `--replot`.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Results {
    /// When the run ended (RFC 3339, UTC), and `git describe --always --dirty` of the
    /// workspace built for it; absent from the JSON of older runs.
    #[serde(default)]
    pub(crate) date: Option<String>,
    #[serde(default)]
    pub(crate) build: Option<String>,
    pub(crate) kernel: String,
    pub(crate) cgroup: String,
    /// The VM's kernel and how qemu ran it (KVM, or TCG emulation: slower, so compare
    /// the VM's modes with each other, not with the host's).
    pub(crate) vm_kernel: Option<String>,
    pub(crate) vm_accel: Option<String>,
    pub(crate) node_mib: u64,
    pub(crate) headroom_mib: u64,
    pub(crate) trials_per_mode: u32,
    pub(crate) summaries: Vec<Summary>,
    pub(crate) ratios: Vec<Ratio>,
    pub(crate) bpf: Vec<bpf::ProgCost>,
    pub(crate) bpf_vm: Vec<bpf::ProgCost>,
    pub(crate) idle: Option<costs::Idle>,
    pub(crate) sync_scaling: Vec<costs::SyncScaling>,
    /// The races beside many pods, with the kernel-stamped stages.
    pub(crate) races_at_scale: Vec<scaling::ScaleRun>,
    /// The machine's own stalls, measured before those races.
    #[serde(default)]
    pub(crate) stalls: Vec<crate::stalls::Row>,
    pub(crate) policy_bench: Vec<costs::PolicyBench>,
    /// The agent's CPU beside workloads that poke at its notifiers.
    #[serde(default)]
    pub(crate) adversarial: Vec<adversarial::Row>,
    /// The crossing detector's cost to an allocating hog, per attach point, on the host
    /// and in the VM.
    #[serde(default)]
    pub(crate) detector_cost: Vec<crate::detector_cost::DetectorCost>,
    #[serde(default)]
    pub(crate) detector_cost_vm: Vec<crate::detector_cost::DetectorCost>,
    /// How the VM of the detector's cost ran (its own boot, instructions counted under
    /// emulation); runs before that measured it in the races' boot.
    #[serde(default)]
    pub(crate) detector_cost_vm_accel: Option<String>,
    /// The shadow race: act and shadow mode beside a kubelet's pods.
    #[serde(default)]
    pub(crate) shadow_race: Vec<crate::shadow::ShadowTrial>,
    /// The VM's memory relief races: page cache and a growing pod, the I/O stall.
    #[serde(default)]
    pub(crate) relief: Vec<crate::relief::ReliefTrial>,
    pub(crate) trials: Vec<Trial>,
}

/// The report's table, with the races beside many pods when they ran.
pub(crate) fn full_table(results: &Results) -> String {
    let mut table = table(results);
    if !results.races_at_scale.is_empty() {
        table.push_str(
            "\nPressure race beside idle pods (full speed; µs from the crossing probe's kernel-stamped record, a look at every charge; SIGKILL stamped by the kernel's signal_generate):\n\n",
        );
        table.push_str(&scaling::table(&results.races_at_scale));
    }
    let stalls = crate::stalls::lines(&results.stalls);
    if !stalls.is_empty() {
        table.push_str(
            "\nThe machine's own stalls, measured before those races (a thread pinned to each busy CPU reads the clock in user space, nothing else of the bench running; a gap is the time between two reads, lost to interrupts, other tasks or the hypervisor, and a kill in flight would lose it too):\n\n",
        );
        table.push_str(&stalls.join("\n"));
        table.push('\n');
    }
    let cost = [
        crate::detector_cost::lines(&results.detector_cost, "on this host"),
        crate::detector_cost::lines(
            &results.detector_cost_vm,
            &crate::detector_cost::vm_place(
                results
                    .detector_cost_vm_accel
                    .as_deref()
                    .or(results.vm_accel.as_deref())
                    .unwrap_or("unknown"),
            ),
        ),
    ]
    .concat();
    if !cost.is_empty() {
        table.push_str(
            "\nThe crossing detector's cost as the pods see it (a hog's allocation throughput, the same eBPF programs loaded with and without the detector, alternating round by round):\n\n",
        );
        table.push_str(&cost.join("\n"));
        table.push('\n');
    }
    let shadow = crate::shadow::lines(&results.shadow_race);
    if !shadow.is_empty() {
        table.push_str(
            "\nShadow mode beside a kubelet's pods (hard threshold, full speed; the crossing from the agent's detector record, the decision at the hot path's pick; SIGKILLs from the kernel's signal_generate records; cgroup settings of the whole tree compared before and after):\n\n",
        );
        table.push_str(&shadow.join("\n"));
        table.push('\n');
    }
    let relief = crate::relief::lines(&results.relief, &results.trials);
    if !relief.is_empty() {
        table.push_str(
            "\nMemory relief in the VM (cgroup v2, `memory.reclaim`, relief's defaults; the pods' memory stall from the pods cgroup's `memory.pressure`, read every 50 ms; crossing → SIGKILL as in the `vm-v2` rows):\n\n",
        );
        table.push_str(&relief.join("\n"));
        table.push('\n');
    }
    if !results.adversarial.is_empty() {
        table.push_str(&format!(
            "\nAgent under adversarial load (every source on, the race's bounded node; CPU from the agent's own CPU accounting cgroup; target {} % of one core):\n\n",
            adversarial::TARGET_PERCENT
        ));
        table.push_str(&adversarial::table(&results.adversarial));
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_is_whole_and_links_relative_to_docs() {
        let run = RunInfo {
            date: Some("2026-11-22T03:00:00Z"),
            build: None,
            kernel: "6.18.1",
            cgroup: "v1",
            vm: false,
        };
        let plots = vec!["full-all.svg".to_string(), "full-memcg.svg".to_string()];
        let page = page(&run, "| a |\n|---|\n| 1 |\n\n", &plots);
        assert!(page.starts_with("# Benchmark\n\n"), "{page}");
        assert!(
            page.contains(
                "Run: 2026-11-22T03:00:00Z, build not recorded, kernel 6.18.1, cgroup v1."
            ),
            "{page}"
        );
        assert!(page.contains("\n\n| a |\n|---|\n| 1 |\n\n![full-all.svg](bench/full-all.svg)\n"));
        assert!(page.ends_with(
            "\nAll plots of this run: [full-all.svg](bench/full-all.svg) · [full-memcg.svg](bench/full-memcg.svg)\n"
        ));
        assert!(!page.contains("vm-v2") && !page.contains("<!--"), "{page}");
    }

    #[test]
    fn writing_the_page_replaces_the_plots_of_the_last_run() {
        let root = tempfile::tempdir().unwrap();
        let out = root.path().join("target-bench");
        let docs = root.path().join("docs/bench");
        std::fs::create_dir_all(docs.join("2026-11-24")).unwrap();
        std::fs::create_dir_all(&out).unwrap();
        for stale in [
            "docs/bench/slow-all.svg",
            "docs/bench/2026-11-24/stages.svg",
        ] {
            std::fs::write(root.path().join(stale), "old").unwrap();
        }
        std::fs::write(out.join("full-all.svg"), "new").unwrap();
        let run = RunInfo {
            date: None,
            build: Some("a5bd7ba"),
            kernel: "k",
            cgroup: "v2",
            vm: true,
        };
        write_docs(root.path(), &run, "table", &[out.join("full-all.svg")]).unwrap();
        assert!(!docs.join("slow-all.svg").exists());
        assert!(docs.join("2026-11-24/stages.svg").exists());
        assert_eq!(
            std::fs::read_to_string(docs.join("full-all.svg")).unwrap(),
            "new"
        );
        let page = std::fs::read_to_string(root.path().join(PAGE)).unwrap();
        assert!(page.contains("Run: not recorded, build `a5bd7ba`, kernel k, cgroup v2."));
        assert!(page.contains("Rows `vm-v2` run the same race"));
    }

    /// The README's headline and the benchmark page come from one run: the headline
    /// names the page's run (its day and build) and quotes the page's figure.
    #[test]
    fn the_readme_headline_quotes_the_benchmark_page() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let read = |p: &str| std::fs::read_to_string(root.join(p)).expect(p);
        let (readme, page) = (read("README.md"), read(PAGE));
        let headline = readme
            .split("\n\n")
            .find(|p| p.starts_with("Headline:"))
            .expect("README.md has a paragraph starting `Headline:`")
            .replace('\n', " ");
        // "Run: 2026-12-02T07:40:00Z, build `b11725d`, kernel …"
        let run = page.lines().find_map(|l| l.strip_prefix("Run: "));
        let (date, rest) = run
            .and_then(|r| r.split_once(", build "))
            .expect("the page names its run: `Run: DATE, build BUILD, …`");
        let build = rest.split(',').next().unwrap_or_default();
        let day = date.get(..10).unwrap_or(date);
        let named = format!("the run of {day}, build {build}");
        assert!(
            headline.contains(&named),
            "the README's headline does not name the page's run ({named}): {headline}"
        );
        // The pods race beside 110 idle pods, every source, 200 MiB headroom: its
        // crossing→SIGKILL p50 (the fifth cell).
        let p50 = page
            .lines()
            .filter(|l| l.starts_with("| all | 110 ("))
            .map(|l| l.split(" | ").collect::<Vec<_>>())
            .find(|cells| cells.get(2) == Some(&"200"))
            .and_then(|cells| Some(cells.get(4)?.split(" / ").next()?.to_string()))
            .expect("the page has the row of every source beside 110 pods at 200 MiB");
        let quoted = format!("came {p50} µs (median");
        assert!(
            headline.contains(&quoted),
            "the README's headline does not quote the page's p50 ({quoted}): {headline}"
        );
    }
}
