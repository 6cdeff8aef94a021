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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::quantity::parse_quantity;

    fn q(text: &str) -> Quantity {
        parse_quantity(text).unwrap_or_else(|e| panic!("{text}: {e}"))
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
