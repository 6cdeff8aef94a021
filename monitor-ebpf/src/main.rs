//! Kernel-side programs of the agent. Each program lives in its own file under `programs/`,
//! is a thin wrapper around a `try_` function, and reports through [`emit::emit`] into the
//! one ring buffer declared in [`maps`].
//!
//! Attach type: classic tracepoints (`BPF_PROG_TYPE_TRACEPOINT`). They need tracefs to
//! look up the event ids; the agent mounts it at /sys/kernel/tracing when it is not
//! mounted. Minimum kernel: 5.8 (BPF ring buffer); every tracepoint used exists since 4.x.
#![no_std]
#![no_main]

mod emit;
mod maps;
mod programs;

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    // The verifier rejects any reachable panic path, so this is never reached at run time.
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
