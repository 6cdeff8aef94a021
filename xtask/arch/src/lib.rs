//! The architecture check behind `cargo xtask arch`: the import graph of `monitor`,
//! `monitor-policy` and the developer commands (`xtask`, `monitor-bench`, this crate),
//! checked from their source text.
//!
//! One rule, read from each crate's `src` without compiling anything (so the check is
//! quick and can run before the build): no import circle between modules, neither among
//! a crate's top-level modules ("units") nor among the direct children of each of its
//! layered units ([`CRATES`]). Modules in a circle can only be understood, tested and moved
//! together. (That the policy does no I/O is the compiler's and clippy's business: its
//! crate depends on nothing that does, and `monitor/policy/clippy.toml` forbids the
//! filesystem, the environment and the clocks.)
//!
//! The reading is lexical (proc-macro2's lexer), not a parse: comments and string
//! literals are dropped, `#[cfg(test)]` items and test files are skipped, then `use` trees
//! and inline `crate::` / `super::` / `self::` / `child_module::` paths (macro arguments
//! included) are collected and resolved to the module (file) they name.
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use anyhow::{Context, Result};

mod graph;
mod lex;
mod modules;
#[cfg(test)]
mod tests;

pub use graph::{Circle, Ref};
use graph::{circles_of, graph_of};
use modules::{Module, analyse_files, child_of, resolve, unit_of};

/// The checked crates: the source tree (relative to the workspace root), and the units
/// whose direct children must not form a circle among themselves either.
const CRATES: &[(&str, &[&str])] = &[
    (
        "monitor/src",
        &[
            "runtime", "sync", "notify", "observe", "config", "api", "simulate",
        ],
    ),
    ("monitor/policy/src", &[]),
    ("xtask/src", &["vm", "dist"]),
    ("xtask/bench/src", &[]),
    ("xtask/arch/src", &[]),
];

/// Checks every crate of [`CRATES`] in the workspace at `workspace`, as one report.
pub fn check(workspace: &Path) -> Result<Report> {
    let mut report = Report::default();
    for (dir, layered) in CRATES {
        let files = read_tree(&workspace.join(dir))?;
        report.merge(check_tree(&files, dir, layered).map_err(|e| anyhow::anyhow!("{dir}/{e}"))?);
    }
    Ok(report)
}

/// Every `.rs` file under `dir`, by its path relative to `dir` (with `/`), with its text.
fn read_tree(dir: &Path) -> Result<BTreeMap<String, String>> {
    fn walk(dir: &Path, prefix: &str, out: &mut BTreeMap<String, String>) -> Result<()> {
        for entry in std::fs::read_dir(dir).with_context(|| format!("reading {dir:?}"))? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = entry.path();
            if entry.file_type()?.is_dir() {
                walk(&path, &format!("{prefix}{name}/"), out)?;
            } else if name.ends_with(".rs") {
                let text =
                    std::fs::read_to_string(&path).with_context(|| format!("reading {path:?}"))?;
                out.insert(format!("{prefix}{name}"), text);
            }
        }
        Ok(())
    }
    let mut files = BTreeMap::new();
    walk(dir, "", &mut files)?;
    Ok(files)
}

/// What the check found.
#[derive(Debug, Default)]
pub struct Report {
    /// Modules read (test files excluded).
    pub modules: usize,
    /// Distinct module-to-module references.
    pub edges: usize,
    /// The top-level modules, whose graph was checked.
    pub units: Vec<String>,
    /// The layered units whose children's graph was checked too.
    pub layered: Vec<String>,
    pub circles: Vec<Circle>,
}

impl Report {
    pub fn ok(&self) -> bool {
        self.circles.is_empty()
    }

    /// Adds another crate's findings.
    fn merge(&mut self, other: Report) {
        self.modules += other.modules;
        self.edges += other.edges;
        self.units.extend(other.units);
        self.layered.extend(other.layered);
        self.circles.extend(other.circles);
    }

    /// What was checked, one line per finding, and the summary line.
    pub fn lines(&self) -> Vec<String> {
        // What the rules cover; the findings and the counts follow.
        let mut checked = format!(
            "arch: rules: no import circle among the {} top-level modules",
            self.units.len()
        );
        if !self.layered.is_empty() {
            checked += &format!(" nor among the children of {}", self.layered.join(", "));
        }
        let mut lines = vec![checked];
        lines.extend(self.circles.iter().map(Circle::to_string));
        lines.push(format!(
            "arch: {}, {}, {}",
            plural(self.modules, "module"),
            plural(self.edges, "edge"),
            plural(self.circles.len(), "circle"),
        ));
        lines
    }
}

/// `n` of `what`: "1 circle", "2 circles".
pub fn plural(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

/// The check over an in-memory tree: file paths relative to the crate's `src` (with `/`),
/// shown in findings as `{shown_dir}/{path}`; the children of each of `layered` are
/// checked among themselves too.
/// A file that does not lex is an error naming it.
pub fn check_tree(
    files: &BTreeMap<String, String>,
    shown_dir: &str,
    layered: &[&str],
) -> Result<Report, String> {
    let sources = analyse_files(files)?;
    let known: BTreeSet<Module> = sources.iter().map(|s| s.module.clone()).collect();

    // Every reference that leaves its module, in file then line order (so the evidence
    // shown for an edge is its first reference).
    let mut refs: Vec<(Module, Module, Ref)> = Vec::new();
    for source in &sources {
        for path in &source.paths {
            let Some(target) = resolve(&source.module, &path.segments, &known) else {
                continue;
            };
            if target != source.module {
                let r = Ref {
                    file: format!("{shown_dir}/{}", source.file),
                    line: path.line,
                    path: path.segments.join("::"),
                };
                refs.push((source.module.clone(), target, r));
            }
        }
    }
    let edges: BTreeSet<(&Module, &Module)> = refs.iter().map(|(a, b, _)| (a, b)).collect();

    let units: BTreeSet<String> = known.iter().map(|m| unit_of(m)).collect();
    let mut circles = circles_of(&graph_of(&refs, |m| Some(unit_of(m))));
    let layered: Vec<String> = layered
        .iter()
        .filter(|p| units.contains(**p))
        .map(|p| p.to_string())
        .collect();
    for parent in &layered {
        circles.extend(circles_of(&graph_of(&refs, |m| child_of(parent, m))));
    }

    Ok(Report {
        modules: known.len(),
        edges: edges.len(),
        units: units.into_iter().collect(),
        layered,
        circles,
    })
}
