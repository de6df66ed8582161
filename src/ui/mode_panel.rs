//! The mode switch (issue #6): train, fine-tune or infer, with the controls each mode takes
//! (LoRA rank and targets, QLoRA; weight format, KV-cache dtype and context when serving), the
//! inference numbers and the chart of memory against context length with the KV cache as its own
//! band. Logic in [`super::mode_logic`].

use leptos::prelude::*;

use super::extra::{paint, rows_view, PlanNumber, PlanSelect};
use super::mode_logic as ml;
use super::scale_logic::gpu_of;
use crate::estimator::config::{Mode, Plan};
use crate::estimator::estimate;
use crate::plots::context_chart::{draw_context_chart, ContextChart};

#[component]
pub fn ModePanel(plan: RwSignal<Plan>) -> impl IntoView {
    let mode = Memo::new(move |_| plan.with(|p| p.mode));
    // Only serving plans need their own estimate here (the page shows the others').
    let infer_est = Memo::new_with_compare(move |_| plan.with(|p| (p.mode == Mode::Infer).then(|| estimate(p))), |_, _| true);
    let base = Memo::new(move |_| plan.with(ml::context_base));
    let points = Memo::new_with_compare(move |_| base.with(ml::context_points), |_, _| true);
    let max_ctx = Memo::new(move |_| base.with(ml::max_context_text));
    let is_text = Memo::new(move |_| plan.with(|p| ml::context_of(p).is_some()));

    let canvas = NodeRef::<leptos::html::Canvas>::new();
    let failure = RwSignal::new(None::<String>);
    Effect::new(move |_| {
        let Some(el) = canvas.get() else { return };
        let capacity = plan.with(|p| gpu_of(p).map(|g| g.memory));
        let current = infer_est.with(|e| match e {
            Some(Ok(e)) => e.inference.as_ref().map(|i| (i.context, e.device_total)),
            _ => None,
        });
        let drawn = points.with(|pts| paint(&el, |root, theme| draw_context_chart(root, &ContextChart { points: pts, current, capacity }, theme)));
        failure.set(drawn.err().map(|e| e.to_string()));
    });

    let modes = Signal::derive(|| ml::MODE_OPTIONS.to_vec());
    let mode_value = Signal::derive(move || ml::mode_value(&plan.read()).to_string());
    let quant_options = Signal::derive(move || ml::quantization_options(mode.get()));
    let quant_value = Signal::derive(move || ml::quantization_value(&plan.read()).to_string());
    let kv_options = Signal::derive(|| ml::KV_OPTIONS.to_vec());
    let kv_value = Signal::derive(move || ml::kv_value(&plan.read()).to_string());
    let target_options = Signal::derive(|| ml::LORA_TARGETS.iter().map(|o| (o.0, o.1)).collect());
    let target_value = Signal::derive(move || ml::lora_targets_value(&plan.read()).to_string());
    let rank_value = Signal::derive(move || ml::lora_rank_text(&plan.read()));
    let context_value = Signal::derive(move || plan.with(|p| ml::context_of(p).map(|c| c.to_string()).unwrap_or_default()));
    let new_tokens_value = Signal::derive(move || plan.with(|p| p.new_tokens.unwrap_or(1).to_string()));

    fn set_rank(p: &mut Plan, s: &str) -> bool {
        if s.trim().is_empty() {
            ml::set_lora_rank(p, None);
            return true;
        }
        ml::parse_count(s).map(|r| ml::set_lora_rank(p, Some(r))).is_some()
    }
    fn set_context(p: &mut Plan, s: &str) -> bool {
        ml::parse_count(s).map(|c| p.context = Some(c)).is_some()
    }
    fn set_new_tokens(p: &mut Plan, s: &str) -> bool {
        ml::parse_count(s).map(|c| p.new_tokens = Some(c)).is_some()
    }

    view! {
        <section class="panel mode-panel" aria-label="Mode">
            <h2>"Mode"</h2>
            <div class="controls">
                <PlanSelect plan=plan label="What the GPU does" testid="mode" options=modes value=mode_value set=ml::set_mode />
                {move || (mode.get() == Mode::Finetune).then(|| view! {
                    <PlanNumber plan=plan label="LoRA rank (empty: full fine-tuning)" testid="lora-rank" value=rank_value set=set_rank placeholder="none" />
                    {move || plan.with(|p| p.lora.is_some()).then(|| view! {
                        <PlanSelect plan=plan label="LoRA targets" testid="lora-targets" options=target_options value=target_value set=ml::set_lora_targets />
                    })}
                })}
                {move || (mode.get() != Mode::Train).then(|| view! {
                    <PlanSelect plan=plan label="Weights" testid="quantization" options=quant_options value=quant_value set=ml::set_quantization />
                })}
                {move || (mode.get() == Mode::Infer).then(|| view! {
                    <PlanSelect plan=plan label="KV cache" testid="kv-dtype" options=kv_options value=kv_value set=ml::set_kv />
                    <PlanNumber plan=plan label="Context (prompt tokens)" testid="context" value=context_value set=set_context />
                    <PlanNumber plan=plan label="New tokens" testid="new-tokens" value=new_tokens_value set=set_new_tokens />
                })}
            </div>
            {move || (mode.get() == Mode::Infer).then(|| view! {
                <div class="results">
                    {move || infer_est.with(|e| match e {
                        Some(Ok(e)) => view! { <dl class="numbers" style="display:grid;grid-template-columns:max-content 1fr;gap:0.15rem 1rem" data-testid="kv-summary">{rows_view(ml::inference_rows(e))}</dl> }.into_any(),
                        Some(Err(err)) => view! { <p class="error" role="alert" data-testid="mode-error">{format!("Cannot estimate this plan: {err}")}</p> }.into_any(),
                        None => ().into_any(),
                    })}
                    {move || max_ctx.get().map(|t| view! { <p class="detail" data-testid="max-context">{t}</p> })}
                </div>
            })}
            <figure class="chart" data-testid="chart-context" hidden=move || !(mode.get() == Mode::Infer && is_text.get())>
                <canvas node_ref=canvas role="img" aria-label="Memory against context length, the KV cache as its own band"></canvas>
                <figcaption>"Memory against prompt length, by what it holds; the KV cache is the top band. The red line marks your context, the black line the GPU's capacity."</figcaption>
                {move || failure.get().map(|m| view! { <p class="error" role="alert">{m}</p> })}
            </figure>
        </section>
    }
}
