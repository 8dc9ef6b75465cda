//! The memory pipeline: phase one (extraction per rollout) and its prompts.

pub mod extractive;
pub mod phase_one;
pub mod prompts;
pub mod read;
pub mod selection;
pub mod truncate;
