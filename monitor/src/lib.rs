//! `monitor`: a node pressure agent with the kubelet's out-of-resource semantics, woken by
//! the kernel (eBPF ring buffer, memcg thresholds, memory.events, PSI) instead of a poll.
//!
//! Data path (one direction): [`notify`] sources → one wake channel → [`manager`] takes a
//! fresh [`observe`] snapshot → pure [`policy`] → actions.

pub mod agent;
pub mod config;
pub mod decide;
pub mod manager;
pub mod notify;
pub mod observe;
pub mod policy;
pub mod runtime;
pub mod simulate;
pub mod state;
