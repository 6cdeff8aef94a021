//! A lexical reading of Rust source: tokens without comments, string literals as single
//! tokens, and the items under `#[cfg(test)]` taken out.
use proc_macro2::{Delimiter, LexError, Spacing, TokenStream, TokenTree};

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

/// Splits Rust source into tokens with proc-macro2's lexer (the compiler's rules for
/// comments, strings, raw strings, chars and lifetimes), flattened: a group becomes its
/// opening bracket, its tokens and its closing bracket; comments are gone (doc comments
/// become `#[doc = "..."]` attributes, whose text is a string token) and a string literal
/// is one [`Tok::Str`], so text inside either can never look like a path. Source that
/// does not lex (an unclosed string or bracket) is an error.
pub(super) fn tokenize(src: &str) -> Result<Vec<Token>, String> {
    let stream: TokenStream = src.parse().map_err(|e: LexError| e.to_string())?;
    let mut out = Vec::new();
    flatten(stream, &mut out);
    Ok(out)
}

fn flatten(stream: TokenStream, out: &mut Vec<Token>) {
    let mut trees = stream.into_iter().peekable();
    while let Some(tree) = trees.next() {
        let line = tree.span().start().line;
        let tok = match tree {
            TokenTree::Group(group) => {
                let (open, close) = match group.delimiter() {
                    Delimiter::Parenthesis => ('(', ')'),
                    Delimiter::Brace => ('{', '}'),
                    Delimiter::Bracket => ('[', ']'),
                    Delimiter::None => {
                        flatten(group.stream(), out);
                        continue;
                    }
                };
                out.push(Token {
                    tok: Tok::Punct(open),
                    line: group.span_open().start().line,
                });
                flatten(group.stream(), out);
                out.push(Token {
                    tok: Tok::Punct(close),
                    line: group.span_close().start().line,
                });
                continue;
            }
            // A raw identifier (r#type) is the identifier itself.
            TokenTree::Ident(ident) => {
                Tok::Ident(ident.to_string().trim_start_matches("r#").into())
            }
            TokenTree::Punct(punct)
                if punct.as_char() == ':'
                    && punct.spacing() == Spacing::Joint
                    && matches!(trees.peek(), Some(TokenTree::Punct(next)) if next.as_char() == ':') =>
            {
                trees.next();
                Tok::PathSep
            }
            TokenTree::Punct(punct) => Tok::Punct(punct.as_char()),
            TokenTree::Literal(literal) => string_contents(&literal.to_string())
                .map_or(Tok::Literal, |text| Tok::Str(text.to_string())),
        };
        out.push(Token { tok, line });
    }
}

/// The contents of a string literal as written (`"a"`, `r#"a"#`), escapes left as they
/// are; `None` for any other literal.
fn string_contents(literal: &str) -> Option<&str> {
    let raw = literal.strip_prefix('r').unwrap_or(literal);
    let hashes = raw.len() - raw.trim_start_matches('#').len();
    raw[hashes..]
        .strip_prefix('"')?
        .strip_suffix(&"#".repeat(hashes))?
        .strip_suffix('"')
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
pub(super) fn lex(src: &str) -> Result<Lexed, String> {
    let tokens = tokenize(src)?;
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
            return Ok(Lexed {
                all_test: true,
                ..Lexed::default()
            });
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
    Ok(lexed)
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
