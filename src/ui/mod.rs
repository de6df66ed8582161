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
pub mod json;
pub mod mode_logic; // ui2: issue #6 mode panel and comparison logic
pub mod model;
pub mod scale_logic;
pub mod state;
pub mod suggest;
pub mod url; // ui2: issue #5 parallelism panel logic

/// Declares a split point. In a `split` build (`make dist`) a `#[wasm_split]` function: its code
/// and all that only it reaches leave the first load for the named chunk, fetched on the first
/// call. Otherwise an async function with the same body, so callers await both alike. Either way
/// a failed fetch comes back as the declared error (`From<SplitLoaderError>`).
#[cfg(target_arch = "wasm32")]
macro_rules! split_point {
    ($chunk:ident; $(#[$m:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty $body:block) => {
        #[cfg(feature = "split")]
        $(#[$m])*
        #[wasm_split_helpers::wasm_split($chunk, fallible)]
        $vis fn $name($($arg: $ty),*) -> $ret $body

        #[cfg(not(feature = "split"))]
        $(#[$m])*
        $vis async fn $name($($arg: $ty),*) -> $ret $body
    };
}

#[cfg(target_arch = "wasm32")]
mod app;
#[cfg(target_arch = "wasm32")]
mod backend;
#[cfg(target_arch = "wasm32")]
mod chart;
#[cfg(target_arch = "wasm32")]
pub mod compare; // ui2
#[cfg(target_arch = "wasm32")]
mod controls;
#[cfg(target_arch = "wasm32")]
mod dom;
#[cfg(target_arch = "wasm32")]
pub mod extra; // ui2: ExtraPanels, mounted by one line in app.rs
#[cfg(target_arch = "wasm32")]
pub mod mode_panel; // ui2
#[cfg(target_arch = "wasm32")]
pub mod parallel_panel;
#[cfg(target_arch = "wasm32")]
mod runtime; // ui2

#[cfg(target_arch = "wasm32")]
pub use app::{App, Planner};

/// Mounts the planner page on `<body>` (called by `src/main.rs` on wasm32).
#[cfg(target_arch = "wasm32")]
pub fn mount() {
    console_error_panic_hook::set_once();
    // The wasm's start: the end-to-end run splits the interactive time at this mark.
    runtime::mark("vram-planner:start");
    // A link to a model other than a ResNet needs its builder (a chunk of their own in a `split`
    // build) before the page can judge its plan; the default page does not.
    // Likewise a link with JSON in it (`x`, `cfg`) needs the JSON reader.
    let query = runtime::location_query();
    let (seq, json) = (url::wants_lazy_models(&query), url::wants_json(&query));
    if (seq && !crate::plan::lazy::loaded()) || (json && !json::loaded()) {
        // (Leptos's executor starts with the mount: this runs on wasm-bindgen's.)
        wasm_bindgen_futures::spawn_local(async move {
            // Failed (offline before the service worker cached them): the link's settings are
            // then reported as unusable and the page opens on its defaults.
            if seq {
                crate::plan::lazy::load().await;
            }
            if json {
                json::load().await;
            }
            leptos::mount::mount_to_body(App);
        });
    } else {
        leptos::mount::mount_to_body(App);
    }
}
