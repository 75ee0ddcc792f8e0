//! AWS Bedrock's Converse API (`/model/{id}/converse`) and ConverseStream
//! (`/converse-stream`): the one shape Bedrock gives every model that
//! chats, which the gateway speaks to the models that are not Anthropic's
//! (Llama, Mistral, Nova, …; Claude goes through InvokeModel with its own
//! Messages body). Both directions of the translation, no I/O.
//!
//! - The body (`request.rs`): `messages` of strictly alternating `user`
//!   and `assistant` turns whose content blocks are unions keyed by member
//!   name (`text`, `image`, `toolUse`, `toolResult`), a `system` list,
//!   `inferenceConfig` (`maxTokens`, `temperature` and `topP` in 0 to 1,
//!   `stopSequences`) and `toolConfig`. The model id goes in the path,
//!   never in the body.
//! - The answer (`response.rs`): `output.message.content`, `stopReason`,
//!   `usage`. A `stopReason` of `guardrail_intervened` or
//!   `content_filtered` comes on a 200 and is a refusal; the malformed
//!   ones are invalid output, never a plain stop.
//! - The stream (`stream.rs`): one event-stream message per event, named
//!   by `:event-type` (`messageStart`, `contentBlockStart`,
//!   `contentBlockDelta`, `contentBlockStop`, `messageStop`, `metadata`);
//!   the usage comes after `messageStop`, in `metadata`. Exceptions are the
//!   framing's to turn into failures (the provider's error table).
//!
//! Sources: the Converse and ConverseStream API references and the smithy
//! model's shapes.

pub mod request;
pub mod response;
pub mod stream;

#[cfg(test)]
mod tests;

use understudy_types::{Failure, FailureKind, FinishReason};

/// What a `stopReason` means: a finish, or the failure it is.
pub fn stop_reason(reason: Option<&str>) -> Result<FinishReason, Failure> {
    Ok(match reason {
        None | Some("end_turn" | "stop_sequence") => FinishReason::Stop,
        Some("tool_use") => FinishReason::ToolCalls,
        Some("max_tokens" | "model_context_window_exceeded") => FinishReason::Length,
        Some(reason @ ("guardrail_intervened" | "content_filtered")) => {
            return Err(Failure::new(
                FailureKind::ContentFilter,
                format!("Bedrock stopped the answer (stopReason {reason})"),
            ));
        }
        Some(reason @ ("malformed_model_output" | "malformed_tool_use")) => {
            return Err(Failure::new(
                FailureKind::InvalidOutput,
                format!("the model's output was malformed (stopReason {reason})"),
            ));
        }
        // The enum is open (AWS's SDKs keep values they do not know).
        Some(other) => FinishReason::Other(other.to_owned()),
    })
}
