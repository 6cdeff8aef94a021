//! The bucket ladders of the agent's histograms, one per measure: each is fine where its
//! values gather and where a regression would show, coarse elsewhere, so that quantiles
//! mean something without a bucket per microsecond; upper bounds in seconds. The
//! metrics' family table renders each histogram with its ladder.

/// Observation read to eviction decision: the synchronize reads a fresh observation per
/// wake (well under a millisecond old), the housekeeping timer's may be up to its
/// interval old. From 5 ms up these are the kubelet's bounds (DefBuckets), so that the
/// two compare.
pub(crate) const STATS_AGE_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

/// A synchronize pass: reading the node and its pods' cgroups and deciding take
/// milliseconds; evicting and garbage collection under a slow runtime take seconds.
pub(crate) const SYNC_DURATION_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Wake to synchronize: tens of microseconds for an idle loop, up to seconds for a wake
/// that waited for a long pass to end.
pub(crate) const WAKE_TO_SYNC_BUCKETS: &[f64] = &[
    0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// The hot kill path, crossing to `cgroup.kill`: its point is to act within a few hundred
/// microseconds, so there its bounds are 25 to 250 µs apart; milliseconds mean the path
/// was delayed, and past 100 ms only that it was.
pub(crate) const CROSSING_TO_KILL_BUCKETS: &[f64] = &[
    0.00001, 0.000025, 0.00005, 0.000075, 0.0001, 0.00015, 0.0002, 0.0003, 0.0005, 0.00075, 0.001,
    0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 1.0,
];
