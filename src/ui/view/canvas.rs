//! A chart on the page: a canvas redrawn whenever its data, the language, the units or the
//! canvas's size change, at the screen's pixel density; its data table as the text
//! alternative; PNG, SVG and CSV downloads (the SVG from the same draw function, through
//! plotters' SVG backend).

use std::sync::Arc;

use leptos::prelude::*;
use plotters::prelude::*;
use wasm_bindgen::JsCast;
use web_sys::HtmlCanvasElement;

use super::backend::AnyBackend;
use super::browser;
use super::dom::{button, effect, h, keep_while_owned, table_body, El};
use super::planner::Planner;
use crate::plots::{PlotError, Theme};
use crate::ui::logic::chart_data::{self, ChartData};
use crate::ui::logic::export;
use crate::ui::logic::i18n::{Lang, Msg, Units};
use crate::ui::logic::url::ChartKind;
use wasm_bindgen::closure::Closure;

fn title(kind: ChartKind) -> (Msg, Msg) {
    match kind {
        ChartKind::Batch => (Msg::ChartBatch, Msg::CapBatch),
        ChartKind::Length => (Msg::ChartLength, Msg::CapLength),
        ChartKind::Checkpoint => (Msg::ChartCheckpoint, Msg::CapCheckpoint),
        ChartKind::Timeline => (Msg::ChartTimeline, Msg::CapTimeline),
        ChartKind::Layers => (Msg::ChartLayers, Msg::CapLayers),
    }
}

/// The least time between two redraws of a chart other than the one the slider moves (the
/// batch chart, or the embed card's only chart), per chart so their redraws spread over
/// different frames: while a slider is dragged they follow at 10–20 frames a second and leave
/// each frame's time to the numbers and the primary chart. At rest every chart is current.
fn min_interval_ms(p: Planner, kind: ChartKind) -> f64 {
    if p.embed || kind == ChartKind::Batch {
        return 0.0;
    }
    match kind {
        ChartKind::Length => 50.0,
        ChartKind::Checkpoint => 70.0,
        ChartKind::Timeline => 60.0,
        _ => 90.0,
    }
}

/// One chart: its canvas, caption, data table and downloads.
pub fn chart_view(p: Planner, kind: ChartKind) -> El {
    let data = p.chart_data(kind);
    let canvas = h("canvas")
        .attr("role", "img")
        .attr("aria-describedby", &format!("{}-desc", kind.code()));
    let el: HtmlCanvasElement = canvas.0.clone().unchecked_into();
    // The canvas's CSS size, measured when first drawn and after a resize, never per slider step
    // (no forced layout while dragging).
    let css = RwSignal::new(None::<(f64, f64)>);
    let listener = window_event_listener(leptos::ev::resize, move |_| css.set(None));
    on_cleanup(move || listener.remove());
    let open = RwSignal::new(false);
    let failure = RwSignal::new(None::<String>);
    let retries = std::rc::Rc::new(std::cell::Cell::new(0u32));
    // Drawing happens once the page is idle after the next frame (the numbers the user moves
    // show first), once however many changes arrive meanwhile: a slider dragged at 60 Hz redraws
    // the batch chart in each frame's idle time.
    let draw_now: std::rc::Rc<dyn Fn()> = {
        let el = el.clone();
        // (A draw waits for idle time, up to seconds on a busy page: the page may have been
        // unmounted meanwhile, so every read is a `try_`.)
        std::rc::Rc::new(move || {
            let Some(css_now) = css.try_get_untracked() else {
                return;
            };
            let size = match css_now {
                Some(s) => s,
                None => {
                    let s = measure(&el);
                    if s.0 > 0.0 {
                        css.try_set(Some(s));
                    } else if retries.replace(retries.get() + 1) < 120 {
                        // Not laid out yet (just mounted, or hidden): look again next frame.
                        request_animation_frame(move || {
                            let _ = css.try_set(None);
                        });
                    }
                    return;
                }
            };
            let (Some(lang), Some(units), Some(Some(d))) = (
                p.lang.try_get_untracked(),
                p.units.try_get_untracked(),
                data.try_get_untracked(),
            ) else {
                return;
            };
            let _ = el.set_attribute("aria-label", &d.summary(lang, units));
            let el = el.clone();
            // Once the charts' chunk is in (the first chart to come into view fetches it),
            // this completes at once, before the frame.
            leptos::task::spawn_local(async move {
                repaint(el, d, lang, units, size, failure).await;
            });
        })
    };
    let redraw = draw_now.clone();
    let pending = std::rc::Rc::new(std::cell::Cell::new(false));
    let last_draw = std::rc::Rc::new(std::cell::Cell::new(f64::NEG_INFINITY));
    let min_gap = min_interval_ms(p, kind);
    // A chart scrolled out of view is not redrawn while the plan changes; it catches up when it
    // comes back into view.
    // False until the observer's first report: a chart below the fold neither draws nor fetches
    // the charts' chunk at load.
    let visible = RwSignal::new(false);
    watch_visibility(&el, visible);
    // What the chart's data depends on, tracked here without computing the data: that happens
    // in the deferred draw.
    effect(Box::new(move || {
        if !visible.get() {
            return;
        }
        // The charts' code is fetched only once the page has settled (no background work left:
        // the exact numbers are in and the layout above the charts is final): while it is still
        // being built, a chart can sit at the fold for a moment and then move below it.
        if !p.chart_code.get() && !p.idle.get() {
            return;
        }
        p.plan.track();
        // Background jobs (exact numbers, the largest batch, sweeps) change what the batch,
        // length and checkpoint charts show; the timeline and the per-layer chart follow from
        // the plan's model alone, built on demand, so a finished job does not redraw them.
        if !matches!(kind, ChartKind::Timeline | ChartKind::Layers) {
            p.version.track();
        }
        p.lang.track();
        p.units.track();
        css.track();
        if !pending.replace(true) {
            let (d, pending, last) = (draw_now.clone(), pending.clone(), last_draw.clone());
            let run = move || {
                pending.set(false);
                // Seen again once the page is idle, when the layout has settled: a chart that
                // crossed the fold only while the page was being built (content arriving above
                // it) neither fetches the charts' code nor draws.
                if visible.try_get_untracked() != Some(true) {
                    return;
                }
                fetch_chart_code(p, failure);
                last.set(browser::now());
                d();
            };
            // Once the page is idle (after the frame that shows the numbers, and never ahead of
            // an input that is waiting); a throttled chart no sooner than its interval allows.
            super::dom::when_idle_after(
                min_gap - (browser::now() - last_draw.get()),
                Box::new(run),
            );
        }
    }));
    let save = std::rc::Rc::new(move |what: &'static str| {
        let (lang, units) = (p.lang.get_untracked(), p.units.get_untracked());
        let name = p
            .plan
            .with_untracked(|q| export::file_name(q, kind.code(), what));
        match what {
            "svg" => {
                let (w, h) = css.get_untracked().unwrap_or((800.0, 450.0));
                let Some(d) = data.get_untracked() else {
                    return;
                };
                leptos::task::spawn_local(async move {
                    match svg(d, lang, units, (w.round() as u32, h.round() as u32)).await {
                        Ok(s) => browser::download_text(&name, "image/svg+xml", &s),
                        Err(e) => failure.set(Some(e.to_string())),
                    }
                });
            }
            "csv" => {
                leptos::task::spawn_local(async move {
                    if !chart_data::load().await {
                        failure.set(Some(Msg::ChunkUnavailable.t(lang).into()));
                        return;
                    }
                    if let Some(t) =
                        data.with_untracked(|d| d.as_ref().and_then(|d| d.table(lang, units)))
                    {
                        browser::download_text(&name, "text/csv", &export::table_csv(&t));
                    }
                });
            }
            _ => {
                // A chart out of view may be behind the plan: draw it now.
                let Some(d) = data.get_untracked() else {
                    return;
                };
                let Some(size) = css.get_untracked() else {
                    return redraw();
                };
                let el = el.clone();
                leptos::task::spawn_local(async move {
                    if repaint(el.clone(), d, lang, units, size, failure).await {
                        if let Ok(url) = el.to_data_url() {
                            browser::download_url(&name, &url);
                        }
                    }
                });
            }
        }
    });
    let (s1, s2, s3) = (save.clone(), save.clone(), save);
    let (t, c) = title(kind);
    // The table is built only while open: a closed one costs nothing per slider step. Its code
    // comes with the charts' (`chart_code`).
    let table = Memo::new(move |_| {
        if open.get() && p.chart_code.get() {
            data.with(|d| {
                d.as_ref()
                    .and_then(|d| d.table(p.lang.get(), p.units.get()))
            })
            .unwrap_or_default()
        } else {
            Default::default()
        }
    });
    let head = h("thead").child(h("tr").dyn_children(move || {
        table.with(|t| {
            t.headers
                .iter()
                .map(|x| h("th").attr("scope", "col").text(x))
                .collect()
        })
    }));
    let body = table_body(move || table.with(|t| t.rows.clone()), false);
    let details = h("details")
        .child(h("summary").dyn_text(p.prefs().text(Msg::DataTable)))
        .child(h("table").child(head).child(body));
    let d2 = details.0.clone();
    let details = details.on("toggle", move |_| {
        let now_open = d2.has_attribute("open");
        if now_open {
            fetch_chart_code(p, failure);
        }
        open.set(now_open);
    });
    h("figure")
        .cls("chart")
        .testid(kind.test_id())
        .child(h("h3").dyn_text(p.prefs().text(t)))
        .child(canvas)
        .child(
            h("figcaption")
                .id(&format!("{}-desc", kind.code()))
                .dyn_text(p.prefs().text(c)),
        )
        .child(
            h("p")
                .cls("error")
                .attr("role", "alert")
                .show(move || failure.with(|f| f.is_some()))
                .dyn_text(move || failure.get().unwrap_or_default()),
        )
        .child(
            h("div").cls("chart-tools").child(details).child(
                h("span")
                    .cls("exports")
                    .child(button("export-png", || "PNG".into(), move || s1("png")))
                    .child(button("export-svg", || "SVG".into(), move || s2("svg")))
                    .child(button("export-table", || "CSV".into(), move || s3("csv"))),
            ),
        )
}

/// Keeps `visible` equal to whether any of `el` is within the viewport. No margin: a chart
/// below the fold is neither drawn nor, in a split build, fetches the charts' chunk until it
/// scrolls in (the first screen — numbers, verdict, breakdown — does not wait for plotters); a
/// draw takes a few milliseconds, so it lands in the frames that scroll the chart in.
fn watch_visibility(el: &HtmlCanvasElement, visible: RwSignal<bool>) {
    let cb = Closure::<dyn Fn(js_sys::Array)>::new(move |entries: js_sys::Array| {
        if let Some(e) = entries
            .iter()
            .last()
            .and_then(|e| e.dyn_into::<web_sys::IntersectionObserverEntry>().ok())
        {
            if visible.get_untracked() != e.is_intersecting() {
                visible.set(e.is_intersecting());
            }
        }
    });
    if let Ok(observer) = web_sys::IntersectionObserver::new(cb.as_ref().unchecked_ref()) {
        observer.observe(el);
        // Disconnected and freed with the chart's owner (the page's), not left for the page's life.
        keep_while_owned(Watch {
            observer,
            _callback: cb,
        });
    }
}

/// An intersection observer and its callback, disconnected when dropped.
struct Watch {
    observer: web_sys::IntersectionObserver,
    _callback: Closure<dyn Fn(js_sys::Array)>,
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.observer.disconnect();
    }
}

/// Paints the chart and shows or clears its error line; true when it drew.
async fn repaint(
    el: HtmlCanvasElement,
    d: Arc<ChartData>,
    lang: Lang,
    units: Units,
    size: (f64, f64),
    failure: RwSignal<Option<String>>,
) -> bool {
    let drawn = paint(el, d, lang, units, size).await;
    let ok = drawn.is_ok();
    failure.try_set(drawn.err().map(|e| e.to_string()));
    ok
}

fn measure(canvas: &HtmlCanvasElement) -> (f64, f64) {
    (canvas.client_width() as f64, canvas.client_height() as f64)
}

/// Fetches the charts' data code once (a chart came into view, or a table opened); charts and
/// tables fill in when it is here.
fn fetch_chart_code(p: Planner, failure: RwSignal<Option<String>>) {
    if p.chart_code.get_untracked() {
        return;
    }
    let lang = p.lang.get_untracked();
    leptos::task::spawn_local(async move {
        if chart_data::load().await {
            p.chart_code.try_set(true);
        } else {
            failure.try_set(Some(Msg::ChunkUnavailable.t(lang).into()));
        }
    });
}

split_point! { charts;
    /// Sizes the canvas's backing store to its CSS box × `devicePixelRatio` and draws the chart.
    /// A split point with [`svg`]: plotters and the charts' drawing code are a chunk fetched when
    /// the first chart comes into view (below the fold on a laptop screen), not on first load.
    fn paint(canvas: HtmlCanvasElement, data: Arc<ChartData>, lang: Lang, units: Units, css: (f64, f64)) -> Result<(), PlotError> {
        draw(&canvas, &data, lang, units, css)
    }
}

split_point! { charts;
    /// The chart as an SVG document, through the same backend type as the canvas.
    fn svg(data: Arc<ChartData>, lang: Lang, units: Units, size: (u32, u32)) -> Result<String, PlotError> {
        svg_of(&data, lang, units, size)
    }
}

fn draw(
    canvas: &HtmlCanvasElement,
    data: &ChartData,
    lang: Lang,
    units: Units,
    css: (f64, f64),
) -> Result<(), PlotError> {
    super::backend::paint_canvas(canvas, css, &|root, theme| {
        data.draw(root, lang, units, theme)
    })
}

fn svg_of(
    data: &ChartData,
    lang: Lang,
    units: Units,
    size: (u32, u32),
) -> Result<String, PlotError> {
    let mut out = String::new();
    {
        let root = AnyBackend::Svg(SVGBackend::with_string(&mut out, size)).into_drawing_area();
        data.draw(&root, lang, units, &Theme::default())?;
        root.present()?;
    }
    Ok(out)
}
