//! Wires the agent together: detect the cgroup layout, start every configured event source
//! (each reports whether it started), and run the synchronize loop ([`crate::sync`]) on
//! the one wake channel, with the pods and kills of the runtime behind `ports`.
use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::{broadcast, watch};

use crate::config::agent::AgentConfig;
use crate::config::kubelet::KubeletConfig;
use crate::notify::ebpf::{EbpfSettings, EbpfSource, KernelCounters};
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
    pub statuses: Vec<SourceStatus>,
    reports: broadcast::Sender<SyncReport>,
    wakes: WakeSender,
    ebpf: Option<EbpfSource>,
    watched: watch::Sender<Vec<PathBuf>>,
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
        let layout = match config.layout.clone() {
            Some(layout) => layout,
            None => CgroupLayout::detect()?,
        };
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
                contention: kubelet.contention().is_some(),
                pressure_root: layout.unified_root.clone(),
                hugepage_aware: kubelet
                    .feature_gate(crate::config::kubelet::HUGEPAGE_AWARE_EVICTION),
            },
        );
        let (wakes, wake_rx) = notify::wake_channel();
        let (reports, _) = broadcast::channel(REPORT_BUFFER);
        // The hot kill path: the memory notifiers tell it of hard crossings first.
        let hot = settings
            .hot_kill
            .then(|| Arc::new(HotPath::new(state.clone())));
        if let Some(hot) = &hot {
            match hot.start_watcher() {
                Ok(scheduling) => {
                    tracing::info!("hot path watcher thread started ({scheduling})")
                }
                Err(err) => tracing::warn!(
                    "hot path watcher thread: {err}; the ring reader runs its watches itself"
                ),
            }
        }
        let hook: Hook = hot.clone().map(|h| h as Arc<dyn CrossingHook>);
        let mut statuses = Vec::new();
        let tasks = Tasks::start(state.clone());

        // eBPF ring buffer.
        let mut ebpf = None;
        if !settings.sources.ebpf {
            statuses.push(SourceStatus::disabled(WakeSource::Ebpf));
        } else {
            // Memcg reclaim records of cgroups outside the pods (and off their path) are
            // dropped in the kernel.
            let pods_path = layout
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
                object_override: config.ebpf_object_override.clone(),
                detector: settings.sources.crossing_attach_points(),
                pods_path,
                ..EbpfSettings::default()
            };
            match notify::ebpf::start(&ebpf_settings, wakes.clone(), hook.clone()) {
                Ok(source) => {
                    statuses.push(source.status.clone());
                    ebpf = Some(source);
                }
                Err(err) => statuses.push(SourceStatus::failed(WakeSource::Ebpf, err)),
            }
        }

        // The eBPF crossing detector, when it attached, carries every memory threshold.
        let detector = ebpf
            .as_ref()
            .and_then(|e| e.detector.as_ref().ok())
            .cloned();

        // Memory thresholds: eventfd notifiers on cgroup v1; on cgroup v2, memory.high
        // (whose crossings the memory.events source then reports) only without the
        // detector, since it throttles every pod at the threshold.
        let mut levels_tx = None;
        if layout.version == CgroupVersion::V2 {
            // A memory.high that a previous run set and could not lift (killed with -9).
            if let Some(cgroup) = &settings.pods_cgroup {
                notify::memcg::lift_stale_high(&reader.dir(cgroup));
            }
        }
        if !settings.sources.memcg_thresholds {
            statuses.push(SourceStatus::disabled(WakeSource::MemcgThreshold));
        } else if layout.version == CgroupVersion::V1 {
            let (tx, rx) = watch::channel(Vec::new());
            match notify::memcg::spawn(rx, wakes.clone(), hook.clone()) {
                Ok((task, scheduling)) => {
                    tasks.add(
                        "memcg threshold notifier",
                        Role::Source(WakeSource::MemcgThreshold),
                        task,
                    );
                    levels_tx = Some(tx);
                    statuses.push(SourceStatus::running(
                        WakeSource::MemcgThreshold,
                        format!(
                            "eventfd thresholds on memory.usage_in_bytes under {} ({} node and {} pods thresholds, re-armed after every synchronize); heard by thread {} ({scheduling})",
                            layout.memory_root.display(),
                            config.memory_thresholds.node.len(),
                            config.memory_thresholds.pods.len(),
                            notify::memcg::WAITER_THREAD,
                        ),
                    ));
                }
                Err(err) => statuses.push(SourceStatus::failed(WakeSource::MemcgThreshold, err)),
            }
        } else if detector.is_some() {
            statuses.push(SourceStatus::disabled_because(
                WakeSource::MemcgThreshold,
                "cgroup v2: the eBPF crossing detector carries the memory thresholds; memory.high is left alone",
            ));
        } else if settings.sources.memory_events && settings.pods_cgroup.is_some() {
            let (tx, rx) = watch::channel(Vec::new());
            tasks.add(
                "memory.high stand-in",
                Role::Source(WakeSource::MemcgThreshold),
                notify::memcg::spawn_v2_high(rx, layout.memory_root.clone()),
            );
            levels_tx = Some(tx);
            statuses.push(SourceStatus::running(
                WakeSource::MemcgThreshold,
                "cgroup v2 without the eBPF crossing detector: memory.high of the pods cgroup stands in for the nearest hard memory threshold (allocatable, or the node's while the rest of the node holds still) and THROTTLES the pods there; re-armed after every synchronize, lifted at stop and at the next start after a crash; crossings wake through memory.events",
            ));
        } else {
            statuses.push(SourceStatus::unsupported(
                WakeSource::MemcgThreshold,
                "cgroup v2 has no usage thresholds; memory.high stands in only with a pods cgroup and the memory.events source",
            ));
        }

        // cgroup v2 memory.events.
        let watched_cgroups: Vec<String> = settings
            .pods_cgroup
            .iter()
            .chain(settings.watch_cgroups.iter())
            .cloned()
            .collect();
        let (watched, watched_rx) = watch::channel(Vec::new());
        if !settings.sources.memory_events {
            statuses.push(SourceStatus::disabled(WakeSource::MemoryEvents));
        } else if layout.version != CgroupVersion::V2 {
            statuses.push(SourceStatus::unsupported(
                WakeSource::MemoryEvents,
                "memory.events needs the memory controller on cgroup v2 (this host has it on v1)",
            ));
        } else {
            match notify::memory_events::spawn(watched_rx, wakes.clone(), hook.clone()) {
                Ok((task, scheduling)) => {
                    let dirs: Vec<PathBuf> =
                        watched_cgroups.iter().map(|c| reader.dir(c)).collect();
                    statuses.push(SourceStatus::running(
                        WakeSource::MemoryEvents,
                        format!(
                            "inotify IN_MODIFY on memory.events of {} cgroup(s), read by thread {} ({scheduling})",
                            dirs.len(),
                            notify::memory_events::WAITER_THREAD,
                        ),
                    ));
                    watched.send_replace(dirs);
                    tasks.add(
                        "memory.events watcher",
                        Role::Source(WakeSource::MemoryEvents),
                        task,
                    );
                }
                Err(err) => statuses.push(SourceStatus::failed(WakeSource::MemoryEvents, err)),
            }
        }

        // PSI triggers: system-wide, plus per-cgroup files in the cgroup2 hierarchy (which
        // tracks stalls per cgroup even on hybrid hosts whose memory controller is on v1).
        if !settings.sources.psi {
            statuses.push(SourceStatus::disabled(WakeSource::Psi));
        } else {
            let mut files = vec![PathBuf::from("/proc/pressure/memory")];
            if let Some(unified) = &layout.unified_root {
                for cgroup in &watched_cgroups {
                    let file = unified
                        .join(cgroup.trim_start_matches('/'))
                        .join("memory.pressure");
                    if file.exists() {
                        files.push(file);
                    }
                }
            }
            let (task, report) =
                notify::psi::spawn(&files, config.settings.psi_trigger(), wakes.clone());
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
                    tasks.add("PSI triggers", Role::Source(WakeSource::Psi), task);
                    let mut detail = format!("triggers on {}", armed.join(", "));
                    if !failed.is_empty() {
                        detail.push_str(&format!("; not armed: {}", failed.join(", ")));
                    }
                    statuses.push(SourceStatus::running(WakeSource::Psi, detail));
                }
                None => statuses.push(SourceStatus::unsupported(
                    WakeSource::Psi,
                    failed.join(", "),
                )),
            }
        }

        // The fallback timer always runs.
        tasks.add(
            "housekeeping timer",
            Role::Source(WakeSource::Timer),
            notify::timer::spawn(config.housekeeping, wakes.clone()),
        );
        statuses.push(SourceStatus::running(
            WakeSource::Timer,
            format!("housekeeping every {:?}", config.housekeeping),
        ));

        for status in &statuses {
            status.log();
        }

        let arming = (levels_tx.is_some() || detector.is_some()).then(|| Arming {
            thresholds: config.memory_thresholds.clone(),
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
                let eviction = EvictionSync::new(kubelet, ports, state.clone(), wakes.clone());
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
            watched,
            tasks,
        })
    }

    /// Reports of every synchronize from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<SyncReport> {
        self.reports.subscribe()
    }

    /// The wake channel's sending half, for parts of the agent that ask for a synchronize.
    pub fn wake_sender(&self) -> WakeSender {
        self.wakes.clone()
    }

    /// Asks for a synchronize now.
    pub fn request_sync(&self) {
        self.wakes.wake(WakeSource::Request, WakeDetail::None);
    }

    pub fn status_of(&self, source: WakeSource) -> Option<&SourceStatus> {
        self.statuses.iter().find(|s| s.source == source)
    }

    /// The eBPF programs' counters, when that source runs.
    pub fn kernel_counters(&self) -> Option<KernelCounters> {
        self.ebpf.as_ref().map(EbpfSource::counters)
    }

    /// Replaces the set of cgroup directories whose memory.events are watched (v2).
    pub fn watch_memory_events(&self, dirs: Vec<PathBuf>) {
        self.watched.send_replace(dirs);
    }

    /// Puts tasks started elsewhere (the pods' supervisor) under the same watch.
    pub fn task_adder(&self) -> TaskAdder {
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
