//! The Debian package of the agent: the static binary, the hardened systemd unit, a
//! default node configuration (a conffile), the man page, shell completions and the
//! copyright. Built by Debian's `dpkg-deb` with gzip members: busybox's dpkg (the VM
//! guest's) reads those, and every dpkg does.
use std::{
    fs,
    io::Write,
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{Context, Result, bail};

use crate::cmd::run as run_checked;

/// The unit, the default configuration and the maintainer scripts, kept in the repository.
const UNIT: &str = include_str!("../../../packaging/monitor.service");
const CONFIG: &str = include_str!("../../../packaging/config.yaml");
const POSTINST: &str = include_str!("../../../packaging/debian/postinst");
const PRERM: &str = include_str!("../../../packaging/debian/prerm");
const POSTRM: &str = include_str!("../../../packaging/debian/postrm");
/// Debian's changelog of the package; its top entry's version must be the workspace's.
const CHANGELOG: &str = include_str!("../../../packaging/debian/changelog");
/// The alert rules and the dashboard, shipped as examples an operator copies into their
/// Prometheus and Grafana.
const EXAMPLES: [(&str, &str); 2] = [
    (
        "usr/share/doc/monitor/examples/prometheus/monitor.rules.yaml",
        include_str!("../../../packaging/prometheus/monitor.rules.yaml"),
    ),
    (
        "usr/share/doc/monitor/examples/grafana/monitor.dashboard.json",
        include_str!("../../../packaging/grafana/monitor.dashboard.json"),
    ),
];

/// The package's version: the workspace's.
fn version(workspace: &Path) -> Result<String> {
    crate::cmd::metadata(workspace)?["packages"]
        .as_array()
        .and_then(|packages| {
            packages
                .iter()
                .find(|p| p["name"] == "monitor")
                .and_then(|p| p["version"].as_str())
        })
        .map(str::to_string)
        .context("cargo metadata lists no version of the monitor package")
}

/// The version of the changelog's top entry: `monitor (VERSION) suite; urgency=...`.
fn changelog_version(changelog: &str) -> Option<&str> {
    let first = changelog.lines().next()?;
    let rest = first.strip_prefix("monitor (")?;
    Some(&rest[..rest.find(')')?])
}

/// Writes `out/monitor`, `out/monitor.service` and `out/monitor_<version>_amd64.deb`
/// for `binary` (a static build of the agent); returns the package's path.
pub fn package(workspace: &Path, binary: &Path, out: &Path) -> Result<PathBuf> {
    let version = version(workspace)?;
    if changelog_version(CHANGELOG) != Some(version.as_str()) {
        bail!(
            "packaging/debian/changelog: its top entry is not for version {version} (the \
             workspace's): add an entry for it"
        );
    }
    fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    copy(binary, &out.join("monitor"), 0o755)?;
    write(&out.join("monitor.service"), UNIT.as_bytes(), 0o644)?;

    let root = out.join(format!("monitor_{version}_amd64"));
    if root.exists() {
        fs::remove_dir_all(&root).with_context(|| format!("removing {}", root.display()))?;
    }
    stage(workspace, binary, &root, &version)?;
    let deb = out.join(format!("monitor_{version}_amd64.deb"));
    let mut build = Command::new("dpkg-deb");
    build
        .args(["--root-owner-group", "-Zgzip", "-z9", "--build"])
        .arg(&root)
        .arg(&deb)
        .stdout(Stdio::null());
    // Same inputs, same bytes: file times are clamped to the last commit's.
    if let Some(epoch) = source_date_epoch(workspace) {
        build.env("SOURCE_DATE_EPOCH", epoch);
    }
    run_checked(&mut build).context("dpkg-deb (Debian's dpkg package) builds the package")?;
    fs::remove_dir_all(&root).with_context(|| format!("removing {}", root.display()))?;
    Ok(deb)
}

/// The package's file tree under `root`, DEBIAN/ (control, conffiles, scripts, md5sums)
/// included.
fn stage(workspace: &Path, binary: &Path, root: &Path, version: &str) -> Result<()> {
    copy(binary, &root.join("usr/bin/monitor"), 0o755)?;
    write(
        &root.join("lib/systemd/system/monitor.service"),
        UNIT.as_bytes(),
        0o644,
    )?;
    write(
        &root.join("etc/monitor/config.yaml"),
        CONFIG.as_bytes(),
        0o644,
    )?;
    // The manifest directory, empty: the pods are the node's.
    mkdir(&root.join("etc/monitor/pods"))?;

    let man = generated(binary, &["man"])?;
    write(
        &root.join("usr/share/man/man8/monitor.8.gz"),
        &gzip(&man)?,
        0o644,
    )?;
    for (shell, path) in COMPLETIONS {
        let script = generated(binary, &["completions", shell])?;
        write(&root.join(path), &script, 0o644)?;
    }
    write(
        &root.join("usr/share/doc/monitor/copyright"),
        copyright(workspace)?.as_bytes(),
        0o644,
    )?;
    write(
        &root.join("usr/share/doc/monitor/changelog.Debian.gz"),
        &gzip(CHANGELOG.as_bytes())?,
        0o644,
    )?;
    for (path, text) in EXAMPLES {
        write(&root.join(path), text.as_bytes(), 0o644)?;
    }

    let debian = root.join("DEBIAN");
    let md5sums = md5sums(root)?;
    write(&debian.join("md5sums"), md5sums.as_bytes(), 0o644)?;
    write(
        &debian.join("control"),
        control(version, installed_size_kib(root)?).as_bytes(),
        0o644,
    )?;
    write(
        &debian.join("conffiles"),
        b"/etc/monitor/config.yaml\n",
        0o644,
    )?;
    write(&debian.join("postinst"), POSTINST.as_bytes(), 0o755)?;
    write(&debian.join("prerm"), PRERM.as_bytes(), 0o755)?;
    write(&debian.join("postrm"), POSTRM.as_bytes(), 0o755)?;
    Ok(())
}

/// Completion scripts `monitor completions SHELL` prints, where each shell looks for
/// packaged ones.
const COMPLETIONS: [(&str, &str); 3] = [
    ("bash", "usr/share/bash-completion/completions/monitor"),
    ("zsh", "usr/share/zsh/vendor-completions/_monitor"),
    ("fish", "usr/share/fish/vendor_completions.d/monitor.fish"),
];

fn control(version: &str, installed_size_kib: u64) -> String {
    format!(
        "Package: monitor\n\
         Version: {version}\n\
         Architecture: amd64\n\
         Maintainer: monitor developers <monitor@localhost>\n\
         Installed-Size: {installed_size_kib}\n\
         Section: admin\n\
         Priority: optional\n\
         Description: node pressure agent with the kubelet's eviction semantics\n \
         Keeps a node out of the kernel OOM killer and out of full disks with the\n \
         kubelet's out-of-resource semantics (eviction signals and thresholds, grace\n \
         periods, node conditions, pod ranking, admission), woken by the kernel (eBPF,\n \
         memcg notifiers, PSI) the moment pressure appears instead of polling.\n \
         .\n \
         A static binary with its eBPF programs embedded, and a hardened systemd unit.\n"
    )
}

/// The Debian copyright file (machine-readable format) for the workspace's licence,
/// MIT OR Apache-2.0, with the MIT text in full and Apache-2.0 from common-licenses.
fn copyright(workspace: &Path) -> Result<String> {
    let mit_path = workspace.join("LICENSE-MIT");
    let mit =
        fs::read_to_string(&mit_path).with_context(|| format!("reading {}", mit_path.display()))?;
    // "MIT License", "Copyright (c) <holders>", then the licence's text.
    let (holders, licence) = mit
        .split_once("Copyright (c) ")
        .and_then(|(_, rest)| rest.split_once('\n'))
        .with_context(|| format!("{}: no \"Copyright (c) \" line", mit_path.display()))?;
    let mut text = format!(
        "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n\
         Upstream-Name: monitor\n\n\
         Files: *\n\
         Copyright: {}\n\
         License: MIT or Apache-2.0\n\n\
         License: MIT\n",
        holders.trim()
    );
    text.push_str(&debian_paragraph(licence));
    text.push_str(
        "\nLicense: Apache-2.0\n \
         On Debian systems, the complete text of the Apache License, Version 2.0 can be\n \
         found in /usr/share/common-licenses/Apache-2.0.\n",
    );
    Ok(text)
}

/// A text as the continuation lines of a control field: indented, blank lines as " .".
fn debian_paragraph(text: &str) -> String {
    text.trim()
        .lines()
        .map(|line| {
            if line.trim().is_empty() {
                " .\n".to_string()
            } else {
                format!(" {line}\n")
            }
        })
        .collect()
}

/// What `monitor ARGS` prints, the binary being packaged (a static build runs here).
fn generated(binary: &Path, args: &[&str]) -> Result<Vec<u8>> {
    let out = Command::new(binary)
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .with_context(|| format!("running {} {}", binary.display(), args.join(" ")))?;
    if !out.status.success() || out.stdout.is_empty() {
        bail!(
            "{} {} failed ({}): {}",
            binary.display(),
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(out.stdout)
}

/// `gzip -9n`: Debian's man pages are compressed, without a name or time stamp inside.
fn gzip(data: &[u8]) -> Result<Vec<u8>> {
    let mut child = Command::new("gzip")
        .arg("-9n")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .context("starting gzip")?;
    let mut stdin = child.stdin.take().context("gzip stdin")?;
    let input = data.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let out = child.wait_with_output().context("waiting for gzip")?;
    writer
        .join()
        .map_err(|_| anyhow::anyhow!("gzip writer panicked"))?
        .context("writing to gzip")?;
    if !out.status.success() {
        bail!("gzip -9n failed: {}", out.status);
    }
    Ok(out.stdout)
}

/// DEBIAN/md5sums: one `<md5>  <path>` line per file, as dpkg --verify reads it.
fn md5sums(root: &Path) -> Result<String> {
    let files = files_under(root)?;
    let relative: Vec<String> = files
        .iter()
        .filter_map(|f| f.strip_prefix(root).ok())
        .map(|p| p.display().to_string())
        .collect();
    let out = Command::new("md5sum")
        .args(&relative)
        .current_dir(root)
        .output()
        .context("running md5sum")?;
    if !out.status.success() {
        bail!("md5sum failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    String::from_utf8(out.stdout).context("md5sum's output")
}

/// Installed-Size: the files' sizes in KiB, rounded up per file as dpkg-gencontrol does.
fn installed_size_kib(root: &Path) -> Result<u64> {
    let mut kib = 0;
    for file in files_under(root)? {
        let len = fs::metadata(&file)
            .with_context(|| format!("stat {}", file.display()))?
            .len();
        kib += len.div_ceil(1024);
    }
    Ok(kib)
}

/// Every regular file under `root` except DEBIAN/, sorted.
fn files_under(root: &Path) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in fs::read_dir(&dir).with_context(|| format!("listing {}", dir.display()))? {
            let entry = entry.with_context(|| format!("listing {}", dir.display()))?;
            let path = entry.path();
            if path == root.join("DEBIAN") {
                continue;
            }
            if entry.file_type()?.is_dir() {
                dirs.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files.sort();
    Ok(files)
}

/// The last commit's time, for reproducible file times; none outside a git checkout.
fn source_date_epoch(workspace: &Path) -> Option<String> {
    let out = Command::new("git")
        .args(["log", "-1", "--format=%ct"])
        .current_dir(workspace)
        .output()
        .ok()?;
    let epoch = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && !epoch.is_empty()).then_some(epoch)
}

fn mkdir(dir: &Path) -> Result<()> {
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o755))
        .with_context(|| format!("chmod {}", dir.display()))
}

fn write(path: &Path, data: &[u8], mode: u32) -> Result<()> {
    if let Some(parent) = path.parent() {
        mkdir(parent)?;
    }
    fs::write(path, data).with_context(|| format!("writing {}", path.display()))?;
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .with_context(|| format!("chmod {}", path.display()))
}

fn copy(from: &Path, to: &Path, mode: u32) -> Result<()> {
    if let Some(parent) = to.parent() {
        mkdir(parent)?;
    }
    fs::copy(from, to)
        .with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
    fs::set_permissions(to, fs::Permissions::from_mode(mode))
        .with_context(|| format!("chmod {}", to.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::workspace_root;

    /// The packaged unit's values of `key`.
    fn unit_values(key: &str) -> Vec<String> {
        monitor_bench::util::unit_values(UNIT, key)
    }

    #[test]
    fn the_unit_restarts_always_and_is_the_last_the_oom_killer_picks() {
        assert_eq!(unit_values("Restart"), ["always"]);
        assert_eq!(unit_values("StartLimitIntervalSec"), ["0"]);
        assert_eq!(unit_values("OOMScoreAdjust"), ["-999"]);
        assert_eq!(
            unit_values("ExecStart"),
            ["/usr/bin/monitor run --config /etc/monitor/config.yaml"]
        );
    }

    #[test]
    fn the_unit_grants_exactly_the_capabilities_it_justifies() {
        let granted: Vec<String> = unit_values("CapabilityBoundingSet")
            .iter()
            .flat_map(|v| v.split_whitespace().map(str::to_string).collect::<Vec<_>>())
            .collect();
        assert_eq!(
            granted,
            [
                "CAP_BPF",
                "CAP_PERFMON",
                "CAP_SYS_ADMIN",
                "CAP_KILL",
                "CAP_SYS_RESOURCE",
                "CAP_DAC_OVERRIDE"
            ]
        );
        for cap in &granted {
            assert!(
                UNIT.lines()
                    .any(|l| l.starts_with('#') && l.contains(cap.as_str())),
                "{cap} is granted without a comment saying why"
            );
        }
        assert!(
            unit_values("AmbientCapabilities").is_empty(),
            "runs as root"
        );
        assert_eq!(unit_values("NoNewPrivileges"), ["yes"]);
        // What the bounding set leaves out comes from limits instead.
        assert_eq!(unit_values("LimitRTPRIO"), ["11"]);
        assert_eq!(unit_values("LimitMEMLOCK"), ["infinity"]);
    }

    #[test]
    fn the_sandbox_leaves_the_agent_what_it_writes() {
        assert_eq!(unit_values("ProtectKernelTunables"), ["yes"]);
        assert_eq!(unit_values("ReadWritePaths"), ["/sys/fs/cgroup"]);
        assert_eq!(unit_values("ProtectSystem"), ["full"]);
        for forbidden in [
            "ProtectControlGroups",
            "RestrictRealtime",
            "PrivateDevices",
            "ProtectProc",
            "MemoryDenyWriteExecute",
        ] {
            assert!(
                unit_values(forbidden).is_empty(),
                "{forbidden} would break the agent"
            );
        }
        // The directories the configuration names are the ones the unit creates.
        assert_eq!(unit_values("StateDirectory"), ["monitor"]);
        assert_eq!(unit_values("RuntimeDirectory"), ["monitor"]);
        assert_eq!(unit_values("LogsDirectory"), ["monitor"]);
        for line in [
            "stateDir: /var/lib/monitor",
            "socket: /run/monitor/monitor.sock",
            "podLogDir: /var/log/monitor/pods",
        ] {
            assert!(CONFIG.contains(line), "config.yaml must have {line}");
        }
    }

    /// systemd's own check of the unit (skipped where systemd-analyze is not installed),
    /// with ExecStart pointed at a stand-in binary: verify wants the command to exist.
    #[test]
    fn systemd_analyze_verifies_the_unit() {
        if !crate::cmd::succeeds(Command::new("systemd-analyze").arg("--version")) {
            println!("SKIP: systemd_analyze_verifies_the_unit: systemd-analyze is not installed");
            return;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let binary = dir.path().join("monitor");
        write(&binary, b"#!/bin/sh\nexit 0\n", 0o755).unwrap();
        let unit = dir.path().join("monitor.service");
        let text = UNIT.replace(
            "ExecStart=/usr/bin/monitor ",
            &format!("ExecStart={} ", binary.display()),
        );
        assert_ne!(text, UNIT, "ExecStart runs /usr/bin/monitor");
        write(&unit, text.as_bytes(), 0o644).unwrap();
        let out = Command::new("systemd-analyze")
            .args(["verify", "--man=no", "--generators=no"])
            .arg(&unit)
            .output()
            .expect("systemd-analyze");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && stderr.trim().is_empty(),
            "systemd-analyze verify: {}\n{stderr}",
            out.status
        );
    }

    #[test]
    fn maintainer_scripts_are_valid_posix_shell_and_guard_systemctl() {
        for (name, script) in [("postinst", POSTINST), ("prerm", PRERM), ("postrm", POSTRM)] {
            assert!(script.starts_with("#!/bin/sh\n"), "{name}");
            let status = Command::new("sh")
                .args(["-n", "-c", script])
                .status()
                .expect("sh");
            assert!(status.success(), "{name} does not parse");
            // Without systemd (a container, the VM) the scripts must not fail, and into
            // another root (DPKG_ROOT: an image being built) they start nothing.
            for line in script
                .lines()
                .filter(|l| l.contains("systemctl ") || l.contains("deb-systemd-invoke "))
            {
                let guarded = script.contains("[ -d /run/systemd/system ]")
                    && script.contains("[ -z \"${DPKG_ROOT:-}\" ]");
                assert!(guarded, "{name}: {line} runs without checking for systemd");
            }
        }
    }

    /// Runs a maintainer script as dpkg runs it into an image being built: DPKG_ROOT set,
    /// no systemd running there.
    fn maintainer_script(root: &Path, name: &str, script: &str, args: &[&str]) {
        let out = Command::new("sh")
            .args(["-c", script, name])
            .args(args)
            .env("DPKG_ROOT", root)
            .env("DPKG_MAINTSCRIPT_PACKAGE", "monitor")
            .env("DPKG_MAINTSCRIPT_NAME", name)
            .output()
            .expect("sh");
        assert!(
            out.status.success(),
            "{name} {args:?}: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The link `etc/systemd/system/<relative>` points to, if it is a link.
    fn unit_link(root: &Path, relative: &str) -> Option<PathBuf> {
        fs::read_link(root.join("etc/systemd/system").join(relative)).ok()
    }

    /// Installed into an image (a chroot, debootstrap: DPKG_ROOT, no systemd), the unit is
    /// enabled; an admin's disable survives an upgrade, a mask set before the install
    /// stays; removed, it is masked; purged, its state and the agent's files are gone.
    #[test]
    fn maintainer_scripts_enable_into_an_image_and_keep_the_admins_choice() {
        if !Path::new("/usr/bin/deb-systemd-helper").exists() {
            println!(
                "SKIP: maintainer_scripts_enable_into_an_image: deb-systemd-helper \
                 (init-system-helpers) is not installed"
            );
            return;
        }
        const WANTS: &str = "multi-user.target.wants/monitor.service";
        let image = |masked: bool| {
            let root = tempfile::tempdir().expect("tempdir");
            write(
                &root.path().join("lib/systemd/system/monitor.service"),
                UNIT.as_bytes(),
                0o644,
            )
            .unwrap();
            mkdir(&root.path().join("etc/systemd/system")).unwrap();
            if masked {
                std::os::unix::fs::symlink(
                    "/dev/null",
                    root.path().join("etc/systemd/system/monitor.service"),
                )
                .unwrap();
            }
            root
        };
        // A first install enables it.
        let root = image(false);
        let root = root.path();
        maintainer_script(root, "postinst", POSTINST, &["configure", ""]);
        assert_eq!(
            unit_link(root, WANTS),
            Some(PathBuf::from("/lib/systemd/system/monitor.service"))
        );
        // The admin disables it (`systemctl disable` removes the link); an upgrade keeps
        // it disabled.
        fs::remove_file(root.join("etc/systemd/system").join(WANTS)).unwrap();
        maintainer_script(root, "postinst", POSTINST, &["configure", "0.0.9"]);
        assert_eq!(unit_link(root, WANTS), None, "an upgrade re-enabled it");
        // Removed: masked, so that nothing starts a unit whose binary is gone.
        maintainer_script(root, "prerm", PRERM, &["remove"]);
        maintainer_script(root, "postrm", POSTRM, &["remove"]);
        assert_eq!(
            unit_link(root, "monitor.service"),
            Some(PathBuf::from("/dev/null"))
        );
        // Purged: the mask, the helper's state and the agent's files go.
        mkdir(&root.join("var/lib/monitor/pods")).unwrap();
        maintainer_script(root, "postrm", POSTRM, &["purge"]);
        assert_eq!(unit_link(root, "monitor.service"), None);
        assert!(!root.join("var/lib/monitor").exists());
        assert!(
            !root
                .join("var/lib/systemd/deb-systemd-helper-enabled/monitor.service.dsh-also")
                .exists()
        );

        // Masked by the admin before the install: it stays masked.
        let masked = image(true);
        maintainer_script(masked.path(), "postinst", POSTINST, &["configure", ""]);
        assert_eq!(
            unit_link(masked.path(), "monitor.service"),
            Some(PathBuf::from("/dev/null"))
        );
    }

    #[test]
    fn the_changelog_is_for_the_packaged_version() {
        let version = version(&workspace_root()).unwrap();
        assert_eq!(changelog_version(CHANGELOG), Some(version.as_str()));
        assert_eq!(changelog_version("monitor (1.2-3) unstable"), Some("1.2-3"));
        assert_eq!(changelog_version("other (1.0) unstable"), None);
        // dpkg's own parser agrees, where it is installed.
        if let Ok(out) = Command::new("dpkg-parsechangelog")
            .args(["-l", "-", "-S", "Version"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .and_then(|mut child| {
                child
                    .stdin
                    .take()
                    .expect("stdin")
                    .write_all(CHANGELOG.as_bytes())?;
                child.wait_with_output()
            })
        {
            assert!(out.status.success(), "dpkg-parsechangelog: {}", out.status);
            assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), version);
        }
    }

    #[test]
    fn the_copyright_names_both_licences() {
        let text = copyright(&workspace_root()).unwrap();
        assert!(text.contains("License: MIT or Apache-2.0"));
        assert!(
            text.contains("\nCopyright: 2026 The monitor authors\n"),
            "{text}"
        );
        assert!(text.contains("\nLicense: MIT\n Permission is hereby granted"));
        assert!(text.contains("/usr/share/common-licenses/Apache-2.0"));
        assert!(
            text.lines()
                .skip_while(|l| *l != "License: MIT")
                .skip(1)
                .take_while(|l| !l.is_empty())
                .all(|l| l.starts_with(' ')),
            "continuation lines are indented:\n{text}"
        );
    }

    #[test]
    fn the_control_file_has_the_fields_dpkg_requires() {
        let control = control("1.2.3", 4096);
        for field in [
            "Package: monitor\n",
            "Version: 1.2.3\n",
            "Architecture: amd64\n",
            "Maintainer: ",
            "Installed-Size: 4096\n",
            "Description: ",
        ] {
            assert!(control.contains(field), "{field} in\n{control}");
        }
        assert!(control.ends_with('\n'));
    }
}
