//! Cloud platforms: where a provider's models are hosted when that is not
//! the protocol's own service — AWS Bedrock, Google Vertex AI, Azure
//! OpenAI (`kind = "bedrock" | "vertex" | "azure"`). Each adds its own
//! settings (a region, a project, an API version) and its own credentials,
//! resolved here from the file and the environment; the provider's adapter
//! reads the credential files and refreshes what expires.

use std::fmt;
use std::path::{Path, PathBuf};

use understudy_types::protocol::Protocol;

use super::secret::Secret;
use super::source::Env;

/// Where a provider's models are hosted.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Platform {
    /// The protocol's own service, or a server that speaks it.
    #[default]
    Direct,
    /// AWS Bedrock (`kind = "bedrock"`).
    Bedrock(Bedrock),
    /// Google Vertex AI (`kind = "vertex"`).
    Vertex(Vertex),
    /// Azure OpenAI (`kind = "azure"`).
    Azure(Azure),
}

/// A Bedrock provider's region and how its requests are signed.
#[derive(Clone, Debug, PartialEq)]
pub struct Bedrock {
    /// The AWS region (`region`, else `AWS_REGION`, else
    /// `AWS_DEFAULT_REGION`).
    pub region: String,
    /// Where the SigV4 credentials come from; `None` with a Bedrock API
    /// key (the provider's `api_key`, sent as a bearer) or with nothing
    /// found at all.
    pub credentials: Option<AwsCredentials>,
}

/// Where a Bedrock provider's AWS credentials come from.
#[derive(Clone, PartialEq)]
pub enum AwsCredentials {
    /// Keys given in the provider's table or in `AWS_ACCESS_KEY_ID`,
    /// `AWS_SECRET_ACCESS_KEY` (and `AWS_SESSION_TOKEN`).
    Keys {
        access_key_id: String,
        secret_access_key: Secret,
        session_token: Option<Secret>,
        /// `settings` or `environment`, for `understudy providers`.
        source: &'static str,
    },
    /// A profile of the shared credentials file (`aws_profile`, else
    /// `AWS_PROFILE`, else `default`; the file is
    /// `AWS_SHARED_CREDENTIALS_FILE`, else `~/.aws/credentials`), read by
    /// the provider and read again when it changes.
    Profile { file: PathBuf, profile: String },
}

/// A Vertex AI provider's project, region and credentials.
#[derive(Clone, Debug, PartialEq)]
pub struct Vertex {
    pub project: String,
    /// A region (`us-east5`) or `global`.
    pub region: String,
    /// A service-account JSON key (`credentials_file`, else
    /// `GOOGLE_APPLICATION_CREDENTIALS`); `None` with a static access
    /// token in `api_key`.
    pub credentials_file: Option<PathBuf>,
}

/// An Azure OpenAI provider's API shape.
#[derive(Clone, Debug, PartialEq)]
pub struct Azure {
    /// Set: the classic deployment URLs with `?api-version=`; unset: the
    /// v1 API (`/openai/v1/…`, the deployment name as the model).
    pub api_version: Option<String>,
    /// The key is a Microsoft Entra ID token, sent as a bearer
    /// (`auth = "entra"`), not in the `api-key` header.
    pub entra: bool,
}

/// What a provider table's `kind` names: a protocol, or a cloud platform
/// (which speaks one protocol or another per model).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Protocol(Protocol),
    Bedrock,
    Vertex,
    Azure,
}

impl<'de> serde::Deserialize<'de> for Kind {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        Ok(match name.as_str() {
            "bedrock" => Self::Bedrock,
            "vertex" => Self::Vertex,
            "azure" => Self::Azure,
            other => Self::Protocol(
                Protocol::KINDS
                    .into_iter()
                    .find(|p| p.as_str() == other)
                    .ok_or_else(|| {
                        serde::de::Error::custom(format!(
                            "unknown kind `{other}` (known: openai, responses, anthropic, gemini, bedrock, vertex, azure)"
                        ))
                    })?,
            ),
        })
    }
}

/// The cloud settings of a `[providers.NAME]` table, as the file wrote
/// them (the environment fills in the rest).
#[derive(Debug, Default, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCloud {
    /// Bedrock's or Vertex's region.
    pub region: Option<String>,
    /// Bedrock: the shared credentials file's profile.
    pub aws_profile: Option<String>,
    /// Bedrock: keys in the file (better in the environment).
    pub aws_access_key_id: Option<String>,
    pub aws_secret_access_key: Option<String>,
    pub aws_session_token: Option<String>,
    /// Vertex: the Google Cloud project.
    pub project: Option<String>,
    /// Vertex: a service-account JSON key.
    pub credentials_file: Option<PathBuf>,
    /// Azure: the classic API's version.
    pub api_version: Option<String>,
    /// Azure: `api-key` (the default) or `entra`.
    pub auth: Option<String>,
}

/// The keys of [`RawCloud`] and the kinds that take each.
const KEYS: [(&str, &[&str]); 9] = [
    ("region", &["bedrock", "vertex"]),
    ("aws_profile", &["bedrock"]),
    ("aws_access_key_id", &["bedrock"]),
    ("aws_secret_access_key", &["bedrock"]),
    ("aws_session_token", &["bedrock"]),
    ("project", &["vertex"]),
    ("credentials_file", &["vertex"]),
    ("api_version", &["azure"]),
    ("auth", &["azure"]),
];

impl RawCloud {
    /// The keys this table sets, by name.
    fn set(&self) -> [(&'static str, bool); 9] {
        let set = [
            self.region.is_some(),
            self.aws_profile.is_some(),
            self.aws_access_key_id.is_some(),
            self.aws_secret_access_key.is_some(),
            self.aws_session_token.is_some(),
            self.project.is_some(),
            self.credentials_file.is_some(),
            self.api_version.is_some(),
            self.auth.is_some(),
        ];
        std::array::from_fn(|i| (KEYS[i].0, set[i]))
    }

    /// A key set for a kind that does not take it, as `(key, kinds that do)`.
    pub fn misplaced(&self, kind: &str) -> Option<(&'static str, &'static [&'static str])> {
        self.set()
            .into_iter()
            .zip(KEYS)
            .find(|((_, set), (_, kinds))| *set && !kinds.contains(&kind))
            .map(|((key, _), (_, kinds))| (key, kinds))
    }
}

/// The environment a platform's settings are completed from.
pub(super) struct CloudEnv<'e, 'a> {
    pub env: &'e Env<'a>,
}

impl CloudEnv<'_, '_> {
    fn var(&self, name: &str) -> Option<String> {
        self.env
            .get(name)
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    }

    /// Bedrock's settings: `raw` completed from the environment. `bearer`:
    /// a Bedrock API key was found (no SigV4 credentials are then needed).
    pub fn bedrock(&self, raw: &RawCloud, bearer: bool) -> Result<Bedrock, (String, String)> {
        let region = raw
            .region
            .clone()
            .or_else(|| self.var("AWS_REGION"))
            .or_else(|| self.var("AWS_DEFAULT_REGION"))
            .ok_or_else(|| {
                (
                    "region".to_owned(),
                    "a bedrock provider needs a region (`region`, or AWS_REGION)".to_owned(),
                )
            })?;
        check_region(&region).map_err(|m| ("region".to_owned(), m))?;
        let table_keys = match (&raw.aws_access_key_id, &raw.aws_secret_access_key) {
            (Some(id), Some(secret)) => Some(AwsCredentials::Keys {
                access_key_id: id.trim().to_owned(),
                secret_access_key: Secret::new(secret.trim()),
                session_token: raw.aws_session_token.as_deref().map(Secret::new),
                source: "settings",
            }),
            (None, None) if raw.aws_session_token.is_none() => None,
            _ => {
                return Err((
                    "aws_access_key_id".to_owned(),
                    "`aws_access_key_id` and `aws_secret_access_key` go together (and `aws_session_token` with them)".to_owned(),
                ));
            }
        };
        if bearer && table_keys.is_some() {
            return Err((
                "aws_access_key_id".to_owned(),
                "a Bedrock API key and AWS keys cannot both be set; drop one".to_owned(),
            ));
        }
        let credentials = if bearer {
            None
        } else {
            table_keys.or_else(|| self.env_keys()).or_else(|| {
                let profile = raw
                    .aws_profile
                    .clone()
                    .or_else(|| self.var("AWS_PROFILE"))
                    .unwrap_or_else(|| "default".to_owned());
                self.shared_credentials_file()
                    .filter(|f| raw.aws_profile.is_some() || f.exists())
                    .map(|file| AwsCredentials::Profile { file, profile })
            })
        };
        Ok(Bedrock {
            region,
            credentials,
        })
    }

    fn env_keys(&self) -> Option<AwsCredentials> {
        Some(AwsCredentials::Keys {
            access_key_id: self.var("AWS_ACCESS_KEY_ID")?,
            secret_access_key: Secret::new(self.var("AWS_SECRET_ACCESS_KEY")?),
            session_token: self.var("AWS_SESSION_TOKEN").map(Secret::new),
            source: "environment",
        })
    }

    fn shared_credentials_file(&self) -> Option<PathBuf> {
        self.var("AWS_SHARED_CREDENTIALS_FILE")
            .map(PathBuf::from)
            .or_else(|| {
                self.var("HOME")
                    .map(|h| Path::new(&h).join(".aws/credentials"))
            })
    }

    /// Vertex's settings: `raw` completed from the environment. `token`:
    /// a static access token was given (no key file is then needed).
    pub fn vertex(&self, raw: &RawCloud, token: bool) -> Result<Vertex, (String, String)> {
        let project = raw
            .project
            .clone()
            .or_else(|| self.var("GOOGLE_CLOUD_PROJECT"))
            .ok_or_else(|| {
                (
                    "project".to_owned(),
                    "a vertex provider needs a project (`project`, or GOOGLE_CLOUD_PROJECT)"
                        .to_owned(),
                )
            })?;
        if project.is_empty()
            || !project
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b':')
        {
            return Err((
                "project".to_owned(),
                format!("`{project}` is not a Google Cloud project id"),
            ));
        }
        let region = raw
            .region
            .clone()
            .or_else(|| self.var("GOOGLE_CLOUD_LOCATION"))
            .ok_or_else(|| {
                (
                    "region".to_owned(),
                    "a vertex provider needs a region (`region`: `us-east5`, `global`…)".to_owned(),
                )
            })?;
        check_region(&region).map_err(|m| ("region".to_owned(), m))?;
        let credentials_file = match &raw.credentials_file {
            Some(path) => Some(path.clone()),
            None if token => None,
            None => self
                .var("GOOGLE_APPLICATION_CREDENTIALS")
                .map(PathBuf::from),
        };
        Ok(Vertex {
            project,
            region,
            credentials_file,
        })
    }

    /// Azure's settings.
    pub fn azure(raw: &RawCloud) -> Result<Azure, (String, String)> {
        let entra = match raw.auth.as_deref() {
            None | Some("api-key") => false,
            Some("entra") => true,
            Some(other) => {
                return Err((
                    "auth".to_owned(),
                    format!("`{other}` is not `api-key` or `entra`"),
                ));
            }
        };
        if let Some(v) = &raw.api_version {
            if v.is_empty() || !v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
                return Err((
                    "api_version".to_owned(),
                    format!("`{v}` is not an API version (`2024-10-21`)"),
                ));
            }
        }
        Ok(Azure {
            api_version: raw.api_version.clone(),
            entra,
        })
    }
}

/// A region name goes into a host name: lowercase letters, digits, `-`.
pub(super) fn check_region(region: &str) -> Result<(), String> {
    if region.is_empty()
        || !region
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        return Err(format!("`{region}` is not a region name"));
    }
    Ok(())
}

// === impl Platform ===

impl Platform {
    /// Its name as `kind` writes it (`direct` for none), and as
    /// `understudy providers` shows it.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Direct => "direct",
            Self::Bedrock(_) => "bedrock",
            Self::Vertex(_) => "vertex",
            Self::Azure(_) => "azure",
        }
    }

    /// The protocol a request for `model` speaks on this platform, when
    /// the platform decides it by the model (`None`: the provider's own).
    pub fn protocol_for(&self, model: &str) -> Option<Protocol> {
        match self {
            Self::Bedrock(_) => Some(bedrock_protocol(model)),
            Self::Vertex(_) => Some(vertex_protocol(model)),
            Self::Direct | Self::Azure(_) => None,
        }
    }

    /// The same platform in `region`, when it has regions (a pool key's
    /// own region); `false` when it has none.
    pub(super) fn set_region(&mut self, region: &str) -> bool {
        match self {
            Self::Bedrock(b) => b.region = region.to_owned(),
            Self::Vertex(v) => v.region = region.to_owned(),
            Self::Direct | Self::Azure(_) => return false,
        }
        true
    }

    /// The base URL a provider on this platform has unless its table sets
    /// one (`None`: it must set one).
    pub(super) fn default_base_url(&self) -> Option<String> {
        match self {
            Self::Bedrock(b) => Some(format!(
                "https://bedrock-runtime.{}.amazonaws.com",
                b.region
            )),
            Self::Vertex(v) if v.region == "global" => {
                Some("https://aiplatform.googleapis.com".to_owned())
            }
            Self::Vertex(v) => Some(format!("https://{}-aiplatform.googleapis.com", v.region)),
            Self::Direct | Self::Azure(_) => None,
        }
    }

    /// Where its credentials other than a key come from, when it has
    /// some: shown by `understudy providers` and served by `/v1/providers`
    /// and `/v1/status`, so never a secret nor a file's path (a path tells
    /// a client about the host; only the actor's log names the file).
    pub fn credentials_source(&self) -> Option<String> {
        match self {
            Self::Bedrock(Bedrock {
                credentials:
                    Some(AwsCredentials::Keys {
                        access_key_id,
                        source,
                        ..
                    }),
                ..
            }) => Some(format!(
                "AWS keys from the {source} ({})",
                shown_key_id(access_key_id)
            )),
            Self::Bedrock(Bedrock {
                credentials: Some(AwsCredentials::Profile { profile, .. }),
                ..
            }) => Some(format!("AWS profile `{profile}`")),
            Self::Vertex(Vertex {
                credentials_file: Some(_),
                ..
            }) => Some("service account key file".to_owned()),
            _ => None,
        }
    }

    /// Whether credentials were found for it (with `key`: the provider's
    /// `api_key`, a bearer on every platform).
    pub(super) fn has_credentials(&self, key: bool) -> bool {
        match self {
            Self::Bedrock(b) => key || b.credentials.is_some(),
            Self::Vertex(v) => key || v.credentials_file.is_some(),
            Self::Direct | Self::Azure(_) => key,
        }
    }
}

/// Bedrock: Claude through InvokeModel with the Messages body; every other
/// model through Converse, Bedrock's own shape. A model id, an
/// inference profile (`us.anthropic.…`) or an ARN naming one of
/// Anthropic's models is Claude; an application inference profile's ARN
/// names no model, and goes through Converse.
pub fn bedrock_protocol(model: &str) -> Protocol {
    let id = model.rsplit('/').next().unwrap_or(model);
    let claude = id.starts_with("anthropic.")
        || id
            .split_once('.')
            .is_some_and(|(_, rest)| rest.starts_with("anthropic."))
        || model.contains("anthropic.claude");
    if claude {
        Protocol::Messages
    } else {
        Protocol::Converse
    }
}

/// Vertex: Gemini through `generateContent`, Claude (and every other
/// partner model Vertex serves with Anthropic's body) through
/// `rawPredict`.
pub fn vertex_protocol(model: &str) -> Protocol {
    if model.starts_with("gemini") {
        Protocol::GenerateContent
    } else {
        Protocol::Messages
    }
}

impl fmt::Debug for AwsCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Keys {
                access_key_id,
                session_token,
                source,
                ..
            } => f
                .debug_struct("Keys")
                // The key id is not a secret (AWS prints it in errors and
                // logs), but only its first characters say which it is.
                .field("access_key_id", &shown_key_id(access_key_id))
                .field("secret_access_key", &"***")
                .field("session_token", &session_token.as_ref().map(|_| "***"))
                .field("source", source)
                .finish(),
            Self::Profile { file, profile } => f
                .debug_struct("Profile")
                .field("file", file)
                .field("profile", profile)
                .finish(),
        }
    }
}

/// An access key id as it is shown: its first four characters.
pub fn shown_key_id(id: &str) -> String {
    let head: String = id.chars().take(4).collect();
    format!("{head}…")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bedrock_protocols() {
        for claude in [
            "anthropic.claude-sonnet-4-5-20250929-v1:0",
            "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
            "global.anthropic.claude-haiku-4-5-20251001-v1:0",
            "arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude-3-7-sonnet-20250219-v1:0",
        ] {
            assert_eq!(bedrock_protocol(claude), Protocol::Messages, "{claude}");
        }
        for other in [
            "meta.llama3-1-8b-instruct-v1:0",
            "us.amazon.nova-pro-v1:0",
            "mistral.mistral-large-2407-v1:0",
            "arn:aws:bedrock:us-east-1:123456789012:application-inference-profile/jf2sje1c0jnb",
        ] {
            assert_eq!(bedrock_protocol(other), Protocol::Converse, "{other}");
        }
    }

    #[test]
    fn keys_debug_hides_the_secret() {
        let keys = AwsCredentials::Keys {
            access_key_id: "AKIDEXAMPLE".into(),
            secret_access_key: Secret::new("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"),
            session_token: Some(Secret::new("FQoGZXIvYXdzEXAMPLETOKEN")),
            source: "environment",
        };
        let shown = format!("{keys:?}");
        assert!(!shown.contains("wJalr") && !shown.contains("FQoG") && !shown.contains("AKIDEX"));
        assert!(shown.contains("AKID…"));
    }
}
