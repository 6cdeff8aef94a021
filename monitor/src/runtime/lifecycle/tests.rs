//! The decision after a container's exit ([`after_exit`]), case by case.
use std::time::Duration;

use rstest::rstest;

use super::exit::{AfterExit, ExitFacts, after_exit};
use crate::runtime::shared::{Exit, MAX_BACKOFF};
use crate::runtime::store::{ContainerRecord, Phase};

const FIRST: Duration = Duration::from_secs(10);
/// The pid of the run that exits in every case.
const PID: u32 = 4242;

fn container(name: &str, pid: Option<u32>, done: bool, last_exit: Option<i32>) -> ContainerRecord {
    ContainerRecord {
        name: name.into(),
        pid,
        restart_count: 0,
        last_exit,
        exit_code_unknown: false,
        done,
        container_id: None,
    }
}

/// The container "app", running as [`PID`], alone in its pod.
fn alone() -> Vec<ContainerRecord> {
    vec![container("app", Some(PID), false, None)]
}

fn exit_of(pid: u32, code: Option<i32>) -> Exit {
    Exit {
        uid: "uid".into(),
        container: "app".into(),
        pid,
        code,
    }
}

fn restart() -> AfterExit {
    AfterExit::Settled {
        restart_after: Some(FIRST),
        pod_ends: None,
    }
}

fn done(pod_ends: Option<Phase>) -> AfterExit {
    AfterExit::Settled {
        restart_after: None,
        pod_ends,
    }
}

/// A single-container pod, running, never restarted before: the restart policy against
/// the exit code (137 is a SIGKILL: the kernel's OOM killer, or a kill not ours).
#[rstest]
#[case::default_is_always_exit_0(None, Some(0), restart())]
#[case::always_exit_0(Some("Always"), Some(0), restart())]
#[case::always_exit_1(Some("Always"), Some(1), restart())]
#[case::always_exit_137(Some("Always"), Some(137), restart())]
#[case::always_status_unknown(Some("Always"), None, restart())]
#[case::on_failure_exit_0(Some("OnFailure"), Some(0), done(Some(Phase::Succeeded)))]
#[case::on_failure_exit_1(Some("OnFailure"), Some(1), restart())]
#[case::on_failure_exit_137(Some("OnFailure"), Some(137), restart())]
#[case::on_failure_status_unknown_is_a_failure(Some("OnFailure"), None, restart())]
#[case::never_exit_0(Some("Never"), Some(0), done(Some(Phase::Succeeded)))]
#[case::never_exit_1(Some("Never"), Some(1), done(Some(Phase::Failed)))]
#[case::never_exit_137(Some("Never"), Some(137), done(Some(Phase::Failed)))]
#[case::never_status_unknown_is_a_failure(Some("Never"), None, done(Some(Phase::Failed)))]
// A policy the parser refuses today; a record of an older agent may still carry one.
#[case::unknown_policy_is_always(Some("Sometimes"), Some(0), restart())]
fn the_restart_policy_decides_on_the_exit_code(
    #[case] policy: Option<&str>,
    #[case] code: Option<i32>,
    #[case] want: AfterExit,
) {
    let containers = alone();
    let facts = ExitFacts {
        policy,
        stopping: false,
        phase: Phase::Running,
        containers: &containers,
        last_backoff: None,
        first_backoff: FIRST,
    };
    assert_eq!(after_exit(&facts, &exit_of(PID, code)), want);
}

/// A pod being stopped or evicted, or one that has ended, restarts nothing and its phase
/// stays what the stop or the eviction wrote. The hot path's kill raises `stopping` before
/// the kill: an evicted pod whose exit is seen before its eviction is booked (still
/// Running) is not restarted either.
#[rstest]
#[case::hot_killed_before_the_booking(Some("Always"), true, Phase::Running, Some(137))]
#[case::being_stopped_exit_0(Some("Always"), true, Phase::Running, Some(0))]
#[case::being_stopped_on_failure(Some("OnFailure"), true, Phase::Running, Some(143))]
#[case::being_stopped_never(Some("Never"), true, Phase::Running, Some(1))]
#[case::evicted_always(Some("Always"), false, Phase::Failed, Some(137))]
#[case::evicted_on_failure(Some("OnFailure"), false, Phase::Failed, Some(137))]
#[case::evicted_and_still_stopping(None, true, Phase::Failed, Some(137))]
#[case::succeeded_pod(Some("Always"), false, Phase::Succeeded, Some(0))]
fn a_pod_stopping_or_ended_never_restarts(
    #[case] policy: Option<&str>,
    #[case] stopping: bool,
    #[case] phase: Phase,
    #[case] code: Option<i32>,
) {
    let containers = alone();
    let facts = ExitFacts {
        policy,
        stopping,
        phase,
        containers: &containers,
        last_backoff: None,
        first_backoff: FIRST,
    };
    assert_eq!(after_exit(&facts, &exit_of(PID, code)), done(None));
}

/// The back-off doubles at each restart, up to the kubelet's MaxContainerBackOff.
#[rstest]
#[case::first_restart(None, FIRST)]
#[case::doubled(Some(FIRST), FIRST * 2)]
#[case::doubled_again(Some(FIRST * 4), FIRST * 8)]
#[case::capped(Some(Duration::from_secs(200)), MAX_BACKOFF)]
#[case::stays_at_the_cap(Some(MAX_BACKOFF), MAX_BACKOFF)]
fn the_back_off_doubles_up_to_the_cap(
    #[case] last_backoff: Option<Duration>,
    #[case] want: Duration,
) {
    let containers = alone();
    let facts = ExitFacts {
        policy: Some("Always"),
        stopping: false,
        phase: Phase::Running,
        containers: &containers,
        last_backoff,
        first_backoff: FIRST,
    };
    assert_eq!(
        after_exit(&facts, &exit_of(PID, Some(1))),
        AfterExit::Settled {
            restart_after: Some(want),
            pod_ends: None,
        }
    );
}

/// A pod ends with its last container: Succeeded only when every container last exited 0.
#[rstest]
#[case::sidecar_still_running(container("side", Some(7), false, None), Some(0), None)]
#[case::sidecar_waiting_to_restart(container("side", None, false, Some(1)), Some(0), None)]
#[case::sidecar_done_ok(
    container("side", None, true, Some(0)),
    Some(0),
    Some(Phase::Succeeded)
)]
#[case::sidecar_done_ok_this_failed(
    container("side", None, true, Some(0)),
    Some(2),
    Some(Phase::Failed)
)]
#[case::sidecar_done_failed(container("side", None, true, Some(1)), Some(0), Some(Phase::Failed))]
#[case::sidecar_done_status_unknown(
    container("side", None, true, None),
    Some(0),
    Some(Phase::Failed)
)]
fn the_pod_ends_with_its_last_container(
    #[case] other: ContainerRecord,
    #[case] code: Option<i32>,
    #[case] pod_ends: Option<Phase>,
) {
    let containers = vec![container("app", Some(PID), false, None), other];
    let facts = running_under_never(&containers);
    assert_eq!(after_exit(&facts, &exit_of(PID, code)), done(pod_ends));
}

/// Reports that change nothing: an earlier run's (the container runs again under another
/// pid, or waits for its restart), or one naming no container of the pod. A report from
/// pid 0 (a start that failed, a container found dead at adoption) always counts.
#[rstest]
#[case::an_earlier_run_while_the_next_runs(Some(5151), PID, "app", AfterExit::Stale)]
#[case::an_earlier_run_while_waiting(None, PID, "app", AfterExit::Stale)]
#[case::no_such_container(Some(PID), PID, "other", AfterExit::Stale)]
#[case::a_failed_start(None, 0, "app", done(Some(Phase::Failed)))]
#[case::a_failed_start_while_a_run_is_recorded(Some(PID), 0, "app", done(Some(Phase::Failed)))]
fn late_or_foreign_reports_change_nothing(
    #[case] recorded_pid: Option<u32>,
    #[case] reported_pid: u32,
    #[case] name: &str,
    #[case] want: AfterExit,
) {
    let containers = vec![container("app", recorded_pid, false, None)];
    let facts = running_under_never(&containers);
    let exit = Exit {
        container: name.into(),
        ..exit_of(reported_pid, Some(127))
    };
    assert_eq!(after_exit(&facts, &exit), want);
}

/// A running pod under `restartPolicy: Never`, not being stopped, never backed off.
fn running_under_never(containers: &[ContainerRecord]) -> ExitFacts<'_> {
    ExitFacts {
        policy: Some("Never"),
        stopping: false,
        phase: Phase::Running,
        containers,
        last_backoff: None,
        first_backoff: FIRST,
    }
}
