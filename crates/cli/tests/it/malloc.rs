//! `serve` on Linux with glibc runs with glibc's mmap threshold fixed (so
//! that a burst of large bodies' pages go back), by starting itself again
//! once with `GLIBC_TUNABLES` set: the process the service manager started
//! (the same process id) has it in its environment and still serves; an
//! operator's own `GLIBC_TUNABLES` is kept as it is, and a second start
//! never starts itself again.

use understudy_testkit::{Reply, SimProvider};

use crate::common::{Gateway, Scratch, providers};

/// The `GLIBC_TUNABLES` of a running process, from `/proc`. glibc parses
/// the variable in place as the process starts, ending each tunable's
/// value with a NUL: the tunables after the first read as entries of
/// their own (`glibc.…=…`) and are joined back.
fn tunables_of(pid: u32) -> Option<String> {
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    let mut entries = environ
        .split(|b| *b == 0)
        .filter_map(|kv| std::str::from_utf8(kv).ok())
        .skip_while(|kv| !kv.starts_with("GLIBC_TUNABLES="));
    let first = entries.next()?.strip_prefix("GLIBC_TUNABLES=")?;
    let rest = entries.take_while(|kv| kv.starts_with("glibc."));
    Some(
        std::iter::once(first)
            .chain(rest)
            .collect::<Vec<_>>()
            .join(":"),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn serve_runs_with_the_mmap_threshold_fixed_unless_the_operator_tuned_glibc() {
    if !cfg!(all(target_os = "linux", target_env = "gnu")) {
        return;
    }
    let groq = SimProvider::openai().await.unwrap();
    groq.always(Reply::text("Hello"));
    let toml = providers(&[("groq", "openai", &groq)]);
    // The environment a start is given, and the GLIBC_TUNABLES it runs
    // with. The last case is a second start whose GLIBC_TUNABLES glibc
    // dropped (a binary with file capabilities): it must not start itself
    // again, and again, but serve with glibc's defaults.
    type Case<'a> = (&'a [(&'a str, &'a str)], Option<&'a str>);
    let cases: [Case; 3] = [
        (
            &[],
            Some("glibc.malloc.mmap_threshold=131072:glibc.malloc.tcache_count=128"),
        ),
        (
            &[("GLIBC_TUNABLES", "glibc.malloc.arena_max=2")],
            Some("glibc.malloc.arena_max=2"),
        ),
        (&[("UNDERSTUDY_MALLOC_TUNED", "1")], None),
    ];
    for (env, expected) in cases {
        let scratch = Scratch::new("malloc", "tunables");
        let mut gateway = Gateway::start_with(&scratch, &toml, "sk-malloc-test", env);
        assert_eq!(tunables_of(gateway.pid()).as_deref(), expected, "{env:?}");
        let answer = understudy_testkit::http_client()
            .post(format!("{}/v1/chat/completions", gateway.url))
            .bearer_auth("sk-malloc-test")
            .header("content-type", "application/json")
            .body(r#"{"model": "default", "messages": [{"role": "user", "content": "hi"}]}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status().as_u16(), 200, "{}", gateway.log());
        assert!(gateway.terminate().await.success(), "{}", gateway.log());
    }
}
