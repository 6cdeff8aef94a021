//! A kubelet Summary API document (`/stats/summary`, JSON or YAML), as `monitor simulate
//! --summary` reads it, and the observations and pod stats built from it.
#![no_main]

use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use monitor::simulate::error::deserialize_document;
use monitor::simulate::observe::{
    PodsCgroupLimit, fs_layout, make_signal_observations, summary_memory_capacity,
};
use monitor::simulate::stats::pods_with_stats;
use monitor::simulate::summary::Summary;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let summary: Summary = match deserialize_document(text, "summary.json", "") {
        Ok(summary) => summary,
        Err(e) => {
            let _ = e.to_string();
            return;
        }
    };
    for limit in [None, Some(0), Some(i64::MAX), Some(i64::MIN)] {
        let layout = fs_layout(&summary, None);
        let pods_limit = PodsCgroupLimit {
            memory_bytes: limit,
        };
        let _ = make_signal_observations(&summary, pods_limit, layout, Duration::MAX);
        let _ = make_signal_observations(&summary, pods_limit, layout, Duration::ZERO);
    }
    let _ = summary_memory_capacity(&summary);
    let _ = pods_with_stats(&[], &summary);
});
