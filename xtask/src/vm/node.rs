//! The systemd node: a Debian 12 root filesystem built here with debootstrap from Debian's
//! packages, booted on Debian 12's kernel with systemd as PID 1 and cgroup v2, where the
//! `systemd_node` test installs the agent's package and drives it with systemctl
//! (tests/tests/systemd_node.rs).
//!
//! The root filesystem is packed as a cpio archive (kept under `<target>/vm/node/` and
//! built again only when its recipe changes); each boot appends a second, small archive
//! with the run's files (the test binary, the hog, the package, the runner and its unit).
//! The kernel unpacks both into its initramfs and starts systemd from there
//! (`rdinit=`): no disk image, no root mount.
use std::{
    fs,
    io::{BufWriter, Write},
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{Context, Result, bail};

use super::{
    cpio, host,
    initramfs::{add_host_file, test_args_file},
    payload::Payload,
};
use crate::cmd::run as run_checked;

/// The test target that runs on the systemd node, and only there.
pub use super::payload::SYSTEMD_NODE_TEST as TEST;
/// The kernel series of the node: Debian 12's.
pub const KERNEL_SERIES: &str = "6.1";
/// Guest RAM: the unpacked root filesystem lives in it, beside the bounded pods.
pub const MEM: &str = "2G";
/// What systemd needs from the kernel command line: started from the initramfs, no
/// status lines or kernel messages between the runner's marker lines on the console.
pub const KERNEL_ARGS: &str = "rdinit=/lib/systemd/systemd systemd.show_status=false loglevel=1";

const SUITE: &str = "bookworm";
/// On top of debootstrap's minimal base: systemd as init, D-Bus for systemctl, and the
/// tools a node has (kmod, iproute2, procps).
const PACKAGES: &[&str] = &[
    "systemd",
    "systemd-sysv",
    "dbus",
    "kmod",
    "iproute2",
    "procps",
];
/// Raise when [`configure`] or [`prune`] change, so that cached root filesystems are
/// built again.
const RECIPE_VERSION: u32 = 1;

const RUNNER: &str = include_str!("../../vm/node-run.sh");
const RUNNER_UNIT: &str = include_str!("../../vm/xtask-vm-test.service");
const RUNNER_UNIT_NAME: &str = "xtask-vm-test.service";
/// Where in the node the runner looks for the test binaries.
const TESTS_DIR: &str = "xtask-vm/tests";
/// Where the node carries the helper programs (on PATH; `/bin` is Debian's, a link).
const BINS_DIR: &str = "usr/local/bin";

/// The node's root filesystem archive, built if missing or made by another recipe.
pub fn rootfs(vm_dir: &Path) -> Result<PathBuf> {
    let dir = vm_dir.join("node");
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let archive = dir.join(format!("rootfs-{SUITE}.cpio"));
    let stamp = dir.join(format!("rootfs-{SUITE}.recipe"));
    let recipe = recipe();
    if archive.exists() && fs::read_to_string(&stamp).ok().as_deref() == Some(recipe.as_str()) {
        return Ok(archive);
    }
    let tree = dir.join("rootfs");
    remove_tree(&tree)?;
    let (mirror, _) = host::system_mirrors();
    println!("vm: building the systemd node's root filesystem: debootstrap {SUITE} from {mirror}");
    let debootstrap = host::system_tool("debootstrap").context("debootstrap is not installed")?;
    let built = run_checked(
        Command::new(debootstrap)
            .args([
                "--variant=minbase",
                &format!("--include={}", PACKAGES.join(",")),
                SUITE,
            ])
            .arg(&tree)
            .arg(&mirror)
            // Its progress, a line per package; errors come on stderr.
            .stdout(Stdio::null()),
    );
    if let Err(e) = built {
        remove_tree(&tree)?;
        return Err(e.context(format!("debootstrap {SUITE} into {}", tree.display())));
    }
    prune(&tree)?;
    configure(&tree)?;
    let tmp = archive.with_extension("cpio.tmp");
    pack(&tree, &tmp)?;
    fs::rename(&tmp, &archive)
        .with_context(|| format!("moving {} to {}", tmp.display(), archive.display()))?;
    fs::write(&stamp, &recipe).with_context(|| format!("writing {}", stamp.display()))?;
    remove_tree(&tree)?;
    Ok(archive)
}

fn recipe() -> String {
    format!(
        "suite {SUITE}\npackages {}\nrecipe {RECIPE_VERSION}\n",
        PACKAGES.join(" ")
    )
}

/// Removes a half-built tree, first unmounting what a failed debootstrap may have left
/// mounted in it (its /proc and /sys), so that nothing of the host is deleted.
fn remove_tree(tree: &Path) -> Result<()> {
    if !tree.exists() {
        return Ok(());
    }
    let mounts = fs::read_to_string("/proc/self/mounts").context("reading /proc/self/mounts")?;
    let mut inside: Vec<&str> = mounts
        .lines()
        .filter_map(|l| l.split(' ').nth(1))
        .filter(|m| Path::new(m).starts_with(tree))
        .collect();
    inside.sort_by_key(|m| std::cmp::Reverse(m.len()));
    for mount in inside {
        run_checked(Command::new("umount").args(["--lazy", mount]))?;
    }
    fs::remove_dir_all(tree).with_context(|| format!("removing {}", tree.display()))
}

/// Drops what a test node never reads (documentation, translations, apt's caches and
/// lists): about half of the tree, and the archive lives in the guest's RAM.
fn prune(tree: &Path) -> Result<()> {
    for dir in [
        "usr/share/doc",
        "usr/share/man",
        "usr/share/info",
        "usr/share/locale",
        "var/cache/apt",
        "var/lib/apt/lists",
    ] {
        let dir = tree.join(dir);
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let removed = if entry.file_type().is_ok_and(|t| t.is_dir()) {
                fs::remove_dir_all(&path)
            } else {
                fs::remove_file(&path)
            };
            removed.with_context(|| format!("removing {}", path.display()))?;
        }
    }
    Ok(())
}

/// A node's identity, no login prompts on the consoles (the serial one carries the
/// test output), and the runner's unit enabled (the unit itself comes with each boot's
/// archive).
fn configure(tree: &Path) -> Result<()> {
    let write = |name: &str, text: &str| -> Result<()> {
        let path = tree.join(name);
        fs::write(&path, text).with_context(|| format!("writing {}", path.display()))
    };
    write("etc/hostname", "node\n")?;
    write("etc/hosts", "127.0.0.1 localhost node\n")?;
    let system = tree.join("etc/systemd/system");
    for masked in ["serial-getty@ttyS0.service", "getty@tty1.service"] {
        symlink("/dev/null", &system.join(masked))?;
    }
    let wants = system.join("multi-user.target.wants");
    fs::create_dir_all(&wants).with_context(|| format!("creating {}", wants.display()))?;
    symlink(
        &format!("/etc/systemd/system/{RUNNER_UNIT_NAME}"),
        &wants.join(RUNNER_UNIT_NAME),
    )
}

fn symlink(target: &str, link: &Path) -> Result<()> {
    let _ = fs::remove_file(link);
    std::os::unix::fs::symlink(target, link)
        .with_context(|| format!("linking {} to {target}", link.display()))
}

/// Packs `tree` with GNU cpio, which keeps what the tree holds (owners, modes, links,
/// device nodes) as debootstrap made it.
fn pack(tree: &Path, out: &Path) -> Result<()> {
    let file = fs::File::create(out).with_context(|| format!("creating {}", out.display()))?;
    let status = Command::new("sh")
        .args([
            "-c",
            "cd \"$1\" && find . -print0 | cpio --null --create --format=newc --quiet",
            "sh",
        ])
        .arg(tree)
        .stdout(file)
        .stderr(Stdio::inherit())
        .status()
        .context("running find | cpio (is cpio installed?)")?;
    if !status.success() {
        bail!("packing {} with cpio: {status}", tree.display());
    }
    Ok(())
}

/// Writes the boot's initramfs to `out`: the root filesystem archive followed by one
/// with this run's files.
pub fn initramfs(
    out: &Path,
    rootfs: &Path,
    payload: &Payload,
    test_args: &[String],
    env: &[String],
) -> Result<()> {
    let tmp = out.with_extension("tmp");
    let mut writer = BufWriter::new(
        fs::File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?,
    );
    let mut base =
        fs::File::open(rootfs).with_context(|| format!("opening {}", rootfs.display()))?;
    std::io::copy(&mut base, &mut writer)
        .with_context(|| format!("copying {} into {}", rootfs.display(), tmp.display()))?;
    let mut archive = cpio::Writer::new(writer);
    let context = || format!("writing {}", tmp.display());
    // The root filesystem's archive made etc, usr/local/bin and etc/systemd/system.
    for dir in ["xtask-vm", TESTS_DIR, "packages", "etc/xtask-vm"] {
        archive.dir(dir, 0o755).with_context(context)?;
    }
    archive
        .file(
            "xtask-vm/run",
            0o755,
            RUNNER.len() as u64,
            RUNNER.as_bytes(),
        )
        .with_context(context)?;
    archive
        .file(
            super::initramfs::RUN_TESTS_PATH,
            0o644,
            super::initramfs::RUN_TESTS.len() as u64,
            super::initramfs::RUN_TESTS.as_bytes(),
        )
        .with_context(context)?;
    let unit = format!("etc/systemd/system/{RUNNER_UNIT_NAME}");
    archive
        .file(
            &unit,
            0o644,
            RUNNER_UNIT.len() as u64,
            RUNNER_UNIT.as_bytes(),
        )
        .with_context(context)?;
    for test in &payload.tests {
        add_host_file(
            &mut archive,
            &format!("{TESTS_DIR}/{}", test.name),
            &test.path,
        )?;
    }
    for bin in &payload.bins {
        add_host_file(&mut archive, &format!("{BINS_DIR}/{}", bin.name), &bin.path)?;
    }
    for file in &payload.files {
        add_host_file(&mut archive, &file.name, &file.path)?;
    }
    for (name, lines) in [("test-args", test_args), ("env", env)] {
        let text = test_args_file(lines);
        archive
            .file(
                &format!("etc/xtask-vm/{name}"),
                0o644,
                text.len() as u64,
                text.as_bytes(),
            )
            .with_context(context)?;
    }
    let mut writer = archive.finish().with_context(context)?;
    writer.flush().with_context(context)?;
    drop(writer);
    fs::rename(&tmp, out).with_context(|| format!("moving {} to {}", tmp.display(), out.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_runner_speaks_the_markers_and_its_unit_starts_it() {
        let marker_definition = format!("M={}", super::super::report::MARKER);
        assert!(RUNNER.contains(&marker_definition));
        for word in ["KERNEL", "DONE", "mark_test_start()", "show_failure()"] {
            assert!(RUNNER.contains(word), "node-run.sh must contain {word}");
        }
        assert!(RUNNER.contains(&format!(
            ". /{}\nrun_tests /{TESTS_DIR}\n",
            super::super::initramfs::RUN_TESTS_PATH
        )));
        assert!(RUNNER_UNIT.contains("ExecStart=/xtask-vm/run\n"));
        assert!(RUNNER_UNIT.contains("WantedBy=multi-user.target"));
    }

    #[test]
    fn the_recipe_names_every_package() {
        let recipe = recipe();
        for package in PACKAGES {
            assert!(recipe.contains(package), "{recipe}");
        }
    }
}
