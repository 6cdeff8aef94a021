//! Running commands with their output streamed and their failure named.
use std::process::Command;

use anyhow::{Context, Result, bail};

/// Runs a command, streaming its output; fails naming the command.
pub fn run(command: &mut Command) -> Result<()> {
    let status = command
        .status()
        .with_context(|| format!("starting {command:?}"))?;
    if !status.success() {
        bail!("{command:?} failed: {status}");
    }
    Ok(())
}

/// Whether a command runs and exits 0 (its output discarded).
pub fn succeeds(command: &mut Command) -> bool {
    command
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

pub use monitor_bench::util::cargo;

/// The workspace root (xtask lives one level below it).
pub fn workspace_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// Cargo's target directory, as cargo itself resolves it: `CARGO_TARGET_DIR`, then
/// `build.target-dir` of the cargo configuration, then `<workspace>/target`. Every command
/// that builds or looks for a build output goes through here.
pub fn target_dir(workspace: &std::path::Path) -> Result<std::path::PathBuf> {
    metadata_target_dir(cargo().current_dir(workspace))
}

/// `cargo metadata --no-deps` of the workspace at `workspace`.
pub fn metadata(workspace: &std::path::Path) -> Result<serde_json::Value> {
    metadata_of(cargo().current_dir(workspace))
}

/// `cargo metadata --no-deps`, run as `command` is set up (its directory and environment).
fn metadata_of(command: &mut Command) -> Result<serde_json::Value> {
    let out = command
        .args(["metadata", "--no-deps", "--format-version", "1"])
        .output()
        .context("running cargo metadata")?;
    if !out.status.success() {
        bail!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    serde_json::from_slice(&out.stdout).context("parsing cargo metadata's output")
}

/// `target_directory` from `cargo metadata`, run as `command` is set up.
fn metadata_target_dir(command: &mut Command) -> Result<std::path::PathBuf> {
    metadata_of(command)?["target_directory"]
        .as_str()
        .map(std::path::PathBuf::from)
        .context("cargo metadata has no target_directory")
}

/// Whether to colour what goes to a stream: only a terminal, and only without `NO_COLOR`
/// (<https://no-color.org>: set to anything non-empty).
pub fn colour(stream: &impl std::io::IsTerminal) -> bool {
    stream.is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// A failure as one line: its causes, outermost first, joined by ": " (a cause spanning
/// lines, such as a command's stderr, folded onto the line).
pub fn error_line(err: &anyhow::Error) -> String {
    let causes: Vec<String> = err
        .chain()
        .map(|c| {
            c.to_string()
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .collect::<Vec<_>>()
                .join(" / ")
        })
        .filter(|c| !c.is_empty())
        .collect();
    causes.join(": ")
}

/// The process's end: on failure, `error: <causes>` on stderr (red on a terminal) and
/// exit status 1, instead of the error's debug form.
pub fn exit(result: Result<()>) -> std::process::ExitCode {
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            let stderr = std::io::stderr();
            let prefix = if colour(&stderr) {
                "\x1b[1;31merror\x1b[0m"
            } else {
                "error"
            };
            eprintln!("{prefix}: {}", error_line(&err));
            std::process::ExitCode::FAILURE
        }
    }
}

/// `apt-get download PACKAGE` into `dir` (the package lists refreshed once if the mirror
/// has dropped the version they name); returns the downloaded `.deb`.
pub fn apt_download(package: &str, dir: &std::path::Path) -> Result<std::path::PathBuf> {
    let get = || {
        run(std::process::Command::new("apt-get")
            .args(["download", "-q", package])
            .current_dir(dir))
    };
    if get().is_err() {
        run(std::process::Command::new("apt-get").args(["update", "-q"]))?;
        get()?;
    }
    std::fs::read_dir(dir)
        .with_context(|| format!("listing {}", dir.display()))?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "deb"))
        .with_context(|| {
            format!(
                "apt-get download {package} left no .deb in {}",
                dir.display()
            )
        })
}

/// Builds the agent and the test helpers (the hog), in release mode or not; returns the
/// directory holding the binaries.
pub fn build_bins(workspace: &std::path::Path, release: bool) -> Result<std::path::PathBuf> {
    let mut build = cargo();
    build.current_dir(workspace).arg("build");
    if release {
        build.arg("--release");
    }
    run(build.args(["-p", "monitor", "-p", "monitor-tests", "--bins"]))?;
    let profile = if release { "release" } else { "debug" };
    Ok(target_dir(workspace)?.join(profile))
}

/// [`build_bins`] in release mode (the demo and the benchmark).
pub fn build_release_bins(workspace: &std::path::Path) -> Result<std::path::PathBuf> {
    build_bins(workspace, true)
}

/// The Rust target of static binaries (the package's agent, the VM guest's programs): no
/// libc needed where they run.
pub const MUSL_TARGET: &str = "x86_64-unknown-linux-musl";

/// `cargo build --release -p PACKAGE --bin BIN` for [`MUSL_TARGET`]: a static binary that
/// runs on any x86_64 Linux node; returns its path. The target must be installed
/// ([`crate::setup::ensure_rust_target`]).
pub fn build_static(
    workspace: &std::path::Path,
    package: &str,
    bin: &str,
) -> Result<std::path::PathBuf> {
    run(cargo().current_dir(workspace).args([
        "build",
        "--release",
        "-p",
        package,
        "--bin",
        bin,
        "--target",
        MUSL_TARGET,
    ]))?;
    let path = target_dir(workspace)?
        .join(MUSL_TARGET)
        .join("release")
        .join(bin);
    path.exists().then_some(path.clone()).with_context(|| {
        format!(
            "cargo build -p {package} --bin {bin} left no {}",
            path.display()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    /// Where cargo puts a throw-away crate's builds, given its config and environment.
    #[rstest]
    #[case::default(None, None, "target")]
    #[case::config(None, Some("from-config"), "from-config")]
    #[case::environment_over_config(Some("from-env"), Some("from-config"), "from-env")]
    fn target_dir_follows_cargo(
        #[case] env: Option<&str>,
        #[case] config: Option<&str>,
        #[case] expected: &str,
    ) {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path();
        std::fs::write(
            root.join("Cargo.toml"),
            "[package]\nname = \"probe\"\nversion = \"0.0.0\"\nedition = \"2024\"\n",
        )
        .expect("Cargo.toml");
        std::fs::create_dir_all(root.join("src")).expect("src");
        std::fs::write(root.join("src/lib.rs"), "").expect("lib.rs");
        if let Some(config) = config {
            std::fs::create_dir_all(root.join(".cargo")).expect(".cargo");
            std::fs::write(
                root.join(".cargo/config.toml"),
                format!("[build]\ntarget-dir = \"{config}\"\n"),
            )
            .expect("config.toml");
        }
        let mut command = cargo();
        command
            .current_dir(root)
            .env_remove("CARGO_TARGET_DIR")
            .env_remove("CARGO_BUILD_TARGET_DIR");
        if let Some(env) = env {
            command.env("CARGO_TARGET_DIR", root.join(env));
        }
        let found = metadata_target_dir(&mut command).expect("cargo metadata");
        let root = root.canonicalize().expect("canonical root");
        assert_eq!(
            found.canonicalize().unwrap_or(found.clone()),
            root.join(expected)
        );
    }

    #[rstest]
    #[case::one(anyhow::anyhow!("boom"), "boom")]
    #[case::chain(
        anyhow::anyhow!("no such file").context("reading a.json").context("replot"),
        "replot: reading a.json: no such file"
    )]
    #[case::multi_line_cause(
        anyhow::anyhow!("error: a\n\n  b\n").context("cargo metadata failed"),
        "cargo metadata failed: error: a / b"
    )]
    fn errors_read_as_one_line(#[case] err: anyhow::Error, #[case] expected: &str) {
        assert_eq!(error_line(&err), expected);
    }
}
