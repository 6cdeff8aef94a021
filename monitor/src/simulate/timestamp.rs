//! RFC 3339 timestamps (the Summary API's `time` fields, Go's `metav1.Time`), parsed
//! without a date-time crate: the simulation only needs to order them.
use std::time::Duration;

use serde::{Deserialize, Deserializer, de};

/// An instant as nanoseconds since the Unix epoch (UTC). Only compared and subtracted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp {
    nanos: i128,
}

impl Timestamp {
    /// The offset from the Unix epoch, or zero for instants before it (the policy's `Time`
    /// is a non-negative offset from an arbitrary origin; pre-1970 stats do not occur).
    pub fn since_epoch(self) -> Duration {
        let nanos = self.nanos.clamp(0, u64::MAX as i128 * 1_000_000_000);
        Duration::new(
            (nanos / 1_000_000_000) as u64,
            (nanos % 1_000_000_000) as u32,
        )
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        parse_rfc3339(&text).map_err(de::Error::custom)
    }
}

/// Text that is not an RFC 3339 timestamp. One error for every defect: the expected form
/// tells the user more than which part was wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TimestampError {
    #[error("{text:?} is not an RFC 3339 timestamp (expected e.g. 2024-05-01T10:00:00Z)")]
    NotRfc3339 { text: String },
}

/// Parses `2024-05-01T10:00:00Z`, `2024-05-01T10:00:00.123456789+02:00` and the lower-case
/// `t`/`z` forms RFC 3339 allows.
pub fn parse_rfc3339(text: &str) -> Result<Timestamp, TimestampError> {
    let bad = || TimestampError::NotRfc3339 {
        text: text.to_string(),
    };
    let b = text.as_bytes();
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't' | b' ')
        || b[13] != b':'
        || b[16] != b':'
    {
        return Err(bad());
    }
    let num = |range: std::ops::Range<usize>| -> Result<i64, TimestampError> {
        let s = text.get(range).ok_or_else(bad)?;
        if !s.bytes().all(|c| c.is_ascii_digit()) {
            return Err(bad());
        }
        s.parse::<i64>().map_err(|_| bad())
    };
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&month)
        || day < 1
        || day > days_in_month(year, month)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return Err(bad());
    }
    let mut rest = &text[19..];
    let mut nanos: i128 = 0;
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(bad());
        }
        // Keep nanosecond precision; extra digits are truncated as Go's parser does.
        for (i, c) in frac.bytes().take(digits).enumerate() {
            if i < 9 {
                nanos = nanos * 10 + i128::from(c - b'0');
            }
        }
        for _ in digits..9 {
            nanos *= 10;
        }
        rest = &frac[digits..];
    }
    let offset_seconds: i64 = match rest {
        "Z" | "z" => 0,
        _ => {
            let sign = match rest.as_bytes().first() {
                Some(b'+') => 1,
                Some(b'-') => -1,
                _ => return Err(bad()),
            };
            let ob = rest.as_bytes();
            if ob.len() != 6 || ob[3] != b':' {
                return Err(bad());
            }
            let oh = num_in(rest, 1..3).ok_or_else(bad)?;
            let om = num_in(rest, 4..6).ok_or_else(bad)?;
            if oh > 23 || om > 59 {
                return Err(bad());
            }
            sign * (oh * 3600 + om * 60)
        }
    };
    let days = days_from_civil(year, month, day);
    let seconds = days * 86_400 + hour * 3600 + minute * 60 + second - offset_seconds;
    Ok(Timestamp {
        nanos: i128::from(seconds) * 1_000_000_000 + nanos,
    })
}

fn num_in(text: &str, range: std::ops::Range<usize>) -> Option<i64> {
    let s = text.get(range)?;
    if !s.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

fn is_leap(year: i64) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;

    #[rstest]
    #[case("1970-01-01T00:00:00Z", 0)]
    #[case("1970-01-01T00:00:10Z", 10_000_000_000)]
    #[case("1970-01-01T01:00:00+01:00", 0)]
    #[case("1970-01-01T00:00:00.5Z", 500_000_000)]
    #[case("2000-03-01T00:00:00Z", 951_868_800_000_000_000)]
    #[case("2024-02-29T12:00:00.123456789Z", 1_709_208_000_123_456_789)]
    fn rfc3339_parses_to_epoch_nanos(#[case] text: &str, #[case] nanos: i128) {
        let ts = parse_rfc3339(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(ts.nanos, nanos, "{text}");
    }

    #[rstest]
    #[case("")]
    #[case("2024-13-01T00:00:00Z")]
    #[case("2023-02-29T00:00:00Z")]
    #[case("2024-01-01 00:00")]
    #[case("2024-01-01T00:00:00")]
    #[case("2024-01-01T00:00:00+0100")]
    #[case("2024-01-01T00:00:00.Z")]
    #[case("2024-01-01T00:00:0éZ")]
    fn rfc3339_rejects_malformed(#[case] text: &str) {
        let err = parse_rfc3339(text).expect_err(text).to_string();
        assert!(err.contains("RFC 3339"), "{err}");
    }
}
