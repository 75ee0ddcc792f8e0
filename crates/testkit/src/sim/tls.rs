//! The TLS simulator (feature `tls`): a [`SimProvider`] behind TLS that
//! offers HTTP/2 and HTTP/1.1 by ALPN, with a certificate authority made at
//! run time ([`TestCerts`]) — so the gateway's path to real providers
//! (HTTPS, HTTP/2 multiplexing, pooled connections) is tested end to end.
//!
//! It counts what a test of connection reuse asserts on: TCP connections
//! accepted, TLS handshakes completed (and failed), and the HTTP version of
//! every request ([`Received::version`](super::Received::version)).
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use understudy_testkit::{Protocol, TlsSimProvider};
//!
//! let sim = TlsSimProvider::start(Protocol::ChatCompletions).await?;
//! // base_url = sim.base_url()  (https://127.0.0.1:PORT/v1)
//! // ca_file  = sim.ca_file()   (the test CA's PEM, written at start)
//! # Ok(()) }
//! ```

use std::fmt;
use std::io;
use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use hyper::server::conn::{http1, http2};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;

use super::{Protocol, Shared, SimProvider};

/// How long a client may take to finish its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// A certificate authority made at run time, and a server certificate it
/// signed for `localhost` and `127.0.0.1` (ECDSA P-256, with ring). Nothing
/// trusts the CA unless told to: its PEM is what a `ca_file` holds.
pub struct TestCerts {
    ca_pem: String,
    ca_der: CertificateDer<'static>,
    chain: Vec<CertificateDer<'static>>,
    key: PrivatePkcs8KeyDer<'static>,
}

/// What the TLS simulator offers.
#[derive(Debug, Clone)]
pub struct TlsOptions {
    /// Offer HTTP/2 by ALPN (`h2` before `http/1.1`); `false`: a provider
    /// that speaks HTTP/1.1 only.
    pub http2: bool,
    /// HTTP/2's `SETTINGS_MAX_CONCURRENT_STREAMS` (hyper's default: 200).
    pub max_concurrent_streams: Option<u32>,
}

/// A [`SimProvider`] behind TLS: scripted and inspected as any simulator
/// (it dereferences to one), with its base URL on `https://127.0.0.1`, the
/// test CA written to a file ([`Self::ca_file`]) and connection counters.
/// Stops, and removes the CA file, when dropped.
pub struct TlsSimProvider {
    sim: SimProvider,
    stats: Arc<TlsStats>,
    ca_pem: String,
    ca_file: PathBuf,
}

#[derive(Debug, Default)]
struct TlsStats {
    connections: AtomicUsize,
    handshakes: AtomicUsize,
    failed_handshakes: AtomicUsize,
}

// === impl TestCerts ===

impl TestCerts {
    /// A fresh CA and server certificate.
    pub fn generate() -> Result<Self, rcgen::Error> {
        use rcgen::{
            BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
            KeyPair, KeyUsagePurpose,
        };
        let ca_key = KeyPair::generate()?;
        let mut ca = CertificateParams::new(Vec::<String>::new())?;
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(DnType::CommonName, "Understudy test CA");
        ca.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca.self_signed(&ca_key)?;
        let issuer = Issuer::new(ca, ca_key);

        let key = KeyPair::generate()?;
        let mut leaf =
            CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])?;
        leaf.distinguished_name
            .push(DnType::CommonName, "understudy simulator");
        leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        leaf.use_authority_key_identifier_extension = true;
        let leaf_cert = leaf.signed_by(&key, &issuer)?;

        let ca_der = ca_cert.der().clone();
        Ok(Self {
            ca_pem: pem("CERTIFICATE", &ca_der),
            chain: vec![leaf_cert.der().clone(), ca_der.clone()],
            ca_der,
            key: PrivatePkcs8KeyDer::from(key.serialize_der()),
        })
    }

    /// The CA certificate, PEM-encoded (what a `ca_file` holds).
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// The CA certificate, DER-encoded.
    pub fn ca_der(&self) -> &CertificateDer<'static> {
        &self.ca_der
    }

    /// A server configuration presenting the signed certificate, offering
    /// these ALPN protocols (e.g. `[b"h2", b"http/1.1"]`).
    pub fn server_config(
        &self,
        alpn: &[&[u8]],
    ) -> Result<Arc<rustls::ServerConfig>, rustls::Error> {
        let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(
            self.chain.clone(),
            PrivateKeyDer::Pkcs8(self.key.clone_key()),
        )?;
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Ok(Arc::new(config))
    }

    /// A client configuration that trusts this CA only, asking for these
    /// ALPN protocols (for a client other than the gateway's: the bench's
    /// TLS relay).
    pub fn client_config(
        &self,
        alpn: &[&[u8]],
    ) -> Result<Arc<rustls::ClientConfig>, rustls::Error> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.ca_der.clone())?;
        let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Ok(Arc::new(config))
    }
}

impl fmt::Debug for TestCerts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TestCerts").finish_non_exhaustive()
    }
}

/// `der` as a PEM block of `label` (RFC 7468: base64, 64 columns).
fn pem(label: &str, der: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut b64 = String::with_capacity(der.len().div_ceil(3) * 4);
    for chunk in der.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                b64.push(char::from(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]));
            } else {
                b64.push('=');
            }
        }
    }
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(line));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

// === impl TlsOptions ===

impl Default for TlsOptions {
    fn default() -> Self {
        Self {
            http2: true,
            max_concurrent_streams: None,
        }
    }
}

// === impl TlsSimProvider ===

impl TlsSimProvider {
    /// Starts a simulator of `protocol` behind TLS, offering HTTP/2 and
    /// HTTP/1.1, on a free loopback port.
    pub async fn start(protocol: Protocol) -> io::Result<Self> {
        Self::start_with(protocol, TlsOptions::default()).await
    }

    /// As [`Self::start`], with these options.
    pub async fn start_with(protocol: Protocol, options: TlsOptions) -> io::Result<Self> {
        let certs = TestCerts::generate().map_err(io::Error::other)?;
        let alpn: &[&[u8]] = if options.http2 {
            &[b"h2", b"http/1.1"]
        } else {
            &[b"http/1.1"]
        };
        let acceptor = TlsAcceptor::from(certs.server_config(alpn).map_err(io::Error::other)?);
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let ca_file = std::env::temp_dir().join(format!(
            "understudy-sim-ca-{}-{}.pem",
            std::process::id(),
            addr.port()
        ));
        std::fs::write(&ca_file, certs.ca_pem())?;
        let shared = Shared::new(protocol, None)?;
        let stats = Arc::new(TlsStats::default());
        let (stop, stopped) = watch::channel(false);
        tokio::spawn(accept_loop(
            listener,
            Arc::clone(&shared),
            Arc::clone(&stats),
            acceptor,
            options,
            stopped,
        ));
        Ok(Self {
            sim: SimProvider {
                addr,
                shared,
                stop,
                scheme: "https",
            },
            stats,
            ca_pem: certs.ca_pem,
            ca_file,
        })
    }

    /// The simulator itself (also reached through `Deref`).
    pub fn sim(&self) -> &SimProvider {
        &self.sim
    }

    /// The test CA's certificate, PEM-encoded.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// A file holding [`Self::ca_pem`], for a provider's `ca_file`.
    pub fn ca_file(&self) -> &Path {
        &self.ca_file
    }

    /// TCP connections accepted so far.
    pub fn connections(&self) -> usize {
        self.stats.connections.load(Ordering::SeqCst)
    }

    /// TLS handshakes completed so far.
    pub fn handshakes(&self) -> usize {
        self.stats.handshakes.load(Ordering::SeqCst)
    }

    /// TLS handshakes that failed (the client refused the certificate,
    /// hung up, or took longer than 10 s).
    pub fn failed_handshakes(&self) -> usize {
        self.stats.failed_handshakes.load(Ordering::SeqCst)
    }

    /// The HTTP version of every request received so far, in order.
    pub fn versions(&self) -> Vec<hyper::Version> {
        self.sim.received().iter().map(|r| r.version).collect()
    }
}

impl Deref for TlsSimProvider {
    type Target = SimProvider;

    fn deref(&self) -> &SimProvider {
        &self.sim
    }
}

impl fmt::Debug for TlsSimProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsSimProvider")
            .field("sim", &self.sim)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl Drop for TlsSimProvider {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.ca_file);
    }
}

// === the server ===

async fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    stats: Arc<TlsStats>,
    acceptor: TlsAcceptor,
    options: TlsOptions,
    mut stopped: watch::Receiver<bool>,
) {
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(_) => continue,
            },
            _ = stopped.changed() => return,
        };
        let _ = stream.set_nodelay(true);
        stats.connections.fetch_add(1, Ordering::SeqCst);
        let shared = Arc::clone(&shared);
        let stats = Arc::clone(&stats);
        let acceptor = acceptor.clone();
        let options = options.clone();
        let mut stopped = stopped.clone();
        tokio::spawn(async move {
            shared.open_connections.fetch_add(1, Ordering::SeqCst);
            let serve = {
                let shared = Arc::clone(&shared);
                async move {
                    let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream))
                        .await
                    {
                        Ok(Ok(tls)) => tls,
                        _ => {
                            stats.failed_handshakes.fetch_add(1, Ordering::SeqCst);
                            return;
                        }
                    };
                    stats.handshakes.fetch_add(1, Ordering::SeqCst);
                    let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2".as_slice());
                    let service =
                        service_fn(move |req| super::server::serve(Arc::clone(&shared), req));
                    let io = TokioIo::new(tls);
                    if h2 {
                        let mut builder = http2::Builder::new(TokioExecutor::new());
                        if let Some(n) = options.max_concurrent_streams {
                            builder.max_concurrent_streams(n);
                        }
                        let _ = builder.serve_connection(io, service).await;
                    } else {
                        let _ = http1::Builder::new().serve_connection(io, service).await;
                    }
                }
            };
            tokio::select! {
                _ = serve => {}
                _ = stopped.changed() => {}
            }
            shared.open_connections.fetch_sub(1, Ordering::SeqCst);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::pem;

    #[test]
    fn pem_is_base64_in_64_columns() {
        assert_eq!(pem("X", b""), "-----BEGIN X-----\n-----END X-----\n");
        assert_eq!(
            pem("X", b"Man"),
            "-----BEGIN X-----\nTWFu\n-----END X-----\n"
        );
        assert_eq!(
            pem("X", b"Ma"),
            "-----BEGIN X-----\nTWE=\n-----END X-----\n"
        );
        assert_eq!(pem("X", b"M"), "-----BEGIN X-----\nTQ==\n-----END X-----\n");
        let long = pem("X", &[0u8; 60]);
        let lines: Vec<&str> = long.lines().collect();
        assert_eq!(lines.len(), 4);
        assert_eq!(lines[1].len(), 64);
        assert_eq!(lines[2], "A".repeat(16));
    }
}
