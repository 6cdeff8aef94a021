//! The subset of the Kubernetes Pod object the node-pressure policy reads: identity,
//! priority, containers with their resources and ports, volumes, the OS, and the status
//! the runtime reports.
//!
//! The types deserialize from `kubectl get pods -o json|yaml` output and from pod
//! manifests. Unknown fields are ignored; fields Kubernetes lets you omit default to empty,
//! and an explicit `null` is read as omitted (as the API server's Go decoder does).
//! Parsing and validation live in [`parse`]; this module holds the model and the derived
//! facts the kubelet computes from a pod (QoS class, effective requests, criticality).
use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};

use super::quantity::Quantity;
use super::types::{QosClass, SYSTEM_CRITICAL_PRIORITY};

mod parse;

pub use parse::{PodError, parse_pod, parse_pod_list};

/// Annotation the kubelet puts on every pod naming where it came from ("api", "file",
/// "http"; kubelet: pkg/kubelet/types ConfigSourceAnnotationKey).
pub const CONFIG_SOURCE_ANNOTATION: &str = "kubernetes.io/config.source";
/// Annotation marking the API server's mirror of a static pod (ConfigMirrorAnnotationKey).
pub const CONFIG_MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";
/// The pod source value for pods from the API server (kubetypes.ApiserverSource).
pub const API_SERVER_SOURCE: &str = "api";
/// Priority class of node-critical pods (scheduling.SystemNodeCritical).
pub const SYSTEM_NODE_CRITICAL: &str = "system-node-critical";
/// The API's default `terminationGracePeriodSeconds` (v1.DefaultTerminationGracePeriodSeconds).
pub const DEFAULT_TERMINATION_GRACE_PERIOD_SECONDS: i64 = 30;

/// Resource name → quantity (the API's `v1.ResourceList`), e.g. requests or node allocatable.
pub type ResourceList = BTreeMap<String, Quantity>;

/// Reads an explicit `null` as the type's default, as Go's JSON decoder leaves a field at its
/// zero value for `null` (manifests commonly carry `creationTimestamp: null`, `resources: {}`).
fn nullable<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Pod {
    #[serde(default, deserialize_with = "nullable")]
    pub metadata: ObjectMeta,
    #[serde(default, deserialize_with = "nullable")]
    pub spec: PodSpec,
    #[serde(default, deserialize_with = "nullable")]
    pub status: PodStatus,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectMeta {
    #[serde(default, deserialize_with = "nullable")]
    pub name: String,
    /// "" means "default" (see [`Pod::namespace`]).
    #[serde(default, deserialize_with = "nullable")]
    pub namespace: String,
    #[serde(default, deserialize_with = "nullable")]
    pub uid: String,
    #[serde(default, deserialize_with = "nullable")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, deserialize_with = "nullable")]
    pub annotations: BTreeMap<String, String>,
    #[serde(default, deserialize_with = "nullable")]
    pub owner_references: Vec<OwnerReference>,
    #[serde(default)]
    pub creation_timestamp: Option<String>,
    /// Set once the pod is being deleted (graceful termination in progress).
    #[serde(default)]
    pub deletion_timestamp: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OwnerReference {
    #[serde(default, deserialize_with = "nullable")]
    pub api_version: String,
    #[serde(default, deserialize_with = "nullable")]
    pub kind: String,
    #[serde(default, deserialize_with = "nullable")]
    pub name: String,
    #[serde(default, deserialize_with = "nullable")]
    pub uid: String,
    #[serde(default)]
    pub controller: Option<bool>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSpec {
    #[serde(default, deserialize_with = "nullable")]
    pub containers: Vec<Container>,
    #[serde(default, deserialize_with = "nullable")]
    pub init_containers: Vec<Container>,
    #[serde(default)]
    pub priority: Option<i32>,
    #[serde(default)]
    pub priority_class_name: Option<String>,
    #[serde(default)]
    pub termination_grace_period_seconds: Option<i64>,
    #[serde(default)]
    pub restart_policy: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    pub volumes: Vec<Volume>,
    #[serde(default)]
    pub node_name: Option<String>,
    /// Read by admission: a BestEffort pod tolerating the memory-pressure taint is admitted
    /// under MemoryPressure.
    #[serde(default, deserialize_with = "nullable")]
    pub tolerations: Vec<Toleration>,
    /// Pod-level requests and limits (the PodLevelResources feature): for cpu and memory
    /// (and hugepages) they replace the containers' sums in the QoS class, admission and
    /// ranking.
    #[serde(default)]
    pub resources: Option<ResourceRequirements>,
    /// What the runtime itself costs per pod (RuntimeClass overhead): added to the pod's
    /// requests for admission, and to its ranking request when that is not zero.
    #[serde(default, deserialize_with = "nullable")]
    pub overhead: ResourceList,
    /// The pod asks for the node's network namespace. Read only for the API server's
    /// defaulting: its container ports then claim their `containerPort` on the host
    /// where `hostPort` is unset (SetDefaults_PodSpec, defaultHostNetworkPorts).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub host_network: bool,
    /// The OS the pod is meant for; admission refuses a pod naming another OS than the
    /// node's (kubelet: predicate.go rejectPodAdmissionBasedOnOSField).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub os: Option<PodOs>,
}

/// `spec.os`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PodOs {
    /// "linux" or "windows" (the API server accepts nothing else).
    #[serde(default, deserialize_with = "nullable")]
    pub name: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Container {
    #[serde(default, deserialize_with = "nullable")]
    pub name: String,
    #[serde(default, deserialize_with = "nullable")]
    pub image: String,
    /// Never, IfNotPresent or Always; unset means Always for a `:latest` (or untagged)
    /// image and IfNotPresent otherwise, as the API server defaults it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_policy: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    pub command: Vec<String>,
    #[serde(default, deserialize_with = "nullable")]
    pub args: Vec<String>,
    #[serde(default, deserialize_with = "nullable")]
    pub env: Vec<EnvVar>,
    #[serde(default)]
    pub working_dir: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    pub resources: ResourceRequirements,
    /// Only for init containers: "Always" makes it a sidecar (restartable init container),
    /// which changes how the pod's requests add up (KEP-753).
    #[serde(default)]
    pub restart_policy: Option<String>,
    /// The ports the container exposes. Only a port with a `hostPort` claims anything on
    /// the node (see [`Pod::host_ports`]).
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub ports: Vec<ContainerPort>,
}

/// One of a container's `ports`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerPort {
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "String::is_empty"
    )]
    pub name: String,
    #[serde(default)]
    pub container_port: i32,
    /// The node port the container binds; 0 (unset) claims none.
    #[serde(default)]
    pub host_port: i32,
    /// "TCP", "UDP" or "SCTP"; "" reads as TCP (the API server defaults it so).
    #[serde(default, deserialize_with = "nullable")]
    pub protocol: String,
    /// The node address the host port is bound on; "" reads as every address (0.0.0.0).
    #[serde(
        rename = "hostIP",
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "String::is_empty"
    )]
    pub host_ip: String,
}

impl Container {
    /// The pull policy in effect (the API server's default where unset).
    pub fn pull_policy(&self) -> &str {
        if let Some(policy) = self.image_pull_policy.as_deref() {
            return policy;
        }
        if self.image.contains('@') {
            // Pinned by digest: what is there cannot change.
            return "IfNotPresent";
        }
        // The tag follows the last ':' of the last path part (a registry port is not one).
        let name = self.image.rsplit('/').next().unwrap_or("");
        match name.split_once(':') {
            Some((_, tag)) if tag != "latest" => "IfNotPresent",
            _ => "Always",
        }
    }

    /// A sidecar: an init container with `restartPolicy: Always` that keeps running beside
    /// the regular containers (resourcehelper isRestartableInitContainer).
    pub fn is_restartable_init(&self) -> bool {
        self.restart_policy.as_deref() == Some("Always")
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EnvVar {
    #[serde(default, deserialize_with = "nullable")]
    pub name: String,
    #[serde(default)]
    pub value: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceRequirements {
    #[serde(default, deserialize_with = "nullable")]
    pub requests: ResourceList,
    #[serde(default, deserialize_with = "nullable")]
    pub limits: ResourceList,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Volume {
    #[serde(default, deserialize_with = "nullable")]
    pub name: String,
    #[serde(default)]
    pub empty_dir: Option<EmptyDirVolumeSource>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EmptyDirVolumeSource {
    /// "" (node disk) or "Memory" (tmpfs, charged to the pod's memory).
    #[serde(default, deserialize_with = "nullable")]
    pub medium: String,
    #[serde(default)]
    pub size_limit: Option<Quantity>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Toleration {
    #[serde(default, deserialize_with = "nullable")]
    pub key: String,
    /// "Exists" or "Equal" ("" means "Equal").
    #[serde(default, deserialize_with = "nullable")]
    pub operator: String,
    #[serde(default, deserialize_with = "nullable")]
    pub value: String,
    /// "" matches every effect.
    #[serde(default, deserialize_with = "nullable")]
    pub effect: String,
    #[serde(default)]
    pub toleration_seconds: Option<i64>,
}

impl Toleration {
    /// Whether this toleration tolerates a taint (k8s.io/api core/v1 Toleration.ToleratesTaint:
    /// an empty effect matches all effects, an empty key with `Exists` matches all keys).
    pub fn tolerates(&self, key: &str, value: &str, effect: &str) -> bool {
        if !self.effect.is_empty() && self.effect != effect {
            return false;
        }
        if !self.key.is_empty() && self.key != key {
            return false;
        }
        match self.operator.as_str() {
            "Exists" => true,
            "" | "Equal" => self.value == value,
            _ => false,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodStatus {
    #[serde(default)]
    pub phase: Option<String>,
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub message: Option<String>,
    #[serde(default)]
    pub qos_class: Option<String>,
    #[serde(default)]
    pub start_time: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    pub container_statuses: Vec<ContainerStatus>,
    #[serde(default, deserialize_with = "nullable")]
    pub init_container_statuses: Vec<ContainerStatus>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerStatus {
    #[serde(default, deserialize_with = "nullable")]
    pub name: String,
    #[serde(default, deserialize_with = "nullable")]
    pub image: String,
    /// The runtime's image reference (e.g. "docker.io/library/nginx@sha256:…" or "sha256:…").
    #[serde(rename = "imageID", default, deserialize_with = "nullable")]
    pub image_id: String,
    #[serde(rename = "containerID", default)]
    pub container_id: Option<String>,
    #[serde(default)]
    pub ready: bool,
    #[serde(default)]
    pub started: Option<bool>,
    #[serde(default)]
    pub restart_count: i32,
}

/// `kubectl get pods -o json` output (kind PodList or List).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodList {
    #[serde(default, deserialize_with = "nullable")]
    pub items: Vec<Pod>,
}

/// The resource names the QoS class looks at (qos.go supportedQoSComputeResources).
const QOS_COMPUTE_RESOURCES: [&str; 2] = ["cpu", "memory"];

/// Resources that may be set at pod level (component-helpers IsSupportedPodLevelResource).
pub(crate) fn is_pod_level_resource(name: &str) -> bool {
    QOS_COMPUTE_RESOURCES.contains(&name) || name.starts_with("hugepages-")
}

/// The QoS class of pod-level resources (kubelet: qos resourceQOS on `spec.resources`):
/// for cpu and memory alike, a request must equal its limit for Guaranteed, and both be
/// zero for BestEffort; any mismatch, or one resource set and the other not, is Burstable.
fn pod_level_qos(resources: &ResourceRequirements) -> QosClass {
    let mut class = None;
    for name in QOS_COMPUTE_RESOURCES {
        let request = resources.requests.get(name).copied().unwrap_or_default();
        let limit = resources.limits.get(name).copied().unwrap_or_default();
        if request != limit {
            return QosClass::Burstable;
        }
        let this = if request.is_zero() {
            QosClass::BestEffort
        } else {
            QosClass::Guaranteed
        };
        match class {
            None => class = Some(this),
            Some(first) if first != this => return QosClass::Burstable,
            Some(_) => {}
        }
    }
    class.unwrap_or(QosClass::BestEffort)
}

impl Pod {
    /// The pod's namespace, "default" when unset.
    pub fn namespace(&self) -> &str {
        if self.metadata.namespace.is_empty() {
            "default"
        } else {
            &self.metadata.namespace
        }
    }

    /// "namespace/name", the key the kubelet logs and the agent reports pods by.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace(), self.metadata.name)
    }

    /// `spec.priority`, 0 when unset (the kubelet's eviction ranking treats a missing
    /// priority as the default priority 0).
    pub fn priority(&self) -> i32 {
        self.spec.priority.unwrap_or(0)
    }

    /// `spec.terminationGracePeriodSeconds`, the API default (30 s) when unset.
    pub fn termination_grace_period_seconds(&self) -> i64 {
        self.spec
            .termination_grace_period_seconds
            .unwrap_or(DEFAULT_TERMINATION_GRACE_PERIOD_SECONDS)
    }

    /// A static pod: its source annotation is present and is not the API server
    /// (kubelet: pkg/kubelet/types IsStaticPod).
    pub fn is_static(&self) -> bool {
        self.metadata
            .annotations
            .get(CONFIG_SOURCE_ANNOTATION)
            .is_some_and(|source| source != API_SERVER_SOURCE)
    }

    /// The API server's mirror of a static pod (kubelet: pkg/kubelet/types IsMirrorPod).
    pub fn is_mirror(&self) -> bool {
        self.metadata
            .annotations
            .contains_key(CONFIG_MIRROR_ANNOTATION)
    }

    /// Critical pods are never evicted by the eviction manager and may preempt others at
    /// admission (kubelet: pkg/kubelet/types IsCriticalPod).
    pub fn is_critical(&self) -> bool {
        self.is_static() || self.is_mirror() || self.priority() >= SYSTEM_CRITICAL_PRIORITY
    }

    /// A critical pod of priority class system-node-critical (kubelet IsNodeCriticalPod).
    pub fn is_node_critical(&self) -> bool {
        self.is_critical() && self.spec.priority_class_name.as_deref() == Some(SYSTEM_NODE_CRITICAL)
    }

    /// The pod has finished (phase Succeeded or Failed) and holds no resources.
    pub fn is_terminal(&self) -> bool {
        matches!(
            self.status.phase.as_deref(),
            Some("Succeeded") | Some("Failed")
        )
    }

    /// The ports the pod claims on the node (scheduler util GetHostPorts, which the
    /// NodePorts predicate and the node's used-port table both read): those with a
    /// `hostPort` above 0, of the sidecars (init containers with `restartPolicy: Always`,
    /// the only ones running for the pod's whole life) then of the regular containers.
    /// A port with a `containerPort` alone claims nothing, whatever network the runtime
    /// gives the pod.
    pub fn host_ports(&self) -> impl Iterator<Item = &ContainerPort> {
        let sidecars = self
            .spec
            .init_containers
            .iter()
            .filter(|c| c.is_restartable_init());
        sidecars
            .chain(&self.spec.containers)
            .flat_map(|c| &c.ports)
            .filter(|p| p.host_port > 0)
    }

    /// Regular containers then init containers.
    pub fn all_containers(&self) -> impl Iterator<Item = &Container> {
        self.spec
            .containers
            .iter()
            .chain(self.spec.init_containers.iter())
    }

    /// The QoS class, computed, never read from the status (kubelet: pkg/apis/core/v1/helper/qos
    /// ComputePodQOS). With pod-level resources it is theirs alone (see
    /// [`pod_level_qos`]). Otherwise from the containers: BestEffort when no container
    /// sets a positive cpu/memory request or limit; Guaranteed when every container (init
    /// containers included) sets positive cpu and memory limits and the summed requests
    /// equal the summed limits for each of them; Burstable otherwise. Overhead never
    /// counts.
    pub fn qos_class(&self) -> QosClass {
        if let Some(resources) = &self.spec.resources {
            return pod_level_qos(resources);
        }
        let mut requests: BTreeMap<&str, Quantity> = BTreeMap::new();
        let mut limits: BTreeMap<&str, Quantity> = BTreeMap::new();
        let mut guaranteed = true;
        for container in self.all_containers() {
            let positive = |list: &BTreeMap<String, Quantity>, name: &str| {
                list.get(name).copied().filter(|q| *q > Quantity::ZERO)
            };
            let mut limits_found = 0;
            for name in QOS_COMPUTE_RESOURCES {
                if let Some(q) = positive(&container.resources.requests, name) {
                    *requests.entry(name).or_default() =
                        requests.get(name).copied().unwrap_or_default() + q;
                }
                if let Some(q) = positive(&container.resources.limits, name) {
                    limits_found += 1;
                    *limits.entry(name).or_default() =
                        limits.get(name).copied().unwrap_or_default() + q;
                }
            }
            if limits_found < QOS_COMPUTE_RESOURCES.len() {
                guaranteed = false;
            }
        }
        if requests.is_empty() && limits.is_empty() {
            return QosClass::BestEffort;
        }
        let matching = requests
            .iter()
            .all(|(name, req)| limits.get(name) == Some(req));
        if guaranteed && matching && requests.len() == limits.len() {
            QosClass::Guaranteed
        } else {
            QosClass::Burstable
        }
    }

    /// Whether the pod sets pod-level requests or limits for a resource that supports
    /// them (component-helpers IsPodLevelResourcesSet).
    pub fn has_pod_level_resources(&self) -> bool {
        self.spec.resources.as_ref().is_some_and(|r| {
            r.requests
                .keys()
                .chain(r.limits.keys())
                .any(|name| is_pod_level_resource(name))
        })
    }

    /// The pod-level request for `resource`, when set and supported at pod level.
    fn pod_level_request(&self, resource: &str) -> Option<Quantity> {
        if !is_pod_level_resource(resource) {
            return None;
        }
        self.spec
            .resources
            .as_ref()?
            .requests
            .get(resource)
            .copied()
    }

    /// The pod's request for `resource` as admission counts it (component-helpers
    /// PodRequests): the containers' aggregate (KEP-753: the larger of steady state, with
    /// sidecars, and the peak during initialisation), replaced by the pod-level request
    /// where one is set for a resource that supports it, plus the pod overhead.
    pub fn requests(&self, resource: &str) -> Quantity {
        let own = self.pod_level_request(resource).unwrap_or_else(|| {
            self.aggregate(|c| c.resources.requests.get(resource).copied())
                .unwrap_or_default()
        });
        own + self.overhead(resource)
    }

    /// The pod's request for `resource` as eviction ranking counts it (kubelet:
    /// GetResourceRequestQuantity): with pod-level resources, only the pod-level requests
    /// count (none for the resources they do not cover, e.g. ephemeral-storage);
    /// otherwise the containers' aggregate; the overhead is added only to a request that
    /// is not zero.
    pub fn ranking_request(&self, resource: &str) -> Quantity {
        let own = if self.has_pod_level_resources() {
            self.pod_level_request(resource).unwrap_or_default()
        } else {
            self.aggregate(|c| c.resources.requests.get(resource).copied())
                .unwrap_or_default()
        };
        if own.is_zero() {
            own
        } else {
            own + self.overhead(resource)
        }
    }

    fn overhead(&self, resource: &str) -> Quantity {
        self.spec
            .overhead
            .get(resource)
            .copied()
            .unwrap_or_default()
    }

    /// The pod's effective limit for `resource`, or `None` when unlimited. A pod-level
    /// limit wins where set; otherwise the containers' aggregate, and only when every
    /// container (init containers included) sets one: a pod is bounded only when every
    /// container is (kubelet: pkg/kubelet/cm ResourceConfigForPod cpuLimitsDeclared /
    /// memoryLimitsDeclared). A limit includes the pod overhead (component-helpers
    /// PodLimits adds it to non-zero limits).
    pub fn limits(&self, resource: &str) -> Option<Quantity> {
        let pod_level = is_pod_level_resource(resource)
            .then_some(self.spec.resources.as_ref())
            .flatten()
            .and_then(|r| r.limits.get(resource).copied());
        let own = match pod_level {
            Some(limit) => limit,
            None => {
                let every_container_limited = self.all_containers().all(|c| {
                    c.resources
                        .limits
                        .get(resource)
                        .is_some_and(|q| !q.is_zero())
                });
                if !every_container_limited {
                    return None;
                }
                self.aggregate(|c| c.resources.limits.get(resource).copied())?
            }
        };
        Some(if own.is_zero() {
            own
        } else {
            own + self.overhead(resource)
        })
    }

    /// KEP-753 aggregation of one resource over the containers; `None` when the pod has
    /// no container at all.
    pub(crate) fn aggregate(
        &self,
        of: impl Fn(&Container) -> Option<Quantity>,
    ) -> Option<Quantity> {
        if self.spec.containers.is_empty() && self.spec.init_containers.is_empty() {
            return None;
        }
        let mut steady: Quantity = self.spec.containers.iter().filter_map(&of).sum();
        let mut sidecars = Quantity::ZERO;
        let mut init_peak = Quantity::ZERO;
        for init in &self.spec.init_containers {
            let own = of(init).unwrap_or_default();
            let during_init = if init.is_restartable_init() {
                steady = steady + own;
                sidecars = sidecars + own;
                sidecars
            } else {
                own + sidecars
            };
            init_peak = init_peak.max(during_init);
        }
        Some(steady.max(init_peak))
    }

    /// Whether a container of this pod runs `image_id_or_ref`: compared with the runtime's
    /// image references in the status and the images named in the spec (image GC keeps
    /// such images).
    pub fn uses_image(&self, image_id_or_ref: &str) -> bool {
        let statuses = self
            .status
            .container_statuses
            .iter()
            .chain(&self.status.init_container_statuses);
        statuses
            .flat_map(|s| [s.image_id.as_str(), s.image.as_str()])
            .chain(self.all_containers().map(|c| c.image.as_str()))
            .any(|image| !image.is_empty() && image == image_id_or_ref)
    }
}

#[cfg(test)]
mod tests;
