//! Go's `time.ParseDuration` syntax, which KubeletConfiguration durations and kubelet flags
//! use ("5m0s", "1m30s", "300ms", "1h", "0s", "1.5h").
use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("{0:?} is not a duration (expected Go syntax such as \"1m30s\", \"300ms\", \"5m0s\")")]
    Malformed(String),
    #[error("{0:?} has an unknown unit {1:?} (expected ns, us, ms, s, m or h)")]
    UnknownUnit(String, String),
    #[error("{0:?} is negative")]
    Negative(String),
    #[error("{0:?} is out of range")]
    OutOfRange(String),
}

/// Parses a Go duration. A bare "0" is allowed (as in Go); any other number needs a unit.
/// Negative durations are rejected: no setting the policy reads may be negative.
pub fn parse_go_duration(text: &str) -> Result<Duration, DurationError> {
    let malformed = || DurationError::Malformed(text.to_string());
    let s = text.trim();
    let (negative, mut rest) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        Some(_) => (false, s),
        None => return Err(malformed()),
    };
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(malformed());
    }
    let mut total_nanos: u128 = 0;
    while !rest.is_empty() {
        let number_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, after) = rest.split_at(number_end);
        if number.is_empty() || number == "." || number.matches('.').count() > 1 {
            return Err(malformed());
        }
        let unit_end = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, after_unit) = after.split_at(unit_end);
        let unit_nanos: u128 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60 * 1_000_000_000,
            "h" => 3_600 * 1_000_000_000,
            "" => return Err(malformed()),
            other => {
                return Err(DurationError::UnknownUnit(
                    text.to_string(),
                    other.to_string(),
                ));
            }
        };
        let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
        let out_of_range = || DurationError::OutOfRange(text.to_string());
        let int: u128 = if int_part.is_empty() {
            0
        } else {
            int_part.parse().map_err(|_| out_of_range())?
        };
        let mut nanos = int.checked_mul(unit_nanos).ok_or_else(out_of_range)?;
        if !frac_part.is_empty() {
            // Only as many fraction digits as can matter (Go also truncates below 1 ns).
            let digits = &frac_part[..frac_part.len().min(18)];
            let frac: u128 = digits.parse().map_err(|_| malformed())?;
            let scale = 10u128.pow(digits.len() as u32);
            nanos = nanos
                .checked_add(frac * unit_nanos / scale)
                .ok_or_else(out_of_range)?;
        }
        total_nanos = total_nanos.checked_add(nanos).ok_or_else(out_of_range)?;
        rest = after_unit;
    }
    if negative && total_nanos > 0 {
        return Err(DurationError::Negative(text.to_string()));
    }
    // Go durations are int64 nanoseconds.
    if total_nanos > i64::MAX as u128 {
        return Err(DurationError::OutOfRange(text.to_string()));
    }
    let secs = (total_nanos / 1_000_000_000) as u64;
    Ok(Duration::new(secs, (total_nanos % 1_000_000_000) as u32))
}

/// Formats a duration the way Go prints one ("5m0s", "1m30s", "300ms", "0s").
pub fn format_go_duration(duration: Duration) -> String {
    let nanos = duration.as_nanos();
    if nanos == 0 {
        return "0s".to_string();
    }
    if nanos < 1_000_000_000 {
        return match nanos {
            n if n % 1_000_000 == 0 => format!("{}ms", n / 1_000_000),
            n if n % 1_000 == 0 => format!("{}µs", n / 1_000),
            n => format!("{n}ns"),
        };
    }
    let total_secs = duration.as_secs();
    let (hours, minutes, secs) = (total_secs / 3600, (total_secs / 60) % 60, total_secs % 60);
    let sub = duration.subsec_nanos();
    let seconds = if sub == 0 {
        format!("{secs}s")
    } else {
        let frac = format!("{sub:09}");
        format!("{secs}.{}s", frac.trim_end_matches('0'))
    };
    match (hours, minutes) {
        (0, 0) => seconds,
        (0, m) => format!("{m}m{seconds}"),
        (h, m) => format!("{h}h{m}m{seconds}"),
    }
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;

    #[rstest]
    #[case("0", 0)]
    #[case("0s", 0)]
    #[case("5m0s", 300_000)]
    #[case("5m", 300_000)]
    #[case("1m30s", 90_000)]
    #[case("300ms", 300)]
    #[case("1h", 3_600_000)]
    #[case("1.5h", 5_400_000)]
    #[case("1h2m3s", 3_723_000)]
    #[case(".5s", 500)]
    #[case("2s500ms", 2_500)]
    #[case("+10s", 10_000)]
    #[case("1000us", 1)]
    fn parses(#[case] text: &str, #[case] millis: u64) {
        assert_eq!(
            parse_go_duration(text).unwrap(),
            Duration::from_millis(millis),
            "{text}"
        );
    }

    #[rstest]
    #[case("")]
    #[case("5")]
    #[case("s")]
    #[case("1d")]
    #[case("1.2.3s")]
    #[case("-1s")]
    #[case("five minutes")]
    #[case("9999999999h")]
    fn rejects(#[case] text: &str) {
        let err = parse_go_duration(text).unwrap_err();
        assert!(
            err.to_string().contains(&format!("{text:?}")),
            "{err} should name {text:?}"
        );
    }

    #[rstest]
    #[case(0, "0s")]
    #[case(300_000, "5m0s")]
    #[case(90_000, "1m30s")]
    #[case(300, "300ms")]
    #[case(3_723_000, "1h2m3s")]
    #[case(2_500, "2.5s")]
    fn formats_like_go(#[case] millis: u64, #[case] text: &str) {
        assert_eq!(format_go_duration(Duration::from_millis(millis)), text);
    }
}
