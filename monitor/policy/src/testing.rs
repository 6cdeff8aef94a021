//! Builders shared by the policy's unit tests.
use super::pod::{Container, Pod, PodSpec, ResourceList, ResourceRequirements};
use super::quantity::parse_quantity;

/// "cpu=100m,memory=1Gi" → a resource list ("" is empty).
pub fn list(text: &str) -> ResourceList {
    text.split(',')
        .filter(|s| !s.is_empty())
        .map(|kv| {
            let (k, v) = kv
                .split_once('=')
                .unwrap_or_else(|| panic!("bad list {text}"));
            (
                k.to_string(),
                parse_quantity(v).unwrap_or_else(|e| panic!("{v}: {e}")),
            )
        })
        .collect()
}

/// A container with these requests and limits.
pub fn container(name: &str, requests: &str, limits: &str) -> Container {
    Container {
        name: name.into(),
        resources: ResourceRequirements {
            requests: list(requests),
            limits: list(limits),
        },
        ..Default::default()
    }
}

/// A one-container pod ("c") with these requests and limits.
pub fn pod(name: &str, requests: &str, limits: &str) -> Pod {
    let mut pod = Pod {
        spec: PodSpec {
            containers: vec![container("c", requests, limits)],
            ..Default::default()
        },
        ..Default::default()
    };
    pod.metadata.name = name.into();
    pod
}
