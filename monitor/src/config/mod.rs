//! Configuration: a KubeletConfiguration (in [`kubelet`]) plus the agent's own settings
//! (event sources, paths) under the `monitor:` key of the same file ([`agent`]).
use std::path::Path;

use anyhow::Context;

use crate::notify::arming::{MemoryThreshold, MemoryThresholds};
use crate::policy::signal::Signal;

pub mod agent;
pub mod kubelet;

/// The embedded default configuration (`monitor run` without `--config`).
pub const DEFAULT_CONFIG: &str = include_str!("../../config/default.yaml");

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
pub const PACKAGED_CONFIG: &str = "/etc/monitor/config.yaml";

/// Loads a configuration file (or the embedded default), then applies kubelet-style
/// flags (`--eviction-hard=...`) on top. Warnings are logged.
pub fn load_agent_config(path: Option<&Path>, flags: &[String]) -> anyhow::Result<LoadedConfig> {
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
    // As one message: it already includes its causes, which `{:#}` would print again.
    let loaded = parse_agent_config(&text, &origin, flags).map_err(|e| anyhow::anyhow!("{e}"))?;
    for warning in &loaded.warnings {
        tracing::warn!("configuration: {warning}");
    }
    Ok(loaded)
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
pub fn memory_thresholds(kubelet: &kubelet::KubeletConfig) -> MemoryThresholds {
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
