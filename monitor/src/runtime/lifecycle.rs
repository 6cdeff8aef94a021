//! Pod lifecycle, one module per question: the supervisor ([`supervise`]) reconciles
//! manifests into running pods ([`admit`]: admission and preemption first), starts their
//! containers ([`launch`]), decides what follows a container's exit ([`exit`]: restart
//! under the policy with back-off, or the pod's end), stops ([`stop`]) and evicts
//! ([`evict`]) pods, and keeps their records ([`records`]). Adoption of an earlier run's
//! pods is `adopt`'s.
mod admit;
mod evict;
mod exit;
mod launch;
mod records;
mod stop;
mod supervise;
#[cfg(test)]
mod tests;

pub(super) use evict::{evict, processes_left};
pub use launch::has_cap_sys_resource;
pub(super) use records::{persist, publish, remove_cgroups, update_tiers};
pub(super) use stop::kill;
pub(super) use supervise::supervise;
