//! How the processes of a pod's cgroups are signalled: the kill strategies, in one
//! place, tried in the order of [`STRATEGIES`].
//!
//! 1. `cgroup.kill` (SIGKILL only; any cgroup2 hierarchy, so the unified mirror on a v1
//!    host too; Linux 5.14): the kernel kills the whole subtree at once, forks included,
//!    and no pid is read, so none can be reused under us.
//! 2. Each process through a pidfd (Linux 5.3), and only while the cgroup still lists it.
//!    A pid read from `cgroup.procs` can be reaped and given to a new process outside the
//!    pod before `kill(2)` runs; a pidfd names one process for good: signalling it after
//!    that process died fails with ESRCH, whoever holds the number now. So each listed
//!    pid is opened first, the cgroup's processes are listed again, and only a pid still
//!    listed is signalled through its pidfd. If the signal lands, the process was alive
//!    from the open to the signal, so the number was its own when the second list was
//!    read: it was in the cgroup.
//! 3. `kill(2)` of each listed pid, before Linux 5.3, with the window pidfds close.
//!
//! SIGKILL through strategies 2 and 3 is repeated for up to [`KILL_ROUNDS`] rounds while
//! new processes appear (forks race the scan); other signals go to the processes listed
//! at the time of the call. A process that exits meanwhile is skipped.
use std::collections::BTreeSet;

use nix::errno::Errno;
use nix::sys::signal::Signal;
use nix::unistd::Pid;

use super::{CgroupError, CgroupTree};
use crate::observe::CgroupVersion;
use crate::runtime::sys::{CgroupKill, PidFd};

/// Rounds of kill-and-rescan when SIGKILL cannot use `cgroup.kill` (forks race the scan).
/// A v1 freezer would stop the forks, but the tree does not join the freezer hierarchy.
const KILL_ROUNDS: usize = 10;

/// One way to signal the processes of a cgroup subtree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Strategy {
    /// Write "1" to `cgroup.kill` in every cgroup2 hierarchy that has it.
    CgroupKill,
    /// Each listed process through a pidfd, only while still listed.
    Pidfd,
    /// Each listed process through `kill(2)`.
    KillSyscall,
}

/// The strategies, best first: each is tried when the one before does not apply (another
/// signal than SIGKILL, no `cgroup.kill`, no pidfds on this kernel).
const STRATEGIES: [Strategy; 3] = [Strategy::CgroupKill, Strategy::Pidfd, Strategy::KillSyscall];

/// What one strategy did.
enum Tried {
    /// Every process was signalled (or the rounds ran out): how many distinct ones.
    Done(usize),
    /// The strategy does not apply here: the next one goes on, with the processes this
    /// one already signalled and what it listed last.
    Unavailable {
        signalled: BTreeSet<i32>,
        listed: Vec<i32>,
    },
}

impl CgroupTree {
    /// Sends `signal` to every process under `relative` (see the module's documentation)
    /// and returns how many distinct processes were signalled.
    pub(super) fn signal_subtree(
        &self,
        relative: &str,
        signal: Signal,
    ) -> Result<usize, CgroupError> {
        let mut signalled = BTreeSet::new();
        let mut listed = self.pids_at(relative);
        for strategy in STRATEGIES {
            let tried = match strategy {
                Strategy::CgroupKill => self.through_cgroup_kill(relative, signal, &listed),
                Strategy::Pidfd | Strategy::KillSyscall => {
                    self.in_rounds(strategy, relative, signal, signalled, listed)?
                }
            };
            match tried {
                Tried::Done(count) => return Ok(count),
                Tried::Unavailable {
                    signalled: so_far,
                    listed: last,
                } => {
                    signalled = so_far;
                    listed = last;
                }
            }
        }
        Ok(signalled.len())
    }

    /// Strategy 1: SIGKILL through `cgroup.kill`. Once the kernel killed the subtree,
    /// signalling the pids listed before would only open a window in which one of them,
    /// reaped meanwhile, is reused by a process outside the pod.
    fn through_cgroup_kill(&self, relative: &str, signal: Signal, listed: &[i32]) -> Tried {
        let unavailable = || Tried::Unavailable {
            signalled: BTreeSet::new(),
            listed: listed.to_vec(),
        };
        if signal != Signal::SIGKILL {
            return unavailable();
        }
        let mut killed = false;
        for h in self
            .hierarchies
            .iter()
            .filter(|h| h.version == CgroupVersion::V2)
        {
            let path = h.mount.join(relative).join("cgroup.kill");
            // On failure the per-process kills still run.
            if path.exists() {
                match CgroupKill::open(&path).and_then(|kill| kill.fire()) {
                    Ok(()) => killed = true,
                    Err(e) => {
                        tracing::debug!(error = %e, "cgroup.kill failed; signalling each process")
                    }
                }
            }
        }
        if killed {
            Tried::Done(listed.len())
        } else {
            unavailable()
        }
    }

    /// Strategies 2 and 3: each listed process, in rounds while new ones appear
    /// (SIGKILL), or once (other signals). The pidfd strategy hands over to the next
    /// when the kernel has no pidfds.
    fn in_rounds(
        &self,
        strategy: Strategy,
        relative: &str,
        signal: Signal,
        mut signalled: BTreeSet<i32>,
        mut listed: Vec<i32>,
    ) -> Result<Tried, CgroupError> {
        let rounds = if signal == Signal::SIGKILL {
            KILL_ROUNDS
        } else {
            1
        };
        let failed = |pid, source| CgroupError::Signal {
            cgroup: relative.to_string(),
            pid,
            signal,
            source,
        };
        for _ in 0..rounds {
            let fresh: Vec<i32> = listed
                .into_iter()
                .filter(|p| !signalled.contains(p))
                .collect();
            if fresh.is_empty() {
                break;
            }
            if strategy == Strategy::Pidfd {
                match signal_members(&fresh, || self.pids_at(relative), signal) {
                    Ok(round) => signalled.extend(round.signalled),
                    Err(RoundError::Signal { pid, source }) => return Err(failed(pid, source)),
                    Err(RoundError::Unsupported) => {
                        return Ok(Tried::Unavailable {
                            signalled,
                            listed: fresh,
                        });
                    }
                }
            } else {
                for pid in fresh {
                    match nix::sys::signal::kill(Pid::from_raw(pid), signal) {
                        Ok(()) | Err(Errno::ESRCH) => {
                            signalled.insert(pid);
                        }
                        Err(source) => return Err(failed(pid, source)),
                    }
                }
            }
            listed = self.pids_at(relative);
        }
        Ok(Tried::Done(signalled.len()))
    }
}

/// What one round of [`signal_members`] did.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Round {
    /// Signalled: each was in the cgroup's second list and alive when signalled.
    pub(super) signalled: BTreeSet<i32>,
    /// Listed first, gone or moved out by the second list: left alone.
    pub(super) skipped: BTreeSet<i32>,
}

/// Why a round could not be run.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum RoundError {
    /// No pidfds on this kernel (before 5.3): the caller may fall back to kill(2).
    Unsupported,
    /// Signalling this pid failed (EPERM, ...).
    Signal { pid: i32, source: Errno },
}

/// Opens a pidfd for each of `listed`, reads `members()` (the cgroup's processes, read
/// again now), and sends `signal` to the listed processes still members.
pub(super) fn signal_members(
    listed: &[i32],
    members: impl FnOnce() -> Vec<i32>,
    signal: Signal,
) -> Result<Round, RoundError> {
    let mut round = Round::default();
    let mut held = Vec::with_capacity(listed.len());
    for &pid in listed {
        match PidFd::open(pid) {
            Ok(Some(fd)) => held.push(fd),
            Ok(None) => {
                round.skipped.insert(pid);
            }
            Err(Errno::ENOSYS) => return Err(RoundError::Unsupported),
            // Out of descriptors and the like: the next round lists it again.
            Err(_) => {
                round.skipped.insert(pid);
            }
        }
    }
    let members: BTreeSet<i32> = members().into_iter().collect();
    for fd in held {
        if !members.contains(&fd.pid()) {
            round.skipped.insert(fd.pid());
            continue;
        }
        match fd.send(signal) {
            Ok(true) => {
                round.signalled.insert(fd.pid());
            }
            Ok(false) => {
                round.skipped.insert(fd.pid());
            }
            Err(source) => {
                return Err(RoundError::Signal {
                    pid: fd.pid(),
                    source,
                });
            }
        }
    }
    Ok(round)
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;
    use std::process::{Command, Stdio};

    use super::*;

    fn sleeper() -> std::process::Child {
        Command::new("sleep")
            .arg("60")
            .stdin(Stdio::null())
            .spawn()
            .expect("spawn sleep")
    }

    /// A real process named in the first list but not in the second is not signalled: it
    /// stands for a number reused by a process outside the pod.
    #[test]
    fn only_pids_listed_again_after_the_open_are_signalled() {
        let mut member = sleeper();
        let mut outsider = sleeper();
        let (m, o) = (member.id() as i32, outsider.id() as i32);
        let round =
            signal_members(&[m, o], || vec![m], Signal::SIGKILL).expect("pidfds on this kernel");
        assert_eq!(round.signalled, BTreeSet::from([m]));
        assert_eq!(round.skipped, BTreeSet::from([o]));
        let status = member.wait().expect("wait");
        assert_eq!(status.signal(), Some(libc::SIGKILL));
        assert!(
            outsider.try_wait().expect("try_wait").is_none(),
            "the process outside the second list was signalled"
        );
        outsider.kill().expect("kill");
        outsider.wait().expect("wait");
    }
}
