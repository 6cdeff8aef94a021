//! Go duration syntax ("5m0s", "1m30s", "300ms", "1.5h", "0"), as Kubernetes writes
//! `metav1.Duration` values, with a serde helper.
use std::time::Duration;

use serde::{Deserialize, Deserializer, de};

/// Parses a Go duration. Negative durations are rejected: no setting here can use one.
pub fn parse_go_duration(text: &str) -> Result<Duration, String> {
    let s = text.trim();
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() {
        return Err("empty duration".into());
    }
    if s.starts_with('-') {
        return Err(format!("{text:?} is negative"));
    }
    let bad = || format!("{text:?} is not a duration (examples: 30s, 1m30s, 500ms, 2h)");
    let mut rest = s.strip_prefix('+').unwrap_or(s);
    let mut total = 0f64;
    while !rest.is_empty() {
        let number_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        let (number, tail) = rest.split_at(number_end);
        let value: f64 = number.parse().map_err(|_| bad())?;
        let unit_end = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_end);
        let seconds = match unit {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(bad()),
        };
        total += value * seconds;
        rest = tail;
    }
    Duration::try_from_secs_f64(total).map_err(|_| bad())
}

/// Formats like Go's `Duration.String()` for whole seconds and above ("1m30s", "5m0s", "0s").
pub fn format_go_duration(d: Duration) -> String {
    let total_ms = d.as_millis();
    if total_ms < 1000 && total_ms > 0 {
        return format!("{total_ms}ms");
    }
    let secs = d.as_secs();
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    let frac = d.subsec_millis();
    let s = if frac > 0 {
        format!("{s}.{frac:03}").trim_end_matches('0').to_string()
    } else {
        s.to_string()
    };
    match (h, m) {
        (0, 0) => format!("{s}s"),
        (0, m) => format!("{m}m{s}s"),
        (h, m) => format!("{h}h{m}m{s}s"),
    }
}

/// `#[serde(deserialize_with = "go_duration")]` for `Duration` fields.
pub fn go_duration<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(deserializer)?;
    parse_go_duration(&text).map_err(de::Error::custom)
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;

    #[rstest]
    #[case("0", 0)]
    #[case("0s", 0)]
    #[case("300ms", 300)]
    #[case("1m30s", 90_000)]
    #[case("5m0s", 300_000)]
    #[case("1.5h", 5_400_000)]
    #[case("2h3m4s", 7_384_000)]
    #[case("1500us", 1)]
    fn parses(#[case] text: &str, #[case] millis: u128) {
        assert_eq!(
            parse_go_duration(text).unwrap().as_millis(),
            millis,
            "{text}"
        );
    }

    #[rstest]
    #[case("")]
    #[case("10")]
    #[case("-1s")]
    #[case("1x")]
    #[case("s")]
    #[case("1..2s")]
    fn rejects(#[case] text: &str) {
        assert!(parse_go_duration(text).is_err(), "{text}");
    }

    #[rstest]
    #[case(90_000, "1m30s")]
    #[case(300_000, "5m0s")]
    #[case(0, "0s")]
    #[case(250, "250ms")]
    #[case(3_723_000, "1h2m3s")]
    fn formats(#[case] millis: u64, #[case] text: &str) {
        assert_eq!(format_go_duration(Duration::from_millis(millis)), text);
    }
}
