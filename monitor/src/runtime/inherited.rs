//! What a container process inherits from the agent, and what it must not.
//!
//! The agent raises its own open-file limit (see
//! [`raise_open_file_limit`](crate::observe::open_files::raise_open_file_limit)), runs
//! some threads on SCHED_FIFO and locks its memory. A process forked from it keeps the
//! limits and the forking thread's scheduling policy. A container must start with what
//! the agent itself was started with (the limits a container runtime would have given it)
//! and on the ordinary scheduler: [`OriginalLimits::record`] keeps the limits as they
//! were at start, before anything raised them, and [`OriginalLimits::restore_in_child`]
//! puts them back, with SCHED_OTHER and no memory locks, between fork and exec.
use std::io;
use std::sync::OnceLock;

/// One resource limit: soft and hard (`RLIM_INFINITY` for unlimited).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Limit {
    pub(crate) soft: u64,
    pub(crate) hard: u64,
}

/// The limits a container starts with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OriginalLimits {
    /// RLIMIT_NOFILE: the agent raises its own soft limit to the hard one.
    pub(crate) nofile: Limit,
    /// RLIMIT_MEMLOCK: what may be locked in memory.
    pub(crate) memlock: Limit,
    /// RLIMIT_RTPRIO: the highest real-time priority an unprivileged process may take.
    pub(crate) rtprio: Limit,
}

static ORIGINAL: OnceLock<OriginalLimits> = OnceLock::new();

/// The locked memory a container may have: the kernel's default RLIMIT_MEMLOCK (Linux
/// 5.16+), what a container runtime leaves in place.
const POD_MEMLOCK: u64 = 8 << 20;

fn get(resource: Resource) -> Limit {
    // SAFETY: zero is a valid rlimit; getrlimit writes into a value we own.
    let mut limit: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: a valid resource and a pointer to a live rlimit.
    if unsafe { libc::getrlimit(resource, &mut limit) } != 0 {
        // Cannot fail for these resources; unlimited then means "leave as is".
        return Limit {
            soft: libc::RLIM_INFINITY,
            hard: libc::RLIM_INFINITY,
        };
    }
    Limit {
        soft: limit.rlim_cur,
        hard: limit.rlim_max,
    }
}

/// The resource type `getrlimit` takes (it differs between glibc and musl).
#[cfg(target_env = "gnu")]
type Resource = libc::__rlimit_resource_t;
#[cfg(not(target_env = "gnu"))]
type Resource = libc::c_int;

impl OriginalLimits {
    /// The limits of this process now.
    pub(crate) fn current() -> OriginalLimits {
        OriginalLimits {
            nofile: get(libc::RLIMIT_NOFILE),
            memlock: get(libc::RLIMIT_MEMLOCK),
            rtprio: get(libc::RLIMIT_RTPRIO),
        }
    }

    /// Records the limits as they are now, the first time it is called; later calls
    /// return what the first recorded. Call it before anything raises a limit: at the
    /// top of `main`, and in every function that raises one.
    pub fn record() -> OriginalLimits {
        *ORIGINAL.get_or_init(OriginalLimits::current)
    }

    /// The recorded limits (recorded now when nothing recorded them yet).
    pub(crate) fn original() -> OriginalLimits {
        OriginalLimits::record()
    }

    /// In a forked child before exec: sets these limits (never above the current hard
    /// limit, which an unprivileged process could not raise again anyway), puts the
    /// process on SCHED_OTHER with priority 0 and unlocks its memory. Only
    /// async-signal-safe system calls, no allocation.
    pub(crate) fn restore_in_child(&self) -> io::Result<()> {
        // Real-time and locked-memory allowances are the agent's own (its unit grants
        // them for its notifier threads): a container gets a runtime's defaults, no
        // real-time priority and the kernel's 8 MiB of locked memory, never more than the
        // agent was started with.
        let pod_default = |limit: Limit, default: u64| Limit {
            soft: limit.soft.min(default),
            hard: limit.hard.min(default),
        };
        for (resource, limit) in [
            (libc::RLIMIT_NOFILE, self.nofile),
            (libc::RLIMIT_MEMLOCK, pod_default(self.memlock, POD_MEMLOCK)),
            (libc::RLIMIT_RTPRIO, pod_default(self.rtprio, 0)),
        ] {
            let now = get(resource);
            let hard = limit.hard.min(now.hard);
            let wanted = libc::rlimit {
                rlim_cur: limit.soft.min(hard),
                rlim_max: hard,
            };
            // SAFETY: a valid resource and a pointer to a live rlimit.
            if unsafe { libc::setrlimit(resource, &wanted) } != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        // SAFETY: sched_param is plain integers (more of them on musl); all-zero is valid.
        let param: libc::sched_param = unsafe { std::mem::zeroed() };
        // The raw system call, as for the agent's own threads: the calling thread (the
        // child's only one), whatever the libc wrapper thinks of it.
        // SAFETY: the call reads a valid parameter block we own.
        if unsafe {
            libc::syscall(
                libc::SYS_sched_setscheduler,
                0,
                libc::SCHED_OTHER,
                &param as *const libc::sched_param,
            )
        } != 0
        {
            return Err(io::Error::last_os_error());
        }
        // Memory locks do not survive fork, MCL_FUTURE does not survive exec: this makes
        // sure of it whatever the kernel.
        // SAFETY: munlockall takes no argument.
        if unsafe { libc::munlockall() } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_record_is_kept() {
        let first = OriginalLimits::record();
        assert_eq!(OriginalLimits::original(), first);
        assert_eq!(OriginalLimits::record(), first);
        assert!(first.nofile.soft <= first.nofile.hard);
        assert!(first.memlock.soft <= first.memlock.hard);
    }
}
