//! Imports that run one way. Between the files of a crate there is no
//! circle: each file can be read knowing only what it imports. (A module's
//! own file and the files of its submodules are one unit here: a child
//! may use its parent's items and a parent re-export its children's.)
//!
//! The top-level modules of [`LAYERED_CRATE`] (a folder module is one)
//! stand in floors, each above everything it imports. Where modules
//! import each other round a loop, the loop is broken where it is thinnest
//! (first between two modules that import each other, the side taking
//! fewer names; then, in each remaining loop, the import taking fewest
//! names); the imports broken run against the floors, from a module up
//! to one on its floor or higher. At most [`UP_IMPORTS_MAX`] may.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::modules::{self, Reference, Tree};

/// The crate whose top-level modules are held in floors.
const LAYERED_CRATE: &str = "crates/core";
/// The most imports of [`LAYERED_CRATE`] that may run against its floors.
const UP_IMPORTS_MAX: usize = 3;

/// The names each file takes from each other file.
type Edges = BTreeMap<(PathBuf, PathBuf), Vec<Reference>>;

/// An import between two modules, and how many names it takes.
type Weights = BTreeMap<(String, String), usize>;

/// A name one module takes from another: (the file that takes it, the
/// line, the name).
type Taken = Vec<(PathBuf, usize, String)>;

/// Every import circle between the files of a crate, and the up-imports
/// of [`LAYERED_CRATE`] past [`UP_IMPORTS_MAX`].
pub(crate) fn problems(root: &Path) -> Vec<String> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root.join("crates"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .collect();
    dirs.sort();
    dirs.push(root.join("xtask"));
    let mut problems = Vec::new();
    for target in dirs.iter().flat_map(|d| modules::roots(d)) {
        let edges = file_edges(&modules::tree(&target));
        let adjacency = adjacency(edges.keys());
        for circle in sccs(&adjacency).into_iter().filter(|c| c.len() > 1) {
            problems.push(describe_circle(root, &circle, &edges));
        }
    }
    problems.extend(up_imports(root, &root.join(LAYERED_CRATE)));
    problems
}

/// The names each file of `tree` takes from another, but for a module's
/// use of its own ancestors (`super::`, the crate root): a parent and its
/// children are one unit that way, while a parent's use of a child still
/// counts (so a circle through a folder's `mod.rs` is seen).
fn file_edges(tree: &Tree) -> Edges {
    let mut edges = Edges::new();
    for (file, module) in &tree.files {
        for reference in modules::references(tree, file) {
            let Some(to) = tree.files.get(&reference.to) else {
                continue;
            };
            let related = |a: &str, b: &str| a.starts_with(&format!("{b}::"));
            if related(module, to) {
                continue;
            }
            edges
                .entry((file.clone(), reference.to.clone()))
                .or_default()
                .push(reference);
        }
    }
    edges
}

fn describe_circle(root: &Path, circle: &[PathBuf], edges: &Edges) -> String {
    let shown = |p: &Path| p.strip_prefix(root).unwrap_or(p).display().to_string();
    let mut text = format!(
        "import circle between {} files (each file may import only files that do not import it back):",
        circle.len()
    );
    for ((from, to), names) in edges {
        if circle.contains(from) && circle.contains(to) {
            let list: Vec<&str> = names.iter().map(|r| r.name.as_str()).collect();
            text.push_str(&format!(
                "\n    {}:{} -> {}: {}",
                shown(from),
                names[0].line,
                shown(to),
                list.join(", ")
            ));
        }
    }
    text
}

/// The up-imports of the crate in `dir` if there are more than
/// [`UP_IMPORTS_MAX`], each with the file and line of its first name.
fn up_imports(root: &Path, dir: &Path) -> Vec<String> {
    let names = module_imports(root, dir);
    let weights: Weights = names.iter().map(|(k, v)| (k.clone(), v.len())).collect();
    let loops: Vec<Vec<String>> = sccs(&adjacency(weights.keys()))
        .into_iter()
        .filter(|c| c.len() > 1)
        .collect();
    let (kept, broken) = break_loops(weights);
    if broken.len() <= UP_IMPORTS_MAX {
        return Vec::new();
    }
    let floor = floors(&kept);
    let mut text = format!(
        "{}: {} imports run against the floors, each from a module up to one on its floor \
         or higher (at most {UP_IMPORTS_MAX}; each closes a loop of imports between modules):",
        dir.strip_prefix(root).unwrap_or(dir).display(),
        broken.len()
    );
    for (a, b) in broken {
        let taken = &names[&(a.clone(), b.clone())];
        let list: Vec<&str> = taken.iter().map(|t| t.2.as_str()).collect();
        text.push_str(&format!(
            "\n    {}:{}: {a} (floor {}) -> {b} (floor {}): {}",
            taken[0].0.display(),
            taken[0].1,
            floor.get(&a).unwrap_or(&1),
            floor.get(&b).unwrap_or(&1),
            list.join(", ")
        ));
    }
    for members in loops {
        text.push_str(&format!("\n    the loop: {}", members.join(", ")));
    }
    vec![text]
}

/// Each pair of top-level modules of the crate in `dir` (a folder module
/// is one; the crate root none) with the names the first takes from the
/// second: (the file that takes it, shown from `root`; line; name).
fn module_imports(root: &Path, dir: &Path) -> BTreeMap<(String, String), Taken> {
    let lib = dir.join("src/lib.rs");
    let src = dir.join("src");
    let node = |file: &Path| -> Option<String> {
        let rel = file.strip_prefix(&src).ok()?;
        let mut parts = rel.components();
        let first = parts.next()?.as_os_str().to_str()?.to_owned();
        let shown = src.join(&first);
        let shown = shown
            .strip_prefix(root)
            .unwrap_or(&shown)
            .display()
            .to_string();
        match parts.next() {
            Some(_) => Some(format!("{shown}/")),
            None if first == "lib.rs" => None,
            None => Some(shown),
        }
    };
    let mut names: BTreeMap<(String, String), Taken> = BTreeMap::new();
    if !lib.exists() {
        return names;
    }
    for ((from, to), references) in file_edges(&modules::tree(&lib)) {
        let (Some(a), Some(b)) = (node(&from), node(&to)) else {
            continue;
        };
        if a != b {
            let shown = from.strip_prefix(root).unwrap_or(&from).to_path_buf();
            let taken = names.entry((a, b)).or_default();
            for r in references {
                if !taken.iter().any(|t| t.2 == r.name) {
                    taken.push((shown.clone(), r.line, r.name));
                }
            }
        }
    }
    names
}

/// The imports kept and those broken to leave no loop: first, of two
/// modules importing each other, the side taking fewer names; then, in
/// each loop left, the import taking fewest names, until none is left.
fn break_loops(mut kept: Weights) -> (Weights, Vec<(String, String)>) {
    let mut broken = Vec::new();
    let pairs: Vec<(String, String)> = kept.keys().cloned().collect();
    for (a, b) in pairs {
        let (Some(&ab), Some(&ba)) = (
            kept.get(&(a.clone(), b.clone())),
            kept.get(&(b.clone(), a.clone())),
        ) else {
            continue;
        };
        let lose = if (ab, &b) < (ba, &a) { (a, b) } else { (b, a) };
        kept.remove(&lose);
        broken.push(lose);
    }
    loop {
        let loops: Vec<BTreeSet<String>> = sccs(&adjacency(kept.keys()))
            .into_iter()
            .filter(|c| c.len() > 1)
            .map(|c| c.into_iter().collect())
            .collect();
        if loops.is_empty() {
            break;
        }
        for members in loops {
            let thinnest = kept
                .iter()
                .filter(|((a, b), _)| members.contains(a) && members.contains(b))
                .min_by(|x, y| (x.1, x.0).cmp(&(y.1, y.0)))
                .map(|(k, _)| k.clone());
            if let Some(edge) = thinnest {
                kept.remove(&edge);
                broken.push(edge);
            }
        }
    }
    (kept, broken)
}

/// Each node's floor over the loop-free `edges`: 1 for a node that
/// imports nothing, else one above the highest it imports.
fn floors(edges: &Weights) -> BTreeMap<String, usize> {
    let adjacency = adjacency(edges.keys());
    let mut floor = BTreeMap::new();
    // Tarjan's order puts what a node imports before the node.
    for scc in sccs(&adjacency) {
        for node in scc {
            let above = adjacency[&node]
                .iter()
                .filter_map(|n| floor.get(n))
                .max()
                .copied();
            floor.insert(node, above.unwrap_or(0) + 1);
        }
    }
    floor
}

/// Each node with the nodes it points to (every node a key).
fn adjacency<'e, N: Ord + Clone + 'e>(
    edges: impl Iterator<Item = &'e (N, N)>,
) -> BTreeMap<N, BTreeSet<N>> {
    let mut out: BTreeMap<N, BTreeSet<N>> = BTreeMap::new();
    for (a, b) in edges {
        out.entry(a.clone()).or_default().insert(b.clone());
        out.entry(b.clone()).or_default();
    }
    out
}

/// The strongly connected components of `graph` (Tarjan's), each after
/// every component it reaches.
fn sccs<N: Ord + Clone>(graph: &BTreeMap<N, BTreeSet<N>>) -> Vec<Vec<N>> {
    struct State<N> {
        index: BTreeMap<N, usize>,
        low: BTreeMap<N, usize>,
        stack: Vec<N>,
        out: Vec<Vec<N>>,
    }
    fn visit<N: Ord + Clone>(graph: &BTreeMap<N, BTreeSet<N>>, v: &N, s: &mut State<N>) {
        let i = s.index.len();
        s.index.insert(v.clone(), i);
        s.low.insert(v.clone(), i);
        s.stack.push(v.clone());
        for w in graph.get(v).into_iter().flatten() {
            if !s.index.contains_key(w) {
                visit(graph, w, s);
                let low = s.low[v].min(s.low[w]);
                s.low.insert(v.clone(), low);
            } else if s.stack.contains(w) {
                let low = s.low[v].min(s.index[w]);
                s.low.insert(v.clone(), low);
            }
        }
        if s.low[v] == s.index[v] {
            let at = s.stack.iter().rposition(|n| n == v).unwrap_or(0);
            s.out.push(s.stack.split_off(at));
        }
    }
    let mut s = State {
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !s.index.contains_key(v) {
            visit(graph, v, &mut s);
        }
    }
    s.out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(root: &Path, files: &[(&str, &str)]) {
        for (path, text) in files {
            let path = root.join(path);
            let _ = std::fs::create_dir_all(path.parent().unwrap_or(root));
            let _ = std::fs::write(path, text);
        }
    }

    #[test]
    fn a_circle_through_a_folder_s_mod_rs_is_reported() {
        let root = std::env::temp_dir().join(format!("xtask-graph-mod-{}", std::process::id()));
        write(
            &root,
            &[
                ("crates/a/src/lib.rs", "//! A.\nmod front;\nmod routes;\n"),
                (
                    "crates/a/src/front.rs",
                    "//! F.\nuse crate::routes::helper;\npub struct Front;\n",
                ),
                (
                    "crates/a/src/routes/mod.rs",
                    "//! R.\nmod chat;\npub fn helper() {}\npub fn all() { chat::router(); }\n",
                ),
                (
                    "crates/a/src/routes/chat.rs",
                    "//! C.\nuse crate::front::Front;\npub fn router() { super::helper(); }\n",
                ),
            ],
        );
        let found = problems(&root);
        let _ = std::fs::remove_dir_all(&root);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].starts_with("import circle between 3 files"),
            "{}",
            found[0]
        );
    }

    #[test]
    fn a_planted_file_circle_is_reported_and_a_parent_child_pair_is_not() {
        let root = std::env::temp_dir().join(format!("xtask-graph-{}", std::process::id()));
        write(
            &root,
            &[
                (
                    "crates/a/src/lib.rs",
                    "//! A.\nmod x;\npub mod y;\nmod z;\npub use y::Y;\n",
                ),
                (
                    "crates/a/src/x.rs",
                    "//! X.\nuse crate::Y;\n\n// crate::z::Z\npub struct X;\n",
                ),
                (
                    "crates/a/src/y.rs",
                    "//! Y.\nmod inner;\npub struct Y(inner::I);\n",
                ),
                (
                    "crates/a/src/y/inner.rs",
                    "//! I.\npub struct I(super::Y);\n",
                ),
                (
                    "crates/a/src/z.rs",
                    "//! Z.\npub struct Z;\n#[cfg(test)]\nmod tests { use crate::x::X; }\n",
                ),
            ],
        );
        let clean = problems(&root);
        write(
            &root,
            &[(
                "crates/a/src/y.rs",
                "//! Y.\nmod inner;\npub struct Y(inner::I, crate::x::X);\n",
            )],
        );
        let found = problems(&root);
        let _ = std::fs::remove_dir_all(&root);
        assert_eq!(clean, Vec::<String>::new());
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].starts_with("import circle between 2 files"),
            "{}",
            found[0]
        );
        assert!(
            found[0].contains("\n    crates/a/src/x.rs:2 -> crates/a/src/y.rs: Y"),
            "{}",
            found[0]
        );
        assert!(
            found[0].contains("\n    crates/a/src/y.rs:3 -> crates/a/src/x.rs: X"),
            "{}",
            found[0]
        );
    }

    #[test]
    fn up_imports_past_the_limit_are_reported() {
        let root = std::env::temp_dir().join(format!("xtask-floors-{}", std::process::id()));
        // A chain a -> b -> c -> d -> e, then imports back down the chain.
        let mut files = vec![(
            "crates/core/src/lib.rs",
            "//! L.\nmod a;\nmod b;\nmod c;\nmod d;\nmod e;\n",
        )];
        files.extend([
            ("crates/core/src/a.rs", "use crate::b::B;\npub struct A;\n"),
            ("crates/core/src/b.rs", "use crate::c::C;\npub struct B;\n"),
            ("crates/core/src/c.rs", "use crate::d::D;\npub struct C;\n"),
            ("crates/core/src/d.rs", "use crate::e::E;\npub struct D;\n"),
            ("crates/core/src/e.rs", "pub struct E;\n"),
        ]);
        write(&root, &files);
        let clean = up_imports(&root, &root.join("crates/core"));
        // Four imports back up, each taking one name where the one
        // they close a loop with takes two.
        write(
            &root,
            &[
                (
                    "crates/core/src/a.rs",
                    "use crate::b::{B, B2};\npub struct A;\n",
                ),
                (
                    "crates/core/src/b.rs",
                    "use crate::c::{C, C2};\npub struct B; pub struct B2;\n",
                ),
                (
                    "crates/core/src/c.rs",
                    "use crate::d::{D, D2};\npub struct C; pub struct C2;\n",
                ),
                (
                    "crates/core/src/d.rs",
                    "use crate::e::{E, E2};\npub struct D; pub struct D2;\n",
                ),
                (
                    "crates/core/src/e.rs",
                    "pub struct E; pub struct E2;\nfn f(_: crate::a::A) {}\n",
                ),
            ],
        );
        let one = up_imports(&root, &root.join("crates/core"));
        write(
            &root,
            &[(
                "crates/core/src/d.rs",
                "use crate::e::{E, E2};\nuse crate::{a::A, b::B, c::C};\npub struct D; pub struct D2;\n",
            )],
        );
        let four = up_imports(&root, &root.join("crates/core"));
        let _ = std::fs::remove_dir_all(&root);
        assert_eq!(clean, Vec::<String>::new());
        assert_eq!(one, Vec::<String>::new());
        assert_eq!(four.len(), 1, "{four:?}");
        assert!(
            four[0].contains("4 imports run against the floors"),
            "{}",
            four[0]
        );
        assert!(four[0].contains("\n    crates/core/src/e.rs:2: crates/core/src/e.rs (floor 1) -> crates/core/src/a.rs (floor 5): A"), "{}", four[0]);
    }
}
