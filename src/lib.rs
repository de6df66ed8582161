//! VRAM Planner: how much GPU memory one training step takes, where it goes, and what each
//! technique saves. Read top-down: the [`estimator`] core is pure Rust over values (a model
//! specification, the step's settings, hardware); [`presets`] holds models, GPUs and links as
//! data; the [`plan`] layer resolves a user's names into those values and drives sweeps, fit and
//! search; [`plots`] draws the charts on any plotters backend; the planner page ([`ui`]) and the
//! CLI (`cli`) put the answers in words.

pub mod estimator;
pub mod plan;
pub mod plots;
pub mod presets;
pub mod split;
/// The planner page: its logic ([`ui::logic`]) builds natively, its view on wasm32 only.
pub mod ui;

#[cfg(not(target_arch = "wasm32"))]
pub mod cli;
