//! The exit status of a container process the agent did not spawn: one it adopted after a
//! restart, whose parent is now init (or a subreaper), so `wait()` is not ours to call.
//!
//! A pidfd opened while the process runs is held until it exits. Then, in this order:
//! - `ioctl(pidfd, PIDFD_GET_INFO)` asking for `PIDFD_INFO_EXIT` (Linux 6.15): the kernel
//!   keeps the wait status for every pidfd opened before the exit, once the process has
//!   been reaped by its parent;
//! - before the reap, the zombie's own `/proc/<pid>/stat` (field 52, `exit_code`, Linux
//!   3.5), trusted only when the pidfd still names a live (unreaped) process after the
//!   read, so the number cannot have passed to another process meanwhile.
//!
//! Where neither answers (a kernel before 6.15 whose init reaped the process first), the
//! status is unknown and said to be so.
use std::os::fd::AsFd;
use std::time::Duration;

use nix::errno::Errno;

use super::sys::{ExitInfo, PidFd};

/// The exit code a wait status stands for, as the kubelet reports it: the process's
/// status when it exited, 128 + the signal when a signal killed it; `None` for a status
/// that is no exit (stopped, continued).
pub(super) fn exit_code(wait_status: i32) -> Option<i32> {
    if libc::WIFEXITED(wait_status) {
        Some(libc::WEXITSTATUS(wait_status))
    } else if libc::WIFSIGNALED(wait_status) {
        Some(128 + libc::WTERMSIG(wait_status))
    } else {
        None
    }
}

/// The wait status in `/proc/<pid>/stat` text: `Some` only for a zombie (state `Z`) that
/// shows field 52 (`exit_code`, Linux 3.5).
pub(super) fn zombie_wait_status(stat: &str) -> Option<i32> {
    let stat = crate::observe::parse::ProcStat::parse(stat)?;
    if stat.field(3)? != "Z" {
        return None;
    }
    stat.number(52)
}

/// A process the agent did not spawn, held by a pidfd from while it ran.
#[derive(Debug)]
pub(super) struct Adopted {
    pid: u32,
    fd: PidFd,
}

/// Why an adopted process's exit code is unknown.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub(super) enum Unknown {
    #[error("no pidfd on this kernel (before 5.3)")]
    NoPidfd,
    #[error("reaped by its parent and this kernel keeps no exit status for pidfds (before 6.15)")]
    NotKept,
    #[error("PIDFD_GET_INFO: {0}")]
    Ioctl(Errno),
    #[error("still not reaped and its /proc/<pid>/stat unreadable")]
    Unreadable,
}

/// Where a known exit code came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Source {
    /// `PIDFD_INFO_EXIT`, after the reap.
    PidfdInfo,
    /// The zombie's `/proc/<pid>/stat`, before the reap.
    Zombie,
}

impl Source {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Source::PidfdInfo => "PIDFD_INFO_EXIT",
            Source::Zombie => "the zombie's /proc stat",
        }
    }
}

/// How long an exited process's parent may take to reap it before the status counts as
/// unreadable (init reaps within milliseconds).
const REAP_TIMEOUT: Duration = Duration::from_secs(5);
const REAP_POLL: Duration = Duration::from_millis(10);

impl Adopted {
    /// Opens `pid`: `Ok(None)` when no such process exists any more.
    pub(super) fn open(pid: u32) -> Result<Option<Adopted>, Unknown> {
        let raw = libc::pid_t::try_from(pid).map_err(|_| Unknown::Ioctl(Errno::EINVAL))?;
        match PidFd::open(raw) {
            Ok(fd) => Ok(fd.map(|fd| Adopted { pid, fd })),
            Err(Errno::ENOSYS) => Err(Unknown::NoPidfd),
            Err(e) => Err(Unknown::Ioctl(e)),
        }
    }

    pub(super) fn pid(&self) -> u32 {
        self.pid
    }

    /// Whether the pidfd's process still exists (running or a zombie): a pid it held
    /// then was not given to another process.
    pub(super) fn exists(&self) -> bool {
        self.fd.exists()
    }

    /// Resolves when the process has exited (its pidfd turns readable).
    pub(super) async fn exited(&self) {
        let registered = self
            .fd
            .as_fd()
            .try_clone_to_owned()
            .and_then(|dup| crate::notify::async_fd(dup, tokio::io::Interest::READABLE));
        match registered {
            Ok(fd) => {
                let _ = fd.readable().await;
            }
            // Not reported as an exit while it runs: asked again every so often instead.
            Err(err) => {
                tracing::warn!(
                    pid = self.pid,
                    "pidfd not pollable by the runtime ({err}): polling it"
                );
                while !self.fd.readable() {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
    }

    /// The wait status of the exited process, waiting up to [`REAP_TIMEOUT`] for its
    /// parent to reap it when the zombie itself cannot be read.
    pub(super) async fn wait_status(&self) -> Result<(i32, Source), Unknown> {
        let deadline = tokio::time::Instant::now() + REAP_TIMEOUT;
        loop {
            let alive = match self.fd.exit_info() {
                Ok(ExitInfo::Exited(status)) => return Ok((status, Source::PidfdInfo)),
                Ok(ExitInfo::NotYet { alive }) => alive,
                // No PIDFD_GET_INFO: only the zombie can tell.
                Err(Errno::ENOTTY | Errno::EINVAL) => self.exists(),
                Err(Errno::ESRCH) => return Err(Unknown::NotKept),
                Err(e) => return Err(Unknown::Ioctl(e)),
            };
            if !alive {
                // Reaped, and the kernel kept nothing (or it was reaped between the two
                // reads: the next PIDFD_GET_INFO has it where the kernel keeps it).
                return match self.fd.exit_info() {
                    Ok(ExitInfo::Exited(status)) => Ok((status, Source::PidfdInfo)),
                    _ => Err(Unknown::NotKept),
                };
            }
            if let Some(status) = self.zombie_status() {
                return Ok((status, Source::Zombie));
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(Unknown::Unreadable);
            }
            tokio::time::sleep(REAP_POLL).await;
        }
    }

    /// The zombie's wait status from /proc, if the process is a zombie now.
    fn zombie_status(&self) -> Option<i32> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid)).ok()?;
        let status = zombie_wait_status(&stat)?;
        // Read first, checked after: a process that still exists kept its pid throughout,
        // so the text read was its own.
        self.exists().then_some(status)
    }
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;

    /// Wait statuses as the kernel encodes them: (code << 8) for an exit, the signal
    /// number (with 0x80 for a core dump) for a kill, 0x7f in the low byte for a stop.
    #[rstest]
    #[case::exit_0(0x0000, Some(0))]
    #[case::exit_3(0x0300, Some(3))]
    #[case::exit_255(0xff00, Some(255))]
    #[case::sigkill(9, Some(137))]
    #[case::sigterm(15, Some(143))]
    #[case::sigsegv_core_dumped(0x80 | 11, Some(139))]
    #[case::stopped_by_sigstop((19 << 8) | 0x7f, None)]
    #[case::continued(0xffff, None)]
    fn wait_statuses_decode_as_the_kubelet_reports_exits(
        #[case] status: i32,
        #[case] code: Option<i32>,
    ) {
        assert_eq!(exit_code(status), code);
    }

    fn stat_line(comm: &str, state: &str, exit_code: i32) -> String {
        // pid (comm) state, then fields 4..=51 as zeros, then field 52.
        let middle = vec!["0"; 48].join(" ");
        format!("4242 ({comm}) {state} {middle} {exit_code}\n")
    }

    #[rstest]
    #[case::zombie_exit_3(stat_line("sh", "Z", 0x300), Some(0x300))]
    #[case::zombie_with_parens_in_its_name(stat_line("a) Z (b", "Z", 0), Some(0))]
    #[case::running(stat_line("sh", "S", 0), None)]
    #[case::kernel_before_3_5(
        format!("4242 (sh) Z {}\n", vec!["0"; 40].join(" ")),
        None
    )]
    #[case::garbage("nothing here".to_string(), None)]
    fn zombie_stat_lines_give_their_wait_status(#[case] stat: String, #[case] want: Option<i32>) {
        assert_eq!(zombie_wait_status(&stat), want);
    }

    fn kernel_at_least(major: u32, minor: u32) -> bool {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        let mut parts = release
            .split(|c: char| !c.is_ascii_digit())
            .filter_map(|p| p.parse::<u32>().ok());
        let (ma, mi) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
        (ma, mi) >= (major, minor)
    }

    /// A child of ours that exits with `code` once its stdin closes.
    fn child_exiting_with(code: i32) -> (std::process::Child, Adopted) {
        let mut child = std::process::Command::new("/bin/sh")
            .args(["-c", &format!("read _; exit {code}")])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .expect("spawn /bin/sh");
        let adopted = Adopted::open(child.id())
            .expect("pidfd_open")
            .expect("the child runs");
        drop(child.stdin.take());
        (child, adopted)
    }

    /// The pidfd is opened while the child runs (the kernel keeps exit information only
    /// for pidfds that existed at the exit); the child exits 3 and we reap it, then the
    /// status is read through the pidfd alone.
    #[test]
    fn pidfd_info_exit_gives_the_status_of_a_reaped_process() {
        if !kernel_at_least(6, 15) {
            println!(
                "SKIP: pidfd_info_exit_gives_the_status_of_a_reaped_process: PIDFD_INFO_EXIT needs Linux 6.15"
            );
            return;
        }
        let (mut child, adopted) = child_exiting_with(3);
        let status = child.wait().expect("reap the child");
        assert_eq!(status.code(), Some(3));
        let info = adopted.fd.exit_info().expect("PIDFD_GET_INFO");
        let ExitInfo::Exited(wait_status) = info else {
            panic!("no exit information after the reap: {info:?}");
        };
        assert_eq!(exit_code(wait_status), Some(3));
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        assert_eq!(
            rt.block_on(adopted.wait_status()),
            Ok((0x300, Source::PidfdInfo))
        );
    }

    /// Before its parent reaps it, the zombie's own stat tells; the pidfd proves the pid
    /// was still the zombie's when it was read.
    #[test]
    fn an_unreaped_zombie_gives_its_status_through_proc() {
        let (mut child, adopted) = child_exiting_with(7);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            tokio::time::timeout(Duration::from_secs(10), adopted.exited())
                .await
                .expect("the pidfd turns readable at the exit");
        });
        let got = rt.block_on(adopted.wait_status());
        let _ = child.wait();
        assert_eq!(got, Ok((0x700, Source::Zombie)));
    }

    /// A signal kills it: 128 + the signal, as the kubelet reports.
    #[test]
    fn a_killed_process_reports_128_plus_the_signal() {
        let mut child = std::process::Command::new("/bin/sleep")
            .arg("30")
            .spawn()
            .expect("spawn sleep");
        let adopted = Adopted::open(child.id())
            .expect("pidfd_open")
            .expect("the child runs");
        child.kill().expect("SIGKILL the child");
        let _ = child.wait();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        match rt.block_on(adopted.wait_status()) {
            Ok((status, _)) => assert_eq!(exit_code(status), Some(137)),
            // Honest on a kernel that keeps nothing after the reap.
            Err(Unknown::NotKept) if !kernel_at_least(6, 15) => {
                println!("SKIP: a_killed_process_reports_128_plus_the_signal: kernel before 6.15");
            }
            Err(e) => panic!("exit status unknown: {e}"),
        }
    }
}
