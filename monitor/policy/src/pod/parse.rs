//! Reading pods from text: `kubectl get pods -o json|yaml` output (kind PodList or List),
//! single Pod manifests, and multi-document YAML streams of either.
//!
//! Parsing runs in three passes so each kind of mistake gets the most useful location:
//! 1. the text into a generic tree (syntax errors carry serde's line and column);
//! 2. the quantities checked on that tree (errors carry the field path, e.g.
//!    `items[0].spec.containers[1].resources.limits.memory`, which serde alone cannot give);
//! 3. the text into the typed [`Pod`]s (type errors carry line and column), then the API
//!    server's defaulting and the validation rules the policy depends on (errors carry the
//!    field path).
use std::collections::BTreeSet;

use serde::Deserialize;
use serde_json::Value;

use super::{Pod, PodList};
use crate::quantity::{Quantity, QuantityError, parse_quantity};

/// Why pods could not be read. Every variant names the file (`origin`) it came from.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PodError {
    /// The text is not well-formed JSON/YAML, or a field has the wrong type.
    #[error("{origin}:{line}:{column}: {message}")]
    Syntax {
        origin: String,
        line: usize,
        column: usize,
        message: String,
    },
    /// The text is unreadable as a whole (empty, or the wrong number of documents).
    #[error("{origin}: {message}")]
    Malformed { origin: String, message: String },
    /// A field holds a value Kubernetes would reject; `path` locates it in the document.
    #[error("{origin}: {path}: {message}")]
    Invalid {
        origin: String,
        path: String,
        message: String,
    },
}

/// Parses pods from a PodList, a `kind: List`, a single Pod, or (YAML) several documents
/// of those. Requests are defaulted from limits and the pods validated (see module docs).
pub fn parse_pod_list(text: &str, origin: &str) -> Result<Vec<Pod>, PodError> {
    Ok(parse_documents(text, origin)?
        .into_iter()
        .flat_map(|doc| doc.pods)
        .collect())
}

/// Parses exactly one Pod manifest (JSON or YAML).
pub fn parse_pod(text: &str, origin: &str) -> Result<Pod, PodError> {
    let mut docs = parse_documents(text, origin)?;
    if docs.len() != 1 {
        return Err(PodError::Malformed {
            origin: origin.to_string(),
            message: format!("expected one Pod, found {} documents", docs.len()),
        });
    }
    let doc = docs.remove(0);
    match (doc.shape, <[Pod; 1]>::try_from(doc.pods)) {
        (Shape::Pod, Ok([pod])) => Ok(pod),
        _ => Err(PodError::Invalid {
            origin: origin.to_string(),
            path: "kind".to_string(),
            message: "expected a single Pod, found a list of pods".to_string(),
        }),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    Json,
    Yaml,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    Pod,
    List,
}

struct Document {
    shape: Shape,
    pods: Vec<Pod>,
}

fn detect_format(text: &str) -> Format {
    match text
        .trim_start_matches('\u{feff}')
        .trim_start()
        .chars()
        .next()
    {
        Some('{') | Some('[') => Format::Json,
        _ => Format::Yaml,
    }
}

/// serde's messages end with " at line L column C"; the location is reported separately.
fn strip_location(message: String) -> String {
    match message.rfind(" at line ") {
        Some(at) => message[..at].to_string(),
        None => message,
    }
}

fn json_error(origin: &str, err: serde_json::Error) -> PodError {
    PodError::Syntax {
        origin: origin.to_string(),
        line: err.line(),
        column: err.column(),
        message: strip_location(err.to_string()),
    }
}

fn yaml_error(origin: &str, err: serde_yaml_ng::Error) -> PodError {
    match err.location() {
        Some(at) => PodError::Syntax {
            origin: origin.to_string(),
            line: at.line(),
            column: at.column(),
            message: strip_location(err.to_string()),
        },
        None => PodError::Malformed {
            origin: origin.to_string(),
            message: err.to_string(),
        },
    }
}

fn parse_documents(text: &str, origin: &str) -> Result<Vec<Document>, PodError> {
    let format = detect_format(text);
    // Pass 1: generic trees, one per document (JSON has exactly one).
    let values: Vec<Value> = match format {
        Format::Json => vec![serde_json::from_str(text).map_err(|e| json_error(origin, e))?],
        Format::Yaml => {
            let mut values = Vec::new();
            // A stream that fails to load yields failing documents forever, so stop at the
            // first error (the `?`) rather than draining the iterator.
            for doc in serde_yaml_ng::Deserializer::from_str(text) {
                values.push(Value::deserialize(doc).map_err(|e| yaml_error(origin, e))?);
            }
            values
        }
    };
    let present = values.iter().filter(|v| !v.is_null()).count();
    if present == 0 {
        return Err(PodError::Malformed {
            origin: origin.to_string(),
            message: "no pod found (the document is empty)".to_string(),
        });
    }

    // Pass 2: shapes and quantities, on the trees.
    let mut shapes = Vec::with_capacity(values.len());
    for (index, value) in values.iter().enumerate() {
        if value.is_null() {
            shapes.push(None);
            continue;
        }
        let prefix = if present > 1 {
            format!("documents[{index}].")
        } else {
            String::new()
        };
        let shape = classify(value, &prefix).map_err(|e| e.at(origin))?;
        match shape {
            Shape::Pod => check_tree(value, &prefix),
            Shape::List => list_items(value)
                .iter()
                .enumerate()
                .try_for_each(|(i, item)| check_tree(item, &format!("{prefix}items[{i}]."))),
        }
        .map_err(|e| e.at(origin))?;
        shapes.push(Some((shape, prefix)));
    }

    // Pass 3: the typed pods, from the text again so type errors keep their line/column.
    let mut typed: Vec<(Shape, String, Vec<Pod>)> = Vec::new();
    match format {
        Format::Json => {
            if let Some(Some((shape, prefix))) = shapes.first() {
                let pods = match shape {
                    Shape::Pod => {
                        vec![serde_json::from_str::<Pod>(text).map_err(|e| json_error(origin, e))?]
                    }
                    Shape::List => {
                        serde_json::from_str::<PodList>(text)
                            .map_err(|e| json_error(origin, e))?
                            .items
                    }
                };
                typed.push((*shape, prefix.clone(), pods));
            }
        }
        Format::Yaml => {
            let docs = serde_yaml_ng::Deserializer::from_str(text).take(shapes.len());
            for (doc, shape) in docs.zip(&shapes) {
                let Some((shape, prefix)) = shape else {
                    continue;
                };
                let pods = match shape {
                    Shape::Pod => vec![Pod::deserialize(doc).map_err(|e| yaml_error(origin, e))?],
                    Shape::List => {
                        PodList::deserialize(doc)
                            .map_err(|e| yaml_error(origin, e))?
                            .items
                    }
                };
                typed.push((*shape, prefix.clone(), pods));
            }
        }
    }

    let mut documents = Vec::with_capacity(typed.len());
    for (shape, prefix, mut pods) in typed {
        for (i, pod) in pods.iter_mut().enumerate() {
            apply_defaults(pod);
            let prefix = match shape {
                Shape::Pod => prefix.clone(),
                Shape::List => format!("{prefix}items[{i}]."),
            };
            validate(pod, &prefix).map_err(|e| e.at(origin))?;
        }
        documents.push(Document { shape, pods });
    }
    Ok(documents)
}

/// A validation failure before the origin is attached.
struct Problem {
    path: String,
    message: String,
}

impl Problem {
    fn new(path: String, message: impl Into<String>) -> Self {
        Problem {
            path,
            message: message.into(),
        }
    }

    fn at(self, origin: &str) -> PodError {
        PodError::Invalid {
            origin: origin.to_string(),
            path: self.path,
            message: self.message,
        }
    }
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// Decides whether a document is one pod or a list of them, from `kind` (or, when
/// absent, from the presence of `items`), and rejects other kinds.
fn classify(value: &Value, prefix: &str) -> Result<Shape, Problem> {
    let Some(object) = value.as_object() else {
        let path = if prefix.is_empty() {
            "(document)".to_string()
        } else {
            prefix.trim_end_matches('.').to_string()
        };
        return Err(Problem::new(
            path,
            format!(
                "expected a Pod, PodList or List object, found {}",
                type_name(value)
            ),
        ));
    };
    let shape = match object.get("kind") {
        None | Some(Value::Null) if object.contains_key("items") => Shape::List,
        None | Some(Value::Null) => Shape::Pod,
        Some(Value::String(kind)) if kind == "Pod" => Shape::Pod,
        Some(Value::String(kind)) if kind == "PodList" || kind == "List" => Shape::List,
        Some(other) => {
            return Err(Problem::new(
                format!("{prefix}kind"),
                format!("{other} is not Pod, PodList or List"),
            ));
        }
    };
    if shape == Shape::List {
        match object.get("items") {
            None | Some(Value::Null) | Some(Value::Array(_)) => {}
            Some(other) => {
                return Err(Problem::new(
                    format!("{prefix}items"),
                    format!("expected a list of pods, found {}", type_name(other)),
                ));
            }
        }
        for (i, item) in list_items(value).iter().enumerate() {
            match item.get("kind") {
                None | Some(Value::Null) => {}
                Some(Value::String(kind)) if kind == "Pod" => {}
                Some(other) => {
                    return Err(Problem::new(
                        format!("{prefix}items[{i}].kind"),
                        format!("{other} is not a Pod (only pods can be read from a list)"),
                    ));
                }
            }
        }
    }
    Ok(shape)
}

fn list_items(value: &Value) -> &[Value] {
    value
        .get("items")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

/// A tree value that is not a quantity; the caller adds the field path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum QuantityValueError {
    #[error(transparent)]
    Malformed(#[from] QuantityError),
    /// Neither a string nor a number (`found` is e.g. "a list").
    #[error("expected a quantity, found {found}")]
    WrongType { found: &'static str },
}

/// Reads a quantity the way [`Quantity`]'s deserializer does: a string, or a bare number.
fn quantity_of(value: &Value) -> Result<Quantity, QuantityValueError> {
    match value {
        Value::String(text) => Ok(parse_quantity(text)?),
        Value::Number(n) => match n.as_i64() {
            Some(units) => Ok(parse_quantity(&units.to_string())?),
            None => Ok(parse_quantity(&n.to_string())?),
        },
        other => Err(QuantityValueError::WrongType {
            found: type_name(other),
        }),
    }
}

/// The checks of one pod tree that need its field paths: quantities, ports and the OS.
fn check_tree(pod: &Value, prefix: &str) -> Result<(), Problem> {
    check_quantities(pod, prefix)?;
    check_ports(pod, prefix)?;
    check_os(pod, prefix)
}

/// The protocols a container port may use (the API server's supportedPortProtocols).
const PORT_PROTOCOLS: [&str; 3] = ["TCP", "UDP", "SCTP"];

/// Checks every container port of one pod tree as the API server validates them
/// (validateContainerPorts, and validateHostNetwork for a pod on the host network):
/// `containerPort` given and in 1-65535, `hostPort` 0 (unset) or in 1-65535,
/// `protocol` TCP, UDP or SCTP, `hostIP` an IP address, and on the host network a
/// `hostPort` that is either unset or the `containerPort`.
fn check_ports(pod: &Value, prefix: &str) -> Result<(), Problem> {
    let spec = pod.get("spec");
    let host_network = spec
        .and_then(|s| s.get("hostNetwork"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    for field in ["containers", "initContainers"] {
        let containers = spec.and_then(|s| s.get(field)).and_then(Value::as_array);
        for (i, container) in containers.into_iter().flatten().enumerate() {
            let base = format!("{prefix}spec.{field}[{i}].ports");
            let ports = match container.get("ports") {
                None | Some(Value::Null) => continue,
                Some(Value::Array(ports)) => ports,
                Some(other) => {
                    return Err(Problem::new(
                        base,
                        format!("expected a list of ports, found {}", type_name(other)),
                    ));
                }
            };
            for (j, port) in ports.iter().enumerate() {
                check_port(port, &format!("{base}[{j}]"), host_network)?;
            }
        }
    }
    Ok(())
}

fn check_port(port: &Value, path: &str, host_network: bool) -> Result<(), Problem> {
    if !port.is_object() {
        return Err(Problem::new(
            path.to_string(),
            format!("expected a port object, found {}", type_name(port)),
        ));
    }
    let container_port = match port.get("containerPort") {
        None | Some(Value::Null) => {
            return Err(Problem::new(
                format!("{path}.containerPort"),
                "missing (a port number from 1 to 65535 is required)",
            ));
        }
        Some(raw) => port_number(raw, &format!("{path}.containerPort"), 1)?,
    };
    let host_port = match port.get("hostPort") {
        None | Some(Value::Null) => 0,
        Some(raw) => port_number(raw, &format!("{path}.hostPort"), 0)?,
    };
    if host_network && host_port != 0 && host_port != container_port {
        return Err(Problem::new(
            format!("{path}.hostPort"),
            format!(
                "{host_port} must match containerPort {container_port} when hostNetwork is true"
            ),
        ));
    }
    match port.get("protocol") {
        None | Some(Value::Null) => {}
        Some(Value::String(protocol)) if PORT_PROTOCOLS.contains(&protocol.as_str()) => {}
        Some(other) => {
            return Err(Problem::new(
                format!("{path}.protocol"),
                format!("{other} is not one of TCP, UDP, SCTP"),
            ));
        }
    }
    match port.get("hostIP") {
        None | Some(Value::Null) => {}
        Some(Value::String(ip)) if ip.is_empty() || ip.parse::<core::net::IpAddr>().is_ok() => {}
        Some(other) => {
            return Err(Problem::new(
                format!("{path}.hostIP"),
                format!("{other} is not an IP address"),
            ));
        }
    }
    Ok(())
}

/// A port number from `min` to 65535.
fn port_number(raw: &Value, path: &str, min: i64) -> Result<i64, Problem> {
    match raw.as_i64() {
        Some(n) if (min..=65535).contains(&n) => Ok(n),
        Some(n) => Err(Problem::new(
            path.to_string(),
            format!("{n} is not a port number from {min} to 65535"),
        )),
        None => Err(Problem::new(
            path.to_string(),
            format!("expected a port number, found {}", describe_value(raw)),
        )),
    }
}

/// A value for a message: numbers and strings as written, other values by kind.
fn describe_value(value: &Value) -> String {
    match value {
        Value::Number(_) | Value::String(_) => value.to_string(),
        other => type_name(other).to_string(),
    }
}

/// The operating systems `spec.os.name` may name (the API server's validateOS).
const POD_OS_NAMES: [&str; 2] = ["linux", "windows"];

/// Checks `spec.os`: when given, its `name` is "linux" or "windows".
fn check_os(pod: &Value, prefix: &str) -> Result<(), Problem> {
    let os = match pod.get("spec").and_then(|s| s.get("os")) {
        None | Some(Value::Null) => return Ok(()),
        Some(os) if os.is_object() => os,
        Some(other) => {
            return Err(Problem::new(
                format!("{prefix}spec.os"),
                format!("expected an object with a name, found {}", type_name(other)),
            ));
        }
    };
    let path = format!("{prefix}spec.os.name");
    match os.get("name") {
        None | Some(Value::Null) => Err(Problem::new(path, "missing (linux or windows)")),
        Some(Value::String(name)) if POD_OS_NAMES.contains(&name.as_str()) => Ok(()),
        Some(other) => Err(Problem::new(
            path,
            format!("{} is not one of linux, windows", describe_value(other)),
        )),
    }
}

/// Checks every quantity of one pod tree: well-formed, not negative, and a request not
/// above its limit (the API server's ValidateResourceRequirements / ValidateResourceQuantityValue).
fn check_quantities(pod: &Value, prefix: &str) -> Result<(), Problem> {
    let spec = pod.get("spec");
    for field in ["containers", "initContainers"] {
        let containers = spec.and_then(|s| s.get(field)).and_then(Value::as_array);
        for (i, container) in containers.into_iter().flatten().enumerate() {
            check_requirements(
                container.get("resources"),
                &format!("{prefix}spec.{field}[{i}].resources"),
            )?;
        }
    }
    // Pod-level resources: the same rules as a container's (ValidatePodResources).
    check_requirements(
        spec.and_then(|s| s.get("resources")),
        &format!("{prefix}spec.resources"),
    )?;
    checked_list(
        spec.and_then(|s| s.get("overhead")),
        &format!("{prefix}spec.overhead"),
    )?;
    let volumes = spec
        .and_then(|s| s.get("volumes"))
        .and_then(Value::as_array);
    for (i, volume) in volumes.into_iter().flatten().enumerate() {
        let size_limit = volume.get("emptyDir").and_then(|e| e.get("sizeLimit"));
        if let Some(raw) = size_limit.filter(|v| !v.is_null()) {
            checked_quantity(raw, format!("{prefix}spec.volumes[{i}].emptyDir.sizeLimit"))?;
        }
    }
    Ok(())
}

/// Checks one `resources` object (a container's or the pod's): its quantities, and no
/// request above its limit.
fn check_requirements(resources: Option<&Value>, base: &str) -> Result<(), Problem> {
    let requests = checked_list(
        resources.and_then(|r| r.get("requests")),
        &format!("{base}.requests"),
    )?;
    let limits = checked_list(
        resources.and_then(|r| r.get("limits")),
        &format!("{base}.limits"),
    )?;
    for (name, request) in &requests {
        let limit = limits.iter().find(|(n, _)| n == name).map(|(_, q)| q);
        if let Some(limit) = limit.filter(|limit| request > *limit) {
            return Err(Problem::new(
                format!("{base}.requests.{name}"),
                format!("{request} must be less than or equal to the {name} limit of {limit}"),
            ));
        }
    }
    Ok(())
}

/// Checks a `requests` or `limits` map, returning its quantities by name.
fn checked_list(list: Option<&Value>, path: &str) -> Result<Vec<(String, Quantity)>, Problem> {
    let Some(object) = list.and_then(Value::as_object) else {
        return Ok(Vec::new());
    };
    object
        .iter()
        .map(|(name, raw)| {
            Ok((
                name.clone(),
                checked_quantity(raw, format!("{path}.{name}"))?,
            ))
        })
        .collect()
}

fn checked_quantity(raw: &Value, path: String) -> Result<Quantity, Problem> {
    let quantity = quantity_of(raw).map_err(|e| Problem::new(path.clone(), e.to_string()))?;
    if quantity.is_negative() {
        return Err(Problem::new(
            path,
            format!("{raw} must be greater than or equal to 0"),
        ));
    }
    Ok(quantity)
}

/// The API server's defaulting the kubelet always sees (pkg/apis/core/v1 defaults.go
/// SetDefaults_Pod). Pods from `kubectl get` already carry it; manifests may not.
/// - A container that sets a limit but no request for a resource requests its limit.
/// - Then, with pod-level limits (defaultPodRequests): a pod-level cpu/memory request not
///   given is the containers' aggregate request when any container requests it, else the
///   pod-level limit.
/// - With pod-level requests but no pod-level limits (defaultPodLimits): a pod-level
///   cpu/memory limit is the containers' aggregate limit when every container sets one.
/// - A container port's protocol is TCP when unset (SetDefaults_ContainerPort); on the
///   host network (`hostNetwork: true`) an unset `hostPort` is the `containerPort`
///   (defaultHostNetworkPorts). Without `hostNetwork` an unset `hostPort` stays 0.
fn apply_defaults(pod: &mut Pod) {
    let host_network = pod.spec.host_network;
    let containers = pod
        .spec
        .containers
        .iter_mut()
        .chain(pod.spec.init_containers.iter_mut());
    for container in containers {
        let resources = &mut container.resources;
        for (name, limit) in &resources.limits {
            resources.requests.entry(name.clone()).or_insert(*limit);
        }
        for port in &mut container.ports {
            if port.protocol.is_empty() {
                port.protocol = "TCP".to_string();
            }
            if host_network && port.host_port == 0 {
                port.host_port = port.container_port;
            }
        }
    }
    default_pod_level_requests(pod);
    default_pod_level_limits(pod);
}

/// The overcommittable resources that may be set at pod level.
const POD_LEVEL_DEFAULTED: [&str; 2] = ["cpu", "memory"];

fn default_pod_level_requests(pod: &mut Pod) {
    let Some(resources) = &pod.spec.resources else {
        return;
    };
    if resources.limits.is_empty() {
        return;
    }
    let mut requests = resources.requests.clone();
    for name in POD_LEVEL_DEFAULTED {
        let requested = pod
            .all_containers()
            .any(|c| c.resources.requests.contains_key(name));
        if requested && !requests.contains_key(name) {
            let aggregate = pod
                .aggregate(|c| c.resources.requests.get(name).copied())
                .unwrap_or_default();
            requests.insert(name.to_string(), aggregate);
        }
    }
    for (name, limit) in &resources.limits {
        if super::is_pod_level_resource(name) {
            requests.entry(name.clone()).or_insert(*limit);
        }
    }
    if let Some(resources) = &mut pod.spec.resources {
        resources.requests = requests;
    }
}

fn default_pod_level_limits(pod: &mut Pod) {
    let Some(resources) = &pod.spec.resources else {
        return;
    };
    let set = |list: &super::ResourceList| list.keys().any(|n| super::is_pod_level_resource(n));
    if set(&resources.limits) || !set(&resources.requests) {
        return;
    }
    let mut limits = resources.limits.clone();
    for name in POD_LEVEL_DEFAULTED {
        let every_container_limited = pod
            .all_containers()
            .all(|c| c.resources.limits.contains_key(name));
        if every_container_limited
            && !limits.contains_key(name)
            && let Some(aggregate) = pod.aggregate(|c| c.resources.limits.get(name).copied())
        {
            limits.insert(name.to_string(), aggregate);
        }
    }
    if let Some(resources) = &mut pod.spec.resources {
        resources.limits = limits;
    }
}

/// The API validation rules the policy relies on: a named pod with at least one
/// container, and container names non-empty and unique across init and regular containers.
fn validate(pod: &Pod, prefix: &str) -> Result<(), Problem> {
    if pod.metadata.name.is_empty() {
        return Err(Problem::new(format!("{prefix}metadata.name"), "missing"));
    }
    // The API server's name rules. They matter beyond form: names and uids become
    // directory and file names (logs, records, cgroups), and must not climb out of them.
    if let Err(reason) = dns1123_subdomain(&pod.metadata.name) {
        return Err(Problem::new(format!("{prefix}metadata.name"), reason));
    }
    if !pod.metadata.namespace.is_empty()
        && let Err(reason) = dns1123_label(&pod.metadata.namespace)
    {
        return Err(Problem::new(format!("{prefix}metadata.namespace"), reason));
    }
    if !pod.metadata.uid.is_empty() && !is_safe_uid(&pod.metadata.uid) {
        return Err(Problem::new(
            format!("{prefix}metadata.uid"),
            format!(
                "{:?}: at most 128 letters, digits, '-', '_' or '.', and not . or ..",
                pod.metadata.uid
            ),
        ));
    }
    if pod.spec.containers.is_empty() {
        return Err(Problem::new(
            format!("{prefix}spec.containers"),
            "at least one container is required",
        ));
    }
    // The kubelet acts on these three only; anything else is a typo that would otherwise
    // run as Always. Empty is unset (the API server defaults it to Always).
    if let Some(policy) = pod.spec.restart_policy.as_deref() {
        check_restart_policy(policy, format!("{prefix}spec.restartPolicy"))?;
    }
    let mut seen = BTreeSet::new();
    let all = [
        ("containers", &pod.spec.containers),
        ("initContainers", &pod.spec.init_containers),
    ];
    for (field, containers) in all {
        for (i, container) in containers.iter().enumerate() {
            if let Some(policy) = container.restart_policy.as_deref() {
                check_restart_policy(policy, format!("{prefix}spec.{field}[{i}].restartPolicy"))?;
            }
            let path = format!("{prefix}spec.{field}[{i}].name");
            if container.name.is_empty() {
                return Err(Problem::new(path, "missing"));
            }
            if let Err(reason) = dns1123_label(&container.name) {
                return Err(Problem::new(path, reason));
            }
            if !seen.insert(container.name.as_str()) {
                return Err(Problem::new(
                    path,
                    format!("duplicate name {:?}", container.name),
                ));
            }
        }
    }
    Ok(())
}

/// The restart policies the API accepts (a container's, for sidecars, is one of them too).
const RESTART_POLICIES: [&str; 3] = ["Always", "OnFailure", "Never"];

fn check_restart_policy(policy: &str, path: String) -> Result<(), Problem> {
    if policy.is_empty() || RESTART_POLICIES.contains(&policy) {
        Ok(())
    } else {
        Err(Problem::new(
            path,
            format!("{policy:?} is not one of Always, OnFailure, Never"),
        ))
    }
}

/// A DNS-1123 label (namespaces, container names): at most 63 lowercase letters, digits
/// and '-', starting and ending with a letter or digit.
fn dns1123_label(name: &str) -> Result<(), String> {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    let ok = !name.is_empty()
        && name.len() <= 63
        && name.chars().all(|c| alnum(c) || c == '-')
        && name.starts_with(alnum)
        && name.ends_with(alnum);
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{name:?} is not a DNS-1123 label (at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit)"
        ))
    }
}

/// A DNS-1123 subdomain (pod names): at most 253 characters, dot-separated labels of
/// lowercase letters, digits and '-'.
fn dns1123_subdomain(name: &str) -> Result<(), String> {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    let ok = !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|part| {
            !part.is_empty()
                && part.chars().all(|c| alnum(c) || c == '-')
                && part.starts_with(alnum)
                && part.ends_with(alnum)
        });
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{name:?} is not a DNS-1123 subdomain (lowercase letters, digits, '-' and '.', at most 253 characters, each part starting and ending with a letter or digit)"
        ))
    }
}

/// A uid safe as a file and directory name.
fn is_safe_uid(uid: &str) -> bool {
    uid.len() <= 128
        && uid != "."
        && uid != ".."
        && uid
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}
