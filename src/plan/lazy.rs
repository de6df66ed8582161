//! Every model builder but the ResNets' (language models, pasted config.json files, ViTs, the
//! LSTM, the other CNNs) behind one seam, so that the page can fetch their code only when a plan
//! first needs it. A page built with the `lazy-chunks` feature keeps them, and the code that only they
//! reach (attention, LoRA and quantised linears, the config.json reader, depthwise and
//! transposed convolutions), in a WebAssembly chunk: the default plan is ResNet-50, so the first
//! load does without it. Once fetched, calls into the chunk run synchronously, so the estimator
//! stays synchronous. Every other build (native, the CLI, tests) links the builders directly and
//! is always ready. The catalogue ([`models::MODELS`]) marks a deferred preset by giving it no
//! builder of its own.

use super::Plan;
use crate::estimator::config::{BuildCtx, Setup};
use crate::estimator::error::EstimateError;
use crate::estimator::graph::Graph;
use crate::estimator::hardware::Gpu;
use crate::estimator::model::ModelSpec;
use crate::estimator::{self, Estimate};
use crate::presets::models::{self, Family};
use crate::presets::{cnn, hf, rnn, vit};
use crate::split::NotLoaded;

/// A model whose builder lives behind the seam.
#[derive(Clone, Copy)]
pub enum LazyModel<'a> {
    /// A preset whose catalogue entry has no builder of its own ([`models::ModelPreset::build`]).
    Preset(&'static models::ModelPreset),
    /// A pasted Hugging Face config.json.
    Config(&'a serde_json::Value),
}

fn build_now(m: LazyModel<'_>, ctx: &BuildCtx) -> Result<Graph, EstimateError> {
    let preset = match m {
        LazyModel::Config(cfg) => return hf::build_from_config(cfg, ctx),
        LazyModel::Preset(p) => p,
    };
    match (preset.family, preset.id) {
        (Family::Language, id) => models::text_preset(id, ctx),
        (_, "lstm-lm") => rnn::lstm_lm(ctx, rnn::LSTM_LM),
        (_, "vit_b_16") => vit::vit(ctx, vit::VIT_B_16),
        (_, "vit_l_16") => vit::vit(ctx, vit::VIT_L_16),
        (_, "mobilenet_v2") => cnn::mobilenet_v2(ctx),
        (_, "mobilenet_v3_small") => cnn::mobilenet_v3(ctx, false),
        (_, "mobilenet_v3_large") => cnn::mobilenet_v3(ctx, true),
        (_, "efficientnet_b0") => cnn::efficientnet_b0(ctx),
        (_, "vgg16") => cnn::vgg16(ctx),
        (_, "convnext_tiny") => cnn::convnext_tiny(ctx),
        (_, "plainconv128") => cnn::plainconv128(ctx),
        (_, "unet") => cnn::unet(ctx),
        (_, id) => Err(EstimateError::Unsupported(format!(
            "the preset {id} has no builder"
        ))),
    }
}

/// Whether a preset's builder is behind the seam: the catalogue gives it none of its own.
pub fn deferred(preset: &models::ModelPreset) -> bool {
    preset.build.is_none()
}

/// Whether building `plan` needs the code behind the seam (a validation pass's too).
pub fn needed_by(plan: &Plan) -> bool {
    plan.hf_config.is_some()
        || plan.validation_batch.is_some()
        || models::find(&plan.model).is_none_or(deferred)
}

/// Whether `plan` can be built now (its code is here).
pub fn ready_for(plan: &Plan) -> bool {
    loaded() || !needed_by(plan)
}

crate::lazy_chunk!(models, models_split, models_preload, fn run_op(Request<'_>) -> Answer);

/// What is asked of the code behind the seam.
#[derive(Clone, Copy)]
pub enum Request<'a> {
    /// A model to build, with its settings.
    Build(LazyModel<'a>, &'a BuildCtx),
    /// A training step with its validation pass ([`estimator::estimate_validated`]): rare, so
    /// its code waits with the builders instead of weighing on the first load.
    Validated(&'a ModelSpec, &'a Setup, Option<&'a Gpu>),
}

/// The answer to a [`Request`] of the same kind.
pub enum Answer {
    Graph(Result<Graph, EstimateError>),
    Estimate(Result<Estimate, EstimateError>),
}

fn run_op(r: Request<'_>) -> Answer {
    match r {
        Request::Build(m, ctx) => Answer::Graph(build_now(m, ctx)),
        Request::Validated(m, setup, gpu) => {
            Answer::Estimate(estimator::estimate_validated(m, setup, gpu))
        }
    }
}

/// Builds `m`; [`NotLoaded`] (never a wrong graph) if its code has not been fetched.
pub fn build(m: LazyModel<'_>, ctx: &BuildCtx) -> Result<Result<Graph, EstimateError>, NotLoaded> {
    match call(Request::Build(m, ctx))? {
        Answer::Graph(g) => Ok(g),
        Answer::Estimate(_) => Err(NotLoaded),
    }
}

/// [`estimator::estimate_validated`] behind the seam; [`NotLoaded`] if its code has not been
/// fetched.
pub fn estimate_validated(
    m: &ModelSpec,
    setup: &Setup,
    gpu: Option<&Gpu>,
) -> Result<Result<Estimate, EstimateError>, NotLoaded> {
    match call(Request::Validated(m, setup, gpu))? {
        Answer::Estimate(e) => Ok(e),
        Answer::Graph(_) => Err(NotLoaded),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_resnets_do_without_the_seam() {
        for m in models::MODELS {
            assert_eq!(
                needed_by(&Plan::new(m.id)),
                !m.id.contains("resnet"),
                "{}",
                m.id
            );
        }
        let mut pasted = Plan::new("resnet50");
        pasted.hf_config = Some(serde_json::json!({"model_type": "gpt2"}));
        assert!(needed_by(&pasted));
        assert!(needed_by(&Plan::new("no-such-model")));
        // Every deferred preset has a builder behind the seam (natively linked in: always ready).
        for m in models::MODELS.iter().filter(|m| deferred(m)) {
            let ctx = BuildCtx::new(2, 64, 128, crate::estimator::config::Precision::Fp32);
            assert!(
                build(LazyModel::Preset(m), &ctx).unwrap().is_ok(),
                "{}",
                m.id
            );
        }
        assert!(ready_for(&Plan::new("gpt2")));
    }
}
