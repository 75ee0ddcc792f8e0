//! The providers' request rules, enforced by the simulators (on by
//! default). A simulator that accepts anything proves nothing about a
//! translation: these rules are the ones a real provider answers with a
//! 400, and a broken rule here gets that provider's 400 in its own error
//! shape, and is counted so that a test can assert that none happened.
//!
//! `routing_fields.rs` holds the one rule every protocol shares: the
//! gateway's routing fields (`models`, `provider`, `fallbacks`) are
//! unknown to every provider.
//!
//! The plumbing is protocol-independent: [`Rules`] holds the strict flag,
//! the output-token limit, the signatures a simulator minted and the
//! violations; `check` hands a request to its protocol's rules, each in
//! its own file, which answer a `Violation` built with the protocol's
//! constructor.
//!
//! The checks are test-only: they exist with the `test-support` feature.
//! Without it (the demo's simulators, in the shipped binary) [`Rules`]
//! keeps only what the simulators' answers need — the signatures they mint
//! and whether the model thinks — and nothing is checked.

#[cfg(feature = "test-support")]
mod anthropic;
#[cfg(feature = "test-support")]
mod gemini;
#[cfg(feature = "test-support")]
mod openai;
#[cfg(feature = "test-support")]
mod responses;
#[cfg(feature = "test-support")]
mod routing_fields;

use std::collections::HashSet;
use std::hash::{BuildHasher, Hasher};
use std::sync::Mutex;
#[cfg(feature = "test-support")]
use std::sync::atomic::AtomicU64;
use std::sync::atomic::{AtomicBool, Ordering};

#[cfg(feature = "test-support")]
use serde_json::{Value, json};

use super::{Dialect, Protocol, Received, lock};
#[cfg(feature = "test-support")]
use super::{SimBody, response};

/// A simulator's rules: whether they are checked, the settings they check
/// against, and what broke them.
pub(super) struct Rules {
    /// Signatures this simulator minted (Anthropic thinking blocks; free
    /// for any protocol's signed blocks), so that a replayed one can be
    /// told from one another provider (or nobody) made.
    signatures: Mutex<HashSet<String>>,
    /// Gemini: the model thinks, so it signs its function calls and wants
    /// the signatures back ([`super::SimProvider::thinking`]).
    thinking: AtomicBool,
    // The checks' own state (test-only).
    #[cfg(feature = "test-support")]
    protocol: Protocol,
    #[cfg(feature = "test-support")]
    dialect: Dialect,
    #[cfg(feature = "test-support")]
    strict: AtomicBool,
    #[cfg(feature = "test-support")]
    max_output_tokens: AtomicU64,
    #[cfg(feature = "test-support")]
    violations: Mutex<Vec<String>>,
}

/// A broken rule: the provider's answer to the request.
#[cfg(feature = "test-support")]
pub(super) struct Violation {
    status: u16,
    body: Value,
    /// The provider's message, for [`Rules::violations`].
    message: String,
}

/// Checks `req` against its protocol's rules (none when the simulator is
/// lenient).
#[cfg(feature = "test-support")]
pub(super) fn check(rules: &Rules, req: &Received) -> Option<Violation> {
    if !rules.strict.load(Ordering::SeqCst) {
        return None;
    }
    // The gateway's own routing fields never reach a provider.
    if let Err(v) = routing_fields::check(req, rules.dialect) {
        return Some(v);
    }
    let limit = rules.max_output_tokens.load(Ordering::SeqCst);
    let verdict = match rules.dialect {
        Dialect::Messages | Dialect::Converse => anthropic::check(req, limit, &|s| rules.minted(s)),
        Dialect::ChatCompletions => openai::check(req, limit),
        Dialect::Responses => responses::check(req, limit, &|s| rules.minted(s)),
        Dialect::GenerateContent => gemini::check(req, rules.thinking(), &|s| rules.minted(s)),
    };
    verdict.err()
}

/// Mints a signature for a signed block sent in reply to `req`, and
/// remembers it in that simulator's rules.
pub(super) fn mint_signature(req: &Received) -> String {
    let signature = random_signature();
    if let Some(shared) = &req.shared {
        shared.rules.remember_signature(signature.clone());
    }
    signature
}

// === impl Rules ===

impl Rules {
    pub(super) fn new(protocol: Protocol, dialect: Dialect) -> Self {
        #[cfg(feature = "test-support")]
        let max_output_tokens = match dialect {
            Dialect::Messages | Dialect::Converse => 64_000,
            Dialect::ChatCompletions => 16_384,
            Dialect::Responses => 128_000,
            Dialect::GenerateContent => 65_536,
        };
        #[cfg(not(feature = "test-support"))]
        let _ = (protocol, dialect);
        Self {
            signatures: Mutex::default(),
            thinking: AtomicBool::new(false),
            #[cfg(feature = "test-support")]
            protocol,
            #[cfg(feature = "test-support")]
            dialect,
            // `UNDERSTUDY_SIM_LENIENT=1` turns every simulator's rules off:
            // a way to tell a failure the rules cause from any other.
            #[cfg(feature = "test-support")]
            strict: AtomicBool::new(std::env::var_os("UNDERSTUDY_SIM_LENIENT").is_none()),
            #[cfg(feature = "test-support")]
            max_output_tokens: AtomicU64::new(max_output_tokens),
            #[cfg(feature = "test-support")]
            violations: Mutex::default(),
        }
    }

    pub(super) fn set_thinking(&self, thinking: bool) {
        self.thinking.store(thinking, Ordering::SeqCst);
    }

    /// Whether the simulated model thinks (Gemini: signs its calls).
    pub(super) fn thinking(&self) -> bool {
        self.thinking.load(Ordering::SeqCst)
    }

    pub(super) fn remember_signature(&self, signature: String) {
        lock(&self.signatures).insert(signature);
    }
}

/// The checks' settings and record (test-only).
#[cfg(feature = "test-support")]
impl Rules {
    pub(super) fn set_strict(&self, strict: bool) {
        self.strict.store(strict, Ordering::SeqCst);
    }

    pub(super) fn set_max_output_tokens(&self, limit: u64) {
        self.max_output_tokens.store(limit, Ordering::SeqCst);
    }

    /// The simulator's output-token limit.
    #[allow(dead_code, reason = "for the Gemini rules")]
    pub(super) fn max_output_tokens(&self) -> u64 {
        self.max_output_tokens.load(Ordering::SeqCst)
    }

    /// Whether this simulator minted `signature`.
    pub(super) fn minted(&self, signature: &str) -> bool {
        lock(&self.signatures).contains(signature)
    }

    /// Counts `violation` of `req` (and logs it, so that a failing test's
    /// output shows what was refused).
    pub(super) fn record(&self, req: &Received, violation: &Violation) {
        let line = format!("{} {}: {}", req.method, req.path, violation.message);
        tracing::warn!(protocol = ?self.protocol, violation = %line, "simulator refused a request");
        lock(&self.violations).push(line);
    }

    pub(super) fn violations(&self) -> Vec<String> {
        lock(&self.violations).clone()
    }
}

// === impl Violation ===

#[cfg(feature = "test-support")]
impl Violation {
    /// Anthropic's 400: `{"type": "error", "error": {"type":
    /// "invalid_request_error", "message"}, "request_id"}`.
    pub(super) fn anthropic(message: String) -> Self {
        let body = json!({
            "type": "error",
            "error": {"type": "invalid_request_error", "message": message},
            "request_id": "req_sim_rules"
        });
        Self {
            status: 400,
            body,
            message,
        }
    }

    /// OpenAI's 400: `{"error": {"message", "type": "invalid_request_error",
    /// "param", "code"}}`.
    pub(super) fn openai(message: String, param: Option<String>, code: Option<&str>) -> Self {
        let body = json!({"error": {
            "message": message,
            "type": "invalid_request_error",
            "param": param,
            "code": code
        }});
        Self {
            status: 400,
            body,
            message,
        }
    }

    /// Gemini's 400: `{"error": {"code": 400, "message", "status":
    /// "INVALID_ARGUMENT"}}`.
    pub(super) fn gemini(message: String) -> Self {
        let body = json!({"error": {
            "code": 400,
            "message": message,
            "status": "INVALID_ARGUMENT"
        }});
        Self {
            status: 400,
            body,
            message,
        }
    }

    /// The provider's answer.
    pub(super) fn response(&self) -> hyper::Response<SimBody> {
        response(
            self.status,
            &[("content-type", "application/json")],
            self.body.to_string(),
        )
    }
}

/// A fresh random signature: 64 bytes as canonical base64 text, from the
/// standard library's per-process random hash keys. Canonical: the last
/// character before the padding carries 4 zero bits, as a real encoder
/// writes it; the google-genai SDK decodes `thoughtSignature` strictly and
/// refuses a whole answer whose signature has stray bits there.
fn random_signature() -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(88);
    while out.len() < 86 {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_usize(out.len());
        let mut x = hasher.finish();
        for _ in 0..10 {
            out.push(char::from(ALPHABET[(x % 64) as usize]));
            x /= 64;
        }
    }
    out.truncate(86);
    // 86 characters hold 516 bits, 64 bytes and 4 more: those must be zero.
    if let Some(last) = out.pop() {
        let index = ALPHABET
            .iter()
            .position(|&c| char::from(c) == last)
            .unwrap_or(0);
        out.push(char::from(ALPHABET[index & !0b1111]));
    }
    out.push_str("==");
    out
}

/// Whether `id` matches `^[a-zA-Z0-9_-]+$` (Anthropic's tool-use ids).
#[cfg(feature = "test-support")]
fn is_tool_id(id: &str) -> bool {
    !id.is_empty()
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}
