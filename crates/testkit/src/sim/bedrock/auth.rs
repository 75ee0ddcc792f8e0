//! How the Bedrock simulator checks a request's credentials: a Bedrock
//! API key as a bearer, or a SigV4 signature recomputed from the bytes
//! received (its keys, scope, session token, date and signature), refused
//! in Bedrock's words.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use understudy_providers::sigv4;

use super::{BedrockSim, refuse};
use crate::sim::cloud::Refused;
use crate::sim::{Received, lock};

impl BedrockSim {
    pub(super) fn check_auth(&self, req: &Received) -> Result<(), Box<Refused>> {
        let auth = req.header("authorization").ok_or_else(|| {
            refuse(
                403,
                "MissingAuthenticationTokenException",
                "Missing Authentication Token",
            )
        })?;
        if let Some(token) = auth.strip_prefix("Bearer ") {
            return match &self.inner.bearer {
                Some(key) if key == token => Ok(()),
                _ => Err(refuse(
                    403,
                    "UnrecognizedClientException",
                    "Invalid API Key format: Must start with pre-defined prefix",
                )),
            };
        }
        let parsed = ParsedAuth::of(auth).ok_or_else(|| {
            refuse(
                403,
                "IncompleteSignatureException",
                "the Authorization header is not a SigV4 signature",
            )
        })?;
        let token = req.header("x-amz-security-token");
        let keys = self.signing_keys(&parsed, token)?;
        self.check_scope(&parsed)?;
        self.check_session(&keys, &parsed, token)?;
        let time = check_date(req, &parsed)?;
        self.check_signature(req, &parsed, &keys, time)
    }

    /// The keys the signature names (by key id, and by session token when
    /// several share the id).
    fn signing_keys(
        &self,
        parsed: &ParsedAuth,
        token: Option<&str>,
    ) -> Result<sigv4::Credentials, Box<Refused>> {
        let known = lock(&self.inner.keys).clone();
        let mut with_id = known.iter().filter(|k| k.access_key_id == parsed.key_id);
        with_id
            .clone()
            .find(|k| k.session_token.is_none() || k.session_token.as_deref() == token)
            .or_else(|| with_id.next())
            .cloned()
            .ok_or_else(|| {
                refuse(
                    403,
                    "UnrecognizedClientException",
                    "The security token included in the request is invalid.",
                )
            })
    }

    /// The signature's scope is this region's Bedrock, and it signs the
    /// headers SigV4 requires.
    fn check_scope(&self, parsed: &ParsedAuth) -> Result<(), Box<Refused>> {
        if parsed.region != self.inner.region || parsed.service != "bedrock" {
            return Err(refuse(
                403,
                "InvalidSignatureException",
                &format!(
                    "Credential should be scoped to a valid region and to service 'bedrock', not '{}/{}'.",
                    parsed.region, parsed.service
                ),
            ));
        }
        for needed in ["host", "x-amz-date"] {
            if !parsed.signed.iter().any(|h| h == needed) {
                return Err(refuse(
                    403,
                    "InvalidSignatureException",
                    &format!("'{needed}' must be a signed header"),
                ));
            }
        }
        Ok(())
    }

    /// The session token sent is the keys' own, signed and not expired (or
    /// neither has one).
    fn check_session(
        &self,
        keys: &sigv4::Credentials,
        parsed: &ParsedAuth,
        token: Option<&str>,
    ) -> Result<(), Box<Refused>> {
        match (&keys.session_token, token) {
            (Some(expected), Some(token)) if expected == token => {
                if !parsed.signed.iter().any(|h| h == "x-amz-security-token") {
                    return Err(refuse(
                        403,
                        "InvalidSignatureException",
                        "the session token must be signed",
                    ));
                }
                if lock(&self.inner.expired).contains(token) {
                    return Err(refuse(
                        403,
                        "ExpiredTokenException",
                        "The security token included in the request is expired",
                    ));
                }
                Ok(())
            }
            (None, None) => Ok(()),
            _ => Err(refuse(
                403,
                "UnrecognizedClientException",
                "The security token included in the request is invalid.",
            )),
        }
    }

    /// The request signed again with `keys` at `time` gives its signature.
    fn check_signature(
        &self,
        req: &Received,
        parsed: &ParsedAuth,
        keys: &sigv4::Credentials,
        time: SystemTime,
    ) -> Result<(), Box<Refused>> {
        let added = ["x-amz-date", "x-amz-security-token", "x-amz-content-sha256"];
        let headers: Vec<(&str, &str)> = parsed
            .signed
            .iter()
            .filter(|h| !added.contains(&h.as_str()))
            .filter_map(|h| req.header(h).map(|v| (h.as_str(), v)))
            .collect();
        let (path, query) = req.path.split_once('?').unwrap_or((&req.path, ""));
        let again = sigv4::sign(
            &sigv4::Request {
                method: &req.method,
                path,
                query,
                headers: &headers,
                body: &req.body,
            },
            &sigv4::Scope {
                region: &self.inner.region,
                service: "bedrock",
                time,
                normalize_path: true,
                double_encode_path: true,
                content_sha256_header: parsed.signed.iter().any(|h| h == "x-amz-content-sha256"),
            },
            keys,
        );
        if again.signature != parsed.signature {
            return Err(refuse(
                403,
                "InvalidSignatureException",
                "The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method.",
            ));
        }
        Ok(())
    }
}

/// The request's `x-amz-date`: well formed, within five minutes of now,
/// and on the day the signature's scope names.
fn check_date(req: &Received, parsed: &ParsedAuth) -> Result<SystemTime, Box<Refused>> {
    let date = req.header("x-amz-date").unwrap_or_default();
    let time = parse_amz_date(date).ok_or_else(|| {
        refuse(
            403,
            "IncompleteSignatureException",
            "x-amz-date is not YYYYMMDDTHHMMSSZ",
        )
    })?;
    let skew = SystemTime::now()
        .duration_since(time)
        .unwrap_or_else(|e| e.duration());
    if skew > Duration::from_secs(300) || !date.starts_with(&parsed.date) {
        return Err(refuse(
            403,
            "InvalidSignatureException",
            "Signature expired or not yet current",
        ));
    }
    Ok(time)
}

/// The parts of a SigV4 `Authorization` header.
struct ParsedAuth {
    key_id: String,
    date: String,
    region: String,
    service: String,
    signed: Vec<String>,
    signature: String,
}

impl ParsedAuth {
    fn of(header: &str) -> Option<Self> {
        let rest = header.strip_prefix("AWS4-HMAC-SHA256 ")?;
        let (mut credential, mut signed, mut signature) = (None, None, None);
        for part in rest.split(',') {
            let (k, v) = part.trim().split_once('=')?;
            match k {
                "Credential" => credential = Some(v),
                "SignedHeaders" => signed = Some(v),
                "Signature" => signature = Some(v),
                _ => return None,
            }
        }
        let mut scope = credential?.split('/');
        let (key_id, date, region, service, terminator) = (
            scope.next()?,
            scope.next()?,
            scope.next()?,
            scope.next()?,
            scope.next()?,
        );
        if terminator != "aws4_request" || scope.next().is_some() {
            return None;
        }
        Some(Self {
            key_id: key_id.to_owned(),
            date: date.to_owned(),
            region: region.to_owned(),
            service: service.to_owned(),
            signed: signed?.split(';').map(str::to_owned).collect(),
            signature: signature?.to_owned(),
        })
    }
}

/// `YYYYMMDDTHHMMSSZ` as a time.
fn parse_amz_date(d: &str) -> Option<SystemTime> {
    let b = d.as_bytes();
    if b.len() != 16 || b[8] != b'T' || b[15] != b'Z' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| d.get(r)?.parse::<i64>().ok();
    let (y, m, day) = (num(0..4)?, num(4..6)?, num(6..8)?);
    let (hh, mm, ss) = (num(9..11)?, num(11..13)?, num(13..15)?);
    let days = understudy_types::clock::days_from_civil(y, m, day);
    let secs = u64::try_from(days * 86_400 + hh * 3600 + mm * 60 + ss).ok()?;
    Some(UNIX_EPOCH + Duration::from_secs(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amz_dates_read_back() {
        let t = UNIX_EPOCH + Duration::from_secs(1_440_938_160);
        assert_eq!(parse_amz_date("20150830T123600Z"), Some(t));
        assert_eq!(sigv4::amz_dates(t).0, "20150830T123600Z");
        assert!(parse_amz_date("2015-08-30").is_none());
    }
}
