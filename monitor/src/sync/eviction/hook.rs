//! The pre-kill hook (`monitor.preKillHook`): a program the operator names, executed
//! (no shell) before each eviction the synchronize decides, with the decision as one
//! JSON document on its stdin: for a heap dump, a drain, a notice. It never runs on the
//! hot path, whose kill is written before any program could start.
//!
//! Bounded: the hook runs in a process group of its own, and once its timeout (or what
//! is left of the eviction's grace period, whichever is shorter) has passed the group is
//! killed and the eviction goes on. A hook that fails, hangs or cannot be started never
//! stops an eviction; each run is logged with its exit and output, and counted in
//! `monitor_pre_kill_hooks_total{result}`.
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::config::agent::PreKillHookSettings;

/// Output kept from each of the hook's stdout and stderr for the log.
const OUTPUT_KEPT: usize = 1024;

/// What the hook reads on stdin.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct HookDocument {
    pub(crate) pod: String,
    pub(crate) namespace: String,
    pub(crate) name: String,
    pub(crate) uid: String,
    pub(crate) qos: String,
    pub(crate) priority: i32,
    /// The eviction signal, or the local storage limit exceeded.
    pub(crate) signal: String,
    /// The threshold met (`memory.available<500Mi`), if a threshold drove it.
    pub(crate) threshold: Option<String>,
    /// The signal's available amount as observed.
    pub(crate) observed: Option<i64>,
    /// The pod's place in the ranking (1: evicted first).
    pub(crate) rank: Option<usize>,
    pub(crate) grace_period_seconds: i64,
    /// When the pod is killed at the latest (RFC 3339): the hook's deadline is earlier.
    pub(crate) deadline: String,
    /// The kubelet's eviction message.
    pub(crate) message: String,
}

/// How one run ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum HookResult {
    /// Exit 0.
    Ok,
    /// Another exit, or killed by a signal.
    Failed(String),
    /// Still running at its deadline: killed.
    TimedOut,
    /// Could not be started or fed.
    Error(String),
}

impl HookResult {
    /// The `result` label.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            HookResult::Ok => "ok",
            HookResult::Failed(_) => "failed",
            HookResult::TimedOut => "timed_out",
            HookResult::Error(_) => "error",
        }
    }
}

/// One run's account, for the log.
#[derive(Clone, Debug)]
pub(crate) struct HookRun {
    pub(crate) result: HookResult,
    pub(crate) took: Duration,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

/// Runs the hook with `document` on stdin for at most `limit`.
pub(crate) async fn run(
    hook: &PreKillHookSettings,
    document: &HookDocument,
    limit: Duration,
) -> HookRun {
    let started = Instant::now();
    let done = |result, stdout, stderr| HookRun {
        result,
        took: started.elapsed(),
        stdout,
        stderr,
    };
    let Some((program, args)) = hook.command.split_first() else {
        return done(
            HookResult::Error("no command".into()),
            String::new(),
            String::new(),
        );
    };
    let mut child = match tokio::process::Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env_clear()
        .env(
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        )
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
    {
        Ok(child) => child,
        Err(err) => {
            return done(
                HookResult::Error(format!("starting {program}: {err}")),
                String::new(),
                String::new(),
            );
        }
    };
    let group = child.id().map(|pid| nix::unistd::Pid::from_raw(pid as i32));
    let mut stdin = child.stdin.take();
    let mut stdout = child.stdout.take();
    let mut stderr = child.stderr.take();
    let body = serde_json::to_vec(document).unwrap_or_default();
    let work = async {
        // A hook that does not read its stdin is not an error: its pipe closes.
        if let Some(mut pipe) = stdin.take() {
            let _ = pipe.write_all(&body).await;
            let _ = pipe.shutdown().await;
        }
        let (out, err, status) = tokio::join!(
            read_kept(stdout.as_mut()),
            read_kept(stderr.as_mut()),
            child.wait()
        );
        (out, err, status)
    };
    match tokio::time::timeout(limit, work).await {
        Ok((out, err, Ok(status))) => {
            let result = if status.success() {
                HookResult::Ok
            } else {
                HookResult::Failed(status.to_string())
            };
            done(result, out, err)
        }
        Ok((out, err, Err(e))) => done(HookResult::Error(e.to_string()), out, err),
        Err(_) => {
            // The whole group: a hook's own children go with it.
            if let Some(group) = group {
                let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
            }
            done(HookResult::TimedOut, String::new(), String::new())
        }
    }
}

/// Reads a pipe to its end, keeping the first [`OUTPUT_KEPT`] bytes.
async fn read_kept<R: tokio::io::AsyncRead + Unpin>(pipe: Option<&mut R>) -> String {
    let Some(pipe) = pipe else {
        return String::new();
    };
    let mut kept = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = OUTPUT_KEPT.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
            }
        }
    }
    String::from_utf8_lossy(&kept).trim_end().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn document() -> HookDocument {
        HookDocument {
            pod: "shop/web".into(),
            namespace: "shop".into(),
            name: "web".into(),
            uid: "u-1".into(),
            qos: "Burstable".into(),
            priority: 0,
            signal: "memory.available".into(),
            threshold: Some("memory.available<500Mi".into()),
            observed: Some(400 << 20),
            rank: Some(1),
            grace_period_seconds: 30,
            deadline: "2026-11-27T10:00:30Z".into(),
            message: "The node was low on resource: memory.".into(),
        }
    }

    fn hook(command: &[&str], timeout_ms: u64) -> PreKillHookSettings {
        PreKillHookSettings {
            command: command.iter().map(|s| s.to_string()).collect(),
            timeout: Duration::from_millis(timeout_ms),
        }
    }

    #[tokio::test]
    async fn the_hook_reads_the_decision_on_stdin() {
        let run = run(
            &hook(&["/bin/cat"], 5000),
            &document(),
            Duration::from_secs(5),
        )
        .await;
        assert_eq!(run.result, HookResult::Ok, "{run:?}");
        let read: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
        assert_eq!(read["pod"], "shop/web");
        assert_eq!(read["rank"], 1);
        assert_eq!(read["threshold"], "memory.available<500Mi");
        assert_eq!(read["gracePeriodSeconds"], 30);
    }

    #[tokio::test]
    async fn a_hung_hook_and_its_children_are_killed_at_the_limit() {
        let marker = tempfile::tempdir().unwrap();
        let late = marker.path().join("late");
        // The child of the hook outlives the hook's own shell unless its group is killed.
        let script = format!("sleep 3 && touch {} & wait", late.display());
        let run = run(
            &hook(&["/bin/sh", "-c", &script], 300),
            &document(),
            Duration::from_millis(300),
        )
        .await;
        assert_eq!(run.result, HookResult::TimedOut);
        assert!(run.took < Duration::from_secs(2), "{:?}", run.took);
        tokio::time::sleep(Duration::from_secs(4)).await;
        assert!(!late.exists(), "the hook's child was killed with it");
    }

    #[tokio::test]
    async fn a_failing_or_missing_hook_is_reported() {
        let run = run(
            &hook(&["/bin/sh", "-c", "echo no >&2; exit 3"], 5000),
            &document(),
            Duration::from_secs(5),
        )
        .await;
        assert!(
            matches!(&run.result, HookResult::Failed(s) if s.contains('3')),
            "{run:?}"
        );
        assert_eq!(run.stderr, "no");
        let run = run_missing().await;
        assert!(
            matches!(&run.result, HookResult::Error(s) if s.contains("/nonexistent/hook")),
            "{run:?}"
        );
    }

    async fn run_missing() -> HookRun {
        run(
            &hook(&["/nonexistent/hook"], 5000),
            &document(),
            Duration::from_secs(5),
        )
        .await
    }
}
