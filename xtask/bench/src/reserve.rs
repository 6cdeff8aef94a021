//! Where the kernel's OOM killer sits on the node's memory, so that the node race gives
//! every killer the same room before it.
//!
//! The kernel keeps the zones' min watermarks free (their sum is `vm.min_free_kbytes`):
//! an allocation that would take free memory below them reclaims, and with nothing left
//! to reclaim the OOM killer fires. The node race's page cache is gone by then (the OOM
//! reports of the race read `active_file:0 inactive_file:0`), so the floor, in free
//! memory, is `vm.min_free_kbytes`. Each killer reads that floor through its own signal:
//! - the agent's `memory.available` (MemFree plus the inactive page cache) reads about
//!   `vm.min_free_kbytes` there, so a headroom of H is the threshold `min_free + H`;
//! - earlyoom's MemAvailable (`si_mem_available` in mm/show_mem.c) subtracts the kernel's
//!   `totalreserve_pages` (per zone its high watermark plus its largest lowmem
//!   protection, at most its managed pages) and adds the reclaimable kernel memory less
//!   the smaller of its half and the low watermarks. At the same free memory it reads
//!   that much less, so earlyoom's level for the headroom H is `min_free + H` read
//!   through that sum.
//!
//! A headroom of H thus puts both killers' thresholds at the same free memory, H above
//! the point where the kernel kills. (A threshold of H in each signal would put
//! earlyoom's some 60-70 MiB of free memory further from the OOM killer than the
//! agent's on a 2 GiB node.)
use anyhow::{Context, Result, bail};

use crate::harness::MIB;
use crate::memory::meminfo_field;

/// The kernel's reserves read at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Reserve {
    /// `vm.min_free_kbytes` in bytes: the free memory below which the kernel reclaims
    /// and, with nothing to reclaim, kills.
    pub(crate) min_free: u64,
    /// The kernel's `totalreserve_pages`, in bytes, which MemAvailable leaves out.
    pub(crate) total_reserve: u64,
    /// The zones' low watermarks summed, in bytes.
    pub(crate) low: u64,
    /// KReclaimable of /proc/meminfo, in bytes.
    pub(crate) reclaimable: u64,
}

impl Reserve {
    /// The node's reserves now.
    pub(crate) fn read() -> Result<Reserve> {
        let path = "/proc/sys/vm/min_free_kbytes";
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?;
        let min_free_kib: u64 = text
            .trim()
            .parse()
            .with_context(|| format!("{path}: not a number: {:?}", text.trim()))?;
        let zoneinfo =
            std::fs::read_to_string("/proc/zoneinfo").context("reading /proc/zoneinfo")?;
        let meminfo = std::fs::read_to_string("/proc/meminfo").context("reading /proc/meminfo")?;
        let reclaimable = meminfo_field(&meminfo, "KReclaimable:")
            .or_else(|| meminfo_field(&meminfo, "SReclaimable:"))
            .context("/proc/meminfo: neither KReclaimable nor SReclaimable")?;
        let page = nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
            .ok()
            .flatten()
            .and_then(|p| u64::try_from(p).ok())
            .unwrap_or(4096);
        let zones = Zones::parse(&zoneinfo).context("/proc/zoneinfo")?;
        Ok(Reserve {
            min_free: min_free_kib * 1024,
            total_reserve: zones.total_reserve_pages * page,
            low: zones.low_pages * page,
            reclaimable: reclaimable * 1024,
        })
    }

    /// The agent's `memory.available` threshold, in MiB, that lies `headroom_mib` above
    /// the kernel's floor.
    pub(crate) fn agent_threshold_mib(&self, headroom_mib: u64) -> u64 {
        self.min_free.div_ceil(MIB) + headroom_mib
    }

    /// What MemAvailable reads, in bytes, with `free` bytes free and no page cache
    /// (`si_mem_available`'s sum); 0 where the reserve exceeds it, as the kernel clamps.
    pub(crate) fn mem_available_at(&self, free: u64) -> u64 {
        (free + self.counted_reclaimable()).saturating_sub(self.total_reserve)
    }

    /// The part of the reclaimable kernel memory MemAvailable counts: all of it less the
    /// smaller of its half and the low watermarks.
    fn counted_reclaimable(&self) -> u64 {
        self.reclaimable - (self.reclaimable / 2).min(self.low)
    }

    /// earlyoom's MemAvailable level, in KiB, at the same free memory as the agent's
    /// threshold for `headroom_mib`; an error where MemAvailable is already 0 there
    /// (earlyoom cannot be placed that close to the OOM killer).
    pub(crate) fn earlyoom_level_kib(&self, headroom_mib: u64) -> Result<u64> {
        let free = self.agent_threshold_mib(headroom_mib) * MIB;
        let level = self.mem_available_at(free) / 1024;
        if level == 0 {
            bail!(
                "a headroom of {headroom_mib} MiB above the kernel's floor ({} MiB free) is at \
                 or under the reserve MemAvailable leaves out ({} MiB): earlyoom cannot be \
                 set that close",
                self.min_free / MIB,
                self.total_reserve / MIB
            );
        }
        Ok(level)
    }

    /// One line for the run's output.
    pub(crate) fn describe(&self, headroom_mib: u64) -> String {
        let earlyoom = self
            .earlyoom_level_kib(headroom_mib)
            .map(|kib| format!("MemAvailable<{kib} KiB"))
            .unwrap_or_else(|err| format!("none ({err:#})"));
        format!(
            "headroom {headroom_mib} MiB above the kernel's floor (vm.min_free_kbytes {} MiB): \
             the agent memory.available<{}Mi, earlyoom {earlyoom} (MemAvailable leaves out \
             {} MiB of reserve, counts {} MiB of {} MiB reclaimable kernel memory)",
            self.min_free / MIB,
            self.agent_threshold_mib(headroom_mib),
            self.total_reserve / MIB,
            self.counted_reclaimable() / MIB,
            self.reclaimable / MIB,
        )
    }
}

/// The sums of /proc/zoneinfo that MemAvailable uses, in pages.
#[derive(Debug, PartialEq, Eq)]
struct Zones {
    total_reserve_pages: u64,
    low_pages: u64,
}

impl Zones {
    /// Per zone (each starts at a "Node N, zone NAME" line): its `low`, `high`,
    /// `managed` and `protection: (..)` lines. The per-CPU lists' own `high:` lines
    /// (with a colon) are not the zone's.
    fn parse(text: &str) -> Result<Zones> {
        #[derive(Default)]
        struct Zone {
            low: u64,
            high: u64,
            managed: u64,
            protection: u64,
        }
        let mut zones: Vec<Zone> = Vec::new();
        for (n, line) in text.lines().enumerate() {
            if line.starts_with("Node ") {
                zones.push(Zone::default());
                continue;
            }
            let Some(zone) = zones.last_mut() else {
                continue;
            };
            let mut words = line.split_whitespace();
            let (Some(key), Some(value)) = (words.next(), words.next()) else {
                continue;
            };
            let number = |v: &str| {
                v.trim_matches(|c| c == '(' || c == ')' || c == ',')
                    .parse::<u64>()
                    .with_context(|| format!("line {}: {key}: not a number: {v:?}", n + 1))
            };
            match key {
                "low" => zone.low = number(value)?,
                "high" => zone.high = number(value)?,
                "managed" => zone.managed = number(value)?,
                "protection:" => {
                    for v in std::iter::once(value).chain(words) {
                        zone.protection = zone.protection.max(number(v)?);
                    }
                }
                _ => {}
            }
        }
        if zones.is_empty() {
            bail!("no zone (no \"Node N, zone NAME\" line)");
        }
        Ok(Zones {
            // calculate_totalreserve_pages in mm/page_alloc.c.
            total_reserve_pages: zones
                .iter()
                .map(|z| (z.protection + z.high).min(z.managed))
                .sum(),
            low_pages: zones.iter().map(|z| z.low).sum(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two zones of a 2 GiB guest as /proc/zoneinfo prints them, with the per-node
    /// stats and one per-CPU list shortened, and an empty zone.
    const ZONEINFO: &str = "\
Node 0, zone      DMA
  per-node stats
      nr_inactive_anon 4
      nr_active_file 1200
  pages free     3840
        boost    0
        min      176
        low      220
        high     264
        spanned  4095
        present  3998
        managed  3840
        cma      0
        protection: (0, 1905, 1905, 1905, 1905)
      nr_free_pages 3840
  pagesets
    cpu: 0
              count: 0
              high:  0
              batch: 1
Node 0, zone    DMA32
  pages free     12000
        boost    0
        min      11000
        low      13750
        high     16500
        spanned  520160
        present  520160
        managed  487800
        cma      0
        protection: (0, 0, 0, 0, 0)
    cpu: 0
              count: 31
              high:  2000
Node 0, zone   Normal
  pages free     0
        min      0
        low      0
        high     0
        managed  0
        protection: (0, 0, 0, 0, 0)
";

    #[test]
    fn zoneinfo_sums_the_reserve_as_the_kernel_does() {
        let zones = Zones::parse(ZONEINFO).unwrap();
        // DMA: 1905 + 264 = 2169, but at most its 3840 managed pages; DMA32: 16500.
        assert_eq!(
            zones,
            Zones {
                total_reserve_pages: 2169 + 16500,
                low_pages: 220 + 13750,
            }
        );
        // A zone whose protection exceeds its managed pages counts those pages alone.
        let small = ZONEINFO.replace("managed  3840", "managed  1000");
        assert_eq!(
            Zones::parse(&small).unwrap().total_reserve_pages,
            1000 + 16500
        );
    }

    #[test]
    fn odd_zoneinfo_is_refused_with_the_line() {
        let err = Zones::parse(&ZONEINFO.replace("high     16500", "high     lots"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("line 26") && err.contains("high"), "{err}");
        assert!(Zones::parse("").is_err());
    }

    fn reserve() -> Reserve {
        Reserve {
            min_free: 45 * MIB,
            total_reserve: 67 * MIB,
            low: 55 * MIB,
            reclaimable: 20 * MIB,
        }
    }

    #[test]
    fn both_killers_are_set_at_the_same_free_memory() {
        let r = reserve();
        // The agent: 45 MiB of floor and 50 MiB of headroom.
        assert_eq!(r.agent_threshold_mib(50), 95);
        // earlyoom, at 95 MiB free: 95 - 67 + (20 - 10) = 38 MiB of MemAvailable.
        assert_eq!(r.earlyoom_level_kib(50).unwrap(), 38 * 1024);
        // Half the reclaimable memory counts, unless the low watermarks are smaller.
        let low = Reserve { low: 4 * MIB, ..r };
        assert_eq!(low.earlyoom_level_kib(50).unwrap(), (95 - 67 + 16) * 1024);
    }

    #[test]
    fn earlyoom_cannot_be_set_under_its_reserve() {
        let r = Reserve {
            reclaimable: 0,
            ..reserve()
        };
        // 45 + 20 = 65 MiB free is under the 67 MiB MemAvailable leaves out.
        let err = r.earlyoom_level_kib(20).unwrap_err().to_string();
        assert!(err.contains("earlyoom cannot be set"), "{err}");
        assert!(r.describe(20).contains("earlyoom none"));
    }
}
