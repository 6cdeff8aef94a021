use std::time::Duration;

use super::*;
use crate::policy::stats::PodStats;

/// hard memory.available<100 bytes in the fixture's scale; the levels below carry it.
const KUBELET: &str = "evictionHard: {memory.available: 1Gi}\n";

fn config() -> Arc<EvictionConfig> {
    let (kubelet, _) =
        crate::config::kubelet::load_kubelet_config(KUBELET, "kubelet.yaml").expect("test config");
    Arc::new(kubelet.eviction)
}

/// A fake memory cgroup for the level (its usage and memory.stat), and fake pod
/// cgroups (a usage file and a `cgroup.kill` each), in a temp dir.
struct Fixture {
    dir: tempfile::TempDir,
    hot: HotPath,
    /// Held while the fixture lives: a watch reads without sleeping, and two at once (two
    /// tests in parallel) would keep the threads that rewrite their files off both CPUs
    /// of a small machine until their budgets ran out.
    _one_test_at_a_time: OneTestAtATime,
}

/// The lock of [`Fixture`]s: taken by a test's first fixture, and not again by a second
/// one the same test makes while the first lives.
struct OneTestAtATime(Option<std::sync::MutexGuard<'static, ()>>);

static FIXTURES: std::sync::Mutex<()> = std::sync::Mutex::new(());

thread_local! {
    static HOLDS_FIXTURES: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

impl OneTestAtATime {
    fn take() -> OneTestAtATime {
        if HOLDS_FIXTURES.get() {
            return OneTestAtATime(None);
        }
        let guard = FIXTURES
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        HOLDS_FIXTURES.set(true);
        OneTestAtATime(Some(guard))
    }
}

impl Drop for OneTestAtATime {
    fn drop(&mut self) {
        if self.0.is_some() {
            HOLDS_FIXTURES.set(false);
        }
    }
}

/// The hard memory.available<1Gi (of 8 GiB) level armed on `cgroup` at `usage_bytes`.
fn available_level(cgroup: &std::path::Path, usage_bytes: u64) -> ThresholdSpec {
    ThresholdSpec {
        cgroup: cgroup.to_path_buf(),
        usage_bytes,
        hard: true,
        passed_when_armed: false,
        threshold: Some(ArmedThreshold {
            signal: Signal::MemoryAvailable,
            quantity_bytes: 1 << 30,
            capacity_bytes: 8 << 30,
            relief: false,
        }),
    }
}

impl Fixture {
    fn new(level: u64) -> Fixture {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("memory.usage_in_bytes"), "100\n").expect("usage");
        std::fs::write(dir.path().join("memory.stat"), "total_inactive_file 0\n").expect("stat");
        let hot = HotPath::new();
        hot.set_levels(
            CgroupVersion::V1,
            &[
                available_level(dir.path(), level),
                // Soft levels never arm the hot path.
                ThresholdSpec {
                    cgroup: dir.path().to_path_buf(),
                    usage_bytes: 50,
                    hard: false,
                    passed_when_armed: false,
                    threshold: None,
                },
            ],
            |_| 0,
        );
        Fixture {
            dir,
            hot,
            _one_test_at_a_time: OneTestAtATime::take(),
        }
    }

    /// A usage level of 1000 armed when 300 of it was inactive page cache (the
    /// threshold is met at a working set of 700), with default/a armed.
    fn with_page_cache_at_arming() -> Fixture {
        let f = Fixture::new(0);
        f.set_level(1000, 300);
        f.arm("default/a");
        f
    }

    /// Sets one hard usage level, armed with `inactive` of page cache, as a
    /// synchronize does.
    fn set_level(&self, usage_bytes: u64, inactive: u64) {
        self.hot.set_levels(
            CgroupVersion::V1,
            &[ThresholdSpec {
                cgroup: self.dir.path().to_path_buf(),
                usage_bytes,
                hard: true,
                passed_when_armed: false,
                threshold: None,
            }],
            |_| inactive,
        );
    }

    /// A hard notifier of `source` tells while `file` is rewritten with `text` 5 ms
    /// later (see [`Fixture::rewrite_later`]); whether `pod` was killed ("1").
    fn told_while_rewritten(
        &self,
        source: WakeSource,
        file: &str,
        text: &'static str,
        pod: &str,
    ) -> String {
        let rewrite = self.rewrite_later(file, text);
        self.hot.hard_crossing(source);
        rewrite.join().expect("rewrite");
        self.killed(pod)
    }

    /// Writes `text` over the start of `file` 5 ms from now, in place: a watch
    /// reading meanwhile never sees the file truncated.
    fn rewrite_later(&self, file: &str, text: &'static str) -> std::thread::JoinHandle<()> {
        let path = self.dir.path().join(file);
        std::thread::spawn(move || {
            use std::io::Write;
            std::thread::sleep(Duration::from_millis(5));
            std::fs::OpenOptions::new()
                .write(true)
                .open(&path)
                .and_then(|mut f| f.write_all(text.as_bytes()))
                .expect("rewrite");
        })
    }

    fn pod_dir(&self, key: &str) -> std::path::PathBuf {
        let dir = self.dir.path().join("pods").join(key.replace('/', "_"));
        std::fs::create_dir_all(&dir).expect("pod dir");
        dir
    }

    /// Sets the usage of the fake pods' parent cgroup.
    fn set_parent_usage(&self, bytes: u64) {
        let dir = self.dir.path().join("pods");
        std::fs::create_dir_all(&dir).expect("pods dir");
        std::fs::write(dir.join("memory.usage_in_bytes"), format!("{bytes}\n"))
            .expect("parent usage");
    }

    /// Sets a pod's usage (its fake cgroup's memory.usage_in_bytes).
    fn set_pod_usage(&self, key: &str, bytes: u64) {
        std::fs::write(
            self.pod_dir(key).join("memory.usage_in_bytes"),
            format!("{bytes}\n"),
        )
        .expect("pod usage");
    }

    /// Arms `pods` (key, working set at the synchronize; usage the same: no page
    /// cache), ranked as given by the caller.
    fn arm_pods(&self, pods: &[(&str, u64)]) {
        let pods: Vec<(String, crate::policy::pod::Pod, u64)> = pods
            .iter()
            .map(|(key, ws)| {
                let name = key.split('/').nth(1).expect("ns/name");
                (
                    key.to_string(),
                    crate::policy::testing::pod(name, "", ""),
                    *ws,
                )
            })
            .collect();
        self.arm_these(pods);
    }

    /// Arms `pods` (key, pod, working set at the synchronize), ranked as given.
    fn arm_these(&self, pods: Vec<(String, crate::policy::pod::Pod, u64)>) {
        let stats = pods
            .into_iter()
            .map(|(key, pod, ws)| {
                self.set_pod_usage(&key, ws);
                PodWithStats {
                    pod: Arc::new(pod),
                    stats: PodStats {
                        memory_working_set_bytes: Some(ws),
                        // Its one container, as the synchronize read it.
                        containers: vec![crate::policy::stats::ContainerStats {
                            name: "c".into(),
                            memory_working_set_bytes: Some(ws),
                            ..Default::default()
                        }],
                        ..PodStats::default()
                    },
                }
            })
            .collect();
        self.hot.arm(
            Ok(Candidates {
                pods: stats,
                fs_layout: FsLayout::Shared,
                config: config(),
            }),
            |key| {
                let dir = self.pod_dir(key);
                let kill = dir.join("cgroup.kill");
                if !kill.exists() {
                    std::fs::write(&kill, "").expect("kill file");
                }
                Some(
                    KillSwitch::open(key, &kill)
                        .ok()?
                        .with_memory(CgroupReader::new(CgroupVersion::V1, dir)),
                )
            },
        );
    }

    fn arm(&self, pod: &str) {
        self.arm_pods(&[(pod, 500)]);
        assert_eq!(self.hot.armed_pod().as_deref(), Some(pod));
    }

    fn set_usage(&self, bytes: u64) {
        std::fs::write(
            self.dir.path().join("memory.usage_in_bytes"),
            format!("{bytes}\n"),
        )
        .expect("usage");
    }

    fn set_inactive(&self, bytes: u64) {
        std::fs::write(
            self.dir.path().join("memory.stat"),
            format!("cache 1\ntotal_inactive_file {bytes}\n"),
        )
        .expect("stat");
    }

    fn killed(&self, pod: &str) -> String {
        std::fs::read_to_string(self.pod_dir(pod).join("cgroup.kill")).unwrap_or_default()
    }

    fn fired(&self) -> Vec<String> {
        self.hot
            .take_fired()
            .into_iter()
            .map(|k| k.decision.pod_key)
            .collect()
    }
}

#[test]
fn a_confirmed_crossing_kills_the_armed_pod_once() {
    let f = Fixture::new(1000);
    f.arm("default/big");
    // The notifier fires on the way down too: below the level nothing happens.
    f.hot.hard_crossing(WakeSource::MemcgThreshold);
    assert_eq!(
        f.killed("default/big"),
        "",
        "usage 100 is under the level 1000"
    );
    assert!(f.hot.take_fired().is_empty());
    f.set_usage(1000);
    f.hot.hard_crossing(WakeSource::MemcgThreshold);
    assert_eq!(f.killed("default/big"), "1", "one write to cgroup.kill");
    let fired = f.hot.take_fired();
    assert_eq!(fired.len(), 1);
    assert_eq!(fired[0].decision.pod_key, "default/big");
    assert!(fired[0].killed_ns >= fired[0].detected_ns);
    // Disarmed by the kill: another crossing kills nobody until the next synchronize.
    f.hot.hard_crossing(WakeSource::MemcgThreshold);
    assert_eq!(f.killed("default/big"), "1");
    assert!(f.hot.take_fired().is_empty());
    assert!(f.hot.armed_pod().is_none());
}

#[test]
fn the_victim_is_picked_on_the_working_sets_read_at_the_crossing() {
    let f = Fixture::new(1000);
    // Ranked at the synchronize: a (900) before b (100).
    f.arm_pods(&[("default/a", 900), ("default/b", 100)]);
    assert_eq!(f.hot.armed_pods(), vec!["default/a", "default/b"]);
    // Since then a freed its memory and b grew: b is the pick now.
    f.set_pod_usage("default/a", 10);
    f.set_pod_usage("default/b", 800);
    f.set_usage(1000);
    f.hot.hard_crossing(WakeSource::Ebpf);
    assert_eq!(f.killed("default/a"), "", "a holds nothing any more");
    assert_eq!(f.killed("default/b"), "1");
    let fired = f.hot.take_fired();
    assert_eq!(fired.len(), 1);
    let kill = &fired[0];
    assert_eq!(kill.decision.pod_key, "default/b");
    assert_eq!(kill.victim_working_set_bytes, 800);
    // The message names the threshold crossed and the signal at the crossing: the
    // level (the first working set that meets the threshold) reached exactly, so
    // available is one byte short of the threshold's quantity.
    assert!(
        kill.decision
            .message
            .contains("Threshold quantity: 1Gi, available: 1073741823."),
        "{}",
        kill.decision.message
    );
    assert_eq!(kill.signal_available, Some((1 << 30) - 1));
    // Its container's memory as read at the kill (800 bytes), not the synchronize's (100).
    assert!(
        kill.decision
            .message
            .contains("Container c was using 800, request is 0"),
        "{}",
        kill.decision.message
    );
}

#[test]
fn the_hot_pick_is_the_policys_first_on_the_numbers_read() {
    // Candidates of mixed requests, priorities (system-critical among them) and fresh
    // working sets: the pod killed is always the one the policy's own ranking puts
    // first on the working sets read at the kill, and none when all are critical.
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    for round in 0..200 {
        let f = Fixture::new(1000);
        // The parent leaves room for any of them to have grown: every one is read.
        f.set_parent_usage(1 << 40);
        let count = 1 + next(5) as usize;
        let mut pods = Vec::new();
        for i in 0..count {
            let key = format!("default/p{i}");
            let request = ["", "memory=300", "memory=600"][next(3) as usize];
            let mut pod = crate::policy::testing::pod(&format!("p{i}"), request, "");
            pod.spec.priority =
                Some([0, 1000, crate::policy::types::SYSTEM_CRITICAL_PRIORITY][next(3) as usize]);
            pods.push((key, pod, next(1000)));
        }
        f.arm_these(pods.clone());
        let fresh: Vec<PodWithStats> = pods
            .iter()
            .map(|(key, pod, _)| {
                let ws = next(1000);
                f.set_pod_usage(key, ws);
                PodWithStats {
                    pod: Arc::new(pod.clone()),
                    stats: PodStats {
                        memory_working_set_bytes: Some(ws),
                        ..PodStats::default()
                    },
                }
            })
            .collect();
        let input = SyncInput {
            observations: Observations::new(),
            pods: fresh,
            fs_layout: FsLayout::Shared,
        };
        let expected =
            hard_eviction_victim(&input, Signal::MemoryAvailable).map(|i| pods[i].0.clone());
        f.set_usage(1000);
        f.hot.hard_crossing(WakeSource::Ebpf);
        assert_eq!(f.fired().first().cloned(), expected, "round {round}");
    }
}

#[test]
fn a_critical_pod_read_does_not_end_the_reads_before_the_victim_is_known() {
    // Ranked at the synchronize: a, then s (a static pod: critical, never evicted, of
    // the same priority), then b; their parent holds 1300 now.
    let f = Fixture::new(1000);
    f.set_parent_usage(1300);
    let mut s = crate::policy::testing::pod("s", "", "");
    s.metadata
        .annotations
        .insert("kubernetes.io/config.source".into(), "file".into());
    assert!(s.is_critical());
    let plain = |name: &str| crate::policy::testing::pod(name, "", "");
    f.arm_these(vec![
        ("default/a".into(), plain("a"), 500),
        ("default/s".into(), s, 400),
        ("default/b".into(), plain("b"), 50),
    ]);
    // Now a holds 100, s 900 and b 300: what the parent leaves for b after a and s
    // could not outrank s, but it can outrank a, the victim so far, and it does.
    f.set_pod_usage("default/a", 100);
    f.set_pod_usage("default/s", 900);
    f.set_pod_usage("default/b", 300);
    f.set_usage(1000);
    f.hot.hard_crossing(WakeSource::Ebpf);
    assert_eq!(f.killed("default/s"), "", "a critical pod is never killed");
    assert_eq!(f.killed("default/a"), "");
    assert_eq!(f.killed("default/b"), "1", "b holds more than a");
}

#[test]
fn candidates_are_read_only_while_the_memory_left_could_change_the_pick() {
    let f = Fixture::new(1000);
    // The candidates' parent cgroup says 600 in all.
    f.set_parent_usage(600);
    f.arm_pods(&[("default/a", 500), ("default/b", 60), ("default/c", 40)]);
    // c's file says 900, more than the holder leaves after a (100): trusting the
    // holder, neither b nor c could outrank a, so c is not even read.
    f.set_pod_usage("default/c", 900);
    f.set_usage(1000);
    f.hot.hard_crossing(WakeSource::Ebpf);
    assert_eq!(
        f.killed("default/a"),
        "1",
        "a ranks first on what could be read"
    );
    assert_eq!(f.killed("default/c"), "");
    let fired = f.hot.take_fired();
    assert_eq!(fired[0].decision.pod_key, "default/a");
    assert_eq!(fired[0].candidates_read, 1, "only a was read");

    // With room for c to have grown (the holder says 1500), c is read and killed.
    let f = Fixture::new(1000);
    f.set_parent_usage(600);
    f.arm_pods(&[("default/a", 500), ("default/b", 60), ("default/c", 40)]);
    f.set_parent_usage(1500);
    f.set_pod_usage("default/c", 900);
    f.set_usage(1000);
    f.hot.hard_crossing(WakeSource::Ebpf);
    assert_eq!(f.killed("default/a"), "");
    assert_eq!(f.killed("default/c"), "1", "c grew past a");
}

#[test]
fn a_kill_not_yet_taken_keeps_the_hot_path_disarmed() {
    let f = Fixture::new(1000);
    f.arm("default/a");
    f.set_usage(1000);
    f.hot.hard_crossing(WakeSource::Ebpf);
    // A synchronize that started before the kill arms again before it took the kill:
    // the kill is an eviction under way, so nothing is armed.
    f.arm_pods(&[("default/b", 500)]);
    assert!(f.hot.armed_pods().is_empty());
    f.hot.hard_crossing(WakeSource::Ebpf);
    assert_eq!(f.fired(), vec!["default/a"], "one kill, booked once");
    f.arm("default/b");
    f.hot.hard_crossing(WakeSource::Ebpf);
    assert_eq!(f.fired(), vec!["default/b"]);
}

#[test]
fn nothing_is_killed_when_disarmed_or_without_a_hard_level() {
    let f = Fixture::new(1000);
    f.set_usage(5000);
    f.hot.hard_crossing(WakeSource::MemcgThreshold);
    assert!(f.fired().is_empty(), "no victim armed");
    assert_eq!(f.hot.unarmed(), Some(super::Unarmed::NotYet));
    f.arm("default/a");
    assert_eq!(f.hot.unarmed(), None, "armed");
    f.hot.arm(Err(super::Unarmed::Paced), |_| None);
    assert_eq!(f.hot.unarmed(), Some(super::Unarmed::Paced));
    f.hot.hard_crossing(WakeSource::MemcgThreshold);
    assert_eq!(f.killed("default/a"), "", "disarmed");
    // Armed with a pod whose cgroup does not open: said so.
    f.hot.arm(
        Ok(Candidates {
            pods: vec![PodWithStats {
                pod: Arc::new(crate::policy::testing::pod("gone", "", "")),
                stats: PodStats::default(),
            }],
            fs_layout: FsLayout::Shared,
            config: config(),
        }),
        |_| None,
    );
    assert_eq!(f.hot.unarmed(), Some(super::Unarmed::NoSwitch));
    // Only soft levels: the soft spec's 50 is exceeded, but it does not count.
    let f = Fixture::new(u64::MAX);
    f.set_usage(5000);
    f.arm("default/a");
    f.hot.hard_crossing(WakeSource::MemcgThreshold);
    assert_eq!(f.killed("default/a"), "");
    assert_eq!(f.hot.armed_pod().as_deref(), Some("default/a"));
}

#[test]
fn page_cache_alone_past_the_usage_level_kills_nobody() {
    let f = Fixture::with_page_cache_at_arming();
    // Usage past the level, but 500 of it reclaimable cache: working set 600 < 700.
    f.set_usage(1100);
    f.set_inactive(500);
    f.hot.hard_crossing(WakeSource::MemcgThreshold);
    assert_eq!(
        f.killed("default/a"),
        "",
        "a false alarm costs a read, never a kill"
    );
    // The working set itself reaches 700.
    f.set_inactive(400);
    f.hot.hard_crossing(WakeSource::MemcgThreshold);
    assert_eq!(f.killed("default/a"), "1");
}

#[test]
fn an_early_notifier_is_followed_by_a_close_watch_that_kills_at_the_level() {
    let f = Fixture::new(1000);
    f.arm("default/a");
    // Under the early level (1000 − 100): it fired on the way down; no watch.
    f.set_usage(850);
    let started = std::time::Instant::now();
    assert!(!f.hot.early_crossing(WakeSource::MemcgThreshold, 100, 1));
    assert!(
        started.elapsed() < WATCH_WINDOW,
        "no watch below the early level"
    );
    // Between the early level and the level: watched until the level is reached.
    f.set_usage(950);
    let raise = f.rewrite_later("memory.usage_in_bytes", "1000\n");
    assert!(f.hot.early_crossing(WakeSource::MemcgThreshold, 100, 1));
    raise.join().expect("raise");
    assert_eq!(f.fired(), vec!["default/a"]);
}

#[test]
fn a_second_early_notifier_starts_no_second_watch_while_one_runs() {
    let f = Fixture::new(1000);
    f.arm("default/a");
    f.set_usage(950);
    // A watch runs (another source's, on another thread).
    let running = super::watch::Watching::take(&f.hot).expect("no watch yet");
    assert!(
        super::watch::Watching::take(&f.hot).is_none(),
        "one at a time"
    );
    let started = std::time::Instant::now();
    assert!(!f.hot.early_crossing(WakeSource::Ebpf, 100, 2));
    assert!(started.elapsed() < WATCH_WINDOW / 2, "no second watch");
    assert_eq!(f.hot.watch_cpu(), Duration::ZERO, "nothing watched");
    // Once it has ended, the next early notifier watches, and kills at the level.
    drop(running);
    let raise = f.rewrite_later("memory.usage_in_bytes", "1000\n");
    assert!(f.hot.early_crossing(WakeSource::Ebpf, 100, 2));
    raise.join().expect("raise");
    assert_eq!(f.fired(), vec!["default/a"]);
    assert!(
        !f.hot.watching.load(std::sync::atomic::Ordering::Acquire),
        "over"
    );
}

#[test]
fn a_hard_notifier_during_a_watch_leaves_its_look_to_the_watch() {
    let f = Fixture::new(1000);
    f.arm("default/a");
    f.set_usage(1000);
    let running = super::watch::Watching::take(&f.hot).expect("no watch yet");
    // At the level, but a watch runs: it looks, not this notifier's thread.
    f.hot.hard_crossing(WakeSource::Ebpf);
    assert!(f.fired().is_empty(), "left to the watch");
    // The watch ends without having killed (here: it never looked); as `watch` does at
    // its end, the flag goes down and the look it was left is taken, its kill reported.
    drop(running);
    assert!(f.hot.take_left_hard_look(), "killed by the look left");
    assert_eq!(f.fired(), vec!["default/a"]);
    // Taken once: nothing is left for the next watch's end.
    f.hot.take_fired();
    f.arm("default/b");
    assert!(!f.hot.take_left_hard_look(), "nothing left");
    assert!(f.fired().is_empty(), "nothing left");
}

#[test]
fn a_watch_that_sees_no_crossing_ends_by_its_window_or_its_budget() {
    let f = Fixture::new(1000);
    f.arm("default/a");
    f.set_usage(950);
    let cpus = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)).expect("affinity");
    let started = std::time::Instant::now();
    assert!(!f.hot.early_crossing(WakeSource::MemcgThreshold, 100, 1));
    // An early watch spends the budget but for the hard notifiers' reserve.
    assert!(started.elapsed() >= WATCH_SPIN.min(WATCH_BUDGET - WATCH_HARD_RESERVE));
    // The usage stood still all along: where it spun, the watch left its CPU, and gave
    // the thread all its CPUs back when it ended.
    assert_eq!(
        nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)).expect("affinity"),
        cpus,
        "the watch gave its CPUs back"
    );
    assert_eq!(f.killed("default/a"), "", "never reached: nobody killed");
    let used = f.hot.watch_cpu();
    assert!(
        used <= WATCH_BUDGET + Duration::from_millis(5),
        "the watch kept to its budget: {used:?}"
    );
    assert_eq!(
        f.hot.armed_pod().as_deref(),
        Some("default/a"),
        "still armed"
    );
    // Right after, an early notifier starts no new watch, even at the level: the
    // notifier at the level tells instead.
    f.set_usage(1000);
    let started = std::time::Instant::now();
    assert!(!f.hot.early_crossing(WakeSource::MemcgThreshold, 100, 1));
    assert!(started.elapsed() < WATCH_SPIN, "resting");
    f.hot.hard_crossing(WakeSource::MemcgThreshold);
    assert_eq!(f.killed("default/a"), "1");
    f.hot.take_fired();
    f.arm("default/b");
    // Disarmed: no watch at all.
    f.hot.arm(Err(super::Unarmed::NoVictim), |_| None);
    assert!(!f.hot.early_crossing(WakeSource::MemcgThreshold, 100, 1));
}

#[test]
fn an_early_notifier_that_keeps_firing_rests_until_the_levels_are_set_again() {
    let f = Fixture::new(1000);
    f.arm("default/a");
    // Usage above the early level then back below it, again and again: each watch
    // ends at once (under every early level), and each counts.
    f.set_usage(850);
    for _ in 0..EARLY_FIRES_PER_ARMING {
        assert!(!f.hot.early_crossing(WakeSource::MemcgThreshold, 100, 1));
    }
    assert_eq!(
        f.hot.lock().early_fires[&1].len(),
        EARLY_FIRES_PER_ARMING as usize
    );
    // Another early notifier is not rested by this one's flapping.
    f.set_usage(850);
    assert!(!f.hot.early_crossing(WakeSource::MemcgThreshold, 100, 2));
    assert_eq!(f.hot.lock().early_fires[&2].len(), 1);
    // Rested: even at the level, no watch (the exact notifier still tells).
    f.set_usage(1000);
    assert!(!f.hot.early_crossing(WakeSource::MemcgThreshold, 100, 1));
    assert_eq!(f.killed("default/a"), "");
    // Still rested once its fires are older than the window: the rest lasts until
    // the next synchronize, not a window.
    for at in f.hot.lock().early_fires.get_mut(&1).expect("fires") {
        *at = 0;
    }
    assert!(!f.hot.early_crossing(WakeSource::MemcgThreshold, 100, 1));
    assert_eq!(f.killed("default/a"), "");
    // The next synchronize sets the levels again: watched once more.
    f.set_level(1000, 0);
    assert!(f.hot.early_crossing(WakeSource::MemcgThreshold, 100, 1));
    assert_eq!(f.fired(), vec!["default/a"]);
}

#[test]
fn the_watch_budget_refills_at_its_rate_and_caps_at_its_size() {
    let mut budget = WatchBudget {
        left_ns: 0,
        refilled_at_ns: 0,
    };
    // 100 ms at 20 ms/s: 2 ms back.
    assert_eq!(budget.refill(100_000_000), 2_000_000);
    // Never past the burst.
    assert_eq!(
        budget.refill(100_000_000_000),
        WATCH_BUDGET.as_nanos() as u64
    );
}

#[test]
fn an_early_watch_leaves_the_budgets_reserve_to_a_hard_notifiers_watch() {
    let mut f = Fixture::with_page_cache_at_arming();
    // Sleeping between looks, the reserve lasts past the rewrite below.
    f.hot.spin = false;
    // What an early watch that started far below the level left of the budget (less
    // 100 µs, which the budget takes 5 s to regain while the test runs).
    *f.hot.budget.lock().expect("budget") = WatchBudget {
        left_ns: (WATCH_HARD_RESERVE - Duration::from_micros(100)).as_nanos() as u64,
        refilled_at_ns: monotonic_ns(),
    };
    // The usage level is reached, the working set not yet (400 of page cache).
    f.set_usage(1000);
    f.set_inactive(400);
    // Another early notifier starts no watch on the reserve.
    assert!(!f.hot.early_crossing(WakeSource::Ebpf, 100, 1));
    assert_eq!(f.hot.watch_cpu(), Duration::ZERO, "no early watch ran");
    // The hard notifier's watch runs on it and kills once the working set gets there.
    let shrink = f.rewrite_later("memory.stat", "cache 1\ntotal_inactive_file 200\n");
    f.hot.hard_crossing(WakeSource::Ebpf);
    shrink.join().expect("shrink");
    assert_eq!(f.killed("default/a"), "1", "killed on the reserve");
    assert!(f.hot.watch_cpu() > Duration::ZERO, "the hard watch ran");
}

#[test]
fn a_crossing_short_of_the_working_set_is_watched_until_it_gets_there() {
    let f = Fixture::with_page_cache_at_arming();
    // The usage level is reached, the working set not yet (400 of page cache).
    f.set_usage(1000);
    f.set_inactive(400);
    // Same length as before: the file is rewritten in place.
    let killed = f.told_while_rewritten(
        WakeSource::Ebpf,
        "memory.stat",
        "cache 1\ntotal_inactive_file 200\n",
        "default/a",
    );
    assert_eq!(killed, "1", "killed once the working set reached 700");
    let fired = f.hot.take_fired();
    assert!(fired[0].detected_ns > 0);
}

#[test]
fn re_arming_another_pod_replaces_the_victim() {
    let f = Fixture::new(10);
    f.arm("default/a");
    f.arm("default/b");
    f.set_usage(10);
    f.hot.hard_crossing(WakeSource::MemoryEvents);
    assert_eq!(f.fired(), vec!["default/b"]);
}

#[test]
fn the_ring_readers_watch_runs_on_the_watcher_thread_and_the_reader_returns_at_once() {
    let mut f = Fixture::with_page_cache_at_arming();
    // The watcher runs at real-time priority when the tests run as root: spinning, it
    // could keep this thread (which rewrites the statistics) off both CPUs of a small
    // machine until its budget is spent. Sleeping between looks, it cannot.
    f.hot.spin = false;
    let hot = Arc::new(f.hot);
    let (wakes, mut woken) = crate::notify::wake_channel();
    hot.start_watcher(wakes).expect("watcher thread");
    // The usage level is reached, the working set not yet: a watch is needed.
    std::fs::write(f.dir.path().join("memory.usage_in_bytes"), "1000\n").expect("usage");
    std::fs::write(
        f.dir.path().join("memory.stat"),
        "cache 1\ntotal_inactive_file 400\n",
    )
    .expect("stat");
    // Handed over: an inline watch would have run out its window before returning,
    // with the working set short throughout, and killed nobody.
    hot.hard_crossing(WakeSource::Ebpf);
    assert!(hot.take_fired().is_empty(), "not reached yet");
    // The watcher kills once the working set gets there (rewritten in place).
    {
        use std::io::Write;
        std::fs::OpenOptions::new()
            .write(true)
            .open(f.dir.path().join("memory.stat"))
            .and_then(|mut file| file.write_all(b"cache 1\ntotal_inactive_file 200\n"))
            .expect("rewrite");
    }
    let deadline = std::time::Instant::now() + WATCH_WINDOW * 2;
    let mut fired = Vec::new();
    while fired.is_empty() && std::time::Instant::now() < deadline {
        fired = hot.take_fired();
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(fired.len(), 1, "killed by the watcher thread");
    assert_eq!(fired[0].decision.pod_key, "default/a");
    // The kill wakes the loop, which books it.
    let deadline = std::time::Instant::now() + Duration::from_secs(1);
    let wake = loop {
        match woken.try_recv() {
            Ok(wake) => break wake,
            Err(_) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(1))
            }
            Err(err) => panic!("no wake after the watcher's kill: {err}"),
        }
    };
    assert_eq!(wake.source, WakeSource::Ebpf);
    assert!(woken.try_recv().is_err(), "one wake for one kill");
}

#[test]
fn setting_the_levels_opens_the_watchers_descriptors_before_any_watch() {
    let f = Fixture::new(10);
    let hot = Arc::new(f.hot);
    let (wakes, _woken) = crate::notify::wake_channel();
    hot.start_watcher(wakes).expect("watcher thread");
    // How many descriptors of `path` this process holds: the confirmation's (opened as
    // the levels are set) and the watcher's; no look or watch runs here.
    let held = |path: &std::path::Path| {
        let path = path.canonicalize().expect("canonical path");
        std::fs::read_dir("/proc/self/fd")
            .expect("/proc/self/fd")
            .filter_map(|entry| std::fs::read_link(entry.ok()?.path()).ok())
            .filter(|target| *target == path)
            .count()
    };
    let until = |what: &str, done: &dyn Fn() -> bool| {
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        while !done() {
            assert!(std::time::Instant::now() < deadline, "{what}");
            std::thread::sleep(Duration::from_millis(1));
        }
    };
    let level_at = |dir: &std::path::Path| ThresholdSpec {
        cgroup: dir.to_path_buf(),
        usage_bytes: 1000,
        hard: true,
        passed_when_armed: false,
        threshold: None,
    };
    let first = f.dir.path().join("memory.usage_in_bytes");
    let stat = f.dir.path().join("memory.stat");
    assert_eq!(
        (held(&first), held(&stat)),
        (1, 1),
        "levels set before the watcher started: the confirmation's files alone are open"
    );
    hot.set_levels(CgroupVersion::V1, &[level_at(f.dir.path())], |_| 0);
    until("the watcher opened the level's files", &|| {
        held(&first) == 2 && held(&stat) == 2
    });
    // The level moves to another cgroup: its files are opened, the old ones closed.
    let other = f.dir.path().join("other");
    std::fs::create_dir_all(&other).expect("other cgroup");
    std::fs::write(other.join("memory.usage_in_bytes"), "100\n").expect("usage");
    std::fs::write(other.join("memory.stat"), "total_inactive_file 0\n").expect("stat");
    hot.set_levels(CgroupVersion::V1, &[level_at(&other)], |_| 0);
    let second = other.join("memory.usage_in_bytes");
    until("the new level's files opened, the old ones closed", &|| {
        held(&second) == 2
            && held(&other.join("memory.stat")) == 2
            && held(&first) == 0
            && held(&stat) == 0
    });
}

/// A fixture whose hot path confirms memory.available levels on a fake node (a meminfo
/// of 8 GiB), with memory.available<1Gi armed on the fixture's cgroup at usage 1000, as
/// the crossing detector arms the node's level on the pods cgroup.
fn with_node_counter() -> (Fixture, tempfile::TempDir) {
    let mut f = Fixture::new(0);
    let proc = tempfile::tempdir().expect("tempdir");
    f.hot = HotPath::new().confirming_node_on(
        MemoryCounter::node(
            CgroupVersion::V2,
            std::path::Path::new("/node"),
            proc.path(),
        ),
        "/node".into(),
    );
    f.hot.set_levels(
        CgroupVersion::V1,
        &[available_level(f.dir.path(), 1000)],
        |_| 0,
    );
    (f, proc)
}

/// Writes the fake node's meminfo (under the proc root `proc`) with `free_mib` free and no
/// page cache.
fn set_node_free(proc: &std::path::Path, free_mib: u64) {
    std::fs::write(
        proc.join("meminfo"),
        format!(
            "MemTotal: {} kB\nMemFree: {} kB\nInactive(file): 0 kB\n",
            8 << 20,
            free_mib << 10
        ),
    )
    .expect("meminfo");
}

/// [`set_node_free`] 5 ms from now, on another thread: the node moving while a watch runs.
fn set_node_free_soon(proc: &tempfile::TempDir, free_mib: u64) -> std::thread::JoinHandle<()> {
    let proc = proc.path().to_path_buf();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(5));
        set_node_free(&proc, free_mib);
    })
}

#[test]
fn a_node_level_on_the_pods_cgroup_kills_only_once_the_node_itself_is_past_it() {
    let (f, proc) = with_node_counter();
    f.arm("default/big");
    // The pods reached the level armed for them, but the rest of the node has shrunk
    // since it was armed: the node still has 2 GiB available, and the kubelet would not
    // evict anybody.
    set_node_free(proc.path(), 2048);
    f.set_usage(1000);
    f.hot.hard_crossing(WakeSource::Ebpf);
    assert_eq!(
        f.killed("default/big"),
        "",
        "the node is 1 GiB above its threshold"
    );
    assert!(f.hot.take_fired().is_empty());
    // The node itself past the threshold: the kill, worded on the node's own numbers.
    set_node_free(proc.path(), 512);
    f.hot.hard_crossing(WakeSource::Ebpf);
    assert_eq!(f.killed("default/big"), "1");
    let fired = f.hot.take_fired();
    assert_eq!(fired.len(), 1);
    assert_eq!(fired[0].signal_available, Some(512 << 20));
    assert_eq!(fired[0].level_bytes, (7 << 30) + 1);
    assert_eq!(fired[0].working_set_bytes, (8 << 30) - (512 << 20));
    assert!(
        fired[0]
            .decision
            .message
            .contains("Threshold quantity: 1Gi, available: 512Mi."),
        "{}",
        fired[0].decision.message
    );
}

#[test]
fn a_node_level_told_early_by_the_pods_notifier_is_watched_on_the_node_until_it_is_past() {
    let (f, proc) = with_node_counter();
    f.arm("default/big");
    // The pods reached the level armed for them while the node is still 4 MiB short of
    // its own (the rest of the node shrank a little since it was armed). The notifier
    // will not fire again: the look becomes a watch of the node, which kills once the
    // node gets there.
    set_node_free(proc.path(), 1028);
    f.set_usage(1000);
    let later = set_node_free_soon(&proc, 1020);
    f.hot.hard_crossing(WakeSource::Ebpf);
    later.join().expect("the writer");
    assert_eq!(f.killed("default/big"), "1", "killed once the node is past");
    assert_eq!(f.hot.take_fired()[0].signal_available, Some(1020 << 20));
}

#[test]
fn a_node_level_is_watched_on_the_node_when_the_rest_of_it_grew() {
    let (f, proc) = with_node_counter();
    f.arm("default/big");
    // The pods are far below the level armed for them, but the rest of the node grew
    // since: the node is past its threshold already. The early notifier's watch reads
    // the node and kills.
    f.set_usage(10);
    set_node_free(proc.path(), 1000);
    assert!(f.hot.early_crossing(WakeSource::Ebpf, 1 << 20, 1));
    assert_eq!(f.killed("default/big"), "1");
    assert_eq!(f.hot.take_fired()[0].signal_available, Some(1000 << 20));
}

#[test]
fn a_watch_paces_its_looks_at_the_nodes_level_by_the_nodes_rise() {
    let pace = |value: u64, now_ns, first| {
        watch::pace_ns(100 << 20, NODE_EARLY_MARGIN, value, now_ns, first)
    };
    let ms = 1_000_000;
    // The first look gives no rate: look again at once.
    assert_eq!(pace(90 << 20, ms, None), 0);
    // 1 MiB in 1 ms, 9 MiB to go: 9 ms away, the longest pause.
    let first = Some((90 << 20, ms));
    assert_eq!(pace(91 << 20, 2 * ms, first), 2 * ms);
    // 9 MiB in 9 ms, 1 MiB to go: half of the millisecond left.
    assert_eq!(pace(99 << 20, 10 * ms, first), ms / 2);
    // Not rising: the longest pause; at the level: look at once (the kill's look).
    assert_eq!(pace(90 << 20, 10 * ms, first), 2 * ms);
    assert_eq!(pace(100 << 20, 10 * ms, first), 0);
}

#[test]
fn a_watch_sleeps_while_far_below_a_creeping_cgroup_and_spins_near_it_or_at_a_fast_rise() {
    let level: u64 = 100 << 20;
    let ms = 1_000_000;
    // `to_go` below the level after rising `rose` in 1 ms since the watch's first read.
    let pace = |to_go: u64, rose: u64| {
        watch::pace_ns(level, 0, level - to_go, ms, Some((level - to_go - rose, 0)))
    };
    let margin = 192 * 4096 * 2;
    // Creeping (64 KiB in 1 ms: 24 ms from the level), an early margin away: the longest
    // pause. The fastest rise covers that distance in well over twice the pause, so the
    // sleep ends before the level can come.
    assert_eq!(
        pace(margin, 64 << 10),
        WATCH_PACE_NEAR_MAX.as_nanos() as u64
    );
    assert!(
        margin * 1_000_000_000 / WATCH_FASTEST_RISE > 2 * WATCH_PACE_NEAR_MAX.as_nanos() as u64
    );
    // Creeping, just past two charge batches: half the time the fastest rise takes.
    let to_go = WATCH_SPIN_NEAR + 4096;
    let half = to_go * 1_000_000_000 / WATCH_FASTEST_RISE / 2;
    assert!(half > 0);
    assert_eq!(pace(to_go, 64 << 10), half);
    // Within two charge batches, or at the level: look again at once.
    assert_eq!(pace(WATCH_SPIN_NEAR, 64 << 10), 0);
    assert_eq!(
        watch::pace_ns(level, 0, level, ms, Some((level - margin, 0))),
        0
    );
    // Rising fast (1 MiB in 1 ms: 1.5 ms from the level): spin, as with no rate yet and
    // with a usage standing still (left to the watch's CPU moves).
    assert_eq!(pace(margin, 1 << 20), 0);
    assert_eq!(watch::pace_ns(level, 0, level - margin, ms, None), 0);
    assert_eq!(pace(margin, 0), 0);
}

#[test]
fn a_watch_far_below_a_rising_cgroup_leaves_the_cpu_to_the_allocator_until_near_the_level() {
    // A level 100 MiB, usage an early margin below it, rising 16 KiB every 100 µs (an
    // allocator short of CPU: 160 MiB/s) until it reaches the level.
    let level: u64 = 100 << 20;
    let f = Fixture::new(level);
    f.arm("default/a");
    let margin = 192 * 4096 * 2;
    f.set_usage(level - margin);
    let path = f.dir.path().join("memory.usage_in_bytes");
    let allocator = std::thread::spawn(move || {
        let mut usage = level - margin;
        while usage < level {
            std::thread::sleep(Duration::from_micros(100));
            usage = (usage + (16 << 10)).min(level);
            // In place (every value has nine digits): a look never sees the file empty.
            use std::io::Write;
            std::fs::OpenOptions::new()
                .write(true)
                .open(&path)
                .and_then(|mut file| file.write_all(format!("{usage}\n").as_bytes()))
                .expect("usage");
        }
    });
    let started = std::time::Instant::now();
    let killed = f.hot.early_crossing(WakeSource::Ebpf, margin, 1);
    let (elapsed, used) = (started.elapsed(), f.hot.watch_cpu());
    allocator.join().expect("allocator");
    assert!(killed, "the watch killed at the level");
    assert_eq!(f.killed("default/a"), "1");
    // Spinning over the whole margin ran the thread for all of the time the watch
    // lasted; sleeping until the usage is within 2 ms of the level at its rise, or two
    // charge batches from it, for well under it.
    assert!(
        used * 2 < elapsed,
        "the watch ran {used:?} of the {elapsed:?} it lasted"
    );
}

#[test]
fn a_node_level_is_watched_on_the_working_set_while_reclaim_shrinks_the_page_cache() {
    let (f, proc) = with_node_counter();
    // Armed with 64 MiB of page cache on the node; since then reclaim freed all of it, so
    // the node's usage is that much lower while its working set is 1 MiB short of the
    // level. The watch follows the working set, not the usage (which it would see 65 MiB
    // short, past its margin, and stop).
    f.hot.set_levels(
        CgroupVersion::V1,
        &[available_level(f.dir.path(), 1000)],
        |_| 64 << 20,
    );
    f.arm("default/big");
    set_node_free(proc.path(), 1025);
    f.set_usage(1000);
    let later = set_node_free_soon(&proc, 1020);
    assert!(f.hot.early_crossing(WakeSource::Ebpf, 1 << 20, 1));
    later.join().expect("the writer");
    assert_eq!(f.killed("default/big"), "1");
}

#[test]
fn a_watch_leaves_its_cpu_at_most_twice_and_gives_the_cpus_back() {
    // Its own thread: the test harness's threads keep their CPUs whatever happens here.
    std::thread::spawn(|| {
        use nix::sched::{sched_getaffinity, sched_getcpu};
        let this = nix::unistd::Pid::from_raw(0);
        let cpus = sched_getaffinity(this).expect("affinity");
        let usable = (0..nix::sched::CpuSet::count())
            .filter(|&c| cpus.is_set(c).unwrap_or(false))
            .count();
        let mut moves = watch::CpuMoves::new();
        if usable < 2 {
            assert_eq!(moves.leave_this_cpu(), None, "one CPU: nowhere to go");
            println!("SKIP a_watch_leaves_its_cpu: this thread may run on one CPU only");
            return;
        }
        for _ in 0..WATCH_MOVES {
            let (left, on) = moves.leave_this_cpu().expect("another CPU");
            assert_ne!(left, on, "moved");
            assert_ne!(
                sched_getcpu().expect("cpu"),
                left,
                "not back on the CPU it left"
            );
            assert!(cpus.is_set(on).expect("cpu"), "on a CPU the thread had");
        }
        assert_eq!(moves.leave_this_cpu(), None, "no third move");
        assert_ne!(
            sched_getaffinity(this).expect("affinity"),
            cpus,
            "pinned while it watches"
        );
        drop(moves);
        assert_eq!(
            sched_getaffinity(this).expect("affinity"),
            cpus,
            "its CPUs back"
        );
    })
    .join()
    .expect("the test thread");
}

#[test]
fn the_level_a_watch_saw_reached_is_confirmed_before_the_others() {
    // Two cgroups, each past its level; the crossing reported is the first one read.
    let dirs: Vec<tempfile::TempDir> = (0..2)
        .map(|_| tempfile::tempdir().expect("tempdir"))
        .collect();
    let levels: Vec<Level> = dirs
        .iter()
        .zip([1000u64, 2000])
        .map(|(dir, level)| {
            std::fs::write(
                dir.path().join("memory.usage_in_bytes"),
                format!("{}\n", level + 5),
            )
            .expect("usage");
            std::fs::write(dir.path().join("memory.stat"), "total_inactive_file 0\n")
                .expect("stat");
            Level {
                counter: MemoryCounter::Cgroup(CgroupReader::new(
                    CgroupVersion::V1,
                    dir.path().to_path_buf(),
                )),
                working_set: level,
                usage: level,
                threshold: None,
                watch_margin: 0,
            }
        })
        .collect();
    let level_of = |first| HotPath::crossed(&levels, first).map(|c| c.level_working_set);
    assert_eq!(level_of(None).ok(), Some(1000));
    assert_eq!(level_of(Some(1)).ok(), Some(2000));
    // A hint past the levels (they were set again since the watch began) is ignored.
    assert_eq!(level_of(Some(7)).ok(), Some(1000));
    // The hinted level not reached: the others are still read.
    std::fs::write(dirs[1].path().join("memory.usage_in_bytes"), "10\n").expect("usage");
    assert_eq!(level_of(Some(1)).ok(), Some(1000));
}

#[test]
fn a_hard_notifier_a_page_short_is_watched_up_to_the_level_when_page_cache_went_since_arming() {
    // Armed with more page cache than the watch's slack: the usage level is 600000 above
    // the working set level (524288). The page cache is gone since, and the notifier
    // tells at a working set one byte short.
    let f = Fixture::new(0);
    f.set_level(524_288 + 600_000, 600_000);
    f.arm("default/a");
    f.set_inactive(0);
    f.set_usage(524_287);
    // Same length: the file is rewritten in place.
    let killed = f.told_while_rewritten(
        WakeSource::MemcgThreshold,
        "memory.usage_in_bytes",
        "524288\n",
        "default/a",
    );
    assert_eq!(
        killed, "1",
        "the watch looked below the armed usage level and killed at the working set's"
    );
}

#[test]
fn a_watch_rehearses_the_kill_without_signalling_or_writing_anything() {
    let f = Fixture::new(1000);
    // The pod's one process, a real one: the rehearsal checks it through its pidfd.
    let mut child = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .expect("spawn sleep");
    std::fs::write(
        f.pod_dir("default/a").join("cgroup.procs"),
        format!("{}\n", child.id()),
    )
    .expect("cgroup.procs");
    f.arm("default/a");
    f.set_usage(950);
    assert!(!f.hot.early_crossing(WakeSource::MemcgThreshold, 100, 1));
    // The watch ran to its budget's end, some milliseconds: it rehearsed as it began
    // and every WATCH_REHEARSE after.
    let rehearsals = f.hot.rehearsals();
    assert!(
        rehearsals >= 2,
        "a watch of milliseconds rehearsed more than once: {rehearsals}"
    );
    assert_eq!(f.killed("default/a"), "", "nothing written to cgroup.kill");
    assert_eq!(
        child.try_wait().expect("try_wait"),
        None,
        "the pod's process runs"
    );
    assert!(f.fired().is_empty(), "no kill booked");
    // The rehearsal's check is real: it sees the process, and not once it is gone.
    assert_eq!(f.hot.rehearse().alive, 1);
    child.kill().expect("kill");
    child.wait().expect("reap");
    assert_eq!(f.hot.rehearse().alive, 0);
}

#[test]
fn a_watch_whose_usage_stands_still_after_its_moves_sleeps_between_looks() {
    let f = Fixture::new(1000);
    f.arm("default/a");
    // Within the early margin, and never moving: no rise for the spin to catch.
    f.set_usage(950);
    let started = std::time::Instant::now();
    assert!(!f.hot.early_crossing(WakeSource::MemcgThreshold, 100, 1));
    let (elapsed, used) = (started.elapsed(), f.hot.watch_cpu());
    // It spun WATCH_STILL before each of its moves and once more, then slept between
    // its looks: the thread ran for well under the time the watch lasted. A spin to
    // the end ran for all of it, and ended with its allowance.
    assert!(
        used * 2 < elapsed,
        "the watch ran {used:?} of the {elapsed:?} it lasted"
    );
    assert_eq!(f.killed("default/a"), "", "never reached: nobody killed");
}

#[test]
fn a_watch_kills_where_its_rehearsal_finds_the_working_set_at_a_level_its_usage_missed() {
    // Armed with 300 of page cache: a usage level of 1000 for a working set level of 700.
    let f = Fixture::with_page_cache_at_arming();
    f.set_inactive(300);
    f.set_usage(950);
    // While the watch looks, 100 of page cache goes: the working set reaches 750 at a
    // usage of 950, short of the usage level its looks compare.
    let rewrite = f.rewrite_later("memory.stat", "cache 1\ntotal_inactive_file 200\n");
    let killed = f.hot.early_crossing(WakeSource::MemcgThreshold, 100, 1);
    rewrite.join().expect("rewrite");
    assert!(killed, "the watch killed");
    assert_eq!(f.killed("default/a"), "1");
    assert_eq!(f.fired(), ["default/a"]);
}

#[test]
fn a_slow_rehearsal_is_spaced_to_a_tenth_of_the_watch() {
    let began = std::time::Instant::now();
    // A fast one: the next at the set pace.
    assert_eq!(
        watch::rehearse_due(began, Duration::from_micros(20)),
        began + WATCH_REHEARSE
    );
    // One of 300 µs (an emulated machine): the next 3 ms after it began.
    assert_eq!(
        watch::rehearse_due(began, Duration::from_micros(300)),
        began + Duration::from_millis(3)
    );
}
