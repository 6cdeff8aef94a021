//! Builds the kernel-side programs (`monitor-ebpf`) for the bpf target with aya-build and
//! leaves the object at `$OUT_DIR/monitor-ebpf`, which `src/notify/ebpf.rs` embeds; and
//! generates the CRI v1 client (`src/runtime/cri`) from `proto/runtime/v1/api.proto` with a
//! protoc that ships as a crate; and names the git commit being built for
//! `monitor_build_info` (`MONITOR_REVISION`).
//!
//! `AYA_BUILD_SKIP=1` skips the eBPF build (for machines without the nightly toolchain
//! and bpf-linker, and for quick policy-only work): an empty object is embedded and the
//! agent reports at startup that its eBPF source is unavailable.
use std::{env, fs, path::PathBuf, process::Command};

fn main() -> anyhow::Result<()> {
    compile_cri()?;
    git_revision();
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let object = out_dir.join("monitor-ebpf");
    let skip = env::var("AYA_BUILD_SKIP").is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true"));
    println!("cargo:rerun-if-env-changed=AYA_BUILD_SKIP");
    if skip {
        fs::write(&object, [])?;
        return Ok(());
    }
    let ebpf_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR")?).join("../monitor-ebpf");
    let ebpf_dir = ebpf_dir.canonicalize()?;
    let root_dir = ebpf_dir.to_str().expect("utf-8 path");
    // One eBPF build for every profile and target of the host crate: the object does not
    // depend on them (always release, always the bpf target), yet each gets an OUT_DIR
    // of its own, and aya-build builds inside OUT_DIR, so a dev, test, release and musl
    // build would each compile it (and `core`) from scratch, about a minute apiece. It is
    // built under the target directory instead, where its own cargo finds it up to date,
    // and copied here. The lock keeps a concurrent build from copying a half-written file.
    let shared = shared_ebpf_dir(&out_dir);
    fs::create_dir_all(&shared)?;
    let lock = fs::File::create(shared.join(".lock"))?;
    lock.lock()?;
    // SAFETY: a build script is one thread here; nothing reads the environment meanwhile.
    unsafe { env::set_var("OUT_DIR", &shared) };
    let built = aya_build::build_ebpf(
        [aya_build::Package {
            name: "monitor-ebpf",
            root_dir,
            ..Default::default()
        }],
        aya_build::Toolchain::default(),
    );
    // SAFETY: as above.
    unsafe { env::set_var("OUT_DIR", &out_dir) };
    built?;
    fs::copy(shared.join("monitor-ebpf"), &object)?;
    Ok(())
}

/// Where the eBPF object is built: `ebpf/` in cargo's target directory, the highest
/// ancestor of OUT_DIR that cargo tagged as its own (`<target>/<triple>/` is tagged too);
/// OUT_DIR itself when none is (a build outside a cargo target directory).
fn shared_ebpf_dir(out_dir: &std::path::Path) -> PathBuf {
    out_dir
        .ancestors()
        .skip(1)
        .take(7)
        .filter(|dir| dir.join("CACHEDIR.TAG").is_file())
        .last()
        .map_or_else(|| out_dir.to_path_buf(), |target| target.join("ebpf"))
}

/// Sets `MONITOR_REVISION` for the crate: the commit checked out (with `-dirty` when the
/// tracked files differ from it), or "unknown" where no git answers (a source tarball, no git installed, a repository of another owner). Asks git
/// itself rather than reading `.git`: a worktree's HEAD and its branch live in different
/// directories, and a branch may be packed.
fn git_revision() {
    let manifest_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git")
            .args(args)
            .current_dir(&manifest_dir)
            .output()
            .ok()?;
        let text = String::from_utf8(out.stdout).ok()?;
        let text = text.trim();
        (out.status.success() && !text.is_empty()).then(|| text.to_string())
    };
    let revision = git(&["rev-parse", "--verify", "--quiet", "HEAD"]);
    // Built again when HEAD moves: HEAD itself (a checkout), the branch it names (a commit)
    // and packed-refs. Only files that exist: cargo reruns a script for a missing one
    // on every build.
    let branch = git(&["symbolic-ref", "--quiet", "HEAD"]);
    for name in ["HEAD", "packed-refs"].into_iter().chain(branch.as_deref()) {
        if let Some(path) = git(&["rev-parse", "--git-path", name]) {
            let path = manifest_dir.join(path);
            if path.exists() {
                println!("cargo:rerun-if-changed={}", path.display());
            }
        }
    }
    // Built again when the sources change without a commit, so that the dirty mark below
    // follows them: the agent's own crate (its policy crate inside it) and the shared one;
    // aya-build watches the eBPF crate already.
    for dir in [".", "../monitor-common", "../Cargo.toml", "../Cargo.lock"] {
        println!(
            "cargo:rerun-if-changed={}",
            manifest_dir.join(dir).display()
        );
    }
    let Some(revision) = revision.filter(|r| r.bytes().all(|b| b.is_ascii_hexdigit())) else {
        println!("cargo:rustc-env=MONITOR_REVISION=unknown");
        return;
    };
    // `-dirty` when tracked files differ from the commit, as `git describe --dirty` says
    // it: a binary built from uncommitted changes never passes for the commit.
    let dirty = Command::new("git")
        .args(["status", "--porcelain", "--untracked-files=no"])
        .current_dir(&manifest_dir)
        .output()
        .is_ok_and(|out| out.status.success() && !out.stdout.is_empty());
    let suffix = if dirty { "-dirty" } else { "" };
    println!("cargo:rustc-env=MONITOR_REVISION={revision}{suffix}");
}

/// The CRI v1 client: message types and the RuntimeService/ImageService clients (no server).
fn compile_cri() -> anyhow::Result<()> {
    let proto = "proto/runtime/v1/api.proto";
    println!("cargo:rerun-if-changed={proto}");
    let mut config = tonic_prost_build::Config::new();
    config.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    tonic_prost_build::configure()
        .build_server(false)
        .build_transport(false)
        .compile_with_config(config, &[proto], &["proto"])?;
    // The generator marks every item `#[allow(clippy::all)]`; this workspace
    // refuses bare `allow`s, so the marks go and the module that includes the
    // code states its lint expectations once, with a reason.
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?).join("runtime.v1.rs");
    let generated = std::fs::read_to_string(&out)?;
    let stripped: String = generated
        .lines()
        .filter(|line| line.trim() != "#[allow(clippy::all)]")
        .flat_map(|line| [line, "\n"])
        .collect();
    std::fs::write(&out, with_reasons(&stripped))?;
    Ok(())
}

/// Gives each inner `#![allow(...)]` the generator writes a reason, as the
/// workspace lints ask of every `allow`.
fn with_reasons(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    while let Some(start) = rest.find("#![allow(") {
        let Some(end) = rest[start..].find(")]") else {
            break;
        };
        let end = start + end;
        out.push_str(rest[..end].trim_end().trim_end_matches(','));
        out.push_str(", reason = \"generated code\"");
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}
