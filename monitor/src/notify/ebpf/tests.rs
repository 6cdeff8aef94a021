use super::*;

#[test]
fn finds_pid_offset_in_a_tracefs_format() {
    let format = "name: mark_victim\nID: 400\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
                  \tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n\tfield:int pid;\toffset:8;\tsize:4;\tsigned:1;\n\
                  \tfield:__data_loc char[] comm;\toffset:12;\tsize:4;\tsigned:0;\n";
    assert_eq!(parse_field_offset(format, "pid"), Some(8));
    assert_eq!(parse_field_offset(format, "comm"), Some(12));
    assert_eq!(parse_field_offset(format, "uid"), None);
}

#[test]
fn a_level_recorded_twice_by_racing_cpus_is_one_crossing() {
    let crossing = |cgroup_id, level_bytes, timestamp_ns| PressureEvent {
        kind: EventKind::Crossing as u32,
        pid: 0,
        timestamp_ns,
        cgroup_id,
        suppressed: 0,
        level_flags: 1,
        usage_bytes: level_bytes + 4096,
        level_bytes,
    };
    let first = crossing(7, 1 << 30, 1_000_000_000);
    assert!(same_crossing(&first, &crossing(7, 1 << 30, 1_000_004_500)));
    assert!(!same_crossing(&first, &crossing(7, 1 << 30, 1_001_000_000)));
    assert!(!same_crossing(&first, &crossing(8, 1 << 30, 1_000_004_500)));
    assert!(!same_crossing(&first, &crossing(7, 2 << 30, 1_000_004_500)));
}

#[test]
fn decodes_records_and_skips_short_ones() {
    let event = PressureEvent {
        kind: 3,
        pid: 42,
        timestamp_ns: 7,
        cgroup_id: 9,
        suppressed: 1,
        level_flags: 1,
        usage_bytes: 5 << 20,
        level_bytes: 4 << 20,
    };
    // SAFETY: viewing a POD value as its bytes.
    let bytes = unsafe {
        std::slice::from_raw_parts(
            (&event as *const PressureEvent).cast::<u8>(),
            PRESSURE_EVENT_SIZE,
        )
    };
    assert_eq!(decode(bytes), Some(event));
    assert_eq!(decode(&bytes[..8]), None);
}

fn record(kind: EventKind, timestamp_ns: u64) -> PressureEvent {
    PressureEvent {
        kind: kind as u32,
        pid: 1,
        timestamp_ns,
        cgroup_id: 7,
        suppressed: 0,
        level_flags: 1,
        usage_bytes: 0,
        level_bytes: 1 << 30,
    }
}

#[test]
fn a_burst_of_reclaim_records_is_at_most_one_hot_look_and_one_wake_per_interval() {
    let mut drain = Drain::default();
    let burst: Vec<PressureEvent> = (0..500)
        .map(|i| record(EventKind::MemcgReclaim, i))
        .collect();
    let first = drain.plan(&burst, 1_000_000_000);
    assert!(
        first.hot_check,
        "one look at the levels for the whole drain"
    );
    assert_eq!(first.wakes.len(), 1, "one wake for 500 records");
    // 50 ms later: within the interval, no wake and no look.
    let again = drain.plan(&burst[..10], 1_050_000_000);
    assert!(!again.hot_check);
    assert!(again.wakes.is_empty());
    // A crossing always wakes, and takes a pending reclaim record with it.
    let mut mixed = burst[..3].to_vec();
    mixed.push(record(EventKind::Crossing, 600));
    let crossing = drain.plan(&mixed, 1_060_000_000);
    assert_eq!(
        crossing
            .wakes
            .iter()
            .map(|e| EventKind::from_u32(e.kind))
            .collect::<Vec<_>>(),
        vec![Some(EventKind::Crossing), Some(EventKind::MemcgReclaim)]
    );
    // Past the interval: a reclaim record wakes again.
    let later = drain.plan(&burst[..1], 1_060_000_000 + RECLAIM_WAKE_INTERVAL_NS);
    assert_eq!(later.wakes.len(), 1);
}

#[test]
fn reclaim_without_crossings_wakes_ever_less_often_until_a_crossing() {
    let mut drain = Drain::default();
    let reclaim = [record(EventKind::MemcgReclaim, 0)];
    // A record every 10 ms for 10 s: the wakes come at growing intervals.
    let wakes: Vec<u64> = (0..1000u64)
        .map(|i| 1_000_000_000 + i * 10_000_000)
        .filter(|now| !drain.plan(&reclaim, *now).wakes.is_empty())
        .collect();
    let gaps: Vec<u64> = wakes
        .windows(2)
        .map(|w| (w[1] - w[0]) / 1_000_000)
        .collect();
    assert_eq!(&gaps[..4], &[250, 500, 1000, 2000], "{gaps:?}");
    assert!(gaps[4..].iter().all(|g| *g == 2000), "capped: {gaps:?}");
    assert_eq!(wakes.len(), 8, "eight in 10 s instead of forty: {gaps:?}");
    // A crossing wakes at once and brings the interval back to its start.
    let mut mixed = reclaim.to_vec();
    mixed.push(record(EventKind::Crossing, 1));
    let now = wakes[wakes.len() - 1] + 10_000_000;
    assert_eq!(drain.plan(&mixed, now).wakes.len(), 2);
    assert!(drain.plan(&reclaim, now + 200_000_000).wakes.is_empty());
    assert_eq!(
        drain
            .plan(&reclaim, now + RECLAIM_WAKE_INTERVAL_NS)
            .wakes
            .len(),
        1
    );
}

#[test]
fn kernel_kill_stamps_wake_nothing_and_duplicated_crossings_are_dropped() {
    let mut drain = Drain::default();
    let batch = vec![
        record(EventKind::KillSignal, 10),
        record(EventKind::Crossing, 20),
        record(EventKind::Crossing, 25),
        record(EventKind::KswapdWake, 30),
    ];
    let actions = drain.plan(&batch, 1_000);
    assert_eq!(actions.kills.len(), 1);
    assert!(actions.hot_check, "a hard crossing");
    assert_eq!(
        actions
            .wakes
            .iter()
            .map(|e| EventKind::from_u32(e.kind))
            .collect::<Vec<_>>(),
        vec![Some(EventKind::Crossing), Some(EventKind::KswapdWake)],
        "the second crossing is the first one recorded twice"
    );
    // kswapd alone: a wake, no look at the levels.
    let alone = drain.plan(&[record(EventKind::KswapdWake, 0)], 500_000_000);
    assert!(!alone.hot_check);
    assert_eq!(alone.wakes.len(), 1);
}

/// A hook that counts what it is told.
#[derive(Default)]
struct Told {
    hard: std::sync::atomic::AtomicU32,
    early: std::sync::Mutex<Vec<(u64, u64)>>,
    kills: bool,
}

impl super::super::CrossingHook for Told {
    fn hard_crossing(&self, _source: WakeSource) {
        self.hard.fetch_add(1, Ordering::Relaxed);
    }

    fn early_crossing(&self, _source: WakeSource, margin: u64, level: u64) -> bool {
        self.early.lock().unwrap().push((margin, level));
        self.kills
    }
}

#[test]
fn an_early_record_starts_a_watch_and_wakes_the_loop_only_when_the_watch_kills() {
    let early = PressureEvent {
        level_flags: LEVEL_EARLY,
        level_bytes: 96 << 20,
        ..record(EventKind::Crossing, 100)
    };
    let mut drain = Drain::default();
    drain.early_margin.store(4 << 20, Ordering::Relaxed);
    let actions = drain.plan(&[early], 1_000);
    assert_eq!(actions.early, Some((7, 96 << 20)));
    assert!(!actions.hot_check, "not a crossing of a hard level");
    assert!(
        actions.wakes.is_empty(),
        "a head start wakes nothing itself"
    );

    for kills in [false, true] {
        let told = Arc::new(Told {
            kills,
            ..Told::default()
        });
        let hook: Hook = Some(told.clone());
        let (wakes, mut rx) = super::super::wake_channel();
        let mut drain = Drain::default();
        drain.early_margin.store(4 << 20, Ordering::Relaxed);
        // The early record and, in the same drain, the hard level's: one hard look, then
        // the watch.
        let hard = PressureEvent {
            level_bytes: 100 << 20,
            ..record(EventKind::Crossing, 101)
        };
        drain.handle(&[early, hard], 1_000, &wakes, &hook);
        assert_eq!(told.hard.load(Ordering::Relaxed), 1);
        assert_eq!(*told.early.lock().unwrap(), vec![(4 << 20, 7 ^ (96 << 20))]);
        let mut woken = Vec::new();
        while let Ok(wake) = rx.try_recv() {
            woken.push(wake.detail.kernel_kind());
        }
        // The watch's kill is booked first, then the hard level's record wakes.
        let expected = if kills {
            vec![None, Some(EventKind::Crossing)]
        } else {
            vec![Some(EventKind::Crossing)]
        };
        assert_eq!(woken, expected, "kills: {kills}");
    }
}

#[test]
fn the_pods_path_holds_each_directory_id_and_its_filter_keeps_the_pods_and_their_path() {
    use std::os::unix::fs::MetadataExt;
    let mount = tempfile::tempdir().expect("tempdir");
    let pods = mount.path().join("monitor/kubepods");
    std::fs::create_dir_all(pods.join("besteffort/podx")).expect("dirs");
    std::fs::create_dir_all(mount.path().join("system.slice/cron.service")).expect("dirs");
    let ino = |p: &Path| std::fs::metadata(p).expect("stat").ino();
    let path = pods_path(mount.path(), &pods).expect("pods path");
    assert_eq!(path.level, 2);
    assert_eq!(
        &path.ids[..3],
        &[
            ino(mount.path()),
            ino(&mount.path().join("monitor")),
            ino(&pods)
        ]
    );
    // In the pods tree: its ancestor at level 2 is the pods cgroup.
    let pod = pods.join("besteffort/podx");
    assert!(path.concerns_pods(ino(&pod), ino(&pods)));
    // On the path: the root (kswapd), and the agent's own cgroup root.
    assert!(path.concerns_pods(ino(mount.path()), 0));
    assert!(path.concerns_pods(ino(&mount.path().join("monitor")), 0));
    // A service elsewhere, reclaiming at its own limit: dropped.
    let service = mount.path().join("system.slice/cron.service");
    assert!(!path.concerns_pods(ino(&service), ino(&service)));
    // No filter when unset.
    assert!(PodsPath::default().concerns_pods(ino(&service), 0));
    // Bad input: a directory outside the mount, a missing one.
    assert!(pods_path(&pods, mount.path()).is_err());
    assert!(pods_path(mount.path(), &mount.path().join("gone")).is_err());
}
