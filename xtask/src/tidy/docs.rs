//! The user docs keep up with the code: every setting the TOML file
//! accepts is named in `docs/configuration.md`, and every Prometheus
//! metric the gateway registers is named in `docs/operations.md`.
//!
//! Both lists are read from the code as text, not kept by hand:
//!
//! - **Settings**: the file's shape is the serde struct `RawFile` in
//!   `crates/settings/src/`. Each of its fields is a TOML table (or
//!   a map of tables); a field whose type is another struct or enum of
//!   that folder is walked into, any other field is a setting. A setting
//!   is written as its dotted path in backticks, a map's key as `<name>`
//!   at the top level and `<model>` below it (the maps under a provider
//!   are keyed by model): `` `server.listen` ``,
//!   `` `providers.<name>.timeouts.connect` ``,
//!   `` `providers.<name>.prices.<model>.input_per_mtok` ``. A field's
//!   `#[serde(rename = "…")]` is the name the file uses; `flatten` puts a
//!   struct's fields in its parent's place. An enum is walked into
//!   through its variants' structs, and is a setting itself when a variant
//!   is not a struct (a route given as a list, a provider's `kind`).
//! - **Metrics**: every `.register("name", …, m.field.clone())` in a
//!   crate's source that uses `prometheus_client`; a field whose type is
//!   a `Counter` (or a `Family` of them) is exposed as `name_total`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Where the settings' structs live, from the repository's root.
const SETTINGS_DIR: &str = "crates/settings/src";
/// The struct the whole TOML file is read into.
const ROOT_STRUCT: &str = "RawFile";
/// The doc that must name every setting.
const CONFIGURATION_DOC: &str = "docs/configuration.md";
/// The doc that must name every metric.
const OPERATIONS_DOC: &str = "docs/operations.md";

/// What a struct or enum of the settings is, as far as the file's shape
/// goes.
#[derive(Debug)]
enum Shape {
    /// A struct's fields: (name in the file, type, flattened).
    Struct(Vec<Field>),
    /// An enum's variants' types (empty for a unit variant).
    Enum(Vec<String>),
}

#[derive(Debug)]
struct Field {
    name: String,
    ty: String,
    flatten: bool,
}

/// Everything `docs/` fails to say that the code does.
pub(super) fn problems(root: &Path) -> Vec<String> {
    let mut problems = Vec::new();
    match settings(root) {
        Ok(settings) => problems.extend(missing(root, CONFIGURATION_DOC, "setting", &settings)),
        Err(e) => problems.push(e),
    }
    match metrics(root) {
        Ok(metrics) => problems.extend(missing(root, OPERATIONS_DOC, "metric", &metrics)),
        Err(e) => problems.push(e),
    }
    problems
}

/// One problem for each of `names` that `doc` does not name in backticks.
fn missing(root: &Path, doc: &str, what: &str, names: &[String]) -> Vec<String> {
    let Ok(text) = std::fs::read_to_string(root.join(doc)) else {
        return vec![format!("{doc}: cannot be read, but must name every {what}")];
    };
    names
        .iter()
        .filter(|name| !text.contains(&format!("`{name}`")))
        .map(|name| format!("{doc}: does not name the {what} `{name}`"))
        .collect()
}

/// Every setting of the TOML file, as dotted paths.
fn settings(root: &Path) -> Result<Vec<String>, String> {
    let mut text = String::new();
    for file in rust_files(&root.join(SETTINGS_DIR)) {
        text.push_str(&std::fs::read_to_string(&file).unwrap_or_default());
        text.push('\n');
    }
    let shapes = shapes(&text);
    if !shapes.contains_key(ROOT_STRUCT) {
        return Err(format!(
            "{SETTINGS_DIR}: no `struct {ROOT_STRUCT}` to read the settings from"
        ));
    }
    let mut out = Vec::new();
    walk(&shapes, ROOT_STRUCT, "", 0, &mut out);
    Ok(out)
}

/// The settings under the type `name`, each path starting with `prefix`;
/// `depth` counts the maps above (for the key's placeholder).
fn walk(
    shapes: &BTreeMap<String, Shape>,
    name: &str,
    prefix: &str,
    depth: usize,
    out: &mut Vec<String>,
) {
    match shapes.get(name) {
        Some(Shape::Struct(fields)) => {
            for field in fields {
                let path = if field.flatten {
                    prefix.to_owned()
                } else if prefix.is_empty() {
                    field.name.clone()
                } else {
                    format!("{prefix}.{}", field.name)
                };
                value(shapes, &field.ty, &path, depth, out);
            }
        }
        Some(Shape::Enum(variants)) => {
            if variants.iter().any(|v| !shapes.contains_key(inner(v))) {
                out.push(prefix.to_owned());
            }
            for variant in variants.iter().filter(|v| shapes.contains_key(inner(v))) {
                walk(shapes, inner(variant), prefix, depth, out);
            }
        }
        None => out.push(prefix.to_owned()),
    }
}

/// The settings of a value of type `ty` at `path`.
fn value(
    shapes: &BTreeMap<String, Shape>,
    ty: &str,
    path: &str,
    depth: usize,
    out: &mut Vec<String>,
) {
    let ty = inner(ty);
    if let Some(map_value) = map_value(ty) {
        let value_ty = inner(map_value);
        if shapes.contains_key(value_ty) {
            let key = if depth == 0 { "<name>" } else { "<model>" };
            walk(shapes, value_ty, &format!("{path}.{key}"), depth + 1, out);
        } else {
            out.push(path.to_owned());
        }
    } else if shapes.contains_key(ty) {
        walk(shapes, ty, path, depth, out);
    } else {
        out.push(path.to_owned());
    }
}

/// `T` of `Option<T>` (and `Box<T>`), else `ty` itself.
fn inner(ty: &str) -> &str {
    let ty = ty.trim();
    for wrapper in ["Option<", "Box<"] {
        if let Some(rest) = ty.strip_prefix(wrapper).and_then(|r| r.strip_suffix('>')) {
            return inner(rest);
        }
    }
    ty
}

/// `V` of `BTreeMap<String, V>` or `HashMap<String, V>`.
fn map_value(ty: &str) -> Option<&str> {
    ["BTreeMap<", "HashMap<"].into_iter().find_map(|map| {
        let args = ty.strip_prefix(map)?.strip_suffix('>')?;
        let (_, value) = args.split_once(',')?;
        Some(value.trim())
    })
}

/// The structs (with named fields) and enums in `text`, by name.
fn shapes(text: &str) -> BTreeMap<String, Shape> {
    let mut shapes = BTreeMap::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let line = line.trim();
        let Some((kind, name)) = item_head(line) else {
            continue;
        };
        let body: Vec<&str> = lines
            .by_ref()
            .map(str::trim)
            .take_while(|l| *l != "}")
            .collect();
        let shape = if kind == "struct" {
            Shape::Struct(fields(&body))
        } else {
            // A variant's type (a unit variant's is empty).
            Shape::Enum(
                body.iter()
                    .filter(|l| l.starts_with(|c: char| c.is_ascii_uppercase()))
                    .map(|l| match l.split_once('(') {
                        Some((_, rest)) => rest.trim_end_matches(',').trim_end_matches(')'),
                        None => "",
                    })
                    .map(str::to_owned)
                    .collect(),
            )
        };
        shapes.insert(name.to_owned(), shape);
    }
    shapes
}

/// `("struct", Name)` for `pub(super) struct Name {`, the same for an
/// enum; nothing for anything else (a tuple struct, a unit struct).
fn item_head(line: &str) -> Option<(&'static str, &str)> {
    let line = line.strip_suffix('{')?.trim_end();
    let words: Vec<&str> = line.split_whitespace().collect();
    let at = words.iter().position(|w| *w == "struct" || *w == "enum")?;
    let name = words.get(at + 1)?;
    let plain = words.len() == at + 2 && name.chars().all(|c| c.is_alphanumeric() || c == '_');
    let kind = if words[at] == "struct" {
        "struct"
    } else {
        "enum"
    };
    plain.then_some((kind, *name))
}

/// The fields of a struct's body, with the names serde gives them.
fn fields(body: &[&str]) -> Vec<Field> {
    let mut out = Vec::new();
    let (mut rename, mut flatten, mut skip) = (None, false, false);
    for line in body {
        if line.starts_with("//") {
            continue;
        }
        if let Some(attr) = line.strip_prefix("#[serde(") {
            if let Some((_, rest)) = attr.split_once("rename = \"") {
                rename = rest.split('"').next().map(str::to_owned);
            }
            flatten |= attr.contains("flatten");
            skip |= attr.contains("skip");
            continue;
        }
        let line = line
            .strip_prefix("pub(super) ")
            .or_else(|| line.strip_prefix("pub(crate) "))
            .or_else(|| line.strip_prefix("pub "))
            .unwrap_or(line);
        if let Some((name, ty)) = line.split_once(": ") {
            if !skip && name.chars().all(|c| c.is_alphanumeric() || c == '_') {
                out.push(Field {
                    name: rename.take().unwrap_or_else(|| name.to_owned()),
                    ty: ty.trim_end_matches(',').to_owned(),
                    flatten,
                });
            }
        }
        (rename, flatten, skip) = (None, false, false);
    }
    out
}

/// Every metric the crates register, as Prometheus exposes its name.
fn metrics(root: &Path) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for file in rust_files(&root.join("crates")) {
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        if !text.contains("prometheus_client") {
            continue;
        }
        let shown = file.strip_prefix(root).unwrap_or(&file).display();
        for call in text.split(".register(").skip(1) {
            let call = call.trim_start();
            let Some(rest) = call.strip_prefix('"') else {
                continue;
            };
            let Some((name, rest)) = rest.split_once('"') else {
                continue;
            };
            let statement = rest.split(");").next().unwrap_or(rest);
            let field = statement
                .trim()
                .trim_end_matches(',')
                .trim_end()
                .strip_suffix(".clone()")
                .and_then(|e| e.rsplit('.').next())
                .ok_or_else(|| {
                    format!("{shown}: cannot tell which field the metric `{name}` registers")
                })?;
            let ty = field_type(&text, field).ok_or_else(|| {
                format!("{shown}: cannot find the type of `{field}`, the metric `{name}`")
            })?;
            out.push(if ty.contains("Counter") {
                format!("{name}_total")
            } else {
                name.to_owned()
            });
        }
    }
    if out.is_empty() {
        return Err("crates/: no Prometheus metric registered, or tidy cannot find them".into());
    }
    Ok(out)
}

/// The declared type of the struct field `field` in `text`.
fn field_type<'t>(text: &'t str, field: &str) -> Option<&'t str> {
    text.lines().find_map(|line| {
        let line = line.trim();
        let line = line
            .strip_prefix("pub(crate) ")
            .or_else(|| line.strip_prefix("pub "))
            .unwrap_or(line);
        let ty = line.strip_prefix(field)?.strip_prefix(": ")?;
        ty.ends_with(',').then_some(ty)
    })
}

/// The `.rs` files under `dir`, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    super::collect(dir, &mut files);
    files.sort();
    files
}

#[cfg(test)]
mod tests {
    use super::*;

    const SETTINGS: &str = r#"
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(super) struct RawFile {
    pub(super) server: RawServer,
    pub(super) providers: BTreeMap<String, RawProvider>,
    pub(super) routes: BTreeMap<String, RawRouteSpec>,
    pub(super) budget: Option<RawBudget>,
}

struct RawServer {
    /// Where to listen.
    listen: Option<String>,
    #[serde(rename = "keys")]
    api_keys: Vec<String>,
}

pub(super) struct RawProvider {
    #[serde(default)]
    headers: BTreeMap<String, String>,
    prices: BTreeMap<String, Price>,
    #[serde(flatten)]
    timeouts: RawTimeouts,
}

pub struct Price {
    pub input_per_mtok: f64,
}

struct RawTimeouts {
    connect: Option<f64>,
}

#[serde(untagged)]
pub(super) enum RawRouteSpec {
    Targets(Vec<String>),
    Table(RawRoute),
}

struct RawRoute {
    targets: Vec<String>,
}

struct RawBudget {
    window: Option<String>,
    kind: Kind,
}

#[serde(rename_all = "lowercase")]
enum Kind {
    /// A comment.
    Openai,
    Gemini,
}
"#;

    #[test]
    fn settings_are_read_from_the_structs() {
        let mut out = Vec::new();
        walk(&shapes(SETTINGS), ROOT_STRUCT, "", 0, &mut out);
        assert_eq!(
            out,
            [
                "server.listen",
                "server.keys",
                "providers.<name>.headers",
                "providers.<name>.prices.<model>.input_per_mtok",
                "providers.<name>.connect",
                "routes.<name>",
                "routes.<name>.targets",
                "budget.window",
                "budget.kind",
            ]
        );
    }

    #[test]
    fn the_real_settings_and_metrics_are_found() {
        let root = crate::project_root();
        let settings = settings(&root).unwrap_or_default();
        for known in [
            "server.listen",
            "providers.<name>.kind",
            "providers.<name>.timeouts.connect",
            "providers.<name>.model_capabilities.<model>.vision",
            "routes.<name>.stream_commit",
            "budget.fallback_budget_usd",
        ] {
            assert!(
                settings.iter().any(|s| s == known),
                "{known} in {settings:?}"
            );
        }
        let metrics = metrics(&root).unwrap_or_default();
        for known in [
            "understudy_generations_total",
            "understudy_request_duration_seconds",
            "understudy_redis_degraded",
        ] {
            assert!(metrics.iter().any(|m| m == known), "{known} in {metrics:?}");
        }
    }

    #[test]
    fn a_missing_name_is_named() {
        let root = std::env::temp_dir().join(format!("xtask-docs-{}", std::process::id()));
        let _ = std::fs::create_dir_all(root.join("docs"));
        let _ = std::fs::write(root.join("docs/x.md"), "`server.listen` only\n");
        let names = ["server.listen".to_owned(), "server.keys".to_owned()];
        let found = missing(&root, "docs/x.md", "setting", &names);
        let _ = std::fs::remove_dir_all(&root);
        assert_eq!(
            found,
            ["docs/x.md: does not name the setting `server.keys`"]
        );
    }
}
