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

/// One set of the guest's races: `trials` trials of the agent in `mode` (or of earlyoom,
/// [`peer::MODE`]) at `level`, the hard threshold `headroom_mib` below the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct VmRace {
    pub(crate) level: Level,
    pub(crate) headroom_mib: u64,
    pub(crate) mode: &'static str,
}

impl VmRace {
    /// The rate label of its trials in the table.
    pub(crate) fn label(&self) -> String {
        let base = match self.level {
            Level::Pods => crate::modes::VM_RATE,
            Level::Node => crate::modes::VM_NODE_RATE,
        };
        crate::modes::vm_label(base, self.headroom_mib)
    }
}

/// The guest's races for the modes `raced`, in the order it runs them (the host's table
/// plans the same list): every mode on the bounded pods cgroup (rate label `vm-v2`), with
/// `all` also with memory relief off; then the node-level race (`vm-v2-node`) with the
/// agent's modes of `VM_NODE_MODES` and with the earlyoom peer, side by side on the same
/// workload; all at the first of `headrooms`. At each further headroom the same two races
/// with the agent's `VM_TIGHT_MODES` alone, earlyoom beside them on the node (labels
/// `vm-v2-50Mi`, `vm-v2-node-50Mi`). `relief_only`: the pods race of `all` with relief on
/// and off.
pub(crate) fn races(raced: &[Mode], headrooms: &[u64], relief_only: bool) -> Vec<VmRace> {
    use crate::modes::{VM_NODE_MODES, VM_TIGHT_MODES};
    fn at(
        level: Level,
        headroom_mib: u64,
        modes: impl Iterator<Item = &'static str>,
    ) -> impl Iterator<Item = VmRace> {
        modes.map(move |mode| VmRace {
            level,
            headroom_mib,
            mode,
        })
    }
    let (first, further) = headrooms.split_first().unwrap_or((&HEADROOM_MIB, &[]));
    let names: Vec<&'static str> = raced.iter().map(|m| m.name).collect();
    let relief_off = names
        .contains(&crate::relief::RELIEF_ON_MODE)
        .then_some(crate::relief::RELIEF_OFF_MODE);
    let all = || names.iter().copied();
    let pods = all()
        .filter(|m| !relief_only || *m == crate::relief::RELIEF_ON_MODE)
        .chain(relief_off);
    let mut out: Vec<VmRace> = at(Level::Pods, *first, pods).collect();
    if relief_only {
        return out;
    }
    let on_node = |m: &&'static str| VM_NODE_MODES.contains(m);
    let tight = |m: &&'static str| VM_TIGHT_MODES.contains(m);
    out.extend(at(
        Level::Node,
        *first,
        all().filter(on_node).chain([peer::MODE]),
    ));
    for &headroom in further {
        out.extend(at(Level::Pods, headroom, all().filter(tight)));
        let node = all().filter(tight).filter(on_node).chain([peer::MODE]);
        out.extend(at(Level::Node, headroom, node));
    }
    out
}

/// The benchmark VM's boots, each with one part of the guest's work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GuestPart {
    /// The races and the earlyoom peer, then the memory relief races.
    Races,
    /// Only the memory relief races (see [`crate::relief`]).
    Relief,
    /// Only the crossing detector's cost, with the guest's clock counting instructions
    /// (qemu's `-icount` under emulation): the hog's CPU time is then the instructions it
    /// executed, which the host's other work cannot stretch (see [`crate::detector_cost`]).
    DetectorCost,
}

/// Runs the guest's part: the detector's cost alone, or the races of [`races`] then the
/// memory relief races (half as many trials each, relief on and off alternating), or
/// those alone.
pub(crate) fn run(
    modes: &[Mode],
    rate: &Rate,
    trials: u32,
    headrooms: &[u64],
    part: GuestPart,
) -> Result<()> {
    let bin = PathBuf::from("/bin");
    if part == GuestPart::DetectorCost {
        // Its lines go to the console as they are, for the host to read back
        // (`detector_cost`).
        match crate::detector_cost::output(&bin, crate::detector_cost::GUEST) {
            Ok(text) => print!("{text}"),
            Err(err) => println!("bench: guest: the detector's cost FAILED: {err:#}"),
        }
        return Ok(());
    }
    let relief_only = part == GuestPart::Relief;
    // Statistics are for the host's table; the guest goes on without them.
    let _stats = bpf::StatsSetting::enable().ok();
    let earlyoom = loader(&bin).map(|loader| {
        vec![
            loader.display().to_string(),
            "--library-path".into(),
            "/bin".into(),
            "/bin/earlyoom".into(),
        ]
    });
    let agent_modes: Vec<&Mode> = modes.iter().chain([&crate::modes::VM_RELIEF_OFF]).collect();
    for race in races(modes, headrooms, relief_only) {
        let label = race.label();
        let command = match (race.mode, &earlyoom) {
            (peer::MODE, None) => {
                println!("bench: guest: no dynamic loader in /bin: earlyoom not run");
                continue;
            }
            (peer::MODE, Some(command)) => Some(command),
            _ => None,
        };
        let mode = agent_modes.iter().find(|m| m.name == race.mode);
        let setup = race::Setup {
            bin: &bin,
            keep: false,
            level: race.level,
            headroom_mib: race.headroom_mib,
        };
        for n in 1..=trials {
            let trial = match (command, mode) {
                (Some(command), _) => peer::trial(&bin, command, race.headroom_mib, n),
                (None, Some(mode)) => race::trial(&setup, mode, rate, n),
                (None, None) => Err(anyhow::anyhow!("no mode named {}", race.mode)),
            };
            match trial {
                Ok(mut t) => {
                    t.rate = label.clone();
                    emit(t)
                }
                Err(err) => println!(
                    "bench: guest {label} {} trial {n}: FAILED: {err:#}",
                    race.mode
                ),
            }
        }
    }
    if let Err(err) = crate::relief::run(&bin, (trials / 2).max(1), 3) {
        println!("bench: guest: the memory relief races FAILED: {err:#}");
    }
    Ok(())
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
