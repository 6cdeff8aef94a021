//! A `monitor simulate --scenario` file, read, loaded and run through the policy step by
//! step as the command does.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use monitor::simulate::config::load_config;
use monitor::simulate::engine::Simulation;
use monitor::simulate::scenario::parse_scenario;
use serde_yaml_ng::Value;

/// File references resolve against this directory, which does not exist: a relative name
/// gives a read error, never a real file.
const BASE: &str = "/nonexistent-monitor-fuzz";

/// Whether the scenario names a file by an absolute path (`config:`, or a step's `node:`,
/// `pods:`, `summary:` or `admit:` given as a string). Such a file is read as the command
/// would read it, and /dev/zero or a FIFO never ends: those inputs test the file system,
/// not the parser, and are skipped.
fn names_an_absolute_file(text: &str) -> bool {
    let absolute = |v: &Value| v.as_str().is_some_and(|s| Path::new(s).is_absolute());
    let Ok(Value::Mapping(doc)) = serde_yaml_ng::from_str::<Value>(text) else {
        return false;
    };
    if doc.get("config").is_some_and(absolute) {
        return true;
    }
    let steps = doc.get("steps").and_then(Value::as_sequence);
    steps.into_iter().flatten().any(|step| {
        ["node", "pods", "summary", "admit"]
            .iter()
            .any(|key| step.get(key).is_some_and(absolute))
    })
}

fuzz_target!(|data: &[u8]| {
    // The scenario is read with read_to_string: text that is not UTF-8 is refused first.
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if names_an_absolute_file(text) {
        return;
    }
    let scenario = match parse_scenario(text, "fuzz.yaml", Path::new(BASE)) {
        Ok(scenario) => scenario,
        Err(e) => {
            let _ = e.to_string();
            return;
        }
    };
    let mut warnings = Vec::new();
    let config = match load_config(&scenario.config, &mut warnings) {
        Ok(config) => config,
        Err(e) => {
            let _ = e.to_string();
            return;
        }
    };
    for step in Simulation::run(config, &scenario) {
        let _ = serde_json::to_string(&step);
    }
});
