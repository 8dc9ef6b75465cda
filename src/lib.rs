//! memoryd: long-term memory for AI agents, as an HTTP service.

pub mod api;
pub mod app;
pub mod config;
pub mod domain;
pub mod jobs;
pub mod llm;
pub mod pipeline;
pub mod store;
pub mod tools;
pub mod workspace;
