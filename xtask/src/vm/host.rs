//! Installs, idempotently, what the VM run needs on the host: qemu, a static busybox,
//! containerd and runc (copied into the guest), debootstrap and cpio (the systemd node's
//! root filesystem) and the musl Rust target. Each item is checked first; nothing is installed twice.
//!
//! qemu-system-x86 comes from bookworm-backports through a private apt configuration under
//! `target/vm/apt/`: the build machines carry qemu-utils 10.x from backports, and
//! bookworm's qemu-system-x86 7.2 would remove it (a version clash via
//! qemu-system-common), so the system's sources are never modified and `--no-remove` is
//! always passed.
use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, Result};

use crate::cmd::run as run_checked;

/// Where busybox-static puts its binary.
pub const BUSYBOX: &str = "/bin/busybox";
/// Programs that build the systemd node's root filesystem, with their packages.
pub const NODE_TOOLS: [(&str, &str); 2] = [("debootstrap", "debootstrap"), ("cpio", "cpio")];
/// Debian suite that carries a qemu matching the preinstalled backports qemu-utils.
const BACKPORTS: &str = "bookworm-backports";

/// Makes sure qemu, busybox-static and the musl target are present.
pub fn ensure(vm_dir: &Path) -> Result<()> {
    let mut apt_packages = Vec::new();
    if which("qemu-system-x86_64").is_none() {
        apt_packages.push("qemu-system-x86".to_string());
    }
    if !dpkg_installed("busybox-static") || !Path::new(BUSYBOX).exists() {
        apt_packages.push("busybox-static".to_string());
    }
    if !containers_installed() {
        apt_packages.extend(["containerd".to_string(), "runc".to_string()]);
    }
    // The systemd node's root filesystem: built by debootstrap, packed by cpio.
    for (tool, package) in NODE_TOOLS {
        if system_tool(tool).is_none() {
            apt_packages.push(package.to_string());
        }
    }
    if !apt_packages.is_empty() {
        eprintln!("vm: installing {}", apt_packages.join(" "));
        let apt = PrivateApt::prepare(&vm_dir.join("apt"))?;
        apt.install(&apt_packages)?;
    }
    crate::setup::ensure_rust_target(crate::cmd::MUSL_TARGET)
}

/// An apt configuration of our own: bookworm, -updates, -backports and -security from the
/// mirrors the machine already uses, with lists and archives kept under `target/vm/apt/`.
struct PrivateApt {
    options: Vec<String>,
    lists: PathBuf,
}

impl PrivateApt {
    fn prepare(dir: &Path) -> Result<Self> {
        let lists = dir.join("lists");
        for sub in [
            lists.join("partial"),
            dir.join("archives/partial"),
            dir.join("cache"),
        ] {
            fs::create_dir_all(&sub).with_context(|| format!("creating {}", sub.display()))?;
        }
        let (mirror, security) = system_mirrors();
        let keyring = "/usr/share/keyrings/debian-archive-keyring.gpg";
        let mut sources = String::new();
        for suite in ["bookworm", "bookworm-updates", BACKPORTS] {
            sources.push_str(&format!(
                "deb [signed-by={keyring}] {mirror} {suite} main\n"
            ));
        }
        sources.push_str(&format!(
            "deb [signed-by={keyring}] {security} bookworm-security main\n"
        ));
        let list = dir.join("sources.list");
        fs::write(&list, sources).with_context(|| format!("writing {}", list.display()))?;
        let options = [
            format!("Dir::Etc::sourcelist={}", list.display()),
            "Dir::Etc::sourceparts=-".to_string(),
            format!("Dir::State::lists={}", lists.display()),
            format!("Dir::Cache::archives={}", dir.join("archives").display()),
            format!("Dir::Cache={}", dir.join("cache").display()),
        ]
        .into_iter()
        .flat_map(|o| ["-o".to_string(), o])
        .collect();
        Ok(Self { options, lists })
    }

    fn install(&self, packages: &[String]) -> Result<()> {
        let has_lists = fs::read_dir(&self.lists)
            .map(|entries| {
                entries
                    .flatten()
                    .any(|e| e.file_name().to_string_lossy().ends_with("InRelease"))
            })
            .unwrap_or(false);
        if !has_lists {
            self.update()?;
        }
        if self.apt_install(packages).is_err() {
            // Stale lists point at files the mirror no longer has: refresh once and retry.
            self.update()?;
            self.apt_install(packages)?;
        }
        Ok(())
    }

    fn update(&self) -> Result<()> {
        run_checked(
            Command::new("apt-get")
                .args(&self.options)
                .args(["update", "-q"]),
        )
    }

    fn apt_install(&self, packages: &[String]) -> Result<()> {
        run_checked(
            Command::new("apt-get")
                .env("DEBIAN_FRONTEND", "noninteractive")
                .args(&self.options)
                // Backports as the target release, so qemu's own dependencies
                // (qemu-system-common, -data, seabios) come from there too; packages that
                // backports lacks still come from bookworm.
                .args(["-t", BACKPORTS])
                .args(crate::setup::APT_INSTALL)
                .args(packages),
        )
    }
}

/// The main and security mirror URIs of the system's deb822 sources, falling back to
/// deb.debian.org.
pub(crate) fn system_mirrors() -> (String, String) {
    let text = fs::read_to_string("/etc/apt/sources.list.d/debian.sources").unwrap_or_default();
    mirrors_from_deb822(&text)
}

fn mirrors_from_deb822(text: &str) -> (String, String) {
    let uris: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("URIs:"))
        .flat_map(|v| v.split_whitespace())
        .collect();
    let security = uris.iter().find(|u| u.contains("security")).copied();
    let main = uris.iter().find(|u| !u.contains("security")).copied();
    (
        main.unwrap_or("http://deb.debian.org/debian").to_string(),
        security
            .unwrap_or("http://deb.debian.org/debian-security")
            .to_string(),
    )
}

fn dpkg_installed(package: &str) -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", package])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("ok installed"))
}

/// The first executable called `name` on PATH.
/// The container programs the guest gets from the host (Debian's containerd and runc).
pub const CONTAINER_PROGRAMS: &[&str] = &["containerd", "ctr", "containerd-shim-runc-v2", "runc"];

/// Whether every program of [`CONTAINER_PROGRAMS`] is on the host's PATH.
pub fn containers_installed() -> bool {
    CONTAINER_PROGRAMS.iter().all(|p| which(p).is_some())
}

/// A program on PATH or in the system directories a user's PATH may lack (debootstrap
/// is in /usr/sbin).
pub fn system_tool(name: &str) -> Option<PathBuf> {
    which(name).or_else(|| {
        ["/usr/sbin", "/sbin"]
            .iter()
            .map(|dir| Path::new(dir).join(name))
            .find(|p| p.is_file())
    })
}

pub fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|dir| Path::new(dir).join(name))
        .find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case::machine_sources(
        "Types: deb\nURIs: http://m.example/debian\nSuites: bookworm\n\nTypes: deb\nURIs: http://m.example/debian-security\n",
        "http://m.example/debian",
        "http://m.example/debian-security"
    )]
    #[case::no_file(
        "",
        "http://deb.debian.org/debian",
        "http://deb.debian.org/debian-security"
    )]
    #[case::security_first(
        "URIs: http://s.example/debian-security\nURIs: http://m.example/debian\n",
        "http://m.example/debian",
        "http://s.example/debian-security"
    )]
    fn mirrors_come_from_the_system_sources(
        #[case] text: &str,
        #[case] main: &str,
        #[case] security: &str,
    ) {
        assert_eq!(
            mirrors_from_deb822(text),
            (main.to_string(), security.to_string())
        );
    }
}
