//! Carrying evictions out: each runs as a task of its own through the runtime's killer,
//! retried until the pod's cgroups are empty, and is booked (metrics, events, the API)
//! by the pass that sees it ended.
use tracing::Instrument;

use super::*;

/// Kill attempts per eviction: the first with the decision's grace period, the retries at
/// once (the pod already had its grace period).
pub(crate) const MAX_KILL_ATTEMPTS: u32 = 3;

/// How long past its kill timeout the loop waits for a runtime's answer before it counts
/// the attempt as timed out (the runtime bounds its own kill by the kill timeout).
pub(super) const KILL_ANSWER_SLACK: Duration = Duration::from_secs(1);

/// One eviction to its end: the kill with the decision's grace period, then, while the
/// pod is still there (processes alive after the kill timeout, or the kill failed), up to
/// [`MAX_KILL_ATTEMPTS`] − 1 immediate retries. An attempt whose answer does not come
/// within its kill timeout (and [`KILL_ANSWER_SLACK`]) is no longer waited for; the
/// runtime runs it to its end by itself.
pub(super) async fn carry_out(
    killer: &dyn PodKiller,
    decision: &EvictionDecision,
) -> (EvictionOutcome, u32) {
    let mut attempt = decision.clone();
    let mut attempts = 0;
    loop {
        attempts += 1;
        let wait = attempt.kill_timeout.saturating_add(KILL_ANSWER_SLACK);
        let outcome = match tokio::time::timeout(wait, killer.evict(&attempt)).await {
            Ok(outcome) => outcome,
            Err(_) => {
                EvictionOutcome::KillFailed(format!("the runtime did not answer within {wait:?}"))
            }
        };
        let outcome = settle(outcome, attempts, || {
            killer.processes_left(&decision.pod_key)
        });
        if outcome.is_final() || attempts >= MAX_KILL_ATTEMPTS {
            return (outcome, attempts);
        }
        tracing::warn!(
            pod = %decision.pod_key,
            attempt = attempts,
            "eviction not finished ({outcome}); killing again"
        );
        attempt.grace_period_seconds = 0;
        attempt.kill_timeout = MIN_KILL_TIMEOUT;
    }
}

/// What attempt number `attempts` of an eviction counts as, from the runtime's `outcome`.
/// A retry that finds nothing left to kill means the last attempt's processes went away
/// after all: evicted. But an eviction is done only once the pod's cgroups are empty:
/// with processes `left` (as the runtime counts them now; `None`: it cannot tell), an
/// "evicted" is a kill not finished, and is retried.
pub(super) fn settle(
    outcome: EvictionOutcome,
    attempts: u32,
    left: impl FnOnce() -> Option<usize>,
) -> EvictionOutcome {
    let outcome = match outcome {
        EvictionOutcome::AlreadyGone if attempts > 1 => EvictionOutcome::Evicted,
        other => other,
    };
    if outcome != EvictionOutcome::Evicted {
        return outcome;
    }
    match left() {
        Some(alive) if alive > 0 => EvictionOutcome::TimedOut { alive },
        _ => outcome,
    }
}

impl EvictionSync {
    /// Starts `decision`'s eviction as a task of its own; with a `notice` for the
    /// pre-kill hook, the hook runs first (see [`with_hook`]).
    pub(super) fn start(&mut self, decision: EvictionDecision, notice: Option<hook::HookDocument>) {
        self.in_flight.push(decision.clone());
        let killer = self.ports.killer.clone();
        let finished = self.finished_tx.clone();
        let wakes = self.wakes.clone();
        let hook = self.hook.clone().zip(notice);
        let state = self.state.clone();
        // The eviction's own span, under the pass that decided it: its lines (the kill,
        // the retries, the runtime's calls) name the pod and the signal.
        let span = tracing::info_span!(
            "evict",
            pod = %decision.pod_key,
            signal = decision.signal.map_or("", |s| s.as_str()),
            grace_seconds = decision.grace_period_seconds,
        );
        let task = async move {
            let decision = match hook {
                Some((hook, notice)) => with_hook(&hook, notice, decision, &state).await,
                None => decision,
            };
            let (outcome, attempts) = carry_out(killer.as_ref(), &decision).await;
            // The record first, then the wake: the pass the wake causes sees it.
            let _ = finished.send(FinishedEviction {
                decision,
                outcome,
                attempts,
                ended_ns: crate::clock::monotonic_ns(),
            });
            wakes.wake(WakeSource::Eviction, WakeDetail::None);
        };
        tokio::spawn(task.instrument(span));
    }

    /// Takes the evictions that ended before `observed_ns` (when this pass's observation
    /// was taken; 0: unknown, take all) and records them in metrics, events and the API.
    /// One that ended later stays under way until the next pass (its wake is queued):
    /// the pass must see the node after the victim is gone before it evicts again.
    pub(super) fn collect_finished(&mut self, observed_ns: u64) -> Vec<FinishedEviction> {
        let mut finished = Vec::new();
        let mut arrived = std::mem::take(&mut self.later);
        while let Ok(done) = self.finished_rx.try_recv() {
            arrived.push(done);
        }
        for done in arrived {
            if observed_ns != 0 && done.ended_ns > observed_ns {
                self.later.push(done);
                continue;
            }
            self.in_flight
                .retain(|e| e.pod_key != done.decision.pod_key);
            self.record(&done);
            finished.push(done);
        }
        finished
    }

    pub(super) fn record(&self, done: &FinishedEviction) {
        let decision = &done.decision;
        let signal = decision
            .signal
            .map(|s| s.as_str())
            .unwrap_or(decision.resource.as_str())
            .to_string();
        if !done.outcome.is_final() {
            self.state.event(
                crate::events::EventReason::EvictionFailed,
                &decision.pod_key,
                format!(
                    "gave up after {} kill attempt(s): {}",
                    done.attempts, done.outcome
                ),
            );
        }
        let mut state = self.state.lock();
        if done.outcome == EvictionOutcome::Evicted {
            state.metrics.count_eviction(decision);
        }
        *state
            .metrics
            .eviction_outcomes
            .entry(done.outcome.name().to_string())
            .or_default() += 1;
        if state.evictions.len() >= EVICTIONS_KEPT {
            state.evictions.pop_front();
        }
        state.evictions.push_back(EvictionView {
            pod: decision.pod_key.clone(),
            signal,
            grace_period_seconds: decision.grace_period_seconds,
            outcome: done.outcome.name().to_string(),
            detail: match &done.outcome {
                EvictionOutcome::TimedOut { .. } | EvictionOutcome::KillFailed(_) => {
                    Some(done.outcome.to_string())
                }
                EvictionOutcome::Evicted | EvictionOutcome::AlreadyGone => None,
            },
            attempts: done.attempts,
            finished_at: crate::state::now_rfc3339(),
        });
    }
}

/// Runs the pre-kill hook for `decision` and returns the decision to carry out. An
/// eviction with a grace period waits for the hook at most its timeout or the grace
/// period, whichever is shorter, and the hook's time comes out of the grace period (the
/// pod is killed no later than without a hook). An immediate eviction does not wait: the
/// hook runs beside the kill, as a notice.
pub(super) async fn with_hook(
    hook: &Arc<crate::config::agent::PreKillHookSettings>,
    notice: hook::HookDocument,
    mut decision: EvictionDecision,
    state: &SharedState,
) -> EvictionDecision {
    let grace = Duration::from_secs(decision.grace_period_seconds.max(0).unsigned_abs());
    if decision.immediate || grace.is_zero() {
        let (hook, state) = (hook.clone(), state.clone());
        tokio::spawn(async move {
            let run = hook::run(&hook, &notice, hook.timeout).await;
            report_hook(&state, &notice, &run, false);
        });
        return decision;
    }
    let run = hook::run(hook, &notice, hook.timeout.min(grace)).await;
    report_hook(state, &notice, &run, true);
    let left = grace.saturating_sub(run.took);
    decision.grace_period_seconds = i64::try_from(left.as_secs()).unwrap_or(0);
    decision
}

/// Logs and counts one run of the hook; a run that did not end well is a Warning event.
fn report_hook(
    state: &SharedState,
    notice: &hook::HookDocument,
    run: &hook::HookRun,
    waited: bool,
) {
    let took_ms = run.took.as_millis();
    let result = run.result.name();
    match &run.result {
        hook::HookResult::Ok => tracing::info!(
            pod = %notice.pod,
            result,
            took_ms,
            waited,
            stdout = %run.stdout,
            stderr = %run.stderr,
            "pre-kill hook ran"
        ),
        other => {
            let why = match other {
                hook::HookResult::Failed(status) => format!("exited with {status}"),
                hook::HookResult::TimedOut => "still running at its deadline: killed".into(),
                hook::HookResult::Error(err) => err.clone(),
                hook::HookResult::Ok => String::new(),
            };
            state.event(
                crate::events::EventReason::PreKillHookFailed,
                &notice.pod,
                format!(
                    "pre-kill hook {why} after {took_ms} ms; the eviction goes on{}",
                    if run.stderr.is_empty() {
                        String::new()
                    } else {
                        format!(" (stderr: {})", run.stderr)
                    }
                ),
            );
        }
    }
    *state
        .lock()
        .metrics
        .pre_kill_hooks
        .entry(result.to_string())
        .or_default() += 1;
}
