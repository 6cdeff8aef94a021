//! The runtime's state on disk: one JSON file per pod under `<state dir>/pods/`, written
//! atomically (temporary file, then rename), so an agent restart finds every pod it ran,
//! which processes were its containers, and which pods it already evicted.
//!
//! No fsync: the records must survive a restart of the agent, which the page cache
//! guarantees; after a power loss every pod is gone anyway and starts again from its
//! manifest. An fsync costs milliseconds on the eviction path, which is the one path that
//! must be fast.
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::policy::condition::PodCondition;
use crate::policy::pod::Pod;

/// What is kept of one pod.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodRecord {
    pub uid: String,
    pub manifest: PathBuf,
    pub pod: std::sync::Arc<Pod>,
    pub phase: Phase,
    pub reason: Option<String>,
    pub message: Option<String>,
    pub containers: Vec<ContainerRecord>,
    /// The pod's CRI sandbox, when a container runtime runs it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_id: Option<String>,
    /// The pod's status conditions (`DisruptionTarget` once evicted or preempted). Left
    /// out when empty, so records written before conditions existed load unchanged and a
    /// pod never evicted writes the same record as before.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<PodCondition>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerRecord {
    pub name: String,
    /// The running process, if any.
    pub pid: Option<u32>,
    pub restart_count: u32,
    /// Exit code (or 128 + signal) of the last run.
    pub last_exit: Option<i32>,
    /// The last run ended but its exit code could not be read (an adopted process on a
    /// kernel that kept no exit status): `last_exit` is then `None`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub exit_code_unknown: bool,
    /// The container will not run again (restart policy, eviction, or a finished pod).
    pub done: bool,
    /// The CRI container of the current (or last) run, when a container runtime runs it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_id: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Phase {
    Pending,
    Running,
    Succeeded,
    Failed,
}

impl Phase {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "Pending",
            Phase::Running => "Running",
            Phase::Succeeded => "Succeeded",
            Phase::Failed => "Failed",
        }
    }

    pub fn is_terminal(self) -> bool {
        matches!(self, Phase::Succeeded | Phase::Failed)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {reason}")]
    Corrupt { path: PathBuf, reason: String },
    /// A record that could not be read, moved aside to `to` so that no later run trusts
    /// it; the pod it was about is named by the file's name.
    #[error("{path}: {reason}; set aside as {to}")]
    Quarantined {
        path: PathBuf,
        to: PathBuf,
        reason: String,
        /// The pod uid the file's name gives.
        uid: String,
    },
}

/// The pod records under a state directory.
#[derive(Clone, Debug)]
pub struct StateStore {
    dir: PathBuf,
    /// Saves one at a time: each takes the newest record when its turn comes, so an
    /// older record never lands after a newer one.
    order: std::sync::Arc<std::sync::Mutex<()>>,
}

/// Temp file names unique within the process (with the pid: across processes too).
static NEXT_TMP: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl StateStore {
    pub fn open(state_dir: &Path) -> Result<Self, StoreError> {
        let dir = state_dir.join("pods");
        std::fs::create_dir_all(&dir).map_err(|source| StoreError::Io {
            path: dir.clone(),
            source,
        })?;
        Ok(StateStore {
            dir,
            order: Default::default(),
        })
    }

    fn path(&self, uid: &str) -> PathBuf {
        self.dir.join(format!("{uid}.json"))
    }

    pub fn save(&self, record: &PodRecord) -> Result<(), StoreError> {
        self.save_latest(|| Some(record.clone()))
    }

    /// Saves the record `latest` returns, called once it is this save's turn: concurrent
    /// saves of one pod then land in the order of the state they read, and each writes
    /// its own temp file (two writers never share one, which could tear a record).
    /// `latest` returns `None` for a pod forgotten while this save waited: nothing is
    /// written, since that would bring a removed record back.
    pub(crate) fn save_latest(
        &self,
        latest: impl FnOnce() -> Option<PodRecord>,
    ) -> Result<(), StoreError> {
        use std::io::Write;
        let _turn = self.order.lock().unwrap_or_else(|p| p.into_inner());
        let Some(record) = latest() else {
            return Ok(());
        };
        let path = self.path(&record.uid);
        let tmp = self.dir.join(format!(
            ".{}.json.{}.{}.tmp",
            record.uid,
            std::process::id(),
            NEXT_TMP.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        let io = |source| StoreError::Io {
            path: tmp.clone(),
            source,
        };
        let text = serde_json::to_vec_pretty(&record).expect("records always serialize");
        let mut file = std::fs::File::create(&tmp).map_err(io)?;
        file.write_all(&text).map_err(io)?;
        // On disk before it replaces the old record: after a crash or a power cut the
        // record is the old one or the new one, never an empty file.
        file.sync_all().map_err(io)?;
        std::fs::rename(&tmp, &path).map_err(|source| StoreError::Io {
            path: path.clone(),
            source,
        })
    }

    /// Removes a record, in turn with the saves: a save under way lands first and is
    /// removed, never renamed into place after the removal.
    pub(crate) fn remove(&self, uid: &str) {
        let _turn = self.order.lock().unwrap_or_else(|p| p.into_inner());
        let _ = std::fs::remove_file(self.path(uid));
    }

    /// Every record. A file that does not parse, or whose uid is not the one its name
    /// gives, is moved aside to `<name>.corrupt` and returned as
    /// [`StoreError::Quarantined`]: its pod is unknown from then on, never acted on from
    /// a record that may be wrong. A file that cannot be read is an error, left in place.
    pub fn load_all(&self) -> (Vec<PodRecord>, Vec<StoreError>) {
        let mut records = Vec::new();
        let mut errors = Vec::new();
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(source) => {
                return (
                    records,
                    vec![StoreError::Io {
                        path: self.dir.clone(),
                        source,
                    }],
                );
            }
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().is_none_or(|e| e != "json")
                || entry.file_name().to_string_lossy().starts_with('.')
            {
                continue;
            }
            let stem = path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            let bytes = match std::fs::read(&path) {
                Ok(bytes) => bytes,
                Err(source) => {
                    errors.push(StoreError::Io { path, source });
                    continue;
                }
            };
            let problem = match serde_json::from_slice::<PodRecord>(&bytes) {
                Ok(record) if record.uid == stem => {
                    records.push(record);
                    continue;
                }
                Ok(record) => format!(
                    "holds pod uid {:?}, not the {stem:?} its name gives",
                    record.uid
                ),
                Err(e) => e.to_string(),
            };
            errors.push(self.quarantine(path, stem, problem));
        }
        records.sort_by(|a, b| a.uid.cmp(&b.uid));
        (records, errors)
    }

    /// The pods any file in the records directory is about, readable or not: records,
    /// records set aside as `.corrupt` (by this start or an earlier one), files that could
    /// not be read, and the temporary files of a save cut short. A pod with none of these
    /// has no record at all. `None` when the directory itself cannot be read: then nothing
    /// is known to have no record.
    pub(crate) fn uids_with_files(&self) -> Option<std::collections::BTreeSet<String>> {
        let entries = std::fs::read_dir(&self.dir).ok()?;
        let mut uids = std::collections::BTreeSet::new();
        for entry in entries {
            let entry = entry.ok()?;
            if let Some(uid) = uid_of_file(&entry.file_name().to_string_lossy()) {
                uids.insert(uid.to_string());
            }
        }
        Some(uids)
    }

    fn quarantine(&self, path: PathBuf, uid: String, reason: String) -> StoreError {
        let mut to = path.clone().into_os_string();
        to.push(".corrupt");
        let to = PathBuf::from(to);
        match std::fs::rename(&path, &to) {
            Ok(()) => StoreError::Quarantined {
                path,
                to,
                reason,
                uid,
            },
            // Left in place: the next start finds it again and says so again.
            Err(err) => StoreError::Corrupt {
                path,
                reason: format!("{reason}; could not be set aside: {err}"),
            },
        }
    }
}

/// The pod uid a file of the records directory is about: `<uid>.json`,
/// `<uid>.json.corrupt`, `.<uid>.json.<pid>.<n>.tmp` (pod uids have no dots).
fn uid_of_file(name: &str) -> Option<&str> {
    let rest = name.strip_prefix('.').unwrap_or(name);
    let (uid, _) = rest.split_once(".json")?;
    (!uid.is_empty() && !uid.contains('.')).then_some(uid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_about_a_pod_names_its_uid() {
        for (name, uid) in [
            ("0a1b-2c.json", Some("0a1b-2c")),
            ("0a1b-2c.json.corrupt", Some("0a1b-2c")),
            (".0a1b-2c.json.4242.7.tmp", Some("0a1b-2c")),
            ("web_1.json.corrupt.corrupt", Some("web_1")),
            (".json", None),
            ("notes.txt", None),
            ("..json", None),
            ("", None),
        ] {
            assert_eq!(uid_of_file(name), uid, "{name:?}");
        }
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::open(dir.path()).unwrap();
        assert_eq!(store.uids_with_files(), Some(Default::default()));
        let pods = dir.path().join("pods");
        for name in ["a.json", "b.json.corrupt", ".c.json.1.2.tmp", "README"] {
            std::fs::write(pods.join(name), "").unwrap();
        }
        let uids: Vec<String> = store.uids_with_files().unwrap().into_iter().collect();
        assert_eq!(uids, ["a", "b", "c"]);
        std::fs::remove_dir_all(&pods).unwrap();
        assert_eq!(
            store.uids_with_files(),
            None,
            "an unreadable directory proves nothing"
        );
    }

    #[test]
    fn records_round_trip_and_corrupt_files_are_reported() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::open(dir.path()).unwrap();
        let record = PodRecord {
            uid: "u1".into(),
            manifest: "/etc/monitor/pods/web.yaml".into(),
            pod: Pod::default().into(),
            phase: Phase::Failed,
            reason: Some("Evicted".into()),
            message: Some("The node was low on resource: memory.".into()),
            containers: vec![ContainerRecord {
                name: "c".into(),
                pid: Some(42),
                restart_count: 1,
                last_exit: Some(137),
                exit_code_unknown: false,
                done: true,
                container_id: Some("0123abcd".into()),
            }],
            sandbox_id: Some("fedc3210".into()),
            conditions: vec![PodCondition::disruption_target(
                "The node was low on resource: memory.",
                Some("2026-11-26T10:00:00Z".into()),
            )],
        };
        store.save(&record).unwrap();
        std::fs::write(dir.path().join("pods/u2.json"), "{not json").unwrap();
        // A record under another pod's name: a crafted or misplaced file.
        let text = std::fs::read_to_string(dir.path().join("pods/u1.json")).unwrap();
        std::fs::write(dir.path().join("pods/u3.json"), text).unwrap();
        let (records, errors) = store.load_all();
        assert_eq!(records, vec![record]);
        let mut set_aside: Vec<(String, String)> = errors
            .iter()
            .map(|e| match e {
                StoreError::Quarantined { uid, to, .. } => (
                    uid.clone(),
                    to.file_name().unwrap().to_string_lossy().into_owned(),
                ),
                other => panic!("not quarantined: {other}"),
            })
            .collect();
        set_aside.sort();
        assert_eq!(
            set_aside,
            vec![
                ("u2".to_string(), "u2.json.corrupt".to_string()),
                ("u3".to_string(), "u3.json.corrupt".to_string())
            ]
        );
        assert!(
            errors[0].to_string().contains("set aside as"),
            "{}",
            errors[0]
        );
        // Set aside for good: the next load neither reads nor reports them.
        let (records, errors) = store.load_all();
        assert_eq!((records.len(), errors.len()), (1, 0));
        assert!(dir.path().join("pods/u2.json.corrupt").exists());
        store.remove("u1");
        assert!(store.load_all().0.is_empty());
    }

    /// A record as an agent before pod conditions wrote it: no `conditions` key.
    const OLD_EVICTED_RECORD: &str = r#"{
  "uid": "u9",
  "manifest": "/etc/monitor/pods/hog.yaml",
  "pod": {"metadata": {"name": "hog", "namespace": "default", "uid": "u9"},
          "spec": {"containers": [{"name": "c", "image": "busybox"}]}},
  "phase": "Failed",
  "reason": "Evicted",
  "message": "The node was low on resource: memory. ",
  "containers": [{"name": "c", "pid": null, "restartCount": 0, "lastExit": 137, "done": true}]
}"#;

    #[test]
    fn a_record_written_before_conditions_existed_still_loads() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::open(dir.path()).unwrap();
        std::fs::write(dir.path().join("pods/u9.json"), OLD_EVICTED_RECORD).unwrap();
        let (records, errors) = store.load_all();
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(records.len(), 1);
        assert_eq!(records[0].phase, Phase::Failed);
        assert_eq!(records[0].reason.as_deref(), Some("Evicted"));
        assert!(
            records[0].conditions.is_empty(),
            "{:?}",
            records[0].conditions
        );
        // Saved again without conditions, the record keeps its old shape.
        store.save(&records[0]).unwrap();
        let text = std::fs::read_to_string(dir.path().join("pods/u9.json")).unwrap();
        assert!(!text.contains("conditions"), "{text}");
    }

    #[test]
    fn a_record_with_a_mangled_condition_time_is_set_aside_saying_why() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::open(dir.path()).unwrap();
        let mut value: serde_json::Value = serde_json::from_str(OLD_EVICTED_RECORD).unwrap();
        value["conditions"] = serde_json::json!([{
            "type": "DisruptionTarget", "status": "True", "lastTransitionTime": "soon"
        }]);
        std::fs::write(dir.path().join("pods/u9.json"), value.to_string()).unwrap();
        let (records, errors) = store.load_all();
        assert!(records.is_empty());
        let [error] = errors.as_slice() else {
            panic!("one error expected: {errors:?}")
        };
        assert!(
            error
                .to_string()
                .contains("\"soon\" is not an RFC 3339 timestamp"),
            "{error}"
        );
    }

    #[test]
    fn concurrent_saves_of_one_pod_never_tear_or_fail() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::open(dir.path()).unwrap();
        let record = |n: u32| PodRecord {
            uid: "u1".into(),
            manifest: "m".repeat(20_000 + n as usize).into(),
            pod: Pod::default().into(),
            phase: Phase::Running,
            reason: None,
            message: Some(format!("save {n}")),
            containers: Vec::new(),
            sandbox_id: None,
            conditions: Vec::new(),
        };
        std::thread::scope(|scope| {
            for t in 0..4 {
                let store = store.clone();
                scope.spawn(move || {
                    for i in 0..50 {
                        store.save(&record(t * 100 + i)).unwrap();
                    }
                });
            }
        });
        let (records, errors) = store.load_all();
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(records.len(), 1);
        let n: usize = records[0].manifest.as_os_str().len() - 20_000;
        assert_eq!(records[0], record(n as u32), "a whole record, not a mix");
        let leftovers = std::fs::read_dir(dir.path().join("pods")).unwrap().count();
        assert_eq!(leftovers, 1, "no temp file left behind");
    }

    #[test]
    fn a_removed_record_stays_removed_whatever_saves_were_under_way() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::open(dir.path()).unwrap();
        let record = PodRecord {
            uid: "u1".into(),
            manifest: "m".into(),
            pod: Pod::default().into(),
            phase: Phase::Failed,
            reason: None,
            message: None,
            containers: Vec::new(),
            sandbox_id: None,
            conditions: Vec::new(),
        };
        // The runtime forgets the pod (its manifest went) while saves of it wait their
        // turn: they find it gone and write nothing.
        let forgotten = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|scope| {
            for _ in 0..4 {
                let (store, record, forgotten) = (store.clone(), record.clone(), &forgotten);
                scope.spawn(move || {
                    for _ in 0..50 {
                        store
                            .save_latest(|| {
                                (!forgotten.load(std::sync::atomic::Ordering::SeqCst))
                                    .then(|| record.clone())
                            })
                            .unwrap();
                    }
                });
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
            forgotten.store(true, std::sync::atomic::Ordering::SeqCst);
            store.remove("u1");
        });
        assert!(
            store.load_all().0.is_empty(),
            "the removed record came back"
        );
        let leftovers = std::fs::read_dir(dir.path().join("pods")).unwrap().count();
        assert_eq!(leftovers, 0, "no temp file left behind");
    }
}
