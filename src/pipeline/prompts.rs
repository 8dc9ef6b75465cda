//! memoryd's own prompts, Markdown files embedded at build time, and the one
//! way they are filled in.

use crate::domain::pytext::py_strip;

pub const PHASE_ONE_SYSTEM: &str = include_str!("prompts/phase_one_system.md");
pub const PHASE_ONE_USER: &str = include_str!("prompts/phase_one_user.md");
pub const PHASE_TWO: &str = include_str!("prompts/phase_two.md");
pub const READ: &str = include_str!("prompts/read.md");
pub const READ_LIVE_UPDATE: &str = include_str!("prompts/read_live_update.md");
pub const READ_ONLY: &str = include_str!("prompts/read_only.md");
pub const READ_CITATIONS: &str = include_str!("prompts/read_citations.md");
const EXTRA_PROMPT_SECTION: &str = include_str!("prompts/extra_prompt_section.md");

/// Replaces each `{{ name }}` of `template` in one pass, so that text
/// inserted for one placeholder is never searched for another.
pub fn render(template: &str, values: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(template.len() + values.iter().map(|(_, v)| v.len()).sum::<usize>());
    let mut rest = template;
    while let Some(open) = rest.find("{{ ") {
        let after = &rest[open + 3..];
        let Some(close) = after.find(" }}") else {
            break;
        };
        let name = &after[..close];
        match values.iter().find(|(n, _)| *n == name) {
            Some((_, value)) => {
                out.push_str(&rest[..open]);
                out.push_str(value);
            }
            None => out.push_str(&rest[..open + 3 + close + 3]),
        }
        rest = &after[close + 3..];
    }
    out.push_str(rest);
    out
}

/// R-PR-5: nothing for a null or blank extra prompt, else the banner and the
/// stripped text.
pub fn extra_prompt_section(extra_prompt: Option<&str>) -> String {
    match extra_prompt.map(py_strip).filter(|e| !e.is_empty()) {
        Some(extra) => render(EXTRA_PROMPT_SECTION, &[("extra_prompt", extra)]),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_is_one_pass() {
        let out = render("a {{ x }} b {{ y }} c {{ z }}", &[("x", "{{ y }}"), ("y", "Y")]);
        assert_eq!(out, "a {{ y }} b Y c {{ z }}");
    }

    #[test]
    fn extra_prompt_section_is_empty_unless_set() {
        assert_eq!(extra_prompt_section(None), "");
        assert_eq!(extra_prompt_section(Some(" \n ")), "");
        let section = extra_prompt_section(Some("  Track the user's tea preferences.\n"));
        assert!(section.contains("DEVELOPER-SPECIFIC EXTRA GUIDANCE"));
        assert!(section.ends_with("Track the user's tea preferences.\n"));
    }

    #[test]
    fn every_placeholder_of_the_prompts_is_known() {
        for (template, names) in [
            (PHASE_ONE_SYSTEM, &["extra_prompt_section"][..]),
            (PHASE_ONE_USER, &["terminal_metadata_json", "rollout_contents"][..]),
            (PHASE_TWO, &["memory_root", "max_turns", "phase_two_input_selection", "extra_prompt_section"][..]),
            (READ, &["memory_dir", "memory_update_instructions", "memory_summary", "search_by_meaning"][..]),
            (READ_LIVE_UPDATE, &["memory_dir"][..]),
            (READ_CITATIONS, &["memory_dir"][..]),
        ] {
            let values: Vec<(&str, &str)> = names.iter().map(|n| (*n, "")).collect();
            assert!(!render(template, &values).contains("{{ "), "{names:?}");
        }
    }
}
