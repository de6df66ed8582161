//! The parallelism panel: GPUs per node, nodes, data/tensor/pipeline degrees, ZeRO
//! stage or FSDP, offload targets and interconnects; the per-GPU numbers of the layout, the chart
//! of per-GPU memory against the number of GPUs for every ZeRO stage with the GPU's capacity, the
//! per-rank breakdown, and the search for the cheapest layouts that fit, each applied with one
//! click. Logic and texts in [`crate::ui::logic::parallel`] and [`crate::ui::logic::i18n`].

use std::cell::RefCell;
use std::rc::Rc;

use leptos::prelude::*;
use wasm_bindgen::JsCast;

use super::dom::{button, effect, h, memo, memo_always, El};
use super::pump;
use super::widgets::{alert, figure, paint, plan_number, plan_select, rows_view, Prefs};
use crate::estimator::config::Mode;
use crate::estimator::units::Bytes;
use crate::plan::search::{Candidate, SearchSteps};
use crate::plan::Plan;
use crate::plots::rank_chart::draw_rank_chart;
use crate::plots::zero_chart::{draw_zero_chart, ZeroChart};
use crate::presets::links::LinkKind;
use crate::ui::logic::i18n::{prefixed, searching_layouts, Label, Msg};
use crate::ui::logic::parallel as sl;
use crate::ui::logic::parallel::{Degree, OffloadTarget};

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

fn degree(
    plan: RwSignal<Plan>,
    cx: Prefs,
    label: Msg,
    testid: &str,
    placeholder: Option<Label>,
    which: Degree,
) -> El {
    plan_number(
        plan,
        cx,
        label,
        testid,
        placeholder,
        move |p| sl::degree_text(p, which),
        move |p, s| {
            sl::parse_degree(s)
                .map(|v| sl::set_degree(p, which, v))
                .is_ok()
        },
    )
}

fn offload_box(plan: RwSignal<Plan>, cx: Prefs, what: OffloadTarget, label: Msg) -> El {
    let input = h("input").attr("type", "checkbox");
    let el: web_sys::HtmlInputElement = input.0.clone().unchecked_into();
    effect(Box::new(move || {
        let on = plan.with(|p| sl::offload_on(p, what));
        if el.checked() != on {
            el.set_checked(on);
        }
    }));
    let el: web_sys::HtmlInputElement = input.0.clone().unchecked_into();
    h("label")
        .cls("check")
        .child(input.on("change", move |_| {
            plan.update(|p| sl::set_offload(p, what, el.checked()))
        }))
        .dyn_text(cx.text(label))
}

/// FSDP's bf16 mixed precision, shown while FSDP shards the model.
fn mixed_precision_box(plan: RwSignal<Plan>, cx: Prefs) -> El {
    let input = h("input")
        .attr("type", "checkbox")
        .testid("mixed-precision");
    let el: web_sys::HtmlInputElement = input.0.clone().unchecked_into();
    effect(Box::new(move || {
        let on = plan.with(sl::mixed_precision_on);
        if el.checked() != on {
            el.set_checked(on);
        }
    }));
    let el: web_sys::HtmlInputElement = input.0.clone().unchecked_into();
    h("label")
        .cls("check")
        .child(input.on("change", move |_| {
            plan.update(|p| sl::set_mixed_precision(p, el.checked()))
        }))
        .dyn_text(cx.text(Msg::MixedPrecisionBox))
        .show(move || plan.with(|p| p.parallel.as_ref().is_some_and(|q| q.fsdp)))
}

fn link(plan: RwSignal<Plan>, cx: Prefs, label: Msg, testid: &str, kind: LinkKind) -> El {
    plan_select(
        plan,
        cx,
        label,
        testid,
        move |l| sl::link_options(kind, l),
        move |p| sl::link_value(p, kind),
        move |p, v| sl::set_link(p, kind, v),
    )
}

/// The search's outcome: the cheapest layouts, each with its "Apply" button. Rebuilt on a
/// language or units switch from the stored outcome; the search itself is not rerun.
fn found_view(
    plan: RwSignal<Plan>,
    cx: Prefs,
    found: &Option<Result<Vec<Candidate>, String>>,
) -> Vec<El> {
    let (lang, units) = (cx.lang.get(), cx.units.get());
    match found {
        None => Vec::new(),
        Some(Err(m)) => vec![alert("", m)],
        Some(Ok(list)) if list.is_empty() => {
            vec![h("p").cls("detail").text(Msg::NoLayoutFits.t(lang))]
        }
        Some(Ok(list)) => vec![h("ol").cls("layouts").children(
            list.iter()
                .cloned()
                .map(|c| {
                    let line = sl::candidate_text(&c, lang, units);
                    let apply = button("apply-layout", cx.text(Msg::Apply), move || {
                        plan.update(|p| sl::apply_candidate(p, &c))
                    })
                    .attr("aria-label", &format!("{} {line}", Msg::Apply.t(lang)));
                    h("li").child(h("span").text(&line)).text(" ").child(apply)
                })
                .collect(),
        )],
    }
}

/// Runs the layout search in `run` for a task's budget once the page is idle, then again in a
/// later task until it answers: a search of a 128-expert model is seconds of work, and the page
/// stays live meanwhile. It stops when the panel is gone.
fn search_slice(
    run: Rc<RefCell<Option<SearchSteps>>>,
    found: RwSignal<Option<Result<Vec<Candidate>, String>>>,
    searching: RwSignal<Option<u64>>,
) {
    super::dom::when_idle_after(
        0.0,
        Box::new(move || {
            let start = super::browser::now();
            loop {
                let Some(done) = run.borrow_mut().as_mut().map(SearchSteps::step) else {
                    return;
                };
                if let Some(list) = done {
                    run.borrow_mut().take();
                    searching.try_set(None);
                    found.try_set(Some(Ok(list)));
                    return;
                }
                if pump::over_budget(start) {
                    break;
                }
            }
            let gpus = run.borrow().as_ref().map(SearchSteps::gpus);
            if searching.try_set(gpus).is_some() {
                // The panel was unmounted: its signals are gone (the value comes back).
                run.borrow_mut().take();
                return;
            }
            search_slice(run, found, searching);
        }),
    );
}

pub fn parallel_panel(plan: RwSignal<Plan>, cx: Prefs) -> El {
    let training = memo(move || plan.with(|p| p.mode != Mode::Infer));
    let est = memo_always(move || plan.with(|p| (p.mode != Mode::Infer).then(|| sl::estimate(p))));
    let base = memo(move || plan.with(curves_base));
    let curves =
        memo_always(move || base.with(|b| (b.mode != Mode::Infer).then(|| sl::zero_curves(b))));
    let capacity = memo(move || plan.with(|p| sl::gpu_of(p).map(|g| g.memory)));

    let (zero_fig, zero_canvas) =
        figure(cx, "chart-zero", Msg::ZeroChartAria, Msg::ZeroChartCaption);
    let (rank_fig, rank_canvas) =
        figure(cx, "chart-ranks", Msg::RankChartAria, Msg::RankChartCaption);
    let failure = h("div");
    let fail_el = failure.0.clone();
    effect(Box::new(move || {
        // Serving plans hide the charts; nothing to compute or draw.
        if !training.get() {
            return;
        }
        let cap = capacity.get();
        // A language or units switch redraws the charts in its words; the curves stay.
        let (lang, units) = (cx.lang.get(), cx.units.get());
        let current = est.with(|e| match e {
            Some(Ok(e)) => Some((e.layout.world, Bytes(e.per_gpu.device_total_bytes))),
            _ => None,
        });
        let a = curves.with(|c| {
            let curves: &[_] = match c {
                Some(Ok(c)) => c,
                _ => &[],
            };
            let words = sl::zero_words(current, cap, lang, units);
            paint(&zero_canvas, &|root, theme| {
                draw_zero_chart(
                    root,
                    &ZeroChart {
                        curves,
                        current,
                        capacity: cap,
                        words: Some(&words),
                    },
                    theme,
                )
            })
        });
        let b = est.with(|e| {
            let data = sl::rank_chart(e.as_ref().and_then(|e| e.as_ref().ok()), cap, lang, units);
            paint(&rank_canvas, &|root, theme| {
                draw_rank_chart(root, &data, theme)
            })
        });
        fail_el.set_text_content(None);
        if let Err(e) = a.and(b) {
            let _ = fail_el.append_child(&alert("", &e.to_string()).0);
        }
    }));

    let found = RwSignal::new(None::<Result<Vec<Candidate>, String>>);
    // The GPUs of the layouts being tried while a search runs.
    let searching = RwSignal::new(None::<u64>);
    let run: Rc<RefCell<Option<SearchSteps>>> = Rc::default();
    let search = h("div")
        .cls("search")
        .testid("layout-search")
        .child(button(
            "layout-search-run",
            cx.text(Msg::FindLayouts),
            move || match plan.with_untracked(sl::layout_search) {
                Ok(steps) => {
                    let fresh = run.borrow_mut().replace(steps).is_none();
                    found.set(None);
                    searching.set(Some(0));
                    // A search already under way goes on with the new steps.
                    if fresh {
                        search_slice(run.clone(), found, searching);
                    }
                }
                Err(e) => {
                    run.borrow_mut().take();
                    searching.set(None);
                    found.set(Some(Err(e.to_string())));
                }
            },
        ))
        .child(
            h("p")
                .cls("detail")
                .testid("layout-search-status")
                .attr("role", "status")
                .dyn_text(move || {
                    searching
                        .get()
                        .map(|g| searching_layouts(g.max(1), cx.lang.get()))
                        .unwrap_or_default()
                }),
        )
        .child(h("div").dyn_children(move || found.with(|f| found_view(plan, cx, f))));

    let offload = h("fieldset")
        .cls("field")
        .testid("offload")
        .child(
            h("legend")
                .cls("label")
                .dyn_text(cx.text(Msg::OffloadLegend)),
        )
        .child(offload_box(
            plan,
            cx,
            OffloadTarget::Optimizer,
            Msg::OptimizerState,
        ))
        .child(offload_box(
            plan,
            cx,
            OffloadTarget::Params,
            Msg::OffloadParams,
        ))
        .child(offload_box(
            plan,
            cx,
            OffloadTarget::Activations,
            Msg::Activations,
        ));
    let zero_options = |l| sl::ZERO_OPTIONS.iter().map(|o| (o.0, o.1.t(l))).collect();
    let auto = Some(Label::T(Msg::PlaceholderAuto));
    let controls = h("div")
        .cls("controls")
        .child(degree(
            plan,
            cx,
            Msg::GpusPerNode,
            "gpus-per-node",
            auto,
            Degree::GpusPerNode,
        ))
        .child(degree(
            plan,
            cx,
            Msg::Nodes,
            "nodes",
            Some(Label::Name("1")),
            Degree::Nodes,
        ))
        .child(degree(plan, cx, Msg::DataParallel, "dp", auto, Degree::Dp))
        .child(degree(
            plan,
            cx,
            Msg::TensorParallel,
            "tp",
            None,
            Degree::Tp,
        ))
        .child(degree(
            plan,
            cx,
            Msg::PipelineParallel,
            "pp",
            None,
            Degree::Pp,
        ))
        .child(
            degree(plan, cx, Msg::ExpertParallel, "ep", None, Degree::Ep).show(move || {
                est.with(|e| plan.with(|p| sl::expert_parallel_applies(p, e.as_ref())))
            }),
        )
        .child(plan_select(
            plan,
            cx,
            Msg::Sharding,
            "zero",
            zero_options,
            |p| sl::zero_value(p).into(),
            sl::set_zero,
        ))
        .child(mixed_precision_box(plan, cx))
        .child(offload)
        .child(link(plan, cx, Msg::LinkIntra, "link", LinkKind::IntraNode))
        .child(link(
            plan,
            cx,
            Msg::LinkInter,
            "inter-link",
            LinkKind::InterNode,
        ))
        .show(move || training.get());
    let numbers = h("div").dyn_children(move || {
        let (lang, units) = (cx.lang.get(), cx.units.get());
        est.with(|e| match e {
            Some(Ok(e)) => vec![h("dl")
                .cls("numbers")
                .testid("per-gpu")
                .children(rows_view(sl::per_gpu_rows(e, lang, units)))],
            Some(Err(err)) => vec![alert(
                "parallel-error",
                &prefixed(Msg::CannotEstimateLayout, &err.to_string(), lang),
            )],
            None => Vec::new(),
        })
    });
    let curve_error = h("div").dyn_children(move || {
        match curves.with(|c| {
            c.as_ref()
                .and_then(|c| c.as_ref().err().map(|e| e.to_string()))
        }) {
            Some(err) => vec![alert("", &prefixed(Msg::NoZeroChart, &err, cx.lang.get()))],
            None => Vec::new(),
        }
    });
    let results = h("div")
        .cls("results")
        .child(numbers)
        .child(curve_error)
        .child(zero_fig)
        .child(rank_fig)
        .child(failure)
        .child(search)
        .show(move || training.get());

    h("section")
        .cls("panel parallel-panel")
        .dyn_attr("aria-label", cx.attr(Label::T(Msg::ParallelHeading)))
        .testid("parallel-panel")
        .child(h("h2").dyn_text(cx.text(Msg::ParallelHeading)))
        .child(
            h("p")
                .cls("detail")
                .dyn_text(cx.text(Msg::InferOneGpu))
                .show(move || !training.get()),
        )
        .child(controls)
        .child(results)
}
