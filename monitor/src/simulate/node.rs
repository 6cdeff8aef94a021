//! The Node object subset the simulation needs: `metadata.name`, `spec.taints`,
//! `status.capacity` and `status.allocatable` (as printed by `kubectl get node NAME -o json`).
//!
//! `--node` (and a scenario's `node:`) also takes what `kubectl get nodes -o json` prints,
//! a `List`/`NodeList`, when it holds exactly one node: a list of several would leave it
//! unclear which node is simulated, so it is refused rather than silently cut to one.
use std::collections::BTreeMap;

use serde::Deserialize;

use super::error::{SimulateError, join_field};
use crate::policy::admission::Taint;
use crate::policy::quantity::Quantity;

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct Node {
    /// "Node", or "" in a hand-written document.
    pub(crate) kind: String,
    pub(crate) metadata: NodeMeta,
    pub(crate) spec: NodeSpec,
    pub(crate) status: NodeStatus,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct NodeMeta {
    pub(crate) name: String,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct NodeSpec {
    /// Read by admission: a pod that does not tolerate a NoExecute taint is rejected.
    pub(crate) taints: Vec<Taint>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct NodeStatus {
    pub(crate) capacity: BTreeMap<String, Quantity>,
    pub(crate) allocatable: BTreeMap<String, Quantity>,
}

impl Node {
    pub(crate) fn capacity(&self, resource: &str) -> Option<Quantity> {
        self.status.capacity.get(resource).copied()
    }

    #[cfg(test)]
    pub(crate) fn allocatable(&self, resource: &str) -> Option<Quantity> {
        self.status.allocatable.get(resource).copied()
    }

    /// The node's name, `None` when the document gives none.
    pub(crate) fn name(&self) -> Option<&str> {
        Some(self.metadata.name.as_str()).filter(|n| !n.is_empty())
    }
}

/// A `--node` document as given: a Node, or a list of nodes. The Node's own fields are
/// repeated here (not flattened) so that errors inside them keep their field path.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct NodeDocument {
    kind: String,
    /// Present in a list (`kind: List` or `NodeList`, or a kind-less `items:`).
    items: Option<Vec<Node>>,
    metadata: NodeMeta,
    spec: NodeSpec,
    status: NodeStatus,
}

const ONE_NODE: &str = "pass one Node (kubectl get node NAME -o json)";

impl NodeDocument {
    /// The one Node this document holds. `file` and `field` (the document's path inside
    /// `file`, "" for a whole file) name it in errors.
    pub(crate) fn into_node(self, file: &str, field: &str) -> Result<Node, SimulateError> {
        match (self.kind.as_str(), self.items) {
            ("List" | "NodeList", None) => Err(SimulateError::input(
                file,
                join_field(field, "items"),
                format!("missing: a {} without nodes; {ONE_NODE}", self.kind),
            )),
            ("List" | "NodeList" | "", Some(items)) => {
                let items_field = join_field(field, "items");
                let list = if self.kind.is_empty() {
                    "list".to_string()
                } else {
                    format!("a {}", self.kind)
                };
                match <[Node; 1]>::try_from(items) {
                    Ok([node]) => {
                        check_node_kind(&node.kind, file, &format!("{items_field}[0].kind"))?;
                        Ok(node)
                    }
                    Err(items) if items.is_empty() => Err(SimulateError::input(
                        file,
                        items_field,
                        format!("{list} with no nodes; {ONE_NODE}"),
                    )),
                    Err(items) => Err(SimulateError::input(
                        file,
                        items_field,
                        format!("{list} with {} nodes; {ONE_NODE}", items.len()),
                    )),
                }
            }
            (kind, _) => {
                check_node_kind(kind, file, &join_field(field, "kind"))?;
                Ok(Node {
                    kind: self.kind,
                    metadata: self.metadata,
                    spec: self.spec,
                    status: self.status,
                })
            }
        }
    }
}

/// A node's `kind` must be "Node" (or absent, in a hand-written document): anything else,
/// say a Pod or a PodList passed by mistake, would silently give an empty node.
fn check_node_kind(kind: &str, file: &str, field: &str) -> Result<(), SimulateError> {
    if kind.is_empty() || kind == "Node" {
        return Ok(());
    }
    Err(SimulateError::input(
        file,
        field,
        format!("{kind:?} is not a Node, NodeList or List of nodes; {ONE_NODE}"),
    ))
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;
    use crate::policy::quantity::parse_quantity;
    use crate::simulate::error::deserialize_document;

    fn q(text: &str) -> Quantity {
        parse_quantity(text).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    fn load(text: &str) -> Result<Node, SimulateError> {
        deserialize_document::<NodeDocument>(text, "node.json", "")?.into_node("node.json", "")
    }

    #[test]
    fn node_object_from_kubectl_loads_capacity_and_allocatable() {
        let text = r#"{"apiVersion":"v1","kind":"Node","metadata":{"name":"n1","labels":{"a":"b"}},
            "spec":{"taints":[{"key":"k","value":"v","effect":"NoExecute","timeAdded":"2024-01-01T00:00:00Z"}]},
            "status":{"capacity":{"memory":"10Gi","cpu":"4","pods":"110"},
                      "allocatable":{"memory":"8Gi","cpu":"3500m","pods":"110"},
                      "conditions":[]}}"#;
        let node = load(text).unwrap_or_else(|e| panic!("node: {e}"));
        assert_eq!(node.name(), Some("n1"));
        assert_eq!(node.capacity("memory"), Some(q("10Gi")));
        assert_eq!(node.allocatable("cpu"), Some(q("3500m")));
        assert_eq!(node.spec.taints[0].effect, "NoExecute");
    }

    #[rstest]
    #[case::node_list("NodeList")]
    #[case::list("List")]
    fn a_list_of_one_node_is_that_node(#[case] kind: &str) {
        // What `kubectl get nodes -o json` prints on a one-node cluster.
        let text = format!(
            r#"{{"apiVersion":"v1","kind":"{kind}","metadata":{{"resourceVersion":""}},
               "items":[{{"apiVersion":"v1","kind":"Node","metadata":{{"name":"only"}},
                          "status":{{"capacity":{{"memory":"10Gi","pods":"110"}}}}}}]}}"#
        );
        let node = load(&text).unwrap_or_else(|e| panic!("{kind}: {e}"));
        assert_eq!(node.name(), Some("only"));
        assert_eq!(node.capacity("memory"), Some(q("10Gi")));
    }

    #[test]
    fn a_hand_written_list_of_one_node_in_yaml_is_that_node() {
        let node = load("items:\n  - metadata: {name: only}\n    status: {capacity: {cpu: '2'}}\n")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(node.capacity("cpu"), Some(q("2")));
    }

    #[rstest]
    #[case::three_nodes(
        r#"{"kind":"List","items":[{"kind":"Node"},{"kind":"Node"},{"kind":"Node"}]}"#,
        "node.json: items: a List with 3 nodes; pass one Node (kubectl get node NAME -o json)"
    )]
    #[case::no_nodes(
        r#"{"kind":"NodeList","items":[]}"#,
        "node.json: items: a NodeList with no nodes; pass one Node (kubectl get node NAME -o json)"
    )]
    #[case::items_missing(
        r#"{"kind":"NodeList"}"#,
        "node.json: items: missing: a NodeList without nodes; pass one Node (kubectl get node NAME -o json)"
    )]
    #[case::a_pod_list(
        r#"{"kind":"List","items":[{"kind":"Pod","metadata":{"name":"web"}}]}"#,
        "node.json: items[0].kind: \"Pod\" is not a Node"
    )]
    #[case::a_pod(
        r#"{"kind":"Pod","metadata":{"name":"web"}}"#,
        "node.json: kind: \"Pod\" is not a Node"
    )]
    #[case::bad_quantity_in_an_item(
        r#"{"kind":"List","items":[{"status":{"capacity":{"cpu":"lots"}}}]}"#,
        "node.json: items[0].status.capacity.cpu: invalid value"
    )]
    fn refused_documents_name_the_file_and_field(#[case] text: &str, #[case] expected: &str) {
        let message = load(text).expect_err("must be refused").to_string();
        assert!(
            message.starts_with(expected),
            "{message:?} should start with {expected:?}"
        );
    }

    #[test]
    fn an_inline_list_names_its_field_in_the_scenario() {
        let value: serde_yaml_ng::Value =
            serde_yaml_ng::from_str("kind: NodeList\nitems: [{}, {}]\n")
                .unwrap_or_else(|e| panic!("{e}"));
        let doc: NodeDocument = serde_yaml_ng::from_value(value).unwrap_or_else(|e| panic!("{e}"));
        let message = doc
            .into_node("s.yaml", "steps[0].node")
            .expect_err("two nodes")
            .to_string();
        assert!(
            message.starts_with("s.yaml: steps[0].node.items: a NodeList with 2 nodes"),
            "{message}"
        );
    }
}
