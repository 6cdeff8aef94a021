//! Kubernetes resource quantities ("500Mi", "1.5Gi", "100m", "2", "1e3") and
//! percentages ("10%"), parsed exactly: the value is kept in milli-units so CPU
//! quantities like "250m" and byte quantities like "1.5Gi" share one type.
//!
//! Matches k8s.io/apimachinery's resource.Quantity for the suffixes users write: binary
//! (Ki Mi Gi Ti Pi Ei), decimal (n u m "" k M G T P E) and decimal exponents (e/E).
use std::fmt;

use serde::{Deserialize, Deserializer, de};

/// A parsed quantity, in thousandths of the base unit (bytes, cores, pods, …).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Quantity {
    milli: i128,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    #[error("empty quantity")]
    Empty,
    #[error(
        "{0:?} is not a quantity (expected a number with an optional suffix such as Ki, Mi, Gi, k, M, G or m)"
    )]
    Malformed(String),
    #[error("{0:?} has an unknown suffix {1:?}")]
    UnknownSuffix(String, String),
    #[error("{0:?} is out of range")]
    OutOfRange(String),
}

impl Quantity {
    pub const ZERO: Quantity = Quantity { milli: 0 };

    pub fn from_units(units: i64) -> Self {
        Quantity {
            milli: units as i128 * 1000,
        }
    }

    pub fn from_milli(milli: i64) -> Self {
        Quantity {
            milli: milli as i128,
        }
    }

    /// The value in base units, rounded up (the kubelet's `Value()`: 1.5 bytes is 2).
    pub fn value(self) -> i64 {
        let units = self.milli.div_euclid(1000) + i128::from(self.milli.rem_euclid(1000) != 0);
        units.clamp(i64::MIN as i128, i64::MAX as i128) as i64
    }

    /// The value in thousandths (the kubelet's `MilliValue()`).
    pub fn milli_value(self) -> i64 {
        self.milli.clamp(i64::MIN as i128, i64::MAX as i128) as i64
    }

    pub fn is_negative(self) -> bool {
        self.milli < 0
    }

    pub fn is_zero(self) -> bool {
        self.milli == 0
    }
}

impl std::ops::Add for Quantity {
    type Output = Quantity;
    fn add(self, rhs: Quantity) -> Quantity {
        Quantity {
            milli: self.milli + rhs.milli,
        }
    }
}

impl std::ops::Sub for Quantity {
    type Output = Quantity;
    fn sub(self, rhs: Quantity) -> Quantity {
        Quantity {
            milli: self.milli - rhs.milli,
        }
    }
}

impl std::iter::Sum for Quantity {
    fn sum<I: Iterator<Item = Quantity>>(iter: I) -> Quantity {
        iter.fold(Quantity::ZERO, |a, b| a + b)
    }
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.milli % 1000 == 0 {
            let units = self.milli / 1000;
            for (suffix, scale) in [("Gi", 1i128 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)] {
                if units != 0 && units % scale == 0 {
                    return write!(f, "{}{}", units / scale, suffix);
                }
            }
            write!(f, "{units}")
        } else {
            write!(f, "{}m", self.milli)
        }
    }
}

impl std::str::FromStr for Quantity {
    type Err = QuantityError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_quantity(s)
    }
}

/// Parses a Kubernetes quantity.
pub fn parse_quantity(text: &str) -> Result<Quantity, QuantityError> {
    let s = text.trim();
    if s.is_empty() {
        return Err(QuantityError::Empty);
    }
    let malformed = || QuantityError::Malformed(text.to_string());
    let (negative, body) = match s.as_bytes()[0] {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let number_end = body
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(body.len());
    let (number, suffix) = body.split_at(number_end);
    if number.is_empty() || number == "." || number.matches('.').count() > 1 {
        return Err(malformed());
    }
    let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
    // value = digits × 10^(exp10) × 2^(exp2), digits an integer.
    let digits: String = format!("{int_part}{frac_part}");
    let digits: i128 = digits
        .parse()
        .map_err(|_| QuantityError::OutOfRange(text.to_string()))?;
    let mut exp10: i32 = -(frac_part.len() as i32);
    let mut exp2: u32 = 0;
    match suffix {
        "" => {}
        "n" => exp10 -= 9,
        "u" => exp10 -= 6,
        "m" => exp10 -= 3,
        "k" => exp10 += 3,
        "M" => exp10 += 6,
        "G" => exp10 += 9,
        "T" => exp10 += 12,
        "P" => exp10 += 15,
        "E" => exp10 += 18,
        "Ki" => exp2 = 10,
        "Mi" => exp2 = 20,
        "Gi" => exp2 = 30,
        "Ti" => exp2 = 40,
        "Pi" => exp2 = 50,
        "Ei" => exp2 = 60,
        other if other.starts_with(['e', 'E']) => {
            let e: i32 = other[1..].parse().map_err(|_| malformed())?;
            exp10 += e;
        }
        other => {
            return Err(QuantityError::UnknownSuffix(
                text.to_string(),
                other.to_string(),
            ));
        }
    }
    // Milli-units: one more factor of 10^3. Round up any fraction below a milli-unit, as
    // the apimachinery does when it scales a quantity to milli.
    exp10 += 3;
    let out_of_range = || QuantityError::OutOfRange(text.to_string());
    let mut value = digits.checked_mul(1i128 << exp2).ok_or_else(out_of_range)?;
    if exp10 >= 0 {
        let scale = 10i128.checked_pow(exp10 as u32).ok_or_else(out_of_range)?;
        value = value.checked_mul(scale).ok_or_else(out_of_range)?;
    } else {
        let scale = 10i128
            .checked_pow((-exp10) as u32)
            .ok_or_else(out_of_range)?;
        value = value / scale + i128::from(value % scale != 0);
    }
    if value > i64::MAX as i128 * 1000 {
        return Err(out_of_range());
    }
    Ok(Quantity {
        milli: if negative { -value } else { value },
    })
}

/// A threshold or reservation value: an absolute quantity or a percentage of a capacity.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum QuantityOrPercent {
    Quantity(Quantity),
    /// A fraction in [0, 1] (the kubelet stores "10%" as 0.1).
    Percent(f64),
}

impl QuantityOrPercent {
    /// Resolves against `capacity` (in base units); percentages round down as the kubelet's
    /// `GetThresholdQuantity` does (`int64(float64(capacity) * percentage)`).
    pub fn resolve(self, capacity: i64) -> i64 {
        match self {
            QuantityOrPercent::Quantity(q) => q.value(),
            QuantityOrPercent::Percent(p) => (capacity as f64 * p) as i64,
        }
    }
}

/// Parses "10%" (a fraction 0.1, must lie in [0, 100]) or a quantity (must not be negative).
pub fn parse_quantity_or_percent(text: &str) -> Result<QuantityOrPercent, QuantityError> {
    let s = text.trim();
    if let Some(p) = s.strip_suffix('%') {
        let value: f64 = p
            .trim()
            .parse()
            .map_err(|_| QuantityError::Malformed(text.to_string()))?;
        if !(0.0..=100.0).contains(&value) {
            return Err(QuantityError::OutOfRange(text.to_string()));
        }
        return Ok(QuantityOrPercent::Percent(value / 100.0));
    }
    let q = parse_quantity(s)?;
    if q.is_negative() {
        return Err(QuantityError::OutOfRange(text.to_string()));
    }
    Ok(QuantityOrPercent::Quantity(q))
}

impl<'de> Deserialize<'de> for Quantity {
    /// Accepts a string ("1Gi") or a bare number (YAML `memory: 1000`).
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Text(String),
            Int(i64),
            Float(f64),
        }
        match Raw::deserialize(deserializer)? {
            Raw::Text(s) => parse_quantity(&s).map_err(de::Error::custom),
            Raw::Int(i) => Ok(Quantity::from_units(i)),
            Raw::Float(f) => parse_quantity(&f.to_string()).map_err(de::Error::custom),
        }
    }
}

impl serde::Serialize for Quantity {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;

    #[rstest]
    #[case("0", 0)]
    #[case("1", 1000)]
    #[case("100m", 100)]
    #[case("1.5", 1500)]
    #[case("500Mi", 500 * 1024 * 1024 * 1000)]
    #[case("1.5Gi", 3 * 512 * 1024 * 1024 * 1000)]
    #[case("1Ki", 1024 * 1000)]
    #[case("1k", 1_000_000)]
    #[case("2M", 2_000_000_000)]
    #[case("1G", 1_000_000_000_000)]
    #[case("1e3", 1_000_000)]
    #[case("1E3", 1_000_000)]
    #[case("-1", -1000)]
    #[case("1n", 1)] // rounds up to one milli
    #[case("  10Gi ", 10 * 1024 * 1024 * 1024 * 1000)]
    fn parses(#[case] text: &str, #[case] milli: i128) {
        assert_eq!(parse_quantity(text).unwrap(), Quantity { milli }, "{text}");
    }

    #[rstest]
    #[case("")]
    #[case("Mi")]
    #[case("1.2.3")]
    #[case("1Xi")]
    #[case("ten")]
    #[case("1e")]
    #[case("99999999999999999999999Ei")]
    fn rejects(#[case] text: &str) {
        assert!(parse_quantity(text).is_err(), "{text} should not parse");
    }

    #[test]
    fn value_rounds_up() {
        assert_eq!(parse_quantity("1500m").unwrap().value(), 2);
        assert_eq!(parse_quantity("1Gi").unwrap().value(), 1 << 30);
    }

    #[rstest]
    #[case("10%", QuantityOrPercent::Percent(0.1))]
    #[case("0%", QuantityOrPercent::Percent(0.0))]
    #[case("500Mi", QuantityOrPercent::Quantity(Quantity::from_units(500 << 20)))]
    fn parses_percent(#[case] text: &str, #[case] expected: QuantityOrPercent) {
        assert_eq!(parse_quantity_or_percent(text).unwrap(), expected);
    }

    #[rstest]
    #[case("101%")]
    #[case("-1%")]
    #[case("-5Mi")]
    #[case("x%")]
    fn rejects_percent(#[case] text: &str) {
        assert!(parse_quantity_or_percent(text).is_err(), "{text}");
    }

    #[test]
    fn percent_resolves_against_capacity() {
        assert_eq!(
            QuantityOrPercent::Percent(0.1).resolve(10 << 30),
            1073741824
        );
    }

    #[test]
    fn displays_binary_suffixes() {
        assert_eq!(parse_quantity("1536Mi").unwrap().to_string(), "1536Mi");
        assert_eq!(parse_quantity("2Gi").unwrap().to_string(), "2Gi");
        assert_eq!(parse_quantity("250m").unwrap().to_string(), "250m");
    }
}
