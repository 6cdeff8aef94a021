//! Kubernetes resource quantities ("500Mi", "1.5Gi", "100m", "2", "1e3") and
//! percentages ("10%"), parsed exactly: the value is kept in milli-units so CPU
//! quantities like "250m" and byte quantities like "1.5Gi" share one type.
//!
//! Matches k8s.io/apimachinery's resource.Quantity for the suffixes users write: binary
//! (Ki Mi Gi Ti Pi Ei), decimal (n u m "" k M G T P E) and decimal exponents (e/E).
use std::fmt;

use serde::{Deserialize, Deserializer, de};

/// A parsed quantity, in thousandths of the base unit (bytes, cores, pods, …), with the
/// kind of suffix it prints with. Equality, order and hashing look at the value only:
/// "1Gi" equals "1073741824".
#[derive(Clone, Copy, Debug, Default)]
pub struct Quantity {
    milli: i128,
    format: Format,
}

/// The kind of suffix a quantity prints with (apimachinery resource.Format): the one it
/// was written with, or the one its producer chose (the kubelet prints byte amounts as
/// BinarySI, counts as DecimalSI).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Format {
    /// Powers of 1024: Ki Mi Gi Ti Pi Ei.
    BinarySI,
    /// Powers of 1000: n u m "" k M G T P E. Plain numbers are DecimalSI.
    #[default]
    DecimalSI,
    /// Powers of ten as an exponent: "1e3", "12e6".
    DecimalExponent,
}

impl PartialEq for Quantity {
    fn eq(&self, other: &Self) -> bool {
        self.milli == other.milli
    }
}

impl Eq for Quantity {}

impl PartialOrd for Quantity {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Quantity {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.milli.cmp(&other.milli)
    }
}

impl std::hash::Hash for Quantity {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.milli.hash(state);
    }
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
    pub const ZERO: Quantity = Quantity {
        milli: 0,
        format: Format::DecimalSI,
    };

    /// `units` of the base unit, printed with `format` (apimachinery NewQuantity).
    pub fn new(units: i64, format: Format) -> Self {
        Quantity {
            milli: units as i128 * 1000,
            format,
        }
    }

    /// `units` printed with binary suffixes, as the kubelet prints byte amounts.
    pub fn from_units(units: i64) -> Self {
        Quantity::new(units, Format::BinarySI)
    }

    /// Thousandths of the base unit, printed with decimal suffixes (as CPU is).
    pub fn from_milli(milli: i64) -> Self {
        Quantity {
            milli: milli as i128,
            format: Format::DecimalSI,
        }
    }

    /// The kind of suffix the quantity prints with.
    pub fn format(self) -> Format {
        self.format
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

impl Quantity {
    /// The format of `self op rhs`: the left operand's, unless it is zero (apimachinery
    /// Add and Sub), so a sum started from zero prints like its first term.
    fn combined_format(self, rhs: Quantity) -> Format {
        if self.milli == 0 {
            rhs.format
        } else {
            self.format
        }
    }
}

impl std::ops::Add for Quantity {
    type Output = Quantity;
    fn add(self, rhs: Quantity) -> Quantity {
        Quantity {
            milli: self.milli + rhs.milli,
            format: self.combined_format(rhs),
        }
    }
}

impl std::ops::Sub for Quantity {
    type Output = Quantity;
    fn sub(self, rhs: Quantity) -> Quantity {
        Quantity {
            milli: self.milli - rhs.milli,
            format: self.combined_format(rhs),
        }
    }
}

impl std::iter::Sum for Quantity {
    fn sum<I: Iterator<Item = Quantity>>(iter: I) -> Quantity {
        iter.fold(Quantity::ZERO, |a, b| a + b)
    }
}

/// Binary suffixes by power of 1024; an i64 stops at Ei.
const BINARY_SUFFIXES: [&str; 7] = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];

/// The canonical form apimachinery's `Quantity.String()` prints, which is what the
/// kubelet puts in its messages: no fraction, the largest suffix that keeps the value
/// exact, in the quantity's own format.
///
/// * Zero is "0".
/// * BinarySI: a whole number of at least 1024 in magnitude is divided by 1024 as long
///   as that is exact ("1536Mi", "2Gi", "3000"). Anything smaller, or with a fraction,
///   prints as DecimalSI: 1000 bytes are "1k", 512 bytes "512".
/// * DecimalSI: mantissa × 10^e, e the largest multiple of 3 that keeps the mantissa
///   whole ("1500m", "128974848", "500M", "2k").
/// * DecimalExponent: the same mantissa with "e<e>" ("1e3", "10e3", "1500e-3").
///
/// apimachinery prints a parsed string verbatim when it is already canonical; spellings
/// it keeps that are not canonical ("01Mi", "+1Mi", "1E3") print canonically here.
impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.milli == 0 {
            return f.write_str("0");
        }
        let whole = self.milli % 1000 == 0;
        if self.format == Format::BinarySI && whole && self.milli.abs() >= 1024 * 1000 {
            let mut units = self.milli / 1000;
            let mut power = 0;
            while power + 1 < BINARY_SUFFIXES.len() && units % 1024 == 0 {
                units /= 1024;
                power += 1;
            }
            return write!(f, "{units}{}", BINARY_SUFFIXES[power]);
        }
        // Powers of ten: strip every factor of ten, then step back to a multiple of 3.
        let (mut mantissa, mut exponent) = (self.milli, -3i32);
        while mantissa % 10 == 0 {
            mantissa /= 10;
            exponent += 1;
        }
        while exponent.rem_euclid(3) != 0 {
            mantissa *= 10;
            exponent -= 1;
        }
        let suffix = match (self.format, exponent) {
            (Format::DecimalExponent, 0) => String::new(),
            (Format::DecimalExponent, e) => format!("e{e}"),
            (_, -9) => "n".to_string(),
            (_, -6) => "u".to_string(),
            (_, -3) => "m".to_string(),
            (_, 0) => String::new(),
            (_, 3) => "k".to_string(),
            (_, 6) => "M".to_string(),
            (_, 9) => "G".to_string(),
            (_, 12) => "T".to_string(),
            (_, 15) => "P".to_string(),
            (_, 18) => "E".to_string(),
            // Past "E" there is no decimal suffix: apimachinery falls back to an exponent.
            (_, e) => format!("e{e}"),
        };
        write!(f, "{mantissa}{suffix}")
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
            // "1e2147483645" must be refused, not overflow the exponent.
            exp10 = exp10
                .checked_add(e)
                .ok_or_else(|| QuantityError::OutOfRange(text.to_string()))?;
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
    let out_of_range = || QuantityError::OutOfRange(text.to_string());
    let exp10 = exp10.checked_add(3).ok_or_else(out_of_range)?;
    let mut value = digits.checked_mul(1i128 << exp2).ok_or_else(out_of_range)?;
    if exp10 >= 0 {
        let scale = 10i128
            .checked_pow(exp10.unsigned_abs())
            .ok_or_else(out_of_range)?;
        value = value.checked_mul(scale).ok_or_else(out_of_range)?;
    } else {
        // A divisor past i128 leaves less than a milli-unit: rounds up to one, or zero.
        value = match 10i128.checked_pow(exp10.unsigned_abs()) {
            Some(scale) => value / scale + i128::from(value % scale != 0),
            None => i128::from(value != 0),
        };
    }
    if value > i64::MAX as i128 * 1000 {
        return Err(out_of_range());
    }
    // A binary quantity below one unit prints as decimal from the start (apimachinery
    // ParseQuantity: "this avoids rounding").
    let format = match suffix_format(suffix) {
        Format::BinarySI if value < 1000 && value != 0 => Format::DecimalSI,
        format => format,
    };
    Ok(Quantity {
        milli: if negative { -value } else { value },
        format,
    })
}

/// The format a suffix gives a parsed quantity (apimachinery quantitySuffixer.interpret).
fn suffix_format(suffix: &str) -> Format {
    match suffix {
        "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei" => Format::BinarySI,
        s if s.len() > 1 && s.starts_with(['e', 'E']) => Format::DecimalExponent,
        _ => Format::DecimalSI,
    }
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
        struct QuantityVisitor;
        impl de::Visitor<'_> for QuantityVisitor {
            type Value = Quantity;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a quantity such as 512Mi, 100m or 1000")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Quantity, E> {
                parse_quantity(s).map_err(E::custom)
            }
            // As the apimachinery reads a JSON number: the digits, parsed (DecimalSI).
            fn visit_i64<E: de::Error>(self, i: i64) -> Result<Quantity, E> {
                Ok(Quantity::new(i, Format::DecimalSI))
            }
            fn visit_u64<E: de::Error>(self, u: u64) -> Result<Quantity, E> {
                parse_quantity(&u.to_string()).map_err(E::custom)
            }
            fn visit_f64<E: de::Error>(self, f: f64) -> Result<Quantity, E> {
                parse_quantity(&f.to_string()).map_err(E::custom)
            }
        }
        deserializer.deserialize_any(QuantityVisitor)
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
    #[case("1e-2147483648", 1)] // an exponent past i128: still rounds up, no overflow
    #[case("0e-2147483648", 0)]
    #[case("  10Gi ", 10 * 1024 * 1024 * 1024 * 1000)]
    fn parses(#[case] text: &str, #[case] milli: i128) {
        let expected = Quantity {
            milli,
            format: Format::DecimalSI,
        };
        assert_eq!(parse_quantity(text).unwrap(), expected, "{text}");
    }

    #[rstest]
    #[case("")]
    #[case("Mi")]
    #[case("1.2.3")]
    #[case("1Xi")]
    #[case("ten")]
    #[case("1e")]
    #[case("99999999999999999999999Ei")]
    #[case("1e2147483645")] // the exponent plus milli scaling would overflow an i32
    #[case("1e2147483647")]
    #[case("1.5e2147483647")]
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

    // apimachinery quantity_test.go (TestQuantityParse, TestQuantityString): a parsed
    // quantity prints in canonical form, in the format of its suffix.
    #[rstest]
    #[case("1.5Gi", "1536Mi")]
    #[case("1024Mi", "1Gi")]
    #[case("1024Ki", "1Mi")]
    #[case("1000Mi", "1000Mi")]
    #[case("0.5Gi", "512Mi")]
    #[case("0.5Ki", "512")] // binary below 1024 prints as decimal
    #[case("0.1Gi", "107374182400m")] // binary with a fraction prints as decimal
    #[case("1024Gi", "1Ti")]
    #[case("1Ei", "1Ei")]
    #[case("-1Gi", "-1Gi")]
    #[case("128974848", "128974848")]
    // A threshold written as digits, as in a kubelet message seen in the field
    // ("Threshold quantity: 8284495872"): decimal, so no "Ki" although 1024 divides it.
    #[case("8284495872", "8284495872")]
    #[case("129M", "129M")]
    #[case("1000M", "1G")]
    #[case("1.5G", "1500M")]
    #[case("2000", "2k")]
    #[case("-1000", "-1k")]
    #[case("100000", "100k")]
    #[case("1010", "1010")]
    #[case("1.5", "1500m")]
    #[case("0.1", "100m")]
    #[case("0", "0")]
    #[case("0Mi", "0")]
    #[case("1e3", "1e3")]
    #[case("1e4", "10e3")]
    #[case("1.5e3", "1500")]
    #[case("1E3", "1e3")] // apimachinery keeps "1E3" verbatim; see Display
    fn displays_canonical_form(#[case] text: &str, #[case] shown: &str) {
        let parsed = parse_quantity(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(parsed.to_string(), shown, "{text}");
        assert_eq!(
            parse_quantity(shown).ok(),
            Some(parsed),
            "{shown} reads back"
        );
    }

    // apimachinery NewQuantity(v, BinarySI), as the kubelet builds usage and available
    // bytes ("available: 48144Ki" is from a kubelet message seen in the field).
    #[rstest]
    #[case(512, "512")]
    #[case(1000, "1k")]
    #[case(1023, "1023")]
    #[case(1024, "1Ki")]
    #[case(1025, "1025")]
    #[case(3000, "3000")]
    #[case(2147483648, "2Gi")]
    #[case(1 << 40, "1Ti")]
    #[case(-2048, "-2Ki")]
    #[case(48144 * 1024, "48144Ki")]
    #[case(8284495872, "8090328Ki")]
    fn binary_units_display(#[case] units: i64, #[case] shown: &str) {
        assert_eq!(Quantity::from_units(units).to_string(), shown);
    }

    // NewQuantity(v, DecimalSI), as the kubelet builds inode and pid counts.
    #[rstest]
    #[case(200000, "200k")]
    #[case(4096, "4096")]
    #[case(1_500_000, "1500k")]
    #[case(7_000_000_000, "7G")]
    fn decimal_units_display(#[case] units: i64, #[case] shown: &str) {
        assert_eq!(Quantity::new(units, Format::DecimalSI).to_string(), shown);
    }

    #[test]
    fn milli_quantities_are_decimal() {
        assert_eq!(Quantity::from_milli(2000).to_string(), "2");
        assert_eq!(Quantity::from_milli(1_024_000).to_string(), "1024");
        assert_eq!(Quantity::from_milli(2500).to_string(), "2500m");
    }

    #[test]
    fn format_does_not_take_part_in_equality_or_order() {
        let binary = parse_quantity("1Gi").unwrap();
        let decimal = parse_quantity("1073741824").unwrap();
        assert_eq!(binary, decimal);
        assert_eq!(binary.cmp(&decimal), std::cmp::Ordering::Equal);
        use std::hash::BuildHasher;
        let state = std::hash::RandomState::new();
        assert_eq!(state.hash_one(binary), state.hash_one(decimal));
        assert_eq!(
            (binary.format(), decimal.format()),
            (Format::BinarySI, Format::DecimalSI)
        );
    }

    // apimachinery Add and Sub: the left operand's format, unless it is zero.
    #[test]
    fn sums_take_the_format_of_their_first_non_zero_term() {
        let gi = parse_quantity("1Gi").unwrap();
        let decimal = parse_quantity("2048").unwrap();
        let binary = parse_quantity("2Ki").unwrap();
        assert_eq!((Quantity::ZERO + gi).to_string(), "1Gi");
        assert_eq!((decimal + binary).to_string(), "4096");
        assert_eq!((binary + decimal).to_string(), "4Ki");
        assert_eq!([gi, gi].into_iter().sum::<Quantity>().to_string(), "2Gi");
        assert_eq!((gi - parse_quantity("512Mi").unwrap()).to_string(), "512Mi");
    }

    #[test]
    fn json_numbers_read_as_decimal() {
        let q: Quantity = serde_json::from_str("2000").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(q.to_string(), "2k");
        let q: Quantity = serde_json::from_str("\"2000Mi\"").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(q.to_string(), "2000Mi");
    }
}
