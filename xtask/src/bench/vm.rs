//! The race on cgroup v2 and the earlyoom peer, in the throw-away VM of `cargo xtask vm`
//! (Debian kernel, busybox initramfs). The guest runs this same program, built static for
//! musl, as `xtask bench --guest` from /tests/bench; results come back on the console.
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};

use super::guest;
use super::peer;
use super::race::Trial;
use crate::vm::{host, initramfs, kernel, payload, qemu};

pub(crate) struct VmRun {
    pub(crate) trials: Vec<Trial>,
    pub(crate) kernel: String,
    pub(crate) accel: String,
}

fn build_static(root: &Path, target: &Path, package: &str, bin: &str) -> Result<PathBuf> {
    crate::cmd::run(crate::cmd::cargo().current_dir(root).args([
        "build",
        "--release",
        "-p",
        package,
        "--bin",
        bin,
        "--target",
        host::MUSL_TARGET,
    ]))?;
    let path = target.join(host::MUSL_TARGET).join("release").join(bin);
    path.exists().then_some(path.clone()).with_context(|| {
        format!(
            "cargo build -p {package} --bin {bin} left no {}",
            path.display()
        )
    })
}

pub(crate) fn run(root: &Path, target: &Path, modes: &[String], trials: u32) -> Result<VmRun> {
    let vm_dir = target.join("vm");
    let kernels_dir = vm_dir.join("kernels");
    std::fs::create_dir_all(&kernels_dir)
        .with_context(|| format!("creating {}", kernels_dir.display()))?;
    host::ensure(&vm_dir)?;
    let wanted = kernel::parse_selection(&[])?;
    let wanted = wanted.first().context("no default kernel series")?;
    let kernel = kernel::fetch(wanted, &kernels_dir)?;

    let mut bins = Vec::new();
    for (package, bin) in [
        ("monitor", "monitor"),
        ("monitor-tests", "hog"),
        // The kernel's stamps of each crossing (see super::probe).
        ("monitor-tests", "crossing-probe"),
        ("xtask", "xtask"),
    ] {
        bins.push(payload::Executable {
            name: bin.to_string(),
            path: build_static(root, target, package, bin)?,
        });
    }
    for (name, path) in peer::fetch(&target.join("bench/earlyoom"))? {
        bins.push(payload::Executable { name, path });
    }
    let script = target.join("bench/guest-bench.sh");
    let modes_arg = if modes.is_empty() {
        String::new()
    } else {
        format!(" --modes {}", modes.join(","))
    };
    // The init script passes test-runner flags; the benchmark takes its own.
    std::fs::write(
        &script,
        format!("#!/bin/sh\nexec /bin/xtask bench --guest --trials {trials}{modes_arg}\n"),
    )
    .with_context(|| format!("writing {}", script.display()))?;
    let payload = payload::Payload {
        tests: vec![payload::Executable {
            name: "bench".into(),
            path: script,
        }],
        bins,
        files: Vec::new(),
    };
    let image = vm_dir.join(format!("bench-initramfs-{}.cpio", std::process::id()));
    initramfs::write(&image, &payload, &[], &[])?;
    let accel = qemu::choose_accel(qemu::Accel::Auto, qemu::KvmProbe::of_this_host());
    // 7 modes on the pods cgroup, 3 of the agent's and earlyoom on the node: 11 sets of
    // `trials` races; under emulation a race takes seconds.
    let timeout = Duration::from_secs(300 + 30 * 11 * u64::from(trials));
    let outcome = qemu::boot(&qemu::Boot {
        kernel: &kernel,
        initramfs: &image,
        accel,
        mem: "2G",
        cpus: 2,
        timeout,
    });
    let _ = std::fs::remove_file(&image);
    let outcome = outcome?;
    Ok(VmRun {
        trials: guest::collect(&outcome.console),
        kernel: outcome.report.kernel_release.unwrap_or(kernel.release),
        accel: format!("{accel:?}"),
    })
}
