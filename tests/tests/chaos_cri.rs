//! Chaos on a real container runtime (a private containerd, tests/src/containerd/).
//! `cargo xtask chaos` runs it, `MONITOR_CHAOS_CYCLES` setting the cycles (at most 10);
//! the normal suite runs one cycle with every check as `cri`'s
//! `two_agents_on_one_containerd_never_collect_each_others_containers_sandboxes_or_logs`
//! (the same `monitor_tests::two_agents` pair).
use std::io::Write;
use std::time::Instant;

use monitor_tests::require;
use monitor_tests::two_agents;

/// Cycles when run by hand without `MONITOR_CHAOS_CYCLES` (each agent stopped once).
const SHORT_CYCLES: u32 = 2;
/// At most this many two-agent cycles, whatever `MONITOR_CHAOS_CYCLES` asks (it is sized
/// for the kill cycles, 50 in `cargo xtask chaos`): a cycle takes about 20 s here, and
/// ten stop each agent five times, with its GC and reclaim run against the other's.
const MAX_TWO_AGENT_CYCLES: u32 = 10;

/// Straight to stdout: the harness captures `println!` of passing tests, and the tables
/// are the point of a chaos run.
fn say(text: &str) {
    let _ = writeln!(std::io::stdout(), "{text}");
}

/// Two agents on one containerd, each in turn killed with SIGKILL while the other runs
/// its periodic container GC and, under imagefs pressure, its node-level reclaim: nothing
/// of the stopped agent's (dead containers, sandboxes, log files, images its containers
/// hold) is removed, while each collects its own.
#[test]
#[ignore = "chaos: cargo xtask chaos runs it; the suite runs one cycle in cri"]
fn two_agents_on_one_containerd_touch_nothing_of_each_other() {
    if !require("chaos two agents on one containerd", two_agents::FEATURES) {
        return;
    }
    let cycles = std::env::var("MONITOR_CHAOS_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(SHORT_CYCLES)
        .min(MAX_TWO_AGENT_CYCLES);
    let started = Instant::now();
    let tally = two_agents::chaos(cycles);
    say(&format!(
        "chaos: two agents on one containerd, {cycles} cycles (each: one agent SIGKILLed, the other's GC and imagefs reclaim run, the stopped one's holdings counted)\n{}",
        tally.table(cycles)
    ));
    say(&format!("two agents took {:.0?}", started.elapsed()));
    assert!(
        tally.clean() && tally.cycles == cycles,
        "two agents on one containerd:\n{}",
        tally.table(cycles)
    );
}
