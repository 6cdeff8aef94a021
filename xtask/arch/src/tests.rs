use super::lex::*;
use super::modules::*;
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
    check_tree(&tree(files), "src", &["policy", "runtime"]).expect("every file lexes")
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
    let lexed = lex(text).expect("lexes");
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
    let lexed = lex("use crate::{a::{b, c as see}, d::E, f::{self, *}};\nuse super::g::H;\n")
        .expect("lexes");
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
    let lexed =
        lex("use crate::policy::eviction::{\n    decide,\n    Input,\n};\n").expect("lexes");
    let (uses, _) = collect_paths(&lexed.code);
    let lines: Vec<usize> = uses[0].leaves.iter().map(|l| l.line).collect();
    assert_eq!(lines, [2, 3]);
    assert_eq!(uses[0].lines, 1..=4);
}

#[rstest]
#[case::super_from_a_file("policy::rank", "super::eviction::PodStats", Some("policy::eviction"))]
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

#[test]
fn a_file_that_does_not_lex_is_an_error_naming_it() {
    let files = tree(&[("lib.rs", "mod a;\n"), ("a.rs", "fn f() { \"never closed")]);
    let error = check_tree(&files, "src", &[]).expect_err("an unclosed string");
    assert!(error.starts_with("a.rs: "), "{error}");
}
