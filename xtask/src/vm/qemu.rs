//! Boots one kernel with the initramfs under qemu, streams the serial console to stdout
//! and feeds it to the [`GuestReport`].
use std::{
    fs,
    io::{BufRead, BufReader, Read},
    path::Path,
    process::{Child, Command, Stdio},
    sync::mpsc,
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};

use super::{kernel::Kernel, report::GuestReport};

/// How qemu executes guest code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Accel {
    /// KVM where it really works, TCG otherwise.
    Auto,
    Kvm,
    Tcg,
}

/// Host facts that decide whether KVM can boot a stock kernel.
#[derive(Debug, Clone, Copy)]
pub struct KvmProbe {
    pub dev_kvm_writable: bool,
    /// The CPU advertises vmx or svm.
    pub hardware_virt: bool,
    /// `/sys/module/kvm_pvm` exists: a paravirtual KVM (nested hosts) that only runs
    /// PVM-enabled guests; a stock kernel dies with "KVM internal error".
    pub pvm: bool,
}

impl KvmProbe {
    pub fn of_this_host() -> Self {
        let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let hardware_virt = cpuinfo
            .lines()
            .filter(|l| l.starts_with("flags"))
            .any(|l| l.split_whitespace().any(|f| f == "vmx" || f == "svm"));
        let dev_kvm_writable = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/kvm")
            .is_ok();
        Self {
            dev_kvm_writable,
            hardware_virt,
            pvm: Path::new("/sys/module/kvm_pvm").exists(),
        }
    }
}

/// Resolves `Auto`: KVM only when the device is usable, the CPU has hardware
/// virtualisation, and the KVM is not the paravirtual kind.
pub fn choose_accel(wanted: Accel, probe: KvmProbe) -> Accel {
    match wanted {
        Accel::Auto if probe.dev_kvm_writable && probe.hardware_virt && !probe.pvm => Accel::Kvm,
        Accel::Auto => Accel::Tcg,
        other => other,
    }
}

/// Everything one boot needs.
#[derive(Debug, Clone)]
pub struct Boot<'a> {
    pub kernel: &'a Kernel,
    pub initramfs: &'a Path,
    pub accel: Accel,
    /// Guest RAM as qemu's `-m` takes it (`1G`, `512M`).
    pub mem: &'a str,
    pub cpus: u32,
    pub timeout: Duration,
    /// More kernel command line, after the console and panic settings.
    pub append: &'a str,
    /// Under TCG, count instructions instead of following the host's clock (qemu's
    /// `-icount shift=0,sleep=off`): the guest's clocks advance one nanosecond per guest
    /// instruction, the vCPUs take turns on one host thread, and a task's CPU time is the
    /// instructions it executed, whatever else the host is doing. Ignored under KVM.
    pub instruction_clock: bool,
}

/// How one boot ended.
#[derive(Debug)]
pub struct BootOutcome {
    pub report: GuestReport,
    pub elapsed: Duration,
    pub timed_out: bool,
    /// Every console line, in order (`cargo xtask bench` reads its results from them).
    pub console: Vec<String>,
}

/// After the guest reports DONE, qemu gets this long to power off before it is killed.
const POWEROFF_GRACE: Duration = Duration::from_secs(15);

pub fn boot(boot: &Boot<'_>) -> Result<BootOutcome> {
    let mut cmd = command(boot);
    let started = Instant::now();
    let mut child = cmd
        .spawn()
        .with_context(|| format!("starting {cmd:?} (is qemu-system-x86 installed?)"))?;
    let (lines_tx, lines) = mpsc::channel::<String>();
    let stdout = child.stdout.take().context("qemu stdout")?;
    let stderr = child.stderr.take().context("qemu stderr")?;
    let out_reader = spawn_line_reader(stdout, "", lines_tx.clone());
    let err_reader = spawn_line_reader(stderr, "qemu: ", lines_tx);

    let mut report = GuestReport::default();
    let mut timed_out = false;
    let mut console = Vec::new();
    let mut deadline = started + boot.timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) => {
                println!("[{:7.2}] {line}", started.elapsed().as_secs_f64());
                let was_done = report.done;
                report.observe(&line);
                console.push(line);
                if report.done && !was_done {
                    deadline = deadline.min(Instant::now() + POWEROFF_GRACE);
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if !report.done {
                    timed_out = true;
                    println!(
                        "vm: no result after {} s: killing qemu",
                        boot.timeout.as_secs()
                    );
                }
                kill(&mut child);
                break;
            }
            // Both pipes closed: qemu exited.
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    let status = child.wait().context("waiting for qemu")?;
    // The readers end when the pipes close, which the wait above guarantees.
    let _ = out_reader.join();
    let _ = err_reader.join();
    if !status.success() && !timed_out && report.kernel_release.is_none() {
        bail!("qemu failed before the guest started: {status}");
    }
    Ok(BootOutcome {
        report,
        elapsed: started.elapsed(),
        timed_out,
        console,
    })
}

fn command(boot: &Boot<'_>) -> Command {
    let mut cmd = Command::new("qemu-system-x86_64");
    match boot.accel {
        Accel::Kvm => cmd.args(["-accel", "kvm", "-cpu", "host"]),
        // Several vCPUs run on several host threads (MTTCG), so an agent and the hog it
        // watches really run at the same time, as on a node.
        // Instruction counting needs the vCPUs on one thread.
        Accel::Auto | Accel::Tcg if boot.instruction_clock => cmd
            .args(["-accel", "tcg,thread=single"])
            .args(["-icount", "shift=0,sleep=off"]),
        Accel::Auto | Accel::Tcg => cmd.args(["-accel", "tcg,thread=multi"]),
    };
    let mut append = String::from("console=ttyS0 quiet panic=-1");
    if boot.kernel.psi_off_by_default {
        append.push_str(" psi=1");
    }
    if !boot.append.is_empty() {
        append.push(' ');
        append.push_str(boot.append);
    }
    cmd.args(["-m", boot.mem, "-smp", &boot.cpus.to_string()])
        .args([
            "-nodefaults",
            "-no-user-config",
            "-display",
            "none",
            "-serial",
            "stdio",
            "-no-reboot",
        ])
        .arg("-kernel")
        .arg(&boot.kernel.vmlinuz)
        .arg("-initrd")
        .arg(boot.initramfs)
        .args(["-append", &append])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// Forwards lines (lossily decoded: a serial console can carry any byte) to `tx`.
fn spawn_line_reader(
    source: impl Read + Send + 'static,
    prefix: &'static str,
    tx: mpsc::Sender<String>,
) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        let mut reader = BufReader::new(source);
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match reader.read_until(b'\n', &mut buf) {
                Ok(0) | Err(_) => return,
                Ok(_) => {
                    let text = String::from_utf8_lossy(&buf);
                    let line = text.trim_end_matches(['\n', '\r']);
                    if tx.send(format!("{prefix}{line}")).is_err() {
                        return;
                    }
                }
            }
        }
    })
}

fn kill(child: &mut Child) {
    // Already exited is fine: wait() below collects it either way.
    let _ = child.kill();
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case::real_kvm(Accel::Auto, true, true, false, Accel::Kvm)]
    #[case::paravirtual_kvm_cannot_boot_stock_kernels(Accel::Auto, true, true, true, Accel::Tcg)]
    #[case::no_device_access(Accel::Auto, false, true, false, Accel::Tcg)]
    #[case::no_vmx_or_svm(Accel::Auto, true, false, false, Accel::Tcg)]
    #[case::forced_kvm_is_obeyed(Accel::Kvm, false, false, true, Accel::Kvm)]
    #[case::forced_tcg_is_obeyed(Accel::Tcg, true, true, false, Accel::Tcg)]
    fn accelerator_choice(
        #[case] wanted: Accel,
        #[case] dev_kvm_writable: bool,
        #[case] hardware_virt: bool,
        #[case] pvm: bool,
        #[case] expected: Accel,
    ) {
        let probe = KvmProbe {
            dev_kvm_writable,
            hardware_virt,
            pvm,
        };
        assert_eq!(
            choose_accel(wanted, probe),
            expected,
            "{wanted:?} with {probe:?}"
        );
    }
}
