//! Names to values: a preset id or a pasted `config.json` becomes a [`ModelSpec`], a GPU id a
//! [`Gpu`], link ids (or the GPU's defaults) the [`Links`] of a layout. The one place that looks
//! presets up by name.

use std::rc::Rc;

use super::lazy::{self, LazyModel};
use super::{Plan, PlanError};
use crate::estimator::error::EstimateError;
use crate::estimator::hardware::Gpu;
use crate::estimator::model::{Capabilities, InputKind, ModelSpec};
use crate::estimator::parallel::Links;
use crate::presets::models::{self, Family, ModelPreset};
use crate::presets::text::LoraChoice;
use crate::presets::{gpus, hf, links};

/// The sequence length a pasted `config.json` is estimated at when the plan gives none.
pub const CONFIG_DEFAULT_SEQ: u64 = 512;

/// What each family of presets supports.
fn capabilities(family: Family) -> Capabilities {
    Capabilities {
        language_model: family == Family::Language,
        inference: family != Family::Rnn,
        attention: matches!(family, Family::Language | Family::VisionTransformer),
    }
}

/// Builds behind the lazy seam; the plan layer checks [`lazy::ready_for`] before any build, so
/// code that is not there is reported as [`PlanError::CodeNotLoaded`] before the core runs.
fn deferred_build(
    m: LazyModel<'_>,
    ctx: &crate::estimator::config::BuildCtx,
) -> Result<crate::estimator::graph::Graph, EstimateError> {
    lazy::build(m, ctx).unwrap_or_else(|_| {
        Err(EstimateError::Unsupported(
            "the model's code has not been fetched".into(),
        ))
    })
}

/// The plan's model as a value: its pasted `config.json`, else its preset.
pub fn model(plan: &Plan) -> Result<ModelSpec, PlanError> {
    if let Some(cfg) = &plan.hf_config {
        let cfg = Rc::new(cfg.clone());
        return Ok(ModelSpec {
            label: plan.model.clone(),
            input: InputKind::Tokens {
                default_seq: CONFIG_DEFAULT_SEQ,
                max_seq: None,
            },
            caps: capabilities(Family::Language),
            build: Rc::new(move |ctx| deferred_build(LazyModel::Config(&cfg), ctx)),
        });
    }
    let preset =
        models::find(&plan.model).ok_or_else(|| PlanError::UnknownModel(plan.model.clone()))?;
    Ok(preset_spec(preset))
}

/// A preset as a value.
pub fn preset_spec(preset: &'static ModelPreset) -> ModelSpec {
    ModelSpec {
        label: preset.id.to_string(),
        input: preset.input,
        caps: capabilities(preset.family),
        build: match preset.build {
            Some(build) => Rc::new(build),
            None => Rc::new(move |ctx| deferred_build(LazyModel::Preset(preset), ctx)),
        },
    }
}

/// The LoRA targets the page offers for a plan's model (its pasted `config.json`, else its
/// preset): [`hf::lora_menu`]; empty for models LoRA is not modelled on (the estimate says why)
/// and for configs the reader refuses. It reads the config with the builders' code, past the
/// lazy seam: only the page's panels call it, a chunk fetched after the builders', so the code
/// it reaches stays out of the first load (in a chunk the two share).
pub fn lora_menu(model: &str, hf_config: Option<&serde_json::Value>) -> &'static [LoraChoice] {
    match (hf_config, models::find(model)) {
        (Some(cfg), _) => hf::lora_menu(cfg),
        (None, Some(p)) if p.family == Family::Language => {
            models::text_config(p.id).map_or(&[], |cfg| hf::lora_menu(&cfg))
        }
        _ => &[],
    }
}

/// A GPU by id (a preset, or `custom:<GiB>`).
pub fn gpu_by_id(id: &str) -> Result<Gpu, PlanError> {
    gpus::find(id).ok_or_else(|| PlanError::UnknownGpu(id.to_string()))
}

/// The plan's GPU, if it names one.
pub fn gpu(plan: &Plan) -> Result<Option<Gpu>, PlanError> {
    plan.gpu.as_deref().map(gpu_by_id).transpose()
}

/// The links of the plan's layout: those it names, else the GPU's defaults.
pub fn layout_links(plan: &Plan, gpu: Option<&Gpu>) -> Result<Links, PlanError> {
    let par = plan.parallel.as_ref();
    let named = |id: &Option<String>, kind: &'static str| -> Result<Option<_>, PlanError> {
        id.as_deref()
            .map(|id| {
                links::find(id).ok_or_else(|| PlanError::UnknownLink {
                    kind,
                    id: id.to_string(),
                    choices: format!(
                        "one of {}",
                        links::LINKS
                            .iter()
                            .map(|l| l.id)
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                })
            })
            .transpose()
    };
    let intra = named(&par.and_then(|p| p.intra_link.clone()), "intra-node")?;
    let inter = named(&par.and_then(|p| p.inter_link.clone()), "inter-node")?;
    let host = match plan.offload.as_ref().and_then(|o| o.link.as_deref()) {
        Some(id) => links::find_host(id, gpu).ok_or_else(|| PlanError::UnknownLink {
            kind: "host",
            id: id.to_string(),
            choices: "pcie4, pcie5, nvlink-c2c or unified".into(),
        })?,
        None => links::default_host(gpu),
    };
    Ok(Links {
        intra: intra.unwrap_or_else(|| links::default_intra(gpu)),
        inter: inter.unwrap_or_else(|| links::default_inter(gpu)),
        host,
    })
}
