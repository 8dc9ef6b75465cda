//! Codex's memory citation block (SPEC §2.10): an answer that used memory
//! ends with `<oai-mem-citation>…<rollout_ids>\nid\n…</rollout_ids></oai-mem-citation>`;
//! the rollouts it names count as used.

use super::ids::RolloutId;
use serde_json::Value;
use std::collections::HashSet;

pub const CITATION_OPEN: &str = "<oai-mem-citation>";
pub const CITATION_CLOSE: &str = "</oai-mem-citation>";
/// The id lists a block may hold: Codex's, and its legacy name.
const ID_LISTS: [(&str, &str); 2] = [("<rollout_ids>", "</rollout_ids>"), ("<thread_ids>", "</thread_ids>")];

/// At most this many ids of a segment's citation blocks are read (SPEC §2.10).
pub const MAX_CITED_IDS: usize = 1000;

/// The rollout ids a segment's citations name, deduplicated in the order
/// they first appear, each id looked up once (in time linear in the text).
#[derive(Default)]
struct Cited {
    ids: Vec<RolloutId>,
    seen: HashSet<RolloutId>,
    /// Ids read so far, repeated ones included.
    read: usize,
}

impl Cited {
    fn full(&self) -> bool {
        self.read >= MAX_CITED_IDS
    }

    /// Reads the ids of every citation block of `text`, until [`MAX_CITED_IDS`]; text that
    /// is not a valid rollout id is skipped.
    fn read_blocks(&mut self, text: &str) {
        let mut rest = text;
        while let Some(open) = rest.find(CITATION_OPEN).filter(|_| !self.full()) {
            let block = &rest[open + CITATION_OPEN.len()..];
            let (inside, after) = match block.find(CITATION_CLOSE) {
                Some(close) => (&block[..close], &block[close + CITATION_CLOSE.len()..]),
                None => (block, ""),
            };
            for (start, end) in ID_LISTS {
                let Some(at) = inside.find(start) else { continue };
                let list = &inside[at + start.len()..];
                let list = list.find(end).map_or(list, |e| &list[..e]);
                let ids = list.split(|c: char| c.is_whitespace() || c == ',').filter_map(RolloutId::parse);
                for id in ids.take(MAX_CITED_IDS - self.read.min(MAX_CITED_IDS)) {
                    self.read += 1;
                    if self.seen.insert(id.clone()) {
                        self.ids.push(id);
                    }
                }
            }
            rest = after;
        }
    }
}

/// The rollout ids every citation block of `text` names, deduplicated in
/// the order they appear; text that is not a valid rollout id is skipped.
pub fn cited_rollout_ids(text: &str) -> Vec<RolloutId> {
    let mut cited = Cited::default();
    cited.read_blocks(text);
    cited.ids
}

/// The rollouts a segment cites: in its `final_output` and in the text of
/// its assistant messages. Looks no further than a string holding the
/// block's opening tag, so segments without one cost a substring search.
pub fn segment_citations(final_output: &Value, generated_items: &[Value]) -> Vec<RolloutId> {
    let mut texts: Vec<&str> = Vec::new();
    if let Value::String(text) = final_output {
        texts.push(text);
    }
    for item in generated_items.iter().filter(|i| i.get("role").and_then(Value::as_str) == Some("assistant")) {
        match item.get("content") {
            Some(Value::String(text)) => texts.push(text),
            Some(Value::Array(parts)) => texts.extend(parts.iter().filter_map(|p| p.get("text")?.as_str())),
            _ => {}
        }
    }
    let mut cited = Cited::default();
    for text in texts.into_iter().filter(|t| t.contains(CITATION_OPEN)) {
        cited.read_blocks(text);
    }
    cited.ids
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ids(found: Vec<RolloutId>) -> Vec<String> {
        found.into_iter().map(|r| r.as_str().to_owned()).collect()
    }

    #[test]
    fn the_block_names_its_rollouts() {
        let answer = "Pinned the runner.\n<oai-mem-citation>\n<citation_entries>\nMEMORY.md:3-5|note=[ci]\n</citation_entries>\n<rollout_ids>\nchat-1\nchat-2\nchat-1\n</rollout_ids>\n</oai-mem-citation>";
        assert_eq!(ids(cited_rollout_ids(answer)), ["chat-1", "chat-2"]);
        let legacy = "<oai-mem-citation><thread_ids>a, b ../x</thread_ids></oai-mem-citation>";
        assert_eq!(ids(cited_rollout_ids(legacy)), ["a", "b"]);
        assert!(cited_rollout_ids("<rollout_ids>chat-1</rollout_ids> outside a block").is_empty());
        assert_eq!(
            ids(cited_rollout_ids("<oai-mem-citation><rollout_ids>\nx\n")),
            ["x"],
            "an unclosed block at the end"
        );
    }

    #[test]
    fn a_segment_cites_from_its_answer_and_assistant_messages() {
        let block = |id: &str| format!("<oai-mem-citation><rollout_ids>{id}</rollout_ids></oai-mem-citation>");
        let items = vec![
            json!({"role": "assistant", "content": [{"type": "output_text", "text": block("from-parts")}]}),
            json!({"role": "assistant", "content": block("from-text")}),
            json!({"role": "user", "content": block("from-user")}),
            json!({"type": "function_call_output", "output": block("from-tool")}),
        ];
        let found = ids(segment_citations(&json!(block("from-final")), &items));
        assert_eq!(found, ["from-final", "from-parts", "from-text"]);
        assert!(segment_citations(&json!({"structured": true}), &[]).is_empty());
    }

    #[test]
    fn at_most_a_thousand_ids_are_read() {
        let many: Vec<String> = (0..60_000).map(|i| format!("r-{i}")).collect();
        let text = format!("<oai-mem-citation><rollout_ids>\n{}\n</rollout_ids></oai-mem-citation>", many.join("\n"));
        let found = cited_rollout_ids(&text);
        assert_eq!(found.len(), MAX_CITED_IDS);
        assert_eq!(found.last().unwrap().as_str(), "r-999");
        let repeated =
            format!("<oai-mem-citation><rollout_ids>{}</rollout_ids></oai-mem-citation>", "a b ".repeat(800));
        assert_eq!(ids(cited_rollout_ids(&(repeated + "<oai-mem-citation><rollout_ids>c</rollout_ids>"))), ["a", "b"]);
    }
}
