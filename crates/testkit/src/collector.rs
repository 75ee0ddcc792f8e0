//! A real OTLP/HTTP receiver for trace tests: `otlp_receiver.py` beside
//! this crate's manifest, which decodes what arrives with the OpenTelemetry
//! project's own messages (`opentelemetry-proto`, in the venv `cargo xtask
//! test` provisions), never with the gateway's code; and the spans it got,
//! as JSON, waited for by condition.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::eventually_within;

/// The receiver, killed when dropped.
#[derive(Debug)]
pub struct Receiver {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// `http://127.0.0.1:PORT` of its OTLP/gRPC side, when it has one
    /// ([`Receiver::start_grpc`]).
    pub grpc_url: Option<String>,
    http: reqwest::Client,
}

impl Receiver {
    /// A receiver on a free port.
    pub fn start() -> Self {
        Self::start_on(0)
    }

    /// A receiver on a free port that also takes OTLP/gRPC (on another
    /// free port: [`Receiver::grpc_url`]).
    pub fn start_grpc() -> Self {
        Self::spawn(0, true)
    }

    /// A receiver on `port` (0: a free one).
    pub fn start_on(port: u16) -> Self {
        Self::spawn(port, false)
    }

    fn spawn(port: u16, grpc: bool) -> Self {
        let python = crate::python::python_with(if grpc { "grpc" } else { "opentelemetry.proto" });
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/otlp_receiver.py");
        let mut command = Command::new(python);
        command.arg(script).arg(port.to_string());
        if grpc {
            command.arg("--grpc");
        }
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the receiver starts");
        let stdout = child.stdout.take().expect("its stdout");
        let mut lines = BufReader::new(stdout);
        let mut port = || {
            let mut line = String::new();
            lines
                .read_line(&mut line)
                .expect("the receiver prints its port");
            line.trim().parse::<u16>().expect("a port")
        };
        let url = format!("http://127.0.0.1:{}", port());
        let grpc_url = grpc.then(|| format!("http://127.0.0.1:{}", port()));
        // The rest of its output is not read; it prints nothing more.
        Self {
            child,
            url,
            grpc_url,
            http: crate::http_client(),
        }
    }

    /// Every span received so far (a test fails when the receiver does
    /// not answer).
    pub async fn spans(&self) -> Vec<Value> {
        let response = self
            .http
            .get(format!("{}/spans", self.url))
            .send()
            .await
            .expect("the receiver answers");
        let text = response.text().await.expect("the receiver's spans");
        let v: Value = text.parse().expect("the receiver's spans are JSON");
        v["spans"].as_array().cloned().unwrap_or_default()
    }

    /// The spans of trace `trace`, once there are `n`.
    pub async fn trace(&self, trace: &str, n: usize) -> Vec<Value> {
        self.spans_where(n, |s| s["trace_id"] == trace).await
    }

    /// The spans `keep` keeps, once there are `n` (the failure names what
    /// came).
    pub async fn spans_where(&self, n: usize, keep: impl Fn(&Value) -> bool) -> Vec<Value> {
        eventually_within(
            Duration::from_secs(20),
            "the spans at the receiver",
            async || {
                let got: Vec<Value> = self.spans().await.into_iter().filter(|s| keep(s)).collect();
                if got.len() >= n {
                    Ok(got)
                } else {
                    let names: Vec<String> = got
                        .iter()
                        .map(|s| {
                            format!(
                                "{} {}",
                                s["name"], s["attributes"]["understudy.attempt.kind"]
                            )
                        })
                        .collect();
                    Err(format!("{} of {n} spans: {names:?}", got.len()))
                }
            },
        )
        .await
    }

    /// `down`: refuse exports (503) from now on; `up`: take them again.
    pub async fn set(&self, state: &str) {
        self.http
            .post(format!("{}/{state}", self.url))
            .send()
            .await
            .expect("the receiver answers");
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
