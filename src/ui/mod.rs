//! The planner page: Leptos, rendered in the browser. State flows one way: one
//! `RwSignal<Plan>` that the inputs update; a [`logic::workbench::Workbench`] that turns the plan
//! into numbers and chart data (two simulations per plan, then any batch size in microseconds),
//! and effects only to draw charts on canvases. Two rooms: [`logic`], plain types and functions
//! built and tested natively, and `view` (wasm32 only), the components that wire them to the DOM.
//! Nothing in `logic` names `view`.

pub mod logic;

/// Declares a split point. In a `lazy-chunks` build (`make dist`) a `#[wasm_split]` function: its code
/// and all that only it reaches leave the first load for the named chunk, fetched on the first
/// call. Otherwise an async function with the same body, so callers await both alike. Either way
/// a failed fetch comes back as the declared error (`From<SplitLoaderError>`).
#[cfg(target_arch = "wasm32")]
macro_rules! split_point {
    ($chunk:ident; $(#[$m:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty $body:block) => {
        #[cfg(feature = "lazy-chunks")]
        $(#[$m])*
        #[wasm_split_helpers::wasm_split($chunk, fallible)]
        $vis fn $name($($arg: $ty),*) -> $ret $body

        #[cfg(not(feature = "lazy-chunks"))]
        $(#[$m])*
        $vis async fn $name($($arg: $ty),*) -> $ret $body
    };
}

#[cfg(target_arch = "wasm32")]
pub mod view;

#[cfg(target_arch = "wasm32")]
pub use view::app::App;
#[cfg(target_arch = "wasm32")]
pub use view::planner::Planner;

/// Mounts the planner page on `<body>` (called by `src/main.rs` on wasm32).
#[cfg(target_arch = "wasm32")]
pub fn mount() {
    console_error_panic_hook::set_once();
    // The wasm's start: the end-to-end run splits the interactive time at this mark.
    view::browser::mark("vram-planner:start");
    // A link to a model other than a ResNet needs its builder (a chunk of their own in a `lazy-chunks`
    // build) before the page can judge its plan; the default page does not.
    // Likewise a link with JSON in it (`x`, `cfg`) needs the JSON reader.
    let query = view::browser::location_query();
    let (seq, json) = (
        logic::url::wants_lazy_models(&query),
        logic::url::wants_json(&query),
    );
    // A page that opens in Chinese needs its texts first (a chunk of their own).
    let zh = view::browser::initial_lang(logic::url::lang(&query)) == logic::i18n::Lang::Zh;
    let chinese = logic::i18n::chinese::loaded;
    if (seq && !crate::plan::lazy::loaded())
        || (json && !logic::json::loaded())
        || (zh && !chinese())
    {
        // (Leptos's executor starts with the mount: this runs on wasm-bindgen's.)
        wasm_bindgen_futures::spawn_local(async move {
            // Failed (offline before the service worker cached them): the link's settings are
            // then reported as unusable and the page opens on its defaults; the texts in
            // English.
            if seq {
                crate::plan::lazy::load().await;
            }
            if json {
                logic::json::load().await;
            }
            if zh {
                logic::i18n::chinese::load().await;
            }
            leptos::mount::mount_to_body(App);
        });
    } else {
        leptos::mount::mount_to_body(App);
    }
}
