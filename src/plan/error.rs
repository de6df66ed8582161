//! What can go wrong between a user's plan and the core: a name that resolves to nothing, code
//! the page has not fetched yet, or the core's own refusal ([`EstimateError`]).

use thiserror::Error;

use crate::estimator::error::EstimateError;

#[derive(Debug, Error, Clone, PartialEq)]
pub enum PlanError {
    /// The core refused the resolved values.
    #[error(transparent)]
    Estimate(#[from] EstimateError),
    #[error("unknown model '{0}': pick one of the presets (`vram-planner models` lists them) or pass a Hugging Face config.json")]
    UnknownModel(String),
    #[error("unsupported combination: unknown GPU '{0}'")]
    UnknownGpu(String),
    /// A link id that names no link of its kind; `choices` lists those that do.
    #[error("invalid parallel layout: unknown {kind} link '{id}': use {choices}")]
    UnknownLink {
        kind: &'static str,
        id: String,
        choices: String,
    },
    /// The page fetches the code of every model but the ResNets on first use (see
    /// [`super::lazy`]); asked for one before that code arrived.
    /// Plan text that is not a plan: broken JSON, an unknown key, a value of the wrong type
    /// (serde_json's message names the line and column).
    #[error("invalid plan: {0}")]
    InvalidPlan(String),
    #[error("the code for this model has not been fetched yet: check the connection and pick the model again")]
    CodeNotLoaded,
    /// A large model being simulated in the background, a part per task (the page).
    #[error("the model is being simulated")]
    Simulating,
}

impl PlanError {
    /// The core's refusal, if that is what this is.
    pub fn estimate_error(&self) -> Option<&EstimateError> {
        match self {
            PlanError::Estimate(e) => Some(e),
            _ => None,
        }
    }
}
