//! The benchmark's races on cgroup v2 and its earlyoom peer, in the throw-away VM (Debian
//! kernel, busybox initramfs). The guest runs this same program, built static for musl, as
//! `xtask bench --guest` from /tests/bench; results come back on the console.
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use monitor_bench::{GuestPlan, VmRun};

use super::{containers, host, initramfs, kernel, payload, qemu};

pub(crate) fn run(root: &Path, target: &Path, plan: &GuestPlan) -> Result<VmRun> {
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
        // The kernel's stamps of each crossing.
        ("monitor-tests", "crossing-probe"),
        // The detector's cost to an allocating hog.
        ("monitor-tests", "detector-cost"),
        ("xtask", "xtask"),
    ] {
        bins.push(payload::Executable {
            name: bin.to_string(),
            path: crate::cmd::build_static(root, package, bin)?,
        });
    }
    for (name, path) in fetch_earlyoom(&target.join("bench/earlyoom"))? {
        bins.push(payload::Executable { name, path });
    }
    let script = target.join("bench/guest-bench.sh");
    // The init script passes test-runner flags; the benchmark takes its own.
    std::fs::write(&script, format!("#!/bin/sh\nexec {}\n", plan.command()))
        .with_context(|| format!("writing {}", script.display()))?;
    let payload = payload::Payload {
        tests: vec![payload::Executable {
            name: "bench".into(),
            path: script,
        }],
        bins,
        // The loop device: the relief races' page cache needs a block device under it.
        files: containers::modules(std::slice::from_ref(&kernel), &vm_dir.join("modules"))?,
    };
    let image = vm_dir.join(format!("bench-initramfs-{}.cpio", std::process::id()));
    initramfs::write(&image, &payload, &[], &[])?;
    let accel = qemu::choose_accel(qemu::Accel::Auto, qemu::KvmProbe::of_this_host());
    // Under emulation a race takes seconds.
    let timeout = Duration::from_secs(300 + 30 * plan.race_sets() * u64::from(plan.trials));
    let instruction_clock = plan.instruction_clock() && accel != qemu::Accel::Kvm;
    let outcome = qemu::boot(&qemu::Boot {
        kernel: &kernel,
        initramfs: &image,
        accel,
        mem: "2G",
        cpus: 2,
        timeout,
        append: "",
        instruction_clock,
    });
    let _ = std::fs::remove_file(&image);
    let outcome = outcome?;
    Ok(VmRun {
        console: outcome.console,
        kernel: outcome.report.kernel_release.unwrap_or(kernel.release),
        accel: if instruction_clock {
            format!(
                "{accel:?}, {}",
                monitor_bench::detector_cost::INSTRUCTIONS_COUNTED
            )
        } else {
            format!("{accel:?}")
        },
    })
}

/// earlyoom from the Debian archive, unpacked under `dir` (not installed: no service on
/// the host), with the shared libraries and the loader it needs (from ldd). Returns the
/// files to copy into the guest's /bin: (name, host path).
fn fetch_earlyoom(dir: &Path) -> Result<Vec<(String, PathBuf)>> {
    let binary = dir.join("usr/bin/earlyoom");
    if !binary.exists() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let deb = crate::cmd::apt_download("earlyoom", dir)?;
        crate::cmd::run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(dir))?;
    }
    let out = Command::new("ldd")
        .arg(&binary)
        .output()
        .with_context(|| format!("running ldd {}", binary.display()))?;
    let mut files = vec![("earlyoom".to_string(), binary.clone())];
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let path = match line.split_once("=>") {
            Some((_, right)) => right.split_whitespace().next(),
            None => line.split_whitespace().next(),
        };
        let Some(path) = path.filter(|p| p.starts_with('/')) else {
            continue;
        };
        let path = PathBuf::from(path);
        if let Some(name) = path.file_name() {
            files.push((name.to_string_lossy().to_string(), path.clone()));
        }
    }
    if !files.iter().any(|(n, _)| n.starts_with("ld-linux")) {
        bail!("ldd {} named no dynamic loader", binary.display());
    }
    Ok(files)
}
