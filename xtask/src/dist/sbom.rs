//! The release's CycloneDX SBOM (JSON, spec 1.6): every crate of the
//! binary's graph as a component (name, version, purl, the SHA-256 that
//! `Cargo.lock` pins, the licence it declares, `required` when linked in,
//! `excluded` when it only ran at build time), the dependency graph, and
//! the binary itself as the metadata's component with its own SHA-256.
//! Written from the graph alone, so the same sources give the same bytes.

use std::collections::HashSet;

use super::graph::{Crate, Graph, Kind};
use super::json::Json;

/// The CycloneDX specification version written.
pub(crate) const SPEC_VERSION: &str = "1.6";

/// What the SBOM says about the release besides its crates.
#[derive(Debug)]
pub(crate) struct Release<'a> {
    /// The binary's name (`understudy`).
    pub(crate) name: &'a str,
    pub(crate) version: &'a str,
    /// The target triple the binary is built for.
    pub(crate) target: &'a str,
    /// The SHA-256 of the binary, hex.
    pub(crate) binary_sha256: &'a str,
    /// The SHA-256 of the archive, hex: the serial number is made from it,
    /// so one release always has the same serial and another never does.
    pub(crate) archive_sha256: &'a str,
    /// Seconds since the epoch for `metadata.timestamp` (the source's date).
    pub(crate) epoch: u64,
}

/// The SBOM of `release`, whose binary is built from `graph`.
pub(crate) fn sbom(graph: &Graph, release: &Release<'_>) -> Json {
    let refs = bom_refs(&graph.crates);
    let root = &graph.crates[graph.root];
    let mut component = vec![
        ("type".to_owned(), Json::str("application")),
        ("bom-ref".to_owned(), Json::str(&refs[graph.root])),
        ("name".to_owned(), Json::str(release.name)),
        ("version".to_owned(), Json::str(release.version)),
        (
            "description".to_owned(),
            Json::str(format!(
                "the {} binary for {}, built from the package {}",
                release.name, release.target, root.name
            )),
        ),
        ("hashes".to_owned(), sha256(release.binary_sha256)),
    ];
    if let Some(license) = &root.license {
        component.push(("licenses".to_owned(), licenses(license)));
    }
    let tool = Json::object([
        ("type", Json::str("application")),
        ("name", Json::str("cargo xtask dist")),
        ("version", Json::str(release.version)),
    ]);
    let metadata = Json::object([
        ("timestamp", Json::str(rfc3339(release.epoch))),
        (
            "tools",
            Json::object([("components", Json::Array(vec![tool]))]),
        ),
        ("component", Json::Object(component)),
        (
            "properties",
            Json::Array(vec![Json::object([
                ("name", Json::str("understudy:target")),
                ("value", Json::str(release.target)),
            ])]),
        ),
    ]);
    let components = graph
        .crates
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != graph.root)
        .map(|(i, c)| crate_component(c, &refs[i]))
        .collect();
    let dependencies = graph
        .crates
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let on = c.deps.iter().map(|&d| Json::str(&refs[d])).collect();
            Json::object([("ref", Json::str(&refs[i])), ("dependsOn", Json::Array(on))])
        })
        .collect();
    Json::object([
        (
            "$schema",
            Json::str("http://cyclonedx.org/schema/bom-1.6.schema.json"),
        ),
        ("bomFormat", Json::str("CycloneDX")),
        ("specVersion", Json::str(SPEC_VERSION)),
        (
            "serialNumber",
            Json::str(serial_number(release.archive_sha256)),
        ),
        ("version", Json::Number("1".to_owned())),
        ("metadata", metadata),
        ("components", Json::Array(components)),
        ("dependencies", Json::Array(dependencies)),
    ])
}

/// The purl scanners look crates up by: `pkg:cargo/<name>@<version>` for a
/// crate from crates.io. A crate of this workspace (never published) or
/// from elsewhere gets none, so no scanner mistakes it for a crates.io
/// crate of the same name.
pub(crate) fn purl(krate: &Crate) -> Option<String> {
    let from_crates_io = krate.source.as_deref().is_some_and(|s| {
        s == "registry+https://github.com/rust-lang/crates.io-index"
            || s == "sparse+https://index.crates.io/"
    });
    from_crates_io.then(|| format!("pkg:cargo/{}@{}", krate.name, krate.version))
}

fn crate_component(krate: &Crate, bom_ref: &str) -> Json {
    let mut members = vec![
        ("type".to_owned(), Json::str("library")),
        ("bom-ref".to_owned(), Json::str(bom_ref)),
        ("name".to_owned(), Json::str(&krate.name)),
        ("version".to_owned(), Json::str(&krate.version)),
        (
            "scope".to_owned(),
            Json::str(match krate.kind {
                Kind::Runtime => "required",
                Kind::Build => "excluded",
            }),
        ),
    ];
    if let Some(sum) = &krate.checksum {
        members.push(("hashes".to_owned(), sha256(sum)));
    }
    if let Some(license) = &krate.license {
        members.push(("licenses".to_owned(), licenses(license)));
    }
    if let Some(purl) = purl(krate) {
        members.push(("purl".to_owned(), Json::str(purl)));
    }
    Json::Object(members)
}

/// Each crate's `bom-ref`: `name@version`, made unique should two sources
/// give the same pair.
fn bom_refs(crates: &[Crate]) -> Vec<String> {
    let mut seen = HashSet::new();
    crates
        .iter()
        .map(|c| {
            let base = format!("{}@{}", c.name, c.version);
            let mut candidate = base.clone();
            let mut n = 2;
            while !seen.insert(candidate.clone()) {
                candidate = format!("{base}#{n}");
                n += 1;
            }
            candidate
        })
        .collect()
}

fn sha256(hex: &str) -> Json {
    Json::Array(vec![Json::object([
        ("alg", Json::str("SHA-256")),
        ("content", Json::str(hex)),
    ])])
}

fn licenses(expression: &str) -> Json {
    Json::Array(vec![Json::object([("expression", Json::str(expression))])])
}

/// A `urn:uuid:` made from a SHA-256: its first 128 bits, with the version
/// and variant bits of a name-based UUID set.
fn serial_number(sha256_hex: &str) -> String {
    let mut hex: Vec<char> = sha256_hex.chars().take(32).collect();
    hex.resize(32, '0');
    hex[12] = '5';
    let variant = hex[16].to_digit(16).unwrap_or(0) & 0x3 | 0x8;
    hex[16] = char::from_digit(variant, 16).unwrap_or('8');
    let s: String = hex.into_iter().collect();
    format!(
        "urn:uuid:{}-{}-{}-{}-{}",
        &s[0..8],
        &s[8..12],
        &s[12..16],
        &s[16..20],
        &s[20..32]
    )
}

/// Seconds since the epoch as an RFC 3339 UTC time.
pub(crate) fn rfc3339(epoch: u64) -> String {
    let days = epoch / 86_400;
    let secs = epoch % 86_400;
    // Days to a civil date (Howard Hinnant's algorithm, for days >= 0).
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

#[cfg(test)]
mod tests {
    use super::{rfc3339, serial_number};

    #[test]
    fn times_and_serials() {
        for (epoch, text) in [
            (0, "1970-01-01T00:00:00Z"),
            (951_782_400, "2000-02-29T00:00:00Z"),
            (1_796_526_245, "2026-12-06T03:04:05Z"),
        ] {
            assert_eq!(rfc3339(epoch), text, "{epoch}");
        }
        assert_eq!(
            serial_number(&"f".repeat(64)),
            "urn:uuid:ffffffff-ffff-5fff-bfff-ffffffffffff"
        );
        assert_eq!(
            serial_number(&"0".repeat(64)),
            "urn:uuid:00000000-0000-5000-8000-000000000000"
        );
    }
}
