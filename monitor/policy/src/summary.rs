//! The node's stats as the eviction signals read them (the node part of the kubelet's
//! Summary API), and the one builder of signal observations from them (kubelet:
//! makeSignalObservations in helpers.go, makeMemoryAvailableSignalObservation in
//! helpers_linux.go). The agent fills [`NodeStats`] from cgroupfs, /proc and statvfs;
//! `monitor simulate` fills it from a Summary API document: both then get the same
//! observations from [`make_signal_observations`].
use super::signal::{Observations, Signal, SignalObservation};
use super::types::{FsLayout, Time};

/// Memory of the node or of the pods cgroup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryStat {
    pub available_bytes: u64,
    pub working_set_bytes: u64,
    /// When the stat was read.
    pub time: Time,
}

/// Where allocatableMemory.available comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AllocatableStat {
    /// The pods cgroup's own memory (the Summary API's "pods" system container).
    PodsCgroup(MemoryStat),
    /// No pods cgroup to read: the memory pods may use (node allocatable: capacity minus
    /// reservations, or the pods cgroup's limit) minus the sum of the pods' working sets,
    /// timed like the node's memory.
    Derived {
        limit_bytes: i64,
        pods_working_set_bytes: u64,
        time: Time,
    },
}

/// A filesystem (Summary API `fs`, `runtime.imageFs`, `runtime.containerFs`). Fields the
/// source does not report are `None`, and give no observation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FsStat {
    pub available_bytes: Option<u64>,
    pub capacity_bytes: Option<u64>,
    pub inodes_free: Option<u64>,
    pub inodes: Option<u64>,
    pub time: Time,
}

/// Process ids (Summary API `rlimit`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PidStat {
    pub max: u64,
    pub current: u64,
    pub time: Time,
}

/// The node's stats; anything unknown is `None` and gives no observation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeStats {
    pub memory: Option<MemoryStat>,
    pub allocatable: Option<AllocatableStat>,
    pub nodefs: Option<FsStat>,
    pub imagefs: Option<FsStat>,
    /// The writable layers' filesystem when the runtime reports it apart; else it is the
    /// imagefs with a dedicated image filesystem, and the nodefs without.
    pub containerfs: Option<FsStat>,
    pub pids: Option<PidStat>,
}

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn memory_observation(stat: &MemoryStat) -> SignalObservation {
    SignalObservation {
        available: to_i64(stat.available_bytes),
        capacity: to_i64(stat.available_bytes.saturating_add(stat.working_set_bytes)),
        time: stat.time,
    }
}

/// The signal observations of one synchronize:
/// - memory.available: available, with capacity = available + working set;
/// - allocatableMemory.available: the pods cgroup the same way, or derived (see
///   [`AllocatableStat::Derived`]);
/// - nodefs / imagefs / containerfs bytes and inodes; without an imagefs of its own the
///   image signals read the nodefs (the kubelet's stats provider reports the nodefs as
///   imagefs then), and a containerfs not reported apart is the imagefs when the
///   writable layers live there (a dedicated imagefs), else the nodefs;
/// - pid.available = max − current, capacity max.
pub fn make_signal_observations(stats: &NodeStats, layout: FsLayout) -> Observations {
    let mut out = Observations::new();
    if let Some(memory) = &stats.memory {
        out.insert(Signal::MemoryAvailable, memory_observation(memory));
    }
    match stats.allocatable {
        Some(AllocatableStat::PodsCgroup(memory)) => {
            out.insert(
                Signal::AllocatableMemoryAvailable,
                memory_observation(&memory),
            );
        }
        Some(AllocatableStat::Derived {
            limit_bytes,
            pods_working_set_bytes,
            time,
        }) => {
            out.insert(
                Signal::AllocatableMemoryAvailable,
                SignalObservation {
                    available: limit_bytes.saturating_sub(to_i64(pods_working_set_bytes)),
                    capacity: limit_bytes,
                    time,
                },
            );
        }
        None => {}
    }
    let imagefs = stats.imagefs.as_ref().or(stats.nodefs.as_ref());
    let containerfs = stats
        .containerfs
        .as_ref()
        .or(if layout.containers_on_imagefs() {
            stats.imagefs.as_ref()
        } else {
            stats.nodefs.as_ref()
        });
    for (fs, bytes, inodes) in [
        (
            stats.nodefs.as_ref(),
            Signal::NodeFsAvailable,
            Signal::NodeFsInodesFree,
        ),
        (imagefs, Signal::ImageFsAvailable, Signal::ImageFsInodesFree),
        (
            containerfs,
            Signal::ContainerFsAvailable,
            Signal::ContainerFsInodesFree,
        ),
    ] {
        let Some(fs) = fs else { continue };
        if let (Some(available), Some(capacity)) = (fs.available_bytes, fs.capacity_bytes) {
            out.insert(
                bytes,
                SignalObservation {
                    available: to_i64(available),
                    capacity: to_i64(capacity),
                    time: fs.time,
                },
            );
        }
        if let (Some(free), Some(total)) = (fs.inodes_free, fs.inodes) {
            out.insert(
                inodes,
                SignalObservation {
                    available: to_i64(free),
                    capacity: to_i64(total),
                    time: fs.time,
                },
            );
        }
    }
    if let Some(pids) = &stats.pids {
        out.insert(
            Signal::PidAvailable,
            SignalObservation {
                available: to_i64(pids.max).saturating_sub(to_i64(pids.current)),
                capacity: to_i64(pids.max),
                time: pids.time,
            },
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const MI: u64 = 1 << 20;

    fn fs(available: u64, capacity: u64, time: u64) -> FsStat {
        FsStat {
            available_bytes: Some(available),
            capacity_bytes: Some(capacity),
            inodes_free: Some(10),
            inodes: Some(100),
            time: Duration::from_secs(time),
        }
    }

    #[test]
    fn derived_allocatable_subtracts_the_pods_working_sets_from_the_limit() {
        let stats = NodeStats {
            allocatable: Some(AllocatableStat::Derived {
                limit_bytes: (1024 * MI) as i64,
                pods_working_set_bytes: 300 * MI,
                time: Duration::from_secs(3),
            }),
            ..NodeStats::default()
        };
        let o = make_signal_observations(&stats, FsLayout::with_imagefs(false));
        let a = o[&Signal::AllocatableMemoryAvailable];
        assert_eq!(
            (a.available, a.capacity),
            ((724 * MI) as i64, (1024 * MI) as i64)
        );
        assert_eq!(a.time, Duration::from_secs(3));
        assert!(!o.contains_key(&Signal::MemoryAvailable));
    }

    #[test]
    fn filesystems_fall_back_by_layout() {
        let shared = NodeStats {
            nodefs: Some(fs(5, 50, 1)),
            ..NodeStats::default()
        };
        let o = make_signal_observations(&shared, FsLayout::with_imagefs(false));
        assert_eq!(o[&Signal::ImageFsAvailable], o[&Signal::NodeFsAvailable]);
        assert_eq!(
            o[&Signal::ContainerFsAvailable],
            o[&Signal::NodeFsAvailable]
        );
        let split = NodeStats {
            nodefs: Some(fs(5, 50, 1)),
            imagefs: Some(fs(7, 70, 2)),
            ..NodeStats::default()
        };
        let o = make_signal_observations(&split, FsLayout::with_imagefs(true));
        assert_eq!(o[&Signal::ImageFsAvailable].available, 7);
        assert_eq!(o[&Signal::ContainerFsAvailable].available, 7);
        assert_eq!(o[&Signal::NodeFsInodesFree].capacity, 100);
        // An imagefs reported but not dedicated: containers' layers stay on nodefs.
        let o = make_signal_observations(&split, FsLayout::with_imagefs(false));
        assert_eq!(o[&Signal::ContainerFsAvailable].available, 5);
    }

    #[test]
    fn pids_available_is_max_minus_current() {
        let stats = NodeStats {
            pids: Some(PidStat {
                max: 4096,
                current: 96,
                time: Duration::ZERO,
            }),
            ..NodeStats::default()
        };
        let o = make_signal_observations(&stats, FsLayout::with_imagefs(false));
        assert_eq!(o[&Signal::PidAvailable].available, 4000);
        assert_eq!(o[&Signal::PidAvailable].capacity, 4096);
    }
}
