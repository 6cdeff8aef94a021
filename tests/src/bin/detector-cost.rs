//! The crossing detector's cost as the pods see it: a memory hog's allocation throughput
//! with the detector attached and detached, alternating in one run, per attach point.
//!
//!   detector-cost HOG ROUNDS MIB
//!
//! For each attach point, ROUNDS times (which goes first rotates), the hog allocates and
//! touches MIB MiB at full speed in a cgroup three levels below a cgroup with a level
//! armed, as a pod's container sits below the pods cgroup (the level is never reached:
//! the common path, a sampled look and the way to the armed cgroup): once with the
//! agent's eBPF programs loaded with the detector on that point (`on`), once with it
//! walking every ancestor instead of going to the armed depth (`walk`), and once with the
//! same programs and no detector (`off`). One line per run:
//! `detector-cost: point=... detector=on|walk|off round=N mib=MIB mib_per_s=...` (MiB per
//! second of the hog's own CPU time); a point the kernel refuses prints
//! `detector-cost: point=... refused: ...` and is skipped. After its rounds, each point
//! gets one more run with the kernel's BPF statistics on, which says how often the
//! detector's program ran and for how long (they add two clock reads to every run, so
//! that run's throughput is not counted):
//! `detector-cost: point=... runs=N run_ns=NS mib=MIB`.
use std::path::Path;
use std::process::{Command, Stdio};

use monitor::notify::detector::AttachPoint;
use monitor::notify::ebpf::{self, EbpfSettings};
use monitor::notify::memcg::ThresholdSpec;
use monitor_bench::bpf::{StatsSetting, prog_stats};
use monitor_tests::{TestCgroup, join_before_exec};

const MIB: u64 = 1 << 20;

fn usage(problem: &str) -> ! {
    eprintln!("detector-cost: {problem}\nusage: detector-cost HOG ROUNDS MIB");
    std::process::exit(2);
}

fn number(text: &str, name: &str) -> u64 {
    text.parse()
        .unwrap_or_else(|_| usage(&format!("{name}: not a number: {text}")))
}

/// The CPU time of the children waited for so far (user and system), seconds.
fn children_cpu() -> f64 {
    use nix::sys::resource::{UsageWho, getrusage};
    getrusage(UsageWho::RUSAGE_CHILDREN).map_or(0.0, |u| {
        let seconds = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
        seconds(u.user_time()) + seconds(u.system_time())
    })
}

/// Runs the hog once in `cgroup`: MiB allocated per second of its own CPU time (the
/// charge path, and the detector on it, run in the allocating task). Wall time would
/// add what the rest of the machine takes from the hog, which here varies by more than
/// the cost measured.
fn hog_throughput(hog: &Path, cgroup: &Path, mib: u64) -> Option<f64> {
    let mut command = Command::new(hog);
    let step = (mib / 32).max(1);
    command
        .args(["anon", &mib.to_string(), &step.to_string(), "0", "0"])
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    let before = children_cpu();
    join_before_exec(&mut command, &[cgroup.join("cgroup.procs")]);
    let status = command.spawn().ok()?.wait().ok()?;
    let cpu = children_cpu() - before;
    if !status.success() {
        eprintln!("detector-cost: the hog failed: {status}");
        return None;
    }
    (cpu > 0.0).then(|| mib as f64 / cpu)
}

/// The kernel's run count and run time of this process's program for `point` (the kernel
/// keeps the first 15 bytes of a program's name).
fn program_stats(point: AttachPoint) -> Option<(u64, u64)> {
    prog_stats(std::process::id())
        .into_iter()
        .find(|s| !s.name.is_empty() && point.program().starts_with(&s.name))
        .map(|s| (s.run_cnt, s.run_time_ns))
}

/// How the programs are loaded for one run.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Detector {
    /// The detector, going to the armed depth.
    On,
    /// The detector, walking every ancestor.
    Walk,
    /// No detector.
    Off,
}

impl Detector {
    fn name(self) -> &'static str {
        match self {
            Detector::On => "on",
            Detector::Walk => "walk",
            Detector::Off => "off",
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [hog, rounds, mib] = args.as_slice() else {
        usage("three arguments are needed");
    };
    let hog = Path::new(hog);
    let (rounds, mib) = (number(rounds, "ROUNDS"), number(mib, "MIB"));
    let cgroup = TestCgroup::new("detector-cost", 2 * mib * MIB + 256 * MIB);
    let container = cgroup.descendant(&["qos", "pod", "container"]);
    for point in AttachPoint::ALL {
        let load = |detector: Detector| {
            let settings = EbpfSettings {
                detector: match detector {
                    Detector::Off => vec![],
                    Detector::On | Detector::Walk => vec![point],
                },
                walk_every_ancestor: detector == Detector::Walk,
                ..EbpfSettings::default()
            };
            let (wakes, _rx) = monitor::notify::wake_channel();
            let source = ebpf::start(&settings, wakes, None).map_err(|e| e.to_string())?;
            if detector != Detector::Off {
                let armed = source.detector.as_ref().map_err(Clone::clone)?;
                armed.arm(&[ThresholdSpec {
                    cgroup: cgroup.memory_dir.clone(),
                    usage_bytes: 64 << 30,
                    hard: true,
                    passed_when_armed: false,
                    threshold: None,
                }]);
            }
            Ok::<_, String>(source)
        };
        if let Err(why) = load(Detector::On) {
            println!("detector-cost: point={} refused: {why}", point.name());
            continue;
        }
        for round in 1..=rounds {
            let mut order = [Detector::On, Detector::Walk, Detector::Off];
            order.rotate_left(round as usize % 3);
            for detector in order {
                let source = match load(detector) {
                    Ok(source) => source,
                    Err(why) => {
                        println!("detector-cost: point={} refused: {why}", point.name());
                        continue;
                    }
                };
                let throughput = hog_throughput(hog, &container, mib);
                drop(source);
                if let Some(mib_per_s) = throughput {
                    println!(
                        "detector-cost: point={} detector={} round={round} mib={mib} mib_per_s={mib_per_s:.1}",
                        point.name(),
                        detector.name()
                    );
                }
            }
        }
        // The program's own figures: how often it ran for the hog's MiB, and how long a
        // run took. Every charge on the machine runs it, the hog's are most of them.
        let Ok(_stats) = StatsSetting::enable() else {
            continue;
        };
        let Ok(source) = load(Detector::On) else {
            continue;
        };
        let before = program_stats(point);
        let ran = hog_throughput(hog, &container, mib).is_some();
        let after = program_stats(point);
        drop(source);
        if let (true, Some(before), Some(after)) = (ran, before, after) {
            println!(
                "detector-cost: point={} runs={} run_ns={} mib={mib}",
                point.name(),
                after.0.saturating_sub(before.0),
                after.1.saturating_sub(before.1)
            );
        }
    }
}
