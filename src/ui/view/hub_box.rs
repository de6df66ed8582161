//! The model-id box beside the config.json paste box: the id of a model on the Hugging Face Hub
//! and a Fetch button. Nothing is requested until the button is pressed. The fetched config is
//! applied as a pasted one is (the same plan, the same link) and remembered in localStorage, so
//! the same id works offline later. The fetch, its checks and the storage are a WebAssembly chunk
//! of their own in a `lazy-chunks` build, fetched with the first press; what each outcome means
//! is [`crate::ui::logic::hub`]'s.

use std::future::Future;
use std::pin::Pin;

use leptos::prelude::*;
use serde_json::Value;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;

use super::browser;
use super::dom::{button, h, label, value_of, El};
use super::planner::Planner;
use crate::plan::Plan;
use crate::ui::logic::hub::{self, Endpoint, HubError, PageStatus, RepoId};
use crate::ui::logic::i18n::{self, Msg};
use crate::ui::logic::{json, state, url};

/// The model-id box; `apply` takes the plan with the fetched config (and fetches the model code
/// it needs first, as the picker does).
pub fn hub_box(p: Planner, apply: impl Fn(Plan) + Copy + 'static) -> El {
    let id = RwSignal::new(String::new());
    let status = RwSignal::new(PageStatus::Idle);
    let fetch = move || {
        if matches!(status.get_untracked(), PageStatus::Fetching(_)) {
            return;
        }
        let text = id.get_untracked();
        let shown = text.trim().to_string();
        status.set(PageStatus::Fetching(shown.clone()));
        let endpoint = url::hf_endpoint(&browser::location_query());
        leptos::task::spawn_local(async move {
            let got = match start_fetch(text, endpoint, browser::origin()).await {
                Ok(pending) => pending.await,
                // The chunk with the fetch could not be had: the page is offline.
                Err(NoChunk) => Err(HubError::Unreachable {
                    endpoint: String::new(),
                    detail: String::new(),
                }),
            };
            let next = got.and_then(|(v, cached)| {
                let mut q = p.plan.get_untracked();
                state::set_config_value(&mut q, v)
                    .map(|()| (q, cached))
                    .map_err(|e| HubError::Unsupported(e.to_string()))
            });
            status.set(match next {
                Ok((q, cached)) => {
                    apply(q);
                    PageStatus::Applied { id: shown, cached }
                }
                Err(error) => PageStatus::Failed { id: shown, error },
            });
        });
    };
    h("div")
        .cls("hub")
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
                    Some(status.with(PageStatus::test_id).to_string())
                })
                .dyn_attr("class", move || {
                    Some(
                        if status.with(PageStatus::failed) {
                            "error"
                        } else {
                            "hint"
                        }
                        .into(),
                    )
                })
                .show(move || status.with(|s| *s != PageStatus::Idle))
                .dyn_text(move || status.with(|s| i18n::hub::status(s, p.lang.get()))),
        )
}

/// What a fetch gives: the config and whether it came from the offline copy.
type Fetched = Result<(Value, bool), HubError>;
type Pending = Pin<Box<dyn Future<Output = Fetched>>>;

/// The fetch's chunk could not be had.
pub struct NoChunk;

impl From<wasm_split_helpers::SplitLoaderError> for NoChunk {
    fn from(_: wasm_split_helpers::SplitLoaderError) -> Self {
        NoChunk
    }
}

split_point! { hub;
    /// Starts fetching `id`'s config.json from `endpoint` (default: the Hub) for a page at
    /// `origin`. A split function cannot be async itself: it hands back the fetch's future.
    fn start_fetch(id: String, endpoint: Option<Endpoint>, origin: String) -> Result<Pending, NoChunk> {
        Ok(Box::pin(fetch_config(id, endpoint, origin)))
    }
}

async fn fetch_config(id: String, endpoint: Option<Endpoint>, origin: String) -> Fetched {
    let id = RepoId::parse(&id)?;
    let endpoint = endpoint.unwrap_or_default();
    if !hub::page_may_fetch(&endpoint, &origin) {
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
        Ok((status, body)) => {
            hub::check_status(&endpoint, &id, status)?;
            body.map_err(|detail| HubError::NotJson {
                url: url.clone(),
                detail,
            })?
        }
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
