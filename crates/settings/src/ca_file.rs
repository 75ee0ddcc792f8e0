//! A provider's `ca_file`: read when the settings load, and checked to
//! hold PEM certificates (base64 of a DER structure) so that a wrong file
//! is a settings error rather than a failure on the first request.

use std::fmt;
use std::path::PathBuf;

/// A PEM file of one or more CA certificates (`ca_file`), read when the
/// settings load: a missing or unreadable file is a settings error, not a
/// failure on the first request. Its `Debug` shows the path and size only.
#[derive(Clone, PartialEq, Eq)]
pub struct CaFile {
    pub path: PathBuf,
    /// The file's bytes (a certificate bundle; shared, not copied, when the
    /// settings are cloned).
    pub pem: std::sync::Arc<[u8]>,
}

/// The largest `ca_file` read (a full public root bundle is about 220 KB).
const CA_FILE_LIMIT: u64 = 4 * 1024 * 1024;

const CERT_BEGIN: &str = "-----BEGIN CERTIFICATE-----";
const CERT_END: &str = "-----END CERTIFICATE-----";

/// Reads a `ca_file` (relative paths from the working directory): it must
/// hold at least one PEM certificate. The certificates themselves are
/// parsed when the provider's client is built.
pub(super) fn read_ca_file(path: PathBuf) -> Result<CaFile, String> {
    use std::io::Read as _;
    let shown = path.display().to_string();
    let mut pem = Vec::new();
    std::fs::File::open(&path)
        .and_then(|f| f.take(CA_FILE_LIMIT + 1).read_to_end(&mut pem))
        .map_err(|e| format!("cannot read `{shown}`: {e}"))?;
    if pem.len() as u64 > CA_FILE_LIMIT {
        return Err(format!(
            "`{shown}` is larger than {} MiB: not a CA bundle",
            CA_FILE_LIMIT / (1024 * 1024)
        ));
    }
    let text = String::from_utf8_lossy(&pem);
    let mut count = 0;
    let mut rest = text.as_ref();
    while let Some(start) = rest.find(CERT_BEGIN) {
        count += 1;
        let body = &rest[start + CERT_BEGIN.len()..];
        let Some(end) = body.find(CERT_END) else {
            return Err(format!(
                "`{shown}`: certificate {count} has no `{CERT_END}`"
            ));
        };
        if !base64(&body[..end]).is_some_and(|der| is_der_sequence(&der)) {
            return Err(format!(
                "`{shown}`: certificate {count} is not a base64 DER certificate"
            ));
        }
        rest = &body[end + CERT_END.len()..];
    }
    if count == 0 {
        return Err(format!(
            "`{shown}` holds no PEM certificate (`{CERT_BEGIN}`)"
        ));
    }
    Ok(CaFile {
        path,
        pem: pem.into(),
    })
}

/// Standard base64 (whitespace ignored, `=` padding), or `None`.
fn base64(text: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let (mut acc, mut bits, mut padding) = (0u32, 0u32, 0usize);
    for c in text.bytes().filter(|c| !c.is_ascii_whitespace()) {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            b'=' => {
                padding += 1;
                continue;
            }
            _ => return None,
        };
        if padding > 0 {
            return None;
        }
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    (padding <= 2).then_some(out)
}

/// Whether `der` is exactly one DER SEQUENCE (what a certificate is): the
/// structure only; the certificate itself is parsed when the provider's
/// client is built.
fn is_der_sequence(der: &[u8]) -> bool {
    let [0x30, first, rest @ ..] = der else {
        return false;
    };
    let (len, body) = if *first < 0x80 {
        (usize::from(*first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return false;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |len, b| (len << 8) | usize::from(*b));
        (len, &rest[n..])
    };
    len > 0 && body.len() == len
}

// === impl CaFile ===

impl fmt::Debug for CaFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CaFile")
            .field("path", &self.path)
            .field("bytes", &self.pem.len())
            .finish()
    }
}
