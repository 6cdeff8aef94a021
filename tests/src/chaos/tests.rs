use super::*;

#[test]
fn moments_replay_from_their_seed_and_stay_below_the_bound() {
    let mut a = Moments::new(42);
    let mut b = Moments::new(42);
    let first: Vec<u64> = (0..100).map(|_| a.below(3000)).collect();
    let second: Vec<u64> = (0..100).map(|_| b.below(3000)).collect();
    assert_eq!(first, second);
    assert!(first.iter().all(|m| *m < 3000));
    // Spread over the window, not stuck in one corner of it.
    assert!(first.iter().any(|m| *m < 1000) && first.iter().any(|m| *m >= 2000));
}

#[rstest::rstest]
#[case::fast_host(300, 25, 3200, 30_000)]
#[case::slow_start(2000, 160, 17780, 32_780)]
#[case::vm_start(4191, 335, 36_680, 51_680)]
#[case::very_slow_start(30_000, 1000, 108_500, 123_500)]
fn the_hog_gives_a_restarted_agent_three_starts(
    #[case] start_ms: u64,
    #[case] pause_ms: u64,
    #[case] window_ms: u64,
    #[case] deadline_ms: u64,
) {
    let pace = Pace::for_start(Duration::from_millis(start_ms));
    assert_eq!((pace.pause_ms, pace.kill_window_ms), (pause_ms, window_ms));
    // A hog the restarted agent starts only now still has its whole ramp to the
    // threshold (90 steps) before its eviction is due.
    assert!(pace.ramp_deadline() > Duration::from_millis(90 * pause_ms));
    assert_eq!(pace.ramp_deadline(), Duration::from_millis(deadline_ms));
}

#[test]
fn evictions_and_panics_are_read_from_json_lines() {
    let log = concat!(
        "{\"level\":\"WARN\",\"fields\":{\"message\":\"x\",\"reason\":\"Evicted\",\"object\":\"demo/hog-1\"}}\n",
        "{\"level\":\"INFO\",\"fields\":{\"message\":\"y\",\"reason\":\"Killing\",\"object\":\"demo/hog-1\"}}\n",
        "{\"level\":\"WARN\",\"fields\":{\"message\":\"x\",\"reason\":\"Evicted\",\"object\":\"demo/hog-1\"}}\n",
        "thread 'main' panicked at src/x.rs:1:1:\n",
    );
    let (evictions, panics) = read_log(log);
    assert_eq!(evictions.get("demo/hog-1"), Some(&2));
    assert_eq!(evictions.len(), 1);
    assert_eq!(panics, 1);
}

#[test]
fn a_clean_tally_has_zeros_and_any_loss_makes_it_unclean() {
    let mut tally = Tally {
        cycles: 50,
        ..Tally::default()
    };
    assert!(tally.clean());
    assert!(
        tally
            .table(50)
            .contains("| 50/50 | 0 | 0 | 0 | 0 | 0 | 0 | 0 |")
    );
    tally.orphan_cgroups = 1;
    assert!(!tally.clean());
}
