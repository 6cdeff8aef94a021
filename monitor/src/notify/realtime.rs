//! The threads that hear the kernel first. A crossing of a hard memory threshold must reach
//! the hot path ([`crate::sync::hot`]) while every CPU may be busy with the pods that
//! allocate, and while the synchronize loop is in the middle of a long pass; a tokio
//! worker at normal priority can be kept from it for a whole pass. So each notifier whose
//! records can fire the hot path (the eBPF ring buffer, memcg v1 eventfds, cgroup v2
//! memory.events) is read by a [`Waiter`]: a thread of its own, at real-time priority
//! where the kernel permits it (memory is locked process-wide at startup), asleep in
//! `epoll_wait` with no timeout until one of its descriptors is ready.
//!
//! Where real-time priority is refused (no CAP_SYS_NICE, or an RT group scheduler without
//! a budget for the agent's cgroup), the thread runs at normal priority and says so in
//! the source's status: it still never waits behind the synchronize loop, only behind
//! the scheduler's fairness.
use std::os::fd::BorrowedFd;
use std::sync::Arc;

use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use nix::sys::eventfd::{EfdFlags, EventFd};
use tokio::sync::oneshot;

/// Real-time priority of the waiters (SCHED_FIFO; low: they only have to run before the
/// pods that allocate, which run SCHED_OTHER).
pub(crate) const PRIORITY: i32 = 10;
/// The eBPF ring buffer's reader, one above the others: its records are the most exact
/// (the detector's), and an OOM victim's record must be read while the victim's /proc
/// entry still names its cgroup, even while memory.events fires at a pod's limit.
pub(crate) const RING_PRIORITY: i32 = 11;

/// The key of the waiter's own stop descriptor; callers' keys must differ.
const STOP_KEY: u64 = u64::MAX;

/// How a watched descriptor reports readiness.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Trigger {
    /// Reported while readable: the callback must drain it (a ring buffer, inotify).
    Level,
    /// Reported once per kernel wake-up, with nothing to read (a memcg eventfd: its count
    /// is of no use, and not reading it spares a race with its closing).
    Edge,
}

/// A thread asleep on a set of descriptors, calling one function with the key of each
/// that is ready. Dropping it stops and joins the thread.
pub(crate) struct Waiter {
    epoll: Arc<Epoll>,
    stop: EventFd,
    thread: Option<std::thread::JoinHandle<()>>,
    ended: Option<oneshot::Receiver<()>>,
    /// What scheduling the thread got, for the source's status.
    pub(crate) scheduling: String,
}

impl Waiter {
    /// Starts the thread `name`, at SCHED_FIFO `priority` where the kernel permits it
    /// (`None`: SCHED_OTHER). `ready(key)` runs on it for every ready descriptor;
    /// returning false ends the thread (a descriptor failed for good).
    pub(crate) fn start(
        name: &str,
        priority: Option<i32>,
        mut ready: impl FnMut(u64) -> bool + Send + 'static,
    ) -> std::io::Result<Waiter> {
        let epoll = Arc::new(Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)?);
        let stop = EventFd::from_value_and_flags(0, EfdFlags::EFD_CLOEXEC)?;
        epoll.add(&stop, EpollEvent::new(EpollFlags::EPOLLIN, STOP_KEY))?;
        let (scheduled_tx, scheduled_rx) = std::sync::mpsc::channel();
        let (ended_tx, ended_rx) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new().name(name.into()).spawn({
            let epoll = epoll.clone();
            move || {
                let _ = scheduled_tx.send(match priority {
                    Some(priority) => realtime_priority(priority),
                    None => "SCHED_OTHER (no real-time priority asked)".to_string(),
                });
                let _ended = ended_tx;
                let mut events = [EpollEvent::empty(); 16];
                loop {
                    let count = match epoll.wait(&mut events, EpollTimeout::NONE) {
                        Ok(count) => count,
                        Err(nix::errno::Errno::EINTR) => continue,
                        Err(err) => {
                            tracing::error!("epoll_wait on the kernel notifiers failed: {err}");
                            return;
                        }
                    };
                    for event in &events[..count] {
                        if event.data() == STOP_KEY || !ready(event.data()) {
                            return;
                        }
                    }
                }
            }
        })?;
        let scheduling = scheduled_rx
            .recv_timeout(std::time::Duration::from_secs(1))
            .unwrap_or_else(|_| "scheduling unknown".into());
        Ok(Waiter {
            epoll,
            stop,
            thread: Some(thread),
            ended: Some(ended_rx),
            scheduling,
        })
    }

    /// Adds a descriptor; `key` (not `u64::MAX`) comes back to `ready` when it is ready.
    pub(crate) fn watch(
        &self,
        fd: BorrowedFd<'_>,
        key: u64,
        trigger: Trigger,
    ) -> std::io::Result<()> {
        debug_assert_ne!(key, STOP_KEY);
        let flags = match trigger {
            Trigger::Level => EpollFlags::EPOLLIN,
            Trigger::Edge => EpollFlags::EPOLLIN | EpollFlags::EPOLLET,
        };
        self.epoll.add(fd, EpollEvent::new(flags, key))?;
        Ok(())
    }

    /// Removes a descriptor, before it is closed.
    pub(crate) fn unwatch(&self, fd: BorrowedFd<'_>) -> std::io::Result<()> {
        self.epoll.delete(fd)?;
        Ok(())
    }

    /// Resolves when the thread has ended on its own (a descriptor failed).
    pub(crate) async fn ended(&mut self) {
        match &mut self.ended {
            Some(rx) => {
                let _ = rx.await;
                self.ended = None;
            }
            None => std::future::pending().await,
        }
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        // Without the stop signal the thread would sleep on forever: then do not wait.
        if self.stop.write(1).is_err() {
            return;
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Puts the calling thread on SCHED_FIFO at `priority`, or, where the process's
/// RLIMIT_RTPRIO (without CAP_SYS_NICE) allows less, at the highest priority it allows;
/// says what it got.
pub(crate) fn realtime_priority(priority: i32) -> String {
    match set_fifo(priority) {
        Ok(()) => format!("SCHED_FIFO priority {priority}"),
        Err(err) => {
            let allowed =
                nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_RTPRIO)
                    .map(|(soft, _)| i32::try_from(soft).unwrap_or(i32::MAX))
                    .unwrap_or(0);
            if (1..priority).contains(&allowed) && set_fifo(allowed).is_ok() {
                format!(
                    "SCHED_FIFO priority {allowed} (asked {priority}; RLIMIT_RTPRIO allows {allowed})"
                )
            } else {
                format!("SCHED_OTHER: real-time priority refused ({err})")
            }
        }
    }
}

fn set_fifo(priority: i32) -> std::io::Result<()> {
    // SAFETY: sched_param is plain integers (more of them on musl); all-zero is valid.
    let mut param: libc::sched_param = unsafe { std::mem::zeroed() };
    param.sched_priority = priority;
    // The raw system call: it sets the calling thread's policy (0), which is what we
    // want; musl's wrapper refuses with ENOSYS because POSIX means the whole process.
    // SAFETY: the call reads a valid parameter block we own.
    let done = unsafe {
        libc::syscall(
            libc::SYS_sched_setscheduler,
            0,
            libc::SCHED_FIFO,
            &param as *const libc::sched_param,
        )
    };
    if done == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::Duration;

    use std::os::fd::AsFd;

    use super::*;

    #[test]
    fn each_ready_descriptor_is_told_by_key_and_the_thread_stops_on_drop() {
        let (tx, rx) = mpsc::channel();
        let waiter = Waiter::start("monitor-test-waiter", Some(PRIORITY), move |key| {
            let _ = tx.send(key);
            true
        })
        .expect("waiter");
        let edge = EventFd::from_value_and_flags(0, EfdFlags::EFD_NONBLOCK).expect("eventfd");
        waiter.watch(edge.as_fd(), 7, Trigger::Edge).expect("watch");
        // Edge-triggered: each signal is told once, though nothing is read.
        edge.write(1).expect("signal");
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)), Ok(7));
        assert!(rx.recv_timeout(Duration::from_millis(50)).is_err());
        edge.write(1).expect("signal");
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)), Ok(7));
        // Removed: no longer told.
        waiter.unwatch(edge.as_fd()).expect("unwatch");
        edge.write(1).expect("signal");
        assert!(rx.recv_timeout(Duration::from_millis(50)).is_err());
        let thread = waiter.thread.as_ref().map(|t| t.thread().id());
        assert!(thread.is_some());
        drop(waiter);
        // The callback (and its sender) went with the thread.
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(5)),
            Err(mpsc::RecvTimeoutError::Disconnected)
        );
    }

    /// The policy the waiter's thread runs under, read on the thread itself.
    fn policy_of_a_waiter(priority: Option<i32>) -> (libc::c_int, String) {
        let (tx, rx) = mpsc::channel();
        let waiter = Waiter::start("monitor-test-waiter", priority, move |_| {
            // SAFETY: sched_getscheduler(0) reads the calling thread's policy.
            let _ = tx.send(unsafe { libc::sched_getscheduler(0) });
            false
        })
        .expect("waiter");
        let fd = EventFd::from_value_and_flags(1, EfdFlags::EFD_NONBLOCK).expect("eventfd");
        waiter.watch(fd.as_fd(), 1, Trigger::Level).expect("watch");
        let policy = rx.recv_timeout(Duration::from_secs(5)).expect("told");
        (policy, waiter.scheduling.clone())
    }

    #[test]
    fn a_waiter_runs_at_the_priority_asked_or_says_it_does_not() {
        let (policy, said) = policy_of_a_waiter(None);
        assert_eq!(policy, libc::SCHED_OTHER, "{said}");
        assert!(said.starts_with("SCHED_OTHER"), "{said}");
        // Real time where permitted (root, or an RLIMIT_RTPRIO), and said either way.
        let (policy, said) = policy_of_a_waiter(Some(PRIORITY));
        assert_eq!(
            policy == libc::SCHED_FIFO,
            said.starts_with("SCHED_FIFO"),
            "{said}"
        );
    }

    #[tokio::test]
    async fn a_callback_that_gives_up_ends_the_thread() {
        let mut waiter =
            Waiter::start("monitor-test-waiter", Some(PRIORITY), |_| false).expect("waiter");
        let fd = EventFd::from_value_and_flags(1, EfdFlags::EFD_NONBLOCK).expect("eventfd");
        waiter.watch(fd.as_fd(), 1, Trigger::Level).expect("watch");
        tokio::time::timeout(Duration::from_secs(5), waiter.ended())
            .await
            .expect("the thread ended");
    }

    #[test]
    fn the_packaged_unit_allows_every_notifier_its_priority() {
        let unit = include_str!("../../../packaging/monitor.service");
        let limit: i32 = unit
            .lines()
            .find_map(|l| l.strip_prefix("LimitRTPRIO="))
            .expect("the unit sets LimitRTPRIO")
            .trim()
            .parse()
            .expect("a number");
        assert!(
            limit >= PRIORITY.max(RING_PRIORITY),
            "LimitRTPRIO={limit} refuses a notifier thread its priority ({PRIORITY}, {RING_PRIORITY})"
        );
    }
}
