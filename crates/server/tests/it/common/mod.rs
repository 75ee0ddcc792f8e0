//! Shared by the server's integration tests: [`TestServer`] (the real
//! server on a free loopback port, and the answers it gives), the Python
//! SDK scripts' runner, and the Anthropic event parser.

mod server;

pub use server::{Answer, TestServer};
pub use understudy_testkit::python::python_with;

/// Runs the SDK script `script` (in this crate's `tests/`) with a Python
/// that has `package`, against `url`, in `mode`; returns the one JSON
/// object it prints, failing the test with its stderr when it fails.
pub async fn run_sdk(package: &str, script: &str, url: &str, mode: &str) -> serde_json::Value {
    let python = python_with(package);
    let script = format!("{}/tests/{script}", env!("CARGO_MANIFEST_DIR"));
    let (url, mode) = (url.to_owned(), mode.to_owned());
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(python)
            .arg(script)
            .arg(url)
            .arg(mode)
            .output()
    })
    .await
    .expect("the SDK script's task")
    .expect("the SDK script runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the SDK script prints one JSON object")
}

/// The `(event, data)` pairs of an Anthropic-style SSE body, data as sent,
/// `ping`s left out (the server adds its own to keep an idle stream alive);
/// every data's `type` must be its event's name.
pub fn anthropic_events(sse: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut name = None;
    for line in sse.lines() {
        if let Some(n) = line.strip_prefix("event: ") {
            name = Some(n.to_owned());
        } else if let Some(d) = line.strip_prefix("data: ") {
            let n = name
                .take()
                .unwrap_or_else(|| panic!("data without event: {line}"));
            let v: serde_json::Value =
                serde_json::from_str(d).unwrap_or_else(|e| panic!("{e}: {line}"));
            assert_eq!(v["type"], n.as_str(), "{line}");
            if n != "ping" {
                out.push((n, d.to_owned()));
            }
        }
    }
    out
}

/// `v` without `null` members (the adapters may omit or send them).
pub fn strip_nulls(v: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), strip_nulls(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(strip_nulls).collect()),
        other => other.clone(),
    }
}
