//! The cloud kinds (`bedrock`, `vertex`, `azure`): their settings, the
//! environment that completes them, the credentials found, the errors that
//! name what is missing, and the model map that gives one client name each
//! cloud's id.

use understudy_settings::Settings;
use understudy_settings::{AwsCredentials, Platform};
use understudy_types::{Protocol, RouteSelector, Target};

fn load_with(toml: &str, env: &[(&str, &str)]) -> Result<Settings, String> {
    crate::settings_with(toml, env).map_err(|e| e.to_string())
}

fn load(toml: &str) -> Result<Settings, String> {
    load_with(toml, &[])
}

const BEDROCK: &str = "[providers.bedrock]\nkind = \"bedrock\"\nmodel = \"us.anthropic.claude-sonnet-4-5-20250929-v1:0\"\n";

#[test]
fn bedrock_takes_its_region_and_keys_from_the_table_or_the_environment() {
    let s = load(&format!(
        "{BEDROCK}region = \"eu-west-1\"\naws_access_key_id = \"AKIDEXAMPLE\"\naws_secret_access_key = \"wJalrXUtnFEMI/K7MDENG\"\n"
    ))
    .unwrap();
    let p = &s.providers["bedrock"];
    assert_eq!(p.kind, Protocol::Messages);
    assert_eq!(
        p.base_url,
        "https://bedrock-runtime.eu-west-1.amazonaws.com"
    );
    let Platform::Bedrock(b) = &p.platform else {
        panic!("{:?}", p.platform)
    };
    assert_eq!(b.region, "eu-west-1");
    assert!(matches!(
        &b.credentials,
        Some(AwsCredentials::Keys { access_key_id, source: "settings", session_token: None, .. })
            if access_key_id == "AKIDEXAMPLE"
    ));
    assert!(p.has_key());
    // Nothing in the debug output of the settings shows the secret.
    assert!(!format!("{s:?}").contains("wJalr"));

    let s = load_with(
        BEDROCK,
        &[
            ("AWS_REGION", "us-east-1"),
            ("AWS_ACCESS_KEY_ID", "AKIDENV"),
            ("AWS_SECRET_ACCESS_KEY", "secretenv"),
            ("AWS_SESSION_TOKEN", "tokenenv"),
        ],
    )
    .unwrap();
    let Platform::Bedrock(b) = &s.providers["bedrock"].platform else {
        panic!()
    };
    assert_eq!(b.region, "us-east-1");
    assert!(matches!(
        &b.credentials,
        Some(AwsCredentials::Keys {
            source: "environment",
            session_token: Some(_),
            ..
        })
    ));
}

#[test]
fn bedrock_without_a_region_or_credentials_says_so() {
    let err = load(BEDROCK).unwrap_err();
    assert!(err.contains("providers.bedrock.region"), "{err}");
    // A region but no credentials anywhere: the provider has no key.
    let s = load_with(
        BEDROCK,
        &[("AWS_REGION", "us-east-1"), ("HOME", "/nonexistent")],
    )
    .unwrap();
    assert!(!s.providers["bedrock"].has_key());
    let err = load(&format!(
        "{BEDROCK}region = \"us-east-1\"\naws_access_key_id = \"AKID\"\n"
    ))
    .unwrap_err();
    assert!(err.contains("go together"), "{err}");
    let err = load(&format!("{BEDROCK}region = \"US East\"\n")).unwrap_err();
    assert!(err.contains("not a region"), "{err}");
}

#[test]
fn a_bedrock_api_key_is_a_bearer_and_excludes_aws_keys() {
    let s = load_with(
        &format!("{BEDROCK}region = \"us-west-2\"\n"),
        &[("AWS_BEARER_TOKEN_BEDROCK", "bedrock-api-key-abc")],
    )
    .unwrap();
    let p = &s.providers["bedrock"];
    assert_eq!(p.api_key_env.as_deref(), Some("AWS_BEARER_TOKEN_BEDROCK"));
    assert!(p.api_key.is_some() && p.has_key());
    let Platform::Bedrock(b) = &p.platform else {
        panic!()
    };
    assert!(b.credentials.is_none());
    let err = load(&format!(
        "{BEDROCK}region = \"us-west-2\"\napi_key = \"k\"\naws_access_key_id = \"A\"\naws_secret_access_key = \"B\"\n"
    ))
    .unwrap_err();
    assert!(err.contains("cannot both"), "{err}");
}

#[test]
fn a_bedrock_profile_names_the_shared_credentials_file() {
    let s = load_with(
        &format!("{BEDROCK}region = \"us-east-1\"\naws_profile = \"prod\"\n"),
        &[("AWS_SHARED_CREDENTIALS_FILE", "/etc/aws/credentials")],
    )
    .unwrap();
    let Platform::Bedrock(b) = &s.providers["bedrock"].platform else {
        panic!()
    };
    assert!(matches!(
        &b.credentials,
        Some(AwsCredentials::Profile { file, profile }) if file.to_str() == Some("/etc/aws/credentials") && profile == "prod"
    ));
}

#[test]
fn vertex_needs_a_project_and_a_region_and_picks_the_protocol_by_model() {
    let table = "[providers.vertex]\nkind = \"vertex\"\nmodel = \"claude-sonnet-4-5@20250929\"\nproject = \"my-proj\"\nregion = \"global\"\ncredentials_file = \"/keys/sa.json\"\n";
    let s = load(table).unwrap();
    let p = &s.providers["vertex"];
    assert_eq!(p.kind, Protocol::Messages);
    assert_eq!(p.base_url, "https://aiplatform.googleapis.com");
    assert_eq!(
        p.protocol_for("gemini-2.5-flash"),
        Protocol::GenerateContent
    );
    assert!(p.has_key());
    let s = load(
        &table
            .replace("global", "us-east5")
            .replace("claude-sonnet-4-5@20250929", "gemini-2.5-pro"),
    )
    .unwrap();
    let p = &s.providers["vertex"];
    assert_eq!(p.kind, Protocol::GenerateContent);
    assert_eq!(p.base_url, "https://us-east5-aiplatform.googleapis.com");

    let err = load("[providers.vertex]\nkind = \"vertex\"\nmodel = \"m\"\nregion = \"global\"\n")
        .unwrap_err();
    assert!(err.contains("providers.vertex.project"), "{err}");
    // GOOGLE_APPLICATION_CREDENTIALS is the key file unless the table names one.
    let s = load_with(
        "[providers.vertex]\nkind = \"vertex\"\nmodel = \"m\"\nproject = \"p\"\nregion = \"us-east5\"\n",
        &[("GOOGLE_APPLICATION_CREDENTIALS", "/adc.json")],
    )
    .unwrap();
    let Platform::Vertex(v) = &s.providers["vertex"].platform else {
        panic!()
    };
    assert_eq!(
        v.credentials_file.as_deref().and_then(|p| p.to_str()),
        Some("/adc.json")
    );
}

#[test]
fn azure_needs_its_resource_and_reads_its_key_from_azure_openai_api_key() {
    let table = "[providers.azure]\nkind = \"azure\"\nbase_url = \"https://me.openai.azure.com\"\nmodel = \"gpt-4o-deploy\"\n";
    let s = load_with(table, &[("AZURE_OPENAI_API_KEY", "azkey")]).unwrap();
    let p = &s.providers["azure"];
    assert_eq!(p.kind, Protocol::ChatCompletions);
    assert!(p.capabilities.max_completion_tokens);
    assert_eq!(p.api_key.as_ref().map(|k| k.expose()), Some("azkey"));
    assert!(matches!(&p.platform, Platform::Azure(a) if a.api_version.is_none() && !a.entra));
    let s = load(&format!(
        "{table}api_version = \"2024-10-21\"\nauth = \"entra\"\nresponses_api = true\n"
    ))
    .unwrap();
    let p = &s.providers["azure"];
    assert_eq!(p.kind, Protocol::Responses);
    assert!(
        matches!(&p.platform, Platform::Azure(a) if a.api_version.as_deref() == Some("2024-10-21") && a.entra)
    );
    assert!(!p.has_key());
    let err = load("[providers.azure]\nkind = \"azure\"\nmodel = \"d\"\n").unwrap_err();
    assert!(err.contains("providers.azure.base_url"), "{err}");
}

#[test]
fn a_cloud_setting_on_another_kind_or_a_cloud_kind_on_a_built_in_is_refused() {
    let err = load("[providers.openai]\nregion = \"us-east-1\"\n").unwrap_err();
    assert!(
        err.contains("providers.openai.region") && err.contains("bedrock or vertex"),
        "{err}"
    );
    let err = load(&format!(
        "{BEDROCK}region = \"us-east-1\"\napi_version = \"2024-10-21\"\n"
    ))
    .unwrap_err();
    assert!(
        err.contains("api_version") && err.contains("azure"),
        "{err}"
    );
    let err = load("[providers.claude]\nkind = \"bedrock\"\n").unwrap_err();
    assert!(err.contains("providers.claude.kind"), "{err}");
    let err = load("[providers.x]\nkind = \"soap\"\nbase_url = \"http://h\"\nmodel = \"m\"\n")
        .unwrap_err();
    assert!(err.contains("unknown kind `soap`"), "{err}");
}

#[test]
fn a_pattern_route_reaches_each_clouds_id_for_one_model_name() {
    let s = load_with(
        &format!(
            "{BEDROCK}region = \"us-east-1\"\nmodels = {{ \"claude-sonnet-4-5\" = \"us.anthropic.claude-sonnet-4-5-20250929-v1:0\" }}\n\
             [providers.vertex]\nkind = \"vertex\"\nmodel = \"claude-sonnet-4-5@20250929\"\nproject = \"p\"\nregion = \"global\"\n\
             models = {{ \"claude-sonnet-4-5\" = \"claude-sonnet-4-5@20250929\" }}\n\
             [routes]\n\"claude-*\" = [\"claude:*\", \"bedrock:*\", \"vertex:*\"]\n"
        ),
        &[("AWS_ACCESS_KEY_ID", "A"), ("AWS_SECRET_ACCESS_KEY", "B")],
    )
    .unwrap();
    let targets = understudy_policy::plan::resolve(
        &RouteSelector::Model("claude-sonnet-4-5".into()),
        &s,
        &s.default_route(),
        &s.routes,
    )
    .unwrap();
    assert_eq!(
        targets,
        [
            Target::new("claude", "claude-sonnet-4-5"),
            Target::new("bedrock", "us.anthropic.claude-sonnet-4-5-20250929-v1:0"),
            Target::new("vertex", "claude-sonnet-4-5@20250929"),
        ]
    );
}

/// The TOML block of `docs/configuration.md` under the heading `heading`.
fn doc_example(heading: &str) -> String {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/configuration.md"
    ))
    .unwrap();
    let section = doc
        .split(heading)
        .nth(1)
        .unwrap_or_else(|| panic!("no {heading}"));
    let start = section.find("```toml\n").unwrap() + "```toml\n".len();
    section[start..][..section[start..].find("```").unwrap()].to_owned()
}

#[test]
fn the_bedrock_example_of_the_docs_loads_as_it_says() {
    let s = load_with(
        &doc_example("### AWS Bedrock"),
        &[
            ("AWS_ACCESS_KEY_ID", "AKIDDOC"),
            ("AWS_SECRET_ACCESS_KEY", "doc-secret"),
        ],
    )
    .unwrap();
    let p = &s.providers["bedrock"];
    assert_eq!(p.kind, Protocol::Messages);
    assert!(p.has_key());
    let targets = understudy_policy::plan::resolve(
        &RouteSelector::Model("claude-sonnet-4-5".into()),
        &s,
        &s.default_route(),
        &s.routes,
    )
    .unwrap();
    assert_eq!(
        targets[1],
        Target::new("bedrock", "us.anthropic.claude-sonnet-4-5-20250929-v1:0")
    );
}

#[test]
fn the_converse_example_of_the_docs_loads_as_it_says() {
    let s = load_with(
        &doc_example("#### Other models on Bedrock"),
        &[
            ("AWS_ACCESS_KEY_ID", "AKIDDOC"),
            ("AWS_SECRET_ACCESS_KEY", "doc-secret"),
        ],
    )
    .unwrap();
    let p = &s.providers["bedrock"];
    assert!(p.has_key());
    // Its default model is Llama: the provider speaks Converse, by model
    // (Claude on the same provider would be Messages), and plans know it:
    // Converse takes images inline only.
    assert_eq!(p.kind, Protocol::Converse);
    assert!(
        !p.protocol_for("meta.llama3-1-8b-instruct-v1:0")
            .takes_remote_images()
    );
    assert_eq!(
        p.protocol_for("us.anthropic.claude-sonnet-4-5-20250929-v1:0"),
        Protocol::Messages
    );
    let targets = understudy_policy::plan::resolve(
        &RouteSelector::Named("chat".into()),
        &s,
        &s.default_route(),
        &s.routes,
    )
    .unwrap();
    assert_eq!(
        targets[1..],
        [
            Target::new("bedrock", "us.meta.llama3-3-70b-instruct-v1:0"),
            Target::new("bedrock", "mistral.mistral-large-2407-v1:0"),
        ]
    );
    // Neither is Anthropic's: both go through Converse.
    for t in &targets[1..] {
        assert_eq!(
            understudy_settings::bedrock_protocol(&t.model),
            Protocol::Converse
        );
    }
}

#[test]
fn the_vertex_example_of_the_docs_loads_as_it_says() {
    let s = load_with(
        &doc_example("### Google Vertex AI"),
        &[
            ("AWS_ACCESS_KEY_ID", "AKIDDOC"),
            ("AWS_SECRET_ACCESS_KEY", "doc-secret"),
        ],
    )
    .unwrap();
    let p = &s.providers["vertex"];
    assert_eq!(p.kind, Protocol::Messages);
    assert!(p.has_key());
    let targets = understudy_policy::plan::resolve(
        &RouteSelector::Model("claude-sonnet-4-5".into()),
        &s,
        &s.default_route(),
        &s.routes,
    )
    .unwrap();
    assert_eq!(
        targets[1..],
        [
            Target::new("bedrock", "us.anthropic.claude-sonnet-4-5-20250929-v1:0"),
            Target::new("vertex", "claude-sonnet-4-5@20250929"),
        ]
    );
}

#[test]
fn the_azure_example_of_the_docs_loads_as_it_says() {
    let s = load_with(
        &doc_example("### Azure OpenAI"),
        &[("AZURE_OPENAI_API_KEY", "azure-doc-key-0123456789")],
    )
    .unwrap();
    let p = &s.providers["azure"];
    assert_eq!(p.kind, Protocol::ChatCompletions);
    assert!(p.has_key());
    assert!(p.capabilities.max_completion_tokens);
    let targets = understudy_policy::plan::resolve(
        &RouteSelector::Model("gpt-4.1".into()),
        &s,
        &s.default_route(),
        &s.routes,
    )
    .unwrap();
    assert_eq!(targets[1], Target::new("azure", "gpt-4-1-prod"));
}

#[test]
fn the_tier_example_of_the_docs_loads_as_it_says() {
    let providers = format!(
        "{BEDROCK}region = \"us-east-1\"\n\
         [providers.vertex]\nkind = \"vertex\"\nproject = \"p\"\nregion = \"us-east5\"\n\
         model = \"claude-sonnet-4-5@20250929\"\n"
    );
    let s = load_with(
        &format!(
            "{providers}{}",
            doc_example("### Groups of equivalent targets (tiers)")
        ),
        &[
            ("AWS_ACCESS_KEY_ID", "AKIDDOC"),
            ("AWS_SECRET_ACCESS_KEY", "secret"),
            ("ANTHROPIC_API_KEY", "sk-ant-doc"),
            ("OPENAI_API_KEY", "sk-doc"),
        ],
    )
    .unwrap();
    assert_eq!(
        s.routes["claude"],
        [
            Target::new("claude", "claude-sonnet-4-5"),
            Target::new("bedrock", "us.anthropic.claude-sonnet-4-5-20250929-v1:0"),
            Target::new("vertex", "claude-sonnet-4-5@20250929"),
            Target::new("openai", "gpt-5"),
        ]
    );
    let groups = &s.route_groups["claude"];
    assert_eq!(groups.len(), 1);
    assert_eq!(
        (groups[0].start, groups[0].weights.as_slice()),
        (0, &[2, 1, 1][..])
    );
    assert_eq!(s.balance.eject_for, std::time::Duration::from_secs(30));
    assert!(s.affinity.enabled);
    assert!((s.affinity.wait_cost_per_second - 0.01).abs() < 1e-12);
}

#[test]
fn the_readme_configuration_loads_with_its_group() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md")).unwrap();
    let section = readme.split("## Configuration").nth(1).unwrap();
    let start = section.find("```toml\n").unwrap() + "```toml\n".len();
    // The README elides its client key; any valid one stands for it.
    let toml = section[start..][..section[start..].find("```").unwrap()]
        .replace("\"sk-…\"", "\"sk-readme-example-client-key\"");
    let s = load_with(&toml, &[("GROQ_API_KEY", "gsk-doc")]).unwrap();
    assert_eq!(
        s.routes["any"],
        [
            Target::new("groq", "llama-3.1-8b-instant"),
            Target::new("local", "llama3.2"),
        ]
    );
    assert_eq!(s.route_groups["any"][0].weights, [3, 1]);
}

#[test]
fn the_probe_example_of_the_docs_loads_as_it_says() {
    let s = load_with(&doc_example("### `[probe]`"), &[]).unwrap();
    assert!(s.probe.enabled);
    assert_eq!(s.probe.interval, std::time::Duration::from_secs(30));
    assert_eq!(s.probe.timeout, std::time::Duration::from_secs(5));
}
