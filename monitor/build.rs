//! Builds the kernel-side programs (`monitor-ebpf`) for the bpf target with aya-build and
//! leaves the object at `$OUT_DIR/monitor-ebpf`, which `src/notify/ebpf.rs` embeds.
//!
//! `AYA_BUILD_SKIP=1` skips the eBPF build (for machines without the nightly toolchain
//! and bpf-linker, and for quick policy-only work): an empty object is embedded and the
//! agent reports at startup that its eBPF source is unavailable.
use std::{env, fs, path::PathBuf};

fn main() -> anyhow::Result<()> {
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let object = out_dir.join("monitor-ebpf");
    let skip = env::var("AYA_BUILD_SKIP").is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true"));
    println!("cargo:rerun-if-env-changed=AYA_BUILD_SKIP");
    if skip {
        fs::write(&object, [])?;
        return Ok(());
    }
    let ebpf_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR")?).join("../monitor-ebpf");
    let ebpf_dir = ebpf_dir.canonicalize()?;
    let root_dir = ebpf_dir.to_str().expect("utf-8 path");
    aya_build::build_ebpf(
        [aya_build::Package {
            name: "monitor-ebpf",
            root_dir,
            ..Default::default()
        }],
        aya_build::Toolchain::default(),
    )
}
