//! The graph of references between modules, its strongly connected components and one
//! circle per component, named with its evidence.
use std::collections::{BTreeMap, BTreeSet, VecDeque};

use super::modules::Module;

/// One reference from a file to another module: the evidence for an edge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ref {
    pub file: String,
    pub line: usize,
    /// The path as written (a grouped `use` expanded): `crate::manager::SyncSummary`.
    pub path: String,
}

/// A circle: its first node, then each step's next node and the reference that makes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Circle {
    pub start: String,
    pub steps: Vec<(String, Ref)>,
}

impl std::fmt::Display for Circle {
    /// `circle: a -> b (file:line path) -> a (file:line path)`
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "circle: {}", self.start)?;
        for (to, r) in &self.steps {
            write!(f, " -> {to} ({}:{} {})", r.file, r.line, r.path)?;
        }
        Ok(())
    }
}

/// Edges between nodes (modules mapped by `node`; `None` leaves a module out), each with
/// its first reference. Edges from a node to itself are left out.
pub(super) type Graph = BTreeMap<String, BTreeMap<String, Ref>>;

pub(super) fn graph_of(
    refs: &[(Module, Module, Ref)],
    node: impl Fn(&[String]) -> Option<String>,
) -> Graph {
    let mut graph = Graph::new();
    for (from, to, r) in refs {
        let (Some(a), Some(b)) = (node(from), node(to)) else {
            continue;
        };
        if a != b {
            graph
                .entry(a)
                .or_default()
                .entry(b)
                .or_insert_with(|| r.clone());
        }
    }
    graph
}

/// The strongly connected components of more than one node (Tarjan), each sorted.
pub(super) fn components(graph: &Graph) -> Vec<Vec<String>> {
    struct Tarjan<'g> {
        graph: &'g Graph,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on_stack: BTreeSet<&'g str>,
        found: Vec<Vec<String>>,
    }
    impl<'g> Tarjan<'g> {
        fn visit(&mut self, v: &'g str) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on_stack.insert(v);
            let graph = self.graph;
            for w in graph.get(v).into_iter().flat_map(|e| e.keys()) {
                if !self.index.contains_key(w.as_str()) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w.as_str()]);
                    self.low.insert(v, low);
                } else if self.on_stack.contains(w.as_str()) {
                    let low = self.low[v].min(self.index[w.as_str()]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    component.push(w.to_string());
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.found.push(component);
                }
            }
        }
    }
    let mut tarjan = Tarjan {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !tarjan.index.contains_key(v.as_str()) {
            tarjan.visit(v);
        }
    }
    tarjan.found.sort();
    tarjan.found
}

/// One circle per component: a closed walk from its first node through all its nodes
/// (shortest hops), so every module in the component is named with its evidence.
pub(super) fn circles_of(graph: &Graph) -> Vec<Circle> {
    components(graph)
        .into_iter()
        .map(|component| {
            let inside: BTreeSet<&str> = component.iter().map(String::as_str).collect();
            let start = component[0].clone();
            let mut steps: Vec<(String, Ref)> = Vec::new();
            let mut at = start.clone();
            for target in component[1..].iter().chain([&start]) {
                // Already passed on the way to an earlier one.
                if target != &start && steps.iter().any(|(n, _)| n == target) {
                    continue;
                }
                for (from, to) in shortest_path(graph, &inside, &at, target) {
                    steps.push((to.clone(), graph[&from][&to].clone()));
                }
                at = target.clone();
            }
            Circle { start, steps }
        })
        .collect()
}

/// The hops of a shortest path from `from` to `to` within `inside` (breadth first).
pub(super) fn shortest_path(
    graph: &Graph,
    inside: &BTreeSet<&str>,
    from: &str,
    to: &str,
) -> Vec<(String, String)> {
    let mut came_from: BTreeMap<&str, &str> = BTreeMap::new();
    let mut queue = VecDeque::from([from]);
    while let Some(v) = queue.pop_front() {
        for w in graph.get(v).into_iter().flat_map(|e| e.keys()) {
            if inside.contains(w.as_str()) && !came_from.contains_key(w.as_str()) && w != from {
                came_from.insert(w, v);
                queue.push_back(w);
            }
        }
        if came_from.contains_key(to) {
            break;
        }
    }
    let mut hops = Vec::new();
    let mut v = to;
    while let Some(&prev) = came_from.get(v) {
        hops.push((prev.to_string(), v.to_string()));
        if prev == from {
            break;
        }
        v = prev;
    }
    hops.reverse();
    hops
}
