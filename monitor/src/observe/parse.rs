//! Parsers for the kernel's text files. They take `&str`, never a path, and never slice by
//! fixed index: kernels add and reorder keys, so every lookup is by name.
use std::collections::BTreeMap;

/// A "key value" per line file: memory.stat, memory.events, /proc/meminfo ("Key: N kB").
/// Lines that do not parse are skipped (a newer kernel may add non-numeric keys).
pub fn flat_keyed(text: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let (Some(key), Some(value)) = (words.next(), words.next()) else {
            continue;
        };
        let key = key.trim_end_matches(':');
        let Ok(mut value) = value.parse::<u64>() else {
            continue;
        };
        if words.next() == Some("kB") {
            value = value.saturating_mul(1024);
        }
        out.insert(key.to_string(), value);
    }
    out
}

/// One key of a flat keyed file, found without building the whole map (memory.stat has
/// dozens of keys; a synchronize wants one of them from every pod).
pub(crate) fn flat_keyed_value(text: &str, wanted: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        // The key, an optional colon, then whitespace: matched before any splitting.
        let rest = line.trim_start().strip_prefix(wanted)?;
        let rest = rest.strip_prefix(':').unwrap_or(rest);
        if !rest.starts_with(|c: char| c.is_ascii_whitespace()) {
            return None;
        }
        let mut words = rest.split_whitespace();
        let value = words.next()?.parse::<u64>().ok()?;
        Some(if words.next() == Some("kB") {
            value.saturating_mul(1024)
        } else {
            value
        })
    })
}

/// A single-value file held neither a number nor `max`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("expected a number or \"max\", found {found:?}")]
pub(crate) struct SingleValueError {
    pub(crate) found: String,
}

/// A single-value file such as memory.usage_in_bytes or memory.max. `max` (v2's "no
/// limit") is `None`; so is v1's "no limit" value, which is a page-rounded i64::MAX.
pub(crate) fn single_value(text: &str) -> Result<Option<u64>, SingleValueError> {
    let t = text.trim();
    if t == "max" {
        return Ok(None);
    }
    let v: u64 = t.parse().map_err(|_| SingleValueError {
        found: t.to_string(),
    })?;
    Ok(if v >= 0x7FFF_FFFF_FFFF_F000 {
        None
    } else {
        Some(v)
    })
}

/// One line of a PSI file ("some avg10=0.00 avg60=0.00 avg300=0.00 total=0").
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct PsiLine {
    pub(crate) avg10: f64,
    pub(crate) avg60: f64,
    pub(crate) avg300: f64,
    /// Total stall time in microseconds.
    pub(crate) total_us: u64,
}

/// /proc/pressure/memory or a cgroup's memory.pressure.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Psi {
    pub(crate) some: PsiLine,
    /// Absent for the cpu resource on older kernels.
    pub(crate) full: Option<PsiLine>,
}

/// A PSI file that does not parse; the caller adds the file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum PsiParseError {
    /// `kind` is the line ("some", "full"), `word` the `key=value` that is not a number.
    #[error("{kind}: bad value {word:?}")]
    BadValue { kind: String, word: String },
    #[error("no \"some\" line")]
    NoSome,
}

pub(crate) fn psi(text: &str) -> Result<Psi, PsiParseError> {
    let mut some = None;
    let mut full = None;
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let Some(kind) = words.next() else { continue };
        let mut parsed = PsiLine::default();
        for word in words {
            let Some((key, value)) = word.split_once('=') else {
                continue;
            };
            let bad = || PsiParseError::BadValue {
                kind: kind.to_string(),
                word: word.to_string(),
            };
            match key {
                "avg10" => parsed.avg10 = value.parse().map_err(|_| bad())?,
                "avg60" => parsed.avg60 = value.parse().map_err(|_| bad())?,
                "avg300" => parsed.avg300 = value.parse().map_err(|_| bad())?,
                "total" => parsed.total_us = value.parse().map_err(|_| bad())?,
                _ => {}
            }
        }
        match kind {
            "some" => some = Some(parsed),
            "full" => full = Some(parsed),
            _ => {}
        }
    }
    Ok(Psi {
        some: some.ok_or(PsiParseError::NoSome)?,
        full,
    })
}

/// The memory line of /proc/PID/cgroup: the v1 memory controller's path, or the v2 path
/// ("0::/path") when no v1 memory hierarchy is listed.
pub fn memory_cgroup_of(proc_cgroup: &str) -> Option<String> {
    let mut unified = None;
    for line in proc_cgroup.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if controllers.split(',').any(|c| c == "memory") {
            return Some(path.to_string());
        }
        if controllers.is_empty() {
            unified = Some(path.to_string());
        }
    }
    unified
}

/// `/proc/<pid>/stat` text, its fields numbered as proc(5) numbers them. The command
/// name (field 2) is in parentheses and may hold anything, spaces and ')' included, so the
/// fields from 3 on are those after the last ')'; fields 1 and 2 are not offered.
#[derive(Clone, Debug)]
pub(crate) struct ProcStat<'a> {
    /// Field 3 onwards.
    fields: Vec<&'a str>,
}

impl<'a> ProcStat<'a> {
    /// `None` when the text has no command name in parentheses.
    pub(crate) fn parse(text: &'a str) -> Option<ProcStat<'a>> {
        let (_, rest) = text.rsplit_once(')')?;
        Some(ProcStat {
            fields: rest.split_ascii_whitespace().collect(),
        })
    }

    /// Field `number` (3 and up) as text; `None` past the last field (older kernels print
    /// fewer).
    pub(crate) fn field(&self, number: usize) -> Option<&'a str> {
        self.fields.get(number.checked_sub(3)?).copied()
    }

    /// Field `number` as a number; `None` when absent or not one.
    pub(crate) fn number<T: std::str::FromStr>(&self, number: usize) -> Option<T> {
        self.field(number)?.parse().ok()
    }
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;

    #[test]
    fn memory_stat_v1() {
        let m = flat_keyed(
            "cache 4096\nrss 8192\ntotal_inactive_file 1234\nhierarchical_memory_limit 9223372036854771712\n",
        );
        assert_eq!(m["total_inactive_file"], 1234);
        assert_eq!(m["rss"], 8192);
    }

    #[test]
    fn meminfo_units() {
        let m = flat_keyed(
            "MemTotal:       24576000 kB\nMemAvailable:   100 kB\nHugePages_Total:       0\n",
        );
        assert_eq!(m["MemTotal"], 24576000 * 1024);
        assert_eq!(m["HugePages_Total"], 0);
    }

    #[test]
    fn one_key_agrees_with_the_map() {
        let text = "inactive_anon 1\ntotal_inactive_file 7\ninactive_file 5\nodd\nMemFree: 2 kB\n";
        let map = flat_keyed(text);
        for key in [
            "inactive_file",
            "total_inactive_file",
            "MemFree",
            "odd",
            "absent",
        ] {
            assert_eq!(flat_keyed_value(text, key), map.get(key).copied(), "{key}");
        }
        // A prefix is not the key.
        assert_eq!(
            flat_keyed_value("inactive_file_x 3\n", "inactive_file"),
            None
        );
    }

    #[test]
    fn odd_lines_are_skipped_not_fatal() {
        let m = flat_keyed("\nweird\nkey notanumber\nlow 3\n");
        assert_eq!(m.len(), 1);
        assert_eq!(m["low"], 3);
    }

    #[rstest]
    #[case("max\n", Some(None))]
    #[case("1048576\n", Some(Some(1048576)))]
    #[case("9223372036854771712\n", Some(None))]
    #[case("12abc", None)]
    #[case("", None)]
    fn single_values(#[case] text: &str, #[case] expected: Option<Option<u64>>) {
        assert_eq!(single_value(text).ok(), expected, "{text:?}");
    }

    #[test]
    fn psi_lines() {
        let p = psi("some avg10=1.50 avg60=0.20 avg300=0.00 total=12345\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=7\n").unwrap();
        assert_eq!(p.some.avg10, 1.5);
        assert_eq!(p.some.total_us, 12345);
        assert_eq!(p.full.unwrap().total_us, 7);
        assert_eq!(psi("full avg10=0.00 total=1\n"), Err(PsiParseError::NoSome));
        assert_eq!(
            psi("some avg10=x total=1\n").map_err(|e| e.to_string()),
            Err("some: bad value \"avg10=x\"".to_string())
        );
    }

    #[rstest]
    #[case("12:memory:/a/b\n0::/x\n", Some("/a/b"))]
    #[case("4:cpu,memory:/k\n", Some("/k"))]
    #[case("0::/only/v2\n", Some("/only/v2"))]
    #[case("3:cpu:/c\n", None)]
    fn memory_cgroup_lines(#[case] text: &str, #[case] expected: Option<&str>) {
        assert_eq!(memory_cgroup_of(text).as_deref(), expected);
    }

    #[test]
    fn proc_stat_fields_are_numbered_past_a_command_name_with_spaces_and_parens() {
        let text = "42 (a) b (c)) S 1 42 42 0 -1 4194560 100 0 0 0 7 3\n";
        let stat = ProcStat::parse(text).expect("a stat line");
        assert_eq!(stat.field(3), Some("S"));
        assert_eq!(stat.number::<u64>(4), Some(1));
        assert_eq!(stat.number::<i64>(8), Some(-1));
        assert_eq!(stat.number::<u64>(14), Some(7));
        assert_eq!(stat.number::<u64>(15), Some(3));
        assert_eq!(stat.field(16), None, "past the last field");
        assert_eq!(stat.field(2), None, "the command name is not a field here");
        assert_eq!(stat.number::<u64>(3), None, "not a number");
        assert!(ProcStat::parse("no parentheses").is_none());
    }
}
