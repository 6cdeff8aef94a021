//! The Node object subset the simulation needs: `status.capacity` and
//! `status.allocatable` (as printed by `kubectl get node NAME -o json`).
use std::collections::BTreeMap;

use serde::Deserialize;

use crate::policy::quantity::Quantity;

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Node {
    pub metadata: NodeMeta,
    pub status: NodeStatus,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct NodeMeta {
    pub name: String,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct NodeStatus {
    pub capacity: BTreeMap<String, Quantity>,
    pub allocatable: BTreeMap<String, Quantity>,
}

impl Node {
    pub fn capacity(&self, resource: &str) -> Option<Quantity> {
        self.status.capacity.get(resource).copied()
    }

    pub fn allocatable(&self, resource: &str) -> Option<Quantity> {
        self.status.allocatable.get(resource).copied()
    }
}

/// Node allocatable as the kubelet computes it (pkg/kubelet/cm node_container_manager_linux.go
/// GetNodeAllocatableReservation + hardEvictionReservation): capacity − kube-reserved −
/// system-reserved − the hard eviction thresholds (memory.available reserves memory,
/// nodefs.available reserves ephemeral-storage), so that pods alone cannot push the node
/// past its own eviction threshold. `hard_eviction` maps a resource name to the resolved
/// threshold in base units. Never negative.
pub fn allocatable_from_capacity(
    capacity: &BTreeMap<String, Quantity>,
    system_reserved: &BTreeMap<String, Quantity>,
    kube_reserved: &BTreeMap<String, Quantity>,
    hard_eviction: &BTreeMap<String, i64>,
) -> BTreeMap<String, Quantity> {
    let mut allocatable = BTreeMap::new();
    for (resource, cap) in capacity {
        let mut value = *cap;
        for reserved in [system_reserved, kube_reserved] {
            if let Some(r) = reserved.get(resource) {
                value = value - *r;
            }
        }
        if let Some(bytes) = hard_eviction.get(resource) {
            value = value - Quantity::from_units(*bytes);
        }
        if value.is_negative() {
            value = Quantity::ZERO;
        }
        allocatable.insert(resource.clone(), value);
    }
    allocatable
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::quantity::parse_quantity;

    fn q(text: &str) -> Quantity {
        parse_quantity(text).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    #[test]
    fn seed_example_ten_gi_node_leaves_eight_gi_allocatable() {
        // The seeds' example: 10Gi of memory, system-reserved 1.5Gi (10% for the system plus
        // the eviction threshold), memory.available<500Mi: 10240 − 1536 − 500 = 8204Mi.
        let capacity = BTreeMap::from([("memory".to_string(), q("10Gi")), ("cpu".to_string(), q("4"))]);
        let system = BTreeMap::from([("memory".to_string(), q("1.5Gi"))]);
        let alloc = allocatable_from_capacity(&capacity, &system, &BTreeMap::new(), &BTreeMap::from([("memory".to_string(), 500 * 1024 * 1024)]));
        assert_eq!(alloc.get("memory"), Some(&q("8204Mi")));
        assert_eq!(alloc.get("cpu"), Some(&q("4")), "cpu has no reservation here");
    }

    #[test]
    fn reservations_larger_than_capacity_clamp_to_zero() {
        let capacity = BTreeMap::from([("memory".to_string(), q("1Gi"))]);
        let system = BTreeMap::from([("memory".to_string(), q("2Gi"))]);
        let alloc = allocatable_from_capacity(&capacity, &system, &system, &BTreeMap::new());
        assert_eq!(alloc.get("memory"), Some(&Quantity::ZERO));
    }

    #[test]
    fn node_object_from_kubectl_loads_capacity_and_allocatable() {
        let text = r#"{"apiVersion":"v1","kind":"Node","metadata":{"name":"n1","labels":{"a":"b"}},
            "status":{"capacity":{"memory":"10Gi","cpu":"4","pods":"110"},
                      "allocatable":{"memory":"8Gi","cpu":"3500m","pods":"110"},
                      "conditions":[]}}"#;
        let node: Node = serde_json::from_str(text).unwrap_or_else(|e| panic!("node: {e}"));
        assert_eq!(node.metadata.name, "n1");
        assert_eq!(node.capacity("memory"), Some(q("10Gi")));
        assert_eq!(node.allocatable("cpu"), Some(q("3500m")));
    }
}
