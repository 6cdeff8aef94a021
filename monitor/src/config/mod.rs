//! Configuration: a KubeletConfiguration (in [`kubelet`]) plus the agent's own settings
//! (event sources, paths) under the `monitor:` key of the same file ([`agent`]).
use std::path::Path;

use anyhow::Context;

use crate::notify::arming::{MemoryThreshold, MemoryThresholds};
use crate::policy::signal::Signal;

pub mod agent;
pub(crate) mod drop_ins;
pub mod kubelet;

/// The embedded default configuration (`monitor run` without `--config`).
pub(crate) const DEFAULT_CONFIG: &str = include_str!("../../config/default.yaml");

/// A loaded configuration file.
#[derive(Clone, Debug)]
pub struct LoadedConfig {
    pub kubelet: kubelet::KubeletConfig,
    pub agent: agent::AgentConfig,
    /// Keys accepted but not understood (already logged by [`load_agent_config`]).
    pub warnings: Vec<kubelet::ConfigWarning>,
}

/// A configuration file the agent refuses: its kubelet part or its `monitor:` block.
/// Both messages name the file.
#[derive(Debug, thiserror::Error)]
pub enum AgentConfigError {
    #[error(transparent)]
    Kubelet(#[from] kubelet::ConfigError),
    #[error(transparent)]
    Settings(#[from] agent::SettingsError),
}

/// Where the package installs the node's configuration: `monitor run` reads it when no
/// `--config` is given.
pub(crate) const PACKAGED_CONFIG: &str = "/etc/monitor/config.yaml";

/// The configuration file `monitor run` reads: the one given, else [`PACKAGED_CONFIG`]
/// when it exists; `None` means the embedded default.
pub fn config_path(given: Option<&Path>) -> Option<std::path::PathBuf> {
    match given {
        Some(path) => Some(path.to_path_buf()),
        None => {
            let packaged = Path::new(PACKAGED_CONFIG);
            packaged.exists().then(|| packaged.to_path_buf())
        }
    }
}

/// The effective configuration as one KubeletConfiguration document, the agent's settings
/// under `monitor:` with every default filled in: what `monitor check-config` prints.
/// Loading it again gives the same configuration.
pub fn effective_config(loaded: &LoadedConfig) -> serde_yaml_ng::Value {
    let mut doc = kubelet::effective_document(&loaded.kubelet);
    // The driver names only the cgroups of a kubelet's pods: in effect with a pod list,
    // and the agent's own pods are named as cgroupfs names them whatever it says.
    if loaded.agent.settings.pod_list.is_some() {
        doc.insert(
            "cgroupDriver".into(),
            loaded.kubelet.cgroup_driver.as_str().into(),
        );
    }
    let settings = serde_yaml_ng::to_value(&loaded.agent.settings).unwrap_or_default();
    doc.insert("monitor".into(), settings);
    serde_yaml_ng::Value::Mapping(doc)
}

/// Loads a configuration file (or the embedded default), merges the drop-ins of
/// `config_dir` over it ([`drop_ins`]), then applies kubelet-style flags
/// (`--eviction-hard=...`) on top. Warnings are logged.
pub fn load_agent_config(
    path: Option<&Path>,
    config_dir: Option<&Path>,
    flags: &[String],
) -> anyhow::Result<LoadedConfig> {
    let loaded = read_agent_config(path, config_dir, flags)?;
    for warning in &loaded.warnings {
        tracing::warn!("configuration: {warning}");
    }
    Ok(loaded)
}

/// [`load_agent_config`] without logging: the warnings stay in the result for the caller
/// to say (`monitor check-config` prints them).
pub fn read_agent_config(
    path: Option<&Path>,
    config_dir: Option<&Path>,
    flags: &[String],
) -> anyhow::Result<LoadedConfig> {
    let (text, origin) = match path {
        Some(path) => (
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?,
            path.display().to_string(),
        ),
        None => (
            DEFAULT_CONFIG.to_string(),
            "<embedded default config>".to_string(),
        ),
    };
    let (text, origin) = match config_dir {
        Some(dir) => with_drop_ins(text, origin, dir)?,
        None => (text, origin),
    };
    // As one message: it already includes its causes, which `{:#}` would print again.
    parse_agent_config(&text, &origin, flags).map_err(|e| anyhow::anyhow!("{e}"))
}

/// `text` (from `origin`) with the drop-ins of `dir` merged over it, and the origin of the
/// result for error messages. Without drop-in files, `text` as it is.
fn with_drop_ins(text: String, origin: String, dir: &Path) -> anyhow::Result<(String, String)> {
    let files = drop_ins::drop_in_files(dir)?;
    if files.is_empty() {
        return Ok((text, origin));
    }
    let mut drop_ins = Vec::with_capacity(files.len());
    for path in files {
        let text =
            std::fs::read_to_string(&path).map_err(|source| drop_ins::DropInError::Read {
                path: path.clone(),
                source,
            })?;
        drop_ins.push((path, text));
    }
    let base: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&text).with_context(|| format!("{origin}: not YAML"))?;
    let merged = drop_ins::merge_drop_ins(kubelet::unwrap_configz(base), &drop_ins)?;
    let names: Vec<String> = drop_ins
        .iter()
        .map(|(path, _)| {
            path.file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    let origin = format!(
        "{origin} with the drop-ins of {} ({})",
        dir.display(),
        names.join(", ")
    );
    let text = serde_yaml_ng::to_string(&merged).context("printing the merged configuration")?;
    Ok((text, origin))
}

/// Parses configuration text; `origin` names the file in errors.
pub fn parse_agent_config(
    text: &str,
    origin: &str,
    flags: &[String],
) -> Result<LoadedConfig, AgentConfigError> {
    let (mut kubelet, warnings) = kubelet::load_kubelet_config_with_flags(text, origin, flags)?;
    let settings = agent::AgentSettings::from_value(kubelet.monitor.clone(), origin)?;
    // An agent setting the policy needs: carried in the eviction config, so the agent and
    // `monitor simulate` (which loads through here) decide alike.
    kubelet.eviction.hard_eviction_grace_period_seconds =
        settings.hard_eviction_grace_period_seconds;
    let agent = agent::AgentConfig {
        settings,
        housekeeping: kubelet.housekeeping_interval,
        memory_thresholds: memory_thresholds(&kubelet),
        layout: None,
        ebpf_object_override: None,
    };
    Ok(LoadedConfig {
        kubelet,
        agent,
        warnings,
    })
}

/// The memory eviction thresholds (hard and soft) to arm as kernel notifiers.
pub(crate) fn memory_thresholds(kubelet: &kubelet::KubeletConfig) -> MemoryThresholds {
    let mut thresholds = MemoryThresholds::default();
    for threshold in &kubelet.eviction.thresholds {
        let memory = MemoryThreshold {
            value: threshold.value,
            hard: threshold.is_hard(),
        };
        match threshold.signal {
            Signal::MemoryAvailable => thresholds.node.push(memory),
            Signal::AllocatableMemoryAvailable => thresholds.pods.push(memory),
            _ => {}
        }
    }
    thresholds
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Loads `text` with `flags`, prints the effective configuration, loads that again.
    fn round_trip(text: &str, flags: &[&str]) -> (LoadedConfig, LoadedConfig, String) {
        let flags: Vec<String> = flags.iter().map(|f| f.to_string()).collect();
        let first = parse_agent_config(text, "first.yaml", &flags)
            .unwrap_or_else(|e| panic!("{e}\n{text}"));
        let printed = serde_yaml_ng::to_string(&effective_config(&first)).expect("yaml");
        let second = parse_agent_config(&printed, "effective.yaml", &[]).unwrap_or_else(|e| {
            panic!("the effective configuration does not load: {e}\n{printed}")
        });
        (first, second, printed)
    }

    #[rstest::rstest]
    #[case::embedded_default(DEFAULT_CONFIG, &[])]
    #[case::everything_given(
        "evictionHard: {memory.available: 300Mi, nodefs.available: 7%}\n\
         evictionSoft: {memory.available: 1Gi, imagefs.available: 20%}\n\
         evictionSoftGracePeriod: {memory.available: 1m30s, imagefs.available: 2m}\n\
         evictionMinimumReclaim: {memory.available: 100Mi, nodefs.available: 500Mi}\n\
         evictionPressureTransitionPeriod: 30s\nevictionMaxPodGracePeriod: -1\n\
         systemReserved: {memory: 512Mi, cpu: 500m}\nkubeReserved: {memory: 256Mi}\n\
         qosReserved: {memory: 50%}\nimageMaximumGCAge: 72h\nmaxPods: 40\npodPidsLimit: 1000\n\
         featureGates: {PSINodeCondition: true, SomethingElse: false}\n\
         memoryThrottlingFactor: 0.7\nhousekeepingInterval: 5s\n\
         monitor: {runtime: process, restartBackoff: 3s, sources: {psi: false}}\n",
        &[]
    )]
    #[case::flags_over_the_file("evictionHard: {memory.available: 300Mi}\n", &["--eviction-hard=memory.available<1Gi", "--eviction-soft=nodefs.available<15%", "--eviction-soft-grace-period=nodefs.available=1m"])]
    #[case::configz(r#"{"kubeletconfig":{"evictionHard":{"memory.available":"200Mi"},"kind":"KubeletConfiguration","apiVersion":"kubelet.config.k8s.io/v1beta1"}}"#, &[])]
    fn the_effective_configuration_loads_back_to_itself(
        #[case] text: &str,
        #[case] flags: &[&str],
    ) {
        let (first, second, printed) = round_trip(text, flags);
        assert!(
            second.warnings.is_empty(),
            "{:?}\n{printed}",
            second.warnings
        );
        let thresholds = |c: &LoadedConfig| {
            let mut t = c.kubelet.eviction.thresholds.clone();
            t.sort_by_key(|t| (t.signal, t.grace_period));
            t
        };
        assert_eq!(thresholds(&first), thresholds(&second), "{printed}");
        assert_eq!(first.kubelet.eviction, second.kubelet.eviction, "{printed}");
        assert_eq!(first.kubelet.image_gc, second.kubelet.image_gc, "{printed}");
        assert_eq!(
            first.kubelet.system_reserved,
            second.kubelet.system_reserved
        );
        assert_eq!(first.kubelet.qos_reserved, second.kubelet.qos_reserved);
        assert_eq!(first.kubelet.memory_qos, second.kubelet.memory_qos);
        assert_eq!(
            first.kubelet.housekeeping_interval,
            second.kubelet.housekeeping_interval
        );
        assert_eq!(first.agent.settings, second.agent.settings, "{printed}");
        for (gate, _) in kubelet::FEATURE_GATES {
            assert_eq!(
                first.kubelet.feature_gate(gate),
                second.kubelet.feature_gate(gate)
            );
        }
        // Printing again gives the same text.
        let again = serde_yaml_ng::to_string(&effective_config(&second)).expect("yaml");
        assert_eq!(printed, again);
    }

    #[test]
    fn a_kubelets_driver_and_the_shadow_settings_survive_the_round_trip() {
        let (first, second, printed) = round_trip(
            "cgroupDriver: systemd\ncgroupRoot: /\n\
             monitor:\n  runPods: false\n  podList: {file: /run/monitor/pods.json}\n  shadow: true\n  \
             preKillHook: {command: [/usr/local/bin/notice, --pod], timeout: 2s}\n",
            &[],
        );
        assert_eq!(
            second.kubelet.cgroup_driver,
            kubelet::CgroupDriver::Systemd,
            "{printed}"
        );
        assert_eq!(first.agent.settings, second.agent.settings, "{printed}");
        assert!(second.agent.settings.shadow, "{printed}");
        // Without a pod list the driver names nothing: the agent's own pods are named as
        // cgroupfs names them, and the printed configuration says nothing of it.
        let (_, own, printed) = round_trip("cgroupDriver: systemd\n", &[]);
        assert!(own.warnings.is_empty(), "{:?}\n{printed}", own.warnings);
        assert!(!printed.contains("cgroupDriver"), "{printed}");
    }

    #[rstest::rstest]
    #[case::shadow_with_own_pods("monitor: {shadow: true}\n", "monitor.shadow")]
    #[case::list_with_own_pods("monitor: {podList: {file: /x.json}}\n", "monitor.podList")]
    #[case::relative_hook(
        "monitor: {runPods: false, preKillHook: {command: [notice]}}\n",
        "preKillHook.command"
    )]
    #[case::hook_timeout(
        "monitor: {runPods: false, preKillHook: {command: [/bin/true], timeout: 10m}}\n",
        "preKillHook.timeout"
    )]
    #[case::bad_driver("cgroupDriver: upstart\n", "cgroupDriver")]
    fn settings_that_cannot_work_are_refused_naming_the_key(#[case] text: &str, #[case] key: &str) {
        let err = parse_agent_config(text, "node.yaml", &[])
            .err()
            .unwrap_or_else(|| panic!("{text} was accepted"))
            .to_string();
        assert!(err.contains("node.yaml") && err.contains(key), "{err}");
    }

    #[test]
    fn the_embedded_default_loads_without_warnings() {
        let loaded = parse_agent_config(DEFAULT_CONFIG, "default.yaml", &[]).unwrap();
        assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
        assert!(loaded.agent.settings.sources.ebpf);
        assert_eq!(
            loaded.agent.housekeeping,
            std::time::Duration::from_secs(10)
        );
        // memory.available<100Mi, plus the allocatableMemory.available copy the kubelet
        // adds when node allocatable is enforced on pods.
        assert_eq!(loaded.agent.memory_thresholds.node.len(), 1);
    }

    #[test]
    fn flags_override_the_file_and_reach_the_notifiers() {
        let flags = vec!["--eviction-hard=memory.available<500Mi".to_string()];
        let loaded = parse_agent_config(DEFAULT_CONFIG, "default.yaml", &flags).unwrap();
        let node = &loaded.agent.memory_thresholds.node;
        assert_eq!(node.len(), 1);
        assert_eq!(node[0].value.resolve(1 << 40), 500 << 20);
        assert!(node[0].hard);
    }

    #[test]
    fn the_hard_eviction_grace_period_reaches_the_policy() {
        let loaded = parse_agent_config(DEFAULT_CONFIG, "default.yaml", &[]).unwrap();
        assert_eq!(
            loaded.kubelet.eviction.hard_eviction_grace_period_seconds,
            0
        );
        let text = "monitor: {hardEvictionGracePeriodSeconds: 1}\n";
        // Kubelet flags rebuild the thresholds, not this setting.
        let flags = vec!["--eviction-hard=memory.available<500Mi".to_string()];
        let loaded = parse_agent_config(text, "node.yaml", &flags).unwrap();
        assert_eq!(
            loaded.kubelet.eviction.hard_eviction_grace_period_seconds,
            1
        );
        assert_eq!(loaded.agent.settings.hard_eviction_grace_period_seconds, 1);
    }

    #[test]
    fn errors_in_either_part_name_the_file() {
        let err = parse_agent_config("evictionHard: {memory.avail: 1Gi}\n", "node.yaml", &[])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("node.yaml") && err.contains("memory.avail"),
            "{err}"
        );
        let err = parse_agent_config("monitor: {sources: {psi: maybe}}\n", "node.yaml", &[])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("node.yaml") && err.contains("monitor"),
            "{err}"
        );
    }
}
