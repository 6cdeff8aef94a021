//! Percentiles and per-mode summaries of the race trials.
use serde::{Deserialize, Serialize};

/// Nearest-rank percentile (`p` in 0..=100) of unsorted values; none when empty.
/// With 20 trials p99 is the largest value: reported as such, not interpolated.
pub(crate) fn percentile(values: &[f64], p: f64) -> Option<f64> {
    let mut sorted: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    if sorted.is_empty() {
        return None;
    }
    sorted.sort_by(f64::total_cmp);
    let rank = ((p.clamp(0.0, 100.0) / 100.0) * sorted.len() as f64).ceil() as usize;
    let index = rank.saturating_sub(1).min(sorted.len() - 1);
    sorted.get(index).copied()
}

/// p50, p99 and max of a latency, over the trials that have it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Spread {
    /// Trials that have a value (the others: none, e.g. no wake before the trial ended).
    pub(crate) count: usize,
    pub(crate) p50_ms: Option<f64>,
    pub(crate) p99_ms: Option<f64>,
    pub(crate) max_ms: Option<f64>,
}

impl Spread {
    pub(crate) fn of(values: &[f64]) -> Spread {
        Spread {
            count: values.len(),
            p50_ms: percentile(values, 50.0),
            p99_ms: percentile(values, 99.0),
            max_ms: values
                .iter()
                .copied()
                .filter(|v| v.is_finite())
                .reduce(f64::max),
        }
    }
}

/// How many times slower `baseline` is than `mode` (p50 over p50); none when either is
/// missing or the mode's p50 is not positive (a ratio would be meaningless).
pub(crate) fn ratio(baseline: Option<f64>, mode: Option<f64>) -> Option<f64> {
    match (baseline, mode) {
        (Some(b), Some(m)) if m > 0.0 && b.is_finite() => Some(b / m),
        _ => None,
    }
}

/// A ratio as "15×" (one decimal below 10).
pub(crate) fn times(r: Option<f64>) -> String {
    match r {
        Some(r) if r >= 10.0 => format!("{r:.0}×"),
        Some(r) => format!("{r:.1}×"),
        None => "n/a".into(),
    }
}

/// A value in milliseconds for the table: "none" when missing.
pub(crate) fn ms(value: Option<f64>) -> String {
    match value {
        Some(v) if v.abs() >= 100.0 => format!("{v:.0}"),
        Some(v) if v.abs() >= 10.0 => format!("{v:.1}"),
        Some(v) => format!("{v:.2}"),
        None => "none".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case::empty(&[], 50.0, None)]
    #[case::single(&[7.0], 99.0, Some(7.0))]
    #[case::median_odd(&[3.0, 1.0, 2.0], 50.0, Some(2.0))]
    #[case::median_even_takes_lower(&[4.0, 1.0, 3.0, 2.0], 50.0, Some(2.0))]
    #[case::p99_of_twenty_is_the_max(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0, 13.0, 14.0, 15.0, 16.0, 17.0, 18.0, 19.0, 20.0], 99.0, Some(20.0))]
    #[case::nan_ignored(&[f64::NAN, 5.0], 50.0, Some(5.0))]
    #[case::zero_percent_is_min(&[9.0, 4.0], 0.0, Some(4.0))]
    fn nearest_rank(#[case] values: &[f64], #[case] p: f64, #[case] expected: Option<f64>) {
        assert_eq!(percentile(values, p), expected, "p{p} of {values:?}");
    }

    #[test]
    fn spread_counts_only_present_values() {
        let s = Spread::of(&[2.0, 8.0, 4.0]);
        assert_eq!(
            (s.count, s.p50_ms, s.p99_ms, s.max_ms),
            (3, Some(4.0), Some(8.0), Some(8.0))
        );
        assert_eq!(Spread::of(&[]).max_ms, None);
    }

    #[rstest]
    #[case::slower_baseline(Some(1000.0), Some(2.0), Some(500.0))]
    #[case::missing_baseline(None, Some(2.0), None)]
    #[case::missing_mode(Some(10.0), None, None)]
    #[case::zero_mode(Some(10.0), Some(0.0), None)]
    #[case::negative_mode(Some(10.0), Some(-0.5), None)]
    fn ratios(#[case] b: Option<f64>, #[case] m: Option<f64>, #[case] expected: Option<f64>) {
        assert_eq!(ratio(b, m), expected);
    }

    #[rstest]
    #[case(None, "none")]
    #[case(Some(0.123), "0.12")]
    #[case(Some(12.34), "12.3")]
    #[case(Some(1234.4), "1234")]
    fn formats(#[case] v: Option<f64>, #[case] expected: &str) {
        assert_eq!(ms(v), expected);
    }
}
