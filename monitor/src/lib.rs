//! `monitor`: a node pressure agent with the kubelet's out-of-resource semantics, woken by
//! the kernel (eBPF ring buffer, memcg thresholds, memory.events, PSI) instead of a poll.
//!
//! Data path (one direction), in the order a newcomer reads it:
//! - [`notify`]: event sources; each only wakes the loop through one channel;
//! - [`sync`]: the synchronize loop: a FRESH [`observe`] snapshot per wake, the eviction
//!   pass, evictions started and followed to their end;
//! - [`policy`]: the decisions, pure functions of plain data and an explicit `now`, in a
//!   crate of their own (`monitor-policy`) that cannot do I/O;
//! - [`runtime`]: where pods run and where a kill happens, behind the small traits of
//!   [`runtime::port`].
//!
//! Around them: [`config`] (KubeletConfiguration and the agent's settings), [`agent`]
//! (starts the sources and the loop), [`node`] (the whole agent with its runtime and API),
//! [`api`] and [`state`] (what the API shows), [`simulate`] (the policy offline), and
//! [`clock`] (kernel timestamps for logs).

#![warn(unreachable_pub)]

pub mod agent;
pub mod api;
pub mod clock;
pub mod config;
pub mod decisions;
pub mod events;
pub mod node;
pub mod notify;
pub mod observe;
pub use monitor_policy as policy;
pub mod runtime;
pub mod service;
pub mod simulate;
pub mod state;
pub mod sync;
pub mod tasks;

#[cfg(test)]
mod doc_tables;
