//! The page's components (wasm32 only): they wire the plain logic of [`super::logic`] to the DOM
//! through the type-erased builder of [`dom`].

pub mod app;
mod backend;
pub(crate) mod browser;
mod canvas;
pub mod compare;
mod controls;
// Public for the page tests, which count its live listeners.
pub mod dom;
mod hub_box;
pub mod mode_panel;
mod page_workbench;
pub mod panels;
pub mod parallel_panel;
pub mod planner;
mod pump;
pub mod widgets;
