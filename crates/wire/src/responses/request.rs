//! The Responses request body for a neutral request (translated clients):
//! messages as input items, tool calls and results as `function_call` /
//! `function_call_output` items, tools as function tools, `text.format`
//! from the response format, `store: false`.

use serde_json::{Value, json};
use understudy_types::{ChatRequest, Failure, Message, Part, ResponseFormat, Role, ToolChoice};

/// A Responses request built from the neutral one.
pub fn translate(
    request: &ChatRequest,
    model: &str,
    max_output_tokens: Option<u32>,
    stream: bool,
) -> Result<Value, Failure> {
    let mut input = Vec::with_capacity(request.messages.len());
    for m in &request.messages {
        input_items(m, &mut input);
    }
    let mut body = json!({"model": model, "input": input, "store": false});
    let set = |body: &mut Value, key: &str, value: Value| {
        if let Value::Object(o) = body {
            o.insert(key.to_owned(), value);
        }
    };
    if let Some(system) = &request.system {
        set(&mut body, "instructions", json!(system));
    }
    if let Some(n) = max_output_tokens {
        set(&mut body, "max_output_tokens", json!(n));
    }
    if let Some(t) = request.temperature {
        set(&mut body, "temperature", json!(t));
    }
    if let Some(p) = request.top_p {
        set(&mut body, "top_p", json!(p));
    }
    if let Some(user) = &request.user {
        set(&mut body, "user", json!(crate::fitted_user(user, 64)));
    }
    if !request.tools.is_empty() {
        let tools: Vec<Value> = request
            .tools
            .iter()
            .map(|t| {
                json!({
                    "type": "function",
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.parameters.clone().unwrap_or_else(|| json!({"type": "object", "properties": {}})),
                    "strict": t.strict.unwrap_or(false),
                })
            })
            .collect();
        set(&mut body, "tools", Value::Array(tools));
        if let Some(choice) = &request.tool_choice {
            let choice = match choice {
                ToolChoice::Auto => json!("auto"),
                ToolChoice::None => json!("none"),
                ToolChoice::Required => json!("required"),
                ToolChoice::Function(name) => json!({"type": "function", "name": name}),
            };
            set(&mut body, "tool_choice", choice);
        }
        if let Some(p) = request.parallel_tool_calls {
            set(&mut body, "parallel_tool_calls", json!(p));
        }
    }
    if let Some(format) = &request.response_format {
        let format = match format {
            ResponseFormat::Text => json!({"type": "text"}),
            ResponseFormat::JsonObject => json!({"type": "json_object"}),
            ResponseFormat::JsonSchema {
                name,
                schema,
                strict,
            } => json!({"type": "json_schema", "name": name, "schema": schema, "strict": strict}),
        };
        set(&mut body, "text", json!({"format": format}));
    }
    if stream {
        set(&mut body, "stream", json!(true));
    }
    Ok(body)
}

/// One neutral message as Responses input items.
fn input_items(m: &Message, out: &mut Vec<Value>) {
    match m.role {
        Role::Tool => out.push(json!({
            "type": "function_call_output",
            "call_id": m.tool_call_id.as_deref().unwrap_or_default(),
            "output": crate::text_of(m),
        })),
        Role::Assistant => {
            let text = crate::text_of(m);
            if !text.is_empty() {
                out.push(json!({"role": "assistant", "content": text}));
            }
            for call in &m.tool_calls {
                out.push(json!({
                    "type": "function_call",
                    "call_id": call.id,
                    "name": call.name,
                    "arguments": call.arguments,
                }));
            }
        }
        Role::User | Role::System => {
            let role = if m.role == Role::User {
                "user"
            } else {
                "system"
            };
            let content: Vec<Value> = m
                .content
                .iter()
                .map(|p| match p {
                    Part::Text { text } => json!({"type": "input_text", "text": text}),
                    Part::Image { url, detail } => json!({
                        "type": "input_image",
                        "image_url": url,
                        "detail": detail.as_deref().unwrap_or("auto"),
                    }),
                })
                .collect();
            out.push(json!({"role": role, "content": content}));
        }
    }
}
