//! Signals that reach only the processes of a cgroup, where the kernel has no
//! `cgroup.kill` (a pure cgroup v1 node, or a kernel before 5.14).
//!
//! A pid read from `cgroup.procs` can be reaped and given to a new process outside the
//! pod before `kill(2)` runs. A pidfd (`pidfd_open`, Linux 5.3) names one process for
//! good: signalling it after that process died fails with ESRCH, whoever holds the number
//! now. So each listed pid is opened first, the cgroup's processes are listed again, and
//! only a pid still listed is signalled through its pidfd. If the signal lands, the
//! process was alive from the open to the signal, so the number was its own when the
//! second list was read: it was in the cgroup.
use std::collections::BTreeSet;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use nix::errno::Errno;
use nix::sys::signal::Signal;

/// A process held by a pidfd.
#[derive(Debug)]
pub struct PidFd {
    pid: i32,
    fd: OwnedFd,
}

impl PidFd {
    /// Opens `pid`; `Ok(None)` when no such process exists (it exited).
    pub fn open(pid: i32) -> Result<Option<PidFd>, Errno> {
        // SAFETY: pidfd_open takes a pid and a flags word and returns a new descriptor or
        // -1; no memory is passed.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if fd < 0 {
            return match Errno::last() {
                Errno::ESRCH => Ok(None),
                e => Err(e),
            };
        }
        let fd = i32::try_from(fd).map_err(|_| Errno::EBADF)?;
        // SAFETY: the kernel just returned this descriptor to us; nothing else owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Some(PidFd { pid, fd }))
    }

    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Sends `signal`; `Ok(false)` when the process has exited (never another process).
    pub fn send(&self, signal: Signal) -> Result<bool, Errno> {
        // SAFETY: pidfd_send_signal(fd, sig, info = NULL, flags = 0): a NULL siginfo makes
        // the kernel fill it as kill(2) does; the descriptor is ours and open.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                self.fd.as_raw_fd(),
                signal as libc::c_int,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            )
        };
        if rc == 0 {
            return Ok(true);
        }
        match Errno::last() {
            Errno::ESRCH => Ok(false),
            e => Err(e),
        }
    }
}

/// What one round of [`signal_members`] did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Round {
    /// Signalled: each was in the cgroup's second list and alive when signalled.
    pub signalled: BTreeSet<i32>,
    /// Listed first, gone or moved out by the second list: left alone.
    pub skipped: BTreeSet<i32>,
}

/// Why a round could not be run.
#[derive(Debug, PartialEq, Eq)]
pub enum RoundError {
    /// No pidfds on this kernel (before 5.3): the caller may fall back to kill(2).
    Unsupported,
    /// Signalling this pid failed (EPERM, ...).
    Signal { pid: i32, source: Errno },
}

/// Opens a pidfd for each of `listed`, reads `members()` (the cgroup's processes, read
/// again now), and sends `signal` to the listed processes still members.
pub fn signal_members(
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

    /// A pidfd outlives its process: once reaped, signalling it reaches nobody, even when
    /// the number is handed out again.
    #[test]
    fn a_reaped_process_is_never_signalled_through_its_pidfd() {
        let mut child = sleeper();
        let pid = child.id() as i32;
        let fd = PidFd::open(pid).expect("pidfd_open").expect("alive");
        child.kill().expect("kill");
        child.wait().expect("reap");
        assert_eq!(fd.send(Signal::SIGKILL), Ok(false));
    }
}
