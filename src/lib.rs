//! memoryd: long-term memory for AI agents, as an HTTP service.

pub mod api;
pub mod app;
pub mod bench;
pub mod bucket;
pub mod config;
pub mod domain;
pub mod events;
pub mod fake_embeddings;
pub mod fake_model;
pub mod ingest;
pub mod jobs;
pub mod llm;
pub mod meaning;
pub mod metrics;
pub mod pipeline;
pub mod probe;
pub mod store;
pub mod tools;
pub mod workspace;

/// An error and every source under it: `outer: inner: innermost`.
pub fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// A small deterministic generator for the property and fuzz tests, so they
/// need no crate and replay the same cases every run.
#[cfg(test)]
pub(crate) mod test_rng {
    pub struct XorShift(pub u64);

    impl XorShift {
        pub fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
    }
}
