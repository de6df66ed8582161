//! The page's components (wasm32 only): they wire the plain logic of [`super::logic`] to the DOM
//! through the type-erased builder of [`dom`].

pub mod app;
mod backend;
mod canvas;
pub mod compare;
mod controls;
mod dom;
pub mod mode_panel;
pub mod parallel_panel;
pub(crate) mod runtime;
pub mod widgets;
