//! What the guest needs to run containers as the CRI tests do on the host: Debian's
//! containerd, ctr, containerd-shim-runc-v2 and runc, copied from the host with the shared
//! libraries they load (glibc; libseccomp for runc), and each kernel's overlay module for
//! containerd's default snapshotter. The images the tests build come from the guest's
//! own `/bin/busybox` (busybox-static).
use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{Context, Result, bail};

use super::{host, kernel::Kernel, payload::Executable};

/// The programs and the libraries they load, as guest files (`bin/containerd`,
/// `lib/x86_64-linux-gnu/libc.so.6`, ...).
pub fn programs() -> Result<Vec<Executable>> {
    let mut files = Vec::new();
    let mut libraries = BTreeSet::new();
    for program in host::CONTAINER_PROGRAMS {
        let path = host::which(program).with_context(|| {
            format!("{program} is not on PATH (`cargo xtask setup` installs containerd and runc)")
        })?;
        libraries.extend(shared_libraries(&path)?);
        files.push(Executable {
            name: format!("bin/{program}"),
            path,
        });
    }
    for library in libraries {
        let name = library
            .strip_prefix("/")
            .with_context(|| format!("ldd named a relative library {}", library.display()))?
            .to_string_lossy()
            .into_owned();
        files.push(Executable {
            name,
            path: library,
        });
    }
    Ok(files)
}

/// The shared libraries `program` loads, the dynamic loader included, from `ldd`.
fn shared_libraries(program: &Path) -> Result<Vec<PathBuf>> {
    let out = Command::new("ldd")
        .arg(program)
        .stdin(Stdio::null())
        .output()
        .context("running ldd")?;
    let text = String::from_utf8_lossy(&out.stdout);
    // A static program: ldd says so and fails.
    if !out.status.success() && text.contains("not a dynamic executable") {
        return Ok(Vec::new());
    }
    if !out.status.success() {
        bail!(
            "ldd {}: {}: {}",
            program.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    parse_ldd(&text).with_context(|| format!("ldd {}", program.display()))
}

/// The absolute paths in ldd's output: `name => /path (0x...)` and `/path (0x...)` lines;
/// `linux-vdso.so.1 (0x...)` has no file. A library ldd could not find is an error.
fn parse_ldd(text: &str) -> Result<Vec<PathBuf>> {
    let mut paths = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let target = match line.split_once("=>") {
            Some((name, rest)) => {
                let rest = rest.trim();
                if rest.starts_with("not found") {
                    bail!("{} not found", name.trim());
                }
                rest
            }
            None => line,
        };
        let path = target.split_whitespace().next().unwrap_or_default();
        if path.starts_with('/') {
            paths.push(PathBuf::from(path));
        }
    }
    Ok(paths)
}

/// Each kernel's guest modules, uncompressed (busybox's insmod loads them as they are)
/// under `cache`, as guest files `lib/modules/<release>/<name>.ko`, which the guest's
/// init loads.
pub fn modules(kernels: &[Kernel], cache: &Path) -> Result<Vec<Executable>> {
    let mut files = Vec::new();
    for kernel in kernels {
        let dir = cache.join(&kernel.release);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        for module in &kernel.modules {
            let file_name = module
                .file_name()
                .and_then(|n| n.to_str())
                .with_context(|| format!("module {}", module.display()))?;
            let (stem, compressed) = match file_name.split_once(".ko") {
                Some((stem, "")) => (stem, false),
                Some((stem, ".xz")) => (stem, true),
                _ => bail!(
                    "{}: a module compressed other than with xz; the guest cannot load it",
                    module.display()
                ),
            };
            let out = dir.join(format!("{stem}.ko"));
            if compressed {
                let unpacked = Command::new("xz")
                    .arg("-dc")
                    .arg(module)
                    .stdin(Stdio::null())
                    .output()
                    .context("running xz (Debian package xz-utils)")?;
                if !unpacked.status.success() {
                    bail!("xz -dc {}: {}", module.display(), unpacked.status);
                }
                std::fs::write(&out, unpacked.stdout)
                    .with_context(|| format!("writing {}", out.display()))?;
            } else {
                std::fs::copy(module, &out).with_context(|| {
                    format!("copying {} to {}", module.display(), out.display())
                })?;
            }
            files.push(Executable {
                name: format!("lib/modules/{}/{stem}.ko", kernel.release),
                path: out,
            });
        }
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ldd_output_gives_the_libraries_and_the_loader() {
        let text = "\tlinux-vdso.so.1 (0x00007ffc)\n\
                    \tlibseccomp.so.2 => /lib/x86_64-linux-gnu/libseccomp.so.2 (0x00007f69)\n\
                    \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f69)\n\
                    \t/lib64/ld-linux-x86-64.so.2 (0x00007f69)\n";
        assert_eq!(
            parse_ldd(text).unwrap(),
            [
                "/lib/x86_64-linux-gnu/libseccomp.so.2",
                "/lib/x86_64-linux-gnu/libc.so.6",
                "/lib64/ld-linux-x86-64.so.2"
            ]
            .map(PathBuf::from)
        );
    }

    #[test]
    fn a_missing_library_is_an_error_naming_it() {
        let err = parse_ldd("\tlibfoo.so.1 => not found\n").unwrap_err();
        assert!(err.to_string().contains("libfoo.so.1"), "{err}");
    }
}
