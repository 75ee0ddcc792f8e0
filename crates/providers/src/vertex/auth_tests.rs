//! The token cell's checks: the JWT a service account signs (verified
//! against the test account's public key), key-file errors that name the
//! file (for the log) and never its content, a status that names neither,
//! single-flight fetches, one renewal per 401 storm, and — in paused time —
//! a request that waits no longer than the gate's bound while the token
//! endpoint hangs, and a 30 s token refreshed ahead of its expiry under a
//! 2-minute run at concurrency 16 without any request waiting on an
//! exchange.

#![allow(clippy::unwrap_used, reason = "tests fail loudly on purpose")]

use std::collections::HashMap;
use std::sync::atomic::AtomicUsize;

use ring::signature::{RSA_PKCS1_2048_8192_SHA256, UnparsedPublicKey};
use serde_json::Value;

use super::*;

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../testkit/data")
        .join(name)
}

fn temp_file(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("understudy-vertex-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn client() -> reqwest::Client {
    crate::install_tls_provider();
    reqwest::Client::new()
}

/// `token`, its fetches made as the provider's actor makes them: asked
/// for through its gate, on a task of their own.
fn served(token: GoogleToken) -> Arc<GoogleToken> {
    let token = Arc::new(token);
    let weak = Arc::downgrade(&token);
    token.gate.attach(Box::new(move || {
        let Some(token) = weak.upgrade() else {
            return false;
        };
        // Bounded as the actor bounds a refresh (20 s).
        tokio::spawn(async move {
            let refresh = tokio::time::timeout(Duration::from_secs(20), token.refresh());
            let ok = matches!(refresh.await, Ok(Ok(())));
            token.gate.finish(ok);
        });
        true
    }));
    token
}

fn b64(part: &str) -> Vec<u8> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(part)
        .unwrap()
}

#[test]
fn the_jwt_carries_googles_claims_and_verifies_against_the_public_key() {
    let account = Account::read(&data("vertex-test-sa.json"), client()).unwrap();
    let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let jwt = account.assertion(now).unwrap();
    let parts: Vec<&str> = jwt.split('.').collect();
    assert_eq!(parts.len(), 3);
    let header: Value = serde_json::from_slice(&b64(parts[0])).unwrap();
    assert_eq!(header["alg"], "RS256");
    assert_eq!(header["typ"], "JWT");
    assert_eq!(header["kid"], "0123456789abcdef-test-only");
    let claims: Value = serde_json::from_slice(&b64(parts[1])).unwrap();
    assert_eq!(
        claims["iss"],
        "understudy-test@understudy-sim.iam.gserviceaccount.com"
    );
    assert_eq!(claims["aud"], "https://oauth2.googleapis.com/token");
    assert_eq!(claims["scope"], SCOPE);
    assert_eq!(claims["iat"], 1_800_000_000_u64);
    assert_eq!(claims["exp"], 1_800_003_600_u64);
    let public = std::fs::read(data("vertex-test-sa.pub.der")).unwrap();
    let key = UnparsedPublicKey::new(&RSA_PKCS1_2048_8192_SHA256, public);
    let signed = format!("{}.{}", parts[0], parts[1]);
    key.verify(signed.as_bytes(), &b64(parts[2])).unwrap();
    // A claim changed after signing no longer verifies.
    let forged = format!("{}.{}x", parts[0], parts[1]);
    assert!(key.verify(forged.as_bytes(), &b64(parts[2])).is_err());
    // The form: the grant's colons encoded, the JWT as it is.
    assert_eq!(
        form_encode(GRANT),
        "urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer"
    );
    assert_eq!(form_encode(&jwt), jwt);
}

#[test]
fn key_file_errors_name_the_file_and_never_its_content() {
    let secret = "SECRET-d0-not-print";
    let pem = format!("-----BEGIN PRIVATE KEY-----\\n{secret}\\n-----END PRIVATE KEY-----\\n");
    let cases = [
        ("not-json.json", format!("{{\"private_key\": \"{secret}")),
        (
            "wrong-type.json",
            format!("{{\"type\": 5, \"private_key\": \"{secret}\"}}"),
        ),
        (
            "user.json",
            format!("{{\"type\": \"authorized_user\", \"refresh_token\": \"{secret}\"}}"),
        ),
        (
            "other.json",
            format!("{{\"type\": \"{secret}\", \"private_key\": \"{secret}\"}}"),
        ),
        (
            "no-key.json",
            format!("{{\"type\": \"service_account\", \"client_email\": \"{secret}\"}}"),
        ),
        (
            "bad-key.json",
            format!(
                "{{\"type\": \"service_account\", \"client_email\": \"a@b\", \"private_key\": \"{pem}\"}}"
            ),
        ),
    ];
    for (name, text) in cases {
        let path = temp_file(name, &text);
        let err = Account::read(&path, client()).unwrap_err();
        assert!(err.contains(&path.display().to_string()), "{name}: {err}");
        assert!(!err.contains("SECRET"), "{name}: {err}");
    }
    let missing = Account::read(&data("no-such-key.json"), client()).unwrap_err();
    assert!(missing.contains("no-such-key.json"), "{missing}");
}

#[tokio::test(start_paused = true)]
async fn a_broken_key_file_is_unusable_with_a_reason_that_names_no_file_and_recovers() {
    // Names of this test's own: another test of the process writes its
    // broken files in the same folder, and this one writes good keys over
    // these.
    let cases = [
        ("recovers-missing.json", None),
        ("recovers-not-json.json", Some("{\"type\": \"service_acc")),
        (
            "recovers-not-pem.json",
            Some(
                "{\"type\": \"service_account\", \"client_email\": \"a@b\", \"private_key\": \"SECRET\"}",
            ),
        ),
    ];
    for (name, text) in cases {
        let dir = std::env::temp_dir().join(format!("understudy-vertex-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        let _ = std::fs::remove_file(&path);
        if let Some(text) = text {
            temp_file(name, text);
        }
        // The provider builds: no error to fail its actor's start.
        let token = served(GoogleToken::account(&path, client()));
        assert!(!token.usable(), "{name}");
        let shown = token.status().error.unwrap();
        assert!(!shown.contains(&*dir.to_string_lossy()), "{name}: {shown}");
        assert!(!shown.contains("SECRET"), "{name}: {shown}");
        // The log's error names the file.
        let logged = token.refresh().await.unwrap_err();
        assert!(
            logged.contains(&*path.to_string_lossy()),
            "{name}: {logged}"
        );
        // A request is not sent with nothing: it fails, naming no file.
        let failure = token.current().await.unwrap_err();
        assert!(!failure.detail.contains(name), "{}", failure.detail);
        // A good key written over it: the next refresh reads it.
        let mut key: Value =
            serde_json::from_str(&std::fs::read_to_string(data("vertex-test-sa.json")).unwrap())
                .unwrap();
        key["token_uri"] = "http://127.0.0.1:9/token".into();
        std::fs::write(&path, key.to_string()).unwrap();
        let _ = token.refresh().await;
        assert!(
            token.status().source.contains("understudy-test@"),
            "{name}: {}",
            token.status().source
        );
    }
}

#[test]
fn debug_and_status_show_no_secret() {
    let account = GoogleToken::account(&data("vertex-test-sa.json"), client());
    let shown = format!("{account:?} {:?}", account.status());
    assert!(
        shown.contains("understudy-test@understudy-sim.iam.gserviceaccount.com"),
        "{shown}"
    );
    assert!(
        !shown.contains("PRIVATE KEY") && !shown.contains("MII"),
        "{shown}"
    );
    let fixed = GoogleToken::fixed("ya29.static-SECRET").unwrap();
    let shown = format!("{fixed:?} {:?}", fixed.status());
    assert!(!shown.contains("SECRET"), "{shown}");
    assert!(
        fixed.refresh_in().is_none(),
        "a static token is not refreshed"
    );
}

/// A token endpoint in-process: each exchange takes `latency`, issues
/// `tok-N` for `lifetime`, and records when each token expires.
struct Issuer {
    issued: Arc<Mutex<HashMap<String, Instant>>>,
    count: Arc<AtomicUsize>,
}

fn issuer(latency: Duration, lifetime: Duration) -> (GoogleToken, Issuer) {
    let issued = Arc::new(Mutex::new(HashMap::new()));
    let count = Arc::new(AtomicUsize::new(0));
    let (i, c) = (Arc::clone(&issued), Arc::clone(&count));
    let fetch: Fake = Box::new(move || {
        let (issued, count) = (Arc::clone(&i), Arc::clone(&c));
        Box::pin(async move {
            tokio::time::sleep(latency).await;
            let n = count.fetch_add(1, Ordering::SeqCst);
            let token = format!("tok-{n}");
            issued
                .lock()
                .unwrap()
                .insert(token.clone(), Instant::now() + lifetime);
            Ok((token, lifetime))
        })
    });
    (GoogleToken::fake(fetch), Issuer { issued, count })
}

/// A token endpoint that accepts and never answers.
fn hanging() -> GoogleToken {
    GoogleToken::fake(Box::new(|| Box::pin(std::future::pending())))
}

fn token_of(header: &HeaderValue) -> String {
    header
        .to_str()
        .unwrap()
        .strip_prefix("Bearer ")
        .unwrap()
        .to_owned()
}

#[tokio::test(start_paused = true)]
async fn concurrent_requests_with_no_token_share_one_exchange() {
    let (token, issuer) = issuer(Duration::from_millis(200), Duration::from_secs(3600));
    let token = served(token);
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let token = Arc::clone(&token);
            tokio::spawn(async move { token.current().await.map(|h| token_of(&h)) })
        })
        .collect();
    for task in tasks {
        assert_eq!(task.await.unwrap().unwrap(), "tok-0");
    }
    assert_eq!(issuer.count.load(Ordering::SeqCst), 1);
    assert_eq!(token.exchanges(), 1);

    // Vertex's 401s to all 16 at once (each sent with tok-0): one renewal
    // between them.
    let rejected = token.current().await.unwrap();
    let renewals: Vec<_> = (0..16)
        .map(|_| {
            let (token, rejected) = (Arc::clone(&token), rejected.clone());
            tokio::spawn(async move { token.renew(Some(&rejected)).await })
        })
        .collect();
    for renewal in renewals {
        assert!(renewal.await.unwrap());
    }
    assert_eq!(issuer.count.load(Ordering::SeqCst), 2);
    let renewed = token.current().await.unwrap();
    assert_eq!(token_of(&renewed), "tok-1");
    // At once, tok-1 refused too: renewed again (no window to wait out).
    assert!(token.renew(Some(&renewed)).await);
    assert_eq!(issuer.count.load(Ordering::SeqCst), 3);
    assert_eq!(token.exchanges(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_refused_exchange_fails_requests_at_once_and_keeps_the_error() {
    let fetch: Fake = Box::new(|| {
        Box::pin(async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            Err("the token endpoint refused the key (400): invalid_grant".to_owned())
        })
    });
    let token = served(GoogleToken::fake(fetch));
    let first = token.current().await.unwrap_err();
    assert_eq!(first.kind, FailureKind::Auth);
    // The request's failure is a client's to read: the endpoint's words
    // stay in the status (and the actor's log).
    assert!(!first.detail.contains("invalid_grant"), "{}", first.detail);
    // The next request fails without another exchange.
    let started = Instant::now();
    assert!(token.current().await.is_err());
    assert_eq!(started.elapsed(), Duration::ZERO);
    assert_eq!(token.exchanges(), 1);
    assert!(token.status().error.unwrap().contains("invalid_grant"));
}

#[tokio::test(start_paused = true)]
async fn a_hanging_token_endpoint_costs_a_request_the_bound_at_most() {
    use understudy_core::credentials::{CREDENTIAL_RETRY, CREDENTIAL_WAIT};
    let token = served(hanging());
    // The first request asks for a token and waits the bound, no more.
    let started = Instant::now();
    assert!(token.current().await.is_err());
    assert_eq!(started.elapsed(), CREDENTIAL_WAIT);
    // The exchange goes on without it: the next requests do not wait at
    // all (the exchange under way is older than the bound), and none
    // starts another.
    for _ in 0..10 {
        let started = Instant::now();
        assert!(token.current().await.is_err());
        assert!(!token.renew(None).await);
        assert_eq!(started.elapsed(), Duration::ZERO);
    }
    assert_eq!(token.exchanges(), 1);
    assert!(!token.gate.try_begin(), "the exchange is still under way");
    // It times out at last (the actor's bound): the window opens, and a
    // request after it asks again, waiting the bound again.
    tokio::time::sleep(Duration::from_secs(20)).await;
    let started = Instant::now();
    assert!(token.current().await.is_err());
    assert_eq!(started.elapsed(), Duration::ZERO);
    assert_eq!(token.exchanges(), 1);
    tokio::time::sleep(CREDENTIAL_RETRY).await;
    let started = Instant::now();
    assert!(token.current().await.is_err());
    assert_eq!(started.elapsed(), CREDENTIAL_WAIT);
    assert_eq!(token.exchanges(), 2);
}

/// The actor's loop over the credentials (`actor/provider.rs`): a refresh
/// at start, the next after `refresh_in`, 2 s after a failure.
async fn actor(token: Arc<GoogleToken>) {
    loop {
        let wait = match token.refresh().await {
            Ok(()) => token.refresh_in().unwrap(),
            Err(_) => Duration::from_secs(2),
        };
        tokio::time::sleep(wait).await;
    }
}

// Paused time: two minutes of 30 s tokens take no wall-clock time, and a
// request that waited on an exchange would show as elapsed time.
#[tokio::test(start_paused = true)]
async fn a_30s_token_is_refreshed_ahead_of_time_under_load() {
    let lifetime = Duration::from_secs(30);
    let (token, issuer) = issuer(Duration::from_millis(300), lifetime);
    let token = Arc::new(token);
    let actor = tokio::spawn(actor(Arc::clone(&token)));
    // The engine is up once the actor's first fetch is done.
    while token.status().expires_at.is_none() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let end = Instant::now() + Duration::from_secs(120);
    let workers: Vec<_> = (0..16u64)
        .map(|w| {
            let (token, issued) = (Arc::clone(&token), Arc::clone(&issuer.issued));
            tokio::spawn(async move {
                let (mut done, mut failed, mut waited) = (0u32, 0u32, 0u32);
                while Instant::now() < end {
                    let asked = Instant::now();
                    let header = token.current().await;
                    if asked.elapsed() > Duration::ZERO {
                        waited += 1;
                    }
                    // The request takes 0.4 to 1.9 s upstream; its token
                    // must hold to the end of it.
                    let took = Duration::from_millis(400 + (w * 97 + u64::from(done) * 31) % 1500);
                    let good_until = header
                        .ok()
                        .and_then(|h| issued.lock().unwrap().get(&token_of(&h)).copied());
                    tokio::time::sleep(took).await;
                    match good_until {
                        Some(until) if until >= Instant::now() => done += 1,
                        _ => failed += 1,
                    }
                }
                (done, failed, waited)
            })
        })
        .collect();
    let (mut done, mut failed, mut waited) = (0, 0, 0);
    for worker in workers {
        let (d, f, w) = worker.await.unwrap();
        (done, failed, waited) = (done + d, failed + f, waited + w);
    }
    actor.abort();
    assert_eq!(failed, 0, "requests whose token expired under them");
    assert_eq!(waited, 0, "requests that waited on an exchange");
    let exchanges = token.exchanges();
    assert!(exchanges >= 4, "{exchanges} exchanges in two minutes");
    assert!(done > 16 * 50, "{done} requests");
}

#[tokio::test]
async fn a_rotated_key_file_is_read_again_and_a_broken_one_keeps_the_old_key() {
    let original = std::fs::read_to_string(data("vertex-test-sa.json")).unwrap();
    let mut key: Value = serde_json::from_str(&original).unwrap();
    // Nothing listens there: the exchange fails, the key is read first.
    key["token_uri"] = "http://127.0.0.1:9/token".into();
    let path = temp_file("rotated.json", &key.to_string());
    let set_modified = |secs: u64| {
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(UNIX_EPOCH + Duration::from_secs(secs))
            .unwrap();
    };
    set_modified(1_700_000_000);
    let token = GoogleToken::account(&path, client());
    let email = |t: &GoogleToken| t.status().source;
    assert!(
        email(&token).contains("understudy-test@"),
        "{}",
        email(&token)
    );

    // The key is rotated (another account's, say).
    key["client_email"] = "rotated@understudy-sim.iam.gserviceaccount.com".into();
    std::fs::write(&path, key.to_string()).unwrap();
    set_modified(1_700_000_100);
    assert!(token.refresh().await.is_err());
    assert!(email(&token).contains("rotated@"), "{}", email(&token));

    // A half-written file: the key held stays.
    std::fs::write(&path, "{\"type\": \"service_acc").unwrap();
    set_modified(1_700_000_200);
    assert!(token.refresh().await.is_err());
    assert!(email(&token).contains("rotated@"), "{}", email(&token));
}

#[tokio::test(start_paused = true)]
async fn an_absurd_lifetime_is_bounded_and_a_token_expires_a_little_early() {
    // `expires_in: 18446744073709551615`, as a token endpoint could say.
    let fetch: Fake = Box::new(|| Box::pin(async { Ok(("tok-0".to_owned(), Duration::MAX)) }));
    let token = served(GoogleToken::fake(fetch));
    // No overflow: the token lives a day at most.
    let header = token.current().await.unwrap();
    assert_eq!(token_of(&header), "tok-0");
    let due = token.refresh_in().unwrap();
    assert!(due <= MAX_TOKEN_LIFETIME, "{due:?}");

    // A 30 s token is handed out for 27 s (a tenth of its life early),
    // and the actor renews it before that.
    let (token, _) = issuer(Duration::ZERO, Duration::from_secs(30));
    let token = served(token);
    token.current().await.unwrap();
    assert!(token.refresh_in().unwrap() < Duration::from_secs(27));
    tokio::time::sleep(Duration::from_millis(26_900)).await;
    assert!(token.valid().is_some());
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(token.valid().is_none());
}

#[tokio::test(start_paused = true)]
async fn a_refused_token_is_not_handed_out_again_and_a_failing_endpoint_is_not_asked_per_request() {
    let fail = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let count = Arc::new(AtomicUsize::new(0));
    let (f, c) = (Arc::clone(&fail), Arc::clone(&count));
    let fetch: Fake = Box::new(move || {
        let (fail, count) = (f.load(Ordering::SeqCst), Arc::clone(&c));
        Box::pin(async move {
            let n = count.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(100)).await;
            if fail {
                Err("the token endpoint could not be reached".to_owned())
            } else {
                Ok((format!("tok-{n}"), Duration::from_secs(3600)))
            }
        })
    });
    let token = served(GoogleToken::fake(fetch));
    let rejected = token.current().await.unwrap();
    // Google revoked tok-0 and its token endpoint is down: 16 requests
    // meet the 401 at once. One exchange is tried; the rest fall back.
    fail.store(true, Ordering::SeqCst);
    let renewals: Vec<_> = (0..16)
        .map(|_| {
            let (token, rejected) = (Arc::clone(&token), rejected.clone());
            tokio::spawn(async move { token.renew(Some(&rejected)).await })
        })
        .collect();
    for renewal in renewals {
        assert!(!renewal.await.unwrap());
    }
    assert_eq!(count.load(Ordering::SeqCst), 2);
    // And tok-0 is not handed out again: a request within the cooldown
    // falls back at once, without asking the endpoint.
    assert!(token.current().await.is_err());
    assert_eq!(count.load(Ordering::SeqCst), 2);
    // The endpoint is back: after the cooldown a request fetches a new one.
    fail.store(false, Ordering::SeqCst);
    tokio::time::sleep(understudy_core::credentials::CREDENTIAL_RETRY).await;
    assert_eq!(token_of(&token.current().await.unwrap()), "tok-2");
}
