//! The page's components and the shared [`Planner`] state they read and write.

use leptos::prelude::*;

use super::chart::BatchChartView;
use super::state;
use crate::estimator::config::Plan;
use crate::estimator::error::EstimateError;
use crate::estimator::sweep::{sweep, Axis, Point};
use crate::estimator::{estimate, Estimate};

/// The plan the user edits and what the estimator derives from it. `Copy`: components take it by
/// value.
#[derive(Clone, Copy)]
pub struct Planner {
    pub plan: RwSignal<Plan>,
    /// The estimate of the current plan; recomputed only when the plan changes.
    pub estimate: Memo<Result<Estimate, EstimateError>>,
    /// The batch chart's sweep; recomputed only when something other than the batch changes.
    pub batch_sweep: Memo<Vec<Point>>,
}

impl Planner {
    pub fn new(initial: Plan) -> Self {
        let plan = RwSignal::new(initial);
        // An `Estimate` (with its timeline) has no cheap equality; its input already changed
        // when this runs, so every new value counts as a change.
        let estimate = Memo::new_with_compare(move |_| plan.with(estimate), |_, _| true);
        let base = Memo::new(move |_| plan.with(state::sweep_base));
        let batch_sweep = Memo::new_with_compare(move |_| base.with(|b| sweep(b, Axis::Batch, &state::chart_batches())), |_, _| true);
        Planner { plan, estimate, batch_sweep }
    }
}

/// The whole page.
#[component]
pub fn App() -> impl IntoView {
    let planner = Planner::new(state::initial_plan());
    view! {
        <header class="masthead">
            <h1>"VRAM Planner"</h1>
            <p class="tagline">"GPU memory of one PyTorch training step, simulated op by op."</p>
        </header>
        <main class="planner">
            <section class="controls" aria-label="Plan">
                <ModelPicker plan=planner.plan />
                <BatchInput plan=planner.plan />
            </section>
            <section class="results" aria-label="Estimate">
                <PeakSummary estimate=planner.estimate />
                <BatchChartView planner=planner />
            </section>
            <super::extra::ExtraPanels plan=planner.plan /> // ui2: issues #5/#6 panels
        </main>
        <footer class="colophon">
            <p>"Runs entirely in your browser; works offline once loaded."</p>
        </footer>
    }
}

/// Picks one of the model presets.
#[component]
pub fn ModelPicker(
    /// The plan whose model this picks.
    plan: RwSignal<Plan>,
) -> impl IntoView {
    let options = state::model_options()
        .into_iter()
        .map(|(id, name)| view! { <option value=id selected=move || plan.with(|p| p.model == id)>{name}</option> })
        .collect_view();
    view! {
        <label class="field">
            <span class="label">"Model"</span>
            <select
                data-testid="model"
                prop:value=move || plan.with(|p| p.model.clone())
                on:change=move |ev| {
                    let id = event_target_value(&ev);
                    plan.update(|p| state::set_model(p, &id));
                }
            >
                {options}
            </select>
        </label>
    }
}

/// The micro-batch size: a log-scale slider from 1 to 4096 and a number box for exact values.
#[component]
pub fn BatchInput(
    /// The plan whose batch this sets.
    plan: RwSignal<Plan>,
) -> impl IntoView {
    let batch = move || plan.with(|p| p.batch);
    let set = move |b: Option<u64>| {
        if let Some(b) = b {
            plan.update(|p| p.batch = b);
        }
    };
    view! {
        <div class="field batch" data-testid="batch">
            <label class="label" for="batch-range">"Batch size"</label>
            <input
                id="batch-range"
                type="range"
                min="0"
                max=state::slider_max().to_string()
                step="1"
                prop:value=move || state::batch_to_slider(batch()).to_string()
                on:input=move |ev| set(state::parse_slider(&event_target_value(&ev)))
            />
            <input
                type="number"
                min="1"
                step="1"
                inputmode="numeric"
                aria-label="Batch size"
                prop:value=move || batch().to_string()
                on:input=move |ev| set(state::parse_batch(&event_target_value(&ev)))
            />
        </div>
    }
}

/// The allocated peak, a line of context, or the estimator's message when it refuses the plan.
#[component]
pub fn PeakSummary(
    /// The estimate to summarise.
    estimate: Memo<Result<Estimate, EstimateError>>,
) -> impl IntoView {
    view! {
        <p class="peak" data-testid="peak" aria-live="polite">
            {move || estimate.with(state::peak_text).unwrap_or_else(|| "Allocated peak: –".to_string())}
        </p>
        <p class="detail">{move || estimate.with(state::detail_text)}</p>
        {move || estimate.with(state::error_text).map(|msg| view! { <p class="error" role="alert" data-testid="error">{msg}</p> })}
    }
}
