//! Inside the VM (`xtask bench --guest`, started by the initramfs's /tests/bench): the
//! agent's race on cgroup v2 in each mode, then the earlyoom peer; every trial is printed
//! as one `@@bench@@ <json>` console line for the host to collect.
use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::harness::{HEADROOM_MIB, Level, Mode};
use crate::race::{self, Rate};
use crate::trial::Trial;
use crate::{bpf, peer};

pub(crate) const PREFIX: &str = "@@bench@@ ";

fn emit(mut trial: Trial) {
    if trial.trial > 1 {
        trial.curve.clear();
    }
    match serde_json::to_string(&trial) {
        Ok(json) => println!("{PREFIX}{json}"),
        Err(err) => println!(
            "bench: {} trial {}: not serialisable: {err}",
            trial.mode, trial.trial
        ),
    }
}

/// The dynamic loader copied into /bin next to earlyoom.
fn loader(bin: &Path) -> Option<PathBuf> {
    std::fs::read_dir(bin)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("ld-linux"))
        })
}

/// The races in the guest: every mode on the bounded pods cgroup (rate label `vm-v2`),
/// with `all` also with memory relief off; then the node-level race (`vm-v2-node`) with
/// the agent's modes of `VM_NODE_MODES` and with the earlyoom peer, side by side on the
/// same workload; all at the first of `headrooms`. At each further headroom the same two
/// races with the agent's `VM_TIGHT_MODES` alone, earlyoom beside them on the node
/// (labels `vm-v2-50Mi`, `vm-v2-node-50Mi`). Then the memory relief races (half as many
/// trials each, relief on and off alternating). `relief_only`: the pods race of `all`
/// with relief on and off, and the relief races.
pub(crate) fn run(
    modes: &[Mode],
    rate: &Rate,
    trials: u32,
    headrooms: &[u64],
    detector_cost: bool,
    relief_only: bool,
) -> Result<()> {
    let bin = PathBuf::from("/bin");
    // Statistics are for the host's table; the guest goes on without them.
    let _stats = bpf::StatsSetting::enable().ok();
    let (first, further) = headrooms.split_first().unwrap_or((&HEADROOM_MIB, &[]));
    let relief_races = || {
        if let Err(err) = crate::relief::run(&bin, (trials / 2).max(1), 3) {
            println!("bench: guest: the memory relief races FAILED: {err:#}");
        }
    };
    let relief_off = modes
        .iter()
        .any(|m| m.name == crate::relief::RELIEF_ON_MODE)
        .then_some(crate::modes::VM_RELIEF_OFF);
    let pods_modes: Vec<&Mode> = modes
        .iter()
        .filter(|m| !relief_only || m.name == crate::relief::RELIEF_ON_MODE)
        .chain(relief_off.as_ref())
        .collect();
    if detector_cost && !relief_only {
        // The detector's cost first, on a quiet guest; its lines go to the console as
        // they are, for the host to read back (`detector_cost`).
        match crate::detector_cost::output(&bin, crate::detector_cost::GUEST) {
            Ok(text) => print!("{text}"),
            Err(err) => println!("bench: guest: the detector's cost FAILED: {err:#}"),
        }
    }
    let races = |level: Level, headroom_mib: u64, modes: &[&Mode], base: &str| {
        let setup = race::Setup {
            bin: &bin,
            keep: false,
            level,
            headroom_mib,
        };
        let label = crate::modes::vm_label(base, headroom_mib);
        for mode in modes {
            for n in 1..=trials {
                match race::trial(&setup, mode, rate, n) {
                    Ok(mut t) => {
                        t.rate = label.clone();
                        emit(t)
                    }
                    Err(err) => println!(
                        "bench: guest {label} {} trial {n}: FAILED: {err:#}",
                        mode.name
                    ),
                }
            }
        }
    };
    races(Level::Pods, *first, &pods_modes, crate::modes::VM_RATE);
    if relief_only {
        relief_races();
        return Ok(());
    }
    let node_modes: Vec<&Mode> = modes
        .iter()
        .filter(|m| crate::modes::VM_NODE_MODES.contains(&m.name))
        .collect();
    let earlyoom = loader(&bin).map(|loader| {
        vec![
            loader.display().to_string(),
            "--library-path".into(),
            "/bin".into(),
            "/bin/earlyoom".into(),
        ]
    });
    let peer_races = |headroom_mib: u64| {
        let label = crate::modes::vm_label(crate::modes::VM_NODE_RATE, headroom_mib);
        let Some(command) = &earlyoom else {
            println!("bench: guest: no dynamic loader in /bin: earlyoom not run");
            return;
        };
        for n in 1..=trials {
            match peer::trial(&bin, command, headroom_mib, n) {
                Ok(mut t) => {
                    t.rate = label.clone();
                    emit(t)
                }
                Err(err) => println!("bench: guest {label} earlyoom trial {n}: FAILED: {err:#}"),
            }
        }
    };
    races(Level::Node, *first, &node_modes, crate::modes::VM_NODE_RATE);
    peer_races(*first);
    let tight_pods: Vec<&Mode> = modes.iter().filter(|m| tight(m)).collect();
    let tight_node: Vec<&Mode> = node_modes.iter().copied().filter(|m| tight(m)).collect();
    for headroom_mib in further {
        races(
            Level::Pods,
            *headroom_mib,
            &tight_pods,
            crate::modes::VM_RATE,
        );
        races(
            Level::Node,
            *headroom_mib,
            &tight_node,
            crate::modes::VM_NODE_RATE,
        );
        peer_races(*headroom_mib);
    }
    relief_races();
    Ok(())
}

/// Whether the agent races in `mode` at the VM's further headrooms.
fn tight(mode: &Mode) -> bool {
    crate::modes::VM_TIGHT_MODES.contains(&mode.name)
}

/// The detector's cost rows in the guest's console output.
pub(crate) fn detector_cost(console: &[String]) -> Vec<crate::detector_cost::DetectorCost> {
    crate::detector_cost::parse(&console.join("\n"))
}

/// The trials in the guest's console output.
pub(crate) fn collect(console: &[String]) -> Vec<Trial> {
    console
        .iter()
        .filter_map(|l| l.split_once(PREFIX).map(|(_, json)| json))
        .filter_map(|json| serde_json::from_str(json).ok())
        .collect()
}
