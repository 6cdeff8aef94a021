//! The agent's long-running tasks under watch. A task that ends while the agent runs (it
//! returned or panicked) is never left silent:
//! - an event source is marked failed in the status and a Warning says why; the agent
//!   runs on the other sources;
//! - a critical task (the synchronize loop, the pods' supervisor) makes the agent exit
//!   non-zero, so that its service manager restarts it: an API that answers over a dead
//!   loop would tell the operator all is well while nothing is protected.
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::events::EventReason;
use crate::notify::{SourceState, WakeSource};
use crate::state::SharedState;

/// What a task's end means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    /// An event source: the agent runs on without it.
    Source(WakeSource),
    /// The agent cannot protect the node without it.
    Critical,
    /// Anything else: its end is reported.
    Helper,
}

struct Task {
    name: String,
    role: Role,
    handle: JoinHandle<()>,
}

/// Adds tasks to the watch and stops them all.
pub(crate) struct Tasks {
    add: mpsc::UnboundedSender<Task>,
    stop: Option<oneshot::Sender<()>>,
    watcher: Option<JoinHandle<()>>,
    fatal: Option<mpsc::UnboundedReceiver<String>>,
}

impl Tasks {
    /// Starts the watcher (inside a tokio runtime).
    pub(crate) fn start(state: SharedState) -> Tasks {
        let (add, add_rx) = mpsc::unbounded_channel();
        let (stop, stop_rx) = oneshot::channel();
        let (fatal_tx, fatal) = mpsc::unbounded_channel();
        let watcher = tokio::spawn(watch(add_rx, stop_rx, state, fatal_tx));
        Tasks {
            add,
            stop: Some(stop),
            watcher: Some(watcher),
            fatal: Some(fatal),
        }
    }

    /// Puts `handle` under watch. Tasks stop in the reverse order they were added.
    pub(crate) fn add(&self, name: impl Into<String>, role: Role, handle: JoinHandle<()>) {
        let task = Task {
            name: name.into(),
            role,
            handle,
        };
        // The watcher is gone only after `stop`: then nothing should run any more.
        if let Err(mpsc::error::SendError(task)) = self.add.send(task) {
            task.handle.abort();
        }
    }

    /// A sender for tasks started later by other parts of the agent.
    pub(crate) fn adder(&self) -> TaskAdder {
        TaskAdder(self.add.clone())
    }

    /// The reasons critical tasks ended, as they happen (taken once).
    pub(crate) fn take_fatal(&mut self) -> Option<mpsc::UnboundedReceiver<String>> {
        self.fatal.take()
    }

    /// Stops every task, newest first, and waits for them.
    pub(crate) async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(watcher) = self.watcher.take() {
            let _ = watcher.await;
        }
    }
}

/// Puts tasks under the agent's watch from elsewhere (the runtime's supervisor).
#[derive(Clone)]
pub(crate) struct TaskAdder(mpsc::UnboundedSender<Task>);

impl TaskAdder {
    pub(crate) fn add(&self, name: impl Into<String>, role: Role, handle: JoinHandle<()>) {
        let task = Task {
            name: name.into(),
            role,
            handle,
        };
        if let Err(mpsc::error::SendError(task)) = self.0.send(task) {
            task.handle.abort();
        }
    }
}

async fn watch(
    mut add: mpsc::UnboundedReceiver<Task>,
    mut stop: oneshot::Receiver<()>,
    state: SharedState,
    fatal: mpsc::UnboundedSender<String>,
) {
    let mut tasks: Vec<Task> = Vec::new();
    loop {
        let any_ended = async {
            if tasks.is_empty() {
                std::future::pending::<()>().await;
            }
            let handles = tasks.iter_mut().map(|t| &mut t.handle);
            let (result, index, _) = futures_util::future::select_all(handles).await;
            (result, index)
        };
        tokio::select! {
            _ = &mut stop => break,
            Some(task) = add.recv() => tasks.push(task),
            (result, index) = any_ended => {
                let task = tasks.remove(index);
                let why = match result {
                    Ok(()) => "ended".to_string(),
                    Err(err) if err.is_cancelled() => continue,
                    Err(err) => format!("panicked: {}", panic_text(err.into_panic())),
                };
                ended(&state, &fatal, &task, &why);
            }
        }
    }
    // The critical tasks first (the synchronize loop, the pods' supervisor), newest first;
    // then the sources get a moment to finish on their own (the v2 memory.high task puts
    // `max` back once the loop's sender is gone) before they are stopped too.
    let (critical, others): (Vec<Task>, Vec<Task>) =
        tasks.into_iter().partition(|t| t.role == Role::Critical);
    for task in critical.into_iter().rev() {
        task.handle.abort();
        let _ = task.handle.await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    for task in others.into_iter().rev() {
        task.handle.abort();
        let _ = task.handle.await;
    }
}

/// Reports a task's end as an event (events are logged too), and acts on its role.
fn ended(state: &SharedState, fatal: &mpsc::UnboundedSender<String>, task: &Task, why: &str) {
    let message = format!("{} {why}", task.name);
    match task.role {
        Role::Source(source) => {
            {
                let mut state = state.lock();
                for status in state.sources.iter_mut().filter(|s| s.source == source) {
                    status.state = SourceState::Failed;
                    status.detail = message.clone();
                }
            }
            state.event(
                EventReason::SourceFailed,
                "node",
                format!("{message}; the agent runs on the other sources"),
            );
        }
        Role::Critical => {
            state.event(
                EventReason::TaskFailed,
                "node",
                format!("{message}; the agent stops so that it is restarted"),
            );
            let _ = fatal.send(message);
        }
        Role::Helper => state.event(EventReason::TaskFailed, "node", message),
    }
}

fn panic_text(panic: Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_string())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::notify::SourceStatus;

    #[tokio::test]
    async fn a_source_that_dies_is_marked_failed_and_a_critical_task_is_fatal() {
        let state = SharedState::default();
        state.lock().sources = vec![SourceStatus::running(WakeSource::Psi, "triggers")];
        let mut tasks = Tasks::start(state.clone());
        let mut fatal = tasks.take_fatal().expect("once");
        tasks.add(
            "psi source",
            Role::Source(WakeSource::Psi),
            tokio::spawn(async { panic!("trigger file vanished") }),
        );
        tasks.add(
            "forever",
            Role::Helper,
            tokio::spawn(std::future::pending::<()>()),
        );
        tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                if state.read().sources[0].state == SourceState::Failed {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("the source is marked failed");
        let detail = state.read().sources[0].detail.clone();
        assert!(detail.contains("trigger file vanished"), "{detail}");
        assert!(fatal.try_recv().is_err(), "a source is not fatal");

        tasks.add("synchronize loop", Role::Critical, tokio::spawn(async {}));
        let why = tokio::time::timeout(Duration::from_secs(5), fatal.recv())
            .await
            .expect("reported")
            .expect("open");
        assert_eq!(why, "synchronize loop ended");
        let events: Vec<String> = state
            .read()
            .events
            .iter()
            .map(|e| e.reason.clone())
            .collect();
        assert!(
            events.contains(&"SourceFailed".to_string())
                && events.contains(&"TaskFailed".to_string()),
            "{events:?}"
        );
        // Stopping aborts what still runs; an aborted task is no failure.
        tasks.stop().await;
        assert_eq!(state.read().events.len(), events.len());
    }
}
