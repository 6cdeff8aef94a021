use super::data::*;
use super::style::*;
use super::*;
use rstest::rstest;

fn close(a: &[f64], b: &[f64]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| (x - y).abs() <= 1e-9 * y.abs().max(1.0))
}

#[rstest]
#[case::unit_steps(0.0, 10.0, 6, vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0])]
#[case::rounded_out(-95.0, 480.0, 9, vec![-100.0, 0.0, 100.0, 200.0, 300.0, 400.0, 500.0])]
#[case::working_set(600.0, 1044.48, 8, vec![600.0, 700.0, 800.0, 900.0, 1000.0, 1100.0])]
#[case::fives(0.0, 23.0, 6, vec![0.0, 5.0, 10.0, 15.0, 20.0, 25.0])]
#[case::fractions(0.0, 0.9, 10, vec![0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9])]
#[case::reversed(10.0, 0.0, 6, vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0])]
#[case::one_value(5.0, 5.0, 6, vec![5.0, 6.0])]
fn linear_ticks_are_round_and_cover_the_range(
    #[case] lo: f64,
    #[case] hi: f64,
    #[case] max: usize,
    #[case] expected: Vec<f64>,
) {
    let ticks = linear_ticks(lo, hi, max);
    assert!(close(&ticks, &expected), "{ticks:?}");
    assert!(ticks.len() <= max.max(2));
}

#[rstest]
#[case::decades(0.05, 12_000.0, vec![0.01, 0.1, 1.0, 10.0, 100.0, 1000.0, 10_000.0, 100_000.0])]
#[case::exact_decades(1.0, 100.0, vec![1.0, 10.0, 100.0])]
#[case::within_one_decade(0.2, 0.9, vec![0.1, 1.0])]
#[case::one_value(1.0, 1.0, vec![1.0, 10.0])]
fn log_ticks_are_decades(#[case] lo: f64, #[case] hi: f64, #[case] expected: Vec<f64>) {
    let ticks = log_ticks(lo, hi);
    assert!(close(&ticks, &expected), "{ticks:?}");
}

#[rstest]
#[case::zero(0.0, "0")]
#[case::microseconds(0.1, "100 µs")]
#[case::fraction_of_a_millisecond(0.0125, "12.5 µs")]
#[case::milliseconds(1.0, "1 ms")]
#[case::decimal_ms(2.5, "2.5 ms")]
#[case::negative(-100.0, "-100 ms")]
#[case::seconds(1000.0, "1 s")]
#[case::decimal_seconds(15_500.0, "15.5 s")]
fn durations_read_in_their_unit(#[case] ms: f64, #[case] expected: &str) {
    assert_eq!(duration_label(ms), expected);
}

#[rstest]
#[case::three_digits(116.454, 116.0)]
#[case::small(0.097553, 0.0976)]
#[case::large(24503.2, 24500.0)]
#[case::zero(0.0, 0.0)]
fn measured_values_keep_three_digits(#[case] v: f64, #[case] expected: f64) {
    assert!(
        (significant(v) - expected).abs() < 1e-9,
        "{}",
        significant(v)
    );
}

#[rstest]
#[case::sorted_steps(
        vec![3.0, 1.0, 2.0],
        4,
        vec![(1.0, 0.0), (1.0, 0.25), (2.0, 0.25), (2.0, 0.5), (3.0, 0.5), (3.0, 0.75)]
    )]
#[case::all_trials(vec![5.0], 1, vec![(5.0, 0.0), (5.0, 1.0)])]
#[case::none(vec![], 2, vec![])]
#[case::not_finite_left_out(vec![f64::NAN, 2.0], 2, vec![(2.0, 0.0), (2.0, 0.5)])]
fn cdf_counts_every_trial(
    #[case] values: Vec<f64>,
    #[case] total: usize,
    #[case] expected: Vec<(f64, f64)>,
) {
    assert_eq!(cdf_steps(&values, total), expected);
}

#[rstest]
#[case::flat_runs_dropped(
        vec![(0.0, 600.0), (1.0, 600.2), (2.0, 600.4), (3.0, 602.0), (30.0, 602.0), (31.0, 602.0)],
        vec![(0.0, 600.0), (3.0, 602.0), (30.0, 602.0), (31.0, 602.0)]
    )]
#[case::climb_kept(
        vec![(0.0, 600.0), (1.0, 602.0), (2.0, 604.0)],
        vec![(0.0, 600.0), (1.0, 602.0), (2.0, 604.0)]
    )]
#[case::empty(vec![], vec![])]
fn thinning_keeps_the_shape(#[case] curve: Vec<(f64, f64)>, #[case] expected: Vec<(f64, f64)>) {
    assert_eq!(thin(&curve, 1.0, 20.0), expected);
}

fn trial(mode: &str, n: u32, extra: &str) -> Trial {
    serde_json::from_str(&format!(
        r#"{{"mode":"{mode}","rate":"full","trial":{n},"node_mib":1024,"phase_delay_ms":0,
               "peak_mib":0,"oom_kills":0,"oom_first":false,"sync_durations_ms":[]{extra}}}"#
    ))
    .expect("trial JSON")
}

/// A trial the agent won: crossing at 100 ms, wake at 102, kill at 105.
const RACE: &str = r#","crossing_ms":100.0,"kill_ms":105.0,"crossing_to_kill_ms":5.0,
        "wake_ms":102.0,"crossing_to_wake_ms":2.0,
        "curve":[[0.0,600.0],[90.0,800.0],[100.0,824.0],[110.0,900.0],[130.0,620.0]]"#;

#[rstest]
#[case::crossed(
        RACE,
        Some(Aligned {
            curve: vec![(-100.0, 600.0), (-10.0, 800.0), (0.0, 824.0), (10.0, 900.0), (30.0, 620.0)],
            wake: Some((2.0, 824.0)),
            kill: Some((5.0, 824.0)),
            oom: None,
            on_kill: false,
        })
    )]
#[case::killed_unseen(
        r#","kill_ms":50.0,"curve":[[0.0,600.0],[50.0,820.0]]"#,
        Some(Aligned {
            curve: vec![(-50.0, 600.0), (0.0, 820.0)],
            wake: None,
            kill: Some((0.0, 820.0)),
            oom: None,
            on_kill: true,
        })
    )]
#[case::neither_crossing_nor_kill(r#","curve":[[0.0,600.0]]"#, None)]
#[case::no_curve(r#","crossing_ms":100.0"#, None)]
fn trials_are_aligned_on_their_crossing(#[case] extra: &str, #[case] expected: Option<Aligned>) {
    assert_eq!(aligned(&trial("memcg", 1, extra)), expected);
}

#[rstest]
#[case::kernel_stamp_first(
        Latency::Kill,
        vec![
            r#","kill_ms":5.0,"crossing_to_kill_ms":3.0,"kernel_crossing_to_kill_us":150.0"#,
            r#","kill_ms":5.0,"crossing_to_kill_ms":4.0"#,
            r#","oom_ms":9.0"#,
            r#","kill_ms":5.0"#,
        ],
        Measured { values: vec![0.15, 4.0], total: 3, unmeasured: 1 }
    )]
#[case::wake_from_the_sampler(
        Latency::Wake,
        vec![
            r#","wake_ms":5.0,"crossing_to_wake_ms":2.0,"kernel_crossing_to_kill_us":150.0"#,
            r#","wake_ms":5.0"#,
            "",
        ],
        Measured { values: vec![2.0], total: 2, unmeasured: 1 }
    )]
fn latencies_count_unseen_crossings_apart(
    #[case] latency: Latency,
    #[case] extras: Vec<&str>,
    #[case] expected: Measured,
) {
    let trials: Vec<Trial> = extras.iter().map(|e| trial("ebpf", 1, e)).collect();
    let refs: Vec<&Trial> = trials.iter().collect();
    assert_eq!(measured(&refs, latency), expected);
}

#[test]
fn groups_keep_the_order_of_the_run() {
    let trials = vec![
        trial("poll-1s", 1, ""),
        trial("memcg", 1, ""),
        trial("poll-1s", 2, ""),
    ];
    let got: Vec<(&str, Vec<u32>)> = groups(&trials)
        .into_iter()
        .map(|(_, m, ts)| (m, ts.iter().map(|t| t.trial).collect()))
        .collect();
    assert_eq!(got, vec![("poll-1s", vec![1, 2]), ("memcg", vec![1])]);
}

fn run(pods: usize, stages: [Option<f64>; 2], freed_ms: Option<f64>) -> ScaleRun {
    let spread = |v: Option<f64>| crate::stats::Spread::of(&v.into_iter().collect::<Vec<_>>());
    ScaleRun {
        sources: "all".into(),
        pods,
        running: pods + 1,
        headroom_mib: 50,
        planned: 1,
        trials: Vec::new(),
        avoided: 1,
        crossing_to_signal_us: spread(None),
        stage_p50_us: stages,
        stage_p99_us: stages,
        signal_to_freed_ms: spread(freed_ms),
        signal_to_uncharged_ms: spread(None),
        synchronize_ms: spread(None),
    }
}

#[rstest]
#[case::all_stages(
        run(110, [Some(80.0), Some(90.0)], Some(2.5)),
        [Some(80.0), Some(90.0), Some(2500.0)]
    )]
#[case::no_kernel_stamp(run(10, [None, None], None), [None, None, None])]
fn stage_bars_are_the_medians_in_us(#[case] run: ScaleRun, #[case] expected: [Option<f64>; 3]) {
    let bars = stage_bars(&[run]);
    assert_eq!(bars[0].stages_us, expected);
    assert!(bars[0].label.ends_with("pods, 50 MiB"), "{}", bars[0].label);
}

#[test]
fn every_picture_is_written_with_its_series_named() {
    let dir = tempfile::tempdir().expect("temp dir");
    let trials = vec![
        trial(
            "poll-1s",
            1,
            r#","crossing_ms":100.0,"oom_ms":180.0,"curve":[[0.0,600.0],[100.0,824.0],[180.0,1024.0]]"#,
        ),
        trial("poll-1s", 2, RACE),
        trial("ebpf", 1, RACE),
        trial("ebpf", 2, RACE),
    ];
    let runs = vec![run(110, [Some(80.0), Some(90.0)], Some(2.5))];
    let written = write_all(dir.path(), &trials, &runs).expect("plots");
    let names: Vec<String> = written
        .iter()
        .map(|p| {
            p.file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .to_string()
        })
        .collect();
    assert_eq!(
        names,
        [
            "cdf-kill-full.svg",
            "cdf-wake-full.svg",
            "stages.svg",
            "full-poll-1s.svg",
            "full-ebpf.svg"
        ]
    );
    let read = |name: &str| std::fs::read_to_string(dir.path().join(name)).expect(name);
    let cdf = read("cdf-kill-full.svg");
    for label in ["poll-1s: 1 of 2", "ebpf: 2 of 2", "1 ms", "100 %"] {
        assert!(cdf.contains(label), "{label} missing from the CDF");
    }
    let stages = read("stages.svg");
    for label in [
        "110 pods, 50 MiB",
        "80 µs + 90 µs + 2.5 ms",
        "crossing → hot path told",
        "told → SIGKILL",
        "SIGKILL → memory freed",
    ] {
        assert!(stages.contains(label), "{label} missing from the stages");
    }
    let poll = read("full-poll-1s.svg");
    for label in [
        "2 trials",
        "one trial (2 in all)",
        "agent kill (1 of 2)",
        "kernel OOM kill (1 of 2)",
        "threshold 824 MiB",
    ] {
        assert!(poll.contains(label), "{label} missing from the trials");
    }
}
