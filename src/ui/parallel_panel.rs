//! The parallelism panel (issue #5): GPUs per node, nodes, data/tensor/pipeline degrees, ZeRO
//! stage or FSDP, offload targets and interconnects; the per-GPU numbers of the layout, the chart
//! of per-GPU memory against the number of GPUs for every ZeRO stage with the GPU's capacity, the
//! per-rank breakdown, and the search for the cheapest layouts that fit, each applied with one
//! click. Logic in [`super::scale_logic`].

use leptos::prelude::*;

use super::extra::{paint, rows_view, PlanNumber, PlanSelect};
use super::scale_logic as sl;
use super::scale_logic::{Degree, OffloadTarget};
use crate::estimator::config::{Mode, Plan};
use crate::estimator::parallel::search::Candidate;
use crate::estimator::units::Bytes;
use crate::plots::rank_chart::{draw_rank_chart, RankChart};
use crate::plots::zero_chart::{draw_zero_chart, ZeroChart};
use crate::presets::links::LinkKind;

/// What the ZeRO chart depends on: the plan without the data-parallel degree and the sharding
/// scheme it varies itself.
fn curves_base(plan: &Plan) -> Plan {
    let mut p = plan.clone();
    if let Some(par) = p.parallel.as_mut() {
        par.dp = None;
        par.zero = None;
        par.fsdp = false;
        par.nodes = None;
    }
    p
}

fn set_degree_text(p: &mut Plan, s: &str, which: Degree) -> bool {
    sl::parse_degree(s).map(|v| sl::set_degree(p, which, v)).is_ok()
}

#[component]
pub fn ParallelPanel(plan: RwSignal<Plan>) -> impl IntoView {
    let training = Memo::new(move |_| plan.with(|p| p.mode != Mode::Infer));
    let est = Memo::new_with_compare(move |_| plan.with(|p| (p.mode != Mode::Infer).then(|| sl::estimate(p))), |_, _| true);
    let base = Memo::new(move |_| plan.with(curves_base));
    let curves = Memo::new_with_compare(move |_| base.with(|b| (b.mode != Mode::Infer).then(|| sl::zero_curves(b))), |_, _| true);
    let capacity = Memo::new(move |_| plan.with(|p| sl::gpu_of(p).map(|g| g.memory)));

    let zero_canvas = NodeRef::<leptos::html::Canvas>::new();
    let rank_canvas = NodeRef::<leptos::html::Canvas>::new();
    let failure = RwSignal::new(None::<String>);
    Effect::new(move |_| {
        let (Some(zc), Some(rc)) = (zero_canvas.get(), rank_canvas.get()) else { return };
        let cap = capacity.get();
        let current = est.with(|e| match e {
            Some(Ok(e)) => Some((e.layout.world, Bytes(e.per_gpu.device_total_bytes))),
            _ => None,
        });
        let a = curves.with(|c| {
            let empty = Vec::new();
            let curves = match c {
                Some(Ok(c)) => c,
                _ => &empty,
            };
            paint(&zc, |root, theme| draw_zero_chart(root, &ZeroChart { curves, current, capacity: cap }, theme))
        });
        let b = est.with(|e| {
            let data = match e {
                Some(Ok(e)) => RankChart::from_estimate(e, cap),
                _ => RankChart { bars: Vec::new(), peak: 0, capacity: cap },
            };
            paint(&rc, |root, theme| draw_rank_chart(root, &data, theme))
        });
        failure.set(a.and(b).err().map(|e| e.to_string()));
    });

    let found = RwSignal::new(None::<Result<Vec<Candidate>, String>>);
    let run_search = move |_| {
        let r = plan.with_untracked(sl::layouts).map_err(|e| e.to_string());
        found.set(Some(r));
    };

    let text = |which: Degree| Signal::derive(move || sl::degree_text(&plan.read(), which));
    let zero_options = Signal::derive(|| sl::ZERO_OPTIONS.iter().map(|o| (o.0, o.1)).collect());
    let zero_value = Signal::derive(move || sl::zero_value(&plan.read()).to_string());
    let with_default = |kind: LinkKind| {
        Signal::derive(move || {
            let mut v = vec![("", "GPU's default")];
            v.extend(sl::link_options(kind));
            v
        })
    };
    let intra_value = Signal::derive(move || sl::link_value(&plan.read(), LinkKind::IntraNode));
    let inter_value = Signal::derive(move || sl::link_value(&plan.read(), LinkKind::InterNode));
    let offload_box = move |what: OffloadTarget, label: &'static str| {
        view! {
            <label class="check">
                <input
                    type="checkbox"
                    prop:checked=move || plan.with(|p| sl::offload_on(p, what))
                    on:change=move |ev| {
                        let on = event_target_checked(&ev);
                        plan.update(|p| sl::set_offload(p, what, on));
                    }
                />
                {label}
            </label>
        }
    };

    view! {
        <section class="panel parallel-panel" aria-label="Parallelism" data-testid="parallel-panel">
            <h2>"Parallelism"</h2>
            {move || (!training.get()).then(|| view! { <p class="detail">"Inference plans are estimated on one GPU; switch the mode to train or fine-tune to plan a multi-GPU layout."</p> })}
            <div class="controls" style:display=move || if training.get() { "" } else { "none" }>
                <PlanNumber plan=plan label="GPUs per node" testid="gpus-per-node" value=text(Degree::GpusPerNode) set=|p, s| set_degree_text(p, s, Degree::GpusPerNode) placeholder="auto" />
                <PlanNumber plan=plan label="Nodes" testid="nodes" value=text(Degree::Nodes) set=|p, s| set_degree_text(p, s, Degree::Nodes) placeholder="1" />
                <PlanNumber plan=plan label="Data parallel (dp)" testid="dp" value=text(Degree::Dp) set=|p, s| set_degree_text(p, s, Degree::Dp) placeholder="auto" />
                <PlanNumber plan=plan label="Tensor parallel (tp)" testid="tp" value=text(Degree::Tp) set=|p, s| set_degree_text(p, s, Degree::Tp) />
                <PlanNumber plan=plan label="Pipeline parallel (pp)" testid="pp" value=text(Degree::Pp) set=|p, s| set_degree_text(p, s, Degree::Pp) />
                <PlanSelect plan=plan label="Sharding" testid="zero" options=zero_options value=zero_value set=sl::set_zero />
                <fieldset class="field" data-testid="offload">
                    <legend class="label">"Offload to host memory"</legend>
                    {offload_box(OffloadTarget::Optimizer, "Optimizer state")}
                    {offload_box(OffloadTarget::Params, "Parameters (ZeRO-3)")}
                    {offload_box(OffloadTarget::Activations, "Activations")}
                </fieldset>
                <PlanSelect plan=plan label="Link inside a node" testid="link" options=with_default(LinkKind::IntraNode) value=intra_value set=|p, v| sl::set_link(p, LinkKind::IntraNode, v) />
                <PlanSelect plan=plan label="Link between nodes" testid="inter-link" options=with_default(LinkKind::InterNode) value=inter_value set=|p, v| sl::set_link(p, LinkKind::InterNode, v) />
            </div>
            <div class="results" style:display=move || if training.get() { "" } else { "none" }>
                {move || est.with(|e| match e {
                    Some(Ok(e)) => view! { <dl class="numbers" style="display:grid;grid-template-columns:max-content 1fr;gap:0.15rem 1rem" data-testid="per-gpu">{rows_view(sl::per_gpu_rows(e))}</dl> }.into_any(),
                    Some(Err(err)) => view! { <p class="error" role="alert" data-testid="parallel-error">{format!("Cannot estimate this layout: {err}")}</p> }.into_any(),
                    None => ().into_any(),
                })}
                {move || curves.with(|c| match c {
                    Some(Err(err)) => Some(view! { <p class="error" role="alert">{format!("No ZeRO chart: {err}")}</p> }),
                    _ => None,
                })}
                <figure class="chart" data-testid="chart-zero">
                    <canvas node_ref=zero_canvas role="img" aria-label="Per-GPU memory against the number of GPUs for each ZeRO stage"></canvas>
                    <figcaption>"Per-GPU device memory against the number of GPUs (dp × tp × pp) for each sharding scheme; the black line is the GPU's capacity, the red ring your layout."</figcaption>
                </figure>
                <figure class="chart" data-testid="chart-ranks">
                    <canvas node_ref=rank_canvas role="img" aria-label="Memory of each pipeline rank, by what it holds"></canvas>
                    <figcaption>"Memory of each pipeline rank at its peak; the outlined bar is the rank that limits the layout."</figcaption>
                </figure>
                {move || failure.get().map(|m| view! { <p class="error" role="alert">{m}</p> })}
                <div class="search" data-testid="layout-search">
                    <button type="button" data-testid="layout-search-run" on:click=run_search>"Find the cheapest layouts that fit"</button>
                    {move || found.with(|f| match f {
                        None => ().into_any(),
                        Some(Err(m)) => view! { <p class="error" role="alert">{m.clone()}</p> }.into_any(),
                        Some(Ok(list)) if list.is_empty() => view! { <p class="detail">"No layout up to 64 GPUs fits this GPU."</p> }.into_any(),
                        Some(Ok(list)) => view! {
                            <ol class="layouts">
                                {list.iter().cloned().map(|c| {
                                    let line = sl::candidate_text(&c);
                                    view! {
                                        <li>
                                            <span>{line.clone()}</span>
                                            " "
                                            <button type="button" data-testid="apply-layout" aria-label=format!("Apply {line}") on:click=move |_| plan.update(|p| sl::apply_candidate(p, &c))>"Apply"</button>
                                        </li>
                                    }
                                }).collect_view()}
                            </ol>
                        }.into_any(),
                    })}
                </div>
            </div>
        </section>
    }
}
