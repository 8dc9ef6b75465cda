//! The consolidation agent's tools.

pub mod apply_patch;
