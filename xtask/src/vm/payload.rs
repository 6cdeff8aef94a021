//! Builds what runs inside the guest, statically linked for musl: the integration test
//! binaries of `monitor-tests` and the helper programs they start.
//!
//! Built in the release profile by default: under TCG emulation every instruction costs
//! several host instructions, so an unoptimised agent or hog would stretch a run by
//! minutes, while the one-off optimised build of the musl dependencies is paid once and
//! cached.
use std::{
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{Context, Result, bail};
use serde_json::Value;

use crate::cmd::MUSL_TARGET;

/// Where the VM test expects the package inside the guest.
const GUEST_PACKAGE: &str = "packages/monitor.deb";

/// Helper programs the tests run, copied into the guest's `/bin` (on PATH): (package, bin).
/// The agent itself is the first; add the hog here once it exists as its own binary.
pub const GUEST_BINS: &[(&str, &str)] = &[("monitor", "monitor"), ("monitor-tests", "hog")];

/// Package holding the privileged integration tests.
const TESTS_PACKAGE: &str = "monitor-tests";

/// One executable for the guest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Executable {
    /// File name inside the guest (`/tests/<name>` or `/bin/<name>`).
    pub name: String,
    pub path: PathBuf,
}

/// The built guest programs.
#[derive(Debug, Clone)]
pub struct Payload {
    pub tests: Vec<Executable>,
    pub bins: Vec<Executable>,
    /// Other files for the guest: the Debian package the `package` test installs, the
    /// container programs and kernel modules ([`super::containers`]); each named by its
    /// path inside the guest.
    pub files: Vec<Executable>,
}

/// The test target that installs the Debian package in the busybox guest (the systemd
/// node's test installs it too).
const PACKAGE_TEST: &str = "package";

/// The test target that runs on the systemd node ([`super::node`]), and only there; it
/// installs the package too.
pub const SYSTEMD_NODE_TEST: &str = "systemd_node";

/// How to build the payload.
#[derive(Debug, Clone)]
pub struct BuildOptions {
    pub release: bool,
    /// Only these test targets (`cargo test --test NAME`); all when empty.
    pub test_targets: Vec<String>,
}

pub fn build(workspace: &Path, options: &BuildOptions) -> Result<Payload> {
    let profile: &[&str] = if options.release { &["--release"] } else { &[] };

    // One cargo run for all the guest programs. It resolves the same features as the
    // tests' build below (rstest is a normal dependency of the tests' package for that
    // reason, see tests/Cargo.toml), so that build compiles only the test executables;
    // and the agent comes out as `cargo build -p monitor` alone makes it, the one the
    // package ships.
    let mut cmd = cargo(workspace);
    cmd.args(["build", "--target", MUSL_TARGET]).args(profile);
    for (package, bin) in GUEST_BINS {
        cmd.args(["-p", package, "--bin", bin]);
    }
    let built = run_cargo_json(cmd)?;
    let mut bins = Vec::new();
    for (package, bin) in GUEST_BINS {
        let exe = built
            .iter()
            .find(|a| a.kind == ArtifactKind::Bin && a.name == *bin)
            .with_context(|| {
                format!("cargo build -p {package} --bin {bin} reported no executable")
            })?;
        bins.push(Executable {
            name: bin.to_string(),
            path: exe.path.clone(),
        });
    }

    let mut cmd = cargo(workspace);
    cmd.args([
        "test",
        "-p",
        TESTS_PACKAGE,
        "--no-run",
        "--target",
        MUSL_TARGET,
    ])
    .args(profile);
    for target in &options.test_targets {
        cmd.args(["--test", target]);
    }
    let tests: Vec<Executable> = run_cargo_json(cmd)?
        .into_iter()
        .filter_map(|a| match a.kind {
            ArtifactKind::IntegrationTest => Some(Executable {
                name: a.name,
                path: a.path,
            }),
            // Unit tests of the helper library run too; named apart from a test target.
            ArtifactKind::LibTest => Some(Executable {
                name: format!("{}-lib", a.name),
                path: a.path,
            }),
            ArtifactKind::Bin | ArtifactKind::Other => None,
        })
        .collect();
    if tests.is_empty() {
        bail!("cargo test -p {TESTS_PACKAGE} --no-run built no test executables");
    }
    let mut files = Vec::new();
    if tests
        .iter()
        .any(|t| t.name == PACKAGE_TEST || t.name == SYSTEMD_NODE_TEST)
    {
        files.push(package(workspace, options, &bins)?);
    }
    Ok(Payload { tests, bins, files })
}

/// The Debian package of the guest's agent, as `cargo xtask dist` builds it: the release
/// build lands in `<target dir>/dist/` (the same file `dist` makes), a debug one apart.
fn package(workspace: &Path, options: &BuildOptions, bins: &[Executable]) -> Result<Executable> {
    let agent = bins
        .iter()
        .find(|b| b.name == "monitor")
        .context("the guest programs have no agent to package")?;
    let target = crate::cmd::target_dir(workspace)?;
    let out = if options.release {
        target.join("dist")
    } else {
        target.join("vm").join("dist-debug")
    };
    let deb = crate::dist::deb::package(workspace, &agent.path, &out)?;
    Ok(Executable {
        name: GUEST_PACKAGE.to_string(),
        path: deb,
    })
}

fn cargo(workspace: &Path) -> Command {
    let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cmd.current_dir(workspace);
    cmd
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ArtifactKind {
    Bin,
    IntegrationTest,
    LibTest,
    Other,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Artifact {
    kind: ArtifactKind,
    name: String,
    path: PathBuf,
}

/// Runs cargo with JSON messages on stdout (diagnostics still rendered on stderr) and
/// returns the executables it reported.
fn run_cargo_json(mut cmd: Command) -> Result<Vec<Artifact>> {
    cmd.arg("--message-format=json-render-diagnostics")
        .stdout(Stdio::piped());
    let description = format!("{cmd:?}");
    let mut child = cmd
        .spawn()
        .with_context(|| format!("starting {description}"))?;
    let stdout = child.stdout.take().context("cargo stdout")?;
    let mut artifacts = Vec::new();
    for line in BufReader::new(stdout).lines() {
        let line = line.context("reading cargo output")?;
        if let Some(artifact) = executable_artifact(&line) {
            artifacts.push(artifact);
        }
    }
    let status = child
        .wait()
        .with_context(|| format!("waiting for {description}"))?;
    if !status.success() {
        bail!("{description} failed: {status}");
    }
    Ok(artifacts)
}

/// An executable from one line of cargo's JSON messages (`reason: compiler-artifact` with
/// a non-null `executable`).
fn executable_artifact(line: &str) -> Option<Artifact> {
    let message: Value = serde_json::from_str(line).ok()?;
    if message.get("reason")?.as_str()? != "compiler-artifact" {
        return None;
    }
    let path = PathBuf::from(message.get("executable")?.as_str()?);
    let target = message.get("target")?;
    let name = target.get("name")?.as_str()?.to_string();
    let kinds: Vec<&str> = target
        .get("kind")?
        .as_array()?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let is_test = message.get("profile")?.get("test")?.as_bool()?;
    let kind = match (is_test, kinds.as_slice()) {
        (true, k) if k.contains(&"test") => ArtifactKind::IntegrationTest,
        (true, k) if k.contains(&"lib") => ArtifactKind::LibTest,
        (false, k) if k.contains(&"bin") => ArtifactKind::Bin,
        _ => ArtifactKind::Other,
    };
    Some(Artifact { kind, name, path })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    fn message(kind: &str, test: bool, executable: Option<&str>) -> String {
        serde_json::json!({
            "reason": "compiler-artifact",
            "target": { "name": "vm_smoke", "kind": [kind] },
            "profile": { "test": test },
            "executable": executable,
        })
        .to_string()
    }

    #[rstest]
    #[case::integration_test(
        message("test", true, Some("/t/vm_smoke-1")),
        Some(ArtifactKind::IntegrationTest)
    )]
    #[case::lib_unit_tests(message("lib", true, Some("/t/x-2")), Some(ArtifactKind::LibTest))]
    #[case::binary(message("bin", false, Some("/t/monitor")), Some(ArtifactKind::Bin))]
    #[case::library_has_no_executable(message("lib", false, None), None)]
    #[case::build_script_output(r#"{"reason":"build-script-executed"}"#.to_string(), None)]
    #[case::not_json("   Compiling foo".to_string(), None)]
    fn executables_are_classified(#[case] line: String, #[case] kind: Option<ArtifactKind>) {
        assert_eq!(
            executable_artifact(&line).map(|a| a.kind),
            kind,
            "line {line}"
        );
    }

    #[test]
    fn the_target_name_and_path_are_kept() {
        let artifact = executable_artifact(&message("test", true, Some("/t/vm_smoke-1")))
            .expect("an artifact");
        assert_eq!(
            (artifact.name.as_str(), artifact.path),
            ("vm_smoke", PathBuf::from("/t/vm_smoke-1"))
        );
    }
}
