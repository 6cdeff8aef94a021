//! Kubelet command-line flags (`monitor run -- --eviction-hard=memory.available<500Mi`):
//! one argument per line of the input, applied over an empty configuration file.
#![no_main]

use libfuzzer_sys::fuzz_target;
use monitor::config::kubelet::{apply_flags, default_kubelet_config};
use monitor::config::parse_agent_config;

fuzz_target!(|data: &[u8]| {
    // Arguments reach the agent through clap, which takes UTF-8 only.
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let args: Vec<String> = text.split('\n').map(str::to_string).collect();
    match parse_agent_config("", "fuzz.yaml", &args) {
        Ok(loaded) => {
            for threshold in &loaded.kubelet.eviction.thresholds {
                let _ = (threshold.to_string(), threshold.quantity(i64::MAX));
            }
            for warning in &loaded.warnings {
                let _ = warning.to_string();
            }
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
    // The same flags over the defaults, as a later reload applies them.
    let mut config = default_kubelet_config();
    if let Err(e) = apply_flags(&mut config, &args) {
        let _ = e.to_string();
    }
});
