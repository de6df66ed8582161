//! The controls: each a labelled native element (`select`, `input type=range|number`), so every
//! one is usable from the keyboard, carries its `data-testid`, and writes the plan through the
//! plain functions of [`crate::ui::logic::state`].

use leptos::prelude::*;

use super::dom::{h, label, select, value_of, El};
use super::planner::Planner;
use crate::estimator::config::{
    AttnImpl, CausalMask, Checkpointing, OptimizerImpl, OptimizerKind, Precision,
};
use crate::plan::Plan;
use crate::ui::logic::i18n::{self, chinese, Label, Lang, Msg, Units};
use crate::ui::logic::state;
use crate::ui::logic::url;

fn field(class: &str) -> El {
    h("div").cls(class)
}

/// Sets the plan's batch unless it already is `b`.
fn set_batch(p: Planner, b: Option<u64>) {
    if let Some(b) = b {
        if p.plan.with_untracked(|q| q.batch) != b {
            p.plan.update(|q| q.batch = b);
        }
    }
}

/// Where fetching a model family's code stands.
#[derive(Clone, Copy, PartialEq)]
enum Fetch {
    Done,
    Loading,
    Failed,
}

/// Awaits `load` (a chunk's fetch) with `fetch` showing it, then runs `then` if it succeeded.
fn fetch_then(
    fetch: RwSignal<Fetch>,
    load: impl std::future::Future<Output = bool> + 'static,
    then: impl FnOnce() + 'static,
) {
    fetch.set(Fetch::Loading);
    leptos::task::spawn_local(async move {
        if load.await {
            fetch.set(Fetch::Done);
            then();
        } else {
            fetch.set(Fetch::Failed);
        }
    });
}

/// The model picker, grouped by family, and the config.json paste box.
pub fn model_picker(p: Planner) -> El {
    let plan = p.plan;
    let choice = Memo::new(move |_| p.base.with(state::model_choice));
    let fetch = RwSignal::new(Fetch::Done);
    let groups = h("select")
        .id("model")
        .testid("model")
        .dyn_children(move || {
            let lang = p.lang.get();
            let current = choice.get();
            let mut out: Vec<El> = state::model_groups()
                .into_iter()
                .map(|(fam, items)| {
                    h("optgroup")
                        .attr("label", i18n::group_label(fam, lang))
                        .children(
                            items
                                .into_iter()
                                .map(|(id, name)| {
                                    let o = h("option").attr("value", id).text(name);
                                    if current == id {
                                        o.attr("selected", "")
                                    } else {
                                        o
                                    }
                                })
                                .collect(),
                        )
                })
                .collect();
            if current == "custom" {
                out.push(
                    h("option")
                        .attr("value", "custom")
                        .attr("selected", "")
                        .text(Msg::CustomConfig.t(lang)),
                );
            }
            out
        });
    // The builders of all models but the ResNets are fetched on first use (presets::lazy): the plan
    // changes once they are here, so it never holds a model the page cannot build.
    let with_code = move |next: Plan| {
        if crate::plan::lazy::ready_for(&next) {
            fetch.set(Fetch::Done);
            plan.set(next);
        } else {
            // (On failure the picker goes back to the plan's model: its value tracks `fetch`.)
            fetch_then(fetch, crate::plan::lazy::load(), move || plan.set(next));
        }
    };
    let groups = groups
        .dyn_value(move || {
            fetch.track();
            choice.get()
        })
        .on("change", move |ev| {
            let id = value_of(&ev);
            if id != "custom" {
                let mut next = plan.get_untracked();
                state::set_model(&mut next, &id);
                with_code(next);
            }
        });
    let text = RwSignal::new(String::new());
    let bad = RwSignal::new(false);
    let use_config = move || {
        let apply = move || {
            let mut q = plan.get_untracked();
            let ok = text
                .with_untracked(|t| state::set_config(&mut q, t))
                .is_ok();
            bad.set(!ok);
            if ok {
                with_code(q);
            }
        };
        if crate::ui::logic::json::loaded() {
            apply();
        } else {
            // The JSON reader is fetched on the first paste.
            fetch_then(fetch, crate::ui::logic::json::load(), apply);
        }
    };
    let fetch_note = h("p")
        .cls("loading")
        .testid("model-code")
        .attr("role", "status")
        .show(move || fetch.get() != Fetch::Done)
        .dyn_text(move || match fetch.get() {
            Fetch::Failed => Msg::ModelCodeUnavailable.t(p.lang.get()).to_string(),
            _ => Msg::ModelCodeLoading.t(p.lang.get()).to_string(),
        });
    let hub = h("div").cls("hub");
    let open_hub = super::hub_box::on_open(p, with_code, hub.0.clone());
    field("field model")
        .child(label("model", p.prefs().text(Msg::Model)))
        .child(groups)
        .child(fetch_note)
        .child(
            h("details")
                .cls("paste")
                .testid("config")
                .on("toggle", move |_| open_hub())
                .child(h("summary").dyn_text(p.prefs().text(Msg::HubModel)))
                .child(hub)
                .child(
                    h("p")
                        .cls("hint")
                        .dyn_text(p.prefs().text(Msg::PasteConfig)),
                )
                .child(h("p").cls("hint").dyn_text(p.prefs().text(Msg::PasteHint)))
                .child(
                    h("textarea")
                        .attr("rows", "6")
                        .attr("spellcheck", "false")
                        .dyn_attr("aria-label", p.prefs().attr(Label::T(Msg::PasteConfig)))
                        .on("input", move |ev| text.set(value_of(&ev))),
                )
                .child(super::dom::button(
                    "use-config",
                    p.prefs().text(Msg::UseConfig),
                    use_config,
                ))
                .child(
                    h("p")
                        .cls("error")
                        .attr("role", "alert")
                        .show(move || bad.get())
                        .dyn_text(p.prefs().text(Msg::ConfigNotJson)),
                ),
        )
}

/// The micro-batch size: a log-scale slider from 1 to 4096 and a number box for exact values.
pub fn batch_input(p: Planner) -> El {
    let batch = move || p.plan.with(|q| q.batch);
    field("field slider")
        .testid("batch")
        .child(label("batch-range", p.prefs().text(Msg::Batch)))
        .child(
            h("input")
                .id("batch-range")
                .attr("type", "range")
                .attr("min", "0")
                .attr("max", &state::slider_max().to_string())
                .attr("step", "1")
                .dyn_value(move || state::batch_to_slider(batch()).to_string())
                .on("input", move |ev| {
                    set_batch(p, state::parse_slider(&value_of(&ev)))
                }),
        )
        .child(
            h("input")
                .attr("type", "number")
                .attr("min", "1")
                .attr("step", "1")
                .attr("inputmode", "numeric")
                .dyn_attr("aria-label", p.prefs().attr(Label::T(Msg::Batch)))
                .dyn_value(move || batch().to_string())
                .on("input", move |ev| {
                    set_batch(p, state::parse_batch(&value_of(&ev)))
                }),
        )
}

/// Resolution (vision) or sequence length (text): a slider over round sizes and a number box.
pub fn size_input(p: Planner) -> El {
    let plan = p.plan;
    let size = move || p.base.with(state::input_size);
    let positions = Memo::new(move |_| p.spec.get().positions());
    let image = move || p.spec.with(|s| s.is_image());
    let text = move || {
        if image() {
            Msg::Resolution.t(p.lang.get())
        } else {
            Msg::SeqLen.t(p.lang.get())
        }
        .to_string()
    };
    field("field slider")
        .dyn_attr("data-testid", move || {
            Some(if image() { "resolution" } else { "seq-len" }.into())
        })
        .child(label("size-range", text))
        .child(
            h("input")
                .id("size-range")
                .attr("type", "range")
                .attr("min", "0")
                .attr("step", "1")
                .dyn_attr("max", move || {
                    Some(positions.with(|v| v.len().saturating_sub(1)).to_string())
                })
                .dyn_value(move || {
                    positions
                        .with(|v| state::nearest_position(v, size()))
                        .to_string()
                })
                .on("input", move |ev| {
                    let v = state::parse_uint(&value_of(&ev))
                        .and_then(|i| positions.with_untracked(|v| v.get(i as usize).copied()));
                    if let Some(v) = v.filter(|v| *v != plan.with_untracked(state::input_size)) {
                        plan.update(|q| state::set_input_size(q, v));
                    }
                }),
        )
        .child(
            h("input")
                .attr("type", "number")
                .attr("step", "1")
                .attr("inputmode", "numeric")
                .dyn_attr("min", move || {
                    positions.with(|v| v.first().map(|x| x.to_string()))
                })
                .dyn_attr("max", move || {
                    positions.with(|v| v.last().map(|x| x.to_string()))
                })
                .dyn_attr("aria-label", move || Some(text()))
                .dyn_value(move || size().to_string())
                .on("change", move |ev| {
                    if let Some(v) = state::parse_uint(&value_of(&ev)) {
                        let spec = p.spec.get_untracked();
                        plan.update(|q| state::set_input_size(q, state::clamp_input(v, spec)));
                    }
                }),
        )
}

/// A labelled picker over fixed choices.
fn picker(
    p: Planner,
    id: &str,
    name: Msg,
    options: impl Fn(Lang) -> Vec<(String, String)> + 'static,
    value: impl Fn() -> String + 'static,
    pick: impl Fn(String) + 'static,
) -> El {
    field("field")
        .child(label(id, p.prefs().text(name)))
        .child(select(id, id, move || options(p.lang.get()), value, pick))
}

const PRECISIONS: [Precision; 5] = [
    Precision::Fp32,
    Precision::AmpBf16,
    Precision::AmpFp16,
    Precision::Bf16,
    Precision::Fp16,
];
const IMPLS: [OptimizerImpl; 3] = [
    OptimizerImpl::Foreach,
    OptimizerImpl::Fused,
    OptimizerImpl::ForLoop,
];

/// A picker over an enum's values: `name` gives each option's value (the link's word), `label`
/// its text; `get`/`set` read and write the plan.
#[allow(clippy::too_many_arguments)]
fn enum_picker<T: Copy + PartialEq + 'static>(
    p: Planner,
    id: &str,
    msg: Msg,
    all: &'static [T],
    name: fn(T) -> &'static str,
    label: fn(T, Lang) -> &'static str,
    get: fn(&Plan) -> T,
    set: fn(&mut Plan, T),
) -> El {
    let plan = p.plan;
    picker(
        p,
        id,
        msg,
        move |l| {
            all.iter()
                .map(|&x| (name(x).to_string(), label(x, l).to_string()))
                .collect()
        },
        move || p.base.with(|q| name(get(q)).to_string()),
        move |v| {
            if let Some(&x) = all.iter().find(|&&x| name(x) == v) {
                plan.update(|q| set(q, x));
            }
        },
    )
}

pub fn precision_picker(p: Planner) -> El {
    enum_picker(
        p,
        "precision",
        Msg::Precision,
        &PRECISIONS,
        Precision::name,
        i18n::precision_label,
        |q| q.dtype,
        |q, d| q.dtype = d,
    )
}

pub fn optimizer_picker(p: Planner) -> El {
    enum_picker(
        p,
        "optimizer",
        Msg::Optimizer,
        &OptimizerKind::ALL,
        OptimizerKind::name,
        i18n::optimizer_label,
        |q| q.opt,
        |q, o| q.opt = o,
    )
}

pub fn optimizer_impl_picker(p: Planner) -> El {
    enum_picker(
        p,
        "optimizer-impl",
        Msg::OptimizerImpl,
        &IMPLS,
        url::optimizer_impl_name,
        i18n::optimizer_impl_label,
        |q| q.optimizer_impl(),
        |q, o| q.optimizer_impl = Some(o),
    )
}

/// Gradient checkpointing: the policies this model accepts, and k for `k segments`.
pub fn checkpoint_picker(p: Planner) -> El {
    let plan = p.plan;
    let k = move || match p.base.with(|q| q.ckpt) {
        Checkpointing::Segments(k) => Some(k),
        _ => None,
    };
    let max_k = move || p.info.with(|i| i.blocks.max(2));
    field("field")
        .testid("checkpointing")
        .child(label("ckpt", p.prefs().text(Msg::Checkpointing)))
        .child(
            h("div")
                .cls("pair")
                .child(select(
                    "ckpt",
                    "checkpointing-policy",
                    move || {
                        let lang = p.lang.get();
                        p.info.with(|i| {
                            state::ckpt_choices(i)
                                .into_iter()
                                .map(|(v, label)| (v.to_string(), label.t(lang).to_string()))
                                .collect()
                        })
                    },
                    move || p.base.with(|q| state::ckpt_choice(q.ckpt).to_string()),
                    move |v| plan.update(|q| q.ckpt = state::ckpt_from_choice(&v, q.ckpt)),
                ))
                .child(
                    h("input")
                        .attr("type", "number")
                        .attr("min", "2")
                        .attr("step", "1")
                        .testid("segments")
                        .show(move || k().is_some())
                        .dyn_attr("max", move || Some(max_k().to_string()))
                        .dyn_attr("aria-label", p.prefs().attr(Label::T(Msg::Segments)))
                        .dyn_value(move || k().map(|k| k.to_string()).unwrap_or_default())
                        .on("change", move |ev| {
                            if let Some(v) = state::parse_uint(&value_of(&ev)) {
                                let m = max_k();
                                plan.update(|q| {
                                    q.ckpt = Checkpointing::Segments(v.clamp(2, m) as u32)
                                });
                            }
                        }),
                ),
        )
}

pub fn accumulation_input(p: Planner) -> El {
    let plan = p.plan;
    field("field")
        .child(label("accumulation", p.prefs().text(Msg::Accumulation)))
        .child(
            h("input")
                .id("accumulation")
                .testid("accumulation")
                .attr("type", "number")
                .attr("min", "1")
                .attr("step", "1")
                .attr("inputmode", "numeric")
                .dyn_value(move || p.base.with(|q| q.accumulation.to_string()))
                .on("change", move |ev| {
                    if let Some(v) = state::parse_uint(&value_of(&ev)) {
                        plan.update(|q| q.accumulation = state::clamp_accumulation(v));
                    }
                }),
        )
}

pub fn attention_picker(p: Planner) -> El {
    enum_picker(
        p,
        "attention",
        Msg::Attention,
        &[AttnImpl::Sdpa, AttnImpl::Eager],
        url::attn_name,
        i18n::attention_label,
        |q| q.attn,
        |q, a| q.attn = a,
    )
}

/// The GPU catalogue, and a custom capacity in GiB.
/// Padded (or packed) batch against an unpadded one: whether transformers builds the causal mask
/// (see `CausalMask`). The choice travels in the link's `x` settings.
pub fn mask_picker(p: Planner) -> El {
    enum_picker(
        p,
        "causal-mask",
        Msg::CausalMaskLabel,
        &[CausalMask::Materialized, CausalMask::Skipped],
        i18n::causal_mask_name,
        i18n::causal_mask_label,
        |q| q.causal_mask,
        |q, m| q.causal_mask = m,
    )
}

pub fn gpu_picker(p: Planner) -> El {
    let plan = p.plan;
    let choice = move || p.base.with(state::gpu_choice);
    let set_custom = move |v: &str| {
        if let Some(id) = state::custom_gpu(v) {
            plan.update(|q| q.gpu = Some(id));
        }
    };
    field("field")
        .testid("gpu")
        .child(label("gpu", p.prefs().text(Msg::Gpu)))
        .child(
            h("div")
                .cls("pair")
                .child(select(
                    "gpu",
                    "gpu-picker",
                    move || {
                        let mut v: Vec<(String, String)> = state::gpu_options()
                            .into_iter()
                            .map(|(id, name)| (id.to_string(), name))
                            .collect();
                        v.push(("custom".into(), Msg::CustomGpu.t(p.lang.get()).into()));
                        v
                    },
                    choice,
                    move |v| {
                        if v == "custom" {
                            let gib = plan
                                .with_untracked(|q| state::gpu_of(q).map(|g| g.memory.gib()))
                                .unwrap_or(24.0);
                            set_custom(&state::trim_float(gib));
                        } else {
                            plan.update(|q| q.gpu = Some(v));
                        }
                    },
                ))
                .child(
                    h("input")
                        .attr("type", "number")
                        .attr("min", "0.5")
                        .attr("step", "0.5")
                        .testid("custom-capacity")
                        .show(move || choice() == "custom")
                        .dyn_attr("aria-label", p.prefs().attr(Label::T(Msg::CustomCapacity)))
                        .dyn_value(move || {
                            p.base.with(|q| {
                                state::custom_gib(q)
                                    .map(state::trim_float)
                                    .unwrap_or_default()
                            })
                        })
                        .on("change", move |ev| set_custom(&value_of(&ev))),
                ),
        )
}

pub fn lang_picker(p: Planner) -> El {
    let l = p.lang;
    picker(
        p,
        "lang",
        Msg::Language,
        |_| {
            Lang::ALL
                .iter()
                .map(|x| (x.code().to_string(), x.name().to_string()))
                .collect()
        },
        move || l.get().code().to_string(),
        move |v| match Lang::parse(&v) {
            // The Chinese texts are fetched on first use; the page switches once they are here.
            Some(Lang::Zh) if !chinese::loaded() => leptos::task::spawn_local(async move {
                if chinese::load().await {
                    l.set(Lang::Zh);
                } else {
                    // The picker goes back to the language shown.
                    l.notify();
                }
            }),
            Some(x) => l.set(x),
            None => {}
        },
    )
}

pub fn units_picker(p: Planner) -> El {
    let u = p.units;
    picker(
        p,
        "units",
        Msg::UnitsLabel,
        |l| {
            vec![
                (
                    Units::Binary.code().to_string(),
                    Msg::UnitsBinary.t(l).to_string(),
                ),
                (
                    Units::Decimal.code().to_string(),
                    Msg::UnitsDecimal.t(l).to_string(),
                ),
            ]
        },
        move || u.get().code().to_string(),
        move |v| {
            if let Some(x) = Units::parse(&v) {
                u.set(x);
            }
        },
    )
}
