//! The model-id box beside the config.json paste box: the id of a model on the Hugging Face Hub
//! and a Fetch button. Nothing is requested until the button is pressed. The fetched config is
//! applied as a pasted one is (the same plan, the same link) and remembered in localStorage, so
//! the same id works offline later. The box, the fetch, its checks and the storage are a
//! WebAssembly chunk of their own in a `lazy-chunks` build, fetched when the section holding the
//! box first opens; what each outcome means is [`crate::ui::logic::hub`]'s.

use std::cell::Cell;
use std::rc::Rc;

use leptos::prelude::*;
use serde_json::Value;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;

use super::browser;
use super::dom::{button, h, label, value_of, El};
use super::planner::Planner;
use crate::plan::Plan;
use crate::ui::logic::hub::{self, Endpoint, HubError, PageStatus, RepoId};
use crate::ui::logic::i18n::hub::StatusLine;
use crate::ui::logic::i18n::Msg;
use crate::ui::logic::{json, state, url};

/// Where the box stands: nothing asked, a fetch under way, or its outcome.
#[derive(Clone, PartialEq)]
enum Shown {
    Idle,
    Fetching,
    Done(StatusLine),
}

/// What builds the box into `slot` the first time its section opens (call it on every `toggle`):
/// its code, with the fetch's, comes with the chunk fetched then. `apply` takes the plan with the
/// fetched config (and fetches the model code it needs first, as the picker does).
pub fn on_open(p: Planner, apply: impl Fn(Plan) + 'static, slot: web_sys::Element) -> impl Fn() {
    let apply: Rc<dyn Fn(Plan)> = Rc::new(apply);
    // The box is built under the page's owner: an event handler runs outside any owner, and a
    // text effect made there would keep its node for ever.
    let owner = Owner::current();
    let asked = Rc::new(Cell::new(false));
    move || {
        if asked.replace(true) {
            return;
        }
        let built = build_box(owner.clone(), p, apply.clone());
        let (slot, asked) = (slot.clone(), asked.clone());
        leptos::task::spawn_local(async move {
            match built.await {
                Ok(el) => {
                    slot.set_text_content(None);
                    let _ = slot.append_child(&el);
                }
                Err(NoChunk) => {
                    // Offline before the service worker had the chunk: the next opening retries.
                    asked.set(false);
                    slot.set_text_content(Some(Msg::HubUnavailable.t(p.lang.get_untracked())));
                }
            }
        });
    }
}

/// The box's chunk could not be had.
pub struct NoChunk;

impl From<wasm_split_helpers::SplitLoaderError> for NoChunk {
    fn from(_: wasm_split_helpers::SplitLoaderError) -> Self {
        NoChunk
    }
}

split_point! { hub;
    /// [`hub_box`] built under `owner`.
    fn build_box(owner: Option<Owner>, p: Planner, apply: Rc<dyn Fn(Plan)>) -> Result<web_sys::Element, NoChunk> {
        Ok(match owner {
            Some(o) => o.with(|| hub_box(p, apply)),
            None => hub_box(p, apply),
        }
        .0)
    }
}

/// The model-id box: the id, the Fetch button and the outcome's line.
fn hub_box(p: Planner, apply: Rc<dyn Fn(Plan)>) -> El {
    let id = RwSignal::new(String::new());
    let shown = RwSignal::new(Shown::Idle);
    let fetch = move || {
        if shown.get_untracked() == Shown::Fetching {
            return;
        }
        shown.set(Shown::Fetching);
        fetch_and_apply(
            id.get_untracked(),
            url::hf_endpoint(&browser::location_query()),
            p.plan,
            shown,
            apply.clone(),
        );
    };
    let text = move || {
        let lang = p.lang.get();
        shown.with(|s| match s {
            Shown::Idle => String::new(),
            Shown::Fetching => Msg::HubFetching.t(lang).into(),
            Shown::Done(line) => line.text(lang).into(),
        })
    };
    h("div")
        .child(label("hf-id", p.prefs().text(Msg::HubId)))
        .child(
            h("div")
                .cls("hub-row")
                .child(
                    h("input")
                        .id("hf-id")
                        .testid("hf-id")
                        .attr("type", "text")
                        .attr("placeholder", "Qwen/Qwen3-8B")
                        .attr("spellcheck", "false")
                        .attr("autocomplete", "off")
                        .attr("autocapitalize", "off")
                        .on("input", move |ev| id.set(value_of(&ev))),
                )
                .child(button("hf-fetch", p.prefs().text(Msg::HubFetch), fetch)),
        )
        .child(
            h("p")
                .attr("role", "status")
                .dyn_attr("data-testid", move || {
                    Some(
                        shown
                            .with(|s| match s {
                                Shown::Idle => "hf-status",
                                Shown::Fetching => "hf-fetching",
                                Shown::Done(line) => line.test_id,
                            })
                            .into(),
                    )
                })
                .dyn_attr("class", move || {
                    let failed = shown.with(|s| matches!(s, Shown::Done(line) if line.failed));
                    Some(if failed { "error" } else { "hint" }.into())
                })
                .show(move || shown.with(|s| *s != Shown::Idle))
                .dyn_text(text),
        )
}

/// Fetches `id`'s config.json from `endpoint` (the link's `hf_endpoint`, checked here; default:
/// the Hub) in a task of its own; once it is here, hands the plan as it then stands, with the
/// config applied as a pasted one, to `apply`, and the outcome to `shown`.
fn fetch_and_apply(
    id: String,
    endpoint: Option<String>,
    plan: RwSignal<Plan>,
    shown: RwSignal<Shown>,
    apply: Rc<dyn Fn(Plan)>,
) {
    leptos::task::spawn_local(async move {
        let name = id.trim().to_string();
        let got = fetch_config(id, endpoint).await.and_then(|(v, cached)| {
            let mut next = plan.get_untracked();
            state::set_config_value(&mut next, v)
                .map(|()| (next, cached))
                .map_err(|e| HubError::Unsupported(e.to_string()))
        });
        let status = match got {
            Ok((next, cached)) => {
                apply(next);
                PageStatus::Applied { id: name, cached }
            }
            Err(error) => PageStatus::Failed { id: name, error },
        };
        shown.set(Shown::Done(StatusLine::of(&status)));
    });
}

/// The config and whether it came from the offline copy.
async fn fetch_config(id: String, endpoint: Option<String>) -> Result<(Value, bool), HubError> {
    let id = RepoId::parse(&id)?;
    let endpoint = match endpoint {
        Some(e) => Endpoint::parse(&e)?,
        None => Endpoint::default(),
    };
    if !hub::page_may_fetch(&endpoint, &browser::origin()) {
        return Err(HubError::Blocked(endpoint.origin().to_string()));
    }
    let url = endpoint.config_url(&id);
    let unreachable = |detail: String| HubError::Unreachable {
        endpoint: endpoint.as_str().to_string(),
        detail,
    };
    // The answer is read with the page's JSON code (its own chunk).
    if !json::load().await {
        return Err(unreachable("the page's JSON code".into()));
    }
    let key = hub::storage_key(&id);
    let text = match get(&url).await {
        Ok((status, body)) => hub::answer_text(&endpoint, &id, &url, status, body)?,
        Err(detail) => {
            return browser::stored(&key)
                .and_then(|t| read(&url, &t).ok())
                .map(|v| (v, true))
                .ok_or_else(|| unreachable(detail));
        }
    };
    let v = read(&url, &text)?;
    hub::check_config(&url, &v)?;
    browser::store(&key, &text);
    Ok((v, false))
}

/// A config.json's text as JSON (the size checked first: a page is not a config).
fn read(url: &str, text: &str) -> Result<Value, HubError> {
    let not_json = |detail: String| HubError::NotJson {
        url: url.to_string(),
        detail,
    };
    if text.len() > hub::MAX_CONFIG_BYTES {
        return Err(not_json(format!("{} bytes", text.len())));
    }
    match json::parse(text) {
        Ok(Ok(v)) if v.is_object() => Ok(v),
        Ok(Ok(_)) => Err(not_json("not an object".into())),
        Ok(Err(e)) => Err(not_json(e)),
        Err(_) => Err(not_json("the page's JSON code is missing".into())),
    }
}

/// One GET with the browser's fetch: the status and the body as text (Err inside: why it could
/// not be read), or why no answer came (offline, refused by CORS).
async fn get(url: &str) -> Result<(u16, Result<String, String>), String> {
    let why = |e: wasm_bindgen::JsValue| format!("{e:?}");
    let resp = JsFuture::from(window().fetch_with_str(url))
        .await
        .map_err(why)?;
    let resp: web_sys::Response = resp.dyn_into().map_err(why)?;
    let body = match resp.text() {
        Ok(p) => JsFuture::from(p)
            .await
            .map(|t| t.as_string().unwrap_or_default())
            .map_err(why),
        Err(e) => Err(why(e)),
    };
    Ok((resp.status(), body))
}
