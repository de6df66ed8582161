//! Models defined by a Hugging Face `config.json`.

use crate::estimator::config::BuildCtx;
use crate::estimator::error::EstimateError;
use crate::estimator::graph::Graph;

pub fn build_from_config(cfg: &serde_json::Value, _ctx: &BuildCtx) -> Result<Graph, EstimateError> {
    let mt = cfg.get("model_type").and_then(|v| v.as_str()).unwrap_or("<missing>");
    Err(EstimateError::BadHfConfig(format!("model_type '{mt}' is not supported yet")))
}
