//! Pods as `kubectl get pods -o json|yaml` prints them (PodList, List, a Pod, or a YAML
//! stream of those), as `monitor simulate --pods` and `--admit` read them.
#![no_main]

use libfuzzer_sys::fuzz_target;
use monitor::policy::pod::parse_pod_list;

mod common;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match parse_pod_list(text, "fuzz.json") {
        Ok(pods) => pods.iter().for_each(common::exercise_pod),
        Err(e) => {
            let _ = e.to_string();
        }
    }
});
