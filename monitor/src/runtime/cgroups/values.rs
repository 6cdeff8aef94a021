//! The values a tree writes (runc's conversions of a resource config, the kubelet's
//! controllers enabled on v2), and the warnings for those this kernel cannot take.
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use super::files::write_file;
use super::{CgroupError, CgroupTree, Controller, Hierarchy};
use crate::observe::CgroupVersion;
use crate::policy::qos::ResourceConfig;

/// Distinct warnings kept; later ones only bump the last entry's count.
const MAX_WARNINGS: usize = 64;

/// A value that could not be set because this kernel lacks the controller or file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CgroupWarning {
    /// The file (first occurrence) or, with no hierarchy for the controller, the cgroup.
    pub path: PathBuf,
    pub(crate) value: String,
    pub reason: String,
    /// How many writes hit the same file name for the same reason.
    pub(crate) count: u64,
}

impl fmt::Display for CgroupWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {:?} not set: {} ({} time(s))",
            self.path.display(),
            self.value,
            self.reason,
            self.count
        )
    }
}

/// One value to write: the controller, the file and its content.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct ValueWrite {
    pub(super) controller: Controller,
    pub(super) file: &'static str,
    pub(super) value: String,
}

impl CgroupTree {
    /// Creates `relative` (and its ancestors) in every hierarchy. On v2, the wanted
    /// controllers are enabled in each ancestor's `cgroup.subtree_control` first, so the
    /// new cgroup has their files (runc does the same when it creates a path).
    pub(super) fn ensure_dirs(&self, relative: &str) -> Result<(), CgroupError> {
        for h in &self.hierarchies {
            let mut dir = h.mount.clone();
            for component in relative.split('/').filter(|c| !c.is_empty()) {
                if h.version == CgroupVersion::V2 && !h.controllers.is_empty() {
                    self.enable_controllers(h, &dir);
                }
                dir.push(component);
                match std::fs::create_dir(&dir) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                    Err(source) => return Err(CgroupError::Create { path: dir, source }),
                }
            }
        }
        Ok(())
    }

    fn enable_controllers(&self, h: &Hierarchy, dir: &Path) {
        let control = dir.join("cgroup.subtree_control");
        let enabled = std::fs::read_to_string(&control).unwrap_or_default();
        let available = std::fs::read_to_string(dir.join("cgroup.controllers")).unwrap_or_default();
        for controller in &h.controllers {
            let name = controller.name();
            if enabled.split_whitespace().any(|w| w == name) {
                continue;
            }
            let value = format!("+{name}");
            if !available.split_whitespace().any(|w| w == name) {
                self.warn(&control, &value, "controller not available here".into());
                continue;
            }
            // Fails with EBUSY when the cgroup has processes of its own (v2's
            // no-internal-processes rule): the children then lack the controller.
            if let Err(e) = write_file(&control, &value) {
                self.warn(&control, &value, e.to_string());
            }
        }
    }

    /// Writes a config's values. EINVAL is retried once after the rest: v1 checks a CFS
    /// period against the quota already in place, so the order between them matters
    /// (runc retries the same way).
    pub(super) fn apply(&self, relative: &str, config: &ResourceConfig) -> Result<(), CgroupError> {
        let mut retry = Vec::new();
        for write in resource_writes(self.version, config) {
            match self.write_value(relative, &write) {
                Err(CgroupError::Write { source, .. })
                    if source.raw_os_error() == Some(libc::EINVAL) =>
                {
                    retry.push(write)
                }
                other => other?,
            }
        }
        for write in retry {
            self.write_value(relative, &write)?;
        }
        Ok(())
    }

    fn write_value(&self, relative: &str, write: &ValueWrite) -> Result<(), CgroupError> {
        let Some(h) = self.hierarchies.iter().find(|h| h.has(write.controller)) else {
            let reason = format!("no {} hierarchy is mounted", write.controller.name());
            self.warn(
                &PathBuf::from(relative).join(write.file),
                &write.value,
                reason,
            );
            return Ok(());
        };
        let path = h.mount.join(relative).join(write.file);
        match write_file(&path, &write.value) {
            Err(CgroupError::Write { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
                self.warn(&path, &write.value, "the kernel has no such file".into());
                Ok(())
            }
            other => other,
        }
    }

    fn warn(&self, path: &Path, value: &str, reason: String) {
        let mut warnings = self
            .warnings
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let same = |w: &CgroupWarning| w.path.file_name() == path.file_name() && w.reason == reason;
        if let Some(existing) = warnings.iter_mut().find(|w| same(w)) {
            existing.count = existing.count.saturating_add(1);
            return;
        }
        tracing::warn!(path = %path.display(), value, %reason, "cgroup value not set");
        let warning = CgroupWarning {
            path: path.to_path_buf(),
            value: value.to_string(),
            reason,
            count: 1,
        };
        if warnings.len() < MAX_WARNINGS {
            warnings.push(warning);
        } else if let Some(last) = warnings.last_mut() {
            last.count = last.count.saturating_add(1);
        }
    }
}

/// The files and values for `config` (runc's conversions, which the kubelet relies on).
/// `None` and 0 leave a file alone (runc treats 0 as unset); a negative memory, quota or
/// pids value means unlimited. The Memory QoS files (v2 only; v1 has none) are written as
/// given, 0 included, the way runc writes the CRI `unified` map the kubelet sends them in:
/// protection first, then `memory.high`.
pub(super) fn resource_writes(version: CgroupVersion, config: &ResourceConfig) -> Vec<ValueWrite> {
    let mut writes = Vec::new();
    let mut push = |controller, file, value: String| {
        writes.push(ValueWrite {
            controller,
            file,
            value,
        })
    };
    let limit = |v: i64, unlimited: &str| {
        if v < 0 {
            unlimited.to_string()
        } else {
            v.to_string()
        }
    };
    let memory = config.memory_limit.filter(|v| *v != 0);
    let pids = config.pids_limit.filter(|v| *v != 0);
    let quota = config.cpu_quota.filter(|v| *v != 0);
    let period = config.cpu_period.filter(|v| *v != 0);
    match version {
        CgroupVersion::V1 => {
            if let Some(v) = memory {
                push(Controller::Memory, "memory.limit_in_bytes", limit(v, "-1"));
            }
            if let Some(shares) = config.cpu_shares.filter(|s| *s != 0) {
                push(Controller::Cpu, "cpu.shares", shares.to_string());
            }
            if let Some(period) = period {
                push(Controller::Cpu, "cpu.cfs_period_us", period.to_string());
            }
            if let Some(quota) = quota {
                push(Controller::Cpu, "cpu.cfs_quota_us", limit(quota, "-1"));
            }
            if let Some(v) = pids {
                push(Controller::Pids, "pids.max", limit(v, "max"));
            }
        }
        CgroupVersion::V2 => {
            if let Some(v) = memory {
                push(Controller::Memory, "memory.max", limit(v, "max"));
            }
            if let Some(v) = config.memory_min {
                push(Controller::Memory, "memory.min", v.max(0).to_string());
            }
            if let Some(v) = config.memory_low {
                push(Controller::Memory, "memory.low", v.max(0).to_string());
            }
            if let Some(v) = config.memory_high {
                push(Controller::Memory, "memory.high", limit(v, "max"));
            }
            if config.memory_oom_group {
                push(Controller::Memory, "memory.oom.group", "1".to_string());
            }
            if let Some(weight) = config.cpu_weight().filter(|w| *w != 0) {
                push(Controller::Cpu, "cpu.weight", weight.to_string());
            }
            // cpu.max is "$QUOTA $PERIOD" with "max" for no quota; the period may be left out.
            if quota.is_some() || period.is_some() {
                let mut value = match quota {
                    Some(q) if q > 0 => q.to_string(),
                    _ => "max".to_string(),
                };
                if let Some(period) = period {
                    value.push_str(&format!(" {period}"));
                }
                push(Controller::Cpu, "cpu.max", value);
            }
            if let Some(v) = pids {
                push(Controller::Pids, "pids.max", limit(v, "max"));
            }
        }
    }
    writes
}
