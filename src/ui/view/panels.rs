//! The mode switch with its inference chart ([`super::mode_panel`]), the parallelism panel
//! ([`super::parallel_panel`]) and the comparison view ([`super::compare`]) in one container,
//! [`panels`]; all read and write one `RwSignal<Plan>`. In a `lazy-chunks` build they and all that only
//! they reach load as a chunk of their own the first time their section opens.

use leptos::prelude::*;

use super::dom::h;
use super::widgets::Prefs;
use crate::plan::Plan;
use crate::ui::logic::i18n::{Lang, Units};

/// The mode panel, the parallelism panel and the comparison view, in that order, their texts in
/// `lang` and their sizes in `units`. Call it under a reactive owner: disposing that owner stops
/// the panels' effects.
pub fn panels(plan: RwSignal<Plan>, lang: Signal<Lang>, units: Signal<Units>) -> web_sys::Element {
    let cx = Prefs { lang, units };
    h("div")
        .cls("extra-panels")
        .child(super::mode_panel::mode_panel(plan, cx))
        .child(super::parallel_panel::parallel_panel(plan, cx))
        .child(super::compare::compare_panel(plan, cx))
        .0
}

/// Why [`panels_under`] has no panels: their WebAssembly chunk could not be fetched.
#[derive(Debug)]
pub struct ChunkUnavailable;

impl From<wasm_split_helpers::SplitLoaderError> for ChunkUnavailable {
    fn from(_: wasm_split_helpers::SplitLoaderError) -> Self {
        ChunkUnavailable
    }
}

split_point! { panels;
    /// [`panels`] built under `owner`: the panels and all that only they reach (the parallelism,
    /// serving and comparison models, their charts) leave the first load for a chunk fetched the
    /// first time the section opens. Err when that fetch fails (offline before the service worker
    /// had cached it).
    pub fn panels_under(owner: Owner, plan: RwSignal<Plan>, lang: Signal<Lang>, units: Signal<Units>) -> Result<web_sys::Element, ChunkUnavailable> {
        Ok(owner.with(|| panels(plan, lang, units)))
    }
}

/// Fetches the panels' chunk (at most once) without building them, so the page can check the
/// section is still open before it builds them.
#[cfg(feature = "lazy-chunks")]
pub async fn load_panels() -> Result<(), ChunkUnavailable> {
    __wasm_split_preload_panels_under().await?;
    // The panels size language models (their plans are their own, not the page's): they need
    // the lazily fetched builders whatever the page shows.
    // They also read and write settings as JSON.
    let ok = crate::plan::lazy::load().await && crate::ui::logic::json::load().await;
    ok.then_some(()).ok_or(ChunkUnavailable)
}

/// Nothing to fetch without the `lazy-chunks` feature.
#[cfg(not(feature = "lazy-chunks"))]
pub async fn load_panels() -> Result<(), ChunkUnavailable> {
    Ok(())
}
