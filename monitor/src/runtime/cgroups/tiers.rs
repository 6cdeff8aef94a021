//! The QoS tiers under the pods root: their cgroups, the values the kubelet's QoS
//! container manager writes into them, and the Memory QoS protections.
use crate::observe::CgroupVersion;
use crate::policy::memory_qos::TierProtection;
use crate::policy::qos::{MIN_SHARES, QosTierConfigs, ResourceConfig, milli_cpu_to_shares};
use crate::policy::types::QosClass;

use super::{CgroupError, CgroupTree};

impl CgroupTree {
    /// Creates kubepods and the two tiers; sets the pods-root memory limit (node
    /// allocatable, `None` = unlimited) and cpu shares of the root per the kubelet.
    ///
    /// kubelet: node container manager createNodeAllocatableCgroups / getCgroupConfig
    /// (shares from the node's CPU, memory from allocatable) and qos container manager
    /// Start (BestEffort gets the minimum shares; Burstable waits for UpdateCgroups).
    pub fn ensure_qos_hierarchy(&self, pods_memory_limit: Option<i64>) -> Result<(), CgroupError> {
        let pods = self.pods_root_relative();
        self.ensure_dirs(&pods)?;
        if let Some(limit) = pods_memory_limit.filter(|l| *l <= 0) {
            return Err(CgroupError::InvalidLimit {
                path: self.memory_root.join(&pods),
                value: limit,
            });
        }
        let root_config = ResourceConfig {
            cpu_shares: Some(milli_cpu_to_shares(self.node_cpu_milli)),
            // Written even when unlimited: a bound set earlier must go when the node
            // stops enforcing allocatable.
            memory_limit: Some(pods_memory_limit.unwrap_or(-1)),
            ..ResourceConfig::default()
        };
        self.apply(&pods, &root_config)?;
        self.ensure_dirs(&self.tier_relative(QosClass::Burstable))?;
        let best_effort = self.tier_relative(QosClass::BestEffort);
        self.ensure_dirs(&best_effort)?;
        self.apply(
            &best_effort,
            &ResourceConfig {
                cpu_shares: Some(MIN_SHARES),
                ..ResourceConfig::default()
            },
        )
    }

    /// Writes the burstable/besteffort tier values (cpu shares, qos-reserved memory limits).
    ///
    /// A tier memory limit at or below zero is refused ([`CgroupError::InvalidLimit`]).
    /// When the kernel refuses a limit below the tier's usage (v1: EBUSY), the limit is
    /// set to the usage instead, to stop further growth (kubelet: qos container manager
    /// retrySetMemoryReserve). Both tiers are attempted; the first error is returned.
    pub fn update_qos_tiers(&self, tiers: &QosTierConfigs) -> Result<(), CgroupError> {
        let mut first_error = None;
        for (qos, config) in [
            (QosClass::Burstable, &tiers.burstable),
            (QosClass::BestEffort, &tiers.best_effort),
        ] {
            let relative = self.tier_relative(qos);
            let result = self.ensure_dirs(&relative).and_then(|()| {
                let others = ResourceConfig {
                    memory_limit: None,
                    ..*config
                };
                self.apply(&relative, &others)?;
                match config.memory_limit {
                    Some(limit) => self.set_tier_memory_limit(&relative, limit),
                    None => Ok(()),
                }
            });
            if let Err(e) = result {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Writes the Memory QoS protections of the QoS level (kubelet: qos container manager
    /// setMemoryQoS): `memory.min` of the pods root (the Guaranteed tier) and `memory.low`
    /// of the Burstable tier. cgroup v2 only; on v1 nothing is written.
    pub(crate) fn update_memory_qos_tiers(
        &self,
        protection: &TierProtection,
    ) -> Result<(), CgroupError> {
        if self.version != CgroupVersion::V2 {
            return Ok(());
        }
        let pods = self.pods_root_relative();
        self.ensure_dirs(&pods)?;
        self.apply(
            &pods,
            &ResourceConfig {
                memory_min: Some(protection.pods_root_min),
                ..ResourceConfig::default()
            },
        )?;
        let burstable = self.tier_relative(QosClass::Burstable);
        self.ensure_dirs(&burstable)?;
        self.apply(
            &burstable,
            &ResourceConfig {
                memory_low: Some(protection.burstable_low),
                ..ResourceConfig::default()
            },
        )
    }

    fn set_tier_memory_limit(&self, relative: &str, limit: i64) -> Result<(), CgroupError> {
        if limit <= 0 {
            return Err(CgroupError::InvalidLimit {
                path: self.memory_root.join(relative),
                value: limit,
            });
        }
        let config = ResourceConfig {
            memory_limit: Some(limit),
            ..ResourceConfig::default()
        };
        match self.apply(relative, &config) {
            Err(CgroupError::Write { source, .. })
                if source.raw_os_error() == Some(libc::EBUSY) =>
            {
                let usage = self
                    .reader()
                    .memory_stats(relative)
                    .map(|m| i64::try_from(m.usage_bytes).unwrap_or(i64::MAX))
                    .unwrap_or(limit);
                let config = ResourceConfig {
                    memory_limit: Some(usage.max(limit)),
                    ..ResourceConfig::default()
                };
                self.apply(relative, &config)
            }
            other => other,
        }
    }
}
