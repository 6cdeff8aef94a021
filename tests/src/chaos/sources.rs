//! (b) A full-speed hog on the bounded node with each event source off in turn: the hog
//! must still be evicted before the kernel's OOM killer.
use super::*;

/// One pressure race with an event source off: whether the hog was evicted before the
/// kernel's OOM killer fired.
#[derive(Clone, Debug)]
pub struct SourceRace {
    pub source: &'static str,
    pub evicted: bool,
    pub oom_kills: u64,
    pub panics: u32,
    pub detail: String,
}

/// The `monitor.sources` switches, one off per race (the others stay on).
pub const SOURCE_SWITCHES: &[(&str, &str)] = &[
    ("ebpf", "ebpf"),
    ("memcg thresholds", "memcgThresholds"),
    ("memory.events", "memoryEvents"),
    ("psi", "psi"),
];

/// (b) A full-speed hog on the bounded node with each event source off in turn.
pub fn source_races() -> Vec<SourceRace> {
    SOURCE_SWITCHES
        .iter()
        .map(|(source, key)| {
            let mut node =
                Node::with_agent_keys(EVICTION, &format!("  sources: {{{key}: false}}\n"));
            node.json_logs = true;
            node.start();
            assert!(
                wait_ready(&mut node, Duration::from_secs(30)),
                "the agent with {source} off did not start:\n{}",
                node.log(1)
            );
            node.manifest("guaranteed.yaml", &sleeper("guaranteed", GUARANTEED));
            node.wait_running("guaranteed");
            let oom_before = node.pods_oom_kills();
            node.manifest("batch.yaml", &hog_pod("batch", 0));
            let ended = pod_ended(&node, "batch", Duration::from_secs(30));
            let record = node.record("batch");
            let evicted = ended
                && record
                    .as_ref()
                    .is_some_and(|r| r.reason.as_deref() == Some("Evicted"));
            let oom_kills = node.pods_oom_kills().saturating_sub(oom_before);
            node.stop();
            let log = node.log(1);
            SourceRace {
                source,
                evicted,
                oom_kills,
                panics: read_log(&log).1,
                detail: if evicted && oom_kills == 0 {
                    String::new()
                } else {
                    format!("record {record:?}\nlog:\n{log}")
                },
            }
        })
        .collect()
}

/// The sources table `cargo xtask chaos` prints.
pub fn sources_table(races: &[SourceRace]) -> String {
    let mut out = String::from(
        "| source off | evicted before the OOM killer | OOM kills | panics |\n|---|---|---|---|\n",
    );
    for race in races {
        out.push_str(&format!(
            "| {} | {} | {} | {} |\n",
            race.source,
            if race.evicted { "yes" } else { "NO" },
            race.oom_kills,
            race.panics
        ));
    }
    out
}
