//! The estimator core: pure Rust, no web dependency, and no names. It takes values: a model
//! ([`model::ModelSpec`]: its input, capabilities and builder), the step's settings
//! ([`config::Setup`]) and the hardware ([`hardware::Gpu`], [`hardware::Link`]). A model is a tape
//! of ops with shapes ([`graph`], [`ops`]); one training step is replayed as PyTorch runs it
//! ([`simulate`]); the result is a timeline of live bytes by category and phase, its peak and a
//! breakdown ([`Estimate`]). Multi-GPU layouts are in [`parallel`]. Turning preset names into
//! these values is the plan layer's work (`crate::plan`).

pub mod allocator;
pub mod checkpoint;
pub mod config;
pub mod context;
pub mod decimal;
pub mod device;
pub mod error;
pub mod estimate;
pub mod graph;
pub mod hardware;
pub mod model;
pub mod model_init;
pub mod moe_parts;
pub mod ops;
pub mod optimizer;
pub mod parallel;
pub mod releases;
pub mod simulate;
pub mod step_stream;
pub mod stepwise;
pub mod timeline;
pub mod torchao_nf4;
pub mod tune;
pub mod units;

pub use estimate::{
    build_graph, estimate_graph, estimate_validated, segments_at_peak, Estimate, InferenceReport,
    LayerActivation, Row, MAX_ACCUMULATION, MAX_BATCH, MAX_RES, MAX_SEQ,
};
pub use stepwise::estimate;
