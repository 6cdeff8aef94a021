//! The runtime's raw system calls, each behind a safe wrapper: pidfds (open, signal,
//! exit information, poll), `process_mrelease` and `cgroup.kill`. Every other part of the
//! runtime goes through here, so each call is written out once, with its minimum kernel.
//!
//! What runs in a container's child between fork and exec (`setsid`, the cgroup joins,
//! the limits it gets) stays with the launch: it must be async-signal-safe, which the
//! wrappers here do not promise.
use std::io::Write as _;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::Path;

use nix::errno::Errno;
use nix::sys::signal::Signal;

/// A process held by a pidfd (`pidfd_open`, Linux 5.3). A pidfd names one process for
/// good: once it has exited, nothing sent through it reaches another process, whoever
/// holds its number now.
#[derive(Debug)]
pub(crate) struct PidFd {
    pid: i32,
    fd: OwnedFd,
}

impl PidFd {
    /// Opens `pid`; `Ok(None)` when no such process exists (it exited). ENOSYS: no pidfds
    /// on this kernel (before 5.3).
    pub(crate) fn open(pid: i32) -> Result<Option<PidFd>, Errno> {
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

    pub(crate) fn pid(&self) -> i32 {
        self.pid
    }

    /// Sends `signal` (`pidfd_send_signal`, Linux 5.1); `Ok(false)` when the process has
    /// exited (never another process).
    pub(crate) fn send(&self, signal: Signal) -> Result<bool, Errno> {
        match self.send_raw(signal as libc::c_int) {
            Ok(()) => Ok(true),
            Err(Errno::ESRCH) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Whether the process still exists (running, or a zombie its parent has not
    /// reaped): signal 0 checks without sending anything. While it does, the pid it had
    /// when opened is still its own.
    pub(crate) fn exists(&self) -> bool {
        self.send_raw(0).is_ok()
    }

    fn send_raw(&self, signal: libc::c_int) -> Result<(), Errno> {
        // SAFETY: pidfd_send_signal(fd, sig, info = NULL, flags = 0): a NULL siginfo makes
        // the kernel fill it as kill(2) does; the descriptor is ours and open.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                self.fd.as_raw_fd(),
                signal,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            )
        };
        if rc == 0 { Ok(()) } else { Err(Errno::last()) }
    }

    /// Frees the memory of the process, already killed, now instead of as it runs its
    /// exit (`process_mrelease`, Linux 5.15; Android's lmkd does the same). `false` where
    /// the kernel lacks the call or the process is not dying. Takes as long as freeing
    /// the memory does.
    pub(crate) fn release_memory(&self) -> bool {
        // SAFETY: process_mrelease takes a pidfd we own and a flags word; it touches no
        // memory of ours.
        unsafe { libc::syscall(libc::SYS_process_mrelease, self.fd.as_raw_fd(), 0) == 0 }
    }

    /// Gives every thread of the process, already killed, the highest priority a normal
    /// task has (nice -20), as Android's lmkd does for the process it kills: a killed
    /// process frees its memory in its own exit, on its own CPU time, and beside busy pods
    /// (and the synchronize the kill wakes) its exit otherwise waited its turn. How many
    /// threads it raised; none once the process is gone.
    pub(crate) fn hasten_exit(&self) -> usize {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{}/task", self.pid)) else {
            return 0;
        };
        // The threads listed belong to this process only while it exists: checked after
        // the listing, so that no thread of a later process with a reused pid is raised.
        let tids: Vec<libc::id_t> = tasks
            .flatten()
            .filter_map(|t| t.file_name().to_str()?.parse().ok())
            .collect();
        if !self.exists() {
            return 0;
        }
        tids.into_iter()
            .filter(|&tid| {
                // SAFETY: setpriority takes plain integers; on Linux PRIO_PROCESS with a
                // thread id sets that one thread's nice value.
                unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, -20) == 0 }
            })
            .count()
    }

    /// `ioctl(pidfd, PIDFD_GET_INFO)` asking for the exit status. ENOTTY or EINVAL: the
    /// kernel has no `PIDFD_GET_INFO` (before 6.13); ESRCH: the process was reaped and
    /// this kernel keeps nothing of it (before 6.15).
    pub(crate) fn exit_info(&self) -> Result<ExitInfo, Errno> {
        exit_info(self.fd.as_fd())
    }

    /// Whether the pidfd is readable now (the process has exited), or cannot be polled.
    pub(crate) fn readable(&self) -> bool {
        let mut pollfd = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one live pollfd, a count of one, a zero timeout: poll never blocks and
        // writes only `revents`.
        let rc = unsafe { libc::poll(&mut pollfd, 1, 0) };
        rc > 0 || (rc < 0 && Errno::last() != Errno::EINTR)
    }
}

impl AsFd for PidFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl From<PidFd> for OwnedFd {
    fn from(pidfd: PidFd) -> OwnedFd {
        pidfd.fd
    }
}

/// `struct pidfd_info` of include/uapi/linux/pidfd.h (its third published size,
/// `PIDFD_INFO_SIZE_VER2`). The ioctl is extensible: the size is part of the request
/// number, an older kernel fills only the fields it knows and leaves `mask` bits of the
/// others clear.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct PidfdInfo {
    mask: u64,
    cgroupid: u64,
    pid: u32,
    tgid: u32,
    ppid: u32,
    ruid: u32,
    rgid: u32,
    euid: u32,
    egid: u32,
    suid: u32,
    sgid: u32,
    fsuid: u32,
    fsgid: u32,
    /// A wait status (as `waitpid` reports it), valid with `PIDFD_INFO_EXIT`.
    exit_code: i32,
    coredump_mask: u32,
    coredump_signal: u32,
    supported_mask: u64,
}

const PIDFD_INFO_SIZE_VER2: usize = 80;
const _: () = assert!(std::mem::size_of::<PidfdInfo>() == PIDFD_INFO_SIZE_VER2);

/// The task still exists (not reaped): pid, tgid and ppid were filled.
const PIDFD_INFO_PID: u64 = 1 << 0;
/// `exit_code` holds the wait status (Linux 6.15; only returned when asked for).
const PIDFD_INFO_EXIT: u64 = 1 << 3;
const PIDFS_IOCTL_MAGIC: u32 = 0xFF;
/// `_IOWR(PIDFS_IOCTL_MAGIC, 11, struct pidfd_info)` (Linux 6.13).
const PIDFD_GET_INFO: libc::Ioctl = libc::_IOWR::<PidfdInfo>(PIDFS_IOCTL_MAGIC, 11);

/// What one `PIDFD_GET_INFO` said about the exit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ExitInfo {
    /// The wait status the kernel kept.
    Exited(i32),
    /// No exit status (yet); `alive`: the task still exists (running, or a zombie its
    /// parent has not reaped).
    NotYet { alive: bool },
}

fn exit_info(pidfd: BorrowedFd<'_>) -> Result<ExitInfo, Errno> {
    let mut info = PidfdInfo {
        mask: PIDFD_INFO_EXIT,
        ..PidfdInfo::default()
    };
    // SAFETY: the descriptor is open for the call; `info` is a live, writable struct of
    // exactly the size the request number encodes, which the kernel fills at most.
    let rc = unsafe { libc::ioctl(pidfd.as_raw_fd(), PIDFD_GET_INFO, &mut info) };
    if rc < 0 {
        return Err(Errno::last());
    }
    Ok(if info.mask & PIDFD_INFO_EXIT != 0 {
        ExitInfo::Exited(info.exit_code)
    } else {
        ExitInfo::NotYet {
            alive: info.mask & PIDFD_INFO_PID != 0,
        }
    })
}

/// An open `cgroup.kill` (cgroup v2, Linux 5.14): writing "1" kills every process of the
/// cgroup's subtree at once, forks included, and cannot reach a process outside it (no
/// pid is read, so no pid can be reused under us). Opened ahead, the kill is one write.
#[derive(Debug)]
pub(crate) struct CgroupKill {
    file: std::fs::File,
}

impl CgroupKill {
    /// Opens `path` (a `cgroup.kill` file) for writing; never creates it.
    pub(crate) fn open(path: &Path) -> std::io::Result<CgroupKill> {
        let file = std::fs::OpenOptions::new().write(true).open(path)?;
        Ok(CgroupKill { file })
    }

    /// Kills the cgroup's subtree.
    pub(crate) fn fire(&self) -> std::io::Result<()> {
        (&self.file).write_all(b"1")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A child of the test's own with one thread (`sleep 60`), its pid and a pidfd of it.
    fn sleeping_child() -> (std::process::Child, i32, PidFd) {
        let child = std::process::Command::new("sleep")
            .arg("60")
            .stdin(std::process::Stdio::null())
            .spawn()
            .expect("spawn sleep");
        let pid = i32::try_from(child.id()).expect("a pid fits an i32");
        let fd = PidFd::open(pid).expect("pidfd_open").expect("alive");
        (child, pid, fd)
    }

    /// A pidfd outlives its process: once reaped, signalling it reaches nobody, even when
    /// the number is handed out again.
    #[test]
    fn a_reaped_process_is_never_signalled_through_its_pidfd() {
        let (mut child, _, fd) = sleeping_child();
        assert!(fd.exists(), "the child runs");
        child.kill().expect("kill");
        child.wait().expect("reap");
        assert!(!fd.exists(), "a reaped process does not exist");
        assert_eq!(fd.send(Signal::SIGKILL), Ok(false));
    }

    /// The nice value of thread `tid` of `pid`, from its stat line (field 19).
    fn nice_of(pid: i32, tid: &str) -> i64 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).expect("stat");
        crate::observe::parse::ProcStat::parse(&stat)
            .expect("a stat line")
            .number(19)
            .expect("nice")
    }

    #[test]
    fn a_killed_process_is_raised_to_nice_minus_20_while_it_exists() {
        let (mut child, pid, fd) = sleeping_child();
        let raised = fd.hasten_exit();
        if nix::unistd::geteuid().is_root() {
            assert_eq!(raised, 1, "its one thread raised");
            assert_eq!(nice_of(pid, &pid.to_string()), -20);
        } else {
            // Without CAP_SYS_NICE a nice value only goes up: nothing raised.
            println!("SKIP a_killed_process_is_raised: raising a nice value needs root");
            assert_eq!(raised, 0);
        }
        child.kill().expect("kill");
        child.wait().expect("reap");
        assert_eq!(fd.hasten_exit(), 0, "a reaped process: nothing to raise");
    }
}
