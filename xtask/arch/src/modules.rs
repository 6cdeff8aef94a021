//! The modules of a crate's source tree: which module each file is, which files are test
//! code, and the paths (in `use` trees and inline) each module names, resolved to the
//! modules of the crate.
use std::collections::{BTreeMap, BTreeSet};
use std::ops::RangeInclusive;

use super::lex::{Lexed, Tok, Token, is_ident, is_path_sep, is_punct, lex};

/// A module path: `[]` is the crate root, `["policy", "rank"]` is `policy::rank`.
pub(super) type Module = Vec<String>;

pub(super) fn module_name(m: &[String]) -> String {
    if m.is_empty() {
        "crate".to_string()
    } else {
        m.join("::")
    }
}

/// The top-level module a module belongs to (the root is its own unit, `crate`).
pub(super) fn unit_of(m: &[String]) -> String {
    module_name(&m[..m.len().min(1)])
}

/// Within `parent`'s subtree, the direct child a module belongs to (or `parent` itself).
pub(super) fn child_of(parent: &str, m: &[String]) -> Option<String> {
    match m {
        [p] if p == parent => Some(parent.to_string()),
        [p, child, ..] if p == parent => Some(format!("{parent}::{child}")),
        _ => None,
    }
}

/// The module a source file is: `lib.rs`/`main.rs` the root, `a.rs` or `a/mod.rs` is `a`,
/// `a/b.rs` is `a::b`.
pub(super) fn module_of_file(file: &str) -> Module {
    let stem = file.strip_suffix(".rs").unwrap_or(file);
    let mut parts: Vec<String> = stem.split('/').map(str::to_string).collect();
    if parts.last().is_some_and(|p| p == "mod")
        || (parts.len() == 1 && (parts[0] == "lib" || parts[0] == "main"))
    {
        parts.pop();
    }
    parts
}

/// Test-only files by name: `tests.rs`, `*_tests.rs`, `fixtures.rs`, `testing.rs`.
pub(super) fn is_test_file_name(file: &str) -> bool {
    let name = file.rsplit('/').next().unwrap_or(file);
    matches!(name, "tests.rs" | "fixtures.rs" | "testing.rs") || name.ends_with("_tests.rs")
}

/// One non-test source file, read.
pub(super) struct Source {
    pub(super) file: String,
    pub(super) module: Module,
    /// Every path: `use` leaves and inline paths.
    pub(super) paths: Vec<RawPath>,
}

/// Reads every file, leaving out test files: by name, `#![cfg(test)]`, and the files of
/// modules declared `#[cfg(test)] mod x;` (with their own submodules).
pub(super) fn analyse_files(files: &BTreeMap<String, String>) -> Result<Vec<Source>, String> {
    let lexed = files
        .iter()
        .map(|(f, text)| Ok((f, lex(text).map_err(|e| format!("{f}: {e}"))?)))
        .collect::<Result<BTreeMap<&String, Lexed>, String>>()?;
    let mut test_modules: BTreeSet<Module> = BTreeSet::new();
    let mut test_files: BTreeSet<String> = BTreeSet::new();
    for (file, lexed) in &lexed {
        let dir = file.rsplit_once('/').map_or("", |(d, _)| d);
        for declared in &lexed.test_modules {
            match &declared.path_attr {
                // `#[path]` is relative to the declaring file's directory.
                Some(p) if dir.is_empty() => test_files.insert(p.clone()),
                Some(p) => test_files.insert(format!("{dir}/{p}")),
                None => {
                    let mut m = module_of_file(file);
                    m.push(declared.name.clone());
                    test_modules.insert(m)
                }
            };
        }
    }
    Ok(lexed
        .into_iter()
        .filter_map(|(file, lexed)| {
            let module = module_of_file(file);
            let in_test_module = (1..=module.len()).any(|n| test_modules.contains(&module[..n]));
            if lexed.all_test
                || in_test_module
                || is_test_file_name(file)
                || test_files.contains(file.as_str())
            {
                return None;
            }
            let (uses, inline) = collect_paths(&lexed.code);
            let paths = uses
                .iter()
                .flat_map(|u| u.leaves.iter().cloned())
                .chain(inline)
                .collect();
            Some(Source {
                file: file.clone(),
                module,
                paths,
            })
        })
        .collect())
}

/// A path as written (a grouped `use` expanded to one path per leaf), and its line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct RawPath {
    pub(super) segments: Vec<String>,
    pub(super) line: usize,
}

/// One `use` statement: its expanded leaves and the lines it spans.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct UseStmt {
    pub(super) leaves: Vec<RawPath>,
    pub(super) lines: RangeInclusive<usize>,
}

/// The `use` statements and the inline paths (`a::b::c` outside `use`) of some code.
pub(super) fn collect_paths(code: &[Token]) -> (Vec<UseStmt>, Vec<RawPath>) {
    let mut uses = Vec::new();
    let mut inline = Vec::new();
    let mut i = 0;
    while i < code.len() {
        let prev = i.checked_sub(1).and_then(|p| code.get(p));
        if is_ident(code.get(i), "use") && !is_path_sep(prev) {
            let mut leaves = Vec::new();
            let after = use_tree(code, i + 1, &mut Vec::new(), &mut leaves);
            let end = (after..code.len())
                .find(|&k| is_punct(code.get(k), ';'))
                .unwrap_or(code.len() - 1);
            uses.push(UseStmt {
                leaves,
                lines: code[i].line..=code[end].line,
            });
            i = end + 1;
            continue;
        }
        let Tok::Ident(first) = &code[i].tok else {
            i += 1;
            continue;
        };
        // `pub(in crate::a)` is a visibility, not a reference.
        let pub_in =
            is_ident(prev, "in") && is_punct(i.checked_sub(2).and_then(|p| code.get(p)), '(');
        if is_path_sep(prev) || !is_path_sep(code.get(i + 1)) || pub_in {
            i += 1;
            continue;
        }
        let mut segments = vec![first.clone()];
        let mut j = i + 1;
        while is_path_sep(code.get(j)) {
            let Some(Token {
                tok: Tok::Ident(s), ..
            }) = code.get(j + 1)
            else {
                break;
            };
            segments.push(s.clone());
            j += 2;
        }
        inline.push(RawPath {
            segments,
            line: code[i].line,
        });
        i = j;
    }
    (uses, inline)
}

/// Expands the use tree at `i` (`a::b`, `a::*`, `a::{b, c::{d, self}}`, `a as b`) under
/// `prefix` into `leaves`; returns the index after the tree.
pub(super) fn use_tree(
    code: &[Token],
    mut i: usize,
    prefix: &mut Vec<String>,
    leaves: &mut Vec<RawPath>,
) -> usize {
    let depth = prefix.len();
    if is_path_sep(code.get(i)) {
        i += 1;
    }
    while let Some(t) = code.get(i) {
        match &t.tok {
            Tok::Ident(name) if is_path_sep(code.get(i + 1)) => {
                prefix.push(name.clone());
                i += 2;
            }
            Tok::Ident(name) => {
                let mut segments = prefix.clone();
                // `{self, ..}` names the prefix itself.
                if name != "self" || prefix.is_empty() {
                    segments.push(name.clone());
                }
                leaves.push(RawPath {
                    segments,
                    line: t.line,
                });
                i += 1;
                if is_ident(code.get(i), "as") {
                    i += 2;
                }
                break;
            }
            Tok::Punct('*') => {
                leaves.push(RawPath {
                    segments: prefix.clone(),
                    line: t.line,
                });
                i += 1;
                break;
            }
            Tok::Punct('{') => {
                i += 1;
                while let Some(t) = code.get(i) {
                    match t.tok {
                        Tok::Punct('}') => {
                            i += 1;
                            break;
                        }
                        Tok::Punct(',') => i += 1,
                        _ => {
                            let before = i;
                            i = use_tree(code, i, prefix, leaves).max(before + 1);
                        }
                    }
                }
                break;
            }
            _ => break,
        }
    }
    prefix.truncate(depth);
    i
}

/// The module of the crate a path written in module `from` names, if it names one:
/// `crate::`, `super::`, `self::` and child-module paths, resolved to the longest prefix
/// that is a module of `known` (`crate::a::b::C` is `a::b` when that has a file, else `a`).
/// Paths into other crates, and locals, are `None`.
pub(super) fn resolve(
    from: &[String],
    segments: &[String],
    known: &BTreeSet<Module>,
) -> Option<Module> {
    let first = segments.first()?;
    let (mut full, rest) = match first.as_str() {
        "crate" => (Vec::new(), &segments[1..]),
        "self" | "super" => {
            let n = segments
                .iter()
                .take_while(|s| *s == "self" || *s == "super")
                .count();
            let mut base = from.to_vec();
            for s in &segments[..n] {
                if s == "super" {
                    base.pop()?;
                }
            }
            (base, &segments[n..])
        }
        // A child module, named as in `use cgroups::CgroupTree;` in `runtime/mod.rs`.
        child if known.contains(&child_module(from, child)) => (from.to_vec(), segments),
        _ => return None,
    };
    full.extend(rest.iter().cloned());
    let module = (0..=full.len())
        .rev()
        .map(|n| full[..n].to_vec())
        .find(|m| known.contains(m))
        .unwrap_or_default();
    Some(module)
}

pub(super) fn child_module(parent: &[String], child: &str) -> Module {
    let mut m = parent.to_vec();
    m.push(child.to_string());
    m
}
