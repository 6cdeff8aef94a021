//! A memory hog for the integration tests and the demo. Run it only inside a cgroup with
//! a memory limit.
//!
//!   hog anon TOTAL_MIB [STEP_MIB] [PAUSE_MS] [HOLD_S]
//!       allocate and touch TOTAL_MIB in STEP_MIB steps, pausing PAUSE_MS after each,
//!       printing "allocated <MiB> <monotonic ns>" per step; then hold the memory HOLD_S s.
//!   With HOG_START_FILE set, anon waits until that file exists before allocating.
//!   With HOG_TERM_FILE set, SIGTERM writes "term <monotonic ns>" there, and the hog
//!   exits HOG_TERM_LINGER_MS later (default 0): a pod that records the signal it got.
//!   hog log MIB [HOLD_S]
//!       write MIB MiB to stdout (a container's log file), print "logged <MiB> <ns>" to
//!       stderr, then hold HOLD_S s and exit 0: a pod that fills the node filesystem.
//!   hog peak TOTAL_MIB HOLD_S FREED_FILE AFTER_S
//!       allocate TOTAL_MIB at full speed, hold it HOLD_S s, free it, create FREED_FILE,
//!       then live on AFTER_S s holding almost nothing.
//!   hog oscillate USAGE_FILE LOW HIGH HALF_PERIOD_MS SECONDS
//!       fill up to HIGH bytes of the cgroup usage in USAGE_FILE, then go down to LOW
//!       and back up every HALF_PERIOD_MS, for SECONDS.
//!   hog after FILE MODE ARGS...
//!       wait until FILE exists, then run MODE ARGS.
//!   hog shm PATH MIB [HOLD_S]
//!       write MIB MiB into the new file PATH (a tmpfs: charged to this cgroup, and still
//!       charged after the process is gone), then hold HOLD_S s.
//!   hog cache PATH HOLD_S
//!       bring the whole existing file PATH into the page cache as pages in use (mapped
//!       and touched, then read twice: active under either LRU, so the working set counts
//!       them), print "cached <MiB> <monotonic ns>", then hold HOLD_S s touching nothing:
//!       a pod holding cold page cache.
//!   hog file PATH SECONDS
//!       re-read an existing file for SECONDS: in a cgroup smaller than the file this is
//!       clean page-cache churn, reclaim (and stall) without any OOM kill. Write the file
//!       outside the cgroup first: dirty pages in a small v1 memcg can end in an OOM kill.
use std::io::{Read, Seek, SeekFrom, Write};
use std::time::{Duration, Instant};

use monitor_bench::util::monotonic_ns;

const MIB: usize = 1 << 20;

fn arg<T: std::str::FromStr>(args: &[String], index: usize, default: Option<T>, name: &str) -> T {
    match args.get(index) {
        Some(text) => text
            .parse()
            .unwrap_or_else(|_| usage(&format!("{name}: not a number: {text}"))),
        None => default.unwrap_or_else(|| usage(&format!("{name} is required"))),
    }
}

fn usage(problem: &str) -> ! {
    eprintln!(
        "hog: {problem}\nusage: hog anon TOTAL_MIB [STEP_MIB] [PAUSE_MS] [HOLD_S] | hog log MIB [HOLD_S] | hog file PATH SECONDS | hog peak TOTAL_MIB HOLD_S FREED_FILE AFTER_S | hog after FILE MODE ARGS... | hog shm PATH MIB [HOLD_S] | hog oscillate USAGE_FILE LOW HIGH HALF_PERIOD_MS SECONDS"
    );
    std::process::exit(2);
}

/// Where SIGTERM is recorded: the final path and a temporary beside it, so a reader never
/// sees a half-written file (the handler writes the temporary and renames it).
struct TermFile {
    path: std::ffi::CString,
    tmp: std::ffi::CString,
    linger_ms: u64,
}

static TERM_FILE: std::sync::OnceLock<TermFile> = std::sync::OnceLock::new();

/// "term <ns>\n" into `buf` without allocating (the hog may be inside malloc when the
/// signal lands); returns the length.
fn term_line(ns: u64, buf: &mut [u8; 32]) -> usize {
    let mut digits = [0u8; 20];
    let mut n = ns;
    let mut len = 0;
    loop {
        digits[len] = b'0' + (n % 10) as u8;
        len += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    buf[..5].copy_from_slice(b"term ");
    for i in 0..len {
        buf[5 + i] = digits[len - 1 - i];
    }
    buf[5 + len] = b'\n';
    6 + len
}

extern "C" fn on_term(_: libc::c_int) {
    if let Some(term) = TERM_FILE.get() {
        let mut line = [0u8; 32];
        let len = term_line(monotonic_ns(), &mut line);
        // SAFETY: open/write/fsync/close/rename/nanosleep/_exit are async-signal-safe and
        // nothing here allocates.
        unsafe {
            let fd = libc::open(
                term.tmp.as_ptr(),
                libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC,
                0o644,
            );
            if fd >= 0 {
                libc::write(fd, line.as_ptr().cast(), len);
                libc::fsync(fd);
                libc::close(fd);
                libc::rename(term.tmp.as_ptr(), term.path.as_ptr());
            }
            let ts = libc::timespec {
                tv_sec: (term.linger_ms / 1000) as i64,
                tv_nsec: ((term.linger_ms % 1000) * 1_000_000) as i64,
            };
            libc::nanosleep(&ts, std::ptr::null_mut());
            libc::_exit(0);
        }
    }
}

fn main() {
    if let Ok(path) = std::env::var("HOG_TERM_FILE") {
        let linger = std::env::var("HOG_TERM_LINGER_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let _ = TERM_FILE.set(TermFile {
            tmp: std::ffi::CString::new(format!("{path}.tmp")).expect("path"),
            path: std::ffi::CString::new(path).expect("path"),
            linger_ms: linger,
        });
        // SAFETY: installs a handler that only touches the OnceLock set above.
        unsafe { libc::signal(libc::SIGTERM, on_term as *const () as libc::sighandler_t) };
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    run(&args);
}

fn run(args: &[String]) {
    match args.first().map(String::as_str) {
        Some("anon") => anon(args),
        Some("file") => file(args),
        Some("cache") => cache(args),
        Some("log") => log(args),
        Some("peak") => peak(args),
        Some("after") => after(args),
        Some("shm") => shm(args),
        Some("oscillate") => oscillate(args),
        _ => usage("unknown mode"),
    }
}

/// `hog peak TOTAL_MIB HOLD_S FREED_FILE AFTER_S`: allocate TOTAL_MIB at full speed, hold
/// it HOLD_S s, free all of it (1 MiB blocks are unmapped at once), create FREED_FILE,
/// then stay alive AFTER_S s holding almost nothing: a pod that peaked and came back down.
fn peak(args: &[String]) {
    let total: usize = arg(args, 1, None, "TOTAL_MIB");
    let hold: u64 = arg(args, 2, None, "HOLD_S");
    let freed: String = arg(args, 3, None, "FREED_FILE");
    let after: u64 = arg(args, 4, None, "AFTER_S");
    let blocks: Vec<Vec<u8>> = (0..total).map(|_| vec![1u8; MIB]).collect();
    println!("done {total} {}", monotonic_ns());
    std::thread::sleep(Duration::from_secs(hold));
    drop(std::hint::black_box(blocks));
    std::fs::write(&freed, format!("{}\n", monotonic_ns()))
        .unwrap_or_else(|e| usage(&format!("{freed}: {e}")));
    println!("freed {}", monotonic_ns());
    std::thread::sleep(Duration::from_secs(after));
}

/// `hog oscillate USAGE_FILE LOW HIGH HALF_PERIOD_MS SECONDS`: allocate until the usage
/// in USAGE_FILE (a cgroup's memory.usage_in_bytes or memory.current) is at HIGH bytes,
/// then every HALF_PERIOD_MS free down to LOW and allocate up to HIGH again, for
/// SECONDS; print "crossings <n>" at the end. A workload that moves across a level and
/// back, doing nothing wrong. Memory comes in 256 KiB mappings of its own, so a free
/// returns it to the kernel at once.
fn oscillate(args: &[String]) {
    const CHUNK: usize = 256 << 10;
    let file: String = arg(args, 1, None, "USAGE_FILE");
    let low: u64 = arg(args, 2, None, "LOW");
    let high: u64 = arg(args, 3, None, "HIGH");
    let half: u64 = arg(args, 4, None, "HALF_PERIOD_MS");
    let seconds: u64 = arg(args, 5, None, "SECONDS");
    let used = || -> u64 {
        std::fs::read_to_string(&file)
            .ok()
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or_else(|| usage(&format!("{file}: not a usage file")))
    };
    let mut chunks: Vec<*mut libc::c_void> = Vec::new();
    let grow = |chunks: &mut Vec<*mut libc::c_void>| {
        // SAFETY: a new private anonymous mapping; nothing else refers to it.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                CHUNK,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            usage("mmap failed");
        }
        // SAFETY: the mapping is CHUNK bytes, writable, ours.
        unsafe { std::ptr::write_bytes(p.cast::<u8>(), 1, CHUNK) };
        chunks.push(p);
    };
    let shrink = |chunks: &mut Vec<*mut libc::c_void>| {
        if let Some(p) = chunks.pop() {
            // SAFETY: a mapping of ours, CHUNK bytes, no longer used.
            unsafe { libc::munmap(p, CHUNK) };
        }
    };
    while used() < high {
        grow(&mut chunks);
    }
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut crossings = 0u64;
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(half));
        while used() > low && !chunks.is_empty() {
            shrink(&mut chunks);
        }
        std::thread::sleep(Duration::from_millis(half));
        while used() < high {
            grow(&mut chunks);
        }
        crossings += 2;
    }
    println!("crossings {crossings}");
}

/// `hog after FILE MODE ARGS...`: wait until FILE exists, then run MODE.
fn after(args: &[String]) {
    let file: String = arg(args, 1, None, "FILE");
    while !std::path::Path::new(&file).exists() {
        std::thread::sleep(Duration::from_millis(1));
    }
    run(&args[2..]);
}

/// `hog shm PATH MIB HOLD_S`: write MIB MiB into a new file PATH (on a tmpfs: its pages
/// are charged to this process's cgroup and stay charged after it is gone), then hold.
fn shm(args: &[String]) {
    let path: String = arg(args, 1, None, "PATH");
    let total: usize = arg(args, 2, None, "MIB");
    let hold: u64 = arg(args, 3, Some(0), "HOLD_S");
    let mut file = std::fs::File::create(&path).unwrap_or_else(|e| usage(&format!("{path}: {e}")));
    let block = vec![1u8; MIB];
    for _ in 0..total {
        file.write_all(&block)
            .unwrap_or_else(|e| usage(&format!("{path}: {e}")));
    }
    println!("done {total} {}", monotonic_ns());
    std::thread::sleep(Duration::from_secs(hold));
}

fn anon(args: &[String]) {
    let total: usize = arg(args, 1, None, "TOTAL_MIB");
    let step: usize = arg(args, 2, Some(1), "STEP_MIB").max(1);
    let pause: u64 = arg(args, 3, Some(0), "PAUSE_MS");
    let hold: u64 = arg(args, 4, Some(0), "HOLD_S");
    if let Ok(start) = std::env::var("HOG_START_FILE") {
        while !std::path::Path::new(&start).exists() {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let mut blocks: Vec<Vec<u8>> = Vec::new();
    let stdout = std::io::stdout();
    let mut allocated = 0;
    while allocated < total {
        let n = step.min(total - allocated);
        // vec![1; n] writes every byte: the pages are really touched and charged.
        blocks.push(vec![1u8; n * MIB]);
        allocated += n;
        let _ = writeln!(stdout.lock(), "allocated {allocated} {}", monotonic_ns());
        if pause > 0 {
            std::thread::sleep(Duration::from_millis(pause));
        }
    }
    let _ = writeln!(stdout.lock(), "done {allocated} {}", monotonic_ns());
    std::thread::sleep(Duration::from_secs(hold));
    std::hint::black_box(&blocks);
}

fn log(args: &[String]) {
    let total: usize = arg(args, 1, None, "MIB");
    let hold: u64 = arg(args, 2, Some(0), "HOLD_S");
    // 1 MiB of 64-byte lines: plain text, as a chatty container would log.
    let line = [b"x".repeat(63), b"\n".to_vec()].concat();
    let chunk = line.repeat(MIB / line.len());
    let mut stdout = std::io::stdout().lock();
    for _ in 0..total {
        if let Err(e) = stdout.write_all(&chunk) {
            usage(&format!("writing the log: {e}"));
        }
    }
    let _ = stdout.flush();
    eprintln!("logged {total} {}", monotonic_ns());
    std::thread::sleep(Duration::from_secs(hold));
}

fn cache(args: &[String]) {
    let path: String = arg(args, 1, None, "PATH");
    let hold: u64 = arg(args, 2, None, "HOLD_S");
    let mut f = std::fs::File::open(&path).unwrap_or_else(|e| usage(&format!("{path}: {e}")));
    let len = f.metadata().map(|m| m.len() as usize).unwrap_or(0);
    if len > 0 {
        // SAFETY: a private read-only mapping of a file we opened, unmapped below; only
        // read through a volatile pointer within its length.
        unsafe {
            let map = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                std::os::fd::AsRawFd::as_raw_fd(&f),
                0,
            );
            if map == libc::MAP_FAILED {
                usage(&format!("{path}: mmap failed"));
            }
            let bytes = map as *const u8;
            let mut sum = 0u8;
            for offset in (0..len).step_by(4096) {
                sum = sum.wrapping_add(std::ptr::read_volatile(bytes.add(offset)));
            }
            std::hint::black_box(sum);
            libc::munmap(map, len);
        }
    }
    let mut buf = vec![0u8; MIB];
    for _ in 0..2 {
        let _ = f.seek(SeekFrom::Start(0));
        while matches!(f.read(&mut buf), Ok(n) if n > 0) {}
    }
    println!("cached {} {}", len / MIB, monotonic_ns());
    let _ = std::io::stdout().flush();
    std::thread::sleep(Duration::from_secs(hold));
}

fn file(args: &[String]) {
    let path: String = arg(args, 1, None, "PATH");
    let seconds: u64 = arg(args, 2, None, "SECONDS");
    let mut f = std::fs::File::open(&path).unwrap_or_else(|e| usage(&format!("{path}: {e}")));
    let mut buf = vec![0u8; MIB];
    let deadline = Instant::now() + Duration::from_secs(seconds);
    while Instant::now() < deadline {
        let _ = f.seek(SeekFrom::Start(0));
        while matches!(f.read(&mut buf), Ok(n) if n > 0) {}
    }
}
