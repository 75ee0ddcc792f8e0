//! The workspace's crates stand in layers, and a crate depends only on
//! crates below it: Cargo then keeps every layer free of what sits above
//! it (no checker of ours needs to). [`LAYERS`] is the order, bottom
//! first; a crate may name any crate before it in its `[dependencies]`
//! (and `[build-dependencies]`, `[target.….dependencies]`), none after it.
//! Dev-dependencies are free: a crate's tests may use the testkit above
//! it. A workspace crate missing from the list is a problem too, so that
//! every new crate is given its place.

use std::path::Path;

/// The workspace's crates, bottom first. A name whose folder does not
/// exist (yet) is passed over.
const LAYERS: [&str; 13] = [
    "understudy-types",
    "understudy-settings",
    "understudy-policy",
    "understudy-wire",
    "understudy-record",
    "understudy-fleet",
    "understudy-core",
    "understudy-otlp",
    "understudy-providers",
    "understudy-server",
    "understudy-testkit",
    "understudy-cli",
    "xtask",
];

/// Every dependency of a workspace crate on a crate at or above it, and
/// every workspace crate that [`LAYERS`] does not place.
pub(crate) fn problems(root: &Path) -> Vec<String> {
    check(root, &LAYERS)
}

fn check(root: &Path, layers: &[&str]) -> Vec<String> {
    let mut manifests: Vec<_> = std::fs::read_dir(root.join("crates"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("Cargo.toml"))
        .filter(|m| m.exists())
        .collect();
    manifests.sort();
    manifests.push(root.join("xtask/Cargo.toml"));
    let mut problems = Vec::new();
    for manifest in manifests {
        let Ok(text) = std::fs::read_to_string(&manifest) else {
            continue;
        };
        let shown = manifest.strip_prefix(root).unwrap_or(&manifest).display();
        let Some(name) = package_name(&text) else {
            problems.push(format!("{shown}: no `[package] name`"));
            continue;
        };
        let Some(place) = layers.iter().position(|l| *l == name) else {
            problems.push(format!(
                "{shown}: the crate `{name}` has no place in the layers (xtask/src/tidy/layers.rs)"
            ));
            continue;
        };
        for (line, dep) in dependencies(&text) {
            let Some(above) = layers.iter().position(|l| *l == dep) else {
                continue;
            };
            if above >= place {
                problems.push(format!(
                    "{shown}:{line}: `{name}` depends on `{dep}`, which stands above it \
                     (the layers, bottom first: {})",
                    layers.join(", ")
                ));
            }
        }
    }
    problems
}

/// The `name` of the manifest's `[package]`.
fn package_name(text: &str) -> Option<String> {
    let mut in_package = false;
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            in_package = line == "[package]";
        } else if in_package {
            if let Some(value) = line.strip_prefix("name").map(str::trim_start) {
                let value = value.strip_prefix('=')?.trim().trim_matches('"');
                return Some(value.to_owned());
            }
        }
    }
    None
}

/// The crates named in the manifest's normal and build dependencies, with
/// the line that names each: the package a dependency really is, so a
/// rename (`rt = { package = "tokio" }`, or `package = …` inside a
/// `[dependencies.rt]` table) cannot hide it.
pub(crate) fn dependencies(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut in_deps = false;
    // Inside a `[dependencies.name]` table: its `package` renames it.
    let mut in_table = false;
    for (n, line) in text.lines().enumerate().map(|(n, l)| (n + 1, l.trim())) {
        if let Some(header) = line.strip_prefix('[') {
            let header = header.trim_end_matches(']');
            let table = header.rsplit('.').next().unwrap_or(header);
            let section = header.trim_start_matches("target.");
            let is_deps = |s: &str| s == "dependencies" || s == "build-dependencies";
            // `[dependencies.name]` names a crate in its header.
            if let Some(dep) = ["dependencies.", "build-dependencies."]
                .iter()
                .find_map(|p| section.strip_prefix(p))
            {
                out.push((n, dep.trim_matches('"').to_owned()));
                in_deps = false;
                in_table = true;
            } else {
                in_deps = is_deps(table);
                in_table = false;
            }
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        if in_table {
            if let (Some(renamed), Some(last)) = (package_of(line), out.last_mut()) {
                last.1 = renamed;
            }
        } else if in_deps {
            let key = line
                .split(['=', '.', ' '])
                .next()
                .unwrap_or("")
                .trim_matches('"');
            if !key.is_empty() {
                let real = package_of(line).unwrap_or_else(|| key.to_owned());
                out.push((n, real));
            }
        }
    }
    out
}

/// The crate a `package = "…"` key on `line` names, if it has one.
fn package_of(line: &str) -> Option<String> {
    let at = line.find("package")?;
    let before = line[..at].bytes().next_back();
    if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-') {
        return None;
    }
    let value = line[at + "package".len()..]
        .trim_start()
        .strip_prefix('=')?;
    let value = value.trim_start().strip_prefix('"')?;
    Some(value.split('"').next()?.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(root: &Path, folder: &str, manifest: &str) {
        let _ = std::fs::create_dir_all(root.join(folder));
        let _ = std::fs::write(root.join(folder).join("Cargo.toml"), manifest);
    }

    #[test]
    fn a_dependency_that_points_up_is_reported() {
        let root = std::env::temp_dir().join(format!("xtask-layers-{}", std::process::id()));
        write(&root, "xtask", "[package]\nname = \"xtask\"\n");
        write(
            &root,
            "crates/low",
            "[package]\nname = \"low\"\n\n[dependencies]\nserde = \"1\"\n\n\
             [dev-dependencies]\nhigh = { path = \"../high\" }\n",
        );
        write(
            &root,
            "crates/high",
            "[package]\nname = \"high\"\n\n[dependencies]\nlow.workspace = true\n",
        );
        let layers = ["low", "high", "xtask"];
        let clean = check(&root, &layers);
        write(
            &root,
            "crates/low",
            "[package]\nname = \"low\"\n\n[target.'cfg(unix)'.dependencies]\nhigh = \"1\"\n",
        );
        write(&root, "crates/stray", "[package]\nname = \"stray\"\n");
        let found = check(&root, &layers);
        let _ = std::fs::remove_dir_all(&root);
        assert_eq!(clean, Vec::<String>::new());
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found[0].starts_with("crates/low/Cargo.toml:5: `low` depends on `high`"));
        assert!(found[1].contains("the crate `stray` has no place"));
    }

    #[test]
    fn dependencies_are_read_in_every_form() {
        let text = "[package]\nname = \"x\"\n[dependencies]\na.workspace = true\nb = \"1\"\n\
                    # c = 1\n[dependencies.d]\npath = \"..\"\n[dev-dependencies]\ne = \"1\"\n\
                    [build-dependencies]\nf = \"1\"\n[features]\ng = [\"a/h\"]\n";
        let names: Vec<String> = dependencies(text).into_iter().map(|d| d.1).collect();
        assert_eq!(names, ["a", "b", "d", "f"]);
        assert_eq!(package_name(text).as_deref(), Some("x"));
    }

    #[test]
    fn a_renamed_dependency_is_read_as_the_crate_it_is() {
        let text = "[package]\nname = \"x\"\n[dependencies]\n\
                    rt = { package = \"tokio\", version = \"1\" }\n\
                    engine = { package = \"understudy-core\", path = \"../core\" }\n\
                    [dependencies.r2]\npackage = \"redis\"\nversion = \"1\"\n";
        let names: Vec<String> = dependencies(text).into_iter().map(|d| d.1).collect();
        assert_eq!(names, ["tokio", "understudy-core", "redis"]);
        let root = std::env::temp_dir().join(format!("xtask-layers-rename-{}", std::process::id()));
        write(
            &root,
            "crates/wire",
            "[package]\nname = \"understudy-wire\"\n[dependencies]\n\
             engine = { package = \"understudy-core\", path = \"../core\" }\n",
        );
        write(
            &root,
            "crates/core",
            "[package]\nname = \"understudy-core\"\n",
        );
        let problems = check(&root, &["understudy-wire", "understudy-core"]);
        let _ = std::fs::remove_dir_all(&root);
        assert_eq!(problems.len(), 1, "{problems:#?}");
        assert!(problems[0].starts_with(
            "crates/wire/Cargo.toml:4: `understudy-wire` depends on `understudy-core`"
        ));
    }
}
