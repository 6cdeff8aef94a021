//! RFC 3339 timestamps (the Summary API's `time` fields, Go's `metav1.Time`): parsed by
//! the `time` crate's strict RFC 3339 parser; the simulation only orders and subtracts them.
use std::time::Duration;

use serde::{Deserialize, Deserializer, de};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// An instant as nanoseconds since the Unix epoch (UTC). Only compared and subtracted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Timestamp {
    nanos: i128,
}

impl Timestamp {
    /// The offset from the Unix epoch, or zero for instants before it (the policy's `Time`
    /// is a non-negative offset from an arbitrary origin; pre-1970 stats do not occur).
    pub(crate) fn since_epoch(self) -> Duration {
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
pub(crate) enum TimestampError {
    #[error("{text:?} is not an RFC 3339 timestamp (expected e.g. 2024-05-01T10:00:00Z)")]
    NotRfc3339 { text: String },
}

/// Parses `2024-05-01T10:00:00Z`, `2024-05-01T10:00:00.123456789+02:00` and the lower-case
/// `t`/`z` forms RFC 3339 allows.
pub(crate) fn parse_rfc3339(text: &str) -> Result<Timestamp, TimestampError> {
    let parsed = OffsetDateTime::parse(text, &Rfc3339).map_err(|_| TimestampError::NotRfc3339 {
        text: text.to_string(),
    })?;
    Ok(Timestamp {
        nanos: parsed.unix_timestamp_nanos(),
    })
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
    #[case("1970-01-01t00:00:10z", 10_000_000_000)]
    #[case("1969-12-31T23:00:00-01:00", 0)]
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
