//! The page's components in a real browser (wasm-bindgen-test in headless Chromium): mount,
//! change an input as a user would, and read the DOM by `data-testid`.
//! Run with `make test` (or `CHROMEDRIVER=/usr/bin/chromedriver cargo test --target
//! wasm32-unknown-unknown --test web`).
#![cfg(target_arch = "wasm32")]

use leptos::mount::mount_to;
use leptos::prelude::*;
use vram_planner::ui::App;
use wasm_bindgen::JsCast;
use wasm_bindgen_test::*;
use web_sys::{Element, Event, EventInit, HtmlCanvasElement, HtmlElement, HtmlInputElement, HtmlSelectElement};

wasm_bindgen_test_configure!(run_in_browser);

/// A fresh container on the test page with the whole app mounted in it.
fn mount_app() -> (HtmlElement, impl Drop) {
    let host: HtmlElement = document().create_element("div").unwrap().unchecked_into();
    document().body().unwrap().append_child(&host).unwrap();
    let handle = mount_to(host.clone(), App);
    (host, handle)
}

/// Lets Leptos run its effects and the browser lay out: a macrotask, then a tick.
async fn settle() {
    let promise = js_sys::Promise::new(&mut |resolve, _| {
        window().set_timeout_with_callback_and_timeout_and_arguments_0(&resolve, 10).unwrap();
    });
    wasm_bindgen_futures::JsFuture::from(promise).await.unwrap();
    leptos::task::tick().await;
}

#[track_caller]
fn by_test_id(host: &HtmlElement, id: &str) -> Element {
    host.query_selector(&format!("[data-testid='{id}']")).unwrap().unwrap_or_else(|| panic!("no element with data-testid={id}"))
}

fn text(host: &HtmlElement, id: &str) -> String {
    by_test_id(host, id).text_content().unwrap_or_default()
}

fn input_in(host: &HtmlElement, id: &str, kind: &str) -> HtmlInputElement {
    by_test_id(host, id).query_selector(&format!("input[type={kind}]")).unwrap().expect("input").unchecked_into()
}

/// Sets an input's value and fires the event a user's edit fires.
fn set_value(el: &HtmlInputElement, value: &str, event: &str) {
    el.set_value(value);
    let init = EventInit::new();
    init.set_bubbles(true);
    el.dispatch_event(&Event::new_with_event_init_dict(event, &init).unwrap()).unwrap();
}

#[wasm_bindgen_test]
async fn page_shows_peak_and_draws_the_chart() {
    let (host, _app) = mount_app();
    settle().await;
    let peak = text(&host, "peak");
    assert!(peak.starts_with("Allocated peak: ") && peak.ends_with("iB"), "peak text: {peak:?}");
    assert!(host.query_selector("[data-testid='error']").unwrap().is_none(), "error shown for the default plan");
    let canvas: HtmlCanvasElement = by_test_id(&host, "chart-batch").query_selector("canvas").unwrap().expect("canvas").unchecked_into();
    let ratio = window().device_pixel_ratio();
    assert_eq!(canvas.width(), (canvas.client_width() as f64 * ratio).round() as u32, "backing store is not CSS width × devicePixelRatio");
}

#[wasm_bindgen_test]
async fn typing_a_batch_changes_the_peak_and_the_slider() {
    let (host, _app) = mount_app();
    settle().await;
    let before = text(&host, "peak");
    set_value(&input_in(&host, "batch", "number"), "256", "input");
    settle().await;
    let after = text(&host, "peak");
    assert_ne!(before, after, "peak did not change");
    assert_eq!(input_in(&host, "batch", "range").value(), "800", "slider did not follow the number box");
}

#[wasm_bindgen_test]
async fn moving_the_slider_sets_the_batch() {
    let (host, _app) = mount_app();
    settle().await;
    set_value(&input_in(&host, "batch", "range"), "900", "input");
    settle().await;
    assert_eq!(input_in(&host, "batch", "number").value(), "512");
    set_value(&input_in(&host, "batch", "range"), "0", "input");
    settle().await;
    assert_eq!(input_in(&host, "batch", "number").value(), "1");
}

#[wasm_bindgen_test]
async fn an_invalid_batch_shows_the_estimators_message() {
    let (host, _app) = mount_app();
    settle().await;
    set_value(&input_in(&host, "batch", "number"), "0", "input");
    settle().await;
    let msg = text(&host, "error");
    assert!(msg.contains("batch must be at least 1"), "message: {msg:?}");
    assert!(!text(&host, "peak").contains("iB"), "a peak is still shown");
    set_value(&input_in(&host, "batch", "number"), "8", "input");
    settle().await;
    assert!(host.query_selector("[data-testid='error']").unwrap().is_none(), "error stays after a valid batch");
}

#[wasm_bindgen_test]
async fn picking_another_model_changes_the_peak() {
    let (host, _app) = mount_app();
    settle().await;
    let picker: HtmlSelectElement = by_test_id(&host, "model").unchecked_into();
    assert!(picker.length() >= 2, "fewer than two models to pick");
    let before = text(&host, "peak");
    let other = (0..picker.length()).filter_map(|i| picker.item(i)).map(|o| o.unchecked_into::<web_sys::HtmlOptionElement>().value()).find(|v| *v != picker.value()).unwrap();
    picker.set_value(&other);
    picker.dispatch_event(&Event::new("change").unwrap()).unwrap();
    settle().await;
    assert_ne!(text(&host, "peak"), before, "peak did not change with the model ({other})");
}
