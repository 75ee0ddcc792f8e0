//! The crates a binary is built from, read from `cargo metadata` (the
//! resolved graph, filtered to the target platform) and `Cargo.lock` (each
//! registry crate's SHA-256). A crate is in when the binary's package
//! reaches it through normal or build dependencies; dev-dependencies are
//! left out. One reached only through a build dependency (a proc macro, a
//! build script's helper) is a build crate: it shaped the binary but is
//! not linked into it. This is the walk `cargo auditable` makes for the
//! list it embeds; [`Graph::retain`] then narrows it to the crates cargo
//! resolves for the build itself.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::json::Json;

/// A crate's name and version, as `cargo tree` prints them.
pub(crate) type NameVersion = (String, String);

/// How a crate takes part in the binary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Kind {
    /// Reached only through a build dependency: compiled, run at build
    /// time, not linked in.
    Build,
    /// Linked into the binary.
    Runtime,
}

/// One crate of the graph.
#[derive(Debug, Clone)]
pub(crate) struct Crate {
    pub(crate) name: String,
    pub(crate) version: String,
    /// `cargo metadata`'s source (`registry+…`, `git+…`); `None` for a
    /// crate of this workspace.
    pub(crate) source: Option<String>,
    /// The SPDX expression the crate declares (an old `A/B` written as
    /// `A OR B`); `None` when it declares only a licence file or nothing.
    pub(crate) license: Option<String>,
    /// The SHA-256 of the `.crate` file, from `Cargo.lock`.
    pub(crate) checksum: Option<String>,
    pub(crate) kind: Kind,
    /// Indices into [`Graph::crates`] of its normal and build dependencies.
    pub(crate) deps: Vec<usize>,
}

/// The crates of one binary, sorted by name then version.
#[derive(Debug)]
pub(crate) struct Graph {
    pub(crate) crates: Vec<Crate>,
    /// The index of the binary's own package.
    pub(crate) root: usize,
}

/// Builds the graph of package `root_name` from `cargo metadata`'s output
/// (`--format-version 1 --filter-platform <target>`) and `Cargo.lock`'s text.
pub(crate) fn graph(metadata: &Json, root_name: &str, lock: &str) -> Result<Graph, String> {
    let packages = metadata
        .get("packages")
        .map(Json::items)
        .ok_or("cargo metadata has no `packages`")?;
    let nodes = metadata
        .get("resolve")
        .and_then(|r| r.get("nodes"))
        .map(Json::items)
        .ok_or("cargo metadata has no `resolve.nodes`")?;
    let root_id = packages
        .iter()
        .find(|p| p.get("name").and_then(Json::as_str) == Some(root_name))
        .ok_or_else(|| format!("cargo metadata has no package {root_name}"))?
        .str_at("id")?;
    let edges = edges(nodes)?;
    let kinds = reach(root_id, &edges);

    let checksums = lock_checksums(lock);
    let mut crates: Vec<(String, Crate)> = Vec::new();
    for package in packages {
        let id = package.str_at("id")?;
        let Some(&kind) = kinds.get(id) else {
            continue;
        };
        let name = package.str_at("name")?.to_owned();
        let version = package.str_at("version")?.to_owned();
        let source = package
            .get("source")
            .and_then(Json::as_str)
            .map(str::to_owned);
        let checksum = source
            .as_ref()
            .and_then(|s| checksums.get(&(name.clone(), version.clone(), s.clone())))
            .cloned();
        let license = package
            .get("license")
            .and_then(Json::as_str)
            .map(spdx_expression);
        let krate = Crate {
            name,
            version,
            source,
            license,
            checksum,
            kind,
            deps: Vec::new(),
        };
        crates.push((id.to_owned(), krate));
    }
    crates.sort_by(|(a_id, a), (b_id, b)| {
        (&a.name, version_key(&a.version), a_id).cmp(&(&b.name, version_key(&b.version), b_id))
    });
    let index: HashMap<String, usize> = crates
        .iter()
        .enumerate()
        .map(|(i, (id, _))| (id.clone(), i))
        .collect();
    for (id, krate) in &mut crates {
        let mut deps: Vec<usize> = edges
            .get(id.as_str())
            .into_iter()
            .flatten()
            .filter_map(|(dep, _)| index.get(*dep).copied())
            .collect();
        deps.sort_unstable();
        deps.dedup();
        krate.deps = deps;
    }
    let root = index[root_id];
    Ok(Graph {
        crates: crates.into_iter().map(|(_, c)| c).collect(),
        root,
    })
}

// === impl Graph ===

impl Graph {
    /// Keeps only the crates in `built` (the root always), and returns the
    /// ones dropped. `cargo metadata` resolves features for the whole
    /// workspace, dev-dependencies included, so a feature only a test turns
    /// on adds crates the binary is built without; cargo's own resolution
    /// for the build (`cargo tree`) leaves them out.
    pub(crate) fn retain(&mut self, built: &BTreeSet<NameVersion>) -> Vec<NameVersion> {
        let root = self.root;
        let keep: Vec<bool> = self
            .crates
            .iter()
            .enumerate()
            .map(|(i, c)| i == root || built.contains(&(c.name.clone(), c.version.clone())))
            .collect();
        let mut new_index = vec![None; keep.len()];
        let mut next = 0;
        for (i, kept) in keep.iter().enumerate() {
            if *kept {
                new_index[i] = Some(next);
                next += 1;
            }
        }
        let mut dropped = Vec::new();
        let mut crates = Vec::new();
        for (i, mut krate) in std::mem::take(&mut self.crates).into_iter().enumerate() {
            if keep[i] {
                krate.deps = krate.deps.iter().filter_map(|&d| new_index[d]).collect();
                crates.push(krate);
            } else {
                dropped.push((krate.name, krate.version));
            }
        }
        self.crates = crates;
        self.root = new_index[root].unwrap_or(0);
        dropped
    }
}

/// Each package id's dependencies: (dependency's id, kind).
type Edges<'a> = HashMap<&'a str, Vec<(&'a str, Kind)>>;

/// Each node's dependencies that are not dev-only, with the strongest
/// kind among the ways it depends on them.
fn edges(nodes: &[Json]) -> Result<Edges<'_>, String> {
    let mut edges = HashMap::new();
    for node in nodes {
        let id = node.str_at("id")?;
        let mut deps = Vec::new();
        for dep in node.get("deps").map(Json::items).unwrap_or_default() {
            // `kind` is null for a normal dependency, "build" or "dev".
            let kind = dep
                .get("dep_kinds")
                .map(Json::items)
                .unwrap_or_default()
                .iter()
                .filter_map(|k| match k.get("kind") {
                    Some(Json::Null) | None => Some(Kind::Runtime),
                    Some(Json::String(s)) if s == "build" => Some(Kind::Build),
                    _ => None,
                })
                .max();
            if let Some(kind) = kind {
                deps.push((dep.str_at("pkg")?, kind));
            }
        }
        edges.insert(id, deps);
    }
    Ok(edges)
}

/// Every package reachable from `root`, with its kind: the strongest over
/// every path, a path being as strong as its weakest edge.
fn reach<'a>(root: &'a str, edges: &Edges<'a>) -> HashMap<&'a str, Kind> {
    let mut kinds = HashMap::from([(root, Kind::Runtime)]);
    let mut queue = vec![root];
    while let Some(parent) = queue.pop() {
        let parent_kind = kinds[parent];
        for &(child, edge) in edges.get(parent).into_iter().flatten() {
            let kind = edge.min(parent_kind);
            if kinds.get(child).is_none_or(|&seen| seen < kind) {
                kinds.insert(child, kind);
                queue.push(child);
            }
        }
    }
    kinds
}

/// `Cargo.lock`'s checksums, by name, version and source.
fn lock_checksums(lock: &str) -> BTreeMap<(String, String, String), String> {
    let mut out = BTreeMap::new();
    for block in lock.split("[[package]]").skip(1) {
        let field = |key: &str| {
            block.lines().find_map(|line| {
                let (k, v) = line.split_once('=')?;
                (k.trim() == key).then(|| v.trim().trim_matches('"').to_owned())
            })
        };
        if let (Some(name), Some(version), Some(source), Some(sum)) = (
            field("name"),
            field("version"),
            field("source"),
            field("checksum"),
        ) {
            out.insert((name, version, source), sum);
        }
    }
    out
}

/// An old-style `MIT/Apache-2.0` licence field as the SPDX expression it
/// means (`MIT OR Apache-2.0`); an SPDX expression unchanged.
fn spdx_expression(license: &str) -> String {
    license
        .split('/')
        .map(str::trim)
        .collect::<Vec<_>>()
        .join(" OR ")
}

/// A version's sort key: numeric parts compared as numbers.
fn version_key(version: &str) -> Vec<(u64, &str)> {
    version
        .split(['.', '-', '+'])
        .map(|part| (part.parse().unwrap_or(u64::MAX), part))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{Kind, graph};
    use crate::dist::json::Json;

    /// A metadata document: packages `(id, name)`; nodes `(id, [(dep, kinds)])`.
    fn metadata(packages: &[&str], nodes: &[(&str, &[(&str, &str)])]) -> Json {
        let mut text = String::from(r#"{"packages":["#);
        let listed: Vec<String> = packages
            .iter()
            .map(|name| {
                let source = if name.starts_with("app") {
                    "null".to_owned()
                } else {
                    r#""registry+https://github.com/rust-lang/crates.io-index""#.to_owned()
                };
                format!(
                    r#"{{"id":"{name}-id","name":"{name}","version":"1.0.0","source":{source},"license":"MIT/Apache-2.0"}}"#
                )
            })
            .collect();
        text.push_str(&listed.join(","));
        text.push_str(r#"],"resolve":{"nodes":["#);
        let listed: Vec<String> = nodes
            .iter()
            .map(|(id, deps)| {
                let deps: Vec<String> = deps
                    .iter()
                    .map(|(dep, kinds)| format!(r#"{{"pkg":"{dep}-id","dep_kinds":[{kinds}]}}"#))
                    .collect();
                format!(r#"{{"id":"{id}-id","deps":[{}]}}"#, deps.join(","))
            })
            .collect();
        text.push_str(&listed.join(","));
        text.push_str("]}}");
        Json::parse(&text).unwrap_or(Json::Null)
    }

    const NORMAL: &str = r#"{"kind":null}"#;
    const BUILD: &str = r#"{"kind":"build"}"#;
    const DEV: &str = r#"{"kind":"dev"}"#;

    #[test]
    fn kinds_follow_the_weakest_edge_of_the_strongest_path() {
        let meta = metadata(
            &["app", "lib", "cc", "macro", "testonly", "shared"],
            &[
                ("app", &[("lib", NORMAL), ("cc", BUILD), ("testonly", DEV)]),
                ("lib", &[("macro", NORMAL), ("shared", NORMAL)]),
                ("cc", &[("shared", NORMAL)]),
                ("macro", &[]),
                ("testonly", &[]),
                ("shared", &[]),
            ],
        );
        let lock = "[[package]]\nname = \"lib\"\nversion = \"1.0.0\"\n\
                    source = \"registry+https://github.com/rust-lang/crates.io-index\"\n\
                    checksum = \"abc\"\n";
        let g = graph(&meta, "app", lock).expect("the graph builds");
        let table: Vec<(&str, Kind, Vec<&str>)> = g
            .crates
            .iter()
            .map(|c| {
                let deps = c.deps.iter().map(|&d| g.crates[d].name.as_str()).collect();
                (c.name.as_str(), c.kind, deps)
            })
            .collect();
        assert_eq!(
            table,
            [
                ("app", Kind::Runtime, vec!["cc", "lib"]),
                ("cc", Kind::Build, vec!["shared"]),
                ("lib", Kind::Runtime, vec!["macro", "shared"]),
                ("macro", Kind::Runtime, vec![]),
                ("shared", Kind::Runtime, vec![]),
            ]
        );
        assert_eq!(g.crates[g.root].name, "app");
        let lib = &g.crates[2];
        assert_eq!(lib.checksum.as_deref(), Some("abc"));
        assert_eq!(lib.license.as_deref(), Some("MIT OR Apache-2.0"));
        assert_eq!(g.crates[0].source, None);

        // Narrowed to what cargo builds: `shared` goes, and with it the
        // edges to it; indices stay right.
        let mut g = g;
        let built = [("cc", "1.0.0"), ("lib", "1.0.0"), ("macro", "1.0.0")]
            .map(|(n, v)| (n.to_owned(), v.to_owned()))
            .into();
        let dropped = g.retain(&built);
        assert_eq!(dropped, [("shared".to_owned(), "1.0.0".to_owned())]);
        let table: Vec<(&str, Vec<&str>)> = g
            .crates
            .iter()
            .map(|c| {
                let deps = c.deps.iter().map(|&d| g.crates[d].name.as_str()).collect();
                (c.name.as_str(), deps)
            })
            .collect();
        assert_eq!(
            table,
            [
                ("app", vec!["cc", "lib"]),
                ("cc", vec![]),
                ("lib", vec!["macro"]),
                ("macro", vec![]),
            ]
        );
        assert_eq!(g.crates[g.root].name, "app");
    }
}
