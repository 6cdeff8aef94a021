//! Starting a container: a process with the container's command, args, env and working
//! directory, stdout and stderr appended to its log file, already inside its cgroups and
//! with its oom_score_adj when it execs. There are no images: `command` (or, failing that,
//! `args`) names an executable on this host.
use std::ffi::CString;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use crate::policy::pod::Container;

/// PATH for containers that set none (the one container runtimes default to).
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
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
pub struct Launch<'a> {
    pub container: &'a Container,
    /// `cgroup.procs` files to write "0" into before exec (every hierarchy).
    pub join_files: Vec<PathBuf>,
    pub oom_score_adj: i32,
    pub log_path: PathBuf,
}

/// Spawns the process. It runs in its own session, so it outlives the agent (an agent
/// restart adopts it) and a signal to the agent's process group does not reach it.
pub fn spawn(launch: &Launch<'_>) -> Result<tokio::process::Child, LaunchError> {
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
    // async-signal-safe functions (setsid, open, write, close) on buffers prepared above.
    unsafe {
        command.pre_exec(move || {
            libc::setsid();
            for file in &join {
                write_file(file, b"0")?;
            }
            write_file(&oom_path, &oom)?;
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
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        return;
    }
    // SAFETY: fd is a fresh descriptor that nothing else owns.
    let owned = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    if let Ok(fd) = crate::notify::async_fd(owned, tokio::io::Interest::READABLE) {
        let _ = fd.readable().await;
    }
}
