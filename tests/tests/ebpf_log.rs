//! The eBPF programs' own log reaches tracing: a record written in the kernel with
//! aya-log-ebpf comes out as a tracing event under the program's target. Run as root
//! (`cargo xtask test`). A test binary of its own: it installs the process's subscriber.
use std::io::Write;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use monitor::notify::detector::AttachPoint;
use monitor::notify::ebpf::EbpfSettings;
use monitor::notify::memcg::ThresholdSpec;
use monitor::notify::{CrossingHook, WakeSource, wake_channel};
use monitor_tests::{Feature, TestCgroup, hog, join_before_exec, require};

const MIB: u64 = 1 << 20;

/// Everything the process logs, kept for the test and copied to stderr.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend_from_slice(bytes);
        let _ = std::io::stderr().write_all(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn lines_with(&self, needles: &[&str]) -> Vec<String> {
        let bytes = self.0.lock().unwrap_or_else(|p| p.into_inner()).clone();
        String::from_utf8_lossy(&bytes)
            .lines()
            .filter(|line| needles.iter().all(|n| line.contains(n)))
            .map(str::to_string)
            .collect()
    }
}

/// A hot path that stalls the ring buffer's consumer on its first call (it is called
/// on the consumer thread), until released or for 10 s at most: a consumer too slow
/// for what the kernel writes.
struct StallingHook {
    stalled: AtomicBool,
    release: Mutex<mpsc::Receiver<()>>,
}

impl CrossingHook for StallingHook {
    fn hard_crossing(&self, _source: WakeSource) {
        if self.stalled.swap(true, Ordering::SeqCst) {
            return;
        }
        let release = self.release.lock().unwrap_or_else(|p| p.into_inner());
        let _ = release.recv_timeout(Duration::from_secs(10));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_ring_buffer_is_logged_by_the_kernel_program_into_tracing() {
    if !require(
        "a_full_ring_buffer_is_logged_by_the_kernel_program",
        &[Feature::Root, Feature::Ebpf],
    ) {
        return;
    }
    // Before the source loads: the programs' log level is taken from tracing's.
    let captured = Captured::default();
    let writer = captured.clone();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("info"))
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .try_init()
        .expect("this test binary's only subscriber");

    let (release_tx, release_rx) = mpsc::channel();
    let hook = Arc::new(StallingHook {
        stalled: AtomicBool::new(false),
        release: Mutex::new(release_rx),
    });
    let (wakes, _rx) = wake_channel();
    // One page of ring buffer (73 records), and no rate limit: a burst overflows it.
    let settings = EbpfSettings {
        ring_bytes: 4096,
        min_interval_ns: 0,
        detector: AttachPoint::ALL.to_vec(),
        ..EbpfSettings::default()
    };
    let source = monitor::notify::ebpf::start(&settings, wakes, Some(hook.clone()))
        .expect("eBPF source starts");
    println!("{}", source.status.detail);
    assert!(
        source.kernel_log.forwarding(),
        "the programs' log is forwarded: {}",
        source.status.detail
    );
    let detector = source
        .detector
        .as_ref()
        .expect("a detector attaches on this kernel");

    // A hard level crossed by a hog: its record reaches the hook, which stalls the consumer.
    let pods = TestCgroup::new("pods", 256 * MIB);
    let base: u64 = pods
        .read(match pods.version {
            monitor::observe::CgroupVersion::V1 => "memory.usage_in_bytes",
            monitor::observe::CgroupVersion::V2 => "memory.current",
        })
        .trim()
        .parse()
        .expect("usage");
    detector.arm(&[ThresholdSpec {
        cgroup: pods.memory_dir.clone(),
        usage_bytes: base + 16 * MIB,
        hard: true,
        passed_when_armed: false,
        threshold: None,
    }]);
    let mut command = hog(&["anon", "32", "1", "0", "0"]);
    command.stdout(Stdio::null());
    join_before_exec(&mut command, &[pods.memory_dir.join("cgroup.procs")]);
    let _ = command.spawn().expect("hog").wait();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !hook.stalled.load(Ordering::SeqCst) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the crossing never reached the hook"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    // The burst: every SIGKILL this process sends is a kill_signal record, also to a
    // child already killed (the kernel traces the signal it then ignores).
    let mut child = std::process::Command::new("sleep")
        .arg("30")
        .stdin(Stdio::null())
        .spawn()
        .expect("sleep");
    let pid = child.id() as libc::pid_t;
    for _ in 0..400 {
        // SAFETY: signals our own unreaped child: the pid cannot be reused before wait.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    let _ = child.wait();
    let counters = source.counters();
    println!("counters while the consumer stalls: {counters:?}");
    assert!(
        counters.ring_full > 0,
        "the burst overflowed the one-page ring buffer: {counters:?}"
    );
    let _ = release_tx.send(());

    // The kernel program logged the drop (first one on its CPU) through AYA_LOGS.
    let needles = [
        "WARN",
        "monitor_ebpf::kill_signal:",
        "ring buffer PRESSURE_EVENTS full, record dropped (1 so far on this CPU)",
    ];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let mut lines = captured.lines_with(&needles);
    while lines.is_empty() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
        lines = captured.lines_with(&needles);
    }
    assert!(
        !lines.is_empty(),
        "no tracing event from the kernel program's log; warnings seen: {:?}",
        captured.lines_with(&["WARN"])
    );
    // Paced per CPU: a record at the first drop on each CPU (the next would be the
    // 1024th), not one per drop.
    let logged = captured.lines_with(&["monitor_ebpf::kill_signal:", "record dropped"]);
    let drops = source.counters().ring_full;
    println!("{} log record(s) for {drops} drops", logged.len());
    assert!(
        (logged.len() as u64) < drops,
        "fewer log records than drops ({drops}): {logged:?}"
    );
    drop(source);
}
