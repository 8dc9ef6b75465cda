//! Chat Completions (`POST {base}/chat/completions`, for vLLM, Ollama,
//! llama.cpp, LiteLLM): request and reply types.

use super::client::WireApi;
use super::{AgentItem, AgentRequest, AgentTurn, ModelError, ModelReply, StructuredRequest, TokenUsage, ToolCall};
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub struct ChatCompletions;

#[derive(Serialize)]
struct Request<'a> {
    model: &'a str,
    messages: Vec<Message<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_format: Option<ResponseFormat<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<Tool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_effort: Option<&'a str>,
}

#[derive(Serialize)]
#[serde(untagged)]
enum Message<'a> {
    Text { role: &'static str, content: &'a str },
    Calls { role: &'static str, content: Option<&'a str>, tool_calls: Vec<Call<'a>> },
    ToolOutput { role: &'static str, tool_call_id: &'a str, content: &'a str },
}

#[derive(Serialize)]
struct Call<'a> {
    id: &'a str,
    r#type: &'static str,
    function: CallFunction<'a>,
}

#[derive(Serialize)]
struct CallFunction<'a> {
    name: &'a str,
    arguments: &'a str,
}

#[derive(Serialize)]
struct ResponseFormat<'a> {
    r#type: &'static str,
    json_schema: JsonSchema<'a>,
}

#[derive(Serialize)]
struct JsonSchema<'a> {
    name: &'a str,
    schema: &'a Value,
    strict: bool,
}

#[derive(Serialize)]
struct Tool<'a> {
    r#type: &'static str,
    function: ToolFunction<'a>,
}

#[derive(Serialize)]
struct ToolFunction<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a Value,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Reply {
    choices: Vec<Choice>,
    usage: Usage,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Choice {
    message: ReplyMessage,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ReplyMessage {
    content: Option<String>,
    refusal: Option<String>,
    tool_calls: Option<Vec<ReplyCall>>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ReplyCall {
    id: String,
    function: ReplyFunction,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ReplyFunction {
    name: String,
    arguments: String,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Usage {
    prompt_tokens: u64,
    completion_tokens: u64,
}

/// The first choice's message and the call's usage.
fn parse(body: &[u8]) -> Result<(ReplyMessage, TokenUsage), ModelError> {
    let reply: Reply = serde_json::from_slice(body)
        .map_err(|e| ModelError::permanent(format!("the Chat Completions answer has an unexpected shape: {e}")))?;
    let usage =
        TokenUsage { input_tokens: reply.usage.prompt_tokens, output_tokens: reply.usage.completion_tokens, calls: 1 };
    Ok((reply.choices.into_iter().next().map(|c| c.message).unwrap_or_default(), usage))
}

impl WireApi for ChatCompletions {
    const NAME: &'static str = "chat_completions";
    const PATH: &'static str = "chat/completions";

    fn structured_body(req: &StructuredRequest) -> Value {
        let body = Request {
            model: &req.model,
            messages: vec![
                Message::Text { role: "system", content: &req.instructions },
                Message::Text { role: "user", content: &req.user_message },
            ],
            response_format: Some(ResponseFormat {
                r#type: "json_schema",
                json_schema: JsonSchema { name: &req.schema_name, schema: &req.schema, strict: true },
            }),
            tools: Vec::new(),
            reasoning_effort: req.reasoning_effort.as_deref(),
        };
        serde_json::to_value(body).expect("a request always serialises")
    }

    fn parse_structured(body: &[u8]) -> Result<ModelReply, ModelError> {
        let (message, usage) = parse(body)?;
        if message.refusal.is_some() {
            return Err(ModelError { usage, ..ModelError::permanent("the model refused to answer") });
        }
        Ok(ModelReply { text: message.content.unwrap_or_default(), usage })
    }

    fn agent_body(req: &AgentRequest<'_>) -> Value {
        let mut messages = vec![Message::Text { role: "system", content: &req.instructions }];
        for item in req.items {
            match item {
                AgentItem::User(text) => messages.push(Message::Text { role: "user", content: text }),
                AgentItem::Assistant(text) => messages.push(Message::Text { role: "assistant", content: text }),
                AgentItem::Call(c) => {
                    let call = Call {
                        id: &c.call_id,
                        r#type: "function",
                        function: CallFunction { name: &c.name, arguments: &c.arguments },
                    };
                    // Calls of one turn share one assistant message.
                    match messages.last_mut() {
                        Some(Message::Calls { tool_calls, .. }) => tool_calls.push(call),
                        _ => messages.push(Message::Calls { role: "assistant", content: None, tool_calls: vec![call] }),
                    }
                }
                AgentItem::Output { call, output } => {
                    messages.push(Message::ToolOutput { role: "tool", tool_call_id: &call.call_id, content: output })
                }
            }
        }
        let tools = req
            .tools
            .iter()
            .map(|t| Tool {
                r#type: "function",
                function: ToolFunction { name: t.name, description: t.description, parameters: &t.parameters },
            })
            .collect();
        let body = Request {
            model: &req.model,
            messages,
            response_format: None,
            tools,
            reasoning_effort: req.reasoning_effort.as_deref(),
        };
        serde_json::to_value(body).expect("a request always serialises")
    }

    fn parse_turn(body: &[u8]) -> Result<AgentTurn, ModelError> {
        let (message, usage) = parse(body)?;
        let calls = message
            .tool_calls
            .unwrap_or_default()
            .into_iter()
            .map(|c| ToolCall { call_id: c.id, name: c.function.name, arguments: c.function.arguments, custom: false })
            .collect();
        Ok(AgentTurn { text: message.content.unwrap_or_default(), calls, usage })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn bodies_and_replies_have_the_chat_shape() {
        let call = |id: &str| ToolCall {
            call_id: id.into(),
            name: "list_files".into(),
            arguments: "{}".into(),
            custom: false,
        };
        let items = [
            AgentItem::User("go".into()),
            AgentItem::Assistant("looking".into()),
            AgentItem::Call(call("a")),
            AgentItem::Call(call("b")),
            AgentItem::Output { call: call("a"), output: "x".into() },
        ];
        let body = ChatCompletions::agent_body(&AgentRequest {
            model: "m".into(),
            instructions: "sys".into(),
            items: &items,
            tools: &[],
            reasoning_effort: Some("high".into()),
        });
        let messages = body["messages"].as_array().unwrap();
        assert_eq!(messages[0], json!({"role": "system", "content": "sys"}));
        assert_eq!(messages[2], json!({"role": "assistant", "content": "looking"}));
        assert_eq!(messages[3]["content"], Value::Null);
        assert_eq!(messages[3]["tool_calls"].as_array().unwrap().len(), 2, "calls of one turn share a message");
        assert_eq!(messages[4], json!({"role": "tool", "tool_call_id": "a", "content": "x"}));
        assert_eq!(body["reasoning_effort"], "high");

        let reply = br#"{"choices": [{"message": {"role": "assistant", "content": null,
                          "tool_calls": [{"id": "t", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}]}}],
                         "usage": {"prompt_tokens": 5, "completion_tokens": 2}}"#;
        let turn = ChatCompletions::parse_turn(reply).unwrap();
        assert_eq!((turn.text.as_str(), turn.calls[0].name.as_str(), turn.usage.input_tokens), ("", "read_file", 5));
        let refused = br#"{"choices": [{"message": {"content": null, "refusal": "no"}}]}"#;
        assert!(ChatCompletions::parse_structured(refused).unwrap_err().message.contains("refused"));
    }
}
