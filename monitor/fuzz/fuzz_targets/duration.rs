//! Go-style durations ("5m0s", "1m30s", "300ms"): KubeletConfiguration keys, kubelet flags,
//! the `monitor:` block and scenario step times.
#![no_main]

use libfuzzer_sys::fuzz_target;
use monitor::config::kubelet::{format_go_duration, parse_go_duration};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match parse_go_duration(text) {
        Ok(duration) => {
            // Durations are printed in errors and status output the way Go prints them;
            // that form must read back as the same duration.
            let shown = format_go_duration(duration);
            assert_eq!(
                parse_go_duration(&shown),
                Ok(duration),
                "{text:?} prints as {shown:?}"
            );
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
});
