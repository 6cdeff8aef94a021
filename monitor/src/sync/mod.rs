//! Where a wake becomes a decision and a decision becomes a kill.
//!
//! Reading order: [`run`] (the loop: wakes in, one fresh observation per synchronize,
//! reports out) → [`eviction`] (the eviction pass: signals, the pure policy, node-level
//! reclaim, evictions started through the runtime's ports and followed to their end) →
//! [`signals`] (the observation in the policy's shape). [`hot`] answers a hard memory
//! threshold's crossing before any synchronize, with a victim the eviction pass armed. The decisions themselves are
//! [`crate::policy`]'s; the kills are the runtime's ([`crate::runtime::port`]).
pub(crate) mod contention;
pub(crate) mod eviction;
pub(crate) mod hot;
pub(crate) mod run;
pub(crate) mod signals;
#[cfg(test)]
mod tests;

pub(crate) use eviction::EvictionSync;
pub(crate) use hot::HotPath;
pub use run::{Arming, Observe, SyncLoop, SyncReport};
