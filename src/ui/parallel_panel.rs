//! The parallelism panel (issue #5): GPUs per node, nodes, data/tensor/pipeline degrees, ZeRO
//! stage or FSDP, offload targets and interconnects; the per-GPU numbers of the layout, the chart
//! of per-GPU memory against the number of GPUs for every ZeRO stage with the GPU's capacity, the
//! per-rank breakdown, and the search for the cheapest layouts that fit, each applied with one
//! click. Logic in [`super::scale_logic`].

use leptos::prelude::*;
use wasm_bindgen::JsCast;

use super::dom::{button, effect, h, El};
use super::extra::{alert, figure, paint, plan_number, plan_select, rows_view};
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

fn degree(plan: RwSignal<Plan>, label: &str, testid: &str, placeholder: &str, which: Degree) -> El {
    plan_number(plan, label, testid, placeholder, move |p| sl::degree_text(p, which), move |p, s| sl::parse_degree(s).map(|v| sl::set_degree(p, which, v)).is_ok())
}

fn offload_box(plan: RwSignal<Plan>, what: OffloadTarget, label: &str) -> El {
    let input = h("input").attr("type", "checkbox");
    let el: web_sys::HtmlInputElement = input.0.clone().unchecked_into();
    effect(Box::new(move || {
        let on = plan.with(|p| sl::offload_on(p, what));
        if el.checked() != on {
            el.set_checked(on);
        }
    }));
    let el: web_sys::HtmlInputElement = input.0.clone().unchecked_into();
    h("label").cls("check").child(input.on("change", move |_| plan.update(|p| sl::set_offload(p, what, el.checked())))).text(label)
}

fn link(plan: RwSignal<Plan>, label: &str, testid: &str, kind: LinkKind) -> El {
    let options = move || {
        let mut v = vec![("", "GPU's default")];
        v.extend(sl::link_options(kind));
        v
    };
    plan_select(plan, label, testid, options, move |p| sl::link_value(p, kind), move |p, v| sl::set_link(p, kind, v))
}

/// The search's outcome: the cheapest layouts, each with its "Apply" button.
fn found_view(plan: RwSignal<Plan>, found: &Option<Result<Vec<Candidate>, String>>) -> Vec<El> {
    match found {
        None => Vec::new(),
        Some(Err(m)) => vec![alert("", m)],
        Some(Ok(list)) if list.is_empty() => vec![h("p").cls("detail").text("No layout up to 64 GPUs fits this GPU.")],
        Some(Ok(list)) => vec![h("ol").cls("layouts").children(
            list.iter()
                .cloned()
                .map(|c| {
                    let line = sl::candidate_text(&c);
                    let apply = button("apply-layout", || "Apply".into(), move || plan.update(|p| sl::apply_candidate(p, &c))).attr("aria-label", &format!("Apply {line}"));
                    h("li").child(h("span").text(&line)).text(" ").child(apply)
                })
                .collect(),
        )],
    }
}

pub fn parallel_panel(plan: RwSignal<Plan>) -> El {
    let training = Memo::new(move |_| plan.with(|p| p.mode != Mode::Infer));
    let est = Memo::new_with_compare(move |_| plan.with(|p| (p.mode != Mode::Infer).then(|| sl::estimate(p))), |_, _| true);
    let base = Memo::new(move |_| plan.with(curves_base));
    let curves = Memo::new_with_compare(move |_| base.with(|b| (b.mode != Mode::Infer).then(|| sl::zero_curves(b))), |_, _| true);
    let capacity = Memo::new(move |_| plan.with(|p| sl::gpu_of(p).map(|g| g.memory)));

    let (zero_fig, zero_canvas) = figure("chart-zero", "Per-GPU memory against the number of GPUs for each ZeRO stage", "Per-GPU device memory against the number of GPUs (dp × tp × pp) for each sharding scheme; the black line is the GPU's capacity, the red ring your layout.");
    let (rank_fig, rank_canvas) = figure("chart-ranks", "Memory of each pipeline rank, by what it holds", "Memory of each pipeline rank at its peak; the outlined bar is the rank that limits the layout.");
    let failure = h("div");
    let fail_el = failure.0.clone();
    effect(Box::new(move || {
        // Serving plans hide the charts; nothing to compute or draw.
        if !training.get() {
            return;
        }
        let cap = capacity.get();
        let current = est.with(|e| match e {
            Some(Ok(e)) => Some((e.layout.world, Bytes(e.per_gpu.device_total_bytes))),
            _ => None,
        });
        let a = curves.with(|c| {
            let curves: &[_] = match c {
                Some(Ok(c)) => c,
                _ => &[],
            };
            paint(&zero_canvas, &|root, theme| draw_zero_chart(root, &ZeroChart { curves, current, capacity: cap }, theme))
        });
        let b = est.with(|e| {
            let data = match e {
                Some(Ok(e)) => RankChart::from_estimate(e, cap),
                _ => RankChart { bars: Vec::new(), peak: 0, capacity: cap },
            };
            paint(&rank_canvas, &|root, theme| draw_rank_chart(root, &data, theme))
        });
        fail_el.set_text_content(None);
        if let Err(e) = a.and(b) {
            let _ = fail_el.append_child(&alert("", &e.to_string()).0);
        }
    }));

    let found = RwSignal::new(None::<Result<Vec<Candidate>, String>>);
    let search = h("div")
        .cls("search")
        .testid("layout-search")
        .child(button("layout-search-run", || "Find the cheapest layouts that fit".into(), move || found.set(Some(plan.with_untracked(sl::layouts).map_err(|e| e.to_string())))))
        .child(h("div").dyn_children(move || found.with(|f| found_view(plan, f))));

    let offload = h("fieldset")
        .cls("field")
        .testid("offload")
        .child(h("legend").cls("label").text("Offload to host memory"))
        .child(offload_box(plan, OffloadTarget::Optimizer, "Optimizer state"))
        .child(offload_box(plan, OffloadTarget::Params, "Parameters (ZeRO-3)"))
        .child(offload_box(plan, OffloadTarget::Activations, "Activations"));
    let zero_options = || sl::ZERO_OPTIONS.iter().map(|o| (o.0, o.1)).collect();
    let controls = h("div")
        .cls("controls")
        .child(degree(plan, "GPUs per node", "gpus-per-node", "auto", Degree::GpusPerNode))
        .child(degree(plan, "Nodes", "nodes", "1", Degree::Nodes))
        .child(degree(plan, "Data parallel (dp)", "dp", "auto", Degree::Dp))
        .child(degree(plan, "Tensor parallel (tp)", "tp", "", Degree::Tp))
        .child(degree(plan, "Pipeline parallel (pp)", "pp", "", Degree::Pp))
        .child(plan_select(plan, "Sharding", "zero", zero_options, |p| sl::zero_value(p).into(), sl::set_zero))
        .child(offload)
        .child(link(plan, "Link inside a node", "link", LinkKind::IntraNode))
        .child(link(plan, "Link between nodes", "inter-link", LinkKind::InterNode))
        .show(move || training.get());
    let numbers = h("div").dyn_children(move || {
        est.with(|e| match e {
            Some(Ok(e)) => vec![h("dl").cls("numbers").testid("per-gpu").children(rows_view(sl::per_gpu_rows(e)))],
            Some(Err(err)) => vec![alert("parallel-error", &format!("Cannot estimate this layout: {err}"))],
            None => Vec::new(),
        })
    });
    let curve_error = h("div").dyn_children(move || match curves.with(|c| c.as_ref().and_then(|c| c.as_ref().err().map(|e| e.to_string()))) {
        Some(err) => vec![alert("", &format!("No ZeRO chart: {err}"))],
        None => Vec::new(),
    });
    let results = h("div").cls("results").child(numbers).child(curve_error).child(zero_fig).child(rank_fig).child(failure).child(search).show(move || training.get());

    h("section")
        .cls("panel parallel-panel")
        .attr("aria-label", "Parallelism")
        .testid("parallel-panel")
        .child(h("h2").text("Parallelism"))
        .child(h("p").cls("detail").text("Inference plans are estimated on one GPU; switch the mode to train or fine-tune to plan a multi-GPU layout.").show(move || !training.get()))
        .child(controls)
        .child(results)
}
