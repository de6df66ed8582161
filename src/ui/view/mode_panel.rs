//! The mode switch: train, fine-tune or infer, with the controls each mode takes
//! (LoRA rank and targets, QLoRA; weight format, KV-cache dtype and context when serving), the
//! inference numbers and the chart of memory against context length with the KV cache as its own
//! band. Logic and texts in [`crate::ui::logic::mode`] and [`crate::ui::logic::i18n`].

use leptos::prelude::*;

use super::dom::{effect, h, label, memo, memo_always, value_of, El};
use super::widgets::{alert, figure, paint, plan_number, plan_select, rows_view, Prefs};
use crate::estimator::config::Mode;
use crate::plan::estimate;
use crate::plan::Plan;
use crate::plots::draw_stacked_chart;
use crate::presets::text::LoraChoice;
use crate::ui::logic::i18n::{option_texts, prefixed, Label, Msg};
use crate::ui::logic::mode as ml;
use crate::ui::logic::parallel::gpu_of;

/// A wrapper that does not take part in the layout, so conditional controls sit in the flex row
/// (a class, not a `style` attribute: the page's Content-Security-Policy allows no inline style).
fn group() -> El {
    h("div").cls("slot")
}

fn set_rank(p: &mut Plan, s: &str) -> bool {
    if s.trim().is_empty() {
        ml::set_lora_rank(p, None);
        return true;
    }
    ml::parse_count(s)
        .map(|r| ml::set_lora_rank(p, Some(r)))
        .is_some()
}

/// The LoRA targets select: the choices the plan's model takes ([`ml::lora_menu`]), each option
/// with the test id `lora-targets-<key>`; no option is selected when the plan's targets are none
/// of them (written in JSON or a link).
fn lora_targets(plan: RwSignal<Plan>, cx: Prefs, menu: &'static [LoraChoice]) -> El {
    let id = "x-lora-targets";
    h("div")
        .cls("field")
        .child(label(id, cx.text(Msg::LoraTargets)))
        .child(
            h("select")
                .id(id)
                .testid("lora-targets")
                .dyn_children(move || {
                    let lang = cx.lang.get();
                    let current = untrack(|| plan.with(|p| ml::lora_targets_value(p, menu)));
                    menu.iter()
                        .map(|c| {
                            let o = h("option")
                                .attr("value", c.key)
                                .testid(&format!("lora-targets-{}", c.key))
                                .text(&ml::lora_choice_label(c, lang));
                            if c.key == current {
                                let _ = o.0.set_attribute("selected", "");
                            }
                            o
                        })
                        .collect()
                })
                .dyn_value(move || plan.with(|p| ml::lora_targets_value(p, menu)).to_string())
                .on("change", move |ev| {
                    plan.update(|p| ml::set_lora_targets(p, menu, &value_of(&ev)))
                }),
        )
}

pub fn mode_panel(plan: RwSignal<Plan>, cx: Prefs) -> El {
    let mode = memo(move || plan.with(|p| p.mode));
    let has_lora = memo(move || plan.with(|p| p.lora.is_some()));
    // The targets menu depends on the model alone: other edits do not parse its config again.
    let model = memo(move || plan.with(|p| (p.model.clone(), p.hf_config.clone())));
    let menu =
        memo(move || model.with(|(m, cfg)| crate::plan::resolve::lora_menu(m, cfg.as_ref())));
    // A model picked under adapters chosen for another moves them to targets it has (not at
    // mount: a link's own targets stay).
    Effect::new(move |mounted: Option<()>| {
        let menu = menu.get();
        if mounted.is_some() {
            if let Some(t) = plan.with_untracked(|p| ml::retargeted_lora(p, menu)) {
                plan.update(|p| p.lora.iter_mut().for_each(|l| l.targets = t.clone()));
            }
        }
    });
    // Only serving plans need their own estimate here (the page shows the others').
    let infer_est =
        memo_always(move || plan.with(|p| (p.mode == Mode::Infer).then(|| estimate(p))));
    let base = memo(move || plan.with(ml::context_base));
    let points = memo_always(move || base.with(ml::context_points));
    let max_ctx = memo(move || base.with(ml::max_context));
    let is_text = memo(move || plan.with(|p| ml::context_of(p).is_some()));
    let shown = move || mode.get() == Mode::Infer && is_text.get();

    let (fig, canvas) = figure(
        cx,
        "chart-context",
        Msg::ContextChartAria,
        Msg::ContextChartCaption,
    );
    let failure = h("div");
    let fail_el = failure.0.clone();
    effect(Box::new(move || {
        // The sweep runs only while the chart is shown (memos are lazy).
        if !shown() {
            return;
        }
        let capacity = plan.with(|p| gpu_of(p).map(|g| g.memory));
        // A language or units switch redraws the chart in its words; the sweep stays.
        let (lang, units) = (cx.lang.get(), cx.units.get());
        let current = infer_est.with(|e| match e {
            Some(Ok(e)) => e.inference.as_ref().map(|i| (i.context, e.device_total)),
            _ => None,
        });
        let drawn = points.with(|pts| {
            paint(&canvas, &|root, theme| {
                draw_stacked_chart(
                    root,
                    &ml::context_chart(pts, current, capacity, lang, units),
                    theme,
                )
            })
        });
        fail_el.set_text_content(None);
        if let Err(e) = drawn {
            let _ = fail_el.append_child(&alert("", &e.to_string()).0);
        }
    }));

    let finetune = group().dyn_children(move || {
        if mode.get() != Mode::Finetune {
            return Vec::new();
        }
        vec![
            plan_number(
                plan,
                cx,
                Msg::LoraRank,
                "lora-rank",
                Some(Label::T(Msg::PlaceholderNone)),
                ml::lora_rank_text,
                set_rank,
            ),
            group().dyn_children(move || {
                let menu = menu.get();
                if !has_lora.get() || menu.is_empty() {
                    return Vec::new();
                }
                vec![lora_targets(plan, cx, menu)]
            }),
        ]
    });
    let weights = group().dyn_children(move || {
        let m = mode.get();
        if m == Mode::Train {
            return Vec::new();
        }
        vec![plan_select(
            plan,
            cx,
            Msg::Weights,
            "quantization",
            move |l| option_texts(&ml::quantization_options(m), l),
            |p| ml::quantization_value(p).into(),
            ml::set_quantization,
        )]
    });
    let serving = group().dyn_children(move || {
        if mode.get() != Mode::Infer {
            return Vec::new();
        }
        vec![
            plan_select(
                plan,
                cx,
                Msg::KvCache,
                "kv-dtype",
                |l| option_texts(&ml::KV_OPTIONS, l),
                |p| ml::kv_value(p).into(),
                ml::set_kv,
            ),
            plan_number(
                plan,
                cx,
                Msg::ContextTokens,
                "context",
                None,
                |p| ml::context_of(p).map(|c| c.to_string()).unwrap_or_default(),
                |p, s| ml::parse_count(s).map(|c| p.context = Some(c)).is_some(),
            ),
            plan_number(
                plan,
                cx,
                Msg::NewTokens,
                "new-tokens",
                None,
                |p| p.new_tokens.unwrap_or(1).to_string(),
                |p, s| ml::parse_count(s).map(|c| p.new_tokens = Some(c)).is_some(),
            ),
        ]
    });
    let results = h("div").cls("results").dyn_children(move || {
        if mode.get() != Mode::Infer {
            return Vec::new();
        }
        vec![
            group().dyn_children(move || {
                let (lang, units) = (cx.lang.get(), cx.units.get());
                infer_est.with(|e| match e {
                    Some(Ok(e)) => vec![h("dl")
                        .cls("numbers")
                        .testid("kv-summary")
                        .children(rows_view(ml::inference_rows(e, lang, units)))],
                    Some(Err(err)) => vec![alert(
                        "mode-error",
                        &prefixed(Msg::CannotEstimate, &err.to_string(), lang),
                    )],
                    None => Vec::new(),
                })
            }),
            group().dyn_children(move || {
                let lang = cx.lang.get();
                max_ctx.with(|m| {
                    m.as_ref()
                        .map(|m| {
                            h("p")
                                .cls("detail")
                                .testid("max-context")
                                .text(&ml::max_context_text(m, lang))
                        })
                        .into_iter()
                        .collect()
                })
            }),
        ]
    });

    h("section")
        .cls("panel mode-panel")
        .dyn_attr("aria-label", cx.attr(Label::T(Msg::ModeHeading)))
        .child(h("h2").dyn_text(cx.text(Msg::ModeHeading)))
        .child(
            h("div")
                .cls("controls")
                .child(plan_select(
                    plan,
                    cx,
                    Msg::ModeWhat,
                    "mode",
                    |l| option_texts(&ml::MODE_OPTIONS, l),
                    |p| ml::mode_value(p).into(),
                    ml::set_mode,
                ))
                .child(finetune)
                .child(weights)
                .child(serving),
        )
        .child(results)
        .child(fig.show(shown).child(failure))
}
