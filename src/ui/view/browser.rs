//! The page's contact with the browser beyond the DOM: the clock, the remembered language and
//! units, the address bar, the clipboard, downloads, timing marks, and a debounce on timers.

use std::time::Duration;

use leptos::prelude::*;
use wasm_bindgen::JsCast;

use crate::ui::logic::i18n::{Lang, Units};

pub fn now() -> f64 {
    window().performance().map(|p| p.now()).unwrap_or(0.0)
}

// index.html reads the same two keys before the wasm starts (the e2e test of the remembered
// language fails if they part).
const LANG_KEY: &str = "vram-planner.lang";
const UNITS_KEY: &str = "vram-planner.units";

fn storage() -> Option<web_sys::Storage> {
    window().local_storage().ok().flatten()
}

/// A remembered choice as `index.html`'s first script read it from storage (`window.vpLang`,
/// `window.vpUnits`) while the wasm was still downloading: a page's first `localStorage` access
/// opens the storage area synchronously (about 4 ms here), which would otherwise sit on the path
/// to the first numbers.
pub fn remembered(global: &str) -> Option<String> {
    js_sys::Reflect::get(&window(), &global.into())
        .ok()?
        .as_string()
}

/// The language: the link's, else the remembered one, else the browser's.
pub fn initial_lang(from_url: Option<Lang>) -> Lang {
    from_url
        .or_else(|| remembered("vpLang").and_then(|v| Lang::parse(&v)))
        .unwrap_or_else(|| Lang::from_browser(&window().navigator().language().unwrap_or_default()))
}

pub fn initial_units(from_url: Units, url_has_units: bool) -> Units {
    if url_has_units {
        return from_url;
    }
    remembered("vpUnits")
        .and_then(|v| Units::parse(&v))
        .unwrap_or(from_url)
}

/// Remembers the language and units once the page is idle: storage is synchronous, and the
/// first numbers must not wait for it.
pub fn remember(lang: Lang, units: Units) {
    super::dom::when_idle(Box::new(move || {
        if let Some(s) = storage() {
            let _ = s.set_item(LANG_KEY, lang.code());
            let _ = s.set_item(UNITS_KEY, units.code());
        }
    }));
}

/// A remembered value (`None` where storage is refused: a sandboxed frame, private mode).
pub fn stored(key: &str) -> Option<String> {
    storage()?.get_item(key).ok().flatten()
}

/// Remembers a value; a refusal (storage full or denied) only loses the offline copy.
pub fn store(key: &str, value: &str) {
    if let Some(s) = storage() {
        let _ = s.set_item(key, value);
    }
}

/// The page's origin (`scheme://host[:port]`).
pub fn origin() -> String {
    window().location().origin().unwrap_or_default()
}

/// The page's query string as loaded.
pub fn location_query() -> String {
    window().location().search().unwrap_or_default()
}

/// The page's address without its query string.
pub fn base_url() -> String {
    let loc = window().location();
    format!(
        "{}{}",
        loc.origin().unwrap_or_default(),
        loc.pathname().unwrap_or_default()
    )
}

/// Replaces the address bar's query string (no history entry per slider step).
pub fn replace_query(query: &str) {
    if let Ok(h) = window().history() {
        let url = format!(
            "{}?{query}",
            window().location().pathname().unwrap_or_default()
        );
        let _ = h.replace_state_with_url(&wasm_bindgen::JsValue::NULL, "", Some(&url));
    }
}

/// Writes `text` to the clipboard; `done(true)` once written, `done(false)` if refused.
pub fn copy_text(text: String, done: impl FnOnce(bool) + 'static) {
    let promise = window().navigator().clipboard().write_text(&text);
    leptos::task::spawn_local(async move {
        let ok = wasm_bindgen_futures::JsFuture::from(promise).await.is_ok();
        done(ok);
    });
}

/// Offers `content` as a file download.
pub fn download_text(name: &str, mime: &str, content: &str) {
    let parts = js_sys::Array::of1(&wasm_bindgen::JsValue::from_str(content));
    let opts = web_sys::BlobPropertyBag::new();
    opts.set_type(mime);
    let Ok(blob) = web_sys::Blob::new_with_str_sequence_and_options(&parts, &opts) else {
        return;
    };
    let Ok(url) = web_sys::Url::create_object_url_with_blob(&blob) else {
        return;
    };
    download_url(name, &url);
    // The download reads the blob after this returns: release it a while later.
    set_timeout(
        move || drop(web_sys::Url::revoke_object_url(&url)),
        Duration::from_secs(30),
    );
}

/// Offers a URL (a `data:` or `blob:` URL) as a file download.
pub fn download_url(name: &str, url: &str) {
    let Ok(a) = document().create_element("a") else {
        return;
    };
    let a: web_sys::HtmlAnchorElement = a.unchecked_into();
    a.set_href(url);
    a.set_download(name);
    a.click();
}

/// Marks a moment for the end-to-end timing (`performance.getEntriesByName`).
pub fn mark(name: &str) {
    if let Some(p) = window().performance() {
        let _ = p.mark(name);
    }
}

/// Sets `<html lang>` so screen readers read the page in its language.
pub fn set_document_lang(lang: Lang) {
    if let Some(el) = document().document_element() {
        let _ = el.set_attribute("lang", lang.tag());
    }
}

/// Runs the last of a burst of calls once `ms` milliseconds have passed without another: for
/// work that follows a plan while it is being edited (the link, the panels' settled copy).
/// One timer per burst: a call replaces the pending work and moves the deadline, and the timer,
/// when it fires early, sleeps on to the deadline, so a slider step costs no timer of its own.
#[derive(Clone, Copy)]
pub struct Debounce {
    state: StoredValue<DebounceState, LocalStorage>,
    ms: f64,
}

#[derive(Default)]
struct DebounceState {
    pending: Option<Box<dyn FnOnce()>>,
    deadline: f64,
    armed: bool,
}

impl Debounce {
    pub fn new(ms: u64) -> Self {
        Debounce {
            state: StoredValue::new_local(DebounceState::default()),
            ms: ms as f64,
        }
    }
    pub fn call(self, f: impl FnOnce() + 'static) {
        let deadline = now() + self.ms;
        let arm = self.state.try_update_value(|s| {
            s.pending = Some(Box::new(f));
            s.deadline = deadline;
            !std::mem::replace(&mut s.armed, true)
        });
        if arm == Some(true) {
            self.arm(self.ms);
        }
    }
    fn arm(self, ms: f64) {
        set_timeout(
            move || self.fire(),
            Duration::from_millis(ms.max(0.0).ceil() as u64),
        );
    }
    fn fire(self) {
        let t = now();
        let due = self.state.try_update_value(|s| {
            if t < s.deadline {
                return Err(s.deadline - t);
            }
            s.armed = false;
            Ok(s.pending.take())
        });
        match due {
            Some(Err(wait)) => self.arm(wait),
            Some(Ok(Some(f))) => f(),
            _ => {}
        }
    }
}
