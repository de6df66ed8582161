//! The page's runtime pieces that touch the browser: the shared [`Workbench`] (one per page, in
//! a thread-local because its models are `Rc`s and Leptos's signals want `Send` values), the
//! background pump that runs its jobs one per task after the frame is drawn, the URL, local
//! storage, the clipboard and downloads.

use std::cell::{Cell, RefCell};
use std::time::Duration;

use leptos::prelude::*;
use wasm_bindgen::JsCast;

use super::app::Planner;
use crate::estimator::config::Plan;
use crate::ui::logic::chart_data;
use crate::ui::logic::i18n::{Lang, Units};
use crate::ui::logic::state;
use crate::ui::logic::suggest;
use crate::ui::logic::workbench::{Wants, Workbench};

thread_local! {
    static WB: RefCell<Workbench> = RefCell::new(Workbench::new());
    static PUMP_SCHEDULED: Cell<bool> = const { Cell::new(false) };
    static LAST_CHANGE: Cell<f64> = const { Cell::new(0.0) };
    static FETCHING_SUGGESTIONS: Cell<bool> = const { Cell::new(false) };
}

/// How long the plan must stay unchanged before the exact estimate runs (so dragging a slider
/// never waits for a full simulation).
pub const SETTLE_MS: f64 = 150.0;

/// Runs `f` on the page's workbench.
pub fn wb<R>(f: impl FnOnce(&mut Workbench) -> R) -> R {
    WB.with(|w| f(&mut w.borrow_mut()))
}

pub fn now() -> f64 {
    window().performance().map(|p| p.now()).unwrap_or(0.0)
}

/// Notes a change of the plan (the exact estimate waits for quiet) and wakes the pump.
pub fn plan_changed(p: Planner) {
    LAST_CHANGE.with(|c| c.set(now()));
    schedule_pump(p, 0.0);
}

/// Runs the pump once the page is idle (after the frame is drawn and any queued input), now or
/// after `delay_ms`: a job may take longer than a frame, and it must not run ahead of an input.
fn schedule_pump(p: Planner, delay_ms: f64) {
    if PUMP_SCHEDULED.with(|s| s.replace(true)) {
        return;
    }
    super::dom::when_idle_after(delay_ms, Box::new(move || run_pump(p)));
}

/// Fetches the suggestions' code once; when it is here, what reads the workbench reads it
/// again and the pump wakes to simulate the candidates.
fn fetch_suggestions(p: Planner) {
    if FETCHING_SUGGESTIONS.with(|f| f.replace(true)) {
        return;
    }
    leptos::task::spawn_local(async move {
        let ok = suggest::load().await;
        FETCHING_SUGGESTIONS.with(|f| f.set(false));
        if ok {
            p.version.update(|v| *v += 1);
            schedule_pump(p, 0.0);
        }
    });
}

/// What the page wants simulated for `plan`, most visible first: the suggestions' variants
/// (only when it does not fit), the input-size sweep, the checkpointing sweep.
pub fn wanted(w: &mut Workbench, plan: &Plan, embed: bool, exact: bool) -> Wants {
    let info = w.ckpt_info(plan);
    let w = &*w;
    let mut models = Vec::new();
    let mut suggestions_code = false;
    let gpu = state::gpu_of(plan);
    if let (Some(g), false) = (gpu, embed) {
        // Only once input has settled: the candidates move with the batch (the largest input
        // that fits, the accumulation split), so each slider step would ask for new
        // simulations, and one running when the next input arrives delays its frame.
        let over = w.numbers(plan).is_some_and(|n| n.device_total > g.memory);
        if over && exact {
            // The suggestions' code is fetched the first time a plan does not fit.
            match suggest::candidate_plans(suggest::Ask::Plans {
                plan,
                info: &info,
                capacity: g.memory,
                numbers_of: &|p| w.numbers(p),
            }) {
                Ok(plans) => models.extend(plans),
                Err(_) => suggestions_code = true,
            }
        }
    }
    models.extend(chart_data::length_plans(plan));
    if !embed {
        models.extend(chart_data::ckpt_plans(plan, &info));
    }
    Wants {
        exact,
        models,
        suggestions_code,
    }
}

/// One job, then the next one in a later task; when only the exact estimate is left and input
/// has not settled, waits for it to settle.
fn run_pump(p: Planner) {
    PUMP_SCHEDULED.with(|s| s.set(false));
    let Some(plan) = p.plan.try_get_untracked() else {
        return;
    };
    let quiet = now() - LAST_CHANGE.with(|c| c.get());
    let exact = quiet >= SETTLE_MS;
    let (job, suggestions_code) = wb(|w| {
        let wants = wanted(w, &plan, p.embed, exact);
        (w.next_job(&plan, &wants), wants.suggestions_code)
    });
    if suggestions_code {
        fetch_suggestions(p);
    }
    match job {
        Some(job) => {
            wb(|w| w.run(job));
            p.version.update(|v| *v += 1);
            schedule_pump(p, 0.0);
        }
        None if !exact => schedule_pump(p, SETTLE_MS - quiet),
        // (Not idle while code it needs is on its way.)
        None if FETCHING_SUGGESTIONS.with(Cell::get) => {}
        None => {
            p.idle.set(true);
        }
    }
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
fn remembered(global: &str) -> Option<String> {
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
