//! Anthropic's vocabulary for what a native body switches on at the
//! provider on the operator's key: the server tools (`web_search_*`,
//! `code_execution_*`, …) and the betas (`files-api-*`, `mcp-client-*`,
//! …), each as the [`Gated`] feature the operator must allow.

use understudy_types::passthrough::Gated;

/// The feature a server tool's `type` switches on (`web_search_20250305`
/// → web search); `None` for tools that run at the client or only search
/// the tools the client sent.
pub fn of_tool(kind: &str) -> Option<Gated> {
    let family = kind.trim_end_matches(|c: char| c.is_ascii_digit() || c == '_');
    match family {
        "web_search" => Some(Gated::WebSearch),
        "web_fetch" => Some(Gated::WebFetch),
        "code_execution" => Some(Gated::CodeExecution),
        "mcp_toolset" => Some(Gated::Mcp),
        _ => None,
    }
}

/// The feature an `anthropic-beta` value switches on.
pub fn of_beta(beta: &str) -> Option<Gated> {
    let beta = beta.trim();
    [
        ("web-fetch-", Gated::WebFetch),
        ("code-execution-", Gated::CodeExecution),
        ("mcp-client-", Gated::Mcp),
        ("files-api-", Gated::Files),
        ("skills-", Gated::Skills),
    ]
    .into_iter()
    .find(|(prefix, _)| beta.starts_with(prefix))
    .map(|(_, g)| g)
}

/// The features a request's `anthropic-beta` headers (every one of them,
/// each a comma-separated list) switch on.
pub fn of_beta_headers(headers: &http::HeaderMap) -> impl Iterator<Item = Gated> + '_ {
    headers
        .get_all(super::endpoint::BETA)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(of_beta)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tools_and_betas_map_to_their_feature() {
        let tools = [
            ("web_search_20250305", Some(Gated::WebSearch)),
            ("web_fetch_20250910", Some(Gated::WebFetch)),
            ("code_execution_20250825", Some(Gated::CodeExecution)),
            ("mcp_toolset", Some(Gated::Mcp)),
            // Client tools and tool search run nothing on the account.
            ("bash_20250124", None),
            ("text_editor_20250728", None),
            ("computer_20250124", None),
            ("tool_search_tool_regex_20251119", None),
            ("custom", None),
        ];
        for (kind, want) in tools {
            assert_eq!(of_tool(kind), want, "{kind}");
        }
        let betas = [
            ("mcp-client-2025-04-04", Some(Gated::Mcp)),
            ("code-execution-2025-08-25", Some(Gated::CodeExecution)),
            ("files-api-2025-04-14", Some(Gated::Files)),
            ("web-fetch-2025-09-10", Some(Gated::WebFetch)),
            ("skills-2025-10-02", Some(Gated::Skills)),
            // Claude Code's own.
            ("claude-code-20250219", None),
            ("interleaved-thinking-2025-05-14", None),
            ("context-management-2025-06-27", None),
            ("advanced-tool-use-2025-11-20", None),
            ("effort-2025-11-24", None),
        ];
        for (beta, want) in betas {
            assert_eq!(of_beta(beta), want, "{beta}");
        }
    }
}
