//! The kernel's stamps of a race: the `crossing-probe` helper
//! (tests/src/bin/crossing-probe.rs) loads the agent's crossing detector and SIGKILL
//! stamp, armed on the race's level and pointed at the killer (the agent, or the earlyoom
//! peer), and prints its records in the agent's log format. The 1 ms sampler stays as
//! the cross-check, and is the only clock of the node-level race's crossing (whose
//! signal is not one cgroup's working set); there the probe stamps the SIGKILL alone.
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};

/// A working set no race reaches: the probe then stamps SIGKILLs only.
pub(crate) const NEVER: u64 = 1 << 50;

/// A running probe; dropping it stops it (its programs detach with it).
pub(crate) struct Probe {
    child: Child,
    log: PathBuf,
}

impl Probe {
    /// Starts the probe on `cgroup` at `working_set` bytes, stamping `agent`'s SIGKILLs,
    /// and waits until it has armed its level.
    pub(crate) fn start(
        bin: &Path,
        cgroup: &Path,
        working_set: u64,
        agent: u32,
        log: PathBuf,
    ) -> Result<Probe> {
        let out =
            std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let program = bin.join("crossing-probe");
        let child = Command::new(&program)
            .arg(cgroup)
            .arg(working_set.to_string())
            .arg(agent.to_string())
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .with_context(|| format!("starting {}", program.display()))?;
        let mut probe = Probe { child, log };
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            if probe.output().contains("probe: armed") {
                return Ok(probe);
            }
            if let Ok(Some(status)) = probe.child.try_wait() {
                bail!(
                    "the crossing probe exited ({status}): {}",
                    probe.output().trim()
                );
            }
            if std::time::Instant::now() > deadline {
                bail!(
                    "the crossing probe did not arm within 10 s: {}",
                    probe.output().trim()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// What it printed so far.
    pub(crate) fn output(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
