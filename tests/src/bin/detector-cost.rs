//! The crossing detector's cost as the pods see it: a memory hog's allocation throughput
//! with the detector attached and detached, alternating in one run, per attach point.
//!
//!   detector-cost HOG ROUNDS MIB
//!
//! For each attach point, ROUNDS times (which goes first alternates), the hog allocates
//! and touches MIB MiB at full speed in a cgroup of its own: once with the agent's eBPF
//! programs loaded with the detector on that point and a level armed on the hog's cgroup
//! (never reached: the common path, a sampled look and a walk of the ancestors, as beside
//! the agent's pods), once with the same programs and no detector. One line per run:
//! `detector-cost: point=... detector=on|off round=N mib=MIB mib_per_s=...` (MiB per second of the
//! hog's own CPU time); a point the kernel
//! refuses prints `detector-cost: point=... refused: ...` and is skipped.
use std::path::Path;
use std::process::{Command, Stdio};

use monitor::notify::detector::AttachPoint;
use monitor::notify::ebpf::{self, EbpfSettings};
use monitor::notify::memcg::ThresholdSpec;
use monitor_tests::TestCgroup;

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
fn hog_throughput(hog: &Path, cgroup: &TestCgroup, mib: u64) -> Option<f64> {
    let mut command = Command::new(hog);
    let step = (mib / 32).max(1);
    command
        .args(["anon", &mib.to_string(), &step.to_string(), "0", "0"])
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    let before = children_cpu();
    let status = cgroup.spawn(command).wait().ok()?;
    let cpu = children_cpu() - before;
    if !status.success() {
        eprintln!("detector-cost: the hog failed: {status}");
        return None;
    }
    (cpu > 0.0).then(|| mib as f64 / cpu)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [hog, rounds, mib] = args.as_slice() else {
        usage("three arguments are needed");
    };
    let hog = Path::new(hog);
    let (rounds, mib) = (number(rounds, "ROUNDS"), number(mib, "MIB"));
    let cgroup = TestCgroup::new("detector-cost", 2 * mib * MIB + 256 * MIB);
    for point in AttachPoint::ALL {
        let load = |detector: bool| {
            let settings = EbpfSettings {
                detector: if detector { vec![point] } else { vec![] },
                ..EbpfSettings::default()
            };
            let (wakes, _rx) = monitor::notify::wake_channel();
            let source = ebpf::start(&settings, wakes, None).map_err(|e| e.to_string())?;
            if detector {
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
        if let Err(why) = load(true) {
            println!("detector-cost: point={} refused: {why}", point.name());
            continue;
        }
        for round in 1..=rounds {
            let order = if round % 2 == 1 {
                [true, false]
            } else {
                [false, true]
            };
            for detector in order {
                let source = match load(detector) {
                    Ok(source) => source,
                    Err(why) => {
                        println!("detector-cost: point={} refused: {why}", point.name());
                        continue;
                    }
                };
                let throughput = hog_throughput(hog, &cgroup, mib);
                drop(source);
                if let Some(mib_per_s) = throughput {
                    println!(
                        "detector-cost: point={} detector={} round={round} mib={mib} mib_per_s={mib_per_s:.1}",
                        point.name(),
                        if detector { "on" } else { "off" }
                    );
                }
            }
        }
    }
}
