//! An agent workload through the official `anthropic` Python SDK
//! (`tests/agent_workload.py`): concurrent sessions of many turns, shaped
//! as Claude Code's requests (a shared system prompt and tools of about
//! 10 000 tokens, `cache_control` on the last two system blocks and the
//! last message, streamed, `x-claude-code-session-id`), measured by the
//! usage the simulators report — their prompt caches count as a bill
//! would. [`measure`] runs it over any gateway configuration and returns
//! the shares; the baseline here is one Anthropic target alone, which
//! other routes (a tier of clouds, with or without affinity) compare with.
//! [`Clouds`] starts Claude on the Anthropic API, Bedrock and Vertex (three
//! cold caches) for such routes; each cloud alone caches as well.
//!
//! Its size: `UNDERSTUDY_WORKLOAD=SESSIONSxTURNS` (the full run is
//! `20x30`); by default a smaller one that keeps the test quick.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;
use understudy_testkit::{
    BedrockSim, CacheTotals, Protocol, Reply, SimProvider, TestGateway, TestGatewayBuilder,
    VertexSim,
};

use crate::common::{TestServer, python_with};

/// The key the driver sends (the gateway is told to take it).
const CLIENT_KEY: &str = "sk-understudy-workload";
/// The words of every simulated answer: with the user message after it,
/// each turn adds about 500 tokens.
const ANSWER_WORDS: usize = 250;

/// Claude on each platform, as the providers `claude`, `bedrock` and
/// `vertex` (ids as the clouds name the model), every simulator answering
/// as [`answering`] says.
pub struct Clouds {
    pub claude: SimProvider,
    pub bedrock: SimProvider,
    pub vertex: SimProvider,
    /// The two clouds' provider tables.
    toml: String,
}

/// How much work: concurrent sessions × turns each.
#[derive(Debug, Clone, Copy)]
pub struct Workload {
    pub sessions: usize,
    pub turns: usize,
}

/// What the driver saw, summed over every answered turn.
#[derive(Debug)]
pub struct Measured {
    /// Input tokens neither read from nor written to a cache.
    pub uncached: u64,
    pub cache_read: u64,
    pub cache_write: u64,
    pub requests: u64,
    /// Per session, the provider that served each turn.
    pub providers: Vec<Vec<String>>,
}

impl Workload {
    /// `UNDERSTUDY_WORKLOAD=SESSIONSxTURNS`, else 8 sessions of 12 turns.
    pub fn from_env() -> Self {
        std::env::var("UNDERSTUDY_WORKLOAD")
            .ok()
            .and_then(|v| {
                let (s, t) = v.split_once('x')?;
                Some(Self {
                    sessions: s.parse().ok()?,
                    turns: t.parse().ok()?,
                })
            })
            .unwrap_or(Self {
                sessions: 8,
                turns: 12,
            })
    }
}

impl Measured {
    pub fn total_input(&self) -> u64 {
        self.uncached + self.cache_read + self.cache_write
    }

    /// The share of input tokens read from a cache.
    pub fn read_share(&self) -> f64 {
        self.cache_read as f64 / self.total_input().max(1) as f64
    }

    /// Sessions by the provider that served their first turn.
    pub fn sessions_by_provider(&self) -> BTreeMap<String, usize> {
        let mut out = BTreeMap::new();
        for turns in &self.providers {
            if let Some(first) = turns.first() {
                *out.entry(first.clone()).or_insert(0) += 1;
            }
        }
        out
    }
}

impl Clouds {
    pub async fn start() -> Self {
        let (key_id, secret) = ("AKIDSIMULATEDWORKLOAD", "simulated/Secret+Key/workload");
        let (project, region) = ("understudy-workload", "us-east5");
        let claude = SimProvider::anthropic().await.unwrap();
        let bedrock_account = BedrockSim::new("us-east-1", key_id, secret, None);
        let bedrock = SimProvider::bedrock(&bedrock_account).await.unwrap();
        let vertex_account = VertexSim::new(project, region);
        let vertex = SimProvider::vertex(Protocol::Messages, &vertex_account)
            .await
            .unwrap();
        let key_file = vertex_account.key_file(&format!("{}/token", vertex.base_url()));
        for sim in [&claude, &bedrock, &vertex] {
            answering(sim);
        }
        let toml = format!(
            "[providers.bedrock]\nkind = \"bedrock\"\nregion = \"us-east-1\"\nbase_url = {:?}\n\
             model = \"us.anthropic.claude-sonnet-4-5-20250929-v1:0\"\n\
             aws_access_key_id = {key_id:?}\naws_secret_access_key = {secret:?}\n\n\
             [providers.vertex]\nkind = \"vertex\"\nproject = {project:?}\nregion = {region:?}\n\
             base_url = {:?}\ncredentials_file = {:?}\nmodel = \"claude-sonnet-4-5@20250929\"\n",
            bedrock.base_url(),
            vertex.base_url(),
            key_file.display().to_string(),
        );
        Self {
            claude,
            bedrock,
            vertex,
            toml,
        }
    }

    /// A gateway with the three providers and `order` as its default
    /// route (more settings, a tier of them, go in `extra`).
    pub fn gateway(&self, order: &[&str], extra: &str) -> TestGatewayBuilder {
        TestGateway::builder()
            .provider("claude", &self.claude)
            .toml(&self.toml)
            .toml(extra)
            .order(order)
    }

    /// Every simulator answers after `delay` (its first byte).
    pub fn answer_after(&self, delay: Duration) {
        for sim in [&self.claude, &self.bedrock, &self.vertex] {
            sim.first_token_delay(delay);
        }
    }

    /// Each simulator's cache totals, by provider name.
    pub fn billed(&self) -> BTreeMap<&'static str, CacheTotals> {
        BTreeMap::from([
            ("claude", self.claude.prompt_cache_totals()),
            ("bedrock", self.bedrock.prompt_cache_totals()),
            ("vertex", self.vertex.prompt_cache_totals()),
        ])
    }
}

/// Makes `sim` answer every turn with [`ANSWER_WORDS`] words.
pub fn answering(sim: &SimProvider) -> &SimProvider {
    let text: Vec<String> = (0..ANSWER_WORDS).map(|i| format!("a{i}")).collect();
    sim.always(Reply::text(text.join(" ")))
}

/// Runs `workload` through the real server over the gateway `gateway`
/// describes (its route named `default`), and returns what the driver
/// measured; every turn must be answered.
pub async fn measure(gateway: TestGatewayBuilder, workload: Workload) -> Measured {
    measure_on(gateway, workload, "default").await
}

/// [`measure`], the driver asking for the model (a route's name) `model`.
pub async fn measure_on(gateway: TestGatewayBuilder, workload: Workload, model: &str) -> Measured {
    let gw = gateway
        .env("UNDERSTUDY_API_KEYS", CLIENT_KEY)
        .build()
        .await
        .unwrap();
    let server = TestServer::start(gw.engine).await;
    let python = python_with("anthropic");
    let script = format!("{}/tests/agent_workload.py", env!("CARGO_MANIFEST_DIR"));
    let args = [
        script,
        server.url.clone(),
        format!("--sessions={}", workload.sessions),
        format!("--turns={}", workload.turns),
        format!("--api-key={CLIENT_KEY}"),
        format!("--model={model}"),
    ];
    let out =
        tokio::task::spawn_blocking(move || std::process::Command::new(python).args(args).output())
            .await
            .unwrap()
            .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["errors"], serde_json::json!([]), "{v}");
    let n = |k: &str| v[k].as_u64().unwrap();
    let providers = v["providers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|turns| {
            let turns = turns.as_array().unwrap();
            turns
                .iter()
                .map(|p| p.as_str().unwrap().to_owned())
                .collect()
        })
        .collect();
    let measured = Measured {
        uncached: n("input_tokens"),
        cache_read: n("cache_read"),
        cache_write: n("cache_write"),
        requests: n("requests"),
        providers,
    };
    assert_eq!(
        measured.requests,
        (workload.sessions * workload.turns) as u64,
        "{v}"
    );
    measured
}

#[tokio::test(flavor = "multi_thread")]
async fn one_anthropic_target_reads_most_input_from_its_cache() {
    let claude = SimProvider::anthropic().await.unwrap();
    answering(&claude);
    let workload = Workload::from_env();
    let m = measure(TestGateway::builder().provider("claude", &claude), workload).await;
    // What the SDK saw is what the simulator billed.
    let billed = claude.prompt_cache_totals();
    assert_eq!(
        billed,
        CacheTotals {
            requests: m.requests,
            read: m.cache_read,
            written: m.cache_write,
            uncached: m.uncached,
        }
    );
    assert!(m.providers.iter().flatten().all(|p| p == "claude"), "{m:?}");
    assert_eq!(
        m.sessions_by_provider(),
        BTreeMap::from([("claude".to_owned(), workload.sessions)])
    );
    assert_eq!(claude.violations(), Vec::<String>::new());
    // The shared prefix is read by every turn after a session's first
    // (and by most first turns); each turn writes only what it added.
    eprintln!(
        "agent workload {workload:?} on one target: read share {:.4} \
         (read {}, written {}, uncached {}, {} requests)",
        m.read_share(),
        m.cache_read,
        m.cache_write,
        m.uncached,
        m.requests
    );
    assert!(m.read_share() > 0.9, "{:.4}: {m:?}", m.read_share());
}

#[tokio::test(flavor = "multi_thread")]
async fn bedrock_and_vertex_alone_cache_the_workload_as_well() {
    let workload = Workload {
        sessions: 3,
        turns: 6,
    };
    let clouds = Clouds::start().await;
    let mut shares = Vec::new();
    for member in ["bedrock", "vertex"] {
        let m = measure(clouds.gateway(&[member], ""), workload).await;
        assert!(m.providers.iter().flatten().all(|p| p == member), "{m:?}");
        let billed = clouds.billed()[member];
        assert_eq!((billed.read, billed.written), (m.cache_read, m.cache_write));
        shares.push(m.read_share());
    }
    // A member's cache is its own: the Anthropic simulator saw nothing.
    assert_eq!(clouds.billed()["claude"], CacheTotals::default());
    for sim in [&clouds.claude, &clouds.bedrock, &clouds.vertex] {
        assert_eq!(sim.violations(), Vec::<String>::new());
    }
    eprintln!("agent workload {workload:?} on bedrock, vertex alone: read shares {shares:.4?}");
    assert!(shares.iter().all(|s| *s > 0.8), "{shares:?}");
}

/// The three clouds as one tier, weights 2 : 1 : 1, as the route `tier`.
const TIER: &str = "[routes]\ntier = [{ group = [\"claude\", \"bedrock\", \"vertex\"], \
                    weights = [2, 1, 1] }]\n";

#[tokio::test(flavor = "multi_thread")]
async fn a_tier_of_clouds_keeps_each_session_on_its_cache() {
    // Enough sessions that a split can be read against the weights.
    let workload = Workload {
        sessions: 20,
        ..Workload::from_env()
    };
    let alone = Clouds::start().await;
    let base = measure(alone.gateway(&["claude"], ""), workload).await;
    let tiered = Clouds::start().await;
    // The members answer alike, after the same wait: the group choice
    // sends a request to a member clearly faster to first output, and
    // answers of a millisecond or two would let a loaded machine's
    // scheduling (tens of milliseconds) make one member look so. A wait
    // of 200 ms also has every session's first turn sent before any
    // member's first sample.
    tiered.answer_after(Duration::from_millis(200));
    let m = measure_on(
        tiered.gateway(&["claude"], TIER).affinity(true),
        workload,
        "tier",
    )
    .await;
    let off = Clouds::start().await;
    off.answer_after(Duration::from_millis(200));
    let scattered = measure_on(
        off.gateway(&["claude"], TIER)
            .env("UNDERSTUDY_AFFINITY", "off"),
        workload,
        "tier",
    )
    .await;
    let split = m.sessions_by_provider();
    eprintln!(
        "agent workload {workload:?}: read share alone {:.4}, tier with affinity {:.4} \
         (sessions {split:?}), tier without {:.4} (sessions {:?})",
        base.read_share(),
        m.read_share(),
        scattered.read_share(),
        scattered.sessions_by_provider(),
    );
    // Every turn of a session on the member that served its first.
    for turns in &m.providers {
        assert!(turns.iter().all(|p| *p == turns[0]), "{turns:?}");
    }
    // Sessions split by the weights, within 10 points of each share.
    let n = workload.sessions as f64;
    for (member, weight) in [("claude", 0.5), ("bedrock", 0.25), ("vertex", 0.25)] {
        let share = split.get(member).copied().unwrap_or(0) as f64 / n;
        assert!((share - weight).abs() <= 0.1, "{member}: {split:?}");
    }
    // The cache is kept: at least 95 % of what one target alone reads.
    assert!(
        m.read_share() >= 0.95 * base.read_share(),
        "{:.4} against {:.4}",
        m.read_share(),
        base.read_share()
    );
    // Without affinity the growing conversation is written again on each
    // member it lands on.
    assert!(scattered.read_share() < m.read_share());
    for clouds in [&alone, &tiered, &off] {
        for sim in [&clouds.claude, &clouds.bedrock, &clouds.vertex] {
            assert_eq!(sim.violations(), Vec::<String>::new());
        }
    }
}
