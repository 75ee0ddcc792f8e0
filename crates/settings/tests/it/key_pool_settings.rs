//! A provider's key pool in the settings: its three forms, the variables
//! its keys are read from, each key's own base URL or region, and the
//! errors that name the setting without showing a key.

use understudy_settings::Settings;
use understudy_settings::{Platform, Sticky};

const A: &str = "sk-pool-secret-aaaa-0001";
const B: &str = "sk-pool-secret-bbbb-0002";

fn load(toml: &str, env: &[(&str, &str)]) -> Result<Settings, String> {
    crate::settings_with(toml, env).map_err(|e| format!("{e}\n{e:?}"))
}

fn error(toml: &str) -> String {
    let text = load(toml, &[]).expect_err(toml);
    assert!(!text.contains(A) && !text.contains(B), "a key in: {text}");
    text
}

const EXTRA: &str = "[providers.pool]\nbase_url = \"https://api.example.com/v1\"\nmodel = \"m\"\n";

#[test]
fn api_keys_name_their_keys_by_place() {
    let s = load(&format!("{EXTRA}api_keys = [{A:?}, {B:?}]\n"), &[]).unwrap();
    let p = &s.providers["pool"];
    let names: Vec<&str> = p.key_names().collect();
    assert_eq!(names, ["key-1", "key-2"]);
    assert!(p.has_key());
    assert_eq!(p.pool.sticky, Sticky::None);
    assert_eq!(p.pool.cooldown.as_secs(), 60);
    let second = p.for_key(1).unwrap();
    assert_eq!(second.api_key.as_ref().map(|k| k.expose()), Some(B));
    assert_eq!(second.key_name.as_deref(), Some("key-2"));
    // No Debug shows a key.
    let shown = format!("{p:?} {second:?}");
    assert!(!shown.contains(A) && !shown.contains(B), "{shown}");
}

#[test]
fn api_key_envs_read_each_key_from_its_variable() {
    let toml = format!(
        "{EXTRA}api_key_envs = [\"POOL_A\", \"POOL_B\"]\nsticky = \"conversation\"\nkey_cooldown = 30\n"
    );
    let s = load(&toml, &[("POOL_B", B)]).unwrap();
    let p = &s.providers["pool"];
    assert_eq!(p.key_names().collect::<Vec<_>>(), ["POOL_A", "POOL_B"]);
    // POOL_A is not set: the pool has one key, and the provider is usable.
    assert!(p.pool.keys[0].secret.is_none());
    assert!(p.has_key());
    assert_eq!(p.pool.sticky, Sticky::Conversation);
    assert_eq!(p.pool.cooldown.as_secs(), 30);
    let s = load(&toml, &[]).unwrap();
    assert!(!s.providers["pool"].has_key(), "no key of the pool is set");
}

#[test]
fn key_tables_carry_a_weight_and_their_own_endpoint() {
    let toml = format!(
        "{EXTRA}[[providers.pool.keys]]\nname = \"east\"\napi_key = {A:?}\nweight = 3\n\
         [[providers.pool.keys]]\nname = \"west\"\napi_key_env = \"WEST_KEY\"\nbase_url = \"https://west.example.com/v1/\"\n"
    );
    let s = load(&toml, &[("WEST_KEY", B)]).unwrap();
    let p = &s.providers["pool"];
    assert_eq!(p.pool.keys[0].weight, 3);
    assert_eq!(p.for_key(0).unwrap().base_url, "https://api.example.com/v1");
    assert_eq!(
        p.for_key(1).unwrap().base_url,
        "https://west.example.com/v1"
    );
}

#[test]
fn a_bedrock_key_may_have_its_own_region() {
    let toml = format!(
        "[providers.bedrock]\nkind = \"bedrock\"\nregion = \"us-east-1\"\nmodel = \"us.anthropic.claude-sonnet-4-5-20250929-v1:0\"\n\
         [[providers.bedrock.keys]]\nname = \"us\"\napi_key = {A:?}\n\
         [[providers.bedrock.keys]]\nname = \"eu\"\napi_key = {B:?}\nregion = \"eu-west-1\"\n"
    );
    let s = load(&toml, &[]).unwrap();
    let p = &s.providers["bedrock"];
    let eu = p.for_key(1).unwrap();
    assert_eq!(
        eu.base_url,
        "https://bedrock-runtime.eu-west-1.amazonaws.com"
    );
    let Platform::Bedrock(b) = &eu.platform else {
        panic!("{:?}", eu.platform)
    };
    assert_eq!(b.region, "eu-west-1");
    assert_eq!(
        p.for_key(0).unwrap().base_url,
        "https://bedrock-runtime.us-east-1.amazonaws.com"
    );
}

#[test]
fn bad_pools_name_the_setting_and_show_no_key() {
    let cases = [
        (
            format!("{EXTRA}api_keys = [{A:?}, {A:?}]\n"),
            "providers.pool.keys[1]",
        ),
        (
            format!("{EXTRA}api_key = {A:?}\napi_keys = [{B:?}]\n"),
            "providers.pool.api_keys",
        ),
        (
            format!("{EXTRA}api_keys = [{A:?}]\napi_key_envs = [\"X\"]\n"),
            "providers.pool.api_key_envs",
        ),
        (format!("{EXTRA}api_keys = []\n"), "providers.pool.api_keys"),
        (
            format!("{EXTRA}[[providers.pool.keys]]\napi_key = {A:?}\n"),
            "providers.pool.keys[0].name",
        ),
        (
            format!("{EXTRA}[[providers.pool.keys]]\nname = \"a\"\napi_key = {A:?}\nweight = 0\n"),
            "providers.pool.keys[0].weight",
        ),
        (
            format!(
                "{EXTRA}[[providers.pool.keys]]\nname = \"a\"\napi_key = {A:?}\nsecret = {B:?}\n"
            ),
            "unknown field `secret`",
        ),
        (
            format!(
                "{EXTRA}[[providers.pool.keys]]\nname = \"a\"\napi_key = {A:?}\n[[providers.pool.keys]]\nname = \"a\"\napi_key = {B:?}\n"
            ),
            "providers.pool.keys[1].name",
        ),
        (
            format!(
                "{EXTRA}[[providers.pool.keys]]\nname = \"a\"\napi_key = {A:?}\nregion = \"eu-west-1\"\n"
            ),
            "providers.pool.keys[0].region",
        ),
        (
            format!("{EXTRA}api_keys = [{A:?}]\nsticky = \"session\"\n"),
            "providers.pool.sticky",
        ),
        (
            format!("{EXTRA}sticky = \"conversation\"\n"),
            "providers.pool.sticky",
        ),
        (
            format!("{EXTRA}api_keys = [{A:?}]\nkey_cooldown = -1\n"),
            "providers.pool.key_cooldown",
        ),
    ];
    for (toml, names) in cases {
        let text = error(&toml);
        assert!(text.contains(names), "{names} not in: {text}");
    }
}
