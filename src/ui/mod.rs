//! The planner page: Leptos, rendered in the browser. State flows one way: one
//! `RwSignal<Plan>` that the inputs update, one memo of the estimate, one memo of the batch sweep
//! (keyed on the plan without its batch), cheap derived closures for the texts, and effects only
//! to draw charts on canvases. The logic lives in [`state`], plain functions tested natively; the
//! components (wasm32 only) just wire them to the DOM.

pub mod state;
pub mod mode_logic; // ui2: issue #6 mode panel and comparison logic
pub mod scale_logic; // ui2: issue #5 parallelism panel logic

#[cfg(target_arch = "wasm32")]
mod app;
#[cfg(target_arch = "wasm32")]
mod chart;
#[cfg(target_arch = "wasm32")] pub mod compare; // ui2
#[cfg(target_arch = "wasm32")] pub mod extra; // ui2: ExtraPanels, mounted by one line in app.rs
#[cfg(target_arch = "wasm32")] pub mod mode_panel; // ui2
#[cfg(target_arch = "wasm32")] pub mod parallel_panel; // ui2

#[cfg(target_arch = "wasm32")]
pub use app::{App, BatchInput, ModelPicker, PeakSummary, Planner};
#[cfg(target_arch = "wasm32")]
pub use chart::BatchChartView;

/// Mounts the planner page on `<body>` (called by `src/main.rs` on wasm32).
#[cfg(target_arch = "wasm32")]
pub fn mount() {
    console_error_panic_hook::set_once();
    leptos::mount::mount_to_body(App);
}
