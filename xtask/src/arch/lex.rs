//! A lexical reading of Rust source: tokens without comments, string literals as single
//! tokens, and the items under `#[cfg(test)]` taken out.

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Tok {
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
pub(super) struct Token {
    pub(super) tok: Tok,
    pub(super) line: usize,
}

pub(super) fn is_ident(t: Option<&Token>, name: &str) -> bool {
    matches!(t, Some(Token { tok: Tok::Ident(n), .. }) if n == name)
}

pub(super) fn is_punct(t: Option<&Token>, c: char) -> bool {
    matches!(t, Some(Token { tok: Tok::Punct(p), .. }) if *p == c)
}

pub(super) fn is_path_sep(t: Option<&Token>) -> bool {
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
pub(super) fn tokenize(src: &str) -> Vec<Token> {
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
pub(super) fn string_end(c: &[char], mut i: usize) -> usize {
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
pub(super) struct TestModule {
    pub(super) name: String,
    /// Its `#[path = "..."]`, if any.
    pub(super) path_attr: Option<String>,
}

/// A file's tokens with the test code taken out.
#[derive(Debug, Default)]
pub(super) struct Lexed {
    pub(super) code: Vec<Token>,
    pub(super) test_modules: Vec<TestModule>,
    /// `#![cfg(test)]`: the whole file is test code.
    pub(super) all_test: bool,
}

/// Tokenizes a file and drops every item under `#[cfg(test)]`: inline test modules,
/// test helpers, `mod tests;` declarations (noted in [`Lexed::test_modules`]). The code
/// after a test module is kept.
pub(super) fn lex(src: &str) -> Lexed {
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
pub(super) fn attribute(tokens: &[Token], i: usize) -> Option<(usize, &[Token], bool)> {
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

pub(super) fn is_cfg_test(inner: &[Token]) -> bool {
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
pub(super) fn matching(
    tokens: &[Token],
    open: usize,
    opening: char,
    closing: char,
) -> Option<usize> {
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
pub(super) fn out_of_line_module(tokens: &[Token]) -> Option<String> {
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
pub(super) fn item_end(tokens: &[Token], start: usize) -> usize {
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
