//! The housekeeping timer: the fallback wake, and the agent's only periodic one.
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::{MissedTickBehavior, interval_at};

use super::{WakeDetail, WakeSender, WakeSource};

pub(crate) fn spawn(period: Duration, wakes: WakeSender) -> JoinHandle<()> {
    tokio::spawn(async move {
        // The loop runs its first synchronize at startup; the first tick is one period later.
        let mut ticks = interval_at(tokio::time::Instant::now() + period, period);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            wakes.wake(WakeSource::Timer, WakeDetail::None);
        }
    })
}
