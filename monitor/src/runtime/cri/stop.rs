//! Telling the container runtime that a pod stops, within a deadline. The pod's processes
//! are killed through its cgroups, never by waiting on the runtime (see the runtime's
//! `stop_pod`): what is asked here is the runtime's own part (the grace period's SIGTERM
//! through StopContainer, then StopPodSandbox and RemovePodSandbox), and every call is
//! dropped when the stop's deadline passes. A call the runtime did not answer by then is
//! named in [`StopAnswers::unanswered`], for the caller to report.
use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use super::{CriClient, CriError};

/// What the runtime answered to the calls made to stop one pod.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct StopAnswers {
    /// The runtime's errors, each naming its call.
    pub(crate) errors: Vec<String>,
    /// The calls the runtime had not answered when the deadline passed (dropped then),
    /// by their CRI names.
    pub(crate) unanswered: Vec<&'static str>,
}

impl StopAnswers {
    /// Every call was answered, none with an error.
    pub(crate) fn answered_all(&self) -> bool {
        self.errors.is_empty() && self.unanswered.is_empty()
    }

    pub(crate) fn merge(&mut self, other: StopAnswers) {
        self.errors.extend(other.errors);
        self.unanswered.extend(other.unanswered);
    }
}

/// One call to the runtime, dropped at `deadline` when it has not answered by then.
pub(crate) async fn bounded<T>(
    call: &'static str,
    deadline: Instant,
    answer: impl Future<Output = Result<T, CriError>>,
) -> StopAnswers {
    match tokio::time::timeout_at(deadline, answer).await {
        Ok(Ok(_)) => StopAnswers::default(),
        Ok(Err(err)) => StopAnswers {
            errors: vec![err.to_string()],
            unanswered: Vec::new(),
        },
        Err(_) => StopAnswers {
            errors: Vec::new(),
            unanswered: vec![call],
        },
    }
}

/// Stops the containers `ids` at once, each with `grace` (SIGTERM, SIGKILL at its end),
/// each call dropped at `deadline`.
pub(crate) async fn stop_containers(
    client: &CriClient,
    ids: &[String],
    grace: Duration,
    deadline: Instant,
) -> StopAnswers {
    let stops = ids
        .iter()
        .map(|id| bounded("StopContainer", deadline, client.stop_container(id, grace)));
    let mut answers = StopAnswers::default();
    for answer in futures_util::future::join_all(stops).await {
        answers.merge(answer);
    }
    answers
}

/// Stops the sandbox `id` (and whatever of its containers still runs), then removes it with
/// its containers when `remove` and the stop was answered; each call dropped at `deadline`.
pub(crate) async fn stop_sandbox(
    client: &CriClient,
    id: &str,
    remove: bool,
    deadline: Instant,
) -> StopAnswers {
    let mut answers = bounded("StopPodSandbox", deadline, client.stop_pod_sandbox(id)).await;
    if remove && answers.answered_all() {
        answers.merge(bounded("RemovePodSandbox", deadline, client.remove_pod_sandbox(id)).await);
    }
    answers
}

/// The message of a `RuntimeUnresponsive` event: which calls the runtime left unanswered,
/// and within how long.
pub(crate) fn silence_message(unanswered: &[&str], waited: Duration) -> String {
    let mut calls: Vec<&str> = unanswered.to_vec();
    calls.dedup();
    let counted = |call: &str| unanswered.iter().filter(|c| **c == call).count();
    let named: Vec<String> = calls
        .iter()
        .map(|call| match counted(call) {
            1 => (*call).to_string(),
            n => format!("{call} (×{n})"),
        })
        .collect();
    format!(
        "the container runtime did not answer {} within {:.1} s (the stop's deadline): the pod \
         was killed through its cgroup regardless; what the runtime still holds of it (sandbox, \
         containers) is removed by garbage collection once it answers again",
        named.join(", "),
        waited.as_secs_f64()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused() -> CriError {
        CriError::Call {
            call: "StopPodSandbox",
            socket: "/run/x.sock".into(),
            status: Box::new(tonic::Status::unavailable("shutting down")),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_without_an_answer_is_dropped_at_the_deadline_and_named() {
        let start = Instant::now();
        let deadline = start + Duration::from_secs(2);
        let answers = bounded(
            "StopPodSandbox",
            deadline,
            std::future::pending::<Result<(), CriError>>(),
        )
        .await;
        assert_eq!(
            Instant::now(),
            deadline,
            "dropped at the deadline, not later"
        );
        assert_eq!(answers.unanswered, vec!["StopPodSandbox"]);
        assert!(answers.errors.is_empty());
        assert!(!answers.answered_all());
    }

    #[tokio::test(start_paused = true)]
    async fn answers_and_errors_are_told_apart() {
        let deadline = Instant::now() + Duration::from_secs(2);
        let ok = bounded("StopContainer", deadline, async { Ok::<_, CriError>(()) }).await;
        assert!(ok.answered_all());
        let mut all = bounded("StopPodSandbox", deadline, async {
            Err::<(), _>(refused())
        })
        .await;
        assert_eq!(all.unanswered, Vec::<&str>::new());
        assert!(all.errors[0].contains("shutting down"), "{:?}", all.errors);
        all.merge(ok);
        all.merge(StopAnswers {
            errors: Vec::new(),
            unanswered: vec!["RemovePodSandbox"],
        });
        assert_eq!(all.errors.len(), 1);
        assert_eq!(all.unanswered, vec!["RemovePodSandbox"]);
        // A deadline already past drops even a call that would answer at once later.
        let late = bounded(
            "StopContainer",
            Instant::now(),
            std::future::pending::<Result<(), CriError>>(),
        )
        .await;
        assert_eq!(late.unanswered, vec!["StopContainer"]);
    }

    /// A runtime that takes connections and never answers, as a containerd stopped with
    /// SIGSTOP does (the kernel still accepts on its socket).
    #[tokio::test]
    async fn a_silent_runtime_holds_a_stop_no_longer_than_its_deadline() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("silent.sock");
        let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        let client = CriClient::new(&socket).unwrap();
        let started = std::time::Instant::now();
        let deadline = Instant::now() + Duration::from_millis(300);
        let ids = vec!["a".to_string(), "b".to_string()];
        let mut answers = stop_containers(&client, &ids, Duration::from_secs(30), deadline).await;
        answers.merge(stop_sandbox(&client, "sandbox", true, deadline).await);
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(290) && took < Duration::from_secs(2),
            "{took:?}"
        );
        // RemovePodSandbox is not sent after a StopPodSandbox without an answer.
        assert_eq!(
            answers.unanswered,
            vec!["StopContainer", "StopContainer", "StopPodSandbox"]
        );
        drop(listener);
    }

    #[test]
    fn the_silence_names_each_call_once_with_its_count() {
        let message = silence_message(
            &["StopContainer", "StopContainer", "StopPodSandbox"],
            Duration::from_millis(1980),
        );
        assert!(
            message.starts_with(
                "the container runtime did not answer StopContainer (×2), StopPodSandbox within 2.0 s"
            ),
            "{message}"
        );
        assert!(message.contains("killed through its cgroup"), "{message}");
    }
}
