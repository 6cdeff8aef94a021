//! Per-event cost of the agent's eBPF programs, from the kernel's BPF run-time statistics
//! (`kernel.bpf_stats_enabled=1`): `/proc/<agent>/fdinfo/<fd>` of every program fd holds
//! `prog_id`, `run_time_ns` and `run_cnt`; the program's name comes from
//! BPF_OBJ_GET_INFO_BY_FD on a fd opened by id (bpftool is not needed).
use std::path::Path;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

const SYSCTL: &str = "/proc/sys/kernel/bpf_stats_enabled";

/// The statistics set to a value while it lives; the old value is put back when dropped.
pub struct StatsSetting {
    previous: Option<String>,
}

impl StatsSetting {
    fn set(value: &str) -> Result<StatsSetting> {
        let previous =
            std::fs::read_to_string(SYSCTL).with_context(|| format!("reading {SYSCTL}"))?;
        std::fs::write(SYSCTL, value).with_context(|| format!("writing {value} to {SYSCTL}"))?;
        Ok(StatsSetting {
            previous: Some(previous.trim().to_string()),
        })
    }

    /// On, for the benchmark's per-program figures.
    pub fn enable() -> Result<StatsSetting> {
        StatsSetting::set("1")
    }

    /// Off where it can be (they cost every program run two clock reads, which a
    /// measurement of the programs' cost to the pods must not count).
    pub fn pause() -> StatsSetting {
        StatsSetting::set("0").unwrap_or(StatsSetting { previous: None })
    }
}

impl Drop for StatsSetting {
    fn drop(&mut self) {
        if let Some(previous) = self.previous.take() {
            let _ = std::fs::write(SYSCTL, previous);
        }
    }
}

/// One program's counters at one moment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProgStat {
    pub name: String,
    pub prog_id: u32,
    pub run_time_ns: u64,
    pub run_cnt: u64,
}

/// The counters of every BPF program the process `pid` holds open.
pub fn prog_stats(pid: u32) -> Vec<ProgStat> {
    let dir = Path::new("/proc").join(pid.to_string()).join("fdinfo");
    let mut out: Vec<ProgStat> = Vec::new();
    for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
        let Ok(text) = std::fs::read_to_string(entry.path()) else {
            continue;
        };
        let Some(stat) = parse_fdinfo(&text) else {
            continue;
        };
        // The same program may be open twice (e.g. the link and the program).
        if out.iter().any(|s| s.prog_id == stat.prog_id) {
            continue;
        }
        out.push(ProgStat {
            name: prog_name(stat.prog_id).unwrap_or_else(|| format!("prog-{}", stat.prog_id)),
            ..stat
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// A program's fdinfo; none for fds of anything else.
fn parse_fdinfo(text: &str) -> Option<ProgStat> {
    let value = |key: &str| {
        text.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == key).then(|| v.trim().to_string())
        })
    };
    Some(ProgStat {
        name: String::new(),
        prog_id: value("prog_id")?.parse().ok()?,
        run_time_ns: value("run_time_ns")?.parse().ok()?,
        run_cnt: value("run_cnt")?.parse().ok()?,
    })
}

/// The program's name (the kernel keeps its first 15 bytes).
fn prog_name(id: u32) -> Option<String> {
    const BPF_PROG_GET_FD_BY_ID: libc::c_long = 13;
    const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;
    // union bpf_attr for BPF_PROG_GET_FD_BY_ID: { u32 prog_id; u32 next_id; u32 open_flags }.
    let mut by_id = [0u32; 4];
    by_id[0] = id;
    // SAFETY: the attribute buffer is ours and sized as passed.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_PROG_GET_FD_BY_ID,
            by_id.as_mut_ptr(),
            std::mem::size_of_val(&by_id) as u32,
        )
    };
    if fd < 0 {
        return None;
    }
    // struct bpf_prog_info: `name[16]` sits at byte 64; 256 bytes cover the fields we read.
    let mut info = [0u8; 256];
    // info_by_fd attr: { u32 bpf_fd; u32 info_len; u64 info }.
    let mut attr = [0u64; 2];
    attr[0] = (fd as u64) | ((info.len() as u64) << 32);
    attr[1] = info.as_mut_ptr() as u64;
    // SAFETY: attr points at our info buffer with its true length.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_OBJ_GET_INFO_BY_FD,
            attr.as_mut_ptr(),
            std::mem::size_of_val(&attr) as u32,
        )
    };
    // SAFETY: closing the fd the kernel just gave us.
    unsafe { libc::close(fd as i32) };
    if rc < 0 {
        return None;
    }
    let name = info.get(64..80)?;
    let end = name.iter().position(|b| *b == 0).unwrap_or(name.len());
    let name = String::from_utf8_lossy(&name[..end]).to_string();
    (!name.is_empty()).then_some(name)
}

/// Counters summed per program name over many agent runs, with the cost per event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ProgCost {
    pub(crate) name: String,
    pub(crate) run_cnt: u64,
    pub(crate) run_time_ns: u64,
    /// run_time_ns / run_cnt; none when the program never ran.
    pub(crate) ns_per_run: Option<f64>,
}

pub(crate) fn costs(stats: &[ProgStat]) -> Vec<ProgCost> {
    let mut out: Vec<ProgCost> = Vec::new();
    for s in stats {
        match out.iter_mut().find(|c| c.name == s.name) {
            Some(c) => {
                c.run_cnt = c.run_cnt.saturating_add(s.run_cnt);
                c.run_time_ns = c.run_time_ns.saturating_add(s.run_time_ns);
            }
            None => out.push(ProgCost {
                name: s.name.clone(),
                run_cnt: s.run_cnt,
                run_time_ns: s.run_time_ns,
                ns_per_run: None,
            }),
        }
    }
    for c in &mut out {
        c.ns_per_run = (c.run_cnt > 0).then(|| c.run_time_ns as f64 / c.run_cnt as f64);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case::program(
        "pos:\t0\nflags:\t02000002\nprog_type:\t26\nprog_jited:\t1\nprog_tag:\tab\nmemlock:\t4096\nprog_id:\t42\nrun_time_ns:\t1500\nrun_cnt:\t3\n",
        Some((42, 1500, 3))
    )]
    #[case::map("pos:\t0\nmap_type:\t1\nmap_id:\t7\n", None)]
    #[case::plain_file("pos:\t0\nflags:\t0100000\n", None)]
    fn fdinfo(#[case] text: &str, #[case] expected: Option<(u32, u64, u64)>) {
        assert_eq!(
            parse_fdinfo(text).map(|s| (s.prog_id, s.run_time_ns, s.run_cnt)),
            expected
        );
    }

    #[test]
    fn costs_sum_per_name_and_divide() {
        let stat = |name: &str, id, t, n| ProgStat {
            name: name.into(),
            prog_id: id,
            run_time_ns: t,
            run_cnt: n,
        };
        let c = costs(&[
            stat("a", 1, 100, 2),
            stat("b", 2, 0, 0),
            stat("a", 3, 300, 2),
        ]);
        assert_eq!(c.len(), 2);
        assert_eq!(
            (c[0].run_cnt, c[0].run_time_ns, c[0].ns_per_run),
            (4, 400, Some(100.0))
        );
        assert_eq!(
            c[1].ns_per_run, None,
            "a program that never ran has no cost per run"
        );
    }
}
