//! Which Debian kernels the VM boots, and their download cache under
//! `target/vm/kernels/<package>/` (the `./boot` directory of the package, never fetched
//! twice).
//!
//! Debian's cloud kernels are used because they boot from an initramfs with a serial
//! console and need no modules for cgroup v2, PSI, BPF, BTF and tracefs.
use std::{
    fs,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{Context, Result, bail};

use crate::cmd::run as run_checked;

/// A kernel series the matrix knows by name, and the meta package that points at its
/// current image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Series {
    pub name: &'static str,
    pub meta_package: &'static str,
}

/// The kernels `--kernel all` boots; the first is the default. 6.12 comes from
/// bookworm-security (the backports kernel that Debian now maintains there), 6.1 is
/// bookworm's own kernel.
pub const SERIES: [Series; 2] = [
    Series {
        name: "6.12",
        meta_package: "linux-image-6.12-cloud-amd64",
    },
    Series {
        name: "6.1",
        meta_package: "linux-image-cloud-amd64",
    },
];

/// What `--kernel` asked for, before asking apt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wanted {
    Series(Series),
    /// An exact image package such as `linux-image-6.1.0-56-cloud-amd64`.
    Package(String),
}

/// Expands the `--kernel` values: series names, `all`, or image package names.
pub fn parse_selection(values: &[String]) -> Result<Vec<Wanted>> {
    if values.is_empty() {
        return Ok(vec![Wanted::Series(SERIES[0])]);
    }
    let mut wanted = Vec::new();
    for value in values {
        let value = value.trim();
        let items: Vec<Wanted> = if value == "all" {
            SERIES.iter().copied().map(Wanted::Series).collect()
        } else if let Some(series) = SERIES.iter().find(|s| s.name == value) {
            vec![Wanted::Series(*series)]
        } else if value.starts_with("linux-image-") {
            vec![Wanted::Package(value.to_string())]
        } else {
            let names: Vec<&str> = SERIES.iter().map(|s| s.name).collect();
            bail!(
                "--kernel {value:?}: expected one of {}, `all`, or a Debian package name linux-image-*",
                names.join(", ")
            );
        };
        for item in items {
            if !wanted.contains(&item) {
                wanted.push(item);
            }
        }
    }
    Ok(wanted)
}

/// A kernel ready to boot.
#[derive(Debug, Clone)]
pub struct Kernel {
    /// The image package, e.g. `linux-image-6.12.117+deb12-cloud-amd64`.
    pub package: String,
    /// The release `uname -r` will print, from the image's file name.
    pub release: String,
    pub vmlinuz: PathBuf,
    /// `CONFIG_PSI_DEFAULT_DISABLED=y`: PSI must be switched on with `psi=1`.
    pub psi_off_by_default: bool,
    /// Modules the guest loads at boot ([`GUEST_MODULES`]), as the package ships them
    /// (possibly compressed).
    pub modules: Vec<PathBuf>,
}

/// Where, inside an image package, the modules the guest loads at boot are: overlayfs,
/// which containerd's default snapshotter needs, and the loop device, which gives tests
/// a block-backed filesystem (reclaimable page cache: the guest has no disk otherwise).
/// Debian builds both as modules.
const GUEST_MODULES: [&str; 2] = [
    "./lib/modules/*/kernel/fs/overlayfs/*",
    "./lib/modules/*/kernel/drivers/block/loop.ko*",
];

/// Each module directory of [`GUEST_MODULES`] (below `lib/modules/<release>`), with the
/// prefix its modules' file names start with.
const GUEST_MODULE_DIRS: [(&str, &str); 2] = [
    ("kernel/fs/overlayfs", ""),
    ("kernel/drivers/block", "loop.ko"),
];

/// Resolves `wanted` to an image package and makes sure it is unpacked in the cache.
pub fn fetch(wanted: &Wanted, kernels_dir: &Path) -> Result<Kernel> {
    let package = match wanted {
        Wanted::Package(p) => p.clone(),
        Wanted::Series(series) => resolve_meta(series.meta_package)?,
    };
    let dir = kernels_dir.join(&package);
    // A cache from before the guest's modules were kept is unpacked again.
    if find_vmlinuz(&dir).is_none() || find_modules(&dir).len() < GUEST_MODULE_DIRS.len() {
        download(&package, kernels_dir, &dir)?;
    }
    let vmlinuz = find_vmlinuz(&dir).with_context(|| {
        format!(
            "{}: the package {package} holds no boot/vmlinuz-*",
            dir.display()
        )
    })?;
    let release = vmlinuz
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_prefix("vmlinuz-"))
        .unwrap_or_default()
        .to_string();
    let config = dir.join("boot").join(format!("config-{release}"));
    let psi_off_by_default = fs::read_to_string(&config)
        .is_ok_and(|text| text.lines().any(|l| l == "CONFIG_PSI_DEFAULT_DISABLED=y"));
    let modules = find_modules(&dir);
    Ok(Kernel {
        package,
        release,
        vmlinuz,
        psi_off_by_default,
        modules,
    })
}

/// The unpacked modules of [`GUEST_MODULES`] under `dir` (`overlay.ko`, `loop.ko.xz`).
fn find_modules(dir: &Path) -> Vec<PathBuf> {
    let Ok(releases) = fs::read_dir(dir.join("lib/modules")) else {
        return Vec::new();
    };
    let releases: Vec<PathBuf> = releases.flatten().map(|r| r.path()).collect();
    let mut found: Vec<PathBuf> = releases
        .iter()
        .flat_map(|release| {
            GUEST_MODULE_DIRS.iter().flat_map(move |(sub, prefix)| {
                fs::read_dir(release.join(sub))
                    .into_iter()
                    .flat_map(|entries| entries.flatten().map(|e| e.path()))
                    .filter(move |p| {
                        p.file_name()
                            .and_then(|n| n.to_str())
                            .is_some_and(|n| n.contains(".ko") && n.starts_with(prefix))
                    })
            })
        })
        .collect();
    found.sort();
    found
}

/// The image package a meta package depends on, from apt's local lists (refreshed once if
/// they are missing, as on a fresh machine).
fn resolve_meta(meta: &str) -> Result<String> {
    if let Some(package) = apt_depends(meta) {
        return Ok(package);
    }
    eprintln!("vm: {meta} not in apt's lists; running apt-get update");
    run_checked(Command::new("apt-get").args(["update", "-q"]))?;
    apt_depends(meta)
        .with_context(|| format!("apt-cache depends {meta}: no linux-image-* dependency"))
}

fn apt_depends(meta: &str) -> Option<String> {
    let out = Command::new("apt-cache")
        .args(["depends", meta])
        .stderr(Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    image_dependency(&String::from_utf8_lossy(&out.stdout))
}

/// The first `Depends: linux-image-*` line of `apt-cache depends` output.
fn image_dependency(apt_cache_depends: &str) -> Option<String> {
    apt_cache_depends
        .lines()
        .filter_map(|l| {
            l.trim_start()
                .trim_start_matches('|')
                .strip_prefix("Depends:")
        })
        .map(str::trim)
        .find(|p| p.starts_with("linux-image-"))
        .map(str::to_string)
}

fn find_vmlinuz(dir: &Path) -> Option<PathBuf> {
    let mut found: Vec<PathBuf> = fs::read_dir(dir.join("boot"))
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("vmlinuz-"))
        })
        .collect();
    found.sort();
    found.into_iter().next()
}

/// `apt-get download` into a scratch directory, unpack `./boot` and the guest's modules,
/// then move them into place
/// so an interrupted run never leaves a half-unpacked kernel that looks cached.
fn download(package: &str, kernels_dir: &Path, dest: &Path) -> Result<()> {
    let scratch = kernels_dir.join(format!(".download-{package}"));
    if scratch.exists() {
        fs::remove_dir_all(&scratch).with_context(|| format!("removing {}", scratch.display()))?;
    }
    let unpacked = scratch.join("unpacked");
    fs::create_dir_all(&unpacked).with_context(|| format!("creating {}", unpacked.display()))?;
    eprintln!("vm: downloading {package}");
    let deb = crate::cmd::apt_download(package, &scratch)?;
    let mut dpkg = Command::new("dpkg-deb")
        .arg("--fsys-tarfile")
        .arg(&deb)
        .stdout(Stdio::piped())
        .spawn()
        .context("running dpkg-deb")?;
    let tar_input = dpkg.stdout.take().context("dpkg-deb stdout")?;
    let tar = Command::new("tar")
        // GNU tar applies -C only to the member names after it.
        .arg("-C")
        .arg(&unpacked)
        .args(["-x", "--wildcards", "./boot/*"])
        .args(GUEST_MODULES)
        .stdin(tar_input)
        .status()
        .context("running tar")?;
    let dpkg_status = dpkg.wait().context("waiting for dpkg-deb")?;
    if !tar.success() || !dpkg_status.success() {
        bail!(
            "unpacking {}: dpkg-deb {dpkg_status}, tar {tar}",
            deb.display()
        );
    }
    if dest.exists() {
        fs::remove_dir_all(dest).with_context(|| format!("removing {}", dest.display()))?;
    }
    fs::rename(&unpacked, dest)
        .with_context(|| format!("moving {} to {}", unpacked.display(), dest.display()))?;
    fs::remove_dir_all(&scratch).with_context(|| format!("removing {}", scratch.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[rstest]
    #[case::default_is_6_12(&[], &["6.12"])]
    #[case::one_series(&["6.1"], &["6.1"])]
    #[case::all_is_the_matrix(&["all"], &["6.12", "6.1"])]
    #[case::duplicates_boot_once(&["6.1", "all", "6.1"], &["6.1", "6.12"])]
    fn series_selection(#[case] values: &[&str], #[case] expected: &[&str]) {
        let wanted = parse_selection(&strings(values)).expect("valid selection");
        let names: Vec<&str> = wanted
            .iter()
            .map(|w| match w {
                Wanted::Series(s) => s.name,
                Wanted::Package(p) => panic!("{values:?} gave package {p}"),
            })
            .collect();
        assert_eq!(names, expected, "--kernel {values:?}");
    }

    #[test]
    fn a_package_name_is_taken_as_is() {
        let wanted =
            parse_selection(&strings(&["linux-image-6.1.0-56-cloud-amd64"])).expect("valid");
        assert_eq!(
            wanted,
            vec![Wanted::Package(
                "linux-image-6.1.0-56-cloud-amd64".to_string()
            )]
        );
    }

    #[rstest]
    #[case::unknown_series("5.10")]
    #[case::not_an_image("linux-headers-6.1")]
    fn unknown_kernels_are_refused_with_the_choices(#[case] value: &str) {
        let err = parse_selection(&strings(&[value])).expect_err("must be refused");
        let text = err.to_string();
        assert!(
            text.contains(value) && text.contains("6.12"),
            "error {text:?} names the value and the choices"
        );
    }

    #[rstest]
    #[case::meta(
        "linux-image-6.12-cloud-amd64\n  Depends: linux-image-6.12.117+deb12-cloud-amd64\n",
        Some("linux-image-6.12.117+deb12-cloud-amd64")
    )]
    #[case::alternatives(
        "linux-image-cloud-amd64\n |Depends: linux-image-6.1.0-56-cloud-amd64\n  Depends: linux-image-6.1.0-55-cloud-amd64\n",
        Some("linux-image-6.1.0-56-cloud-amd64")
    )]
    #[case::other_deps_first(
        "x\n  Depends: initramfs-tools\n  Depends: linux-image-6.1.0-1-amd64\n",
        Some("linux-image-6.1.0-1-amd64")
    )]
    #[case::none("x\n  Depends: initramfs-tools\n", None)]
    fn image_package_from_apt_cache_depends(#[case] text: &str, #[case] expected: Option<&str>) {
        assert_eq!(image_dependency(text).as_deref(), expected);
    }
}
