//! The decision record: every action the agent decided (a hot kill, an eviction, a
//! node-level reclaim, a preemption, an admission rejection; in shadow mode every
//! would-be action) with the observation it was decided on, kept in `stateDir` so that
//! "why was my pod evicted" has an answer after the pod, and the agent, are gone.
//!
//! The file is JSON lines (`decisions.jsonl`, one [`Decision`] per line), appended as
//! decisions are made. Once it holds [`KEPT`] decisions it becomes `decisions.1.jsonl`
//! (the one before is dropped), so the last [`KEPT`] decisions are always on disk in at
//! most 2 × [`KEPT`] lines. A torn last line (a crash in the middle of a write) is cut
//! off at the next start; a file that does not read otherwise is set aside as
//! `<name>.corrupt` and reported, and the agent starts a new one: never fatal.
use std::collections::VecDeque;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Decisions kept in memory (for the API) and at least on disk.
pub const KEPT: usize = 1000;

/// The file a record is appended to, and the one it rotates to.
pub const FILE: &str = "decisions.jsonl";
pub const ROTATED: &str = "decisions.1.jsonl";

/// Pods of the ranking kept with a decision.
pub const RANKED_KEPT: usize = 5;

/// One decision.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Decision {
    /// When it was decided (RFC 3339, UTC, whole seconds).
    pub at: String,
    /// What was decided: `evict`, `hotKill`, `reclaim`, `preempt`, `rejectAdmission`.
    pub action: String,
    /// Decided and not carried out (shadow mode).
    #[serde(default)]
    pub shadow: bool,
    /// The pod acted on (`namespace/name`) and its uid, if the action has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    /// The eviction signal that drove it, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<String>,
    /// The kubelet's words for it (the eviction message, the rejection's reason).
    pub message: String,
    /// The signals as observed for the decision (the pass's observation; for a hot kill,
    /// the crossed signal as read at the crossing).
    #[serde(default)]
    pub signals: Vec<SignalSeen>,
    /// The thresholds met (`memory.available<500Mi`).
    #[serde(default)]
    pub thresholds_met: Vec<String>,
    /// The first pods of the ranking the decision picked from, most evictable first.
    #[serde(default)]
    pub ranking: Vec<Ranked>,
    /// How long the decision took.
    #[serde(default)]
    pub timings: Timings,
}

/// A signal as observed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SignalSeen {
    pub signal: String,
    pub available: i64,
    pub capacity: i64,
}

/// A pod of the ranking, with what ranked it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Ranked {
    pub pod: String,
    pub qos: String,
    pub priority: i32,
    /// Its usage of the signal's resource (memory working set, local storage, processes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<u64>,
    /// Its request of that resource (memory, ephemeral storage), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<i64>,
}

/// Where the time went.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Timings {
    /// From the observation's read to the decision (a synchronize's decisions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_to_decision_us: Option<u64>,
    /// From the notifier telling the crossing to the kill written (or, in shadow mode,
    /// decided): a hot kill.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crossing_to_kill_us: Option<u64>,
    /// The notifier that told the crossing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

/// The record file of a state directory, open for appending.
#[derive(Debug)]
pub struct DecisionFile {
    dir: PathBuf,
    /// Decisions in the current file.
    lines: usize,
}

/// What opening the record found.
#[derive(Debug, Default)]
pub struct Loaded {
    /// The last [`KEPT`] decisions, oldest first.
    pub decisions: VecDeque<Decision>,
    /// Files set aside (unreadable), and torn lines cut off: said once at start.
    pub notes: Vec<String>,
}

impl DecisionFile {
    /// Opens the record in `dir` (created if missing), reading back what it holds.
    pub fn open(dir: &Path) -> std::io::Result<(DecisionFile, Loaded)> {
        std::fs::create_dir_all(dir)?;
        let mut loaded = Loaded::default();
        let mut all = Vec::new();
        let mut lines = 0;
        for name in [ROTATED, FILE] {
            let path = dir.join(name);
            let read = match read_file(&path) {
                Ok(Read::Missing) => Vec::new(),
                Ok(Read::Whole(decisions)) => decisions,
                Ok(Read::TornTail { decisions, keep }) => {
                    truncate(&path, keep)?;
                    loaded.notes.push(format!(
                        "{}: a torn last line (a write cut short) was cut off",
                        path.display()
                    ));
                    decisions
                }
                Ok(Read::Corrupt(why)) | Err(why) => {
                    let aside = set_aside(&path)?;
                    loaded.notes.push(format!(
                        "{}: {why}; set aside as {} and a new record started",
                        path.display(),
                        aside.display()
                    ));
                    Vec::new()
                }
            };
            if name == FILE {
                lines = read.len();
            }
            all.extend(read);
        }
        let skip = all.len().saturating_sub(KEPT);
        loaded.decisions = all.into_iter().skip(skip).collect();
        Ok((
            DecisionFile {
                dir: dir.to_path_buf(),
                lines,
            },
            loaded,
        ))
    }

    /// Appends one decision (one write of one line), rotating first when the file holds
    /// [`KEPT`].
    pub fn append(&mut self, decision: &Decision) -> std::io::Result<()> {
        if self.lines >= KEPT {
            std::fs::rename(self.dir.join(FILE), self.dir.join(ROTATED))?;
            self.lines = 0;
        }
        let mut line = serde_json::to_vec(decision).map_err(std::io::Error::other)?;
        line.push(b'\n');
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(FILE))?;
        file.write_all(&line)?;
        self.lines += 1;
        Ok(())
    }
}

enum Read {
    Missing,
    Whole(Vec<Decision>),
    /// Every line reads but the last, which has no newline: a write cut short. `keep`:
    /// the bytes before it.
    TornTail {
        decisions: Vec<Decision>,
        keep: u64,
    },
    Corrupt(String),
}

/// Largest record file read back (2 × [`KEPT`] decisions take well under this).
const MAX_FILE_BYTES: u64 = 64 << 20;

fn read_file(path: &Path) -> Result<Read, String> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Read::Missing),
        Err(e) => return Err(e.to_string()),
    };
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Ok(Read::Corrupt(format!(
            "larger than {} MiB",
            MAX_FILE_BYTES >> 20
        )));
    }
    let mut decisions = Vec::new();
    let mut at = 0usize;
    let mut number = 0;
    while at < bytes.len() {
        number += 1;
        let (line, next, complete) = match bytes[at..].iter().position(|b| *b == b'\n') {
            Some(end) => (&bytes[at..at + end], at + end + 1, true),
            None => (&bytes[at..], bytes.len(), false),
        };
        if !complete {
            return Ok(Read::TornTail {
                decisions,
                keep: at as u64,
            });
        }
        match serde_json::from_slice::<Decision>(line) {
            Ok(decision) => decisions.push(decision),
            Err(e) => return Ok(Read::Corrupt(format!("line {number}: {e}"))),
        }
        at = next;
    }
    Ok(Read::Whole(decisions))
}

fn truncate(path: &Path, keep: u64) -> std::io::Result<()> {
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)?
        .set_len(keep)
}

/// Renames `path` to `<path>.corrupt` (replacing an older one).
fn set_aside(path: &Path) -> std::io::Result<PathBuf> {
    let mut aside = path.as_os_str().to_owned();
    aside.push(".corrupt");
    let aside = PathBuf::from(aside);
    std::fs::rename(path, &aside)?;
    Ok(aside)
}

/// The decisions about `pod` (a key, or a bare name matching any namespace) at or after
/// `since` (RFC 3339), oldest first.
pub fn select<'a>(
    decisions: impl IntoIterator<Item = &'a Decision>,
    pod: Option<&str>,
    since: Option<&str>,
) -> Vec<&'a Decision> {
    decisions
        .into_iter()
        .filter(|d| match pod {
            None => true,
            Some(pod) if pod.contains('/') => d.pod.as_deref() == Some(pod),
            Some(name) => d
                .pod
                .as_deref()
                .and_then(|key| key.split_once('/'))
                .is_some_and(|(_, n)| n == name),
        })
        .filter(|d| since.is_none_or(|since| d.at.as_str() >= since))
        .collect()
}

#[cfg(test)]
mod tests;
