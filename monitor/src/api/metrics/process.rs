//! The standard process metrics of the Prometheus client libraries (`process_cpu_seconds_total`
//! and the rest, as client_golang's process collector reads them), from /proc/self at each
//! scrape. Whatever cannot be read is `None` and its sample is left out: a scrape never
//! fails for it, and no made-up 0 looks like a measure.

/// The fields of `/proc/<pid>/stat` the process metrics use, in the units it gives them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Stat {
    /// Fields 14 and 15: CPU time in user and kernel mode, in clock ticks.
    pub(super) utime_ticks: u64,
    pub(super) stime_ticks: u64,
    /// Field 22: when the process started, in clock ticks after boot.
    pub(super) start_ticks: u64,
    /// Field 23: virtual memory size, in bytes.
    pub(super) vsize_bytes: u64,
    /// Field 24: resident set size, in pages.
    pub(super) rss_pages: u64,
}

/// Reads `/proc/<pid>/stat` text; `None` when it is not that.
pub(super) fn parse_stat(text: &str) -> Option<Stat> {
    let stat = crate::observe::parse::ProcStat::parse(text)?;
    Some(Stat {
        utime_ticks: stat.number(14)?,
        stime_ticks: stat.number(15)?,
        start_ticks: stat.number(22)?,
        vsize_bytes: stat.number(23)?,
        rss_pages: stat.number(24)?,
    })
}

/// The boot time, in seconds since the Unix epoch: the `btime` line of `/proc/stat` text.
pub(super) fn parse_btime(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|line| line.strip_prefix("btime ")?.trim().parse().ok())
}

/// The process metrics of one scrape; `None` for what could not be read.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct ProcessMetrics {
    pub(super) cpu_seconds: Option<f64>,
    pub(super) resident_bytes: Option<u64>,
    pub(super) virtual_bytes: Option<u64>,
    pub(super) start_time_seconds: Option<f64>,
    pub(super) open_fds: Option<u64>,
    pub(super) max_fds: Option<u64>,
}

/// What the process metrics are computed from, each part read on its own.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Sources {
    pub(super) stat: Option<Stat>,
    pub(super) btime: Option<u64>,
    /// `sysconf(_SC_CLK_TCK)`: the unit of the stat's times.
    pub(super) ticks_per_second: Option<u64>,
    pub(super) page_size: Option<u64>,
    pub(super) open_fds: Option<u64>,
    pub(super) max_fds: Option<u64>,
}

impl ProcessMetrics {
    /// This process, now.
    pub(crate) fn read() -> ProcessMetrics {
        use nix::sys::resource::{Resource, getrlimit};
        use nix::unistd::{SysconfVar, sysconf};
        let sysconf = |var| {
            sysconf(var)
                .ok()
                .flatten()
                .and_then(|v| u64::try_from(v).ok())
                .filter(|v| *v > 0)
        };
        ProcessMetrics::from_sources(Sources {
            stat: std::fs::read_to_string("/proc/self/stat")
                .ok()
                .as_deref()
                .and_then(parse_stat),
            btime: std::fs::read_to_string("/proc/stat")
                .ok()
                .as_deref()
                .and_then(parse_btime),
            ticks_per_second: sysconf(SysconfVar::CLK_TCK),
            page_size: sysconf(SysconfVar::PAGE_SIZE),
            open_fds: open_fds(),
            // The soft limit: the one open(2) fails at.
            max_fds: getrlimit(Resource::RLIMIT_NOFILE)
                .ok()
                .map(|(soft, _)| soft),
        })
    }

    pub(super) fn from_sources(s: Sources) -> ProcessMetrics {
        let ticks = s.ticks_per_second.map(|t| t as f64);
        ProcessMetrics {
            cpu_seconds: s.stat.zip(ticks).map(|(stat, ticks)| {
                stat.utime_ticks.saturating_add(stat.stime_ticks) as f64 / ticks
            }),
            resident_bytes: s
                .stat
                .zip(s.page_size)
                .map(|(stat, page)| stat.rss_pages.saturating_mul(page)),
            virtual_bytes: s.stat.map(|stat| stat.vsize_bytes),
            start_time_seconds: s
                .stat
                .zip(ticks)
                .zip(s.btime)
                .map(|((stat, ticks), btime)| btime as f64 + stat.start_ticks as f64 / ticks),
            open_fds: s.open_fds,
            max_fds: s.max_fds,
        }
    }
}

/// The entries of /proc/self/fd (the directory's own descriptor, open while it is read,
/// included, as client_golang counts it); `None` when the directory cannot be read whole.
fn open_fds() -> Option<u64> {
    let mut count = 0u64;
    for entry in std::fs::read_dir("/proc/self/fd").ok()? {
        entry.ok()?;
        count += 1;
    }
    Some(count)
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;

    /// A stat line of `comm`, with fields 14, 15, 22, 23 and 24 set to 1400, 1500, 2200,
    /// 2300 and 2400 and every other field after the command to its number.
    fn stat_line(comm: &str) -> String {
        let rest: Vec<String> = (3..=52)
            .map(|n| match n {
                3 => "S".to_string(),
                14 | 15 | 22 | 23 | 24 => (n * 100).to_string(),
                n => n.to_string(),
            })
            .collect();
        format!("1234 ({comm}) {}\n", rest.join(" "))
    }

    const FIELDS: Stat = Stat {
        utime_ticks: 1400,
        stime_ticks: 1500,
        start_ticks: 2200,
        vsize_bytes: 2300,
        rss_pages: 2400,
    };

    #[rstest]
    #[case::plain("monitor")]
    #[case::spaces("a b c")]
    #[case::parentheses_and_spaces("a) b (c)")]
    #[case::looks_like_fields(") S 1 2 3 4 5 6 7 8 9 10 11 12")]
    #[case::empty("")]
    fn reads_stat_past_any_command_name(#[case] comm: &str) {
        assert_eq!(parse_stat(&stat_line(comm)), Some(FIELDS));
    }

    #[test]
    fn reads_a_real_stat_line() {
        // /proc/self/stat of cat on Linux 6.18: 52 fields, a negative one (tpgid, field 8,
        // without a terminal) among those not read.
        let line = "29507 (cat) R 29505 29505 21281 0 -1 4194304 99 0 0 0 0 0 0 0 20 0 1 0 217577 3133440 355 18446744073709551615 94525920362496 94525920382377 140736775569920 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0 94525920398384 94525920400000 94526644080640 140736775576291 140736775576311 140736775576311 140736775577579 0\n";
        assert_eq!(
            parse_stat(line),
            Some(Stat {
                utime_ticks: 0,
                stime_ticks: 0,
                start_ticks: 217577,
                vsize_bytes: 3133440,
                rss_pages: 355,
            })
        );
    }

    #[rstest]
    #[case::empty("")]
    #[case::no_parenthesis("1234 monitor S 1 2 3")]
    #[case::cut_short("1234 (monitor) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20")]
    #[case::not_a_number("1234 (x) S 4 5 6 7 8 9 10 11 12 13 x 15 16 17 18 19 20 21 22 23 24")]
    #[case::negative("1234 (x) S 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 -24")]
    fn refuses_what_is_not_a_stat_line(#[case] text: &str) {
        assert_eq!(parse_stat(text), None);
    }

    #[rstest]
    #[case::present(
        "cpu  10 0 5 100 0 0 0 0 0 0\nintr 5 0\nctxt 9\nbtime 1717236000\nprocesses 80\n",
        Some(1717236000)
    )]
    #[case::absent("cpu  10 0 5 100 0 0 0 0 0 0\nctxt 9\n", None)]
    #[case::garbled("btime soon\n", None)]
    // `btimex` is not `btime`.
    #[case::prefix_only("btimex 5\n", None)]
    fn reads_btime(#[case] text: &str, #[case] btime: Option<u64>) {
        assert_eq!(parse_btime(text), btime);
    }

    #[test]
    fn computes_the_metrics_from_their_sources() {
        let all = Sources {
            stat: Some(FIELDS),
            btime: Some(1_000_000),
            ticks_per_second: Some(100),
            page_size: Some(4096),
            open_fds: Some(9),
            max_fds: Some(1024),
        };
        assert_eq!(
            ProcessMetrics::from_sources(all),
            ProcessMetrics {
                cpu_seconds: Some(29.0),
                resident_bytes: Some(2400 * 4096),
                virtual_bytes: Some(2300),
                start_time_seconds: Some(1_000_022.0),
                open_fds: Some(9),
                max_fds: Some(1024),
            }
        );
        // Without the tick, no time: CPU and start are left out, memory stays.
        let no_ticks = ProcessMetrics::from_sources(Sources {
            ticks_per_second: None,
            ..all
        });
        assert_eq!(
            (no_ticks.cpu_seconds, no_ticks.start_time_seconds),
            (None, None)
        );
        assert_eq!(no_ticks.resident_bytes, Some(2400 * 4096));
        // Without the boot time, only the start is unknown.
        let no_btime = ProcessMetrics::from_sources(Sources { btime: None, ..all });
        assert_eq!(no_btime.start_time_seconds, None);
        assert_eq!(no_btime.cpu_seconds, Some(29.0));
        // Without the stat, nothing that comes from it.
        let no_stat = ProcessMetrics::from_sources(Sources { stat: None, ..all });
        assert_eq!(
            no_stat,
            ProcessMetrics {
                open_fds: Some(9),
                max_fds: Some(1024),
                ..ProcessMetrics::default()
            }
        );
    }
}
