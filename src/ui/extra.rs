//! The panels of issues #5 and #6 in one container, [`ExtraPanels`], mounted by the page with a
//! single line: the mode switch with its inference chart ([`super::mode_panel`]), the
//! parallelism panel ([`super::parallel_panel`]) and the comparison view ([`super::compare`]).
//! All read and write the page's one `RwSignal<Plan>`. Also the canvas helper they share.

use leptos::prelude::*;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters_canvas::CanvasBackend;
use web_sys::HtmlCanvasElement;

use super::compare::ComparePanel;
use super::mode_panel::ModePanel;
use super::parallel_panel::ParallelPanel;
use crate::estimator::config::Plan;
use crate::plots::{PlotError, Theme};

/// The mode panel, the parallelism panel and the comparison view, in that order.
#[component]
pub fn ExtraPanels(
    /// The page's plan: every panel edits it.
    plan: RwSignal<Plan>,
) -> impl IntoView {
    view! {
        <div class="extra-panels">
            <ModePanel plan=plan />
            <ParallelPanel plan=plan />
            <ComparePanel plan=plan />
        </div>
    }
}

/// Sizes `canvas`'s backing store to its CSS box × `devicePixelRatio` (charts stay sharp on
/// high-DPI screens) and lets `draw` paint it.
pub(crate) fn paint(canvas: &HtmlCanvasElement, draw: impl FnOnce(&DrawingArea<CanvasBackend, Shift>, &Theme) -> Result<(), PlotError>) -> Result<(), PlotError> {
    let ratio = window().device_pixel_ratio();
    let ratio = if ratio.is_finite() && ratio > 0.0 { ratio.min(4.0) } else { 1.0 };
    let css = match (canvas.client_width(), canvas.client_height()) {
        (w, h) if w > 0 && h > 0 => (w as f64, h as f64),
        _ => (640.0, 360.0),
    };
    let (w, h) = ((css.0 * ratio).round().max(1.0) as u32, (css.1 * ratio).round().max(1.0) as u32);
    if canvas.width() != w {
        canvas.set_width(w);
    }
    if canvas.height() != h {
        canvas.set_height(h);
    }
    let backend = CanvasBackend::with_canvas_object(canvas.clone()).ok_or_else(|| PlotError("the canvas has no 2D context".into()))?;
    let root = backend.into_drawing_area();
    draw(&root, &Theme { scale: w as f64 / css.0 })?;
    root.present()?;
    Ok(())
}

/// A labelled `<select>` whose options and value follow the plan.
#[component]
pub(crate) fn PlanSelect(
    plan: RwSignal<Plan>,
    /// Visible label.
    label: &'static str,
    testid: &'static str,
    /// The options as (value, label), recomputed when the plan changes.
    options: Signal<Vec<(&'static str, &'static str)>>,
    /// The plan's current value.
    value: Signal<String>,
    /// Applies a picked value to the plan.
    set: fn(&mut Plan, &str),
) -> impl IntoView {
    let id = format!("x-{testid}");
    let for_id = id.clone();
    view! {
        <label class="field" for=for_id>
            <span class="label">{label}</span>
            <select
                id=id
                data-testid=testid
                prop:value=move || value.get()
                on:change=move |ev| {
                    let v = event_target_value(&ev);
                    plan.update(|p| set(p, &v));
                }
            >
                {move || {
                    options
                        .get()
                        .into_iter()
                        .map(|(v, l)| view! { <option value=v selected=move || value.get() == v>{l}</option> })
                        .collect_view()
                }}
            </select>
        </label>
    }
}

/// A labelled whole-number box; `parse` turns its text into a plan edit (`None`: leave the plan).
#[component]
pub(crate) fn PlanNumber(
    plan: RwSignal<Plan>,
    label: &'static str,
    testid: &'static str,
    /// The text the box shows for the plan ("" = derived/default).
    value: Signal<String>,
    /// Applies what the user typed; returns false when the text is not a number.
    set: fn(&mut Plan, &str) -> bool,
    #[prop(optional)] placeholder: &'static str,
) -> impl IntoView {
    let id = format!("x-{testid}");
    let for_id = id.clone();
    view! {
        <label class="field" for=for_id>
            <span class="label">{label}</span>
            <input
                id=id
                type="number"
                min="0"
                step="1"
                inputmode="numeric"
                data-testid=testid
                placeholder=placeholder
                prop:value=move || value.get()
                on:input=move |ev| {
                    let v = event_target_value(&ev);
                    let mut next = plan.get_untracked();
                    if set(&mut next, &v) && next != plan.get_untracked() {
                        plan.set(next);
                    }
                }
            />
        </label>
    }
}

/// (label, value) rows as a description list.
pub(crate) fn rows_view(rows: Vec<(&'static str, String)>) -> impl IntoView {
    rows.into_iter().map(|(k, v)| view! { <dt>{k}</dt><dd>{v}</dd> }).collect_view()
}
