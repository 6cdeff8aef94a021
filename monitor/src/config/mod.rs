//! Configuration: a KubeletConfiguration (in [`kubelet`]) plus the agent's own settings
//! (event sources, paths) under the `monitor:` key of the same file ([`agent`]).
pub mod agent;
pub mod duration;
pub mod kubelet;

use std::path::Path;
use std::time::Duration;

use anyhow::Context;

use crate::agent::{AgentConfig, EvaluateOnly};
use crate::manager::MemoryThresholds;
use crate::policy::quantity::parse_quantity_or_percent;

/// The embedded default configuration (`monitor run` without `--config`).
pub const DEFAULT_CONFIG: &str = include_str!("../../config/default.yaml");

/// A loaded configuration file.
#[derive(Clone, Debug)]
pub struct LoadedConfig {
    pub agent: AgentConfig,
}

impl LoadedConfig {
    pub fn synchronizer(&self) -> EvaluateOnly {
        EvaluateOnly {
            thresholds: self.agent.memory_thresholds.clone(),
        }
    }
}

/// Loads a configuration file, or the embedded default.
pub fn load_agent_config(path: Option<&Path>) -> anyhow::Result<LoadedConfig> {
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
    parse_agent_config(&text, &origin).map_err(anyhow::Error::msg)
}

/// Parses the configuration text; `origin` names the file in errors.
pub fn parse_agent_config(text: &str, origin: &str) -> Result<LoadedConfig, String> {
    let mut root: serde_yaml_ng::Mapping =
        serde_yaml_ng::from_str(text).map_err(|e| format!("{origin}: {e}"))?;
    let settings = agent::AgentSettings::from_value(root.remove("monitor"), origin)?;
    let housekeeping = match root.get("housekeepingInterval").and_then(|v| v.as_str()) {
        Some(text) => duration::parse_go_duration(text)
            .map_err(|e| format!("{origin}: housekeepingInterval: {e}"))?,
        None => Duration::from_secs(10),
    };
    let mut memory_thresholds = MemoryThresholds::default();
    for key in ["evictionHard", "evictionSoft"] {
        let Some(map) = root.get(key).and_then(|v| v.as_mapping()) else {
            continue;
        };
        for (signal, value) in map {
            let (Some(signal), Some(value)) = (signal.as_str(), value.as_str()) else {
                continue;
            };
            let parsed = || {
                parse_quantity_or_percent(value)
                    .map_err(|e| format!("{origin}: {key}.{signal}: {e}"))
            };
            match signal {
                "memory.available" => memory_thresholds.node.push(parsed()?),
                "allocatableMemory.available" => memory_thresholds.pods.push(parsed()?),
                _ => {}
            }
        }
    }
    Ok(LoadedConfig {
        agent: AgentConfig {
            settings,
            housekeeping,
            memory_thresholds,
            layout: None,
            ebpf_object_override: None,
        },
    })
}
