//! Chaos against the real agent (see `monitor_tests::chaos`): SIGKILL at random moments
//! under memory pressure, each event source off in turn, hostile input, a container
//! runtime stopped with SIGSTOP during evictions (`monitor_tests::wedged`). The normal suite
//! runs a short version (the wedged runtime once, in `cri`); `cargo xtask chaos` runs 50
//! cycles (`MONITOR_CHAOS_CYCLES`) on the host and in the VM, and `--soak` the soak below.
use std::io::Write;
use std::time::{Duration, Instant};

use monitor_tests::chaos::{self, Options};
use monitor_tests::node::{BURSTABLE, GUARANTEED, Node, sleeper};
use monitor_tests::{Feature, require, trust, wedged};

/// Kill cycles of the short version in `cargo xtask test`. A cycle lasts about three of
/// the agent's starts, 20-50 s under emulation, where a start takes 3-6 s; the random
/// moments are `cargo xtask chaos`'s to cover, 50 cycles.
const SHORT_CYCLES: u32 = 2;

/// Straight to stdout: the harness captures `println!` of passing tests, and the tables
/// are the point of `cargo xtask chaos`.
fn say(text: &str) {
    let _ = writeln!(std::io::stdout(), "{text}");
}

fn place() -> String {
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let version = match monitor::observe::CgroupLayout::detect().map(|l| l.version) {
        Ok(monitor::observe::CgroupVersion::V1) => "cgroup v1",
        Ok(monitor::observe::CgroupVersion::V2) => "cgroup v2",
        Err(_) => "no cgroup memory controller",
    };
    let host = if std::env::var_os("MONITOR_TEST_VM").is_some() {
        "VM"
    } else {
        "host"
    };
    format!("{host}, kernel {}, {version}", kernel.trim())
}

#[test]
fn the_agent_killed_at_random_moments_under_pressure_loses_nothing() {
    if !require("chaos kill cycles", &[Feature::Root]) {
        return;
    }
    let options = Options::from_env(SHORT_CYCLES);
    say(&format!(
        "chaos ({}): {} SIGKILL cycles under pressure, seed {} (MONITOR_CHAOS_SEED replays it)",
        place(),
        options.cycles,
        options.seed
    ));
    let started = Instant::now();
    let tally = chaos::kill_cycles(&options);
    say(&tally.table(options.cycles));
    say(&format!("kill cycles took {:.0?}", started.elapsed()));
    assert!(
        tally.clean() && tally.cycles == options.cycles,
        "chaos found losses (seed {}):\n{}",
        options.seed,
        tally.table(options.cycles)
    );
}

#[test]
fn each_event_source_off_in_turn_still_evicts_before_the_oom_killer() {
    if !require("chaos sources", &[Feature::Root]) {
        return;
    }
    let races = chaos::source_races();
    say(&format!(
        "chaos ({}): a full-speed hog with each event source off\n{}",
        place(),
        chaos::sources_table(&races)
    ));
    for race in &races {
        assert!(
            race.evicted && race.oom_kills == 0 && race.panics == 0,
            "with {} off: evicted {}, OOM kills {}, panics {}\n{}",
            race.source,
            race.evicted,
            race.oom_kills,
            race.panics,
            race.detail
        );
    }
}

#[test]
fn hostile_input_is_refused_and_harms_nothing() {
    if !require("chaos hostile input", &[Feature::Root]) {
        return;
    }
    let (replays, tally) = chaos::hostile_replay();
    say(&format!(
        "chaos ({}): hostile input replayed\n{}{}",
        place(),
        chaos::replay_table(&replays),
        tally.table(0)
    ));
    assert!(
        replays.iter().all(|r| r.refused) && tally.clean(),
        "hostile input got through:\n{}{}",
        chaos::replay_table(&replays),
        tally.table(0)
    );
}

/// Cycles of the stale-victim and double-kill scenarios in `cargo xtask test`; `cargo
/// xtask chaos` runs `MONITOR_CHAOS_CYCLES` of them (50 by default).
const SHORT_TRUST_CYCLES: u32 = 3;

#[test]
fn a_fast_kill_keeps_the_kubelets_guarantees() {
    if !require("chaos trust", &[Feature::Root]) {
        return;
    }
    let cycles = Options::from_env(SHORT_TRUST_CYCLES).cycles;
    let started = Instant::now();
    let tallies = vec![
        trust::stale_victim(cycles),
        trust::unfreeable(),
        trust::double_kill(cycles.div_ceil(5).max(2)),
    ];
    let table = trust::trust_table(&tallies);
    say(&format!(
        "chaos ({}): stale victim, unfreeable memory, double kill\n{table}trust scenarios took {:.0?}",
        place(),
        started.elapsed()
    ));
    assert!(
        tallies.iter().all(trust::TrustTally::clean),
        "a fast kill broke a guarantee:\n{table}"
    );
}

/// Cycles of the wedged-runtime scenario when run by hand without
/// `MONITOR_CHAOS_CYCLES`; `cargo xtask chaos` runs that many, at most [`WEDGED_CYCLES`].
const SHORT_WEDGED_CYCLES: u32 = 2;
/// The wedged-runtime cycles of `cargo xtask chaos` (each takes several seconds).
const WEDGED_CYCLES: u32 = 20;

/// The wedged runtime, cycle after cycle. The normal suite runs one cycle with every
/// check as `cri`'s `a_stopped_containerd_holds_up_no_eviction_and_its_silence_is_reported`
/// (the same `monitor_tests::wedged` node); the repetition is `cargo xtask chaos`'s.
#[test]
#[ignore = "chaos: cargo xtask chaos runs it; the suite runs one cycle in cri"]
fn a_wedged_runtime_never_holds_up_an_eviction() {
    if !require(
        "chaos wedged runtime",
        &[Feature::Root, Feature::Containerd],
    ) {
        return;
    }
    let cycles = Options::from_env(SHORT_WEDGED_CYCLES)
        .cycles
        .min(WEDGED_CYCLES);
    let started = Instant::now();
    let tally = wedged::wedged_runtime(cycles);
    let table = tally.table(cycles);
    say(&format!(
        "chaos ({}): containerd stopped with SIGSTOP while a hog crosses the hard threshold\n{table}wedged runtime took {:.0?}",
        place(),
        started.elapsed()
    ));
    assert!(
        tally.clean() && tally.cycles == cycles,
        "a wedged runtime held up an eviction:\n{table}"
    );
}

/// The soak: the agent under a pressure race every half minute for
/// `MONITOR_CHAOS_SOAK_SECONDS` (default an hour), its RSS and open descriptors sampled
/// over time. Ignored by the normal suite: `cargo xtask chaos --soak 1h` runs it.
#[test]
#[ignore = "long: run with cargo xtask chaos --soak DURATION"]
fn soak_keeps_memory_and_descriptors_flat() {
    if !require("chaos soak", &[Feature::Root]) {
        return;
    }
    let seconds: u64 = std::env::var("MONITOR_CHAOS_SOAK_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3600);
    let mut node = Node::new(chaos::EVICTION);
    node.json_logs = true;
    node.start();
    assert!(chaos::wait_ready(&mut node, Duration::from_secs(30)));
    node.manifest("guaranteed.yaml", &sleeper("guaranteed", GUARANTEED));
    node.manifest("burstable.yaml", &sleeper("burstable", BURSTABLE));
    node.wait_running("guaranteed");
    node.wait_running("burstable");
    let pid = node.agent_pid().expect("agent pid");
    let oom_before = node.pods_oom_kills();
    let started = Instant::now();
    let mut samples: Vec<(u64, u64, usize, u32)> = Vec::new();
    let mut races = 0u32;
    let mut next_race = Instant::now();
    say(&format!(
        "chaos soak ({}): {seconds} s\n| elapsed s | RSS KiB | open fds | races |\n|---|---|---|---|",
        place()
    ));
    while started.elapsed() < Duration::from_secs(seconds) {
        if Instant::now() >= next_race {
            let name = format!("hog-{races}");
            node.manifest(&format!("{name}.yaml"), &chaos::hog_pod(&name, 0));
            node.wait_phase(
                &name,
                monitor::runtime::store::Phase::Failed,
                Duration::from_secs(30),
            );
            node.remove_manifest(&format!("{name}.yaml"));
            races += 1;
            next_race = Instant::now() + Duration::from_secs(30);
        }
        let rss = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            .unwrap_or(0);
        let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .map(|d| d.count())
            .unwrap_or(0);
        let elapsed = started.elapsed().as_secs();
        if samples.last().is_none_or(|s| elapsed >= s.0 + 60) {
            say(&format!("| {elapsed} | {rss} | {fds} | {races} |"));
            samples.push((elapsed, rss, fds, races));
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    assert!(node.agent_running(), "the agent died:\n{}", node.log(1));
    let oom = node.pods_oom_kills() - oom_before;
    node.stop();
    // After the first samples (warm-up), memory and descriptors must not keep growing.
    let warm = samples[samples.len().min(2) - 1];
    let last = *samples.last().expect("samples");
    say(&format!(
        "soak: {races} races, {oom} OOM kills; RSS {} -> {} KiB, fds {} -> {}",
        warm.1, last.1, warm.2, last.2
    ));
    assert_eq!(oom, 0, "OOM kills during the soak");
    assert!(
        last.1 <= warm.1 + warm.1 / 4 + 2048,
        "RSS grew from {} to {} KiB",
        warm.1,
        last.1
    );
    assert!(
        last.2 <= warm.2 + 8,
        "open descriptors grew from {} to {}",
        warm.2,
        last.2
    );
}
