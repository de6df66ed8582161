//! VRAM Planner: how much GPU memory one training step takes, where it goes, and what each
//! technique saves. The [`estimator`] core is pure Rust; [`plots`] draws its charts on any plotters
//! backend; the planner page (`ui`, wasm32 only) and the CLI (`src/main.rs`) sit on top.

pub mod estimator;
pub mod plots;
pub mod presets;
pub mod split;
/// The planner page; its logic ([`ui::logic::state`]) builds natively, its components on wasm32 only.
pub mod ui;

#[cfg(not(target_arch = "wasm32"))]
pub mod cli;
