//! A configuration file: a KubeletConfiguration (YAML or JSON) with the agent's own
//! `monitor:` block, loaded as `monitor run --config` and `monitor simulate` load it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use monitor::config::parse_agent_config;

fuzz_target!(|data: &[u8]| {
    // The file is read with read_to_string: text that is not UTF-8 is refused before
    // any parser sees it.
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match parse_agent_config(text, "fuzz.yaml", &[]) {
        Ok(loaded) => {
            // What the agent derives from a loaded configuration and prints at startup.
            let kubelet = &loaded.kubelet;
            for capacity in [0, 1 << 30, i64::MAX] {
                for resource in ["memory", "ephemeral-storage", "cpu", "pods"] {
                    let _ = kubelet.allocatable(resource, capacity);
                }
                for threshold in &kubelet.eviction.thresholds {
                    let _ = (
                        threshold.quantity(capacity),
                        threshold.min_reclaim_quantity(capacity),
                    );
                }
            }
            for threshold in &kubelet.eviction.thresholds {
                let _ = threshold.to_string();
            }
            for warning in &loaded.warnings {
                let _ = warning.to_string();
            }
            let _ = loaded.agent.settings.psi_trigger();
            let _ = loaded.agent.settings.sources.crossing_attach_points();
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
});
