//! The agent's own settings: the `monitor:` block of the configuration file (the rest of
//! the file is a KubeletConfiguration). Every key is optional; unknown keys are errors
//! here, since they can only be typos of ours.
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::notify::arming::MemoryThresholds;
use crate::notify::detector::AttachPoint;
use crate::notify::psi::{PsiTrigger, PsiTriggerError};
use crate::observe::CgroupLayout;
use crate::policy::eviction::{
    IMMEDIATE_GRACE_PERIOD_SECONDS, KUBELET_IMMEDIATE_GRACE_PERIOD_SECONDS,
};
use crate::policy::quantity::{Quantity, QuantityOrPercent, parse_quantity_or_percent};
use crate::policy::relief::ReliefSettings;

/// `#[serde(deserialize_with = "go_duration", serialize_with = "go_duration_text")]`: a Go duration string ("200ms", "2s").
fn go_duration<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(deserializer)?;
    super::kubelet::parse_go_duration(&text).map_err(serde::de::Error::custom)
}

/// `#[serde(serialize_with = "go_duration_text")]`: as a Go duration string, the way it
/// is read back.
fn go_duration_text<S: serde::Serializer>(
    value: &Duration,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&super::kubelet::format_go_duration(*value))
}

/// `#[serde(deserialize_with = "hard_eviction_grace")]`: 0 or 1, with an error naming the
/// key (serde's own errors do not always name it).
fn hard_eviction_grace<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<i64, D::Error> {
    let value = serde_yaml_ng::Value::deserialize(deserializer)?;
    match value.as_i64() {
        Some(
            seconds @ (IMMEDIATE_GRACE_PERIOD_SECONDS | KUBELET_IMMEDIATE_GRACE_PERIOD_SECONDS),
        ) => Ok(seconds),
        _ => {
            let found = serde_yaml_ng::to_string(&value)
                .map(|text| text.trim().to_string())
                .unwrap_or_else(|_| format!("{value:?}"));
            Err(serde::de::Error::custom(format!(
                "hardEvictionGracePeriodSeconds: expected 0 or 1, found {found}"
            )))
        }
    }
}

/// A `monitor:` block the agent refuses. Every variant names the file (`origin`).
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    /// An unknown key or a value of the wrong type, at `path` (`podsMemoryLimit`,
    /// `sources.psi`; empty for the block itself).
    #[error("{origin}: monitor{}{path}: {source}", if path.is_empty() { "" } else { "." })]
    Yaml {
        origin: String,
        path: String,
        #[source]
        source: serde_yaml_ng::Error,
    },
    #[error("{origin}: monitor.sources.psiWindow/psiStall: {source}")]
    PsiTrigger {
        origin: String,
        #[source]
        source: PsiTriggerError,
    },
    /// A value the agent does not know (see [`AgentSettings::check`]).
    #[error("{origin}: monitor.{key}: {value:?}: {reason}")]
    Invalid {
        origin: String,
        key: &'static str,
        value: String,
        reason: &'static str,
    },
    /// A value that would make the agent unsafe (see [`AgentSettings::check`]).
    #[error("{origin}: monitor.{key}: {value:?}: {reason}")]
    Unsafe {
        origin: String,
        key: &'static str,
        value: String,
        reason: &'static str,
    },
}

/// Everything the agent needs to start its sources and synchronize loop: plain settings,
/// no live state (the state shared with the API is handed to [`crate::agent::Agent::start`]).
#[derive(Clone, Debug)]
pub struct AgentConfig {
    pub settings: AgentSettings,
    /// The housekeeping interval (the fallback timer).
    pub housekeeping: Duration,
    /// Memory eviction thresholds, armed as memcg notifiers.
    pub memory_thresholds: MemoryThresholds,
    /// The cgroup layout; `None` detects the host's.
    pub layout: Option<CgroupLayout>,
    /// Load this eBPF object instead of the embedded one (tests make loading fail with it).
    pub ebpf_object_override: Option<Vec<u8>>,
}

/// Which event sources run, and how.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct SourcesSettings {
    pub ebpf: bool,
    pub memcg_thresholds: bool,
    pub memory_events: bool,
    pub psi: bool,
    /// PSI trigger: stall time within the window that fires it.
    #[serde(deserialize_with = "go_duration", serialize_with = "go_duration_text")]
    pub psi_stall: Duration,
    #[serde(deserialize_with = "go_duration", serialize_with = "go_duration_text")]
    pub psi_window: Duration,
    /// In-kernel rate limit of the eBPF programs, per cgroup and event kind.
    #[serde(deserialize_with = "go_duration", serialize_with = "go_duration_text")]
    pub ebpf_min_interval: Duration,
    /// Attach points the eBPF crossing detector may use, in order of preference
    /// (`fexit/page_counter_try_charge`, `fexit/try_charge_memcg`,
    /// `tp_btf/mod_memcg_lruvec_state`); empty: no detector.
    pub crossing_detector: Vec<String>,
}

impl Default for SourcesSettings {
    fn default() -> Self {
        let psi = PsiTrigger::default();
        SourcesSettings {
            ebpf: true,
            memcg_thresholds: true,
            memory_events: true,
            psi: true,
            psi_stall: psi.stall,
            psi_window: psi.window,
            ebpf_min_interval: Duration::from_nanos(monitor_common::DEFAULT_MIN_INTERVAL_NS),
            crossing_detector: AttachPoint::ALL
                .iter()
                .map(|a| a.name().to_string())
                .collect(),
        }
    }
}

impl SourcesSettings {
    /// The detector's attach points, in order; names were checked when the file was read.
    pub fn crossing_attach_points(&self) -> Vec<AttachPoint> {
        self.crossing_detector
            .iter()
            .filter_map(|name| AttachPoint::parse(name))
            .collect()
    }
}

/// The `monitor:` block.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct AgentSettings {
    pub sources: SourcesSettings,
    /// The cgroup (relative to the memory hierarchy's root) under which pods run: the
    /// allocatableMemory.available signal reads it.
    pub pods_cgroup: Option<String>,
    /// Memory limit of the pods cgroup: a bounded node (node allocatable).
    pub pods_memory_limit: Option<Quantity>,
    /// A path on the node filesystem (nodefs signals).
    pub nodefs_path: PathBuf,
    /// A path on a dedicated image filesystem, if any.
    pub imagefs_path: Option<PathBuf>,
    /// Where the agent keeps its state.
    pub state_dir: PathBuf,
    /// The API's unix socket.
    pub socket: PathBuf,
    /// Extra cgroups (relative to the memory root) to watch with memory.events and PSI.
    pub watch_cgroups: Vec<String>,
    /// Run the pods of the manifest directory (the kubelet's `staticPodPath`).
    pub run_pods: bool,
    /// Container logs (`<dir>/<namespace>_<name>_<uid>/<container>/<n>.log`).
    pub pod_log_dir: PathBuf,
    /// Root of the agent's cgroups in every hierarchy (pods live in `<root>/kubepods`).
    pub cgroup_root: String,
    /// On a systemd node with cgroup v2: the transient scope unit (`NAME.scope`) whose
    /// cgroup, delegated to the agent, holds the pods' tree instead of `cgroupRoot`.
    pub systemd_scope: Option<String>,
    /// First restart delay of a crashed container (doubles up to 5 minutes).
    #[serde(deserialize_with = "go_duration", serialize_with = "go_duration_text")]
    pub restart_backoff: Duration,
    /// Where `/metrics` is also served over TCP (e.g. "127.0.0.1:9102"); none by default.
    pub metrics_address: Option<String>,
    /// Grace period of hard-threshold and local-storage evictions: 0 (SIGKILL at once, the
    /// documented kubelet behaviour) or 1 (SIGTERM, SIGKILL after 1 s: the kubelet >= 1.31).
    #[serde(deserialize_with = "hard_eviction_grace")]
    pub hard_eviction_grace_period_seconds: i64,
    /// The hot kill path: a hard memory threshold's crossing, seen by a kernel notifier,
    /// kills the pre-ranked victim at once, before any synchronize.
    pub hot_kill: bool,
    /// What runs the pods: `process` (each container a process on this host, no images)
    /// or `cri` (sandboxes and containers on the CRI runtime at the KubeletConfiguration's
    /// `containerRuntimeEndpoint`, e.g. containerd).
    pub runtime: RuntimeKind,
    /// How often the image garbage collector runs on a CRI runtime (the kubelet: 5m).
    #[serde(deserialize_with = "go_duration", serialize_with = "go_duration_text")]
    pub image_gc_period: Duration,
    /// Pods a kubelet runs on this node, which the agent protects instead of pods of its
    /// own (with `runPods: false`).
    pub pod_list: Option<PodListSettings>,
    /// Decide as usual, act never: each eviction, kill or reclaim the agent would have
    /// carried out is reported (event, metric, log) instead (with `runPods: false`).
    pub shadow: bool,
    /// A program run before each eviction the synchronize decides (never on the hot
    /// path), with the decision as JSON on its stdin.
    pub pre_kill_hook: Option<PreKillHookSettings>,
    /// Memory relief: at a level a margin above a memory threshold, the pods' page cache
    /// is reclaimed (`memory.reclaim`, cgroup v2) before any pod is evicted.
    pub memory_relief: MemoryReliefSettings,
    /// Memory stalls (PSI `full`) as an eviction signal, counted only while memory is
    /// short; off unless set.
    pub memory_stall: Option<MemoryStallSettings>,
}

/// `monitor.memoryStall`.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MemoryStallSettings {
    /// The PSI `full` share (avg10) past which the signal's threshold is met ("20%").
    #[serde(
        deserialize_with = "quantity_or_percent",
        serialize_with = "quantity_or_percent_text"
    )]
    pub full: QuantityOrPercent,
    /// Stalls count only while `memory.available` or `allocatableMemory.available` is
    /// within this of its highest threshold (default "10%" of its capacity).
    #[serde(
        default = "default_stall_margin",
        deserialize_with = "quantity_or_percent",
        serialize_with = "quantity_or_percent_text"
    )]
    pub margin: QuantityOrPercent,
    /// How long the stall must last before a pod is evicted (default 30s).
    #[serde(
        default = "default_stall_grace",
        deserialize_with = "go_duration",
        serialize_with = "go_duration_text"
    )]
    pub grace_period: Duration,
}

fn default_stall_margin() -> QuantityOrPercent {
    QuantityOrPercent::Percent(0.10)
}

fn default_stall_grace() -> Duration {
    Duration::from_secs(30)
}

impl MemoryStallSettings {
    /// The policy's view (checked values: see [`AgentSettings::check`]).
    pub(crate) fn policy(&self) -> crate::policy::stall::StallSettings {
        crate::policy::stall::StallSettings {
            full: match self.full {
                QuantityOrPercent::Percent(share) => share,
                QuantityOrPercent::Quantity(_) => 1.0,
            },
            margin: self.margin,
            grace_period: self.grace_period,
        }
    }
}

/// `monitor.memoryRelief`.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct MemoryReliefSettings {
    /// On by default where the kernel has `memory.reclaim`; `false` turns it off.
    pub enabled: bool,
    /// How far above a memory signal's highest threshold relief starts ("5%" of the
    /// signal's capacity, or a quantity such as "200Mi").
    #[serde(
        deserialize_with = "quantity_or_percent",
        serialize_with = "quantity_or_percent_text"
    )]
    pub margin: QuantityOrPercent,
    /// The most one write to a pod's `memory.reclaim` asks for.
    pub step: Quantity,
    /// The most memory stall a step may cause (the PSI `full` share of the pod's
    /// `memory.pressure` over the step), as a percentage; past it the pass stops.
    #[serde(
        deserialize_with = "quantity_or_percent",
        serialize_with = "quantity_or_percent_text"
    )]
    pub max_stall: QuantityOrPercent,
}

impl Default for MemoryReliefSettings {
    fn default() -> Self {
        let policy = ReliefSettings::default();
        MemoryReliefSettings {
            enabled: true,
            margin: policy.margin,
            step: Quantity::from_units(policy.step_bytes as i64),
            max_stall: QuantityOrPercent::Percent(policy.max_stall),
        }
    }
}

impl MemoryReliefSettings {
    /// The policy's view (checked values: see [`AgentSettings::check`]).
    pub(crate) fn policy(&self) -> ReliefSettings {
        ReliefSettings {
            margin: self.margin,
            step_bytes: u64::try_from(self.step.value()).unwrap_or(0),
            max_stall: match self.max_stall {
                QuantityOrPercent::Percent(share) => share,
                QuantityOrPercent::Quantity(_) => ReliefSettings::default().max_stall,
            },
        }
    }
}

/// `#[serde(deserialize_with = "quantity_or_percent")]`: "5%" or "200Mi".
fn quantity_or_percent<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<QuantityOrPercent, D::Error> {
    let text = String::deserialize(deserializer)?;
    parse_quantity_or_percent(&text).map_err(serde::de::Error::custom)
}

/// `#[serde(serialize_with = "quantity_or_percent_text")]`: as it is read back.
fn quantity_or_percent_text<S: serde::Serializer>(
    value: &QuantityOrPercent,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&crate::policy::signal::format_value(*value))
}

/// `monitor.preKillHook`.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PreKillHookSettings {
    /// The program (an absolute path) and its arguments, executed without a shell.
    pub command: Vec<String>,
    /// How long it may run; it comes out of the eviction's grace period, and a hook
    /// still running then is killed and the eviction goes on.
    #[serde(
        default = "default_hook_timeout",
        deserialize_with = "go_duration",
        serialize_with = "go_duration_text"
    )]
    pub timeout: Duration,
}

/// A systemd scope unit's name: the unit name characters systemd takes, `.scope` at the
/// end and something before it.
fn valid_scope_name(unit: &str) -> bool {
    unit.strip_suffix(".scope").is_some_and(|stem| {
        !stem.is_empty()
            && stem
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || ":_.\\@-".contains(c))
    })
}

fn default_hook_timeout() -> Duration {
    Duration::from_secs(5)
}

/// `monitor.podList`: where the pods a kubelet runs are listed.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PodListSettings {
    /// A PodList as `kubectl get pods -o json` (or the kubelet's `/pods`) writes it; read
    /// again whenever it changes.
    pub file: PathBuf,
}

/// What runs the pods (`monitor.runtime`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RuntimeKind {
    /// The agent's own process runtime.
    #[default]
    Process,
    /// A CRI runtime (containerd).
    Cri,
}

impl Default for AgentSettings {
    fn default() -> Self {
        AgentSettings {
            sources: SourcesSettings::default(),
            pods_cgroup: None,
            pods_memory_limit: None,
            nodefs_path: PathBuf::from("/"),
            imagefs_path: None,
            state_dir: PathBuf::from("/var/lib/monitor"),
            socket: PathBuf::from("/run/monitor/monitor.sock"),
            watch_cgroups: Vec::new(),
            run_pods: true,
            pod_log_dir: PathBuf::from("/var/log/pods"),
            cgroup_root: "monitor".to_string(),
            systemd_scope: None,
            restart_backoff: Duration::from_secs(10),
            metrics_address: None,
            hard_eviction_grace_period_seconds: IMMEDIATE_GRACE_PERIOD_SECONDS,
            hot_kill: true,
            runtime: RuntimeKind::Process,
            image_gc_period: Duration::from_secs(300),
            pod_list: None,
            shadow: false,
            pre_kill_hook: None,
            memory_relief: MemoryReliefSettings::default(),
            memory_stall: None,
        }
    }
}

impl AgentSettings {
    pub fn psi_trigger(&self) -> PsiTrigger {
        PsiTrigger {
            stall: self.sources.psi_stall,
            window: self.sources.psi_window,
        }
    }

    /// Parses the raw `monitor:` value; `origin` names the file in errors.
    pub(crate) fn from_value(
        value: Option<serde_yaml_ng::Value>,
        origin: &str,
    ) -> Result<Self, SettingsError> {
        let Some(value) = value else {
            return Ok(AgentSettings::default());
        };
        // The path names the key of a value of the wrong type, which serde's own message
        // leaves out.
        let settings: AgentSettings = serde_path_to_error::deserialize(value).map_err(|err| {
            let path = err.path().to_string();
            SettingsError::Yaml {
                origin: origin.to_string(),
                path: if path == "." { String::new() } else { path },
                source: err.into_inner(),
            }
        })?;
        settings
            .psi_trigger()
            .validate()
            .map_err(|source| SettingsError::PsiTrigger {
                origin: origin.to_string(),
                source,
            })?;
        settings.check(origin)?;
        Ok(settings)
    }

    /// Refuses values that would turn the agent against the node: a `cgroupRoot` that is
    /// the hierarchy's root (or climbs out of it) would make every cgroup "ours" to clean
    /// up and kill at start; a `restartBackoff` under 100 ms restarts a crashing container
    /// in a hot loop.
    fn check(&self, origin: &str) -> Result<(), SettingsError> {
        let unsafe_value = |key, value: String, reason| SettingsError::Unsafe {
            origin: origin.to_string(),
            key,
            value,
            reason,
        };
        let root = self.cgroup_root.trim_matches('/');
        if root.is_empty()
            || root
                .split('/')
                .any(|part| part.is_empty() || part == "." || part == "..")
        {
            return Err(unsafe_value(
                "cgroupRoot",
                self.cgroup_root.clone(),
                "must name a cgroup below the hierarchy's root (e.g. \"monitor\"), without empty, . or .. parts",
            ));
        }
        if let Some(unit) = &self.systemd_scope
            && !valid_scope_name(unit)
        {
            return Err(unsafe_value(
                "systemdScope",
                unit.clone(),
                "must be a scope unit's name: letters, digits and :_.\\@- ending in .scope (e.g. \"monitor-pods.scope\")",
            ));
        }
        if let Some(unknown) = self
            .sources
            .crossing_detector
            .iter()
            .find(|name| AttachPoint::parse(name).is_none())
        {
            return Err(SettingsError::Invalid {
                origin: origin.to_string(),
                key: "sources.crossingDetector",
                value: unknown.clone(),
                reason: "must list attach points among fexit/page_counter_try_charge, fexit/try_charge_memcg and tp_btf/mod_memcg_lruvec_state",
            });
        }
        if self.run_pods && (self.pod_list.is_some() || self.shadow) {
            return Err(SettingsError::Invalid {
                origin: origin.to_string(),
                key: if self.shadow { "shadow" } else { "podList" },
                value: "true".to_string(),
                reason: "needs runPods: false (the pods are a kubelet's, listed by monitor.podList, not the agent's own)",
            });
        }
        if let Some(hook) = &self.pre_kill_hook {
            let program = hook.command.first().map(String::as_str).unwrap_or("");
            if !program.starts_with('/') {
                return Err(SettingsError::Invalid {
                    origin: origin.to_string(),
                    key: "preKillHook.command",
                    value: format!("{:?}", hook.command),
                    reason: "must start with the program's absolute path (it is executed without a shell)",
                });
            }
            if hook.timeout < Duration::from_millis(100) || hook.timeout > Duration::from_secs(300)
            {
                return Err(unsafe_value(
                    "preKillHook.timeout",
                    format!("{:?}", hook.timeout),
                    "must be between 100ms and 5m",
                ));
            }
        }
        let relief = &self.memory_relief;
        if !(1 << 20..=1 << 30).contains(&relief.step.value()) {
            return Err(unsafe_value(
                "memoryRelief.step",
                relief.step.to_string(),
                "must be between 1Mi and 1Gi (one write to memory.reclaim)",
            ));
        }
        if !matches!(relief.max_stall, QuantityOrPercent::Percent(share) if share > 0.0) {
            return Err(SettingsError::Invalid {
                origin: origin.to_string(),
                key: "memoryRelief.maxStall",
                value: crate::policy::signal::format_value(relief.max_stall),
                reason: "must be a percentage above 0% (e.g. \"10%\")",
            });
        }
        if let Some(stall) = &self.memory_stall {
            if !matches!(stall.full, QuantityOrPercent::Percent(share) if share > 0.0 && share < 1.0)
            {
                return Err(SettingsError::Invalid {
                    origin: origin.to_string(),
                    key: "memoryStall.full",
                    value: crate::policy::signal::format_value(stall.full),
                    reason: "must be a percentage between 0% and 100% (e.g. \"20%\")",
                });
            }
            if stall.grace_period < Duration::from_secs(1) {
                return Err(unsafe_value(
                    "memoryStall.gracePeriod",
                    format!("{:?}", stall.grace_period),
                    "must be at least 1s (a stall is a soft signal: an I/O burst must not evict)",
                ));
            }
        }
        if self.image_gc_period < Duration::from_secs(1) {
            return Err(unsafe_value(
                "imageGcPeriod",
                format!("{:?}", self.image_gc_period),
                "must be at least 1s",
            ));
        }
        if self.restart_backoff < Duration::from_millis(100) {
            return Err(unsafe_value(
                "restartBackoff",
                format!("{:?}", self.restart_backoff),
                "must be at least 100ms",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The error as text: the tests check what a user reads.
    fn parse(yaml: &str) -> Result<AgentSettings, String> {
        AgentSettings::from_value(Some(serde_yaml_ng::from_str(yaml).unwrap()), "agent.yaml")
            .map_err(|e| e.to_string())
    }

    #[rstest::rstest]
    #[case::empty("cgroupRoot: \"\"\n", "monitor.cgroupRoot")]
    #[case::slash("cgroupRoot: /\n", "monitor.cgroupRoot")]
    #[case::climbs_out("cgroupRoot: a/../..\n", "monitor.cgroupRoot")]
    #[case::scope_not_a_scope("systemdScope: monitor.service\n", "monitor.systemdScope")]
    #[case::scope_with_a_slash("systemdScope: a/b.scope\n", "monitor.systemdScope")]
    #[case::scope_bare_suffix("systemdScope: .scope\n", "monitor.systemdScope")]
    #[case::hot_restart_loop("restartBackoff: 0s\n", "monitor.restartBackoff")]
    #[case::hot_image_gc_loop("imageGcPeriod: 0s\n", "monitor.imageGcPeriod")]
    #[case::quantity_of_the_wrong_type("podsMemoryLimit: [1, 2]\n", "monitor.podsMemoryLimit")]
    #[case::flag_of_the_wrong_type("sources: {psi: maybe}\n", "monitor.sources.psi")]
    #[case::unknown_attach_point(
        "sources: {crossingDetector: [kprobe/try_charge]}\n",
        "monitor.sources.crossingDetector"
    )]
    #[case::relief_margin_not_a_quantity(
        "memoryRelief: {margin: lots}\n",
        "monitor.memoryRelief.margin"
    )]
    #[case::relief_step_too_small("memoryRelief: {step: 4Ki}\n", "monitor.memoryRelief.step")]
    #[case::relief_step_too_large("memoryRelief: {step: 2Gi}\n", "monitor.memoryRelief.step")]
    #[case::relief_stall_a_quantity(
        "memoryRelief: {maxStall: 10Mi}\n",
        "monitor.memoryRelief.maxStall"
    )]
    #[case::relief_stall_zero("memoryRelief: {maxStall: 0%}\n", "monitor.memoryRelief.maxStall")]
    #[case::relief_unknown_key("memoryRelief: {level: 5%}\n", "monitor.memoryRelief")]
    #[case::stall_without_full("memoryStall: {margin: 5%}\n", "monitor.memoryStall")]
    #[case::stall_full_a_quantity("memoryStall: {full: 20Mi}\n", "monitor.memoryStall.full")]
    #[case::stall_full_all("memoryStall: {full: 100%}\n", "monitor.memoryStall.full")]
    #[case::stall_no_grace(
        "memoryStall: {full: 20%, gracePeriod: 0s}\n",
        "monitor.memoryStall.gracePeriod"
    )]
    fn unsafe_values_are_refused_naming_the_file_and_key(#[case] yaml: &str, #[case] key: &str) {
        let err = parse(yaml).expect_err(yaml).to_string();
        assert!(
            err.starts_with("agent.yaml: ") && err.contains(key),
            "{err}"
        );
    }

    #[test]
    fn memory_relief_is_on_by_default_and_off_with_one_key() {
        let on = AgentSettings::default().memory_relief;
        assert!(on.enabled);
        assert_eq!(on.policy(), ReliefSettings::default());
        let s = parse("memoryRelief: {enabled: false}\n").expect("valid");
        assert!(!s.memory_relief.enabled);
        let s = parse("memoryRelief: {margin: 300Mi, step: 8Mi, maxStall: 25%}\n").expect("valid");
        let policy = s.memory_relief.policy();
        assert_eq!(policy.margin.resolve(0), 300 << 20);
        assert_eq!(policy.step_bytes, 8 << 20);
        assert!((policy.max_stall - 0.25).abs() < 1e-9);
    }

    #[test]
    fn memory_stall_is_off_unless_set() {
        assert_eq!(AgentSettings::default().memory_stall, None);
        let s = parse("memoryStall: {full: 25%}\n").expect("valid");
        let policy = s.memory_stall.expect("set").policy();
        assert!((policy.full - 0.25).abs() < 1e-9);
        assert_eq!(policy.grace_period, Duration::from_secs(30));
        assert_eq!(policy.margin, QuantityOrPercent::Percent(0.10));
    }

    #[test]
    fn nested_cgroup_roots_and_slow_backoffs_are_fine() {
        let s = parse("cgroupRoot: /system.slice/monitor\nrestartBackoff: 100ms\n").expect("valid");
        assert_eq!(s.cgroup_root, "/system.slice/monitor");
    }

    #[test]
    fn defaults_when_absent() {
        assert_eq!(
            AgentSettings::from_value(None, "x").unwrap(),
            AgentSettings::default()
        );
        assert!(AgentSettings::default().sources.ebpf);
    }

    #[test]
    fn reads_sources_and_limits() {
        let s = parse("sources: {ebpf: false, psiStall: 50ms, psiWindow: 2s}\npodsCgroup: monitor/pods\npodsMemoryLimit: 1Gi\n").unwrap();
        assert!(!s.sources.ebpf && s.sources.psi);
        assert_eq!(s.sources.psi_stall, Duration::from_millis(50));
        assert_eq!(s.pods_memory_limit.unwrap().value(), 1 << 30);
        assert_eq!(s.pods_cgroup.as_deref(), Some("monitor/pods"));
    }

    #[rstest::rstest]
    #[case("", 0)]
    #[case("hardEvictionGracePeriodSeconds: 0\n", 0)]
    #[case("hardEvictionGracePeriodSeconds: 1\n", 1)]
    fn hard_eviction_grace_period(#[case] yaml: &str, #[case] seconds: i64) {
        let settings = if yaml.is_empty() {
            AgentSettings::default()
        } else {
            parse(yaml).unwrap()
        };
        assert_eq!(settings.hard_eviction_grace_period_seconds, seconds);
    }

    #[rstest::rstest]
    #[case("hardEvictionGracePeriodSeconds: 2\n", "2")]
    #[case("hardEvictionGracePeriodSeconds: -1\n", "-1")]
    #[case("hardEvictionGracePeriodSeconds: 1s\n", "1s")]
    #[case("hardEvictionGracePeriodSeconds: 0.5\n", "0.5")]
    fn hard_eviction_grace_period_is_0_or_1(#[case] yaml: &str, #[case] found: &str) {
        let err = parse(yaml).unwrap_err();
        for word in [
            "agent.yaml",
            "hardEvictionGracePeriodSeconds",
            "0 or 1",
            found,
        ] {
            assert!(err.contains(word), "{err:?} should contain {word:?}");
        }
    }

    /// The keys a block accepts, as its parser lists them when it refuses an unknown one.
    fn accepted_keys(yaml: &str) -> Vec<String> {
        let err = parse(yaml).expect_err("an unknown key is refused");
        let (_, expected) = err
            .split_once("expected")
            .unwrap_or_else(|| panic!("the refusal lists no keys: {err}"));
        expected
            .split('`')
            .skip(1)
            .step_by(2)
            .map(String::from)
            .collect()
    }

    /// docs/configuration.md's `monitor:` table names every key the parser accepts, and
    /// nothing else (`sources` is a block: its keys are named `sources.<key>`).
    #[test]
    fn the_configuration_page_names_every_key() {
        let mut accepted = std::collections::BTreeSet::new();
        for key in accepted_keys("notAKey: 1\n") {
            if key == "sources" {
                let nested = accepted_keys("sources: {notAKey: 1}\n");
                accepted.extend(nested.into_iter().map(|k| format!("sources.{k}")));
            } else {
                accepted.insert(key);
            }
        }
        let page = crate::doc_tables::page("configuration.md");
        let documented = crate::doc_tables::first_column(&page, "key");
        assert!(accepted.len() > 20, "{accepted:?}");
        let undocumented: Vec<_> = accepted.difference(&documented).collect();
        let unknown: Vec<_> = documented.difference(&accepted).collect();
        assert!(
            undocumented.is_empty() && unknown.is_empty(),
            "docs/configuration.md: keys without a row {undocumented:?}, rows the parser does not accept {unknown:?}"
        );
    }

    #[test]
    fn errors_name_the_file_and_key() {
        let err = parse("sources: {ebfp: false}\n").unwrap_err();
        assert!(err.contains("agent.yaml") && err.contains("ebfp"), "{err}");
        let err = parse("sources: {psiWindow: 20s}\n").unwrap_err();
        assert!(err.contains("psiWindow") && err.contains("10s"), "{err}");
        let err = parse("podsMemoryLimit: lots\n").unwrap_err();
        assert!(
            err.contains("podsMemoryLimit") || err.contains("lots"),
            "{err}"
        );
    }
}
