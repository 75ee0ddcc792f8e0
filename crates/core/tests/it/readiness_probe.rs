//! The readiness prober against every provider's simulator over real
//! HTTP: each protocol's and cloud's zero-token check (a model lookup, a
//! free token count, Azure's body that cannot generate) proves a healthy
//! target ready, a retired model not ready (`model_missing`) and a revoked
//! key not ready (`auth`), in each API's own answers, with no generation
//! call; a cloud target is probed under the id its provider maps the
//! route's name to; a bare 404 proves nothing; every key of a pool is
//! probed, a refused one put out (across the fleet), the target not ready
//! only when every key is refused; a not-ready target is left out of plans
//! and back once a probe passes; with the prober off nothing is probed.

use understudy_core::GenerateRequest;
use understudy_testkit::{
    AzureSim, BedrockSim, Protocol, Reply, SimProvider, TestGateway, VertexSim, eventually,
};
use understudy_types::ChatRequest;
use understudy_types::RouteSelector;

const AWS_KEY_ID: &str = "AKIDPROBETEST000";
const AWS_SECRET: &str = "probe/secret/0123456789";
const AZURE_KEY: &str = "azure-probe-key-0123456789";

/// One kind of provider: its simulator and its TOML table.
#[derive(Clone, Copy, Debug)]
enum Kind {
    OpenAi,
    /// Groq's model ids hold a `/`.
    Groq,
    Responses,
    Anthropic,
    Gemini,
    AzureClassic,
    AzureV1,
    AzureResponses,
    Bedrock,
    BedrockProfile,
    BedrockConverse,
    VertexClaude,
    VertexGemini,
}

/// Starts `kind`'s simulator and returns it with provider `name`'s table.
async fn provider(kind: Kind, name: &str) -> (SimProvider, String) {
    let direct = |kind: &str, sim: &SimProvider, model: &str| {
        format!(
            "[providers.{name}]\nkind = \"{kind}\"\nbase_url = {:?}\napi_key = \"key-{name}-0123456789\"\nmodel = {model:?}\n",
            sim.base_url()
        )
    };
    match kind {
        Kind::OpenAi | Kind::Groq => {
            let sim = SimProvider::openai().await.unwrap();
            let model = match kind {
                Kind::Groq => "openai/gpt-oss-120b",
                _ => "gpt-4o",
            };
            let table = direct("openai", &sim, model);
            (sim, table)
        }
        Kind::Responses => {
            let sim = SimProvider::openai_responses().await.unwrap();
            let table = direct("responses", &sim, "gpt-5");
            (sim, table)
        }
        Kind::Anthropic => {
            let sim = SimProvider::anthropic().await.unwrap();
            let table = direct("anthropic", &sim, "claude-sonnet-4-5");
            (sim, table)
        }
        Kind::Gemini => {
            let sim = SimProvider::gemini().await.unwrap();
            let table = direct("gemini", &sim, "gemini-2.5-flash");
            (sim, table)
        }
        Kind::AzureClassic | Kind::AzureV1 | Kind::AzureResponses => azure(kind, name).await,
        Kind::Bedrock | Kind::BedrockProfile | Kind::BedrockConverse => bedrock(kind, name).await,
        Kind::VertexClaude | Kind::VertexGemini => vertex(kind, name).await,
    }
}

async fn azure(kind: Kind, name: &str) -> (SimProvider, String) {
    let deployment = format!("{name}-deployment");
    let resource = AzureSim::new(AZURE_KEY, &[&deployment]);
    let protocol = match kind {
        Kind::AzureResponses => Protocol::Responses,
        _ => Protocol::ChatCompletions,
    };
    let sim = SimProvider::azure(&resource, protocol).await.unwrap();
    let mut table = format!(
        "[providers.{name}]\nkind = \"azure\"\nbase_url = {:?}\nmodel = {deployment:?}\napi_key = {AZURE_KEY:?}\n",
        sim.base_url()
    );
    match kind {
        Kind::AzureClassic => table.push_str("api_version = \"2025-04-01-preview\"\n"),
        Kind::AzureResponses => table.push_str("responses_api = true\n"),
        _ => {}
    }
    (sim, table)
}

async fn bedrock(kind: Kind, name: &str) -> (SimProvider, String) {
    let account = BedrockSim::new("us-east-1", AWS_KEY_ID, AWS_SECRET, None);
    let sim = SimProvider::bedrock(&account).await.unwrap();
    let model = match kind {
        Kind::BedrockProfile => "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
        Kind::BedrockConverse => "meta.llama3-70b-instruct-v1:0",
        _ => "anthropic.claude-sonnet-4-5-20250929-v1:0",
    };
    let table = format!(
        "[providers.{name}]\nkind = \"bedrock\"\nregion = \"us-east-1\"\nbase_url = {:?}\nmodel = {model:?}\n\
         aws_access_key_id = {AWS_KEY_ID:?}\naws_secret_access_key = {AWS_SECRET:?}\n",
        sim.base_url()
    );
    (sim, table)
}

async fn vertex(kind: Kind, name: &str) -> (SimProvider, String) {
    let account = VertexSim::new("probe-project", "us-east5");
    let (protocol, model) = match kind {
        Kind::VertexGemini => (Protocol::GenerateContent, "gemini-2.5-flash"),
        _ => (Protocol::Messages, "claude-sonnet-4-5@20250929"),
    };
    let sim = SimProvider::vertex(protocol, &account).await.unwrap();
    let key_file = account.key_file(&format!("{}/token", sim.base_url()));
    let table = format!(
        "[providers.{name}]\nkind = \"vertex\"\nproject = \"probe-project\"\nregion = \"us-east5\"\n\
         base_url = {:?}\ncredentials_file = {:?}\nmodel = {model:?}\n",
        sim.base_url(),
        key_file.display().to_string(),
    );
    (sim, table)
}

/// The model a provider's table names.
fn model_of(table: &str) -> String {
    let line = table.lines().find(|l| l.starts_with("model = ")).unwrap();
    line.trim_start_matches("model = ")
        .trim_matches('"')
        .to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn every_providers_probe_tells_ready_from_a_retired_model_and_a_revoked_key() {
    let kinds = [
        Kind::OpenAi,
        Kind::Groq,
        Kind::Responses,
        Kind::Anthropic,
        Kind::Gemini,
        Kind::AzureClassic,
        Kind::AzureV1,
        Kind::AzureResponses,
        Kind::Bedrock,
        Kind::BedrockProfile,
        Kind::BedrockConverse,
        Kind::VertexClaude,
        Kind::VertexGemini,
    ];
    for kind in kinds {
        let (ok, ok_table) = provider(kind, "a_ok").await;
        let (retired, retired_table) = provider(kind, "b_retired").await;
        let (revoked, revoked_table) = provider(kind, "c_revoked").await;
        retired.retire_model(&model_of(&retired_table));
        revoked.revoke_key();
        let gw = TestGateway::builder()
            .toml(&[ok_table, retired_table, revoked_table].concat())
            .order(&["a_ok", "b_retired", "c_revoked"])
            .build()
            .await
            .unwrap();
        let found = gw.engine.probe_now().await;
        let seen: Vec<(&str, &str, Option<&str>)> = found
            .iter()
            .map(|r| (r.provider.as_str(), r.state, r.reason))
            .collect();
        assert_eq!(
            seen,
            [
                ("a_ok", "ready", None),
                ("b_retired", "not_ready", Some("model_missing")),
                ("c_revoked", "not_ready", Some("auth")),
            ],
            "{kind:?}: {found:?}"
        );
        for (name, sim) in [("ok", &ok), ("retired", &retired), ("revoked", &revoked)] {
            assert_eq!(
                sim.generation_calls(),
                0,
                "{kind:?} {name}: {:?}",
                sim.received()
            );
            assert_eq!(sim.violations(), Vec::<String>::new(), "{kind:?} {name}");
        }
        gw.engine.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cloud_target_is_probed_under_the_id_its_provider_maps_the_name_to() {
    const ID: &str = "anthropic.claude-sonnet-4-5-20250929-v1:0";
    let (cloud, table) = bedrock(Kind::Bedrock, "cloud").await;
    let spare = SimProvider::openai().await.unwrap();
    // The route says `claude-sonnet`; plans hold Bedrock's own id.
    cloud.retire_model(ID);
    let gw = TestGateway::builder()
        .provider("spare", &spare)
        .order(&["spare"])
        .toml(&format!(
            "{table}models = {{ \"claude-sonnet\" = {ID:?} }}\n\
             [routes]\nsmart = [\"cloud:claude-sonnet\", \"spare:gpt-4o\"]\n\
             alone = [\"cloud:claude-sonnet\"]\n"
        ))
        .build()
        .await
        .unwrap();
    let found = gw.engine.probe_now().await;
    let cloud_found: Vec<(&str, &str)> = found
        .iter()
        .filter(|r| r.provider == "cloud")
        .map(|r| (r.model.as_str(), r.state))
        .collect();
    assert_eq!(cloud_found, [(ID, "not_ready")], "{found:?}");
    // Plans skip it, and `/readyz`'s check counts it.
    let served = gw
        .engine
        .generate(
            GenerateRequest::new(ChatRequest::user("hi"))
                .route(RouteSelector::Named("smart".into())),
        )
        .await
        .unwrap();
    assert_eq!(served.provider, "spare");
    assert_eq!(cloud.generation_calls(), 0, "{:?}", cloud.received());
    let unready = gw.engine.readiness().await.unwrap();
    assert!(
        unready
            .iter()
            .any(|r| r.route == "alone" && r.targets.iter().any(|t| t.target.contains(ID))),
        "{unready:?}"
    );
    gw.engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bare_404_from_a_server_without_model_lookups_proves_nothing() {
    let compat = SimProvider::openai().await.unwrap();
    compat.without_model_lookups();
    let gw = TestGateway::builder()
        .provider("compat", &compat)
        .build()
        .await
        .unwrap();
    let found = gw.engine.probe_now().await;
    assert_eq!(compat.lookups(), 1);
    assert_eq!(found[0].state, "unchecked", "{found:?}");
    assert!(gw.engine.readiness().await.unwrap().is_empty());
    let served = gw
        .engine
        .generate(GenerateRequest::new(ChatRequest::user("hi")))
        .await
        .unwrap();
    assert_eq!(served.provider, "compat");
    gw.engine.shutdown().await;
}

const POOL_A: &str = "sk-probe-pool-a-0001";
const POOL_B: &str = "sk-probe-pool-b-0002";

/// Provider `pool`'s table: two keys on `sim`.
fn pool_table(sim: &SimProvider) -> String {
    format!(
        "[providers.pool]\nkind = \"openai\"\nbase_url = {:?}\nmodel = \"m\"\napi_keys = [{POOL_A:?}, {POOL_B:?}]\n",
        sim.base_url()
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn every_key_of_a_pool_is_probed_and_a_refused_one_goes_out() {
    let sim = SimProvider::openai().await.unwrap();
    sim.revoke_one_key(POOL_A);
    let gw = TestGateway::builder()
        .toml(&pool_table(&sim))
        .order(&["pool"])
        .build()
        .await
        .unwrap();
    // One key refused, the other serves: ready, the refusal named.
    let found = gw.engine.probe_now().await;
    assert_eq!(sim.lookups(), 2);
    assert_eq!(found[0].state, "ready", "{found:?}");
    let detail = found[0].detail.clone().unwrap_or_default();
    assert!(detail.starts_with("key `key-1`: 401"), "{detail}");
    // The refused key is out of the pool, as a call's refusal puts it.
    let status = gw.engine.providers().await.unwrap();
    let keys = &status.iter().find(|p| p.name == "pool").unwrap().keys;
    assert_eq!(keys[0].out, Some("auth"), "{keys:?}");
    assert!(keys[1].available, "{keys:?}");
    for _ in 0..4 {
        gw.engine
            .generate(GenerateRequest::new(ChatRequest::user("hi")))
            .await
            .unwrap();
    }
    assert!(
        sim.received().iter().all(|r| r.api_key() == Some(POOL_B)),
        "every call on the key that serves"
    );
    gw.engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_key_a_probe_found_refused_is_out_across_the_fleet() {
    let redis = understudy_testkit::RedisServer::start().unwrap();
    let sim = SimProvider::openai().await.unwrap();
    sim.revoke_one_key(POOL_A);
    // Both serve with the prober on; whichever holds the lease probes,
    // and the other hears of the refused key through Redis.
    let instance = async || {
        TestGateway::builder()
            .toml(&pool_table(&sim))
            .toml("[probe]\ninterval = 0.2\n")
            .probe(true)
            .order(&["pool"])
            .env("REDIS_URL", &redis.url())
            .build()
            .await
            .unwrap()
    };
    let (_one, two) = (instance().await, instance().await);
    eventually("instance two to hold the refused key out", async || {
        let status = two.engine.providers().await.unwrap();
        let keys = &status.iter().find(|p| p.name == "pool").unwrap().keys;
        keys[0].out == Some("auth")
    })
    .await;
    for _ in 0..4 {
        two.engine
            .generate(GenerateRequest::new(ChatRequest::user("hi")))
            .await
            .unwrap();
    }
    assert!(sim.received().iter().all(|r| r.api_key() == Some(POOL_B)));
}

/// `providers --check` (a one-off probe) tells the fleet nothing: a
/// stale secret on an operator's machine must not take a serving
/// instance's key out. The check awaits what it writes, so Redis holds no
/// key-out record once it has returned.
#[tokio::test(flavor = "multi_thread")]
async fn a_one_off_check_puts_no_key_out_across_the_fleet() {
    let redis = understudy_testkit::RedisServer::start().unwrap();
    let sim = SimProvider::openai().await.unwrap();
    sim.revoke_one_key(POOL_A);
    let gw = TestGateway::builder()
        .toml(&pool_table(&sim))
        .order(&["pool"])
        .env("REDIS_URL", &redis.url())
        .build()
        .await
        .unwrap();
    let found = gw.engine.probe_now().await;
    assert_eq!(found[0].state, "ready", "{found:?}");
    let mut c = redis::Client::open(redis.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let outs: Vec<String> = redis::cmd("KEYS")
        .arg("understudy:{key:*}:out")
        .query_async(&mut c)
        .await
        .unwrap();
    assert!(outs.is_empty(), "{outs:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pool_whose_every_key_is_refused_is_not_ready() {
    let sim = SimProvider::openai().await.unwrap();
    let gw = TestGateway::builder()
        .toml(&pool_table(&sim))
        .order(&["pool"])
        .build()
        .await
        .unwrap();
    sim.revoke_one_key(POOL_A);
    sim.revoke_one_key(POOL_B);
    let found = gw.engine.probe_now().await;
    assert_eq!(
        (found[0].state, found[0].reason),
        ("not_ready", Some("auth")),
        "{found:?}"
    );
    gw.engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_not_ready_fallback_is_skipped_until_a_probe_passes() {
    let primary = SimProvider::openai().await.unwrap();
    let fallback = SimProvider::openai().await.unwrap();
    let spare = SimProvider::openai().await.unwrap();
    primary.always(Reply::status(503));
    fallback.retire_model("fallback-model");
    let gw = TestGateway::builder()
        .provider("primary", &primary)
        .provider("fallback", &fallback)
        .provider("spare", &spare)
        .toml("[probe]\ninterval = 0.2\n")
        .probe(true)
        .build()
        .await
        .unwrap();
    eventually("the fallback not ready", async || {
        gw.engine
            .target_readiness()
            .iter()
            .any(|r| r.provider == "fallback" && r.not_ready())
    })
    .await;
    let served = gw
        .engine
        .generate(GenerateRequest::new(ChatRequest::user("hi")))
        .await
        .unwrap();
    assert_eq!(served.provider, "spare");
    assert_eq!(fallback.generation_calls(), 0);
    // Its event names the skip and why.
    let skipped = eventually("the request's event", async || {
        gw.engine
            .recent()
            .events()
            .into_iter()
            .find(|e| e.request_id == served.request_id)
            .map(|e| e.skipped)
    })
    .await;
    assert!(
        skipped
            .iter()
            .any(|s| s.provider == "fallback" && s.reason == "not_ready"),
        "{skipped:?}"
    );

    // The model is back: the next probe proves it, and plans use it again.
    fallback.restore_model("fallback-model");
    eventually("the fallback ready again", async || {
        gw.engine
            .target_readiness()
            .iter()
            .any(|r| r.provider == "fallback" && r.state == "ready")
    })
    .await;
    let served = gw
        .engine
        .generate(GenerateRequest::new(ChatRequest::user("hi")))
        .await
        .unwrap();
    assert_eq!(served.provider, "fallback");
    let text = gw.engine.metrics_text(false).await;
    assert!(
        text.contains("understudy_target_ready{provider=\"fallback\",model=\"fallback-model\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("understudy_probes_total{provider=\"fallback\",outcome=\"model_missing\"}"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn test_gateways_probe_nothing_unless_told() {
    let sim = SimProvider::openai().await.unwrap();
    let gw = TestGateway::builder()
        .provider("openai", &sim)
        .toml("[probe]\ninterval = 0.05\n")
        .build()
        .await
        .unwrap();
    // A request goes through the engine's whole start: a prober would
    // have made its first round by the time the answer is back.
    gw.engine
        .generate(GenerateRequest::new(ChatRequest::user("hi")))
        .await
        .unwrap();
    assert_eq!(sim.lookups(), 0);
    assert!(
        gw.engine
            .target_readiness()
            .iter()
            .all(|r| r.state == "unchecked")
    );
}

/// The probes `gw`'s engine made itself.
async fn probes_made(gw: &TestGateway) -> f64 {
    gw.engine
        .metrics_text(false)
        .await
        .lines()
        .filter(|l| l.starts_with("understudy_probes_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread")]
async fn one_instance_of_a_fleet_probes_and_another_takes_over_when_it_stops() {
    let redis = understudy_testkit::RedisServer::start().unwrap();
    let primary = SimProvider::openai().await.unwrap();
    let fallback = SimProvider::openai().await.unwrap();
    fallback.retire_model("fallback-model");
    let instance = async || {
        TestGateway::builder()
            .provider("primary", &primary)
            .provider("fallback", &fallback)
            .toml("[probe]\ninterval = 0.2\ntimeout = 0.2\n")
            .env("REDIS_URL", &redis.url())
            .probe(true)
            .build()
            .await
            .unwrap()
    };
    let (a, b) = (instance().await, instance().await);
    for gw in [&a, &b] {
        eventually("the fallback not ready on each instance", async || {
            gw.engine
                .target_readiness()
                .iter()
                .any(|r| r.provider == "fallback" && r.not_ready())
        })
        .await;
    }
    let made = [probes_made(&a).await, probes_made(&b).await];
    assert!((made[0] > 0.0) != (made[1] > 0.0), "one prober: {made:?}");
    let (holder, other) = if made[0] > 0.0 { (a, b) } else { (b, a) };
    let source = |gw: &TestGateway| {
        gw.engine
            .target_readiness()
            .into_iter()
            .find(|r| r.provider == "fallback")
            .and_then(|r| r.source)
    };
    assert_eq!(source(&holder), Some("local"));
    assert_eq!(source(&other), Some("fleet"));
    // The holder stops: its lease lapses and the other probes.
    holder.engine.shutdown().await;
    drop(holder);
    eventually("the other instance probes", async || {
        probes_made(&other).await > 0.0
    })
    .await;
    assert!(
        other
            .engine
            .target_readiness()
            .iter()
            .any(|r| r.provider == "fallback" && r.not_ready())
    );
    assert_eq!(fallback.generation_calls(), 0);
}
