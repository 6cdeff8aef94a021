//! `cargo xtask arch`: the import graph of `monitor` and `monitor-policy`, checked from
//! their source text.
//!
//! One rule, read from each crate's `src` without compiling anything (so the check is
//! quick and can run before the build): no import circle between modules, neither among
//! a crate's top-level modules ("units") nor among the direct children of each of its
//! layered units ([`CRATES`]). Modules in a circle can only be understood, tested and moved
//! together. (That the policy does no I/O is the compiler's and clippy's business: its
//! crate depends on nothing that does, and `monitor/policy/clippy.toml` forbids the
//! filesystem, the environment and the clocks.)
//!
//! The reading is lexical, not a Rust parser: comments and string literals are dropped,
//! `#[cfg(test)]` items and test files are skipped, then `use` trees and inline
//! `crate::` / `super::` / `self::` / `child_module::` paths are collected and resolved to
//! the module (file) they name.
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::ops::RangeInclusive;
use std::path::Path;

use anyhow::{Context, Result, bail};

use crate::cmd::workspace_root;

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
];

/// `cargo xtask arch`: prints the findings and the summary; fails when a rule is broken.
pub fn run() -> Result<()> {
    let root = workspace_root();
    let report = check(&root)?;
    for line in report.lines() {
        println!("{line}");
    }
    let io_crates = policy_io_dependencies(&root)?;
    println!(
        "arch: monitor-policy depends on {}",
        if io_crates.is_empty() {
            "no I/O crate".to_string()
        } else {
            io_crates.join(", ")
        }
    );
    if !report.ok() || !io_crates.is_empty() {
        bail!(
            "architecture check failed: {}, {}",
            plural(report.circles.len(), "import circle"),
            plural(io_crates.len(), "I/O crate"),
        );
    }
    Ok(())
}

/// Crates that do I/O (an async runtime, system calls), which the policy must not build on.
const IO_CRATES: &[&str] = &["tokio", "mio", "nix", "libc", "socket2", "rustix"];

/// The crates of [`IO_CRATES`] that `monitor-policy` depends on, directly or not (from
/// `cargo tree`, normal dependencies only: its tests may use anything).
pub fn policy_io_dependencies(workspace: &Path) -> Result<Vec<String>> {
    let out = crate::cmd::cargo()
        .current_dir(workspace)
        .args([
            "tree",
            "-p",
            "monitor-policy",
            "-e",
            "normal",
            "--prefix",
            "none",
        ])
        .output()
        .context("running cargo tree")?;
    if !out.status.success() {
        bail!(
            "cargo tree -p monitor-policy failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let found: BTreeSet<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| IO_CRATES.contains(name))
        .map(str::to_string)
        .collect();
    Ok(found.into_iter().collect())
}

/// Checks every crate of [`CRATES`] in the workspace at `workspace`, as one report.
pub fn check(workspace: &Path) -> Result<Report> {
    let mut report = Report::default();
    for (dir, layered) in CRATES {
        let files = read_tree(&workspace.join(dir))?;
        report.merge(check_tree(&files, dir, layered));
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

fn plural(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

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

/// The check over an in-memory tree: file paths relative to the crate's `src` (with `/`),
/// shown in findings as `{shown_dir}/{path}`; the children of each of `layered` are
/// checked among themselves too.
pub fn check_tree(files: &BTreeMap<String, String>, shown_dir: &str, layered: &[&str]) -> Report {
    let sources = analyse_files(files);
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

    Report {
        modules: known.len(),
        edges: edges.len(),
        units: units.into_iter().collect(),
        layered,
        circles,
    }
}

/// A module path: `[]` is the crate root, `["policy", "rank"]` is `policy::rank`.
type Module = Vec<String>;

fn module_name(m: &[String]) -> String {
    if m.is_empty() {
        "crate".to_string()
    } else {
        m.join("::")
    }
}

/// The top-level module a module belongs to (the root is its own unit, `crate`).
fn unit_of(m: &[String]) -> String {
    module_name(&m[..m.len().min(1)])
}

/// Within `parent`'s subtree, the direct child a module belongs to (or `parent` itself).
fn child_of(parent: &str, m: &[String]) -> Option<String> {
    match m {
        [p] if p == parent => Some(parent.to_string()),
        [p, child, ..] if p == parent => Some(format!("{parent}::{child}")),
        _ => None,
    }
}

/// The module a source file is: `lib.rs`/`main.rs` the root, `a.rs` or `a/mod.rs` is `a`,
/// `a/b.rs` is `a::b`.
fn module_of_file(file: &str) -> Module {
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
fn is_test_file_name(file: &str) -> bool {
    let name = file.rsplit('/').next().unwrap_or(file);
    matches!(name, "tests.rs" | "fixtures.rs" | "testing.rs") || name.ends_with("_tests.rs")
}

/// One non-test source file, read.
struct Source {
    file: String,
    module: Module,
    /// Every path: `use` leaves and inline paths.
    paths: Vec<RawPath>,
}

/// Reads every file, leaving out test files: by name, `#![cfg(test)]`, and the files of
/// modules declared `#[cfg(test)] mod x;` (with their own submodules).
fn analyse_files(files: &BTreeMap<String, String>) -> Vec<Source> {
    let lexed: BTreeMap<&String, Lexed> = files.iter().map(|(f, text)| (f, lex(text))).collect();
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
    lexed
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
        .collect()
}

// ---------------------------------------------------------------------------------------
// Lexing: tokens without comments, string contents or test code.

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Ident(String),
    /// `::`
    PathSep,
    /// A string literal's raw contents (only `#[path = "..."]` looks at it).
    Str(String),
    /// Numbers, char literals.
    Literal,
    Punct(char),
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Token {
    tok: Tok,
    line: usize,
}

fn is_ident(t: Option<&Token>, name: &str) -> bool {
    matches!(t, Some(Token { tok: Tok::Ident(n), .. }) if n == name)
}

fn is_punct(t: Option<&Token>, c: char) -> bool {
    matches!(t, Some(Token { tok: Tok::Punct(p), .. }) if *p == c)
}

fn is_path_sep(t: Option<&Token>) -> bool {
    matches!(
        t,
        Some(Token {
            tok: Tok::PathSep,
            ..
        })
    )
}

/// Splits Rust source into tokens, dropping comments (doc comments too) and keeping
/// string literals as single [`Tok::Str`] tokens, so that text inside either can never
/// look like a path.
fn tokenize(src: &str) -> Vec<Token> {
    let c: Vec<char> = src.chars().collect();
    let at = |i: usize| c.get(i).copied();
    let mut out = Vec::new();
    let mut line = 1;
    let mut i = 0;
    // Skips to the end of a literal, counting the lines it spans.
    let skip_to = |i: &mut usize, end: usize, line: &mut usize| {
        *line += c[*i..end.min(c.len())]
            .iter()
            .filter(|&&ch| ch == '\n')
            .count();
        *i = end;
    };
    while let Some(ch) = at(i) {
        let start_line = line;
        let mut push = |tok| {
            out.push(Token {
                tok,
                line: start_line,
            })
        };
        if ch == '\n' {
            line += 1;
            i += 1;
        } else if ch.is_whitespace() {
            i += 1;
        } else if ch == '/' && at(i + 1) == Some('/') {
            while at(i).is_some_and(|ch| ch != '\n') {
                i += 1;
            }
        } else if ch == '/' && at(i + 1) == Some('*') {
            // Block comments nest.
            let (mut depth, mut j) = (0, i);
            while j < c.len() {
                if c[j] == '/' && at(j + 1) == Some('*') {
                    depth += 1;
                    j += 2;
                } else if c[j] == '*' && at(j + 1) == Some('/') {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            skip_to(&mut i, j, &mut line);
        } else if ch == '"' {
            let end = string_end(&c, i + 1);
            push(Tok::Str(
                c[i + 1..end.saturating_sub(1).max(i + 1)].iter().collect(),
            ));
            skip_to(&mut i, end, &mut line);
        } else if ch == '\'' {
            // A char literal ('x', '\n', '\u{7f}'), or else a lifetime or label ('a).
            if at(i + 1) == Some('\\') {
                let mut j = i + 3;
                while at(j).is_some_and(|ch| ch != '\'') {
                    j += 1;
                }
                push(Tok::Literal);
                skip_to(&mut i, j + 1, &mut line);
            } else if at(i + 2) == Some('\'') {
                push(Tok::Literal);
                i += 3;
            } else {
                push(Tok::Punct('\''));
                i += 1;
            }
        } else if ch.is_alphabetic() || ch == '_' {
            let mut j = i;
            while at(j).is_some_and(|ch| ch.is_alphanumeric() || ch == '_') {
                j += 1;
            }
            let word: String = c[i..j].iter().collect();
            let hashes = (j..).take_while(|&k| at(k) == Some('#')).count();
            let raw_prefix = matches!(word.as_str(), "r" | "br" | "cr");
            if raw_prefix && at(j + hashes) == Some('"') {
                // r"..." / r#"..."#: ends at a quote followed by as many hashes.
                let body = j + hashes + 1;
                let close = (body..c.len())
                    .find(|&k| c[k] == '"' && (1..=hashes).all(|h| at(k + h) == Some('#')));
                let close = close.unwrap_or(c.len());
                push(Tok::Str(c[body..close].iter().collect()));
                skip_to(&mut i, close + 1 + hashes, &mut line);
            } else if word == "r" && hashes == 1 {
                // A raw identifier (r#type): the identifier is what follows.
                i = j + 1;
            } else if matches!(word.as_str(), "b" | "c") && matches!(at(j), Some('"' | '\'')) {
                // b"..", c"..", b'x': the literal is lexed next.
                i = j;
            } else {
                push(Tok::Ident(word));
                i = j;
            }
        } else if ch.is_ascii_digit() {
            let mut j = i;
            while at(j).is_some_and(|ch| {
                ch.is_alphanumeric()
                    || ch == '_'
                    || (ch == '.' && at(j + 1).is_some_and(|d| d.is_ascii_digit()))
            }) {
                j += 1;
            }
            push(Tok::Literal);
            i = j;
        } else if ch == ':' && at(i + 1) == Some(':') {
            push(Tok::PathSep);
            i += 2;
        } else {
            push(Tok::Punct(ch));
            i += 1;
        }
    }
    out
}

/// The index just past the closing quote of a string whose contents start at `i`.
fn string_end(c: &[char], mut i: usize) -> usize {
    while i < c.len() {
        match c[i] {
            '\\' => i += 2,
            '"' => return i + 1,
            _ => i += 1,
        }
    }
    c.len()
}

/// A module declared `#[cfg(test)] mod name;`: its file is test code.
#[derive(Debug, Clone, PartialEq, Eq)]
struct TestModule {
    name: String,
    /// Its `#[path = "..."]`, if any.
    path_attr: Option<String>,
}

/// A file's tokens with the test code taken out.
#[derive(Debug, Default)]
struct Lexed {
    code: Vec<Token>,
    test_modules: Vec<TestModule>,
    /// `#![cfg(test)]`: the whole file is test code.
    all_test: bool,
}

/// Tokenizes a file and drops every item under `#[cfg(test)]`: inline test modules,
/// test helpers, `mod tests;` declarations (noted in [`Lexed::test_modules`]). The code
/// after a test module is kept.
fn lex(src: &str) -> Lexed {
    let tokens = tokenize(src);
    let mut lexed = Lexed::default();
    let mut i = 0;
    while i < tokens.len() {
        let Some((after, inner, is_inner)) = attribute(&tokens, i) else {
            lexed.code.push(tokens[i].clone());
            i += 1;
            continue;
        };
        if !is_cfg_test(inner) {
            lexed.code.extend_from_slice(&tokens[i..after]);
            i = after;
            continue;
        }
        if is_inner {
            return Lexed {
                all_test: true,
                ..Lexed::default()
            };
        }
        // The item's other attributes, then the item.
        let mut item = after;
        let mut path_attr = None;
        while let Some((next, inner, _)) = attribute(&tokens, item) {
            if let [t0, t1, t2] = inner
                && is_ident(Some(t0), "path")
                && is_punct(Some(t1), '=')
                && let Tok::Str(p) = &t2.tok
            {
                path_attr = Some(p.clone());
            }
            item = next;
        }
        if let Some(name) = out_of_line_module(&tokens[item..]) {
            lexed.test_modules.push(TestModule { name, path_attr });
        }
        i = item_end(&tokens, item);
    }
    lexed
}

/// An attribute starting at `i` (`#[...]` or `#![...]`): the index after it, its inside,
/// and whether it is an inner attribute.
fn attribute(tokens: &[Token], i: usize) -> Option<(usize, &[Token], bool)> {
    if !is_punct(tokens.get(i), '#') {
        return None;
    }
    let is_inner = is_punct(tokens.get(i + 1), '!');
    let open = i + 1 + usize::from(is_inner);
    if !is_punct(tokens.get(open), '[') {
        return None;
    }
    let close = matching(tokens, open, '[', ']')?;
    Some((close + 1, &tokens[open + 1..close], is_inner))
}

fn is_cfg_test(inner: &[Token]) -> bool {
    let words: Vec<&Tok> = inner.iter().map(|t| &t.tok).collect();
    words
        == [
            &Tok::Ident("cfg".into()),
            &Tok::Punct('('),
            &Tok::Ident("test".into()),
            &Tok::Punct(')'),
        ]
}

/// The index of the bracket closing the one at `open`.
fn matching(tokens: &[Token], open: usize, opening: char, closing: char) -> Option<usize> {
    let mut depth = 0usize;
    for (k, t) in tokens.iter().enumerate().skip(open) {
        if is_punct(Some(t), opening) {
            depth += 1;
        } else if is_punct(Some(t), closing) {
            depth -= 1;
            if depth == 0 {
                return Some(k);
            }
        }
    }
    None
}

/// `[pub[(..)]] mod name;`: the name.
fn out_of_line_module(tokens: &[Token]) -> Option<String> {
    let mut i = 0;
    if is_ident(tokens.first(), "pub") {
        i = 1;
        if is_punct(tokens.get(1), '(') {
            i = matching(tokens, 1, '(', ')')? + 1;
        }
    }
    match (tokens.get(i), tokens.get(i + 1), tokens.get(i + 2)) {
        (
            m,
            Some(Token {
                tok: Tok::Ident(name),
                ..
            }),
            semi,
        ) if is_ident(m, "mod") && is_punct(semi, ';') => Some(name.clone()),
        _ => None,
    }
}

/// The index after the item (or field, variant, statement) starting at `start`: through its
/// `;`, its `{ ... }` block, or (for a field or variant) its `,`; never past the `}` that
/// closes the enclosing block.
fn item_end(tokens: &[Token], start: usize) -> usize {
    const ITEM_WORDS: &[&str] = &[
        "pub",
        "fn",
        "mod",
        "impl",
        "struct",
        "enum",
        "trait",
        "use",
        "const",
        "static",
        "type",
        "unsafe",
        "async",
        "extern",
        "macro_rules",
        "let",
    ];
    let is_item = matches!(tokens.get(start), Some(Token { tok: Tok::Ident(w), .. }) if ITEM_WORDS.contains(&w.as_str()));
    let mut depth = 0usize;
    for (k, token) in tokens.iter().enumerate().skip(start) {
        match &token.tok {
            Tok::Punct('(' | '[') => depth += 1,
            Tok::Punct(')' | ']') => depth = depth.saturating_sub(1),
            Tok::Punct('{') if depth == 0 => {
                return matching(tokens, k, '{', '}').map_or(tokens.len(), |close| close + 1);
            }
            Tok::Punct(';') if depth == 0 => return k + 1,
            Tok::Punct(',') if depth == 0 && !is_item => return k + 1,
            Tok::Punct('}') if depth == 0 => return k,
            _ => {}
        }
    }
    tokens.len()
}

// ---------------------------------------------------------------------------------------
// Paths: what a file names.

/// A path as written (a grouped `use` expanded to one path per leaf), and its line.
#[derive(Debug, Clone, PartialEq, Eq)]
struct RawPath {
    segments: Vec<String>,
    line: usize,
}

/// One `use` statement: its expanded leaves and the lines it spans.
#[derive(Debug, Clone, PartialEq, Eq)]
struct UseStmt {
    leaves: Vec<RawPath>,
    lines: RangeInclusive<usize>,
}

/// The `use` statements and the inline paths (`a::b::c` outside `use`) of some code.
fn collect_paths(code: &[Token]) -> (Vec<UseStmt>, Vec<RawPath>) {
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
fn use_tree(
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
fn resolve(from: &[String], segments: &[String], known: &BTreeSet<Module>) -> Option<Module> {
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

fn child_module(parent: &[String], child: &str) -> Module {
    let mut m = parent.to_vec();
    m.push(child.to_string());
    m
}

// ---------------------------------------------------------------------------------------
// Graphs and circles.

/// Edges between nodes (modules mapped by `node`; `None` leaves a module out), each with
/// its first reference. Edges from a node to itself are left out.
type Graph = BTreeMap<String, BTreeMap<String, Ref>>;

fn graph_of(refs: &[(Module, Module, Ref)], node: impl Fn(&[String]) -> Option<String>) -> Graph {
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
fn components(graph: &Graph) -> Vec<Vec<String>> {
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
fn circles_of(graph: &Graph) -> Vec<Circle> {
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
fn shortest_path(
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

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;

    /// An in-memory crate tree from (path under src, text) pairs.
    fn tree(files: &[(&str, &str)]) -> BTreeMap<String, String> {
        files
            .iter()
            .map(|(p, t)| (p.to_string(), t.to_string()))
            .collect()
    }

    fn check(files: &[(&str, &str)]) -> Report {
        check_tree(&tree(files), "src", &["policy", "runtime"])
    }

    fn module(path: &str) -> Module {
        if path == "crate" {
            return Vec::new();
        }
        path.split("::").map(str::to_string).collect()
    }

    /// Where the non-test code of one file points, as module names.
    fn targets(from: &str, text: &str, known: &[&str]) -> BTreeSet<String> {
        let known: BTreeSet<Module> = known.iter().map(|m| module(m)).collect();
        let lexed = lex(text);
        let (uses, inline) = collect_paths(&lexed.code);
        uses.into_iter()
            .flat_map(|u| u.leaves)
            .chain(inline)
            .filter_map(|p| resolve(&module(from), &p.segments, &known))
            .filter(|m| *m != module(from))
            .map(|m| module_name(&m))
            .collect()
    }

    fn set(items: &[&str]) -> BTreeSet<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_circle_between_units_is_reported_with_its_files_and_lines() {
        let report = check(&[
            ("lib.rs", "pub mod decide;\npub mod manager;\n"),
            (
                "manager.rs",
                "use std::sync::Arc;\n\nfn act() -> Option<crate::decide::BoxFuture<()>> { None }\n",
            ),
            (
                "decide.rs",
                "//! Decides.\nuse crate::manager::{SyncSummary, Synchronizer};\n",
            ),
        ]);
        assert!(!report.ok());
        let circles: Vec<String> = report.circles.iter().map(Circle::to_string).collect();
        assert_eq!(
            circles,
            [
                "circle: decide -> manager (src/decide.rs:2 crate::manager::SyncSummary) \
              -> decide (src/manager.rs:3 crate::decide::BoxFuture)"
            ]
        );
        assert_eq!(report.modules, 3);
        assert_eq!(report.edges, 2);
        assert!(report.lines().last().unwrap().ends_with("1 circle"));
    }

    #[test]
    fn a_tree_without_a_circle_passes() {
        let report = check(&[
            ("lib.rs", "pub mod a;\npub mod b;\npub mod c;\n"),
            ("a.rs", "use crate::b::B;\nuse crate::c;\n"),
            ("b.rs", "pub struct B(crate::c::C);\n"),
            ("c.rs", "pub struct C;\n"),
        ]);
        assert!(report.ok(), "{:?}", report.lines());
        assert!(report.circles.is_empty());
        assert_eq!((report.modules, report.edges), (4, 3));
        assert_eq!(
            report.lines().last().unwrap(),
            "arch: 4 modules, 3 edges, 0 circles"
        );
    }

    #[test]
    fn a_circle_of_three_names_every_member() {
        let report = check(&[
            ("a.rs", "use crate::b::X;\n"),
            ("b.rs", "use crate::c::X;\n"),
            ("c.rs", "use crate::a::X;\n"),
        ]);
        assert_eq!(
            report
                .circles
                .iter()
                .map(Circle::to_string)
                .collect::<Vec<_>>(),
            [
                "circle: a -> b (src/a.rs:1 crate::b::X) -> c (src/b.rs:1 crate::c::X) \
              -> a (src/c.rs:1 crate::a::X)"
            ]
        );
    }

    #[test]
    fn children_of_a_layered_unit_must_not_form_a_circle() {
        let report = check(&[
            (
                "policy/mod.rs",
                "pub mod eviction;\npub mod rank;\npub mod types;\n",
            ),
            (
                "policy/eviction/mod.rs",
                "use super::types::Time;\nmod reclaim;\n",
            ),
            // A grandchild's reference counts for its child: eviction -> rank.
            (
                "policy/eviction/reclaim.rs",
                "fn f() { super::super::rank::rank_pods(); }\n",
            ),
            (
                "policy/rank.rs",
                "use super::eviction::{PodStats, PodWithStats};\n",
            ),
            ("policy/types.rs", "pub struct Time;\n"),
        ]);
        let circles: Vec<String> = report.circles.iter().map(Circle::to_string).collect();
        assert_eq!(
            circles,
            ["circle: policy::eviction -> policy::rank \
              (src/policy/eviction/reclaim.rs:1 super::super::rank::rank_pods) \
              -> policy::eviction (src/policy/rank.rs:1 super::eviction::PodStats)"]
        );
    }

    #[test]
    fn a_child_using_its_parents_items_is_an_edge_to_the_parent() {
        let report = check(&[
            (
                "runtime/mod.rs",
                "mod cgroups;\nuse cgroups::CgroupTree;\npub struct Config;\n",
            ),
            ("runtime/cgroups.rs", "use super::Config;\n"),
        ]);
        assert_eq!(
            report
                .circles
                .iter()
                .map(Circle::to_string)
                .collect::<Vec<_>>(),
            [
                "circle: runtime -> runtime::cgroups (src/runtime/mod.rs:2 cgroups::CgroupTree) \
              -> runtime (src/runtime/cgroups.rs:1 super::Config)"
            ]
        );
    }

    #[test]
    fn children_of_an_unlisted_unit_are_not_checked() {
        let report = check(&[
            ("other/mod.rs", "mod x;\nmod y;\n"),
            ("other/x.rs", "use super::y::Y;\n"),
            ("other/y.rs", "use super::x::X;\n"),
        ]);
        assert!(report.circles.is_empty());
        assert_eq!(report.edges, 2);
    }

    #[test]
    fn grouped_use_trees_are_expanded() {
        let lexed = lex("use crate::{a::{b, c as see}, d::E, f::{self, *}};\nuse super::g::H;\n");
        let (uses, inline) = collect_paths(&lexed.code);
        let leaves: Vec<String> = uses
            .iter()
            .flat_map(|u| &u.leaves)
            .map(|l| format!("{}:{}", l.line, l.segments.join("::")))
            .collect();
        assert_eq!(
            leaves,
            [
                "1:crate::a::b",
                "1:crate::a::c",
                "1:crate::d::E",
                "1:crate::f",
                "1:crate::f",
                "2:super::g::H"
            ]
        );
        assert!(inline.is_empty(), "{inline:?}");
    }

    #[test]
    fn a_multi_line_use_reports_each_leafs_line() {
        let lexed = lex("use crate::policy::eviction::{\n    decide,\n    Input,\n};\n");
        let (uses, _) = collect_paths(&lexed.code);
        let lines: Vec<usize> = uses[0].leaves.iter().map(|l| l.line).collect();
        assert_eq!(lines, [2, 3]);
        assert_eq!(uses[0].lines, 1..=4);
    }

    #[rstest]
    #[case::super_from_a_file(
        "policy::rank",
        "super::eviction::PodStats",
        Some("policy::eviction")
    )]
    #[case::super_from_mod_rs("policy", "super::state::now", Some("state"))]
    #[case::super_super(
        "policy::eviction::reclaim",
        "super::super::pod::Pod",
        Some("policy::pod")
    )]
    #[case::super_to_the_parents_items("policy::eviction", "super::Thing", Some("policy"))]
    #[case::super_of_the_root("crate", "super::x", None)]
    #[case::self_path("runtime", "self::cgroups::Tree", Some("runtime::cgroups"))]
    #[case::child_module("runtime", "cgroups::Tree", Some("runtime::cgroups"))]
    #[case::deepest_existing_module(
        "decide",
        "crate::policy::eviction::decide",
        Some("policy::eviction")
    )]
    #[case::no_file_for_the_child("decide", "crate::state::inner::f", Some("state"))]
    #[case::root_item("decide", "crate::VERSION", Some("crate"))]
    #[case::other_crate("policy::rank", "std::fs::read", None)]
    #[case::not_a_child("decide", "signal::Signal", None)]
    fn paths_resolve_relative_to_their_module(
        #[case] from: &str,
        #[case] path: &str,
        #[case] expected: Option<&str>,
    ) {
        let known: BTreeSet<Module> = [
            "crate",
            "state",
            "decide",
            "policy",
            "policy::rank",
            "policy::eviction",
            "policy::eviction::reclaim",
            "policy::pod",
            "runtime",
            "runtime::cgroups",
        ]
        .iter()
        .map(|m| module(m))
        .collect();
        let segments: Vec<String> = path.split("::").map(str::to_string).collect();
        let resolved = resolve(&module(from), &segments, &known);
        assert_eq!(
            resolved.as_deref().map(module_name),
            expected.map(str::to_string)
        );
    }

    #[test]
    fn paths_in_comments_and_strings_do_not_count() {
        let text = r####"
//! Module docs naming crate::docs_inner.
/// Outer docs naming [`crate::docs_outer::X`].
// A comment: crate::line_comment::f()
/* A block /* nested crate::nested */ still a comment crate::block */
fn f<'a>(s: &'a str) -> usize {
    let _ = "crate::string::f()";
    let _ = "escaped \" crate::escaped::f()";
    let _ = r#"raw "crate::raw::f()""#;
    let _ = b"crate::bytes::f()";
    let _ = ('{', '\'', '"');
    crate::real::f(s)
}
"####;
        let known = [
            "crate",
            "docs_inner",
            "docs_outer",
            "line_comment",
            "nested",
            "block",
            "string",
            "escaped",
            "raw",
            "bytes",
            "real",
        ];
        assert_eq!(targets("here", text, &known), set(&["real"]));
    }

    #[test]
    fn a_lifetime_is_not_mistaken_for_a_char_literal() {
        let text = "fn f<'a, 'b>(x: &'a u8) -> crate::one::T {}\nuse crate::two::U;\n";
        assert_eq!(targets("here", text, &["one", "two"]), set(&["one", "two"]));
    }

    #[test]
    fn inline_test_modules_and_test_items_are_skipped() {
        let text = "\
use crate::a::A;

#[cfg(test)]
mod tests {
    use crate::b::B;
    fn helper() { crate::c::f(); }
}

#[cfg(test)]
fn test_helper() -> crate::d::D { todo!() }

struct S {
    #[cfg(test)]
    probe: crate::e::E,
    kept: crate::f::F,
}

#[cfg(test)] mod more_tests { use crate::g::G; }

fn after_the_tests() { crate::h::h(); }
";
        let known = ["a", "b", "c", "d", "e", "f", "g", "h"];
        assert_eq!(targets("here", text, &known), set(&["a", "f", "h"]));
    }

    #[test]
    fn test_files_are_skipped() {
        let report = check(&[
            ("lib.rs", "pub mod a;\npub mod b;\n"),
            (
                "a/mod.rs",
                "#[cfg(test)]\nmod tests;\n#[cfg(test)]\npub(crate) mod helpers;\n\
                 #[cfg(test)]\n#[path = \"a_checks.rs\"]\nmod checks;\n",
            ),
            // Each of these would close a circle a <-> b.
            ("a/tests.rs", "use crate::b::B;\n"),
            ("a/helpers.rs", "use crate::b::B;\n"),
            ("a/helpers/deep.rs", "use crate::b::B;\n"),
            ("a/a_checks.rs", "use crate::b::B;\n"),
            ("a/engine_tests.rs", "use crate::b::B;\n"),
            ("a/fixtures.rs", "use crate::b::B;\n"),
            ("a/testing.rs", "use crate::b::B;\n"),
            ("a/cfg_test_file.rs", "#![cfg(test)]\nuse crate::b::B;\n"),
            ("b.rs", "use crate::a::A;\n"),
        ]);
        assert!(report.circles.is_empty(), "{:?}", report.lines());
        // crate, a and b: none of the test files is a module of the check.
        assert_eq!(report.modules, 3);
        assert_eq!(report.edges, 1);
    }

    #[rstest]
    #[case("lib.rs", "crate")]
    #[case("main.rs", "crate")]
    #[case("state.rs", "state")]
    #[case("policy/mod.rs", "policy")]
    #[case("policy/rank.rs", "policy::rank")]
    #[case("config/kubelet/mod.rs", "config::kubelet")]
    fn files_map_to_modules(#[case] file: &str, #[case] expected: &str) {
        assert_eq!(module_name(&module_of_file(file)), expected);
    }
}
