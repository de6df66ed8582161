//! Errors a user can act on. Every way an estimate of given values can fail is one variant with
//! its remedy; failures to resolve a name (a model, a GPU, a link) are the plan layer's
//! (`crate::plan::PlanError`).

use thiserror::Error;

#[derive(Debug, Error, Clone, PartialEq)]
pub enum EstimateError {
    #[error("{field} must be at least {min}, got {got}")]
    TooSmall {
        field: &'static str,
        min: u64,
        got: u64,
    },
    #[error("{field} = {got} is above the supported limit of {max}")]
    TooBig {
        field: &'static str,
        max: u64,
        got: u64,
    },
    #[error("the sizes overflow 64-bit byte counts (more than 16 EiB): reduce batch, resolution or sequence length")]
    TooLarge,
    #[error("model '{model}' needs {what}; set it in the plan")]
    Missing { model: String, what: &'static str },
    #[error("resolution {res} is too small for {model}: its feature map shrinks to zero (use at least {min})")]
    ResolutionTooSmall { model: String, res: u64, min: u64 },
    #[error("sequence length {seq} exceeds {model}'s {max} positions")]
    SequenceTooLong { model: String, seq: u64, max: u64 },
    #[error("unsupported config.json: {0}")]
    BadHfConfig(String),
    #[error("unsupported combination: {0}")]
    Unsupported(String),
    #[error("PYTORCH_CUDA_ALLOC_CONF: {0}")]
    AllocConf(#[from] super::allocator::SettingsError),
    /// A multi-GPU layout that cannot run (see `estimator::parallel`).
    #[error("invalid parallel layout: {0}")]
    BadLayout(String),
}
