//! The runtime's shared state: its configuration, the pods it knows and the channels of
//! its supervisor. Every part of the runtime (the public handle, the lifecycle, adoption)
//! works on one [`Shared`].
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use tokio::sync::mpsc;

use super::cgroups::{CgroupTree, PodCgroup};
use super::store::{PodRecord, StateStore};
use crate::policy::image_gc::ImageGcPolicy;
use crate::policy::pod::ResourceList;
use crate::policy::qos::CgroupOptions;
use crate::policy::types::NodeConditionType;
use crate::state::SharedState;

/// Where and how the runtime runs pods.
#[derive(Clone, Debug)]
pub(crate) struct RuntimeConfig {
    /// The manifest directory (the kubelet's staticPodPath).
    pub(crate) manifest_dir: PathBuf,
    /// Container logs (`<dir>/<ns>_<name>_<uid>/<container>/<n>.log`).
    pub(crate) log_dir: PathBuf,
    /// Pod records, for adoption after a restart.
    pub(crate) state_dir: PathBuf,
    /// The cgroup root, relative to each hierarchy's mount ("monitor": kubepods lives at
    /// /sys/fs/cgroup/<controller>/monitor/kubepods).
    pub(crate) cgroup_root: String,
    /// Memory limit of the pods root: node allocatable memory on a bounded node.
    pub(crate) pods_memory_limit: Option<i64>,
    /// What admission checks requests against (cpu, memory, pods).
    pub(crate) node_allocatable: ResourceList,
    /// Node memory capacity (oom_score_adj of burstable containers).
    pub(crate) memory_capacity: i64,
    pub(crate) cgroup_options: CgroupOptions,
    pub(crate) qos_reserved_memory_percent: Option<i64>,
    /// First restart delay of a crashed container; doubles up to [`MAX_BACKOFF`].
    pub(crate) restart_backoff: Duration,
    /// Run pods on the CRI runtime at this socket (containerd) instead of as host
    /// processes.
    pub(crate) cri_socket: Option<PathBuf>,
    /// Image garbage collection on the CRI runtime: thresholds and ages.
    pub(crate) image_gc: ImageGcPolicy,
    /// Dead-container collection on a container runtime.
    pub(crate) container_gc: crate::policy::container_gc::ContainerGcPolicy,
    /// How often the image and container collection runs (the kubelet: every 5 minutes).
    pub(crate) image_gc_period: Duration,
}

/// The longest restart delay (the kubelet's MaxContainerBackOff).
pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// A pod the runtime knows: its record (as persisted) and what exists of it now.
pub(super) struct LivePod {
    pub(super) record: PodRecord,
    pub(super) cgroup: Option<PodCgroup>,
    /// Being stopped or evicted: not a candidate for anything, not restarted.
    pub(super) terminating: bool,
    /// Raised by the hot path just before it kills the pod through its cgroup (see
    /// [`crate::runtime::port::KillSwitch::evicting`]): from then on no container of the
    /// pod restarts, though its eviction is booked only at the next synchronize.
    pub(super) hot_killed: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Per container: when it may restart, and the delay used last.
    pub(super) restart_at: BTreeMap<String, tokio::time::Instant>,
    pub(super) backoff: BTreeMap<String, Duration>,
}

impl LivePod {
    /// A pod the runtime starts to follow: not terminating, no restart pending.
    pub(super) fn new(record: PodRecord, cgroup: Option<PodCgroup>) -> LivePod {
        LivePod {
            record,
            cgroup,
            terminating: false,
            hot_killed: Default::default(),
            restart_at: BTreeMap::new(),
            backoff: BTreeMap::new(),
        }
    }

    /// Being stopped, evicted, or killed by the hot path: never restarted.
    pub(super) fn stopping(&self) -> bool {
        self.terminating || self.hot_killed.load(std::sync::atomic::Ordering::SeqCst)
    }
}

pub(super) struct Inner {
    pub(super) pods: BTreeMap<String, LivePod>,
    pub(super) conditions: Vec<NodeConditionType>,
    /// Manifest errors already reported (path → message), so each is reported once.
    pub(super) reported_errors: BTreeMap<PathBuf, String>,
    /// Pod cgroups under our root with processes whose record cannot be read (set aside
    /// as corrupt, unreadable, or the records directory itself unreadable), and orphans
    /// (no record at all) that a SIGKILL at start could not empty, by uid. Nothing in
    /// them is killed: nothing proves what they run. (An orphan with no record at all is
    /// killed and removed at start: see `adopt`.) A manifest with the same uid does not
    /// start while its cgroup still has processes (the pod would run twice).
    pub(super) unmanaged: BTreeMap<String, super::cgroups::PodCgroup>,
}

/// A container process ended.
#[derive(Debug)]
pub(super) struct Exit {
    pub(super) uid: String,
    pub(super) container: String,
    pub(super) pid: u32,
    /// Exit code, 128 + signal, or `None` when unknown (an adopted process).
    pub(super) code: Option<i32>,
}

pub(super) struct Shared {
    pub(super) config: RuntimeConfig,
    pub(super) tree: CgroupTree,
    pub(super) store: StateStore,
    pub(super) state: SharedState,
    pub(super) inner: Mutex<Inner>,
    pub(super) exits: mpsc::UnboundedSender<Exit>,
    /// Asks the supervisor to reconcile (manifests changed, a pod finished stopping).
    pub(super) reconcile: mpsc::UnboundedSender<()>,
    /// Told whenever the pods change (started, exited, evicted, stopped).
    pub(super) on_change: OnceLock<Box<dyn Fn() + Send + Sync>>,
    /// The container runtime, when pods run on one.
    pub(super) cri: Option<std::sync::Arc<super::cri::CriRuntime>>,
}

impl Shared {
    pub(super) fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
