//! Canvas charts: an effect redraws a plotters chart whenever its data or the canvas's size
//! changes, at the screen's pixel density.

use leptos::prelude::*;
use plotters::prelude::*;
use plotters_canvas::CanvasBackend;
use web_sys::HtmlCanvasElement;

use super::app::Planner;
use super::state;
use crate::plots::{draw_batch_chart, BatchChart, PlotError, Theme};

/// Memory against batch size for the current plan, with the current batch marked.
#[component]
pub fn BatchChartView(
    /// The state the chart shows.
    planner: Planner,
) -> impl IntoView {
    let canvas = NodeRef::<leptos::html::Canvas>::new();
    let failure = RwSignal::new(None::<String>);
    let resized = RwSignal::new(0u32);
    let listener = window_event_listener(leptos::ev::resize, move |_| resized.update(|n| *n += 1));
    on_cleanup(move || listener.remove());

    Effect::new(move |_| {
        resized.track();
        let Some(el) = canvas.get() else { return };
        let drawn = planner.batch_sweep.with(|points| planner.plan.with(|plan| planner.estimate.with(|est| draw(&el, &state::batch_chart(points, plan, est)))));
        failure.set(drawn.err().map(|e| e.to_string()));
    });

    view! {
        <figure class="chart" data-testid="chart-batch">
            <canvas node_ref=canvas role="img" aria-label="Allocated peak against batch size, stacked by memory category"></canvas>
            <figcaption>"Allocated peak against batch size, by what the memory holds. The red line marks your batch."</figcaption>
            {move || failure.get().map(|m| view! { <p class="error" role="alert">{m}</p> })}
        </figure>
    }
}

/// Sizes the canvas's backing store to its CSS box × `devicePixelRatio` and draws the chart.
fn draw(canvas: &HtmlCanvasElement, data: &BatchChart) -> Result<(), PlotError> {
    let ratio = window().device_pixel_ratio();
    let css = match (canvas.client_width(), canvas.client_height()) {
        (w, h) if w > 0 && h > 0 => (w as f64, h as f64),
        _ => (640.0, 360.0),
    };
    let (w, h) = state::backing_size(css, ratio);
    if canvas.width() != w {
        canvas.set_width(w);
    }
    if canvas.height() != h {
        canvas.set_height(h);
    }
    let backend = CanvasBackend::with_canvas_object(canvas.clone()).ok_or_else(|| PlotError("the canvas has no 2D context".into()))?;
    let root = backend.into_drawing_area();
    draw_batch_chart(&root, data, &Theme { scale: w as f64 / css.0 })?;
    root.present()?;
    Ok(())
}
