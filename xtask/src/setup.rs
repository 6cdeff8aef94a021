//! `cargo xtask setup`: installs, idempotently, what building the eBPF object needs on a
//! fresh machine of this kind: nightly's rust-src (for `-Z build-std=core`), LLVM 22
//! (Debian's llvm-22-dev) and bpf-linker 0.13 built against it; and, for the integration
//! tests' private containerd, Debian's containerd, runc and busybox-static; and promtool
//! (Debian's prometheus package) for the alert rules' tests. Each step
//! checks first and does nothing when its tool is already there. cargo-fuzz is installed
//! the same way, by `cargo xtask fuzz` when it runs (nothing else needs it).
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::cmd::{run, succeeds};

const BPF_LINKER_VERSION: &str = "0.13.0";
const LLVM_PACKAGE: &str = "llvm-22-dev";
const LLVM_PREFIX: &str = "/usr/lib/llvm-22";

/// Installs whatever is missing. Prints one line per step.
pub fn ensure() -> Result<()> {
    ensure_rust_src()?;
    ensure_llvm()?;
    ensure_bpf_linker()?;
    ensure_containerd()?;
    ensure_promtool()?;
    Ok(())
}

/// promtool, which checks and tests the alert rules of packaging/prometheus: Debian's
/// prometheus package, installed as containerd is (no service started, the unit it
/// enabled disabled on a systemd host).
fn ensure_promtool() -> Result<()> {
    if succeeds(Command::new("promtool").arg("--version")) {
        println!("setup: promtool: present");
        return Ok(());
    }
    println!("setup: promtool: installing Debian's prometheus package with apt-get");
    {
        let _no_starts = NoServiceStarts::install(std::path::Path::new(POLICY_RC_D))?;
        apt_install(&["prometheus"])?;
    }
    if std::path::Path::new("/run/systemd/system").exists() {
        run(Command::new("systemctl").args(["disable", "prometheus.service"]))?;
    }
    if !succeeds(Command::new("promtool").arg("--version")) {
        bail!("the prometheus package was installed but promtool does not run");
    }
    Ok(())
}

/// Adds the Rust target `target` (rustup) unless it is installed.
pub fn ensure_rust_target(target: &str) -> Result<()> {
    let out = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
        .context("running `rustup target list --installed` (is rustup installed?)")?;
    if String::from_utf8_lossy(&out.stdout)
        .lines()
        .any(|l| l.trim() == target)
    {
        return Ok(());
    }
    eprintln!("vm: adding Rust target {target}");
    run(Command::new("rustup").args(["target", "add", target]))
}

fn ensure_rust_src() -> Result<()> {
    let installed = Command::new("rustup")
        .args(["component", "list", "--toolchain", "nightly", "--installed"])
        .output()
        .context("running rustup (is the Rust toolchain installed with rustup?)")?;
    if !installed.status.success() {
        bail!(
            "the nightly toolchain is missing; it builds the eBPF programs ({})",
            String::from_utf8_lossy(&installed.stderr).trim()
        );
    }
    if String::from_utf8_lossy(&installed.stdout)
        .lines()
        .any(|l| l.starts_with("rust-src"))
    {
        println!("setup: nightly rust-src: present");
        return Ok(());
    }
    println!("setup: nightly rust-src: installing");
    run(Command::new("rustup").args(["component", "add", "rust-src", "--toolchain", "nightly"]))
}

fn ensure_llvm() -> Result<()> {
    if std::path::Path::new(LLVM_PREFIX)
        .join("bin/llvm-config")
        .exists()
    {
        println!("setup: {LLVM_PACKAGE}: present");
        return Ok(());
    }
    println!("setup: {LLVM_PACKAGE}: installing with apt-get");
    apt_install(&[LLVM_PACKAGE])
}

/// apt-get's arguments for installing packages unattended: nothing recommended, nothing
/// removed.
pub(crate) const APT_INSTALL: &[&str] = &[
    "install",
    "-y",
    "-q",
    "--no-install-recommends",
    "--no-remove",
];

/// Installs Debian packages (the lists refreshed first), never removing any.
fn apt_install(packages: &[&str]) -> Result<()> {
    run(Command::new("apt-get").args(["update", "-q"]))?;
    run(Command::new("apt-get")
        .args(APT_INSTALL)
        .args(packages)
        .env("DEBIAN_FRONTEND", "noninteractive"))
}

/// containerd (with ctr and containerd-shim-runc-v2), runc and a statically linked
/// /bin/busybox: the integration tests run a private containerd with images built from
/// that busybox (tests/src/containerd/). Installing them starts nothing: on a host run
/// by systemd, Debian's containerd package would enable and start the node's own
/// containerd.service, so the install runs with a `policy-rc.d` that refuses every start
/// (Debian's mechanism for image builds), and the unit it enabled is disabled after.
fn ensure_containerd() -> Result<()> {
    const PACKAGES: [&str; 3] = ["containerd", "runc", "busybox-static"];
    let present = succeeds(Command::new("containerd").arg("--version"))
        && succeeds(Command::new("runc").arg("--version"))
        && std::path::Path::new("/bin/busybox").exists();
    if present {
        println!("setup: containerd/runc/busybox-static: present");
        return Ok(());
    }
    println!("setup: containerd/runc/busybox-static: installing with apt-get");
    let systemd = std::path::Path::new("/run/systemd/system").exists();
    let had_containerd = succeeds(Command::new("containerd").arg("--version"));
    {
        let _no_starts = NoServiceStarts::install(std::path::Path::new(POLICY_RC_D))?;
        apt_install(&PACKAGES)?;
    }
    if systemd && !had_containerd {
        // Enabled by the package's maintainer scripts; never started (policy-rc.d).
        run(Command::new("systemctl").args(["disable", "containerd.service"]))?;
        println!(
            "setup: containerd.service installed but not started, and disabled: the tests run a private containerd"
        );
    }
    if !succeeds(Command::new("containerd").arg("--version"))
        || !succeeds(Command::new("runc").arg("--version"))
    {
        bail!("containerd and runc were installed but do not run");
    }
    Ok(())
}

/// Where Debian's maintainer scripts look for the local policy on starting services.
const POLICY_RC_D: &str = "/usr/sbin/policy-rc.d";

/// A `policy-rc.d` that refuses every service start (exit 101, "action forbidden") while
/// it lives; on drop the one that was there before comes back, or none.
struct NoServiceStarts {
    path: std::path::PathBuf,
    previous: Option<Vec<u8>>,
}

impl NoServiceStarts {
    fn install(path: &std::path::Path) -> Result<NoServiceStarts> {
        use std::os::unix::fs::PermissionsExt;
        let previous = std::fs::read(path).ok();
        std::fs::write(
            path,
            "#!/bin/sh\n# cargo xtask setup: no service starts during its installs\nexit 101\n",
        )
        .with_context(|| format!("writing {}", path.display()))?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
            .with_context(|| format!("making {} executable", path.display()))?;
        Ok(NoServiceStarts {
            path: path.to_path_buf(),
            previous,
        })
    }
}

impl Drop for NoServiceStarts {
    fn drop(&mut self) {
        let restored = match &self.previous {
            Some(previous) => std::fs::write(&self.path, previous),
            None => std::fs::remove_file(&self.path),
        };
        if let Err(err) = restored {
            eprintln!("setup: putting {} back: {err}", self.path.display());
        }
    }
}

/// cargo-fuzz (`cargo fuzz`), which builds and runs the fuzz targets of monitor/fuzz:
/// installed from crates.io when `cargo fuzz --version` fails.
pub fn ensure_cargo_fuzz() -> Result<()> {
    if succeeds(Command::new("cargo").args(["fuzz", "--version"])) {
        return Ok(());
    }
    println!("setup: cargo-fuzz: installing with cargo install (a few minutes)");
    run(Command::new("cargo").args(["install", "cargo-fuzz", "--locked"]))?;
    if !succeeds(Command::new("cargo").args(["fuzz", "--version"])) {
        bail!("cargo-fuzz was installed but `cargo fuzz` does not run; is ~/.cargo/bin on PATH?");
    }
    Ok(())
}

fn ensure_bpf_linker() -> Result<()> {
    let version = Command::new("bpf-linker").arg("--version").output();
    if let Ok(out) = &version {
        let text = String::from_utf8_lossy(&out.stdout);
        if out.status.success() && text.contains(BPF_LINKER_VERSION) {
            println!("setup: bpf-linker {BPF_LINKER_VERSION}: present");
            return Ok(());
        }
    }
    // Its default features ask for LLVM 23; rustc 1.97 nightly needs at least 22.
    println!("setup: bpf-linker {BPF_LINKER_VERSION}: building against LLVM 22 (about a minute)");
    run(Command::new("cargo")
        .args([
            "install",
            &format!("bpf-linker@{BPF_LINKER_VERSION}"),
            "--no-default-features",
            "--features",
            "llvm-22",
        ])
        .env("LLVM_PREFIX", LLVM_PREFIX))?;
    if !succeeds(Command::new("bpf-linker").arg("--version")) {
        bail!("bpf-linker was installed but does not run; is ~/.cargo/bin on PATH?");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// While the guard lives, the policy refuses every start (exit 101); after it, the
    /// previous policy is back, or none.
    #[test]
    fn no_service_starts_while_installing_and_the_old_policy_back_after() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("policy-rc.d");
        {
            let _guard = NoServiceStarts::install(&path).expect("install");
            let status = Command::new(&path)
                .args(["containerd.service", "start"])
                .status()
                .expect("run policy-rc.d");
            assert_eq!(status.code(), Some(101));
        }
        assert!(!path.exists(), "none before, none after");
        std::fs::write(&path, "#!/bin/sh\nexit 0\n").expect("write");
        {
            let _guard = NoServiceStarts::install(&path).expect("install");
            assert!(std::fs::read_to_string(&path).unwrap().contains("exit 101"));
        }
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "#!/bin/sh\nexit 0\n"
        );
    }
}
