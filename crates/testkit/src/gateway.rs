//! [`TestGateway`]: an engine wired to simulators in one call.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

use understudy_core::Engine;
use understudy_providers::Providers;
use understudy_settings::Settings;
use understudy_types::Error;

use crate::sim::{Protocol, SimProvider};

/// An engine over simulated providers. Each provider gets the key
/// `test-key-<name>` unless added with [`TestGatewayBuilder::provider_without_key`].
///
/// The response cache is off (failover tests want every request to reach
/// the providers); [`TestGatewayBuilder::cache`] turns it on. So is session
/// affinity (failover tests want each request to start at the primary);
/// [`TestGatewayBuilder::affinity`] turns it on. So is the readiness
/// prober (tests count their simulators' calls);
/// [`TestGatewayBuilder::probe`] turns it on.
#[derive(Debug)]
pub struct TestGateway {
    pub engine: Engine,
}

/// Builds a [`TestGateway`].
#[derive(Debug, Default)]
pub struct TestGatewayBuilder {
    providers: Vec<(String, Protocol, String, bool)>,
    order: Option<Vec<String>>,
    toml: String,
    env: HashMap<String, String>,
    provider_lines: Vec<(String, String)>,
}

impl TestGateway {
    pub fn builder() -> TestGatewayBuilder {
        TestGatewayBuilder::default()
    }

    /// The most common setup: OpenAI-compatible simulators as `groq` (the
    /// primary) and `openai` (its fallback), and a gateway over them.
    pub async fn groq_and_openai() -> Result<(SimProvider, SimProvider, TestGateway), Error> {
        let groq = SimProvider::openai().await.map_err(sim_failed)?;
        let openai = SimProvider::openai().await.map_err(sim_failed)?;
        let gw = Self::builder()
            .provider("groq", &groq)
            .provider("openai", &openai)
            .build()
            .await?;
        Ok((groq, openai, gw))
    }

    /// The key the gateway sends to provider `name`.
    pub fn key_for(name: &str) -> String {
        format!("test-key-{name}")
    }
}

/// A state file no other gateway of any test uses (in the system's
/// temporary directory; made only when an admin change is kept).
pub fn state_file() -> std::path::PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    std::env::temp_dir()
        .join("understudy-testkit-state")
        .join(format!("{}-{n}.json", std::process::id()))
}

/// A simulator that could not start, as an engine error.
fn sim_failed(e: std::io::Error) -> Error {
    Error::Engine(format!("cannot start a simulator: {e}"))
}

impl TestGatewayBuilder {
    /// Routes provider `name` (built-in or extra) to `sim`, with a key.
    /// The first provider added is the primary unless [`Self::order`] says
    /// otherwise; the order is the order of addition.
    pub fn provider(mut self, name: &str, sim: &SimProvider) -> Self {
        self.providers
            .push((name.to_owned(), sim.protocol(), sim.base_url(), true));
        self
    }

    /// Like [`Self::provider`], but the provider has no key and so is
    /// unavailable.
    pub fn provider_without_key(mut self, name: &str, sim: &SimProvider) -> Self {
        self.providers
            .push((name.to_owned(), sim.protocol(), sim.base_url(), false));
        self
    }

    /// Adds a line (`key = value`) to provider `name`'s TOML table.
    pub fn provider_option(mut self, name: &str, line: &str) -> Self {
        self.provider_lines.push((name.to_owned(), line.to_owned()));
        self
    }

    /// The default route's order; its first entry is the primary.
    pub fn order(mut self, order: &[&str]) -> Self {
        self.order = Some(order.iter().map(|s| (*s).to_owned()).collect());
        self
    }

    /// Extra TOML appended to the generated configuration (timeouts,
    /// routes, more providers…).
    pub fn toml(mut self, text: &str) -> Self {
        self.toml.push('\n');
        self.toml.push_str(text);
        self
    }

    /// Turns the response cache on (it is off in test gateways).
    pub fn cache(self, on: bool) -> Self {
        self.env("UNDERSTUDY_CACHE", if on { "on" } else { "off" })
    }

    /// Turns session affinity on (it is off in test gateways).
    pub fn affinity(self, on: bool) -> Self {
        self.env("UNDERSTUDY_AFFINITY", if on { "on" } else { "off" })
    }

    /// Turns the readiness prober on (it is off in test gateways).
    pub fn probe(self, on: bool) -> Self {
        self.env("UNDERSTUDY_PROBE", if on { "on" } else { "off" })
    }

    /// An environment variable as the settings loader sees it.
    pub fn env(mut self, name: &str, value: &str) -> Self {
        self.env.insert(name.to_owned(), value.to_owned());
        self
    }

    /// The settings this builder describes.
    pub fn settings(&self) -> Result<Settings, String> {
        let order = self
            .order
            .clone()
            .unwrap_or_else(|| self.providers.iter().map(|p| p.0.clone()).collect());
        let mut text = String::new();
        if let Some(first) = order.first() {
            let quoted: Vec<String> = order.iter().map(|n| format!("{n:?}")).collect();
            let _ = writeln!(
                text,
                "[routing]\ndefault = {first:?}\norder = [{}]",
                quoted.join(", ")
            );
        }
        for (name, protocol, url, with_key) in &self.providers {
            let _ = writeln!(
                text,
                "[providers.{name}]\nkind = \"{protocol}\"\nbase_url = {url:?}\nmodel = \"{name}-model\""
            );
            if *with_key {
                let _ = writeln!(text, "api_key = {:?}", TestGateway::key_for(name));
            } else {
                let _ = writeln!(
                    text,
                    "api_key_env = \"UNDERSTUDY_TEST_UNSET_{}\"",
                    name.to_uppercase()
                );
            }
            for (_, line) in self.provider_lines.iter().filter(|(n, _)| n == name) {
                let _ = writeln!(text, "{line}");
            }
        }
        text.push_str(&self.toml);
        let mut env = self.env.clone();
        env.entry("UNDERSTUDY_CACHE".into())
            .or_insert_with(|| "off".into());
        env.entry("UNDERSTUDY_AFFINITY".into())
            .or_insert_with(|| "off".into());
        env.entry("UNDERSTUDY_PROBE".into())
            .or_insert_with(|| "off".into());
        // A state file of its own, never one in the working directory (the
        // default without a settings file).
        env.entry("UNDERSTUDY_STATE_FILE".into())
            .or_insert_with(|| state_file().display().to_string());
        Settings::from_toml_str(&text, move |k| env.get(k).cloned()).map_err(|e| e.to_string())
    }

    /// Starts the engine.
    pub async fn build(self) -> Result<TestGateway, Error> {
        let settings = self.settings().map_err(Error::Engine)?;
        let sinks = understudy_otlp::sinks(&settings)?;
        let engine = Engine::start_with(settings, Providers::factory(), sinks).await?;
        Ok(TestGateway { engine })
    }
}
