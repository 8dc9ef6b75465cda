//! What a rollout says, read without a model: its tasks (a run, with the
//! runs after it that correct, extend or complain about it), and in each
//! the user's own default-setting words, the failures and what worked after
//! them, the steps that worked, and the strings worth keeping verbatim.

use crate::domain::pytext::{py_splitlines, py_strip};
use serde_json::Value;

/// A quoted text is cut to this many characters.
const MAX_QUOTE_CHARS: usize = 300;
/// A task keeps at most this many of each kind of item.
const MAX_ITEMS: usize = 12;
/// Words a task's name and keywords never are.
const STOP_WORDS: [&str; 40] = [
    "the", "and", "for", "with", "this", "that", "from", "into", "please", "can", "you", "could", "would", "should",
    "what", "when", "how", "why", "are", "is", "was", "it's", "its", "our", "your", "my", "me", "we", "i", "a", "an",
    "to", "of", "in", "on", "it", "be", "do", "does", "i'm",
];
/// Verbs a request starts with: not what the task is about.
const REQUEST_VERBS: [&str; 21] = [
    "fix", "use", "write", "make", "add", "get", "set", "run", "help", "need", "want", "like", "show", "find",
    "create", "update", "prefer", "always", "never", "remember", "hate",
];
/// A follow-up's first word: the run goes on with the task before it.
const FOLLOW_UP_WORDS: [&str; 20] = [
    "no", "nope", "actually", "also", "and", "but", "instead", "still", "now", "ok", "okay", "thanks", "great", "wait",
    "that", "it", "this", "same", "again", "retry",
];
/// Phrases of a default that tell how the user's system is set up: facts as well.
const SETUP_PHRASES: [&str; 7] =
    [" we use ", " our ", " we're using ", " we deploy ", " we run ", " we build ", " we host "];
/// Words that say the last answer did not do.
const DISSATISFIED: [&str; 8] =
    ["doesn't work", "does not work", "didn't work", "still fail", "that's wrong", "not working", "broken", "wrong"];

/// Cuts `text` to one line of at most [`MAX_QUOTE_CHARS`] characters.
pub fn clip(text: &str) -> String {
    one_line(text, MAX_QUOTE_CHARS)
}

/// `text` as one line of at most `max` characters, its white space folded.
pub fn one_line(text: &str, max: usize) -> String {
    // The memory files use no bold (SPEC §3.1), whoever wrote the text.
    let folded = text.split_whitespace().collect::<Vec<_>>().join(" ").replace("**", "");
    match folded.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &folded[..cut]),
        None => folded,
    }
}

/// What kind of statement a user sentence is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Said {
    /// Who the user is: their name, role, team.
    Identity,
    /// A correction of what the agent did.
    Correction,
    /// A default: always, never, prefer, we use, don't.
    Default,
}

/// The kind of a user's sentence, if it sets something a later run should know.
pub fn statement_kind(sentence: &str) -> Option<Said> {
    let lower = format!(" {} ", sentence.to_lowercase());
    let has = |phrases: &[&str]| phrases.iter().any(|p| lower.contains(p));
    if has(&[
        " i am a ",
        " i'm a ",
        " i am an ",
        " i'm an ",
        " i'm the ",
        " my name is ",
        " call me ",
        " i work ",
        " my role ",
        " my team ",
    ]) {
        return Some(Said::Identity);
    }
    let first = lower.split_whitespace().next().unwrap_or("").trim_matches(|c: char| !c.is_alphanumeric());
    if ["no", "actually", "instead"].contains(&first) || has(&[" that's wrong", " that is wrong", " not what i "]) {
        return Some(Said::Correction);
    }
    let defaults = [
        " always ",
        " never ",
        " prefer ",
        " i'd rather ",
        " rather than ",
        " don't ",
        " do not ",
        " from now on ",
        " make sure ",
        " we use ",
        " we're using ",
        " i use ",
        " i like ",
        " i hate ",
        " i want ",
        " stop ",
        " instead of ",
        " use ",
        " we deploy ",
        " we run ",
        " we build ",
        " we host ",
        " we're on ",
        " we count ",
    ];
    has(&defaults).then_some(Said::Default)
}

/// The sentences of a text: split where `.`, `!` or `?` meet white space,
/// and at line ends (a path's or version's dots stay inside).
fn sentences(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let bytes = text.as_bytes();
    for (at, byte) in bytes.iter().enumerate() {
        let ends = *byte == b'\n'
            || (matches!(byte, b'.' | b'!' | b'?') && bytes.get(at + 1).is_none_or(|next| next.is_ascii_whitespace()));
        if ends {
            out.push(&text[start..=at]);
            start = at + 1;
        }
    }
    out.push(&text[start..]);
    out.into_iter().map(str::trim).filter(|s| s.split_whitespace().count() >= 2).collect()
}

/// One agent run of the rollout, as its segment tells it.
#[derive(Debug, Default)]
struct Turn {
    user: Vec<String>,
    assistant: Vec<String>,
    calls: Vec<(String, String, String)>,
    outputs: Vec<(String, String)>,
    state: String,
    exception: Option<String>,
    answer: Option<String>,
    updated_at: Option<String>,
}

fn message_text(item: &Value) -> Option<String> {
    let text = match &item["content"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect::<Vec<_>>().join("\n"),
        _ => return None,
    };
    (!py_strip(&text).is_empty()).then_some(text)
}

/// A call's command (or its most telling argument), for steps and references.
fn call_summary(item: &Value) -> String {
    let raw = item["arguments"].as_str().map(|a| serde_json::from_str::<Value>(a).unwrap_or(Value::String(a.into())));
    let arguments = raw.unwrap_or_else(|| item["action"].clone());
    for key in ["command", "cmd", "script", "code", "query", "path", "file", "url"] {
        match &arguments[key] {
            Value::String(s) if !s.trim().is_empty() => return clip(s),
            Value::Array(parts) => return clip(&parts.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(" ")),
            _ => {}
        }
    }
    match arguments {
        Value::Null => String::new(),
        Value::String(s) => clip(&s),
        other => clip(&other.to_string()),
    }
}

fn read_turn(segment: &Value) -> Turn {
    let mut turn = Turn::default();
    for item in segment["input"].as_array().into_iter().flatten().filter(|i| i["role"] == "user") {
        turn.user.extend(message_text(item));
    }
    for item in segment["generated_items"].as_array().into_iter().flatten() {
        let kind = item["type"].as_str().unwrap_or("");
        if item["role"] == "assistant" {
            turn.assistant.extend(message_text(item));
        } else if kind.ends_with("_output") {
            let output = match &item["output"] {
                Value::String(s) => s.clone(),
                Value::Null => String::new(),
                other => other.to_string(),
            };
            turn.outputs.push((item["call_id"].as_str().unwrap_or("").to_owned(), output));
        } else if kind.ends_with("_call") {
            let name = item["name"].as_str().unwrap_or(kind).to_owned();
            turn.calls.push((item["call_id"].as_str().unwrap_or("").to_owned(), name, call_summary(item)));
        }
    }
    let meta = &segment["terminal_metadata"];
    turn.state = meta["terminal_state"].as_str().unwrap_or("unknown").to_owned();
    if let Some(kind) = meta["exception_type"].as_str() {
        turn.exception = Some(clip(&format!("{kind}: {}", meta["exception_message"].as_str().unwrap_or(""))));
    }
    turn.answer = match &segment["final_output"] {
        Value::Null => None,
        Value::String(s) if py_strip(s).is_empty() => None,
        Value::String(s) => Some(clip(s)),
        other => Some(clip(&other.to_string())),
    };
    turn.updated_at = segment["updated_at"].as_str().map(str::to_owned);
    turn
}

/// A task's name: the request's first sentence that does not say who the
/// user is, cut to a heading's length.
fn task_name(request: &str) -> String {
    let sentence =
        sentences(request).into_iter().find(|s| statement_kind(s) != Some(Said::Identity)).unwrap_or(request);
    let name = sentence.trim_end_matches(['.', '!', '?']);
    match name.char_indices().nth(100) {
        Some((cut, _)) => format!("{}…", &name[..cut]),
        None => name.to_owned(),
    }
}

/// The project or workflow a task belongs to: the first two telling words
/// of its name (`billing-service`), else its slug.
pub fn task_group(name: &str) -> String {
    let words: Vec<String> = name
        .split(|c: char| !c.is_alphanumeric())
        .map(str::to_lowercase)
        .filter(|w| w.len() > 1 && !STOP_WORDS.contains(&w.as_str()) && !REQUEST_VERBS.contains(&w.as_str()))
        .take(2)
        .collect();
    if words.is_empty() { "conversations".into() } else { words.join("-") }
}

/// Whether a tool's output says it failed (an error, a failing exit code),
/// not counting a report of none (`0 failed`, `no errors`).
pub fn failed_output(output: &str) -> bool {
    let lower = output.to_lowercase();
    let markers =
        ["error", "exception", "traceback", "failed", "failure", "not found", "permission denied", "fatal", "panicked"];
    markers.iter().any(|marker| {
        lower.match_indices(marker).any(|(at, _)| {
            let before = lower[..at].trim_end();
            let last = before.rsplit(|c: char| c.is_whitespace()).next().unwrap_or("");
            !["0", "no", "without", "zero"].contains(&last)
        })
    })
}

/// One task of the rollout with what it teaches.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Task {
    /// The user's first request of the task, one line.
    pub request: String,
    /// What the task is: the request's first sentence that is not about who the user is.
    pub name: String,
    /// `Preference signals:` bullets: the user's own words, then what they imply.
    pub preferences: Vec<(Said, String)>,
    pub steps: Vec<String>,
    pub failures: Vec<String>,
    pub knowledge: Vec<String>,
    pub references: Vec<String>,
    pub keywords: Vec<String>,
    /// The tools the task called.
    pub tools: Vec<String>,
    pub outcome: &'static str,
    /// The terminal state of the task's last run.
    pub state: String,
    pub updated_at: Option<String>,
}

fn starts_a_task(turn: &Turn) -> bool {
    let Some(first) = turn.user.first() else { return false };
    let lower = first.to_lowercase();
    let word = lower.split_whitespace().next().unwrap_or("").trim_matches(|c: char| !c.is_alphanumeric());
    !(FOLLOW_UP_WORDS.contains(&word)
        || DISSATISFIED.iter().any(|d| lower.contains(d))
        || first.split_whitespace().count() <= 3)
}

/// The rollout's tasks, in order; none when it holds no request and no answer.
pub fn read_tasks(contents: &str) -> Vec<Task> {
    let turns: Vec<Turn> = py_splitlines(contents)
        .into_iter()
        .filter_map(|l| crate::domain::pyjson::loads(l).ok())
        .map(|s| read_turn(&s))
        .collect();
    let mut groups: Vec<Vec<&Turn>> = Vec::new();
    for turn in &turns {
        match groups.last_mut() {
            Some(group) if !starts_a_task(turn) => group.push(turn),
            _ => groups.push(vec![turn]),
        }
    }
    groups.iter().map(|g| task_of(g)).filter(|t| !t.request.is_empty()).collect()
}

fn push_unique(items: &mut Vec<String>, item: String) {
    if items.len() < MAX_ITEMS && !item.is_empty() && !items.contains(&item) {
        items.push(item);
    }
}

fn task_of(turns: &[&Turn]) -> Task {
    let mut task = Task::default();
    task.request = turns
        .iter()
        .flat_map(|t| &t.user)
        .next()
        .or(turns.iter().find_map(|t| t.answer.as_ref()))
        .map(|t| clip(t))
        .unwrap_or_default();
    task.name = task_name(&task.request);
    let mut unresolved = false;
    for (index, turn) in turns.iter().enumerate() {
        for text in &turn.user {
            user_statements(&mut task, text, index > 0);
        }
        unresolved |= turn_failures(&mut task, turn);
        for text in turn.user.iter().chain(&turn.assistant) {
            for code in inline_code(text) {
                push_unique(&mut task.references, format!("`{code}`"));
            }
        }
        if let Some(answer) = &turn.answer {
            push_unique(&mut task.references, format!("final answer: \"{answer}\""));
        }
        task.updated_at = turn.updated_at.clone().or(task.updated_at.take());
    }
    let last = turns.last().expect("a task has a run");
    task.state = last.state.clone();
    let complained = last.user.iter().any(|u| DISSATISFIED.iter().any(|d| u.to_lowercase().contains(d)));
    let progressed = turns.iter().any(|t| !t.assistant.is_empty() || t.answer.is_some() || !t.calls.is_empty());
    task.outcome = outcome(&last.state, unresolved || complained, progressed);
    task.keywords = keywords(&task);
    task
}

/// The four outcome words from the last run's state: an interrupted or
/// cancelled run is never a failure by itself (SPEC §3.1).
pub fn outcome(state: &str, trouble: bool, progressed: bool) -> &'static str {
    match state {
        "completed" if trouble => "partial",
        "completed" => "success",
        "interrupted" | "max_turns_exceeded" | "cancelled" if progressed => "partial",
        "interrupted" | "max_turns_exceeded" | "cancelled" => "uncertain",
        "failed" | "error" => "fail",
        _ => "uncertain",
    }
}

fn user_statements(task: &mut Task, text: &str, follow_up: bool) {
    for sentence in sentences(text) {
        let Some(kind) = statement_kind(sentence) else { continue };
        let quote = clip(sentence.trim_end_matches(['.', '!']));
        let when = if follow_up { "following up on the agent's answer" } else { "asking for this task" };
        let implies = match kind {
            Said::Identity => "who the user is; keep it in mind in later runs",
            Said::Correction => "a correction; do it this way by default in similar work",
            Said::Default => "a standing default for similar work",
        };
        let bullet = format!("when {when}, the user said: \"{quote}\" -> {implies}");
        if task.preferences.len() < MAX_ITEMS && !task.preferences.iter().any(|(_, b)| *b == bullet) {
            task.preferences.push((kind, bullet));
        }
        if matches!(kind, Said::Default)
            && SETUP_PHRASES.iter().any(|p| format!(" {} ", quote.to_lowercase()).contains(p))
        {
            push_unique(&mut task.knowledge, format!("the user's setup, in their words: \"{quote}\""));
        }
        if follow_up && DISSATISFIED.iter().any(|d| sentence.to_lowercase().contains(d)) {
            push_unique(
                &mut task.failures,
                format!("the user reported after an answer: \"{quote}\"; check the result before answering"),
            );
        }
    }
}

/// The run's failures and what worked after each; whether one was left unresolved.
fn turn_failures(task: &mut Task, turn: &Turn) -> bool {
    let name_of = |id: &str| {
        turn.calls.iter().find(|(c, ..)| c == id).map(|(_, n, s)| if s.is_empty() { n.clone() } else { s.clone() })
    };
    let tool_of = |id: &str| turn.calls.iter().find(|(c, ..)| c == id).map(|(_, n, _)| n.clone());
    let mut unresolved = false;
    for (at, (id, output)) in turn.outputs.iter().enumerate() {
        let call = name_of(id).unwrap_or_else(|| "a tool call".into());
        let tool = tool_of(id).unwrap_or_default();
        push_unique(&mut task.tools, tool.clone());
        if !failed_output(output) {
            push_unique(&mut task.steps, format!("{tool}: `{call}`"));
            push_unique(&mut task.references, format!("`{call}` ({tool})"));
            continue;
        }
        let error = clip(output);
        push_unique(&mut task.references, format!("`{call}` ({tool}) -> \"{error}\""));
        let fixed =
            turn.outputs[at + 1..].iter().find(|(_, o)| !failed_output(o)).map(|(id, o)| (name_of(id), clip(o)));
        match fixed {
            Some((then, result)) => {
                let then = then.unwrap_or_else(|| "the next call".into());
                push_unique(
                    &mut task.failures,
                    format!("`{call}` failed with \"{error}\"; what worked after: `{then}` (\"{result}\")"),
                );
                push_unique(&mut task.knowledge, format!("after `{call}` failed, `{then}` worked"));
            }
            None if turn.answer.is_some() && turn.state == "completed" => push_unique(
                &mut task.failures,
                format!(
                    "`{call}` failed with \"{error}\"; the run still completed (check whether its answer depended on it)"
                ),
            ),
            None => {
                unresolved = true;
                push_unique(
                    &mut task.failures,
                    format!("`{call}` failed with \"{error}\"; nothing after it worked in this run"),
                );
            }
        }
    }
    if let Some(exception) = &turn.exception {
        unresolved = true;
        push_unique(&mut task.failures, format!("the run ended {} with {exception}", turn.state));
        push_unique(&mut task.references, format!("error: {exception}"));
    }
    unresolved
}

/// The spans of text between single backquotes.
fn inline_code(text: &str) -> impl Iterator<Item = &str> {
    text.split('`').skip(1).step_by(2).map(str::trim).filter(|c| !c.is_empty() && c.len() <= 200 && !c.contains('\n'))
}

/// Tool names, error names, the task's telling words and the names its
/// commands and paths hold.
fn keywords(task: &Task) -> Vec<String> {
    let mut found: Vec<String> = Vec::new();
    let mut add = |word: &str| {
        let word = word.trim_matches(|c: char| !(c.is_alphanumeric() || c == '_' || c == '-' || c == '.' || c == '/'));
        let word = word.trim_end_matches('.');
        let lower = word.to_lowercase();
        let common = STOP_WORDS.contains(&lower.as_str()) || REQUEST_VERBS.contains(&lower.as_str());
        if word.len() > 2 && !common && found.len() < 10 && !found.iter().any(|f| f.to_lowercase() == lower) {
            found.push(word.to_owned());
        }
    };
    for tool in &task.tools {
        add(tool);
    }
    for reference in &task.references {
        if let Some(error) = reference.strip_prefix("error: ") {
            add(error.split(':').next().unwrap_or(""));
        }
    }
    for word in task.name.split_whitespace() {
        add(word);
    }
    for code in task.references.iter().filter_map(|r| r.strip_prefix('`')?.split('`').next()) {
        if let Some(first) = code.split_whitespace().next() {
            add(first);
        }
    }
    found
}
