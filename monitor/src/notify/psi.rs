//! PSI triggers (Documentation/accounting/psi.rst, "Monitoring for pressure thresholds"):
//! write "some <stall µs> <window µs>" to a pressure file opened read-write, then poll it
//! for POLLPRI. The kernel fires at most once per window when tasks stalled on memory for
//! at least `stall` within it. Since 5.2; per-cgroup files exist on cgroup v2 only.
//!
//! PSI fires once tasks actually stall in reclaim: later than a threshold, so it is a second
//! opinion (and the only kernel signal for node-level pressure without eBPF on v2).
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tokio::task::JoinHandle;

use super::{WakeDetail, WakeSender, WakeSource};

/// Trigger parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PsiTrigger {
    pub(crate) stall: Duration,
    pub(crate) window: Duration,
}

impl Default for PsiTrigger {
    /// 200 ms of "some" stall within 2 s: pressure a user would feel, well above noise.
    /// A 2 s window also works without CAP_SYS_RESOURCE (see [`PsiTrigger::unprivileged`]).
    fn default() -> Self {
        PsiTrigger {
            stall: Duration::from_millis(200),
            window: Duration::from_secs(2),
        }
    }
}

/// A trigger the kernel would refuse (psi_trigger_create's limits).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PsiTriggerError {
    #[error("window {window:?} must be between 500ms and 10s")]
    Window { window: Duration },
    #[error("stall {stall:?} must be above zero and at most the window {window:?}")]
    Stall { stall: Duration, window: Duration },
}

impl PsiTrigger {
    /// The kernel's limits: window in [500 ms, 10 s], stall in (0, window].
    pub(crate) fn validate(&self) -> Result<(), PsiTriggerError> {
        let (stall, window) = (self.stall, self.window);
        if !(Duration::from_millis(500)..=Duration::from_secs(10)).contains(&window) {
            return Err(PsiTriggerError::Window { window });
        }
        if stall.is_zero() || stall > window {
            return Err(PsiTriggerError::Stall { stall, window });
        }
        Ok(())
    }

    /// Without CAP_SYS_RESOURCE the kernel accepts only windows that are multiples of 2 s
    /// (psi_trigger_create). This rounds the window up and scales the stall with it.
    pub(crate) fn unprivileged(self) -> Self {
        let two = Duration::from_secs(2).as_micros();
        let window_us = self.window.as_micros().div_ceil(two) * two;
        let stall_us = self.stall.as_micros() * window_us / self.window.as_micros().max(1);
        PsiTrigger {
            stall: Duration::from_micros(stall_us.min(window_us) as u64),
            window: Duration::from_micros(window_us as u64),
        }
    }

    /// The trigger as written to the file. The kernel overwrites the last byte of the
    /// write with a NUL (kernel/sched/psi.c psi_write), so the NUL must be ours.
    fn line(&self) -> String {
        format!(
            "some {} {}\0",
            self.stall.as_micros(),
            self.window.as_micros()
        )
    }
}

/// Arms a trigger on one pressure file. When the kernel refuses the window for lack of
/// CAP_SYS_RESOURCE, arms the nearest window it accepts and returns the trigger used.
pub(crate) fn arm(
    file: &Path,
    trigger: PsiTrigger,
) -> std::io::Result<(AsyncFd<std::fs::File>, PsiTrigger)> {
    let open = || {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(file)
    };
    let mut f = open()?;
    let used = match f.write_all(trigger.line().as_bytes()) {
        Ok(()) => trigger,
        Err(err)
            if err.raw_os_error() == Some(libc::EINVAL) && trigger.unprivileged() != trigger =>
        {
            f = open()?;
            f.write_all(trigger.unprivileged().line().as_bytes())?;
            trigger.unprivileged()
        }
        Err(err) => return Err(err),
    };
    Ok((super::async_fd(f, Interest::PRIORITY)?, used))
}

/// Per file: the trigger armed, or why the kernel refused it (the file is the key).
pub(crate) type ArmReport = Vec<(PathBuf, std::io::Result<PsiTrigger>)>;

/// Arms every file and wakes on each trigger. Returns the task (none when nothing armed)
/// and the report.
pub(crate) fn spawn(
    files: &[PathBuf],
    trigger: PsiTrigger,
    wakes: WakeSender,
) -> (Option<JoinHandle<()>>, ArmReport) {
    let mut armed = Vec::new();
    let mut report = Vec::new();
    for file in files {
        match arm(file, trigger) {
            Ok((fd, used)) => {
                armed.push((file.clone(), fd));
                report.push((file.clone(), Ok(used)));
            }
            Err(err) => report.push((file.clone(), Err(err))),
        }
    }
    if armed.is_empty() {
        return (None, report);
    }
    let task = tokio::spawn(async move {
        let mut set = tokio::task::JoinSet::new();
        for (file, fd) in armed {
            let wakes = wakes.clone();
            set.spawn(async move {
                loop {
                    match fd.ready(Interest::PRIORITY).await {
                        Ok(mut guard) => {
                            wakes.wake(WakeSource::Psi, WakeDetail::Psi { file: file.clone() });
                            guard.clear_ready();
                        }
                        Err(err) => {
                            tracing::error!("PSI trigger on {} failed: {err}", file.display());
                            return;
                        }
                    }
                }
            });
        }
        while set.join_next().await.is_some() {}
    });
    (Some(task), report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trigger_limits() {
        assert!(PsiTrigger::default().validate().is_ok());
        let t = |s, w| PsiTrigger {
            stall: Duration::from_millis(s),
            window: Duration::from_millis(w),
        };
        assert_eq!(
            t(100, 400).validate(),
            Err(PsiTriggerError::Window {
                window: Duration::from_millis(400)
            })
        );
        assert!(t(0, 1000).validate().is_err());
        assert_eq!(
            t(2000, 1000).validate().map_err(|e| e.to_string()),
            Err("stall 2s must be above zero and at most the window 1s".to_string())
        );
        assert!(t(100, 11_000).validate().is_err());
    }

    #[test]
    fn unprivileged_rounds_the_window_to_two_seconds() {
        let t = |s, w| PsiTrigger {
            stall: Duration::from_millis(s),
            window: Duration::from_millis(w),
        };
        assert_eq!(t(100, 1000).unprivileged(), t(200, 2000));
        assert_eq!(t(500, 2000).unprivileged(), t(500, 2000));
        assert_eq!(t(3000, 3000).unprivileged(), t(4000, 4000));
        assert!(t(100, 1000).line().ends_with("1000000\0"));
    }
}
