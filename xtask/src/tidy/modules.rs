//! A crate's files as the compiler sees them: which module each file
//! holds, and which files each file takes names from.
//!
//! The module tree is read from the `mod` items, starting at the crate's
//! root (`lib.rs`, `main.rs`, a binary under `src/bin/`): `mod a;` is
//! `a.rs` or `a/mod.rs` beside a root or a `mod.rs`, and under `foo/`
//! beside `foo.rs`; `#[path = "…"]` is followed; an inline `mod a { … }`
//! lives in its parent's file. Test files and `#[cfg(test)]` modules are
//! left out.
//!
//! A file takes a name from another by a path into the crate: a `use`
//! (grouped and nested trees expanded, `as` followed), or a path written
//! in the code. A path starts at `crate`, `super` or `self`, at a child
//! module, or at a name a `use` brought in. It lands in the file of the
//! longest module path it starts with, and a name that module only
//! re-exports (`pub use x::Name`) is followed to where it comes from.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::lex;

/// One crate target's modules and the files that hold them.
#[derive(Default)]
pub(crate) struct Tree {
    /// Each module path (`crate::a::b`) and its file.
    pub(crate) modules: BTreeMap<String, PathBuf>,
    /// Each file and the module it holds.
    pub(crate) files: BTreeMap<PathBuf, String>,
    /// Each module's `pub use` names and the paths they stand for.
    exports: BTreeMap<String, BTreeMap<String, String>>,
}

/// A name one file takes from another.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reference {
    pub(crate) to: PathBuf,
    pub(crate) name: String,
    /// Where in the taking file (from 1).
    pub(crate) line: usize,
}

/// The targets of the crate in `dir`: its library, its binaries.
pub(crate) fn roots(dir: &Path) -> Vec<PathBuf> {
    let src = dir.join("src");
    let mut roots: Vec<PathBuf> = [src.join("lib.rs"), src.join("main.rs")]
        .into_iter()
        .filter(|r| r.exists())
        .collect();
    let mut bins: Vec<PathBuf> = std::fs::read_dir(src.join("bin"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .map(|p| if p.is_dir() { p.join("main.rs") } else { p })
        .filter(|p| p.exists() && p.extension().is_some_and(|e| e == "rs"))
        .collect();
    bins.sort();
    roots.extend(bins);
    roots
}

/// The module tree under the crate root `root`.
pub(crate) fn tree(root: &Path) -> Tree {
    let mut tree = Tree::default();
    let dir = root.parent().unwrap_or(Path::new("")).to_path_buf();
    add_file(&mut tree, root, "crate", &dir);
    let files: Vec<(PathBuf, String)> = tree.files.clone().into_iter().collect();
    for (file, module) in files {
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        let code = lex::without_test_modules(&lex::blank(&text));
        for (_, tree_text, public) in split_uses(&code) {
            if !public {
                continue;
            }
            for (path, local) in expand(&tree_text) {
                if let Some(full) = absolute(&tree, &module, &path, &BTreeMap::new()) {
                    let exports = tree.exports.entry(module.clone()).or_default();
                    exports.insert(local, full);
                }
            }
        }
    }
    tree
}

fn add_file(tree: &mut Tree, file: &Path, module: &str, dir: &Path) {
    let name = file.file_name().and_then(|n| n.to_str()).unwrap_or("");
    if name == "tests.rs" || name.ends_with("_tests.rs") || tree.files.contains_key(file) {
        return;
    }
    let Ok(text) = std::fs::read_to_string(file) else {
        return;
    };
    tree.modules.insert(module.to_owned(), file.to_path_buf());
    tree.files.insert(file.to_path_buf(), module.to_owned());
    let code = lex::without_test_modules(&lex::blank(&text));
    add_items(tree, file, (&text, &code), (0, code.len()), module, dir);
}

/// The `mod` items of `code[from..to]`: files followed, inline modules
/// read in place.
fn add_items(
    tree: &mut Tree,
    file: &Path,
    (text, code): (&str, &str),
    (from, to): (usize, usize),
    module: &str,
    dir: &Path,
) {
    let mut skip_to = from;
    for at in lex::keyword_at(&code[from..to], "mod")
        .into_iter()
        .map(|a| a + from)
    {
        if at < skip_to {
            continue;
        }
        let rest = &code[at + 3..to];
        let name: String = rest
            .trim_start()
            .bytes()
            .take_while(|&c| lex::is_ident(c))
            .map(char::from)
            .collect();
        let after = rest.trim_start()[name.len()..].trim_start();
        let child = format!("{module}::{name}");
        if name.is_empty() {
            continue;
        } else if after.starts_with(';') {
            let (path, child_dir) = match path_attribute(text, code, at) {
                Some(p) => {
                    let path = file.parent().unwrap_or(dir).join(p);
                    let stem = path.file_stem().unwrap_or_default().to_owned();
                    let child_dir = path.parent().unwrap_or(dir).join(stem);
                    (path, child_dir)
                }
                None if dir.join(format!("{name}.rs")).exists() => {
                    (dir.join(format!("{name}.rs")), dir.join(&name))
                }
                None => (dir.join(&name).join("mod.rs"), dir.join(&name)),
            };
            add_file(tree, &path, &child, &child_dir);
        } else if after.starts_with('{') {
            let open = to - rest.len() + rest.find('{').unwrap_or(0);
            let Some(close) = lex::matching_brace(code, open) else {
                continue;
            };
            tree.modules.insert(child.clone(), file.to_path_buf());
            add_items(
                tree,
                file,
                (text, code),
                (open + 1, close),
                &child,
                &dir.join(&name),
            );
            skip_to = close;
        }
    }
}

/// The `#[path = "…"]` on the item at `at`, read from the source (the
/// blanked code has lost the string).
fn path_attribute(text: &str, code: &str, at: usize) -> Option<String> {
    let start = code[..at].rfind([';', '{', '}']).map_or(0, |p| p + 1);
    let attr = code[start..at].find("#[path").map(|p| p + start)?;
    let quoted = &text[attr..at];
    let open = quoted.find('"')?;
    let close = quoted[open + 1..].find('"')?;
    Some(quoted[open + 1..open + 1 + close].to_owned())
}

/// Every name `file` takes from another file of `tree`.
pub(crate) fn references(tree: &Tree, file: &Path) -> Vec<Reference> {
    let (Some(module), Ok(text)) = (tree.files.get(file), std::fs::read_to_string(file)) else {
        return Vec::new();
    };
    let code = lex::without_test_modules(&lex::blank(&text));
    let mut aliases = BTreeMap::new();
    let mut found: Vec<(usize, String)> = Vec::new();
    let uses = split_uses(&code);
    for (at, tree_text, _) in &uses {
        for (path, local) in expand(tree_text) {
            if let Some(full) = absolute(tree, module, &path, &BTreeMap::new()) {
                found.push((lex::line_of(&code, *at), full.clone()));
                aliases.insert(local, full);
            }
        }
    }
    let mut rest = code.clone();
    for (at, tree_text, _) in &uses {
        rest.replace_range(
            *at..*at + 3 + tree_text.len(),
            &" ".repeat(3 + tree_text.len()),
        );
    }
    for (at, path) in inline_paths(&rest) {
        if let Some(full) = absolute(tree, module, &path, &aliases) {
            found.push((lex::line_of(&code, at), full));
        }
    }
    let mut out: Vec<Reference> = Vec::new();
    for (line, full) in found {
        let Some((to, name)) = locate(tree, &full, module) else {
            continue;
        };
        if to != file && !out.iter().any(|r| r.to == to && r.name == name) {
            out.push(Reference { to, name, line });
        }
    }
    out
}

/// `path`, written in `module`, as an absolute path (`crate::…`); none
/// for a path that leaves the crate.
fn absolute(
    tree: &Tree,
    module: &str,
    path: &str,
    aliases: &BTreeMap<String, String>,
) -> Option<String> {
    let mut base: Vec<&str> = module.split("::").collect();
    let segments: Vec<&str> = path.split("::").collect();
    let first = *segments.first()?;
    let rest = |n: usize| segments[n..].join("::");
    match first {
        "crate" => Some(path.to_owned()),
        "self" | "super" => {
            let mut n = 0;
            while let Some(s) = segments.get(n) {
                match *s {
                    "super" => {
                        base.pop()?;
                    }
                    "self" => {}
                    _ => break,
                }
                n += 1;
            }
            let base = base.join("::");
            Some(if n == segments.len() {
                base
            } else {
                format!("{base}::{}", rest(n))
            })
        }
        _ if tree.modules.contains_key(&format!("{module}::{first}")) => {
            Some(format!("{module}::{path}"))
        }
        _ => aliases.get(first).map(|full| match segments.len() {
            1 => full.clone(),
            _ => format!("{full}::{}", rest(1)),
        }),
    }
}

/// The file an absolute path, written in `from`, lands in, and the name it
/// takes there. A name re-exported by a module that holds `from` is
/// followed to its source (`crate::Error` is the error module's); one
/// re-exported by any other module is that module's (its face).
fn locate(tree: &Tree, full: &str, from: &str) -> Option<(PathBuf, String)> {
    let mut full = full.to_owned();
    // A re-export may lead to another; a few hops are plenty, and a
    // circle of re-exports ends.
    for _ in 0..4 {
        let segments: Vec<&str> = full.split("::").collect();
        let n = (1..=segments.len())
            .rev()
            .find(|&n| tree.modules.contains_key(&segments[..n].join("::")))?;
        let module = segments[..n].join("::");
        let name = segments
            .get(n)
            .copied()
            .unwrap_or(segments[n - 1])
            .to_owned();
        let holds = from == module || from.starts_with(&format!("{module}::"));
        let exported = segments
            .get(n)
            .filter(|_| holds)
            .and_then(|next| tree.exports.get(&module)?.get(*next));
        match exported {
            Some(to) if *to != full => {
                full = std::iter::once(to.as_str())
                    .chain(segments[n + 1..].iter().copied())
                    .collect::<Vec<_>>()
                    .join("::");
            }
            _ => return Some((tree.modules[&module].clone(), name)),
        }
    }
    None
}

/// The use items of `code`: (offset of `use`, the tree after it with its
/// whitespace collapsed, whether it is `pub`).
fn split_uses(code: &str) -> Vec<(usize, String, bool)> {
    let mut uses = Vec::new();
    for at in lex::keyword_at(code, "use") {
        let Some(end) = code[at..].find(';').map(|p| at + p) else {
            break;
        };
        let before = code[..at].trim_end();
        let public = before.ends_with("pub")
            || (before.ends_with(')')
                && before
                    .rsplit_once("pub(")
                    .is_some_and(|(_, r)| !r.contains(['\n', ';'])));
        uses.push((at, code[at + 3..end].to_owned(), public));
    }
    uses
}

/// Every path of a use tree, with the name it is known by where it is
/// imported (its last segment, or what `as` renames it to).
fn expand(tree: &str) -> Vec<(String, String)> {
    let tree: String = tree.split_whitespace().collect::<Vec<_>>().join(" ");
    let tree = tree.replace(" ::", "::").replace(":: ", "::");
    let mut out = Vec::new();
    expand_under(tree.trim(), "", &mut out);
    out
}

fn expand_under(tree: &str, prefix: &str, out: &mut Vec<(String, String)>) {
    let tree = tree.trim().trim_start_matches("::");
    if let Some(open) = tree.find('{') {
        let head = tree[..open].trim();
        let close = lex::matching_brace(tree, open).unwrap_or(tree.len());
        for part in split_top_level(&tree[open + 1..close]) {
            expand_under(part, &format!("{prefix}{head}"), out);
        }
    } else if !tree.is_empty() {
        let (path, rename) = match tree.split_once(" as ") {
            Some((p, r)) => (p.trim(), Some(r.trim())),
            None => (tree, None),
        };
        let full = format!("{prefix}{path}");
        let full = full.strip_suffix("::self").unwrap_or(&full).to_owned();
        let last = full.rsplit("::").next().unwrap_or(&full).to_owned();
        out.push((full, rename.unwrap_or(&last).to_owned()));
    }
}

/// `body` split at its top-level commas.
fn split_top_level(body: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0usize, 0);
    for (i, c) in body.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&body[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&body[start..]);
    parts.into_iter().filter(|p| !p.trim().is_empty()).collect()
}

/// The paths of two segments or more written in `code` (`a::b::c`), with
/// where each starts.
fn inline_paths(code: &str) -> Vec<(usize, String)> {
    let b = code.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let starts =
            lex::is_ident(b[i]) && !b[i].is_ascii_digit() && (i == 0 || !lex::is_ident(b[i - 1]));
        let after_colons = i >= 2 && &b[i - 2..i] == b"::";
        if !starts || after_colons {
            i += 1;
            continue;
        }
        let mut segments: Vec<&str> = Vec::new();
        let mut j = i;
        loop {
            let s = j;
            while j < b.len() && lex::is_ident(b[j]) {
                j += 1;
            }
            segments.push(&code[s..j]);
            let k = j + code[j..].len() - code[j..].trim_start().len();
            let Some(next) = code[k..].strip_prefix("::") else {
                break;
            };
            let m = code.len() - next.trim_start().len();
            if m < b.len() && lex::is_ident(b[m]) {
                j = m;
            } else {
                break;
            }
        }
        if segments.len() > 1 {
            out.push((i, segments.join("::")));
        }
        i = j.max(i + 1);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn use_trees_expand_with_their_local_names() {
        let found = expand(" crate::{a::{B, c as d}, e::self, f :: *}");
        let want = [
            ("crate::a::B", "B"),
            ("crate::a::c", "d"),
            ("crate::e", "e"),
            ("crate::f::*", "*"),
        ];
        let want: Vec<(String, String)> = want
            .iter()
            .map(|(a, b)| ((*a).into(), (*b).into()))
            .collect();
        assert_eq!(found, want);
        let paths: Vec<String> = inline_paths("x = crate::a :: b(); Self::new(); y")
            .into_iter()
            .map(|p| p.1)
            .collect();
        assert_eq!(paths, ["crate::a::b", "Self::new"]);
    }
}
