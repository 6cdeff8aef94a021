//! Telling the service manager how the agent is (systemd's notify protocol, through
//! `$NOTIFY_SOCKET`): `READY=1` once the event sources are armed and the first
//! synchronize has finished, so `systemctl start` returns on a node that is protected, and
//! `WATCHDOG=1` at half the unit's `WatchdogSec=` for as long as the synchronize loop
//! keeps finishing synchronizes, so a stuck loop gets the agent restarted (the restart
//! adopts the pods). Without `$NOTIFY_SOCKET` (not under systemd, or `Type=simple`)
//! nothing is sent.
use std::time::Duration;

use crate::api::health::loop_stalled;
use crate::state::SharedState;

/// How often readiness is looked for until the first synchronize has finished.
const READY_POLL: Duration = Duration::from_millis(20);

/// Starts the task that announces readiness and then keeps the watchdog fed.
pub fn spawn(state: SharedState) -> tokio::task::JoinHandle<()> {
    tokio::spawn(run(state, sd_notify::watchdog_enabled()))
}

async fn run(state: SharedState, watchdog: Option<Duration>) {
    while state.lock().last_sync.is_none() {
        tokio::time::sleep(READY_POLL).await;
    }
    let status = "armed: the first synchronize has finished";
    match sd_notify::notify(&[
        sd_notify::NotifyState::Ready,
        sd_notify::NotifyState::Status(status),
    ]) {
        Ok(()) => tracing::debug!("service manager told: ready"),
        Err(err) => tracing::warn!("cannot tell the service manager the agent is ready: {err}"),
    }
    let Some(timeout) = watchdog else { return };
    tracing::info!(
        "watchdog: every {:?}, while synchronizes keep finishing",
        timeout / 2
    );
    let mut tick = tokio::time::interval(timeout / 2);
    let mut starving = false;
    loop {
        tick.tick().await;
        let stalled = loop_stalled(&state.lock(), crate::clock::monotonic_ns());
        if stalled {
            // Not fed: the service manager restarts the agent when the timeout runs out.
            if !starving {
                tracing::error!(
                    "watchdog: the synchronize loop is stalled, no longer telling the service manager it is alive"
                );
            }
            starving = true;
            continue;
        }
        starving = false;
        if let Err(err) = sd_notify::notify(&[sd_notify::NotifyState::Watchdog]) {
            tracing::warn!("watchdog: cannot tell the service manager: {err}");
        }
    }
}
