//! The inputs of a simulation: a scenario file (a time series of steps), or a snapshot
//! given on the command line (one step at 0s). Both become a [`Scenario`].
//!
//! Every document (`config`, `node`, `pods`, `summary`, `admit`) is either inline in the
//! scenario or a string naming a file, relative to the scenario's directory: real
//! `kubectl get pods -o json` and `/stats/summary` dumps can be used as they are.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use serde_yaml_ng::Value;

use super::error::{SimulateError, deserialize_document, deserialize_value, join_field};
use super::node::{Node, NodeDocument};
use super::summary::Summary;
use crate::config::kubelet::parse_go_duration;
use crate::policy::pod::{Pod, parse_pod_list};
use crate::policy::quantity::Quantity;

/// A whole simulation input.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// The KubeletConfiguration text and where it came from (for error messages).
    pub config: ConfigSource,
    /// `dedicatedImageFs:` at top level (None: decide from the summary, per step).
    pub(crate) dedicated_image_fs: Option<bool>,
    pub(crate) steps: Vec<Step>,
}

#[derive(Clone, Debug)]
pub struct ConfigSource {
    pub(crate) text: String,
    pub(crate) origin: String,
}

/// One step: what changed at `at`. `None` means "carried over from the previous step".
#[derive(Clone, Debug, Default)]
pub(crate) struct Step {
    pub(crate) at: Duration,
    pub(crate) node: Option<Node>,
    pub(crate) pods: Option<Vec<Pod>>,
    pub(crate) summary: Option<Summary>,
    pub(crate) images: Option<Vec<ImageSpec>>,
    /// Bytes node-level reclaim would free, per filesystem (one-shot).
    pub(crate) reclaim: BTreeMap<Filesystem, u64>,
    /// Page cache each pod ("namespace/name") can give back to memory relief; replaces
    /// the previous step's when given, and what relief takes is gone for later steps.
    pub(crate) reclaimable: Option<BTreeMap<String, u64>>,
    /// Pods asking for admission at this step (one-shot).
    pub(crate) admit: Vec<Pod>,
    pub(crate) dedicated_image_fs: Option<bool>,
}

/// A filesystem node-level reclaim can free space on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize)]
#[expect(
    clippy::enum_variant_names,
    reason = "the kubelet's names for them: nodefs, imagefs, containerfs"
)]
pub(crate) enum Filesystem {
    #[serde(rename = "nodefs")]
    NodeFs,
    #[serde(rename = "imagefs")]
    ImageFs,
    #[serde(rename = "containerfs")]
    ContainerFs,
}

/// An image on the node (what `crictl images` would list).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct ImageSpec {
    pub(crate) id: String,
    #[serde(default)]
    pub(crate) repo_tags: Vec<String>,
    pub(crate) size_bytes: Quantity,
    #[serde(default)]
    pub(crate) pinned: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawScenario {
    config: Option<Value>,
    #[serde(default)]
    dedicated_image_fs: Option<bool>,
    #[serde(default)]
    steps: Vec<RawStep>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawStep {
    at: Option<Value>,
    node: Option<Value>,
    pods: Option<Value>,
    summary: Option<Value>,
    images: Option<Vec<ImageSpec>>,
    #[serde(default)]
    reclaim: BTreeMap<Filesystem, Quantity>,
    reclaimable: Option<BTreeMap<String, Quantity>>,
    admit: Option<Value>,
    dedicated_image_fs: Option<bool>,
}

/// Reads a file, naming it on failure.
pub(crate) fn read_file(path: &Path) -> Result<String, SimulateError> {
    std::fs::read_to_string(path).map_err(|source| SimulateError::Read {
        file: path.display().to_string(),
        source,
    })
}

/// Loads a scenario file.
pub(crate) fn load_scenario(path: &Path) -> Result<Scenario, SimulateError> {
    let text = read_file(path)?;
    let file = path.display().to_string();
    let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
    parse_scenario(&text, &file, &base)
}

/// Parses scenario text; `file` names it in errors, `base` resolves file references.
pub fn parse_scenario(text: &str, file: &str, base: &Path) -> Result<Scenario, SimulateError> {
    let raw: RawScenario = deserialize_document(text, file, "")?;
    let ctx = Ctx { file, base };
    let config = match raw.config {
        None => {
            return Err(SimulateError::input(
                file,
                "config",
                "missing (a KubeletConfiguration, inline or a file name)",
            ));
        }
        Some(Value::String(name)) => {
            let path = ctx.resolve(&name);
            ConfigSource {
                text: read_file(&path)?,
                origin: path.display().to_string(),
            }
        }
        Some(value @ Value::Mapping(_)) => ConfigSource {
            text: serde_yaml_ng::to_string(&value)
                .map_err(|e| SimulateError::input(file, "config", e.to_string()))?,
            origin: format!("{file}: config"),
        },
        Some(_) => {
            return Err(SimulateError::input(
                file,
                "config",
                "expected a KubeletConfiguration mapping or a file name",
            ));
        }
    };
    if raw.steps.is_empty() {
        return Err(SimulateError::input(
            file,
            "steps",
            "missing or empty (a scenario needs at least one step)",
        ));
    }
    let mut steps = Vec::with_capacity(raw.steps.len());
    let mut previous_at = Duration::ZERO;
    for (i, raw_step) in raw.steps.into_iter().enumerate() {
        let field = format!("steps[{i}]");
        let step = ctx.step(raw_step, &field)?;
        if step.at < previous_at {
            return Err(SimulateError::input(
                file,
                format!("{field}.at"),
                "steps must be in time order",
            ));
        }
        previous_at = step.at;
        steps.push(step);
    }
    if steps[0].summary.is_none() {
        return Err(SimulateError::input(
            file,
            "steps[0].summary",
            "missing (the first step needs a Summary API document)",
        ));
    }
    Ok(Scenario {
        config,
        dedicated_image_fs: raw.dedicated_image_fs,
        steps,
    })
}

/// Files named on the command line for a snapshot simulation.
pub(crate) struct SnapshotFiles<'a> {
    pub(crate) config: &'a Path,
    pub(crate) pods: &'a Path,
    pub(crate) summary: &'a Path,
    pub(crate) node: Option<&'a Path>,
    pub(crate) admit: Option<&'a Path>,
}

/// A snapshot: one step at 0s.
pub(crate) fn load_snapshot(files: &SnapshotFiles<'_>) -> Result<Scenario, SimulateError> {
    let config = ConfigSource {
        text: read_file(files.config)?,
        origin: files.config.display().to_string(),
    };
    let pods = load_pods_file(files.pods)?;
    let summary_file = files.summary.display().to_string();
    let summary: Summary = deserialize_document(&read_file(files.summary)?, &summary_file, "")?;
    let node = match files.node {
        Some(path) => Some(load_node_file(path)?),
        None => None,
    };
    let admit = match files.admit {
        Some(path) => load_pods_file(path)?,
        None => Vec::new(),
    };
    let step = Step {
        at: Duration::ZERO,
        node,
        pods: Some(pods),
        summary: Some(summary),
        admit,
        ..Step::default()
    };
    Ok(Scenario {
        config,
        dedicated_image_fs: None,
        steps: vec![step],
    })
}

/// A Node, or a list holding exactly one (see [`NodeDocument::into_node`]), from a file.
fn load_node_file(path: &Path) -> Result<Node, SimulateError> {
    let file = path.display().to_string();
    deserialize_document::<NodeDocument>(&read_file(path)?, &file, "")?.into_node(&file, "")
}

fn load_pods_file(path: &Path) -> Result<Vec<Pod>, SimulateError> {
    let text = read_file(path)?;
    parse_pod_list(&text, &path.display().to_string())
        .map_err(|e| SimulateError::Pods(e.to_string()))
}

struct Ctx<'a> {
    file: &'a str,
    base: &'a Path,
}

impl Ctx<'_> {
    fn resolve(&self, name: &str) -> PathBuf {
        let path = Path::new(name);
        if path.is_absolute() {
            path.to_path_buf()
        } else {
            self.base.join(path)
        }
    }

    fn step(&self, raw: RawStep, field: &str) -> Result<Step, SimulateError> {
        let at_field = format!("{field}.at");
        let at = match raw.at {
            None => {
                return Err(SimulateError::input(
                    self.file,
                    at_field,
                    "missing (a duration since the start, e.g. 30s)",
                ));
            }
            Some(Value::String(s)) => parse_go_duration(&s)
                .map_err(|e| SimulateError::input(self.file, &at_field, e.to_string()))?,
            // A bare 0 is the only unit-less duration Go accepts.
            Some(Value::Number(n)) if n.as_u64() == Some(0) => Duration::ZERO,
            Some(other) => {
                return Err(SimulateError::input(
                    self.file,
                    at_field,
                    format!("{other:?} is not a duration (e.g. 30s, 1m30s)"),
                ));
            }
        };
        let node = match raw.node {
            Some(v) => Some(self.node(v, &format!("{field}.node"))?),
            None => None,
        };
        let summary = match raw.summary {
            Some(v) => Some(self.document::<Summary>(v, &format!("{field}.summary"))?),
            None => None,
        };
        let pods = match raw.pods {
            Some(v) => Some(self.pods(v, &format!("{field}.pods"))?),
            None => None,
        };
        let admit = match raw.admit {
            Some(v) => self.pods(v, &format!("{field}.admit"))?,
            None => Vec::new(),
        };
        let mut reclaim = BTreeMap::new();
        for (fs, q) in raw.reclaim {
            if q.is_negative() {
                return Err(SimulateError::input(
                    self.file,
                    format!("{field}.reclaim"),
                    format!("{q} is negative"),
                ));
            }
            reclaim.insert(fs, q.value() as u64);
        }
        let reclaimable = match raw.reclaimable {
            Some(raw) => {
                let mut bytes = BTreeMap::new();
                for (pod, q) in raw {
                    if q.is_negative() || !pod.contains('/') {
                        return Err(SimulateError::input(
                            self.file,
                            format!("{field}.reclaimable.{pod}"),
                            format!(
                                "{q}: needs a pod as namespace/name and bytes that are not negative"
                            ),
                        ));
                    }
                    bytes.insert(pod, q.value() as u64);
                }
                Some(bytes)
            }
            None => None,
        };
        if let Some(images) = &raw.images {
            for (j, image) in images.iter().enumerate() {
                if image.id.is_empty() {
                    return Err(SimulateError::input(
                        self.file,
                        format!("{field}.images[{j}].id"),
                        "missing or empty",
                    ));
                }
                if image.size_bytes.is_negative() {
                    return Err(SimulateError::input(
                        self.file,
                        format!("{field}.images[{j}].sizeBytes"),
                        "negative",
                    ));
                }
            }
        }
        Ok(Step {
            at,
            node,
            pods,
            summary,
            images: raw.images,
            reclaim,
            reclaimable,
            admit,
            dedicated_image_fs: raw.dedicated_image_fs,
        })
    }

    /// An inline document, or a file name (relative to the scenario) holding one.
    fn document<T: serde::de::DeserializeOwned>(
        &self,
        value: Value,
        field: &str,
    ) -> Result<T, SimulateError> {
        match value {
            Value::String(name) => {
                let path = self.resolve(&name);
                deserialize_document(&read_file(&path)?, &path.display().to_string(), "")
            }
            other => deserialize_value(other, self.file, field),
        }
    }

    /// A Node (or a one-node list): inline, or a file name.
    fn node(&self, value: Value, field: &str) -> Result<Node, SimulateError> {
        match value {
            Value::String(name) => load_node_file(&self.resolve(&name)),
            other => deserialize_value::<NodeDocument>(other, self.file, field)?
                .into_node(self.file, field),
        }
    }

    /// Pods: a file name, a PodList / List / Pod mapping, or a plain sequence of pods.
    /// Validation (a name on every pod, valid quantities, ...) is the pod model's own.
    fn pods(&self, value: Value, field: &str) -> Result<Vec<Pod>, SimulateError> {
        match value {
            Value::String(name) => load_pods_file(&self.resolve(&name)),
            value => {
                let value = match value {
                    seq @ Value::Sequence(_) => {
                        let mut list = serde_yaml_ng::Mapping::new();
                        list.insert(Value::String("items".into()), seq);
                        Value::Mapping(list)
                    }
                    other => other,
                };
                let text = serde_json::to_string(&value).map_err(|e| {
                    SimulateError::input(
                        self.file,
                        field,
                        format!("cannot read as a pod list: {e}"),
                    )
                })?;
                parse_pod_list(&text, &format!("{}: {}", self.file, join_field(field, "")))
                    .map_err(|e| SimulateError::Pods(e.to_string()))
            }
        }
    }
}
