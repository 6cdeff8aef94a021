//! One Pod manifest (YAML or JSON), as the agent reads a file of its manifest directory.
#![no_main]

use libfuzzer_sys::fuzz_target;
use monitor::policy::pod::parse_pod;

mod common;

fuzz_target!(|data: &[u8]| {
    // Manifests are read with read_to_string: text that is not UTF-8 is refused first.
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match parse_pod(text, "fuzz.yaml") {
        Ok(pod) => common::exercise_pod(&pod),
        Err(e) => {
            let _ = e.to_string();
        }
    }
});
