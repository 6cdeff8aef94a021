//! Starting a container: a process with the container's command, args, env and working
//! directory, stdout and stderr appended to its log file, already inside its cgroups and
//! with its oom_score_adj when it execs. There are no images: `command` (or, failing that,
//! `args`) names an executable on this host.
use std::ffi::CString;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use super::inherited::OriginalLimits;
use super::sys::PidFd;
use crate::policy::pod::Container;

/// PATH for containers that set none (the one container runtimes default to).
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

#[derive(Debug, thiserror::Error)]
pub(crate) enum LaunchError {
    #[error("container {0}: no command and no args: nothing to run (this runtime has no images)")]
    NoCommand(String),
    #[error("container {container}: log file {path}: {source}")]
    Log {
        container: String,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("container {container}: starting {program:?}: {source}")]
    Spawn {
        container: String,
        program: String,
        source: std::io::Error,
    },
}

/// Everything needed to start one container process.
pub(crate) struct Launch<'a> {
    pub(crate) container: &'a Container,
    /// `cgroup.procs` files to write "0" into before exec (every hierarchy).
    pub(crate) join_files: Vec<PathBuf>,
    pub(crate) oom_score_adj: i32,
    pub(crate) log_path: PathBuf,
}

/// Spawns the process. It runs in its own session, so it outlives the agent (an agent
/// restart adopts it) and a signal to the agent's process group does not reach it. It
/// starts with the limits the agent was started with, on the ordinary scheduler and
/// without memory locks (see [`inherited`](super::inherited)), not with the agent's own.
pub(crate) fn spawn(launch: &Launch<'_>) -> Result<tokio::process::Child, LaunchError> {
    spawn_with(launch, OriginalLimits::original())
}

/// [`spawn`] with the given limits.
fn spawn_with(
    launch: &Launch<'_>,
    limits: OriginalLimits,
) -> Result<tokio::process::Child, LaunchError> {
    let container = launch.container;
    let name = container.name.clone();
    let mut argv: Vec<&String> = container
        .command
        .iter()
        .chain(container.args.iter())
        .collect();
    if argv.is_empty() {
        return Err(LaunchError::NoCommand(name));
    }
    let program = argv.remove(0).clone();
    if let Some(dir) = launch.log_path.parent() {
        std::fs::create_dir_all(dir).map_err(|source| LaunchError::Log {
            container: name.clone(),
            path: dir.to_path_buf(),
            source,
        })?;
    }
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&launch.log_path)
        .map_err(|source| LaunchError::Log {
            container: name.clone(),
            path: launch.log_path.clone(),
            source,
        })?;
    let log_err = log.try_clone().map_err(|source| LaunchError::Log {
        container: name.clone(),
        path: launch.log_path.clone(),
        source,
    })?;

    let mut command = tokio::process::Command::new(&program);
    command
        .args(argv)
        .env_clear()
        .env("PATH", DEFAULT_PATH)
        .envs(
            container
                .env
                .iter()
                .filter_map(|e| e.value.as_ref().map(|v| (e.name.clone(), v.clone()))),
        )
        .current_dir(
            container
                .working_dir
                .as_deref()
                .map(Path::new)
                .unwrap_or(Path::new("/")),
        )
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err)
        .kill_on_drop(false);

    // Prepared before fork: the child may only make async-signal-safe calls.
    let join: Vec<CString> = launch
        .join_files
        .iter()
        .filter_map(|p| CString::new(p.as_os_str().as_bytes()).ok())
        .collect();
    let oom = launch.oom_score_adj.to_string().into_bytes();
    let oom_path = CString::new("/proc/self/oom_score_adj").expect("no NUL");
    // SAFETY: the closure runs in the child between fork and exec and only calls
    // async-signal-safe functions (setsid, open, write, close, getrlimit, setrlimit,
    // sched_setscheduler, munlockall) on buffers prepared above.
    unsafe {
        command.pre_exec(move || {
            libc::setsid();
            for file in &join {
                write_file(file, b"0")?;
            }
            write_file(&oom_path, &oom)?;
            limits.restore_in_child()?;
            Ok(())
        });
    }
    command.spawn().map_err(|source| LaunchError::Spawn {
        container: name,
        program,
        source,
    })
}

/// open + write + close, async-signal-safe.
fn write_file(path: &CString, data: &[u8]) -> std::io::Result<()> {
    // SAFETY: plain syscalls on a valid NUL-terminated path and a live buffer.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let written = libc::write(fd, data.as_ptr().cast(), data.len());
        let err = std::io::Error::last_os_error();
        libc::close(fd);
        if written != data.len() as isize {
            return Err(err);
        }
    }
    Ok(())
}

/// Resolves when process `pid` has exited (at once when it is already gone, or where the
/// kernel has no pidfd: before 5.3).
pub(super) async fn wait_for_exit(pid: u32) {
    let Ok(Some(pidfd)) = PidFd::open(pid as libc::pid_t) else {
        return;
    };
    if let Ok(fd) = crate::notify::async_fd(OwnedFd::from(pidfd), tokio::io::Interest::READABLE) {
        let _ = fd.readable().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::inherited::Limit;

    /// A field of `/proc/<pid>/stat` by its number in proc(5).
    fn stat_field(process: &str, field: usize) -> String {
        let stat = std::fs::read_to_string(format!("/proc/{process}/stat")).unwrap();
        let stat = crate::observe::parse::ProcStat::parse(&stat).unwrap();
        stat.field(field).unwrap().to_string()
    }

    /// The soft and hard values of one line of `/proc/<pid>/limits`.
    fn limit_line(limits: &str, name: &str) -> (String, String) {
        let line = limits
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no {name} in {limits}"));
        let mut values = line[name.len()..].split_whitespace();
        let (soft, hard) = (values.next().unwrap(), values.next().unwrap());
        (soft.to_string(), hard.to_string())
    }

    fn shown(value: u64) -> String {
        if value == libc::RLIM_INFINITY {
            "unlimited".to_string()
        } else {
            value.to_string()
        }
    }

    /// A container launched from a SCHED_FIFO thread of a process whose open-file limit
    /// was raised starts with the limits given (the agent's originals) on SCHED_OTHER.
    #[test]
    fn a_container_starts_with_the_original_limits_on_the_ordinary_scheduler() {
        let now = OriginalLimits::current();
        // The agent was started with a lower soft limit than it runs with.
        let original = OriginalLimits {
            nofile: Limit {
                soft: now.nofile.soft.min(256),
                hard: now.nofile.hard,
            },
            ..now
        };
        let dir = tempfile::tempdir().unwrap();
        let container: Container = serde_json::from_str(
            r#"{"name": "main", "image": "none", "command": ["/bin/sleep", "30"]}"#,
        )
        .unwrap();
        let oom_score_adj = std::fs::read_to_string("/proc/self/oom_score_adj")
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let launch = Launch {
            container: &container,
            join_files: Vec::new(),
            oom_score_adj,
            log_path: dir.path().join("main/0.log"),
        };
        // Launched from a thread of its own, which takes SCHED_FIFO when allowed (root).
        let (fifo, limits, policy, priority) = std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    crate::notify::realtime::realtime_priority(1);
                    // SCHED_FIFO is 1.
                    let fifo = stat_field("thread-self", 41) == "1";
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .unwrap();
                    runtime.block_on(async {
                        let mut child = spawn_with(&launch, original).unwrap();
                        let pid = child.id().unwrap();
                        let limits = std::fs::read_to_string(format!("/proc/{pid}/limits"));
                        let pid = pid.to_string();
                        let (policy, priority) = (stat_field(&pid, 41), stat_field(&pid, 40));
                        child.kill().await.unwrap();
                        (fifo, limits.unwrap(), policy, priority)
                    })
                })
                .join()
                .unwrap()
        });
        // As root the launching thread was real-time: what the child would have inherited.
        assert!(
            fifo || !nix::unistd::geteuid().is_root(),
            "root may take SCHED_FIFO"
        );
        assert_eq!(
            limit_line(&limits, "Max open files"),
            (shown(original.nofile.soft), shown(original.nofile.hard)),
            "{limits}"
        );
        assert_eq!(
            limit_line(&limits, "Max locked memory"),
            (shown(original.memlock.soft), shown(original.memlock.hard))
        );
        assert_eq!(
            limit_line(&limits, "Max realtime priority"),
            (shown(original.rtprio.soft), shown(original.rtprio.hard))
        );
        assert_eq!(
            (policy.as_str(), priority.as_str()),
            ("0", "0"),
            "SCHED_OTHER, rt_priority 0 (the launching thread was on SCHED_FIFO: {fifo})"
        );
    }
}
