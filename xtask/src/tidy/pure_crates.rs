//! The pure crates' fence: the crates at the bottom of the workspace
//! name no runtime, network client or source of randomness in their
//! `[dependencies]`, so Cargo itself keeps them free of I/O.
//! `understudy-types` < `understudy-settings` < `understudy-policy`: each
//! may depend only on the ones to its left among them.

use std::path::Path;

/// The pure crates, bottom first: each may depend on those before it.
const LAYERS: [&str; 3] = ["types", "settings", "policy"];

/// Crates that do I/O, spawn tasks or draw random numbers.
const IMPURE: [&str; 9] = [
    "tokio",
    "ractor",
    "redis",
    "reqwest",
    "hyper",
    "hyper-util",
    "axum",
    "fastrand",
    "tower",
];

/// Every dependency of a pure crate that breaks the layering.
pub(crate) fn problems(root: &Path) -> Vec<String> {
    let mut problems = Vec::new();
    for (floor, name) in LAYERS.iter().enumerate() {
        let manifest = root.join("crates").join(name).join("Cargo.toml");
        let shown = format!("crates/{name}/Cargo.toml");
        let Ok(text) = std::fs::read_to_string(&manifest) else {
            problems.push(format!(
                "{shown}: a pure crate's manifest that cannot be read"
            ));
            continue;
        };
        let below = &LAYERS[..floor];
        for (_, dep) in super::layers::dependencies(&text) {
            if IMPURE.contains(&dep.as_str()) {
                problems.push(format!(
                    "{shown}: `understudy-{name}` is pure, but depends on `{dep}`"
                ));
            } else if dep
                .strip_prefix("understudy-")
                .is_some_and(|other| !below.contains(&other))
            {
                let allowed: Vec<String> =
                    below.iter().map(|b| format!("understudy-{b}")).collect();
                problems.push(format!(
                    "{shown}: `understudy-{name}` may depend only on the crates below it \
                     ({}), not on `{dep}`",
                    if allowed.is_empty() {
                        "none".to_owned()
                    } else {
                        allowed.join(", ")
                    }
                ));
            }
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    fn plant(dir: &str, manifests: [(&str, &str); 3]) -> PathBuf {
        let root = std::env::temp_dir().join(format!("xtask-layers-{dir}-{}", std::process::id()));
        for (name, text) in manifests {
            let crate_dir = root.join("crates").join(name);
            std::fs::create_dir_all(&crate_dir).expect("a temp dir");
            std::fs::write(crate_dir.join("Cargo.toml"), text).expect("a temp file");
        }
        root
    }

    const CLEAN: [(&str, &str); 3] = [
        ("types", "[dependencies]\nserde.workspace = true\n"),
        (
            "settings",
            "[dependencies]\ntoml.workspace = true\nunderstudy-types.workspace = true\n",
        ),
        (
            "policy",
            "[dependencies]\nunderstudy-settings.workspace = true\n\
             understudy-types = { workspace = true }\n\
             [dev-dependencies]\ntokio.workspace = true\n",
        ),
    ];

    #[test]
    fn clean_layers_pass() {
        let root = plant("clean", CLEAN);
        assert_eq!(super::problems(&root), Vec::<String>::new());
        let _ = std::fs::remove_dir_all(root);
    }

    #[test]
    fn planted_violations_fail() {
        let mut planted = CLEAN;
        planted[0].1 = "[dependencies]\nserde.workspace = true\nfastrand = \"2\"\n";
        planted[1].1 = "[dependencies]\nunderstudy-policy.workspace = true\n";
        planted[2].1 = "[dependencies.rt]\npackage = \"tokio\"\nworkspace = true\n";
        let root = plant("planted", planted);
        let problems = super::problems(&root);
        assert_eq!(problems.len(), 3, "{problems:#?}");
        assert!(
            problems[0].contains("crates/types/Cargo.toml") && problems[0].contains("fastrand")
        );
        assert!(problems[1].contains("understudy-policy"));
        assert!(problems[2].contains("crates/policy/Cargo.toml") && problems[2].contains("tokio"));
        let _ = std::fs::remove_dir_all(root);
    }

    #[test]
    fn the_workspace_keeps_its_layers() {
        assert_eq!(
            super::problems(&crate::project_root()),
            Vec::<String>::new()
        );
    }
}
