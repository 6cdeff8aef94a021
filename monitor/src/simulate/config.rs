//! The KubeletConfiguration, loaded with the agent's own loader (so a config the agent
//! rejects, the simulation rejects with the same message), `monitor:` block included: its
//! `hardEvictionGracePeriodSeconds` changes the policy's decisions.
use super::error::SimulateError;
use super::scenario::ConfigSource;
use crate::config::kubelet::KubeletConfig;
use crate::config::parse_agent_config;

/// What a simulation runs with.
pub struct SimulationConfig {
    pub kubelet: KubeletConfig,
    /// Memory relief (`monitor.memoryRelief`), modelled as on a cgroup v2 node; `None`
    /// when turned off.
    pub relief: Option<crate::policy::relief::ReliefSettings>,
}

/// Loads the configuration; warnings (unknown keys) go to `warnings` for stderr.
pub fn load_config(
    source: &ConfigSource,
    warnings: &mut Vec<String>,
) -> Result<SimulationConfig, SimulateError> {
    let loaded = parse_agent_config(&source.text, &source.origin, &[])
        .map_err(|e| SimulateError::Config(e.to_string()))?;
    warnings.extend(loaded.warnings.iter().map(ToString::to_string));
    let relief = &loaded.agent.settings.memory_relief;
    Ok(SimulationConfig {
        relief: relief.enabled.then(|| relief.policy()),
        kubelet: loaded.kubelet,
    })
}
