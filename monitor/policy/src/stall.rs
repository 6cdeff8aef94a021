//! Memory stalls as an eviction signal, with a quantity guard (`monitor.memoryStall`,
//! off unless configured). PSI alone misfires: an I/O stall (a pod thrashing on its disk,
//! memory plentiful) shows as memory stall too, since refaulting page cache waits on I/O.
//! So the stall counts only while a memory signal is also within a margin of its
//! threshold: memory must really be short. It is a soft threshold with the kubelet's
//! semantics (grace period, the memory ranking, the MemoryPressure condition).
//!
//! The signal, [`Signal::MemoryStall`], is the share of time not fully stalled, in
//! hundredths of a percent of a capacity of 10000: a `full` stall of 25 % is 7500
//! available, and a threshold of `full: 20%` is `memory.stall<80%`. While the guard does
//! not hold, the signal reads 10000 (no stall counted).
use std::time::Duration;

use super::quantity::QuantityOrPercent;
use super::relief::relief_level;
use super::signal::{Observations, Signal, SignalObservation, Threshold};
use super::types::Time;

/// The signal's capacity: 100 % in hundredths of a percent.
pub const CAPACITY: i64 = 10_000;

/// `monitor.memoryStall`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StallSettings {
    /// The PSI `full` share (avg10, of the pods cgroup or the node, whichever is higher)
    /// past which the signal's threshold is met: a fraction in (0, 1).
    pub full: f64,
    /// How close to its highest threshold a memory signal must be for stalls to count.
    pub margin: QuantityOrPercent,
    /// The soft threshold's grace period.
    pub grace_period: Duration,
}

impl StallSettings {
    /// The soft threshold the settings stand for: `memory.stall < 100 % − full`.
    pub fn threshold(&self) -> Threshold {
        Threshold::soft(
            Signal::MemoryStall,
            QuantityOrPercent::Percent((1.0 - self.full).clamp(0.0, 1.0)),
            self.grace_period,
        )
    }
}

/// The signal's observation: `full_share` (0..1, the higher of the pods' and the node's
/// avg10) counted only while `memory.available` or `allocatableMemory.available` is below
/// its highest threshold plus the margin.
pub fn observation(
    settings: &StallSettings,
    thresholds: &[Threshold],
    observations: &Observations,
    full_share: f64,
    time: Time,
) -> SignalObservation {
    let short = [Signal::MemoryAvailable, Signal::AllocatableMemoryAvailable]
        .into_iter()
        .any(|signal| {
            observations.get(&signal).is_some_and(|observed| {
                relief_level(thresholds, signal, observed.capacity, settings.margin)
                    .is_some_and(|(_, near)| observed.available < near)
            })
        });
    let stalled = if short {
        (full_share.clamp(0.0, 1.0) * CAPACITY as f64).round() as i64
    } else {
        0
    };
    SignalObservation {
        available: CAPACITY - stalled,
        capacity: CAPACITY,
        time,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quantity::Quantity;
    use crate::threshold::threshold_met;

    const MI: i64 = 1 << 20;

    fn settings() -> StallSettings {
        StallSettings {
            full: 0.20,
            margin: QuantityOrPercent::Quantity(Quantity::from_units(200 * MI)),
            grace_period: Duration::from_secs(30),
        }
    }

    fn memory(available_mi: i64) -> Observations {
        [(
            Signal::MemoryAvailable,
            SignalObservation {
                available: available_mi * MI,
                capacity: 4096 * MI,
                time: Duration::ZERO,
            },
        )]
        .into_iter()
        .collect()
    }

    fn thresholds() -> Vec<Threshold> {
        vec![
            Threshold::hard(
                Signal::MemoryAvailable,
                QuantityOrPercent::Quantity(Quantity::from_units(100 * MI)),
            ),
            settings().threshold(),
        ]
    }

    /// The stall threshold met with `full_share` stalled at `available_mi` of memory.
    fn met(available_mi: i64, full_share: f64) -> bool {
        let mut observed = memory(available_mi);
        let stall = observation(
            &settings(),
            &thresholds(),
            &observed,
            full_share,
            Duration::ZERO,
        );
        observed.insert(Signal::MemoryStall, stall);
        threshold_met(&settings().threshold(), &observed, false)
    }

    #[test]
    fn a_stall_with_memory_short_meets_the_threshold() {
        // 250 Mi available, within 100 Mi + 200 Mi of the threshold.
        assert!(met(250, 0.25));
        assert!(!met(250, 0.15));
    }

    #[test]
    fn a_stall_with_memory_plentiful_counts_for_nothing() {
        // An I/O stall: the same stall, 2 Gi available.
        assert!(!met(2048, 0.90));
        let stall = observation(
            &settings(),
            &thresholds(),
            &memory(2048),
            0.9,
            Duration::ZERO,
        );
        assert_eq!(stall.available, CAPACITY);
    }

    #[test]
    fn the_threshold_reads_as_the_share_not_stalled() {
        let threshold = settings().threshold();
        assert!(!threshold.is_hard());
        assert_eq!(threshold.quantity(CAPACITY), 8000);
        assert_eq!(
            crate::signal::format_amount(Signal::MemoryStall, 7500),
            "75%"
        );
        assert!(!Signal::MemoryStall.is_bytes() && Signal::MemoryStall.is_memory());
        // Not a kubelet signal: its eviction keys cannot name it.
        assert!("memory.stall".parse::<Signal>().is_err());
    }
}
