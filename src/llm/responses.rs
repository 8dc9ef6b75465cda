//! The Responses API (`POST {base}/responses`): request and reply types.

use super::client::WireApi;
use super::{AgentItem, AgentRequest, AgentTurn, ModelError, ModelReply, StructuredRequest, TokenUsage, ToolCall};
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub struct Responses;

#[derive(Serialize)]
struct Request<'a> {
    model: &'a str,
    instructions: &'a str,
    input: Vec<InputItem<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<TextConfig<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<Tool<'a>>,
    store: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning: Option<Reasoning<'a>>,
}

#[derive(Serialize)]
#[serde(untagged)]
enum InputItem<'a> {
    Message { role: &'static str, content: &'a str },
    Call { r#type: &'static str, call_id: &'a str, name: &'a str, arguments: &'a str },
    CustomCall { r#type: &'static str, call_id: &'a str, name: &'a str, input: &'a str },
    Output { r#type: &'static str, call_id: &'a str, output: &'a str },
}

#[derive(Serialize)]
struct TextConfig<'a> {
    format: JsonSchemaFormat<'a>,
}

#[derive(Serialize)]
struct JsonSchemaFormat<'a> {
    r#type: &'static str,
    name: &'a str,
    schema: &'a Value,
    strict: bool,
}

#[derive(Serialize)]
struct Tool<'a> {
    r#type: &'static str,
    name: &'a str,
    description: &'a str,
    parameters: &'a Value,
    strict: bool,
}

#[derive(Serialize)]
struct Reasoning<'a> {
    effort: &'a str,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Reply {
    output: Vec<OutputItem>,
    usage: Usage,
}

/// One output item; its fields depend on its type, so all are optional.
#[derive(Deserialize, Default)]
#[serde(default)]
struct OutputItem {
    r#type: String,
    content: Vec<ContentPart>,
    call_id: String,
    name: String,
    arguments: String,
    input: String,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ContentPart {
    r#type: String,
    text: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Usage {
    input_tokens: u64,
    output_tokens: u64,
}

fn reasoning(effort: &Option<String>) -> Option<Reasoning<'_>> {
    effort.as_deref().map(|effort| Reasoning { effort })
}

fn parse(body: &[u8]) -> Result<(Reply, TokenUsage), ModelError> {
    let reply: Reply = serde_json::from_slice(body)
        .map_err(|e| ModelError::permanent(format!("the Responses API's answer has an unexpected shape: {e}")))?;
    let usage =
        TokenUsage { input_tokens: reply.usage.input_tokens, output_tokens: reply.usage.output_tokens, calls: 1 };
    Ok((reply, usage))
}

impl WireApi for Responses {
    const NAME: &'static str = "responses";
    const PATH: &'static str = "responses";

    fn structured_body(req: &StructuredRequest) -> Value {
        let body = Request {
            model: &req.model,
            instructions: &req.instructions,
            input: vec![InputItem::Message { role: "user", content: &req.user_message }],
            text: Some(TextConfig {
                format: JsonSchemaFormat {
                    r#type: "json_schema",
                    name: &req.schema_name,
                    schema: &req.schema,
                    strict: true,
                },
            }),
            tools: Vec::new(),
            store: false,
            reasoning: reasoning(&req.reasoning_effort),
        };
        serde_json::to_value(body).expect("a request always serialises")
    }

    fn parse_structured(body: &[u8]) -> Result<ModelReply, ModelError> {
        let (reply, usage) = parse(body)?;
        let mut text = String::new();
        for part in reply.output.iter().flat_map(|item| &item.content) {
            match part.r#type.as_str() {
                "output_text" => text.push_str(part.text.as_deref().unwrap_or_default()),
                "refusal" => return Err(ModelError { usage, ..ModelError::permanent("the model refused to answer") }),
                _ => {}
            }
        }
        Ok(ModelReply { text, usage })
    }

    fn agent_body(req: &AgentRequest<'_>) -> Value {
        let input = req
            .items
            .iter()
            .map(|item| match item {
                AgentItem::User(text) => InputItem::Message { role: "user", content: text },
                AgentItem::Assistant(text) => InputItem::Message { role: "assistant", content: text },
                AgentItem::Call(c) if c.custom => InputItem::CustomCall {
                    r#type: "custom_tool_call",
                    call_id: &c.call_id,
                    name: &c.name,
                    input: &c.arguments,
                },
                AgentItem::Call(c) => InputItem::Call {
                    r#type: "function_call",
                    call_id: &c.call_id,
                    name: &c.name,
                    arguments: &c.arguments,
                },
                AgentItem::Output { call, output } => InputItem::Output {
                    r#type: if call.custom { "custom_tool_call_output" } else { "function_call_output" },
                    call_id: &call.call_id,
                    output,
                },
            })
            .collect();
        let tools = req
            .tools
            .iter()
            .map(|t| Tool {
                r#type: "function",
                name: t.name,
                description: t.description,
                parameters: &t.parameters,
                strict: false,
            })
            .collect();
        let body = Request {
            model: &req.model,
            instructions: &req.instructions,
            input,
            text: None,
            tools,
            store: false,
            reasoning: reasoning(&req.reasoning_effort),
        };
        serde_json::to_value(body).expect("a request always serialises")
    }

    fn parse_turn(body: &[u8]) -> Result<AgentTurn, ModelError> {
        let (reply, usage) = parse(body)?;
        let mut text = String::new();
        let mut calls = Vec::new();
        for item in reply.output {
            match item.r#type.as_str() {
                "function_call" => calls.push(ToolCall {
                    call_id: item.call_id,
                    name: item.name,
                    arguments: item.arguments,
                    custom: false,
                }),
                "custom_tool_call" => {
                    calls.push(ToolCall { call_id: item.call_id, name: item.name, arguments: item.input, custom: true })
                }
                "message" => {
                    item.content.iter().for_each(|part| text.push_str(part.text.as_deref().unwrap_or_default()))
                }
                _ => {}
            }
        }
        Ok(AgentTurn { text, calls, usage })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::ToolSpec;
    use serde_json::json;

    #[test]
    fn bodies_and_replies_have_the_responses_shape() {
        let req = StructuredRequest {
            model: "m".into(),
            instructions: "i".into(),
            user_message: "u".into(),
            schema_name: "s".into(),
            schema: json!({"type": "object"}),
            reasoning_effort: Some("low".into()),
        };
        assert_eq!(
            Responses::structured_body(&req),
            json!({"model": "m", "instructions": "i", "input": [{"role": "user", "content": "u"}],
                   "text": {"format": {"type": "json_schema", "name": "s", "schema": {"type": "object"}, "strict": true}},
                   "store": false, "reasoning": {"effort": "low"}})
        );
        let call = ToolCall { call_id: "c1".into(), name: "read_file".into(), arguments: "{}".into(), custom: false };
        let items = [
            AgentItem::User("go".into()),
            AgentItem::Call(call.clone()),
            AgentItem::Output { call, output: "ok".into() },
        ];
        let tools = [ToolSpec { name: "read_file", description: "d", parameters: json!({}) }];
        let body = Responses::agent_body(&AgentRequest {
            model: "m".into(),
            instructions: "i".into(),
            items: &items,
            tools: &tools,
            reasoning_effort: None,
        });
        assert_eq!(
            body["input"][1],
            json!({"type": "function_call", "call_id": "c1", "name": "read_file", "arguments": "{}"})
        );
        assert_eq!(body["input"][2], json!({"type": "function_call_output", "call_id": "c1", "output": "ok"}));
        assert_eq!(body["tools"][0]["strict"], false);
        assert!(body.get("reasoning").is_none());

        let reply = br#"{"output": [{"type": "reasoning", "summary": [1, 2.5]},
                                     {"type": "message", "content": [{"type": "output_text", "text": "{\"a\":1}"}]}],
                         "usage": {"input_tokens": 7, "output_tokens": 3}}"#;
        let parsed = Responses::parse_structured(reply).unwrap();
        assert_eq!((parsed.text.as_str(), parsed.usage.input_tokens, parsed.usage.output_tokens), ("{\"a\":1}", 7, 3));
        let refused = br#"{"output": [{"type": "message", "content": [{"type": "refusal", "refusal": "no"}]}]}"#;
        assert!(Responses::parse_structured(refused).unwrap_err().message.contains("refused"));
        let turn = Responses::parse_turn(
            br#"{"output": [{"type": "custom_tool_call", "call_id": "x", "name": "apply_patch", "input": "*** Begin Patch"}]}"#,
        )
        .unwrap();
        assert_eq!((turn.calls[0].custom, turn.calls[0].arguments.as_str()), (true, "*** Begin Patch"));
        assert!(Responses::parse_turn(b"[1]").is_err());
    }
}
