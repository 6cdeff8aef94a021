//! A checker for the Prometheus text exposition format 0.0.4, strict enough to catch what
//! makes a scrape fail or lie: samples without a TYPE, families split in two groups,
//! duplicate series, bad escapes, and histograms whose buckets are not cumulative or do not
//! end with `+Inf` equal to `_count`. Used by the tests of `/metrics` (and usable by any
//! test that scrapes the agent).
use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

/// One histogram series (its labels without `le`), as read.
#[derive(Default)]
struct HistogramSeries {
    buckets: Vec<(f64, f64)>,
    sum: Option<f64>,
    count: Option<f64>,
}

/// Checks `text`; returns the number of samples, or the first problem with its line.
pub(crate) fn check_exposition(text: &str) -> Result<usize, String> {
    let mut types: BTreeMap<String, String> = BTreeMap::new();
    let mut helps: BTreeSet<String> = BTreeSet::new();
    let mut finished: BTreeSet<String> = BTreeSet::new();
    let mut current: Option<String> = None;
    let mut series: BTreeSet<String> = BTreeSet::new();
    let mut histograms: BTreeMap<(String, String), HistogramSeries> = BTreeMap::new();
    let mut samples = 0usize;

    for (index, line) in text.lines().enumerate() {
        let at = |why: String| format!("line {}: {why}: {line:?}", index + 1);
        if line.trim().is_empty() {
            continue;
        }
        if let Some(comment) = line.strip_prefix('#') {
            let mut words = comment.trim_start().splitn(3, ' ');
            match (words.next(), words.next(), words.next()) {
                (Some("TYPE"), Some(name), Some(kind)) => {
                    check_name(name).map_err(at)?;
                    if !matches!(
                        kind,
                        "counter" | "gauge" | "histogram" | "summary" | "untyped"
                    ) {
                        return Err(at(format!("unknown metric type {kind:?}")));
                    }
                    if types.insert(name.into(), kind.into()).is_some() {
                        return Err(at(format!("second TYPE line for {name}")));
                    }
                    if current.as_deref() == Some(name) || finished.contains(name) {
                        return Err(at(format!("TYPE for {name} after its samples")));
                    }
                }
                (Some("HELP"), Some(name), _) => {
                    check_name(name).map_err(at)?;
                    if !helps.insert(name.into()) {
                        return Err(at(format!("second HELP line for {name}")));
                    }
                }
                _ => {} // Any other comment is allowed.
            }
            continue;
        }

        let sample = parse_sample(line).map_err(at)?;
        samples += 1;
        let family = family_of(&sample.name, &types)
            .ok_or_else(|| at(format!("{} has no TYPE line", sample.name)))?;
        if current.as_deref() != Some(family.as_str()) {
            if finished.contains(&family) {
                return Err(at(format!("samples of {family} are not in one group")));
            }
            if let Some(previous) = current.replace(family.clone()) {
                finished.insert(previous);
            }
        }
        let mut labels = sample.labels.clone();
        labels.sort();
        let key = format!("{}{labels:?}", sample.name);
        if !series.insert(key) {
            return Err(at("duplicate series".into()));
        }
        let kind = types.get(&family).map(String::as_str).unwrap_or("untyped");
        if kind == "counter" && (sample.value.is_nan() || sample.value < 0.0) {
            return Err(at("a counter must be a non-negative number".into()));
        }
        if kind == "histogram" {
            let le = labels
                .iter()
                .position(|(k, _)| k == "le")
                .map(|i| labels.remove(i));
            let entry = histograms
                .entry((family.clone(), format!("{labels:?}")))
                .or_default();
            if sample.name.ends_with("_bucket") {
                let (_, le) =
                    le.ok_or_else(|| at("a histogram bucket needs an le label".into()))?;
                let bound = parse_float(&le).map_err(at)?;
                entry.buckets.push((bound, sample.value));
            } else if le.is_some() {
                return Err(at("only _bucket samples carry le".into()));
            } else if sample.name.ends_with("_sum") {
                entry.sum = Some(sample.value);
            } else if sample.name.ends_with("_count") {
                entry.count = Some(sample.value);
            } else {
                return Err(at(format!(
                    "{} is not a histogram sample name",
                    sample.name
                )));
            }
        }
    }

    for ((family, labels), h) in &histograms {
        let name = format!("{family}{labels}");
        let count = h.count.ok_or_else(|| format!("{name}: no _count"))?;
        h.sum.ok_or_else(|| format!("{name}: no _sum"))?;
        let (last_bound, last_count) = *h
            .buckets
            .last()
            .ok_or_else(|| format!("{name}: no buckets"))?;
        for pair in h.buckets.windows(2) {
            if pair[0].0.partial_cmp(&pair[1].0) != Some(Ordering::Less) {
                return Err(format!("{name}: bucket bounds not increasing: {pair:?}"));
            }
            if !matches!(
                pair[0].1.partial_cmp(&pair[1].1),
                Some(Ordering::Less | Ordering::Equal)
            ) {
                return Err(format!("{name}: buckets not cumulative: {pair:?}"));
            }
        }
        if last_bound != f64::INFINITY {
            return Err(format!("{name}: the last bucket is not +Inf"));
        }
        if last_count != count {
            return Err(format!(
                "{name}: +Inf bucket {last_count} != _count {count}"
            ));
        }
    }
    Ok(samples)
}

struct Sample {
    name: String,
    labels: Vec<(String, String)>,
    value: f64,
}

/// The family a sample belongs to: its own name, or a histogram's or summary's base name.
fn family_of(name: &str, types: &BTreeMap<String, String>) -> Option<String> {
    if types.contains_key(name) {
        return Some(name.into());
    }
    for suffix in ["_bucket", "_sum", "_count"] {
        if let Some(base) = name.strip_suffix(suffix) {
            match types.get(base).map(String::as_str) {
                Some("histogram") => return Some(base.into()),
                Some("summary") if suffix != "_bucket" => return Some(base.into()),
                _ => {}
            }
        }
    }
    None
}

fn check_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':');
    if first_ok && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
        Ok(())
    } else {
        Err(format!("invalid metric name {name:?}"))
    }
}

fn check_label_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    if first_ok && chars.all(|c| c.is_ascii_alphanumeric() || c == '_') {
        Ok(())
    } else {
        Err(format!("invalid label name {name:?}"))
    }
}

fn parse_float(text: &str) -> Result<f64, String> {
    match text {
        "+Inf" | "Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        "NaN" => Ok(f64::NAN),
        _ => text
            .parse::<f64>()
            .ok()
            .filter(|v| v.is_finite())
            .ok_or_else(|| format!("invalid value {text:?}")),
    }
}

/// `name{label="value",...} value [timestamp]`.
fn parse_sample(line: &str) -> Result<Sample, String> {
    let name_end = line
        .find(['{', ' ', '\t'])
        .ok_or("a sample needs a value")?;
    let name = &line[..name_end];
    check_name(name)?;
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(after_brace) = rest.strip_prefix('{') {
        let mut chars = after_brace.char_indices().peekable();
        loop {
            // A label name, '=', a quoted value, then ',' or '}'.
            let start = match chars.peek() {
                Some((_, '}')) => {
                    chars.next();
                    break;
                }
                Some((i, _)) => *i,
                None => return Err("unterminated label set".into()),
            };
            let eq = after_brace[start..]
                .find('=')
                .map(|i| start + i)
                .ok_or("a label needs '='")?;
            let label = &after_brace[start..eq];
            check_label_name(label)?;
            while chars.peek().is_some_and(|(i, _)| *i <= eq) {
                chars.next();
            }
            if chars.next().map(|(_, c)| c) != Some('"') {
                return Err(format!("the value of label {label} must be quoted"));
            }
            let mut value = String::new();
            loop {
                match chars.next() {
                    Some((_, '"')) => break,
                    Some((_, '\\')) => match chars.next() {
                        Some((_, '\\')) => value.push('\\'),
                        Some((_, '"')) => value.push('"'),
                        Some((_, 'n')) => value.push('\n'),
                        other => return Err(format!("invalid escape {other:?} in label {label}")),
                    },
                    Some((_, '\n')) => return Err("raw line feed in a label value".into()),
                    Some((_, c)) => value.push(c),
                    None => return Err(format!("unterminated value of label {label}")),
                }
            }
            if labels.iter().any(|(k, _): &(String, String)| k == label) {
                return Err(format!("label {label} given twice"));
            }
            labels.push((label.to_string(), value));
            match chars.next() {
                Some((_, ',')) => {}
                Some((_, '}')) => break,
                other => return Err(format!("expected ',' or '}}' after a label, got {other:?}")),
            }
        }
        rest = match chars.peek() {
            Some((i, _)) => &after_brace[*i..],
            None => "",
        };
    }
    let mut fields = rest.split_whitespace();
    let value = parse_float(fields.next().ok_or("a sample needs a value")?)?;
    if let Some(timestamp) = fields.next() {
        timestamp
            .parse::<i64>()
            .map_err(|_| format!("invalid timestamp {timestamp:?}"))?;
    }
    if fields.next().is_some() {
        return Err("trailing text after the timestamp".into());
    }
    if !rest.starts_with([' ', '\t']) {
        return Err("the value must follow a space".into());
    }
    Ok(Sample {
        name: name.into(),
        labels,
        value,
    })
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;

    const GOOD: &str = "\
# HELP x_total Things.
# TYPE x_total counter
x_total{a=\"q\\\"u\\\\o\\nte\"} 3
# TYPE h_seconds histogram
h_seconds_bucket{le=\"0.1\"} 1
h_seconds_bucket{le=\"+Inf\"} 2
h_seconds_sum 0.5
h_seconds_count 2
# TYPE g gauge
g -1.5 1700000000000
";

    #[test]
    fn accepts_a_valid_exposition() {
        assert_eq!(check_exposition(GOOD), Ok(6));
    }

    #[rstest]
    #[case::no_type("y 1\n", "no TYPE line")]
    #[case::split_family(
        "# TYPE a gauge\n# TYPE b gauge\na{x=\"1\"} 1\nb 1\na{x=\"2\"} 1\n",
        "not in one group"
    )]
    #[case::duplicate("# TYPE a gauge\na 1\na 2\n", "duplicate series")]
    #[case::bad_escape("# TYPE a gauge\na{x=\"\\t\"} 1\n", "invalid escape")]
    #[case::unquoted("# TYPE a gauge\na{x=1} 1\n", "must be quoted")]
    #[case::bad_value("# TYPE a gauge\na one\n", "invalid value")]
    #[case::negative_counter("# TYPE a_total counter\na_total -1\n", "non-negative")]
    #[case::not_cumulative(
        "# TYPE h histogram\nh_bucket{le=\"1\"} 3\nh_bucket{le=\"2\"} 2\nh_bucket{le=\"+Inf\"} 3\nh_sum 1\nh_count 3\n",
        "not cumulative"
    )]
    #[case::no_inf(
        "# TYPE h histogram\nh_bucket{le=\"1\"} 3\nh_sum 1\nh_count 3\n",
        "not +Inf"
    )]
    #[case::inf_not_count(
        "# TYPE h histogram\nh_bucket{le=\"+Inf\"} 3\nh_sum 1\nh_count 4\n",
        "!= _count"
    )]
    #[case::no_sum("# TYPE h histogram\nh_bucket{le=\"+Inf\"} 3\nh_count 3\n", "no _sum")]
    #[case::type_twice("# TYPE a gauge\n# TYPE a gauge\n", "second TYPE")]
    #[case::type_after_samples(
        "# TYPE a gauge\na 1\n# TYPE b gauge\nb 1\n# TYPE a gauge\n",
        "second TYPE"
    )]
    #[case::bad_name("# TYPE 1a gauge\n", "invalid metric name")]
    fn rejects(#[case] text: &str, #[case] why: &str) {
        match check_exposition(text) {
            Ok(n) => panic!("accepted {n} samples of {text:?}, expected {why:?}"),
            Err(e) => assert!(e.contains(why), "{e:?} does not say {why:?}"),
        }
    }
}
