//! Assembles the guest's root filesystem as an initramfs: busybox, the init script, the
//! test binaries in `/tests`, helper programs in `/bin`, other files where the payload
//! names them (containerd and its libraries, kernel modules), and the test filter.
use std::{
    fs::File,
    io::{BufWriter, Write},
    path::Path,
};

use anyhow::{Context, Result, bail};

use super::{cpio, host::BUSYBOX, payload::Payload};

/// PID 1 of the guest; see the script for what it prepares.
const INIT: &str = include_str!("../../vm/init.sh");
/// The test loop both VM runners source (this archive's init and the systemd node's
/// runner), at `RUN_TESTS_PATH`.
pub(super) const RUN_TESTS: &str = include_str!("../../vm/run-tests.sh");
pub(super) const RUN_TESTS_PATH: &str = "etc/xtask-vm/run-tests.sh";
/// Directories the init script mounts on or writes to; `/sys/fs/cgroup`, `/sys/fs/bpf` and
/// `/sys/kernel/tracing` are provided by sysfs itself.
const DIRS: &[&str] = &[
    "bin",
    "dev",
    "etc",
    "etc/xtask-vm",
    "proc",
    "sys",
    "tmp",
    "tests",
    "packages",
];

/// Writes the archive to `out` (atomically: a `.tmp` file renamed into place).
pub fn write(out: &Path, payload: &Payload, test_args: &[String], env: &[String]) -> Result<()> {
    let tmp = out.with_extension("tmp");
    let file = File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    let mut archive = cpio::Writer::new(BufWriter::new(file));
    let context = || format!("writing {}", tmp.display());

    for dir in DIRS {
        archive.dir(dir, 0o755).with_context(context)?;
    }
    // The kernel opens /dev/console for init's stdio before devtmpfs is mounted.
    archive
        .char_device("dev/console", 0o600, 5, 1)
        .with_context(context)?;
    archive
        .file("init", 0o755, INIT.len() as u64, INIT.as_bytes())
        .with_context(context)?;
    archive
        .file(
            RUN_TESTS_PATH,
            0o644,
            RUN_TESTS.len() as u64,
            RUN_TESTS.as_bytes(),
        )
        .with_context(context)?;
    add_host_file(&mut archive, "bin/busybox", Path::new(BUSYBOX))?;
    for bin in &payload.bins {
        add_host_file(&mut archive, &format!("bin/{}", bin.name), &bin.path)?;
    }
    for test in &payload.tests {
        add_host_file(&mut archive, &format!("tests/{}", test.name), &test.path)?;
    }
    // The kernel's unpacker creates no missing parents: each comes first, once.
    let mut made: std::collections::BTreeSet<String> = DIRS.iter().map(|d| d.to_string()).collect();
    for file in &payload.files {
        let mut parent = String::new();
        for part in Path::new(&file.name)
            .parent()
            .into_iter()
            .flat_map(Path::components)
        {
            if !parent.is_empty() {
                parent.push('/');
            }
            parent.push_str(&part.as_os_str().to_string_lossy());
            if made.insert(parent.clone()) {
                archive.dir(&parent, 0o755).with_context(context)?;
            }
        }
        add_host_file(&mut archive, &file.name, &file.path)?;
    }
    let args = test_args_file(test_args);
    archive
        .file(
            "etc/xtask-vm/test-args",
            0o644,
            args.len() as u64,
            args.as_bytes(),
        )
        .with_context(context)?;

    let env = test_args_file(env);
    archive
        .file("etc/xtask-vm/env", 0o644, env.len() as u64, env.as_bytes())
        .with_context(context)?;

    let mut writer = archive.finish().with_context(context)?;
    writer.flush().with_context(context)?;
    drop(writer);
    std::fs::rename(&tmp, out)
        .with_context(|| format!("moving {} to {}", tmp.display(), out.display()))
}

pub(super) fn add_host_file(
    archive: &mut cpio::Writer<impl Write>,
    name: &str,
    source: &Path,
) -> Result<()> {
    let file = File::open(source).with_context(|| format!("opening {}", source.display()))?;
    let len = file
        .metadata()
        .with_context(|| format!("stat {}", source.display()))?
        .len();
    archive
        .file(name, 0o755, len, file)
        .with_context(|| format!("adding {} as /{name}", source.display()))
}

/// Checks a `NAME=VALUE` for the guest's environment: the init script exports each line
/// of /etc/xtask-vm/env as it is.
pub fn check_env(variable: &str) -> Result<()> {
    let Some((name, value)) = variable.split_once('=') else {
        bail!("--env {variable:?}: expected NAME=VALUE");
    };
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        bail!("--env {variable:?}: the name must be letters, digits and _");
    }
    if value.contains('\n') {
        bail!("--env {variable:?}: newlines cannot be passed to the guest");
    }
    Ok(())
}

/// One argument per line, read back by the init script with `read -r`; arguments holding
/// a newline cannot be passed this way and are refused by the caller.
pub(super) fn test_args_file(args: &[String]) -> String {
    args.iter().map(|a| format!("{a}\n")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case::none(&[], "")]
    #[case::filter_with_space(&["memory controller", "--exact"], "memory controller\n--exact\n")]
    fn test_args_are_one_per_line(#[case] args: &[&str], #[case] expected: &str) {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        assert_eq!(test_args_file(&args), expected);
    }

    #[rstest]
    #[case::plain("MONITOR_CHAOS_CYCLES=50", true)]
    #[case::empty_value("A=", true)]
    #[case::no_equals("MONITOR_CHAOS_CYCLES", false)]
    #[case::bad_name("A-B=1", false)]
    #[case::newline("A=1\nB=2", false)]
    fn guest_environment_is_checked(#[case] variable: &str, #[case] ok: bool) {
        assert_eq!(check_env(variable).is_ok(), ok, "{variable:?}");
    }

    #[test]
    fn init_script_speaks_the_markers_the_host_parses() {
        let marker_definition = format!("M={}", super::super::report::MARKER);
        assert!(
            INIT.contains(&marker_definition),
            "init.sh must define {marker_definition}"
        );
        for word in ["KERNEL", "DONE", "SETUP-FAILED", "poweroff -f"] {
            assert!(INIT.contains(word), "init.sh must contain {word}");
        }
        assert!(INIT.contains(&format!(". /{RUN_TESTS_PATH}\nrun_tests /tests\n")));
        for hook in ["mark_test_start()", "show_failure()"] {
            assert!(INIT.contains(hook), "init.sh must define {hook}");
        }
    }

    #[test]
    fn the_shared_test_loop_marks_each_binary_and_reads_the_hosts_inputs() {
        for word in [
            "$M TEST-BEGIN $name",
            "$M TEST-END $name status=$status",
            "--test-threads=1",
            "/etc/xtask-vm/env",
            "/etc/xtask-vm/test-args",
            "mark_test_start\n",
            "show_failure \"$name\"",
        ] {
            assert!(RUN_TESTS.contains(word), "run-tests.sh must contain {word}");
        }
    }
}
