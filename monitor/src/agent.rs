//! Wires the agent together: detect the cgroup layout, start every configured event source
//! (each reports whether it started), and run the synchronize loop ([`crate::sync`]) on
//! the one wake channel, with the pods and kills of the runtime behind `ports`.
use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::{broadcast, watch};

use crate::config::agent::AgentConfig;
use crate::config::kubelet::KubeletConfig;
use crate::notify::arming::MemoryThresholds;
use crate::notify::ebpf::{EbpfSettings, EbpfSource, KernelCounters};
use crate::notify::memcg::ThresholdSpec;
use crate::notify::{self, CrossingHook, Hook, SourceStatus, WakeDetail, WakeSender, WakeSource};
use crate::observe::{CgroupLayout, CgroupReader, CgroupVersion, Observer, ObserverConfig};
use crate::runtime::port::Ports;
use crate::state::SharedState;
use crate::sync::{Arming, EvictionSync, HotPath, SyncLoop, SyncReport};
use crate::tasks::{Role, TaskAdder, Tasks};

/// A running agent.
pub struct Agent {
    pub layout: CgroupLayout,
    /// One entry per source, in start order.
    pub(crate) statuses: Vec<SourceStatus>,
    reports: broadcast::Sender<SyncReport>,
    wakes: WakeSender,
    ebpf: Option<EbpfSource>,
    /// The sending end of the memory.events source's set of watched cgroups, kept so
    /// that its receiver stays open.
    _watched: watch::Sender<Vec<PathBuf>>,
    tasks: Tasks,
}

/// Reports kept for slow subscribers before they start missing some.
const REPORT_BUFFER: usize = 256;

impl Agent {
    /// Starts the sources and the synchronize loop, which decides with `kubelet`'s
    /// eviction settings over the pods of `ports`. Must run inside a tokio runtime.
    pub fn start(
        config: AgentConfig,
        kubelet: KubeletConfig,
        ports: Ports,
        state: SharedState,
    ) -> anyhow::Result<Agent> {
        let layout = CgroupLayout::given_or_detected(config.layout.as_ref())?;
        let settings = &config.settings;
        let reader = CgroupReader::new(layout.version, layout.memory_root.clone());
        let observer = Observer::new(
            reader.clone(),
            ObserverConfig {
                pods_cgroup: settings.pods_cgroup.clone(),
                pods_capacity_bytes: settings.pods_memory_limit.map(|q| q.value().max(0) as u64),
                nodefs: settings.nodefs_path.clone(),
                imagefs: settings.imagefs_path.clone(),
                proc_root: PathBuf::from("/proc"),
                // The stall signal reads the pods cgroup's pressure as the contention
                // conditions do.
                contention: kubelet.contention().is_some() || settings.memory_stall.is_some(),
                pressure_root: layout.unified_root.clone(),
                hugepage_aware: kubelet
                    .feature_gate(crate::config::kubelet::HUGEPAGE_AWARE_EVICTION),
            },
        );
        let (wakes, wake_rx) = notify::wake_channel();
        let (reports, _) = broadcast::channel(REPORT_BUFFER);
        // The hot kill path: the memory notifiers tell it of hard crossings first.
        let hot = settings.hot_kill.then(|| {
            let hot = if settings.shadow {
                HotPath::shadow()
            } else {
                HotPath::new()
            };
            Arc::new(hot.confirming_node_on(observer.node_counter(), layout.memory_root.clone()))
        });
        if let Some(hot) = &hot {
            match hot.start_watcher(wakes.clone()) {
                Ok(scheduling) => {
                    tracing::info!("hot path watcher thread started ({scheduling})")
                }
                Err(err) => tracing::warn!(
                    "hot path watcher thread: {err}; the ring reader runs its watches itself"
                ),
            }
        }
        let hook: Hook = hot.clone().map(|h| h as Arc<dyn CrossingHook>);
        let tasks = Tasks::start(state.clone());
        let watched_cgroups: Vec<String> = settings
            .pods_cgroup
            .iter()
            .chain(settings.watch_cgroups.iter())
            .cloned()
            .collect();
        let (watched, watched_rx) = watch::channel(Vec::new());
        let sources = Sources {
            config: &config,
            layout: &layout,
            reader: &reader,
            wakes: &wakes,
            hook: &hook,
            tasks: &tasks,
            watched_cgroups: &watched_cgroups,
        };
        let (ebpf_status, ebpf) = sources.ebpf();
        // The eBPF crossing detector, when it attached, carries every memory threshold.
        let detector = ebpf
            .as_ref()
            .and_then(|e| e.detector.as_ref().ok())
            .cloned();
        let (memcg_status, levels_tx) = sources.memcg_thresholds(detector.is_some());
        if let Some(detector) = &detector {
            // The detector's record comes up to a sample late, read by the ring thread:
            // early levels give the hot path a head start, as the memcg v1 eventfd's do.
            // Where those run (v1 with the memcg source), one head start is enough.
            let memcg_early = layout.version == CgroupVersion::V1 && levels_tx.is_some();
            if hot.is_some() && !memcg_early {
                let margin = notify::memcg::early_margin();
                detector.set_early_margin(margin);
                tracing::info!(
                    margin_bytes = margin,
                    "crossing detector: early levels {} KiB below each hard level start the hot path's watch",
                    margin / 1024
                );
            }
        }
        let statuses = vec![
            ebpf_status,
            memcg_status,
            sources.memory_events(watched_rx, &watched),
            sources.psi(),
            sources.timer(),
        ];

        for status in &statuses {
            status.log();
        }

        let relief = memory_relief(&config, &layout, &state);
        let arming = (levels_tx.is_some() || detector.is_some()).then(|| Arming {
            thresholds: MemoryThresholds {
                relief_margin: relief.map(|r| r.margin),
                ..config.memory_thresholds.clone()
            },
            version: layout.version,
            memory_root: layout.memory_root.clone(),
            pods_cgroup: settings.pods_cgroup.clone(),
            levels: levels_tx,
            detector: detector.clone(),
            hot: hot.clone(),
        });
        let sync_loop = SyncLoop {
            observer,
            eviction: {
                let mut eviction = EvictionSync::new(kubelet, ports, state.clone(), wakes.clone())
                    .with_pre_kill_hook(settings.pre_kill_hook.clone());
                if settings.shadow {
                    tracing::info!(
                        "shadow mode: every decision is reported (WouldEvict, WouldKill, WouldReclaim) and none carried out"
                    );
                    eviction = eviction.shadow();
                }
                eviction = eviction
                    .with_relief(relief)
                    .with_memory_stall(settings.memory_stall.as_ref().map(|s| s.policy()));
                match &hot {
                    Some(hot) => eviction.with_hot_path(hot.clone()),
                    None => eviction,
                }
            },
            arming,
            reports: reports.clone(),
            state: state.clone(),
            origin: tokio::time::Instant::now(),
        };
        state.lock().sources = statuses.clone();
        tasks.add(
            "synchronize loop",
            Role::Critical,
            tokio::spawn(sync_loop.run(wake_rx)),
        );
        // The first synchronize: observe and arm thresholds right away.
        wakes.wake(WakeSource::Request, WakeDetail::None);
        Ok(Agent {
            layout,
            statuses,
            reports,
            wakes,
            ebpf,
            _watched: watched,
            tasks,
        })
    }

    /// Reports of every synchronize from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<SyncReport> {
        self.reports.subscribe()
    }

    /// The wake channel's sending half, for parts of the agent that ask for a synchronize.
    pub(crate) fn wake_sender(&self) -> WakeSender {
        self.wakes.clone()
    }

    /// Asks for a synchronize now.
    pub(crate) fn request_sync(&self) {
        self.wakes.wake(WakeSource::Request, WakeDetail::None);
    }

    pub fn status_of(&self, source: WakeSource) -> Option<&SourceStatus> {
        self.statuses.iter().find(|s| s.source == source)
    }

    /// The eBPF programs' counters, when that source runs.
    pub fn kernel_counters(&self) -> Option<KernelCounters> {
        self.ebpf.as_ref().map(EbpfSource::counters)
    }

    /// Puts tasks started elsewhere (the pods' supervisor) under the same watch.
    pub(crate) fn task_adder(&self) -> TaskAdder {
        self.tasks.adder()
    }

    /// Why a critical task ended, as it happens: the agent must then stop, non-zero.
    /// Taken once.
    pub fn take_fatal(&mut self) -> Option<tokio::sync::mpsc::UnboundedReceiver<String>> {
        self.tasks.take_fatal()
    }

    /// Stops every task and detaches the eBPF programs.
    pub async fn shutdown(mut self) {
        // Newest first: the loop (started last) goes first; dropping its threshold sender
        // lets the cgroup v2 memory.high task put `max` back before it is stopped.
        self.tasks.stop().await;
        // Stops the eBPF consumer thread and detaches the programs.
        drop(self.ebpf.take());
    }
}

// What `monitor status` says of a source that does not run as it does by default.

/// Memory relief's settings when it runs here; says at start (and in the state, for
/// `monitor status`) whether it does, and why not.
fn memory_relief(
    config: &AgentConfig,
    layout: &CgroupLayout,
    state: &SharedState,
) -> Option<crate::policy::relief::ReliefSettings> {
    let settings = &config.settings;
    let relief = &settings.memory_relief;
    let dir = layout.memory_root.join(
        settings
            .pods_cgroup
            .as_deref()
            .unwrap_or("")
            .trim_start_matches('/'),
    );
    let (state_name, detail) = if !relief.enabled {
        ("off", "monitor.memoryRelief.enabled is false".to_string())
    } else if let Some(why) = crate::sync::eviction::relief::unsupported(layout.version, &dir) {
        ("unsupported", why)
    } else {
        let detail = format!(
            "margin {} above each memory signal's highest threshold, steps of {}, stops past {} memory stall",
            crate::policy::signal::format_value(relief.margin),
            relief.step,
            crate::policy::signal::format_value(relief.max_stall)
        );
        if settings.shadow {
            ("shadow", format!("{detail}; reported, never written"))
        } else {
            ("active", detail)
        }
    };
    tracing::info!("memory relief {state_name}: {detail}");
    state.lock().memory_relief = Some(crate::state::MemoryReliefStatus {
        state: state_name,
        detail,
        last_pass: None,
    });
    matches!(state_name, "active" | "shadow").then(|| relief.policy())
}

/// The memory threshold source on cgroup v2 when the eBPF crossing detector carries the
/// thresholds.
const MEMCG_LEFT_TO_DETECTOR: &str = "cgroup v2: the eBPF crossing detector carries the memory thresholds; memory.high is left alone";
/// The memory threshold source on cgroup v2 with memory.high standing in.
const MEMCG_HIGH_STANDS_IN: &str = "cgroup v2 without the eBPF crossing detector: memory.high of the pods cgroup stands in for the nearest hard memory threshold (allocatable, or the node's while the rest of the node holds still) and THROTTLES the pods there; re-armed after every synchronize, lifted at stop and at the next start after a crash; crossings wake through memory.events";
/// The memory threshold source on cgroup v2 beside a kubelet, or in shadow mode.
const MEMCG_NOT_OURS_V2: &str = "cgroup v2: memory.high cannot stand in for the thresholds, since the pods cgroup is the kubelet's (monitor.podList) or the agent is a shadow; the eBPF crossing detector and the synchronize carry them";
/// The memory threshold source on cgroup v2 where memory.high cannot stand in.
const MEMCG_UNSUPPORTED_V2: &str = "cgroup v2 has no usage thresholds; memory.high stands in only with a pods cgroup and the memory.events source";
/// memory.events on a host whose memory controller is on cgroup v1.
const MEMORY_EVENTS_UNSUPPORTED_V1: &str =
    "memory.events needs the memory controller on cgroup v2 (this host has it on v1)";

/// What every event source is started with; each source has a method of its own that
/// starts it (its tasks go under `tasks`) and says how it went.
struct Sources<'a> {
    config: &'a AgentConfig,
    layout: &'a CgroupLayout,
    reader: &'a CgroupReader,
    wakes: &'a WakeSender,
    hook: &'a Hook,
    tasks: &'a Tasks,
    /// The pods cgroup and the other cgroups watched (memory.events, PSI).
    watched_cgroups: &'a [String],
}

impl Sources<'_> {
    /// The eBPF ring buffer (and the crossing detector, when it attaches).
    fn ebpf(&self) -> (SourceStatus, Option<EbpfSource>) {
        let settings = &self.config.settings;
        if !settings.sources.ebpf {
            return (SourceStatus::disabled(WakeSource::Ebpf), None);
        }
        // Memcg reclaim records of cgroups outside the pods (and off their path) are
        // dropped in the kernel.
        let pods_path = self
            .layout
            .unified_root
            .as_ref()
            .zip(settings.pods_cgroup.as_ref())
            .and_then(|(mount, pods)| {
                let dir = mount.join(pods.trim_start_matches('/'));
                notify::ebpf::pods_path(mount, &dir)
                    .map_err(|err| {
                        tracing::warn!(
                            "memcg reclaim records are not filtered in the kernel: {err}"
                        )
                    })
                    .ok()
            });
        let ebpf_settings = EbpfSettings {
            min_interval_ns: settings.sources.ebpf_min_interval.as_nanos() as u64,
            object_override: self.config.ebpf_object_override.clone(),
            detector: settings.sources.crossing_attach_points(),
            pods_path,
            ..EbpfSettings::default()
        };
        match notify::ebpf::start(&ebpf_settings, self.wakes.clone(), self.hook.clone()) {
            Ok(source) => (source.status.clone(), Some(source)),
            Err(err) => (SourceStatus::failed(WakeSource::Ebpf, err), None),
        }
    }

    /// Memory thresholds: eventfd notifiers on cgroup v1; on cgroup v2, memory.high (whose
    /// crossings the memory.events source then reports) only without the `detector`, since
    /// it throttles every pod at the threshold. With the sender of the levels to arm, when
    /// the source runs.
    fn memcg_thresholds(
        &self,
        detector: bool,
    ) -> (SourceStatus, Option<watch::Sender<Vec<ThresholdSpec>>>) {
        let settings = &self.config.settings;
        let layout = self.layout;
        // A kubelet's pods cgroup is the kubelet's to write; a shadow agent writes none.
        let may_write = settings.pod_list.is_none() && !settings.shadow;
        if layout.version == CgroupVersion::V2 && may_write {
            // A memory.high that a previous run set and could not lift (killed with -9).
            if let Some(cgroup) = &settings.pods_cgroup {
                notify::memcg::lift_stale_high(&self.reader.dir(cgroup));
            }
        }
        let source = WakeSource::MemcgThreshold;
        if !settings.sources.memcg_thresholds {
            return (SourceStatus::disabled(source), None);
        }
        if layout.version == CgroupVersion::V1 {
            let (tx, rx) = watch::channel(Vec::new());
            return match notify::memcg::spawn(rx, self.wakes.clone(), self.hook.clone()) {
                Ok((task, scheduling)) => {
                    self.tasks
                        .add("memcg threshold notifier", Role::Source(source), task);
                    let status = SourceStatus::running(
                        source,
                        format!(
                            "eventfd thresholds on memory.usage_in_bytes under {} ({} node and {} pods thresholds, re-armed after every synchronize); heard by thread {} ({scheduling})",
                            layout.memory_root.display(),
                            self.config.memory_thresholds.node.len(),
                            self.config.memory_thresholds.pods.len(),
                            notify::memcg::WAITER_THREAD,
                        ),
                    );
                    (status, Some(tx))
                }
                Err(err) => (SourceStatus::failed(source, err), None),
            };
        }
        if detector {
            return (
                SourceStatus::disabled_because(source, MEMCG_LEFT_TO_DETECTOR),
                None,
            );
        }
        if !may_write {
            return (
                SourceStatus::disabled_because(source, MEMCG_NOT_OURS_V2),
                None,
            );
        }
        if settings.sources.memory_events && settings.pods_cgroup.is_some() {
            let (tx, rx) = watch::channel(Vec::new());
            self.tasks.add(
                "memory.high stand-in",
                Role::Source(source),
                notify::memcg::spawn_v2_high(rx, layout.memory_root.clone()),
            );
            return (
                SourceStatus::running(source, MEMCG_HIGH_STANDS_IN),
                Some(tx),
            );
        }
        (
            SourceStatus::unsupported(source, MEMCG_UNSUPPORTED_V2),
            None,
        )
    }

    /// cgroup v2 memory.events of the watched cgroups; `watched` is the set of their
    /// directories, handed to the watcher through `watched_rx`.
    fn memory_events(
        &self,
        watched_rx: watch::Receiver<Vec<PathBuf>>,
        watched: &watch::Sender<Vec<PathBuf>>,
    ) -> SourceStatus {
        let source = WakeSource::MemoryEvents;
        if !self.config.settings.sources.memory_events {
            return SourceStatus::disabled(source);
        }
        if self.layout.version != CgroupVersion::V2 {
            return SourceStatus::unsupported(source, MEMORY_EVENTS_UNSUPPORTED_V1);
        }
        match notify::memory_events::spawn(watched_rx, self.wakes.clone(), self.hook.clone()) {
            Ok((task, scheduling)) => {
                let dirs: Vec<PathBuf> = self
                    .watched_cgroups
                    .iter()
                    .map(|c| self.reader.dir(c))
                    .collect();
                let status = SourceStatus::running(
                    source,
                    format!(
                        "inotify IN_MODIFY on memory.events of {} cgroup(s), read by thread {} ({scheduling})",
                        dirs.len(),
                        notify::memory_events::WAITER_THREAD,
                    ),
                );
                watched.send_replace(dirs);
                self.tasks
                    .add("memory.events watcher", Role::Source(source), task);
                status
            }
            Err(err) => SourceStatus::failed(source, err),
        }
    }

    /// PSI triggers: system-wide, plus per-cgroup files in the cgroup2 hierarchy (which
    /// tracks stalls per cgroup even on hybrid hosts whose memory controller is on v1).
    fn psi(&self) -> SourceStatus {
        let source = WakeSource::Psi;
        if !self.config.settings.sources.psi {
            return SourceStatus::disabled(source);
        }
        let mut files = vec![PathBuf::from("/proc/pressure/memory")];
        if let Some(unified) = &self.layout.unified_root {
            for cgroup in self.watched_cgroups {
                let file = unified
                    .join(cgroup.trim_start_matches('/'))
                    .join("memory.pressure");
                if file.exists() {
                    files.push(file);
                }
            }
        }
        let (task, report) = notify::psi::spawn(
            &files,
            self.config.settings.psi_trigger(),
            self.wakes.clone(),
        );
        let armed: Vec<String> = report
            .iter()
            .filter_map(|(f, r)| {
                r.as_ref()
                    .ok()
                    .map(|t| format!("{} (some {:?} per {:?})", f.display(), t.stall, t.window))
            })
            .collect();
        let failed: Vec<String> = report
            .iter()
            .filter_map(|(f, r)| r.as_ref().err().map(|e| format!("{} ({e})", f.display())))
            .collect();
        match task {
            Some(task) => {
                self.tasks.add("PSI triggers", Role::Source(source), task);
                let mut detail = format!("triggers on {}", armed.join(", "));
                if !failed.is_empty() {
                    detail.push_str(&format!("; not armed: {}", failed.join(", ")));
                }
                SourceStatus::running(source, detail)
            }
            None => SourceStatus::unsupported(source, failed.join(", ")),
        }
    }

    /// The fallback timer: it always runs.
    fn timer(&self) -> SourceStatus {
        let every = self.config.housekeeping;
        self.tasks.add(
            "housekeeping timer",
            Role::Source(WakeSource::Timer),
            notify::timer::spawn(every, self.wakes.clone()),
        );
        SourceStatus::running(WakeSource::Timer, format!("housekeeping every {every:?}"))
    }
}
