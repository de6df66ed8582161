//! The planner page: Leptos, rendered in the browser. State flows one way: one
//! `RwSignal<Plan>` that the inputs update; a [`model::Workbench`] that turns the plan into
//! numbers and chart data (two simulations per plan, then any batch size in microseconds), and
//! effects only to draw charts on canvases. The logic lives in plain modules tested natively
//! ([`state`], [`model`], [`url`], [`explain`], [`suggest`], [`charts`], [`export`], [`i18n`]); the
//! components (wasm32 only) just wire them to the DOM.

pub mod charts;
pub mod explain;
pub mod export;
pub mod i18n;
pub mod model;
pub mod state;
pub mod suggest;
pub mod url;
pub mod mode_logic; // ui2: issue #6 mode panel and comparison logic
pub mod scale_logic; // ui2: issue #5 parallelism panel logic

#[cfg(target_arch = "wasm32")]
mod app;
#[cfg(target_arch = "wasm32")]
mod backend;
#[cfg(target_arch = "wasm32")]
mod chart;
#[cfg(target_arch = "wasm32")]
mod controls;
#[cfg(target_arch = "wasm32")]
mod dom;
#[cfg(target_arch = "wasm32")]
mod runtime;
#[cfg(target_arch = "wasm32")] pub mod compare; // ui2
#[cfg(target_arch = "wasm32")] pub mod extra; // ui2: ExtraPanels, mounted by one line in app.rs
#[cfg(target_arch = "wasm32")] pub mod mode_panel; // ui2
#[cfg(target_arch = "wasm32")] pub mod parallel_panel; // ui2

#[cfg(target_arch = "wasm32")]
pub use app::{App, Planner};

/// Mounts the planner page on `<body>` (called by `src/main.rs` on wasm32).
#[cfg(target_arch = "wasm32")]
pub fn mount() {
    console_error_panic_hook::set_once();
    leptos::mount::mount_to_body(App);
}
