//! memoryd: long-term memory for AI agents, as an HTTP service.

pub mod api;
pub mod app;
pub mod bench;
pub mod config;
pub mod domain;
pub mod ingest;
pub mod jobs;
pub mod llm;
pub mod metrics;
pub mod pipeline;
pub mod store;
pub mod tools;
pub mod workspace;

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
