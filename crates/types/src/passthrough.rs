//! What a client may switch on at a provider through the native
//! pass-through, on the operator's key.
//!
//! A body forwarded as the client wrote it can ask the provider to do
//! things on the operator's account that the gateway itself never does on a
//! client's behalf: fetch URLs (web search, web fetch, MCP servers), run
//! code (code execution, skills), or read files uploaded to the account
//! (the Files API). Each is a [`Gated`] feature: refused unless the
//! operator lists it in the provider's `passthrough` setting. Everything
//! else — Claude Code's betas (thinking, context management, effort, tool
//! search over the tools the client sent…) — passes as sent.
//!
//! A leaf: plain data, no I/O.

use std::fmt;

/// A feature the pass-through refuses unless the operator allows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Gated {
    /// Anthropic's `web_search_*` server tool.
    WebSearch,
    /// The `web_fetch_*` server tool, or a `web-fetch-*` beta.
    WebFetch,
    /// The `code_execution_*` server tool, a `code-execution-*` beta, or a
    /// `container`.
    CodeExecution,
    /// `mcp_servers`, the `mcp_toolset` tool, or an `mcp-client-*` beta.
    Mcp,
    /// Files uploaded to the account (`file` sources, a `files-api-*` beta).
    Files,
    /// Agent skills (a `skills-*` beta), which run in a container.
    Skills,
}

/// A set of [`Gated`] features.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct GatedSet(u8);

impl Gated {
    /// Every gated feature, in the order errors name them.
    pub const ALL: [Gated; 6] = [
        Gated::WebSearch,
        Gated::WebFetch,
        Gated::CodeExecution,
        Gated::Mcp,
        Gated::Files,
        Gated::Skills,
    ];

    /// The name the `passthrough` setting uses.
    pub fn name(self) -> &'static str {
        match self {
            Gated::WebSearch => "web_search",
            Gated::WebFetch => "web_fetch",
            Gated::CodeExecution => "code_execution",
            Gated::Mcp => "mcp",
            Gated::Files => "files",
            Gated::Skills => "skills",
        }
    }

    /// What a target that does not allow it lacks, for the `unsupported`
    /// attempt and the 400 that names the setting.
    pub fn refusal(self) -> &'static str {
        match self {
            Gated::WebSearch => {
                "the operator's permission for the web search server tool, which fetches URLs on the gateway's key (add \"web_search\" to the provider's `passthrough` setting)"
            }
            Gated::WebFetch => {
                "the operator's permission for web fetch, which fetches URLs on the gateway's key (add \"web_fetch\" to the provider's `passthrough` setting)"
            }
            Gated::CodeExecution => {
                "the operator's permission for code execution on the gateway's key (add \"code_execution\" to the provider's `passthrough` setting)"
            }
            Gated::Mcp => {
                "the operator's permission for MCP servers, which the provider calls on the gateway's key (add \"mcp\" to the provider's `passthrough` setting)"
            }
            Gated::Files => {
                "the operator's permission for files stored on the gateway's account (add \"files\" to the provider's `passthrough` setting)"
            }
            Gated::Skills => {
                "the operator's permission for agent skills, which run code on the gateway's key (add \"skills\" to the provider's `passthrough` setting)"
            }
        }
    }

    /// The feature a `passthrough` entry names.
    pub fn parse(name: &str) -> Option<Gated> {
        Gated::ALL.into_iter().find(|g| g.name() == name)
    }

    fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

impl fmt::Display for Gated {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl GatedSet {
    /// No feature.
    pub const NONE: GatedSet = GatedSet(0);

    pub fn insert(&mut self, g: Gated) {
        self.0 |= g.bit();
    }

    pub fn contains(self, g: Gated) -> bool {
        self.0 & g.bit() != 0
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The first feature of `self` that `allowed` lacks.
    pub fn first_outside(self, allowed: GatedSet) -> Option<Gated> {
        Gated::ALL
            .into_iter()
            .find(|g| self.contains(*g) && !allowed.contains(*g))
    }
}

impl FromIterator<Gated> for GatedSet {
    fn from_iter<I: IntoIterator<Item = Gated>>(iter: I) -> Self {
        let mut set = GatedSet::NONE;
        for g in iter {
            set.insert(g);
        }
        set
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_sets_find_the_first_refused() {
        for g in Gated::ALL {
            assert_eq!(Gated::parse(g.name()), Some(g));
        }
        let used: GatedSet = [Gated::Mcp, Gated::WebSearch].into_iter().collect();
        assert_eq!(used.first_outside(GatedSet::NONE), Some(Gated::WebSearch));
        let allowed: GatedSet = [Gated::WebSearch].into_iter().collect();
        assert_eq!(used.first_outside(allowed), Some(Gated::Mcp));
        assert_eq!(used.first_outside(used), None);
    }
}
