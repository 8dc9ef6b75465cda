//! Pure domain rules: no I/O, no database, unit-tested against the R-rules.

pub mod citation;
pub mod diff;
pub mod events;
pub mod ids;
pub mod index;
pub mod job;
pub mod key_scope;
pub mod layout;
pub mod limits;
pub mod memory_edit;
pub mod memory_format;
pub mod memory_format_check;
pub mod memory_status;
pub mod page;
pub mod passages;
pub mod portability;
pub mod pyjson;
pub mod pytext;
pub mod redact;
pub mod redact_jsonl;
pub mod segment;
pub mod time;
pub mod usage;
