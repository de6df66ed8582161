//! The page: the shared [`Planner`] state, the full view and the embed card, built with the
//! type-erased DOM builder of [`super::dom`] (see there why not typed views).

use leptos::prelude::*;

use super::browser;
use super::canvas::chart_view;
use super::controls;
use super::dom::{button, h, table_body_marked, El, Row};
use super::page_workbench::wb;
use super::planner::{MaxBatch, Planner};
use super::pump;
use super::widgets::alert;
use crate::plan::{Plan, PlanError};
use crate::ui::logic::explain;
use crate::ui::logic::export;
use crate::ui::logic::i18n::{self, colon, fmt_bytes, phase_label, Label, Msg};
use crate::ui::logic::state::{self};
use crate::ui::logic::suggest;
use crate::ui::logic::url::{self, ChartKind};
use crate::ui::logic::workbench::Numbers;

/// The whole page, or the embed card with `?embed=1`.
#[component]
pub fn App() -> impl IntoView {
    let query = browser::location_query();
    let parsed = url::parse_query(&query);
    let lang = browser::initial_lang(parsed.view.lang);
    let linked_units = query
        .trim_start_matches('?')
        .split('&')
        .any(|kv| kv.starts_with("units="));
    let units = browser::initial_units(parsed.view.units, linked_units);
    if let Some(info) = parsed.ckpt {
        wb(|w| w.know_ckpt(&parsed.plan, info));
    }
    let p = Planner::new(parsed.plan.clone(), parsed.view, lang, units, pump::adopt());
    let notice = RwSignal::new(parsed.has_problems().then_some(parsed));

    // Every change of the plan: wake the background work and, a moment later, the address bar.
    Effect::new(move |_| {
        p.plan.track();
        p.idle.set(false);
        pump::plan_changed(p);
    });
    let url_update = browser::Debounce::new(300);
    Effect::new(move |prev: Option<()>| {
        p.plan.track();
        p.lang.track();
        p.units.track();
        if prev.is_none() && notice.with_untracked(|n| n.is_none()) {
            return;
        }
        url_update.call(move || p.sync_address());
    });
    // Only a choice made on this page is remembered: not the browser's language at the first
    // visit (a later change of the browser's would then be ignored), nor a shared link's.
    Effect::new(move |prev: Option<()>| {
        let (l, u) = (p.lang.get(), p.units.get());
        if prev.is_some() {
            browser::remember(l, u);
        }
        browser::set_document_lang(l);
    });
    // Once, in the first frame that paints the numbers: the effects that put them in the page
    // (and the rest of the mount) have run by then, so every control is live from this mark. The
    // pixels come later, once the browser has laid out, rasterised and displayed that frame
    // (the e2e run dates them by the peak's Element Timing entry).
    // Not per slider step: a mark costs time and memory.
    Effect::new(move |marked: Option<bool>| {
        if marked == Some(true) {
            return true;
        }
        let ok = p.numbers.with(|n| n.is_ok());
        if ok {
            request_animation_frame(|| browser::mark("vram-planner:ready"));
        }
        ok
    });

    let tree = if p.embed {
        embed_card(p)
    } else {
        full_page(p, notice)
    };
    let update = update_notice(p);
    let root = NodeRef::<leptos::html::Div>::new();
    root.on_load(move |el| {
        let _ = el.append_child(&update.0);
        let _ = el.append_child(&tree.0);
    });
    view! { <div class="app" node_ref=root></div> }
}

/// The notice for a link whose settings could not all be used. Only the names of known keys are
/// shown, as text.
fn notice_view(p: Planner, notice: RwSignal<Option<url::Parsed>>) -> El {
    h("div").dyn_children(move || {
        let Some(n) = notice.get() else {
            return Vec::new();
        };
        let lang = p.lang.get();
        let mut items: Vec<String> = n
            .rejected
            .iter()
            .map(|k| i18n::notice_item(k, lang))
            .collect();
        if n.unknown > 0 {
            items.push(i18n::notice_unknown(n.unknown, lang));
        }
        if n.too_long {
            items.push(i18n::notice_too_long(lang).into());
        }
        vec![h("div")
            .cls("notice")
            .attr("role", "status")
            .testid("notice")
            .child(
                h("p")
                    .text(Msg::Notice.t(lang))
                    .text(" ")
                    .text(&items.join(", ")),
            )
            .child(button(
                "dismiss-notice",
                p.prefs().text(Msg::Dismiss),
                move || notice.set(None),
            ))]
    })
}

/// Tells a user whose tab shows an older deploy that a newer one is ready. The service worker
/// (public/sw.js) finds it and index.html's script passes it on as `vp-update` (with
/// `window.vpUpdate` set, for a message that came before the page mounted). The plan lives in the
/// address, which the link brings up to date before it reloads the page.
fn update_notice(p: Planner) -> El {
    let ready = RwSignal::new(browser::remembered("vpUpdate").is_some());
    // Lives as long as the page.
    std::mem::forget(window_event_listener_untyped("vp-update", move |_| {
        ready.set(true)
    }));
    h("div").dyn_children(move || {
        if !ready.get() {
            return Vec::new();
        }
        vec![h("p")
            .cls("notice")
            .attr("role", "status")
            .testid("new-version")
            .dyn_text(p.prefs().text(Msg::NewVersion))
            .text(" ")
            .child(
                h("a")
                    .attr("href", "")
                    .testid("reload")
                    .dyn_text(p.prefs().text(Msg::Reload))
                    .on("click", move |_| p.sync_address()),
            )]
    })
}

fn busy(p: Planner, el: El) -> El {
    el.dyn_attr("data-busy", move || Some((!p.idle.get()).to_string()))
}

fn full_page(p: Planner, notice: RwSignal<Option<url::Parsed>>) -> El {
    let applies = p.applies();
    let controls = h("section")
        .cls("controls")
        .dyn_attr("aria-label", p.prefs().attr(Label::T(Msg::PlanSection)))
        .child(controls::model_picker(p))
        .child(controls::batch_input(p))
        .child(controls::size_input(p).show(move || applies.with(|a| a.resolution || a.seq_len)))
        .child(controls::precision_picker(p))
        .child(controls::optimizer_picker(p).show(move || applies.with(|a| a.training)))
        .child(controls::optimizer_impl_picker(p).show(move || applies.with(|a| a.optimizer_impl)))
        .child(controls::checkpoint_picker(p).show(move || applies.with(|a| a.checkpointing)))
        .child(controls::accumulation_input(p).show(move || applies.with(|a| a.training)))
        .child(controls::attention_picker(p).show(move || applies.with(|a| a.attention)))
        .child(controls::mask_picker(p).show(move || applies.with(|a| a.causal_mask)))
        .child(controls::gpu_picker(p));
    let results = h("section")
        .cls("results")
        .dyn_attr("aria-label", p.prefs().attr(Label::T(Msg::ResultsSection)))
        .child(summary(p))
        // The frame that paints the summary comes sooner without them: on a slow machine the
        // browser's layout and raster of that first frame take longer than building it.
        .child(h("div").cls("slot").children_after_frame(Box::new(move || {
            vec![suggestions(p), breakdown(p), share(p)]
        })));
    // Below the first screen: built in the task after the frame that paints the numbers, so
    // that frame comes sooner. (`display: contents`: the panels stay the page grid's item.)
    let charts = h("section")
        .cls("charts")
        .children_after_frame(Box::new(move || {
            ChartKind::ALL.iter().map(|k| chart_view(p, *k)).collect()
        }));
    let extra = h("div")
        .cls("slot")
        .children_after_frame(Box::new(move || vec![extra_panels(p)]));
    h("div")
        .child(
            h("header")
                .cls("masthead")
                .child(
                    h("div")
                        .child(h("h1").dyn_text(p.prefs().text(Msg::Title)))
                        .child(h("p").cls("tagline").dyn_text(p.prefs().text(Msg::Tagline))),
                )
                .child(
                    h("div")
                        .cls("prefs")
                        .child(controls::lang_picker(p))
                        .child(controls::units_picker(p)),
                ),
        )
        .child(notice_view(p, notice))
        .child(
            busy(p, h("main").cls("planner"))
                .child(controls)
                .child(results)
                .child(charts)
                .child(extra),
        )
        .child(
            h("footer")
                .cls("colophon")
                .child(h("p").dyn_text(p.prefs().text(Msg::Footer))),
        )
}

/// The mode switch, the parallelism panel and the comparison view, mounted
/// only while their section is open. They recompute on every change of the plan they are given
/// (hundreds of milliseconds for a 70B model), so they get a copy of the page's plan that follows
/// it once input has settled; their own edits go to the page's plan at once. Sliders stay as fast
/// with the section open as closed. Language and units reach them directly: switching either only
/// rewrites texts, nothing is estimated again.
fn extra_panels(p: Planner) -> El {
    let panel_plan = RwSignal::new(p.plan.get_untracked());
    let settle = browser::Debounce::new(pump::SETTLE_MS as u64);
    Effect::new(move |_| {
        p.plan.track();
        settle.call(move || {
            let now = p.plan.get_untracked();
            if panel_plan.with_untracked(|q| *q != now) {
                panel_plan.set(now);
            }
        });
    });
    Effect::new(move |_| {
        panel_plan.with(|q| {
            if p.plan.with_untracked(|m| m != q) {
                p.plan.set(q.clone());
            }
        })
    });
    let host = h("div");
    // The panels live under an owner of their own, cleaned when the section closes: that disposes
    // their effects, so a closed section costs nothing while a slider moves. One owner for every
    // opening (an owner keeps a weak handle to each child it ever made until it is cleaned: a new
    // child of the page's owner per opening would pile up). Held by the page's owner: the
    // listener outlives an unmounted page and then finds it gone.
    let panels_owner = StoredValue::new_local(Owner::current().map(|o| o.child()));
    let mounted = StoredValue::new_local(false);
    // Bumped on every open and close: a chunk that arrives after its section closed (or closed
    // and opened again) builds nothing.
    let opened = StoredValue::new_local(0u32);
    let details = h("details")
        .cls("extra")
        .testid("more-panels")
        .child(h("summary").dyn_text(p.prefs().text(Msg::MorePanels)))
        .child(host.clone());
    let el = details.0.clone();
    details.on("toggle", move |_| {
        opened.update_value(|n| *n += 1);
        if el.has_attribute("open") {
            if mounted.try_get_value() != Some(false) {
                return;
            }
            let Some(owner) = panels_owner.try_with_value(Clone::clone).flatten() else {
                return;
            };
            panel_plan.set(p.plan.get_untracked());
            mounted.set_value(true);
            let ticket = opened.get_value();
            // Built under the panels' owner, as everything in the section: an event handler
            // runs outside any owner, and a text effect made there would keep its node for ever.
            let status = owner.with(|| {
                h("p")
                    .cls("loading")
                    .testid("panels-loading")
                    .dyn_text(p.prefs().text(Msg::PanelsLoading))
            });
            let _ = host.0.append_child(&status.0);
            let host = host.0.clone();
            let fallback = owner.clone();
            leptos::task::spawn_local(async move {
                let loaded = super::panels::load_panels().await;
                if opened.try_get_value() != Some(ticket) {
                    return;
                }
                host.set_text_content(None);
                let built = match loaded {
                    Ok(()) => {
                        super::panels::panels_under(
                            owner,
                            panel_plan,
                            p.lang.into(),
                            p.units.into(),
                        )
                        .await
                    }
                    Err(e) => Err(e),
                };
                match built {
                    Ok(panels) => drop(host.append_child(&panels)),
                    Err(_) => drop(
                        host.append_child(
                            &fallback
                                .with(|| {
                                    h("p")
                                        .cls("notice")
                                        .attr("role", "alert")
                                        .testid("panels-error")
                                        .dyn_text(p.prefs().text(Msg::ChunkUnavailable))
                                })
                                .0,
                        ),
                    ),
                }
            });
        } else if mounted.try_update_value(|m| std::mem::replace(m, false)) == Some(true) {
            if let Some(owner) = panels_owner.try_with_value(Clone::clone).flatten() {
                owner.cleanup();
            }
            host.0.set_text_content(None);
        }
    })
}

/// The compact card for an iframe: the key numbers, the sliders and one chart.
fn embed_card(p: Planner) -> El {
    let applies = p.applies();
    let name = move || {
        p.base.with(|q| {
            state::model_options()
                .into_iter()
                .find(|(id, _)| *id == q.model)
                .map_or_else(|| q.model.clone(), |(_, n)| n.to_string())
        })
    };
    let gpu = move || {
        p.gpu()
            .map(|g| format!(" · {}", g.name))
            .unwrap_or_default()
    };
    busy(p, h("main").cls("embed-card").testid("embed-card"))
        .child(
            h("header")
                .child(h("strong").dyn_text(name).dyn_text(gpu))
                .child(
                    h("a")
                        .cls("open-full")
                        .attr("target", "_blank")
                        .attr("rel", "noopener")
                        .dyn_attr("href", move || Some(p.live_link(false)))
                        .dyn_text(p.prefs().text(Msg::OpenFull)),
                ),
        )
        .child(
            h("div")
                .cls("controls compact")
                .child(controls::batch_input(p))
                .child(
                    controls::size_input(p)
                        .show(move || applies.with(|a| a.resolution || a.seq_len)),
                ),
        )
        .child(summary(p))
        .child(chart_view(p, p.chart))
}

/// The key numbers and the verdict.
fn summary(p: Planner) -> El {
    let b = move |x| fmt_bytes(x, p.units.get());
    let num = move |f: fn(&Numbers) -> crate::estimator::units::Bytes| {
        p.numbers
            .with(|n| n.as_ref().ok().map(f))
            .map(b)
            .unwrap_or_else(|| "–".into())
    };
    // One computation per change, read by the verdict's class, flag and text.
    let verdict = Memo::new(move |_| {
        let gpu = p.gpu()?;
        let lang = p.lang.get();
        p.numbers.with(|n| {
            let n = n.as_ref().ok()?;
            let fits = n.device_total <= gpu.memory;
            let margin = if fits {
                gpu.memory - n.device_total
            } else {
                n.device_total - gpu.memory
            };
            Some((
                fits,
                i18n::verdict(fits, &b(margin), &b(gpu.memory), gpu.name, lang),
            ))
        })
    });
    let verdict = move || verdict.get();
    let metric = |testid: &str, label: Msg, value: Box<dyn Fn() -> String>| {
        h("div")
            .child(h("dt").dyn_text(p.prefs().text(label)))
            .child(h("dd").testid(testid).dyn_text(value))
    };
    let max_batch_text = move || match p.max_batch.get() {
        None => "–".to_string(),
        Some(MaxBatch { value: None, .. }) => Msg::NoBatchFits.t(p.lang.get()).to_string(),
        Some(MaxBatch { value: Some(v), .. }) => v.to_string(),
    };
    let phase = move || {
        let lang = p.lang.get();
        p.numbers.with(|n| {
            n.as_ref()
                .ok()
                .map_or_else(String::new, |n| match &n.peak_op {
                    Some(op) => format!("{} · {op}", phase_label(n.phase, lang)),
                    None => phase_label(n.phase, lang).to_string(),
                })
        })
    };
    // The largest batch says whether full simulations have confirmed it (`data-exact`).
    let max_dd = h("dd")
        .testid("max-batch")
        .dyn_text(max_batch_text)
        .dyn_attr("data-exact", move || {
            Some(p.max_batch.get().is_some_and(|m| m.exact).to_string())
        });
    let device = move || {
        format!(
            "{} {}",
            num(|n| n.device_total),
            p.gpu()
                .map(|g| i18n::of_capacity(&b(g.memory), p.lang.get()))
                .unwrap_or_default()
        )
    };
    h("div")
        .cls("summary")
        .child(
            h("p")
                .cls("peak")
                .testid("peak")
                .attr("elementtiming", "peak")
                .attr("aria-live", "polite")
                .dyn_text(move || {
                    let l = p.lang.get();
                    format!("{}{}{}", Msg::Peak.t(l), colon(l), num(|n| n.peak))
                }),
        )
        .child(
            h("dl")
                .cls("metrics")
                .child(metric(
                    "reserved",
                    Msg::Reserved,
                    Box::new(move || num(|n| n.reserved)),
                ))
                .child(metric("device-total", Msg::DeviceTotal, Box::new(device)))
                .child(
                    h("div")
                        .child(h("dt").dyn_text(p.prefs().text(Msg::MaxBatch)))
                        .child(max_dd),
                )
                .child(metric("peak-phase", Msg::PeakPhase, Box::new(phase))),
        )
        .child(
            h("p")
                .testid("verdict")
                .attr("role", "status")
                .dyn_attr("class", move || {
                    Some(format!(
                        "verdict {}",
                        verdict().map_or("", |v| if v.0 { "fits" } else { "over" })
                    ))
                })
                .dyn_attr("data-fits", move || verdict().map(|v| v.0.to_string()))
                .dyn_text(move || verdict().map(|v| v.1).unwrap_or_default()),
        )
        .child(h("div").dyn_children(move || {
            let l = p.lang.get();
            p.numbers.with(|n| match n {
                Ok(_) => Vec::new(),
                // Not a refusal: the background work is building the model.
                Err(PlanError::Simulating) => vec![h("p")
                    .cls("muted")
                    .attr("role", "status")
                    .testid("simulating")
                    .text(Msg::Simulating.t(l))],
                Err(e) => vec![alert(
                    "error",
                    &format!("{}{}{e}", Msg::CannotEstimate.t(l), colon(l)),
                )],
            })
        }))
}

/// The breakdown table with each row's formula, and its exports.
fn breakdown(p: Planner) -> El {
    let rows = Memo::new(move |_| {
        let (lang, units) = (p.lang.get(), p.units.get());
        let gpu = p.gpu();
        p.numbers.with(|n| {
            n.as_ref()
                .ok()
                .map(|n| {
                    p.plan
                        .with(|q| explain::rows(n, q, gpu.as_ref(), lang, units))
                })
                .unwrap_or_default()
        })
    });
    let save = move |json: bool| {
        let rows = rows.get_untracked();
        let exact = p
            .numbers
            .with_untracked(|n| n.as_ref().is_ok_and(|n| n.exact));
        p.plan.with_untracked(|q| {
            if json {
                // (The JSON code is fetched on the first download; the rows are the click's.)
                let name = export::file_name(q, "breakdown", "json");
                p.with_json(
                    move |p| {
                        p.plan
                            .with_untracked(|q| export::breakdown_json(q, exact, &rows))
                    },
                    move |_, text| browser::download_text(&name, "application/json", &text),
                );
            } else {
                browser::download_text(
                    &export::file_name(q, "breakdown", "csv"),
                    "text/csv",
                    &export::breakdown_csv(&rows),
                );
            }
        });
    };
    let th = |m: Msg, class: &str| {
        h("th")
            .attr("scope", "col")
            .cls(class)
            .dyn_text(p.prefs().text(m))
    };
    // Subtotal rows stand out (class `total`).
    let body = table_body_marked(
        move || {
            rows.with(|r| {
                r.iter()
                    .map(|r| Row {
                        cells: vec![
                            r.label.clone(),
                            fmt_bytes(r.bytes, p.units.get()),
                            r.formula.clone(),
                        ],
                        total: r.total,
                    })
                    .collect()
            })
        },
        true,
    );
    h("section")
        .cls("breakdown")
        .child(h("h2").dyn_text(p.prefs().text(Msg::Breakdown)))
        .child(
            h("table")
                .testid("breakdown")
                .child(
                    h("thead").child(
                        h("tr")
                            .child(th(Msg::Component, ""))
                            .child(th(Msg::Memory, "num"))
                            .child(th(Msg::Formula, "")),
                    ),
                )
                .child(body),
        )
        .child(
            h("p")
                .cls("exports")
                .dyn_text(move || format!("{}: ", Msg::Export.t(p.lang.get())))
                .child(button("export-csv", || "CSV".into(), move || save(false)))
                .child(button("export-json", || "JSON".into(), move || save(true))),
        )
}

/// What would make it fit: ranked, each applied with one click.
fn suggestions(p: Planner) -> El {
    let list = Memo::new(move |_| {
        p.version.track();
        let gpu = p.gpu()?;
        let current = p.numbers.get().ok()?;
        if current.device_total <= gpu.memory {
            return Some(Vec::new());
        }
        let info = p.info.get();
        let (spec, lang, units) = (p.spec.get(), p.lang.get(), p.units.get());
        p.plan.with(|q| {
            wb(|w| {
                let w = &*w;
                let numbers_of = |x: &Plan| w.numbers(x);
                // Err until the suggestions' code is here (the pump fetches it, then bumps the
                // version): the list shows "computing".
                suggest::shown(suggest::Ask::Shown {
                    plan: q,
                    current: &current,
                    info: &info,
                    capacity: gpu.memory,
                    numbers_of: &numbers_of,
                    spec,
                    lang,
                    units,
                })
                .ok()
            })
        })
    });
    let track = move || {
        p.plan.track();
        p.version.track();
        p.lang.track();
        p.units.track();
        p.idle.track();
    };
    h("section")
        .cls("suggestions")
        .testid("suggestions")
        .attr("aria-live", "polite")
        .child(h("h2").dyn_text(p.prefs().text(Msg::Suggestions)))
        .child(h("div").later_children(track, move || {
            let lang = p.lang.get();
            let fits = p.numbers.with(|n| {
                n.as_ref()
                    .is_ok_and(|n| p.gpu().is_some_and(|g| n.device_total <= g.memory))
            });
            match list.get() {
                None if !fits && !suggest::loaded() => {
                    vec![h("p").cls("muted").text(Msg::Computing.t(lang))]
                }
                None => vec![h("p").cls("muted").text("–")],
                Some(v) if v.is_empty() && fits => vec![h("p").cls("ok").text(Msg::ItFits.t(lang))],
                Some(v) if v.is_empty() => vec![h("p").cls("muted").text(if p.idle.get() {
                    Msg::NoSuggestion.t(lang)
                } else {
                    Msg::Computing.t(lang)
                })],
                Some(v) => {
                    vec![h("ol").children(
                        v.into_iter()
                            .take(6)
                            .map(|s| {
                                let plan = s.plan.clone();
                                h("li")
                                    .cls(if s.fits { "fits" } else { "over" })
                                    .child(h("span").cls("title").text(&s.title))
                                    .child(h("span").cls("effect").text(&s.effect))
                                    .child(h("span").cls("tag").text(if s.fits {
                                        Msg::FitsTag.t(lang)
                                    } else {
                                        Msg::StillOver.t(lang)
                                    }))
                                    .child(h("span").cls("cost").text(&s.cost))
                                    .child(button(
                                        "apply-suggestion",
                                        move || Msg::Apply.t(lang).into(),
                                        move || p.plan.set(plan.clone()),
                                    ))
                            })
                            .collect(),
                    )]
                }
            }
        }))
}

/// Copy link and the embed snippet.
fn share(p: Planner) -> El {
    let copied = RwSignal::new(None::<bool>);
    let show_embed = RwSignal::new(false);
    let link = RwSignal::new(String::new());
    let copy = move || {
        p.with_json(
            |p| p.link(false),
            move |p, url| {
                p.sync_address();
                link.set(url.clone());
                browser::copy_text(url, move |ok| copied.set(Some(ok)));
            },
        )
    };
    let snippet = move || {
        if !show_embed.get() {
            return String::new();
        }
        let src = p
            .live_link(true)
            .replace('&', "&amp;")
            .replace('"', "&quot;");
        format!("<iframe src=\"{src}\" width=\"720\" height=\"640\" style=\"border:0\" title=\"VRAM Planner\" loading=\"lazy\"></iframe>")
    };
    h("section")
        .cls("share")
        .child(button("copy-link", p.prefs().text(Msg::CopyLink), copy))
        .child(
            button("embed", p.prefs().text(Msg::Embed), move || {
                show_embed.update(|s| *s = !*s)
            })
            .dyn_attr("aria-expanded", move || Some(show_embed.get().to_string())),
        )
        .child(h("span").dyn_children(move || {
            let lang = p.lang.get();
            match copied.get() {
                Some(true) => vec![h("span")
                    .cls("status")
                    .attr("role", "status")
                    .testid("copied")
                    .text(Msg::Copied.t(lang))],
                Some(false) => vec![h("label")
                    .cls("status")
                    .text(Msg::CopyManually.t(lang))
                    .child(
                        h("input")
                            .attr("type", "text")
                            .attr("readonly", "")
                            .testid("link-text")
                            .dyn_value(move || link.get()),
                    )],
                None => Vec::new(),
            }
        }))
        .child(
            h("div")
                .cls("embed-code")
                .show(move || show_embed.get())
                .child(
                    h("label")
                        .attr("for", "embed-code")
                        .dyn_text(p.prefs().text(Msg::EmbedHelp)),
                )
                .child(
                    h("textarea")
                        .id("embed-code")
                        .testid("embed-code")
                        .attr("readonly", "")
                        .attr("rows", "3")
                        .dyn_value(snippet),
                ),
        )
}
