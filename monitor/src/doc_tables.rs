//! The tables of the documentation pages (docs/*.md), read by the tests that compare them
//! with the code: a setting or a metric added without its row, or a row left behind by a
//! removed one, fails a test instead of going unnoticed.
use std::collections::BTreeSet;
use std::path::Path;

/// The text of `docs/<name>`.
pub(crate) fn page(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../docs")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// The names of the first column of the Markdown table whose header row starts with the
/// cell `header`: every code span of the cell. A name that starts with `.` or `_`
/// continues the cell's first one: `.psi` after `sources.ebpf` is `sources.psi`, `_pids`
/// after `monitor_signal_available_bytes` is `monitor_signal_available_pids`.
pub(crate) fn first_column(page: &str, header: &str) -> BTreeSet<String> {
    rows(page, header)
        .iter()
        .flat_map(|row| names(&row[0]))
        .collect()
}

/// The rows of the Markdown table whose header row starts with the cell `header`, each
/// as its cells (trimmed; `\|` is a pipe inside a cell).
pub(crate) fn rows(page: &str, header: &str) -> Vec<Vec<String>> {
    let cells = |line: &str| -> Option<Vec<String>> {
        let mut row = line.trim().strip_prefix('|')?;
        let mut cells = Vec::new();
        while !row.is_empty() {
            let end = row
                .char_indices()
                .find(|&(i, c)| c == '|' && !row[..i].ends_with('\\'))
                .map_or(row.len(), |(i, _)| i);
            cells.push(row[..end].trim().to_string());
            row = row.get(end + 1..).unwrap_or("");
        }
        Some(cells)
    };
    let mut lines = page.lines();
    lines
        .by_ref()
        .find(|line| cells(line).is_some_and(|row| row.first().is_some_and(|c| c == header)))
        .unwrap_or_else(|| panic!("no table with a first column {header:?}"));
    // The separator row, then the rows up to the first line that is not one.
    lines
        .skip(1)
        .map_while(cells)
        .inspect(|row| {
            assert!(
                row.first().is_some_and(|c| c.contains('`')),
                "a row of the {header:?} table names nothing: {row:?}"
            );
        })
        .collect()
}

/// The code spans of a cell, a span that starts with `.` or `_` continuing the first one
/// (see [`first_column`]).
pub(crate) fn names(cell: &str) -> Vec<String> {
    let spans: Vec<&str> = cell.split('`').skip(1).step_by(2).collect();
    let Some((first, rest)) = spans.split_first() else {
        return Vec::new();
    };
    let mut names = vec![first.to_string()];
    for short in rest {
        let joined = short
            .chars()
            .next()
            .filter(|c| matches!(c, '.' | '_'))
            .and_then(|c| first.rfind(c))
            .map(|at| format!("{}{short}", &first[..at]));
        names.push(joined.unwrap_or_else(|| short.to_string()));
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_first_column_and_expands_short_names() {
        let page = "text\n\n| key | type |\n|---|---|\n| `a.b`, `.c` | x \\| y |\n| `m_bytes`, `_pids` | z |\n\nafter\n| `not.this` | |\n";
        let names: Vec<String> = first_column(page, "key").into_iter().collect();
        assert_eq!(names, ["a.b", "a.c", "m_bytes", "m_pids"]);
        let rows = rows(page, "key");
        assert_eq!(rows[0], ["`a.b`, `.c`", "x \\| y"]);
        assert_eq!(rows[1], ["`m_bytes`, `_pids`", "z"]);
    }
}
