//! Host-side stub: the real programs are the `monitor` binary of this crate, built for the
//! bpf target by `monitor/build.rs`.
#![no_std]
