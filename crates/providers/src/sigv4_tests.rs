//! The signer against AWS's SigV4 test suite
//! (`tests/data/aws-signing-test-suite/v4/<case>/`): for every case, the
//! canonical request, the string to sign and the signature are exactly
//! the suite's.

use std::time::{Duration, UNIX_EPOCH};

use serde_json::Value;

use super::*;

fn suite() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/aws-signing-test-suite/v4")
}

/// `2015-08-30T12:36:00Z` as a time.
fn parse_time(s: &str) -> SystemTime {
    let n = |r: std::ops::Range<usize>| s[r].parse::<i64>().unwrap();
    let (y, m, d) = (n(0..4), n(5..7), n(8..10));
    // Howard Hinnant's days_from_civil.
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + n(11..13) * 3600 + n(14..16) * 60 + n(17..19);
    UNIX_EPOCH + Duration::from_secs(u64::try_from(secs).unwrap())
}

/// A request as the suite writes it: the request line, headers (a line
/// starting with whitespace continues the one before), a blank line, the
/// body.
struct Parsed {
    method: String,
    path: String,
    query: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

fn parse_request(text: &str) -> Parsed {
    let (head, body) = text.split_once("\n\n").unwrap_or((text, ""));
    let mut lines = head.lines();
    let line = lines.next().unwrap();
    let (method, rest) = line.split_once(' ').unwrap();
    let target = rest.strip_suffix(" HTTP/1.1").unwrap();
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let mut headers: Vec<(String, String)> = Vec::new();
    for l in lines {
        if l.starts_with(' ') || l.starts_with('\t') {
            let last = headers.last_mut().unwrap();
            last.1.push(' ');
            last.1.push_str(l.trim());
        } else if let Some((n, v)) = l.split_once(':') {
            headers.push((n.to_owned(), v.to_owned()));
        }
    }
    Parsed {
        method: method.to_owned(),
        path: path.to_owned(),
        query: query.to_owned(),
        headers,
        body: body.as_bytes().to_vec(),
    }
}

#[test]
fn every_case_of_aws_s_test_suite_signs_as_published() {
    let mut cases: Vec<_> = std::fs::read_dir(suite())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    cases.sort();
    assert_eq!(cases.len(), 38, "the suite's cases with a context");
    for dir in cases {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap();
        let ctx: Value = serde_json::from_str(&read("context.json")).unwrap();
        let c = &ctx["credentials"];
        let omit_token = ctx["omit_session_token"].as_bool().unwrap_or(false);
        let creds = Credentials {
            access_key_id: c["access_key_id"].as_str().unwrap().to_owned(),
            secret_access_key: c["secret_access_key"].as_str().unwrap().to_owned(),
            session_token: c["token"]
                .as_str()
                .filter(|_| !omit_token)
                .map(str::to_owned),
        };
        let scope = Scope {
            region: ctx["region"].as_str().unwrap(),
            service: ctx["service"].as_str().unwrap(),
            time: parse_time(ctx["timestamp"].as_str().unwrap()),
            normalize_path: ctx["normalize"].as_bool().unwrap(),
            // The suite's paths are as sent, escapes kept (its
            // `double-encode-path` case is of the old format, left out).
            double_encode_path: false,
            content_sha256_header: ctx["sign_body"].as_bool().unwrap(),
        };
        let parsed = parse_request(&read("request.txt"));
        let headers: Vec<(&str, &str)> = parsed
            .headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        let req = Request {
            method: &parsed.method,
            path: &parsed.path,
            query: &parsed.query,
            headers: &headers,
            body: &parsed.body,
        };
        let signed = sign(&req, &scope, &creds);
        assert_eq!(
            signed.canonical_request,
            read("header-canonical-request.txt"),
            "{name}: canonical request"
        );
        assert_eq!(
            signed.string_to_sign,
            read("header-string-to-sign.txt"),
            "{name}: string to sign"
        );
        assert_eq!(
            signed.signature,
            read("header-signature.txt").trim(),
            "{name}: signature"
        );
    }
}

#[test]
fn the_authorization_header_names_the_scope_and_the_signed_headers() {
    let creds = Credentials {
        access_key_id: "AKIDEXAMPLE".into(),
        secret_access_key: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY".into(),
        session_token: Some("token".into()),
    };
    let scope = Scope {
        region: "us-east-1",
        service: "bedrock",
        time: parse_time("2015-08-30T12:36:00Z"),
        normalize_path: true,
        double_encode_path: true,
        content_sha256_header: false,
    };
    let req = Request {
        method: "POST",
        path: "/model/us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/invoke",
        query: "",
        headers: &[("host", "bedrock-runtime.us-east-1.amazonaws.com")],
        body: b"{}",
    };
    let signed = sign(&req, &scope, &creds);
    let names: Vec<&str> = signed.headers.iter().map(|(n, _)| *n).collect();
    assert_eq!(
        names,
        ["x-amz-date", "x-amz-security-token", "authorization"]
    );
    let auth = &signed.headers[2].1;
    assert!(auth.starts_with(
        "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/bedrock/aws4_request, SignedHeaders=host;x-amz-date;x-amz-security-token, Signature="
    ), "{auth}");
    // The model id's `:`, sent as `%3A`, is signed encoded once more.
    assert!(
        signed
            .canonical_request
            .contains("/model/us.anthropic.claude-sonnet-4-5-20250929-v1%253A0/invoke\n"),
        "{}",
        signed.canonical_request
    );
    assert!(
        !format!("{creds:?}").contains("wJalr"),
        "the secret never shows"
    );
    assert!(
        !format!("{creds:?}").contains("token\""),
        "the token never shows"
    );
}

#[test]
fn dates_are_utc_calendar_dates() {
    for (t, want) in [
        ("1970-01-01T00:00:00Z", "19700101T000000Z"),
        ("2000-02-29T23:59:59Z", "20000229T235959Z"),
        ("2026-12-03T12:36:00Z", "20261203T123600Z"),
    ] {
        assert_eq!(amz_dates(parse_time(t)).0, want);
    }
}

#[test]
fn a_double_encoded_path_is_the_suite_s_old_format_case() {
    // The suite's `double-encode-path` (old format, no context.json): the
    // path as sent and its canonical form.
    assert_eq!(
        canonical_path("/test/@connections/JBDvjfGEIAMCERw%3D", true, true),
        "/test/%40connections/JBDvjfGEIAMCERw%253D"
    );
    assert_eq!(canonical_path("", true, true), "/");
    assert_eq!(canonical_path("/a/../b/./c//", true, false), "/b/c/");
}
