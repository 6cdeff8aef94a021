//! The parts of a KubeletConfiguration the simulation uses, loaded with the agent's own
//! loader (so a config the agent rejects, the simulation rejects with the same message).
use std::collections::BTreeMap;

use super::error::SimulateError;
use super::scenario::ConfigSource;
use crate::config::kubelet::{ImageGcSettings, load_kubelet_config};
use crate::policy::eviction::EvictionConfig;
use crate::policy::quantity::Quantity;

#[derive(Clone, Debug)]
pub struct SimConfig {
    pub eviction: EvictionConfig,
    pub image_gc: ImageGcSettings,
    pub system_reserved: BTreeMap<String, Quantity>,
    pub kube_reserved: BTreeMap<String, Quantity>,
    pub enforce_node_allocatable: Vec<String>,
    pub max_pods: i64,
}

/// Loads the configuration; warnings (unknown keys) go to `warnings` for stderr.
pub fn load_config(source: &ConfigSource, warnings: &mut Vec<String>) -> Result<SimConfig, SimulateError> {
    let (config, config_warnings) =
        load_kubelet_config(&source.text, &source.origin).map_err(|e| SimulateError::Config(e.to_string()))?;
    warnings.extend(config_warnings.iter().map(ToString::to_string));
    Ok(SimConfig {
        eviction: config.eviction,
        image_gc: config.image_gc,
        system_reserved: config.system_reserved,
        kube_reserved: config.kube_reserved,
        enforce_node_allocatable: config.enforce_node_allocatable,
        max_pods: config.max_pods,
    })
}
