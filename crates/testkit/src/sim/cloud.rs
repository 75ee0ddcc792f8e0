//! A cloud in front of a simulated protocol: Bedrock, Vertex AI and Azure
//! OpenAI serve the providers' own bodies behind their own auth, paths
//! and (Bedrock) framing. A [`Cloud`] checks what the cloud checks,
//! hands the protocol's simulator the request as the protocol's own
//! service would have received it, and dresses the answer as the cloud
//! sends it.

use super::{Received, SimBody};

/// A cloud's front: its rules and its dress.
pub trait Cloud: Send + Sync + 'static {
    /// The base URL's path (after `http://127.0.0.1:PORT`) a provider is
    /// configured with: empty where the cloud's paths start at the root.
    fn base_path(&self) -> String {
        String::new()
    }

    /// Answers `req` itself when it is for the cloud rather than the
    /// protocol (Vertex's token endpoint): `None` passes it on to
    /// [`Cloud::admit`]. A refusal counts as a violation; the request is
    /// not recorded by `received()`.
    fn serve(&self, req: &Received) -> Option<Result<hyper::Response<SimBody>, Box<Refused>>> {
        let _ = req;
        None
    }

    /// Answers `req` when it is the cloud's model lookup (the call a
    /// readiness probe makes: its own auth checked, a retired model's
    /// 404, a revoked key's refusal, in the cloud's shape); `None` passes
    /// it on. Counted by `SimProvider::lookups`, never recorded.
    fn lookup(&self, req: &Received) -> Option<Result<hyper::Response<SimBody>, Box<Refused>>> {
        let _ = req;
        None
    }

    /// Checks `req` against the cloud's rules: refused, the cloud's own
    /// error; admitted, the request in the protocol's own shape (path,
    /// body and headers as its service takes them).
    fn admit(&self, req: &Received) -> Result<Received, Box<Refused>>;

    /// The protocol's answer to the admitted request, as the cloud sends
    /// it to the original `req`.
    fn wrap(&self, req: &Received, answer: hyper::Response<SimBody>) -> hyper::Response<SimBody> {
        let _ = req;
        answer
    }
}

/// A request the cloud refused: its answer, and why (for
/// `SimProvider::violations`).
#[derive(Debug)]
pub struct Refused {
    pub response: hyper::Response<SimBody>,
    pub message: String,
}
