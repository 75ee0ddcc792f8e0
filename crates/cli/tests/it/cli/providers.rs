//! `understudy providers`: every provider listed with its credentials'
//! source (a cloud's, a Vertex token's expiry, a pool's keys by name) and
//! its base URL, and never a secret, there, in a configuration error or in
//! a log even at trace.

use super::*;

#[tokio::test(flavor = "multi_thread")]
async fn providers_lists_every_provider_without_keys() {
    let groq = SimProvider::openai().await.unwrap();
    let openai = SimProvider::openai().await.unwrap();
    let mut cmd = understudy(&groq, &openai);
    cmd.arg("providers");
    let out = run(cmd).await;
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("default route: groq → openai"), "{text}");
    let line = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("{name} missing: {text}"))
            .to_owned()
    };
    assert!(
        line("groq").contains("available") && line("groq").contains("set (GROQ_API_KEY)"),
        "{text}"
    );
    assert!(line("groq").contains(&groq.base_url()));
    assert!(
        line("claude").contains("unavailable: ") && line("claude").contains("unset"),
        "{text}"
    );
    assert!(line("gemini").contains("unavailable"), "{text}");
    assert_no_keys(&out);

    let mut cmd = understudy(&groq, &openai);
    cmd.args(["providers", "--json"]);
    let out = run(cmd).await;
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<_> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["groq", "openai", "claude", "gemini"]);
    assert_eq!(v[0]["key"]["state"], "set");
    assert_no_keys(&out);
}

#[tokio::test(flavor = "multi_thread")]
async fn providers_shows_a_clouds_credentials_by_source_never_the_secret() {
    let groq = SimProvider::openai().await.unwrap();
    let openai = SimProvider::openai().await.unwrap();
    let config = config_file(
        "bedrock",
        "[providers.bedrock]\nkind = \"bedrock\"\nregion = \"eu-central-1\"\nmodel = \"eu.anthropic.claude-haiku-4-5-20251001-v1:0\"\n",
    );
    let mut cmd = understudy(&groq, &openai);
    cmd.env("AWS_ACCESS_KEY_ID", "AKIDCLITEST0001")
        .env("AWS_SECRET_ACCESS_KEY", "cli-test-secret-never-shown")
        .env("AWS_SESSION_TOKEN", "cli-test-session-token-never-shown")
        .arg("--config")
        .arg(&config)
        .arg("providers");
    let out = run(cmd).await;
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with("bedrock"))
        .unwrap_or_else(|| panic!("bedrock missing: {text}"));
    assert!(line.contains("bedrock/anthropic"), "{line}");
    assert!(
        line.contains("AWS keys from the environment (AKID…)"),
        "{line}"
    );
    assert!(
        line.contains("https://bedrock-runtime.eu-central-1.amazonaws.com"),
        "{line}"
    );
    for stream in [&out.stdout, &out.stderr] {
        let shown = String::from_utf8_lossy(stream);
        assert!(
            !shown.contains("never-shown") && !shown.contains("AKIDCLITEST0001"),
            "{shown}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn providers_shows_a_vertex_tokens_source_and_expiry_never_the_token() {
    let groq = SimProvider::openai().await.unwrap();
    let openai = SimProvider::openai().await.unwrap();
    let account = understudy_testkit::VertexSim::new("cli-project", "us-east5");
    let vertex = SimProvider::vertex(understudy_testkit::Protocol::Messages, &account)
        .await
        .unwrap();
    let key_file = account.key_file(&format!("{}/token", vertex.base_url()));
    let config = config_file(
        "vertex",
        &format!(
            "[providers.vertex]\nkind = \"vertex\"\nproject = \"cli-project\"\nregion = \"us-east5\"\nbase_url = {:?}\ncredentials_file = {:?}\nmodel = \"claude-haiku-4-5@20251001\"\n",
            vertex.base_url(),
            key_file.display().to_string()
        ),
    );
    let mut cmd = understudy(&groq, &openai);
    cmd.arg("--config").arg(&config).arg("providers");
    let out = run(cmd).await;
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with("vertex"))
        .unwrap_or_else(|| panic!("vertex missing: {text}"));
    assert!(line.contains("vertex/anthropic"), "{line}");
    assert!(
        line.contains(&format!(
            "service account {}",
            understudy_testkit::TEST_CLIENT_EMAIL
        )),
        "{line}"
    );
    // The actor fetched a token at start: its expiry shows, never itself.
    assert_eq!(account.exchanges(), 1, "{line}");
    assert!(
        line.contains("expires in 59m") || line.contains("expires in 60m"),
        "{line}"
    );
    let pem = understudy_testkit::VertexSim::private_key_pem();
    let key_line = pem.lines().nth(5).unwrap();
    for stream in [&out.stdout, &out.stderr] {
        let shown = String::from_utf8_lossy(stream);
        for token in account.issued_tokens() {
            assert!(!shown.contains(&token), "the token leaked: {shown}");
        }
        assert!(!shown.contains(key_line), "the private key leaked: {shown}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn providers_shows_a_broken_vertex_key_unavailable_and_warns_once() {
    let groq = SimProvider::openai().await.unwrap();
    let openai = SimProvider::openai().await.unwrap();
    let account = understudy_testkit::VertexSim::new("cli-project", "us-east5");
    let vertex = SimProvider::vertex(understudy_testkit::Protocol::Messages, &account)
        .await
        .unwrap();
    let key_file = account.key_file(&format!("{}/token", vertex.base_url()));
    std::fs::write(&key_file, "{\"type\": \"service_acc").unwrap();
    let config = config_file(
        "vertex-broken",
        &format!(
            "[providers.vertex]\nkind = \"vertex\"\nproject = \"cli-project\"\nregion = \"us-east5\"\nbase_url = {:?}\ncredentials_file = {:?}\nmodel = \"claude-haiku-4-5@20251001\"\n",
            vertex.base_url(),
            key_file.display().to_string()
        ),
    );
    let mut cmd = understudy(&groq, &openai);
    cmd.arg("--config").arg(&config).arg("providers");
    let out = run(cmd).await;
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with("vertex"))
        .unwrap_or_else(|| panic!("vertex missing: {text}"));
    assert!(
        line.contains(
            "unavailable: credentials unusable: the service account key file is not a JSON key file"
        ),
        "{line}"
    );
    // One WARN line, for the operator: it names the file.
    let log = String::from_utf8_lossy(&out.stderr);
    let warned: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("credentials cannot be had"))
        .collect();
    assert_eq!(warned.len(), 1, "{log}");
    assert!(warned[0].contains(&*key_file.to_string_lossy()), "{log}");
    assert_eq!(account.exchanges(), 0);
    let _ = std::fs::remove_file(&key_file);
}

#[tokio::test(flavor = "multi_thread")]
async fn bedrock_credentials_reach_no_log_error_or_output_even_at_trace() {
    let groq = SimProvider::openai().await.unwrap();
    let openai = SimProvider::openai().await.unwrap();
    const SECRET: &str = "cli-bedrock-secret-never-shown";
    const TOKEN: &str = "cli-bedrock-session-token-never-shown";
    let account =
        understudy_testkit::BedrockSim::new("us-east-1", "AKIDCLIBEDROCK01", SECRET, Some(TOKEN));
    let bedrock = SimProvider::bedrock(&account).await.unwrap();
    bedrock
        .push(Reply::text("Signed and served."))
        .push(Reply::status(503));
    let config = config_file(
        "bedrock-trace",
        &format!(
            "[routing]\ndefault = \"bedrock\"\norder = [\"bedrock\", \"openai\"]\n[providers.bedrock]\nkind = \"bedrock\"\nregion = \"us-east-1\"\nbase_url = {:?}\nmodel = \"us.anthropic.claude-haiku-4-5-20251001-v1:0\"\n",
            bedrock.base_url()
        ),
    );
    for expect in ["Signed and served.", "Hello from the simulator."] {
        let mut cmd = understudy(&groq, &openai);
        cmd.env_remove("AI_DEFAULT_PROVIDER")
            .env_remove("AI_PROVIDER_FALLBACK_ORDER")
            .env("AWS_ACCESS_KEY_ID", "AKIDCLIBEDROCK01")
            .env("AWS_SECRET_ACCESS_KEY", SECRET)
            .env("AWS_SESSION_TOKEN", TOKEN)
            .env("RUST_LOG", "trace")
            .arg("--config")
            .arg(&config)
            .args(["ask", "--json", "hi"]);
        let out = run(cmd).await;
        assert!(out.status.success(), "{out:?}");
        assert!(
            String::from_utf8_lossy(&out.stdout).contains(expect),
            "{out:?}"
        );
        // The log really is at trace (the HTTP client's own lines too).
        let log = String::from_utf8_lossy(&out.stderr);
        assert!(log.contains("TRACE") && log.contains("upstream"), "{log}");
        for stream in [&out.stdout, &out.stderr] {
            let shown = String::from_utf8_lossy(stream);
            assert!(
                !shown.contains("never-shown"),
                "a credential leaked: {shown}"
            );
        }
    }
    assert_eq!(bedrock.violations(), Vec::<String>::new());
}

/// Writes `text` to a fresh configuration file and returns its path.
fn config_file(name: &str, text: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("understudy-cli-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("understudy.toml");
    std::fs::write(&path, text).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread")]
async fn providers_show_base_urls_without_userinfo() {
    const PASSWORD: &str = "url-password-0123456789";
    let groq = SimProvider::openai().await.unwrap();
    let openai = SimProvider::openai().await.unwrap();
    let with_userinfo = groq
        .base_url()
        .replacen("://", &format!("://user:{PASSWORD}@"), 1);
    for args in [&["providers"][..], &["providers", "--json"]] {
        let mut cmd = understudy(&groq, &openai);
        cmd.env("GROQ_BASE_URL", &with_userinfo).args(args);
        let out = run(cmd).await;
        assert!(out.status.success(), "{out:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(!text.contains(PASSWORD), "the URL's password shows: {text}");
        assert!(text.contains("***@127.0.0.1"), "{text}");
        assert!(!String::from_utf8_lossy(&out.stderr).contains(PASSWORD));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn configuration_errors_print_no_secret() {
    const SECRET: &str = "sk-config-secret-0123456789";
    let groq = SimProvider::openai().await.unwrap();
    let openai = SimProvider::openai().await.unwrap();
    for (name, toml, setting) in [
        (
            "api-keys",
            format!("[server]\napi_keys = \"{SECRET}\"\n"),
            "server.api_keys",
        ),
        (
            "headers",
            format!("[providers.groq]\nheaders = \"Authorization: Bearer {SECRET}\"\n"),
            "providers.groq.headers",
        ),
        (
            "base-url",
            format!("[providers.groq]\nbase_url = \"ftp://user:{SECRET}@example.com\"\n"),
            "providers.groq.base_url",
        ),
    ] {
        let path = config_file(name, &toml);
        let mut cmd = understudy(&groq, &openai);
        cmd.env_remove("GROQ_BASE_URL")
            .args(["providers", "--config"])
            .arg(&path);
        let out = run(cmd).await;
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
        assert!(!out.status.success(), "{name}: {out:?}");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !stdout.contains(SECRET) && !stderr.contains(SECRET),
            "{name}: the secret shows: {stdout}{stderr}"
        );
        assert!(stderr.contains(setting), "{name}: {stderr}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn providers_shows_each_pool_key_by_name_never_the_key() {
    const POOL_A: &str = "sk-cli-pool-secret-aaaa";
    const POOL_B: &str = "sk-cli-pool-secret-bbbb";
    let groq = SimProvider::openai().await.unwrap();
    let openai = SimProvider::openai().await.unwrap();
    let config = config_file(
        "pool",
        &format!(
            "[providers.pool]\nbase_url = {:?}\nmodel = \"m\"\n\
             [[providers.pool.keys]]\nname = \"east\"\napi_key = {POOL_A:?}\n\
             [[providers.pool.keys]]\nname = \"west\"\napi_key_env = \"POOL_WEST_KEY\"\n\
             [[providers.pool.keys]]\nname = \"north\"\napi_key_env = \"POOL_NORTH_KEY\"\n",
            groq.base_url()
        ),
    );
    for args in [&["providers"][..], &["providers", "--json"]] {
        let mut cmd = understudy(&groq, &openai);
        cmd.env("POOL_WEST_KEY", POOL_B)
            .arg("--config")
            .arg(&config)
            .args(args);
        let out = run(cmd).await;
        assert!(out.status.success(), "{out:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        for stream in [&out.stdout, &out.stderr] {
            let shown = String::from_utf8_lossy(stream);
            assert!(
                !shown.contains(POOL_A) && !shown.contains(POOL_B),
                "{shown}"
            );
        }
        if args.len() == 1 {
            let line = text.lines().find(|l| l.starts_with("pool")).unwrap();
            assert!(line.contains("pool: east=ok west=ok north=unset"), "{text}");
        } else {
            let v: Value = serde_json::from_slice(&out.stdout).unwrap();
            let pool = v
                .as_array()
                .unwrap()
                .iter()
                .find(|p| p["name"] == "pool")
                .unwrap();
            let names: Vec<&str> = pool["keys"]
                .as_array()
                .unwrap()
                .iter()
                .map(|k| k["name"].as_str().unwrap())
                .collect();
            assert_eq!(names, ["east", "west", "north"], "{pool}");
            assert_eq!(pool["keys"][2]["available"], false);
        }
    }
}
