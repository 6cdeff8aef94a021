use std::sync::Mutex;

use rstest::rstest;

use super::carry::{KILL_ANSWER_SLACK, carry_out, settle};
use super::*;
use crate::policy::eviction::EvictionReason;
use crate::policy::types::Resource;
use crate::runtime::port::BoxFuture;

fn decision() -> EvictionDecision {
    EvictionDecision {
        pod_key: "default/hog".into(),
        signal: Some(Signal::AllocatableMemoryAvailable),
        resource: Resource::Memory,
        reason: EvictionReason::Threshold,
        grace_period_seconds: 0,
        immediate: true,
        kill_timeout: MIN_KILL_TIMEOUT,
        message: String::new(),
    }
}

#[rstest]
#[case::evicted_and_empty(EvictionOutcome::Evicted, 1, Some(0), EvictionOutcome::Evicted)]
#[case::evicted_untold(EvictionOutcome::Evicted, 1, None, EvictionOutcome::Evicted)]
#[case::evicted_but_alive(
    EvictionOutcome::Evicted,
    1,
    Some(3),
    EvictionOutcome::TimedOut { alive: 3 }
)]
#[case::gone_on_a_retry(EvictionOutcome::AlreadyGone, 2, Some(0), EvictionOutcome::Evicted)]
#[case::gone_on_a_retry_but_alive(
    EvictionOutcome::AlreadyGone,
    2,
    Some(1),
    EvictionOutcome::TimedOut { alive: 1 }
)]
// The first attempt's "already gone" is no eviction of ours: never booked evicted.
#[case::gone_at_first(EvictionOutcome::AlreadyGone, 1, Some(2), EvictionOutcome::AlreadyGone)]
#[case::timed_out(
    EvictionOutcome::TimedOut { alive: 2 },
    1,
    Some(2),
    EvictionOutcome::TimedOut { alive: 2 }
)]
fn an_eviction_is_done_only_once_its_cgroups_are_empty(
    #[case] outcome: EvictionOutcome,
    #[case] attempts: u32,
    #[case] left: Option<usize>,
    #[case] settled: EvictionOutcome,
) {
    assert_eq!(settle(outcome, attempts, || left), settled);
}

/// A runtime whose first kill never answers (a wedged container runtime) and whose
/// retries find nothing to stop, with `left` processes in the pod's cgroups.
struct Wedged {
    calls: Mutex<Vec<i64>>,
    left: Mutex<usize>,
}

impl PodKiller for Wedged {
    fn evict(&self, decision: &EvictionDecision) -> BoxFuture<EvictionOutcome> {
        let mut calls = self.calls.lock().unwrap();
        calls.push(decision.grace_period_seconds);
        if calls.len() == 1 {
            Box::pin(std::future::pending())
        } else {
            Box::pin(async { EvictionOutcome::AlreadyGone })
        }
    }

    fn processes_left(&self, _pod_key: &str) -> Option<usize> {
        Some(*self.left.lock().unwrap())
    }
}

#[tokio::test(start_paused = true)]
async fn a_retry_never_books_evicted_while_processes_are_left() {
    let wedged = Wedged {
        calls: Mutex::new(Vec::new()),
        left: Mutex::new(2),
    };
    let started = tokio::time::Instant::now();
    let (outcome, attempts) = carry_out(&wedged, &decision()).await;
    assert_eq!(outcome, EvictionOutcome::TimedOut { alive: 2 });
    assert_eq!(attempts, MAX_KILL_ATTEMPTS);
    // The silent attempt was waited for its kill timeout and the slack, no longer.
    assert_eq!(started.elapsed(), MIN_KILL_TIMEOUT + KILL_ANSWER_SLACK);
    assert_eq!(*wedged.calls.lock().unwrap(), vec![0, 0, 0]);
}

#[tokio::test(start_paused = true)]
async fn a_retry_that_finds_the_cgroups_empty_books_the_eviction() {
    let wedged = Wedged {
        calls: Mutex::new(Vec::new()),
        left: Mutex::new(0),
    };
    let (outcome, attempts) = carry_out(&wedged, &decision()).await;
    assert_eq!((outcome, attempts), (EvictionOutcome::Evicted, 2));
}
