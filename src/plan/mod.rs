//! The plan layer: between what a user names and what the core computes. A [`Plan`] names its
//! model, GPU and links; [`resolve`] turns those names into values (presets from
//! `crate::presets`, a pasted `config.json`), [`lazy`] fetches the page's model code on first
//! use, and the drivers here run the core for the page and the CLI: one estimate
//! ([`estimate`]), a multi-GPU layout ([`estimate_parallel`]), sweeps over batch, resolution and
//! sequence ([`sweep`]), what fits a GPU ([`fit`]) and the cheapest layouts ([`search`]).
//!
//! ```
//! use vram_planner::plan::{estimate, Plan};
//! let mut plan = Plan::new("resnet18");
//! plan.batch = 8;
//! let e = estimate(&plan).unwrap();
//! assert!(e.peak_allocated.gib() > 0.1);
//! ```

pub mod error;
pub mod fit;
pub mod lazy;
pub mod resolve;
pub mod search;
pub mod spec;
pub mod sweep;

pub use error::PlanError;
pub use spec::{parse_json, Plan, MAX_PLAN_TEXT};

use crate::estimator::graph::Graph;
use crate::estimator::parallel::{self, Layout, ParallelEstimate, Prepared};
use crate::estimator::Estimate;

/// Refuses a plan whose model code the page has not fetched yet.
fn ensure_loaded(plan: &Plan) -> Result<(), PlanError> {
    if lazy::ready_for(plan) {
        Ok(())
    } else {
        Err(PlanError::CodeNotLoaded)
    }
}

/// Validates the plan and builds its model's forward tape (inference: the prefill's).
pub fn build_graph(plan: &Plan) -> Result<Graph, PlanError> {
    let model = resolve::model(plan)?;
    ensure_loaded(plan)?;
    Ok(crate::estimator::build_graph(&model, &plan.setup())?)
}

/// The caching allocator's segments when `plan`'s allocated bytes peak (see
/// [`crate::estimator::segments_at_peak`]).
pub fn segments_at_peak(
    plan: &Plan,
) -> Result<Vec<crate::estimator::allocator::SegmentView>, PlanError> {
    let model = resolve::model(plan)?;
    ensure_loaded(plan)?;
    let gpu = resolve::gpu(plan)?;
    Ok(crate::estimator::segments_at_peak(
        &model,
        &plan.setup(),
        gpu.as_ref(),
    )?)
}

/// Estimates one step of `plan` on its GPU (see [`crate::estimator::estimate`]).
pub fn estimate(plan: &Plan) -> Result<Estimate, PlanError> {
    let model = resolve::model(plan)?;
    ensure_loaded(plan)?;
    let gpu = resolve::gpu(plan)?;
    let setup = plan.setup();
    if plan.validation_batch.is_some() {
        let e = lazy::estimate_validated(&model, &setup, gpu.as_ref())
            .map_err(|_| PlanError::CodeNotLoaded)?;
        return Ok(e?);
    }
    Ok(crate::estimator::estimate(&model, &setup, gpu.as_ref())?)
}

/// [`estimate`] a slice of work at a time ([`crate::estimator::stepwise`]): the planner page's
/// background work runs a slice per task. A plan with a validation pass is estimated whole in
/// its one slice; one whose names do not resolve answers their error in its first.
pub struct EstimateSteps(Steps);

enum Steps {
    Slices(Box<crate::estimator::stepwise::Stepwise>),
    Whole(Box<Plan>),
    Failed(PlanError),
    Done,
}

impl EstimateSteps {
    pub fn new(plan: &Plan) -> EstimateSteps {
        if plan.validation_batch.is_some() {
            return EstimateSteps(Steps::Whole(Box::new(plan.clone())));
        }
        // Resolved in the order `estimate` resolves, so a plan fails with the same error.
        let sliced = || -> Result<_, PlanError> {
            let model = resolve::model(plan)?;
            ensure_loaded(plan)?;
            let gpu = resolve::gpu(plan)?;
            Ok(Box::new(crate::estimator::stepwise::Stepwise::new(
                &model,
                &plan.setup(),
                gpu.as_ref(),
            )))
        };
        EstimateSteps(match sliced() {
            Ok(s) => Steps::Slices(s),
            Err(e) => Steps::Failed(e),
        })
    }

    /// Runs the next slice; the estimate once the last one has run (then `None`).
    pub fn step(&mut self) -> Option<Result<Estimate, PlanError>> {
        match std::mem::replace(&mut self.0, Steps::Done) {
            Steps::Slices(mut s) => {
                let r = s.step();
                if r.is_none() {
                    self.0 = Steps::Slices(s);
                }
                r.map(|r| r.map_err(PlanError::from))
            }
            Steps::Whole(plan) => Some(estimate(&plan)),
            Steps::Failed(e) => Some(Err(e)),
            Steps::Done => None,
        }
    }
}

/// The plan's multi-GPU layout, validated, its GPU and links resolved.
pub fn layout(plan: &Plan) -> Result<Layout, PlanError> {
    let gpu = resolve::gpu(plan)?;
    let links = resolve::layout_links(plan, gpu.as_ref())?;
    Ok(Layout::resolve(&plan.setup(), links)?)
}

/// Builds, cuts and simulates `plan`'s model for `layout` (shared by layouts that differ only
/// in dp, ZeRO stage or links).
pub fn prepare(plan: &Plan, layout: &Layout) -> Result<Prepared, PlanError> {
    prepare_reusing(plan, layout, None)
}

/// [`prepare`] with the step's allocator overhead already known ([`parallel::prepare_reusing`]).
pub fn prepare_reusing(
    plan: &Plan,
    layout: &Layout,
    overhead: Option<u64>,
) -> Result<Prepared, PlanError> {
    let model = resolve::model(plan)?;
    ensure_loaded(plan)?;
    Ok(parallel::prepare_reusing(
        &model,
        &plan.setup(),
        layout,
        overhead,
    )?)
}

/// `plan`'s model built for `layout` before it is cut into pieces
/// ([`parallel::layout_graph`]), with the model's label.
pub fn layout_graph(plan: &Plan, layout: &Layout) -> Result<(String, Graph), PlanError> {
    let model = resolve::model(plan)?;
    ensure_loaded(plan)?;
    let g = parallel::layout_graph(&model, &plan.setup(), layout)?;
    Ok((model.label.clone(), g))
}

/// Estimates `plan` on its multi-GPU layout (its `parallel` and `offload` keys).
pub fn estimate_parallel(plan: &Plan) -> Result<ParallelEstimate, PlanError> {
    let model = resolve::model(plan)?;
    ensure_loaded(plan)?;
    let gpu = resolve::gpu(plan)?;
    let links = resolve::layout_links(plan, gpu.as_ref())?;
    let setup = plan.setup();
    Ok(parallel::estimate_parallel_with(
        &setup,
        gpu.as_ref(),
        links,
        |layout| parallel::prepare(&model, &setup, layout),
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ViT's chart shows its twelve encoder blocks, not one "encoder" bar.
    #[test]
    fn vit_layers_group_into_its_encoder_blocks() {
        let e = estimate(&Plan {
            model: "vit_b_16".into(),
            ..Plan::default()
        })
        .unwrap();
        assert_eq!(
            e.layers
                .iter()
                .filter(|l| l.layer.starts_with("encoder.layers."))
                .count(),
            12
        );
    }
}
