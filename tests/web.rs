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
use web_sys::{
    Element, Event, EventInit, HtmlCanvasElement, HtmlElement, HtmlInputElement, HtmlSelectElement,
};

wasm_bindgen_test_configure!(run_in_browser);

/// A fresh container on the test page with the whole app mounted in it.
fn mount_app() -> (HtmlElement, impl Drop) {
    // The page keeps its plan in the URL: each test starts from the default plan, whatever the
    // test before it left there.
    let path = window().location().pathname().unwrap();
    window()
        .history()
        .unwrap()
        .replace_state_with_url(&wasm_bindgen::JsValue::NULL, "", Some(&path))
        .unwrap();
    let host: HtmlElement = document().create_element("div").unwrap().unchecked_into();
    host.style().set_property("width", "1100px").unwrap();
    document().body().unwrap().append_child(&host).unwrap();
    let handle = mount_to(host.clone(), App);
    (host, handle)
}

async fn sleep(ms: i32) {
    let promise = js_sys::Promise::new(&mut |resolve, _| {
        window()
            .set_timeout_with_callback_and_timeout_and_arguments_0(&resolve, ms)
            .unwrap();
    });
    wasm_bindgen_futures::JsFuture::from(promise).await.unwrap();
}

/// Lets Leptos run its effects, the browser lay out, and the charts draw (they draw once the page
/// is idle after the next frame): a few frames' worth of time, then a tick.
async fn settle() {
    sleep(80).await;
    leptos::task::tick().await;
}

/// Waits up to `ms` for `probe` to hold, settling in between.
async fn until(ms: i32, mut probe: impl FnMut() -> bool) -> bool {
    for _ in 0..ms / 50 {
        if probe() {
            return true;
        }
        sleep(50).await;
        leptos::task::tick().await;
    }
    probe()
}

fn find(host: &HtmlElement, id: &str) -> Option<Element> {
    host.query_selector(&format!("[data-testid='{id}']"))
        .unwrap()
}

#[track_caller]
fn by_test_id(host: &HtmlElement, id: &str) -> Element {
    find(host, id).unwrap_or_else(|| panic!("no element with data-testid={id}"))
}

fn text(host: &HtmlElement, id: &str) -> String {
    by_test_id(host, id).text_content().unwrap_or_default()
}

fn input_in(host: &HtmlElement, id: &str, kind: &str) -> HtmlInputElement {
    by_test_id(host, id)
        .query_selector(&format!("input[type={kind}]"))
        .unwrap()
        .expect("input")
        .unchecked_into()
}

/// The `select` that is, or is inside, the element with test id `id`.
fn select_in(host: &HtmlElement, id: &str) -> HtmlSelectElement {
    let el = by_test_id(host, id);
    if el.tag_name() == "SELECT" {
        el.unchecked_into()
    } else {
        el.query_selector("select")
            .unwrap()
            .expect("select")
            .unchecked_into()
    }
}

/// Sets an input's value and fires the event a user's edit fires.
fn set_value(el: &HtmlInputElement, value: &str, event: &str) {
    el.set_value(value);
    fire(el, event);
}

fn fire(el: &web_sys::EventTarget, event: &str) {
    let init = EventInit::new();
    init.set_bubbles(true);
    el.dispatch_event(&Event::new_with_event_init_dict(event, &init).unwrap())
        .unwrap();
}

fn pick(select: &HtmlSelectElement, value: &str) {
    select.set_value(value);
    assert_eq!(select.value(), value, "no option {value}");
    fire(select, "change");
}

fn shown(host: &HtmlElement, id: &str) -> bool {
    find(host, id)
        .is_some_and(|e| !e.has_attribute("hidden") && e.closest("[hidden]").unwrap().is_none())
}

#[wasm_bindgen_test]
async fn page_shows_the_numbers_and_draws_every_chart() {
    let (host, _app) = mount_app();
    settle().await;
    let peak = text(&host, "peak");
    assert!(
        peak.starts_with("Allocated peak: ") && peak.ends_with("iB"),
        "peak text: {peak:?}"
    );
    assert!(
        find(&host, "error").is_none(),
        "error shown for the default plan"
    );
    for id in ["reserved", "device-total", "max-batch"] {
        assert!(
            text(&host, id).contains(char::is_numeric),
            "{id}: {:?}",
            text(&host, id)
        );
    }
    assert!(
        text(&host, "verdict").starts_with("Fits on RTX 4090"),
        "verdict: {:?}",
        text(&host, "verdict")
    );
    assert!(
        by_test_id(&host, "breakdown")
            .query_selector_all("tbody tr")
            .unwrap()
            .length()
            >= 10,
        "breakdown rows"
    );
    assert!(
        text(&host, "breakdown").contains("25.6 M params × 4 B = 97.5 MiB"),
        "the parameters' formula"
    );
    let ratio = window().device_pixel_ratio();
    for id in [
        "chart-batch",
        "chart-length",
        "chart-checkpoint",
        "chart-timeline",
        "chart-layers",
    ] {
        let canvas: HtmlCanvasElement = by_test_id(&host, id)
            .query_selector("canvas")
            .unwrap()
            .expect("canvas")
            .unchecked_into();
        // Charts out of view are not redrawn: bring each into view.
        canvas.scroll_into_view();
        let drawn = until(3000, || {
            canvas.client_width() > 0
                && canvas.width() == (canvas.client_width() as f64 * ratio).round() as u32
        })
        .await;
        assert!(
            drawn,
            "{id}: backing store {} is not CSS width {} × devicePixelRatio",
            canvas.width(),
            canvas.client_width()
        );
    }
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
    assert_eq!(
        input_in(&host, "batch", "range").value(),
        "800",
        "slider did not follow the number box"
    );
}

/// The breakdown's rows as (subtotal mark, text) with their `tr` elements.
fn breakdown_rows(host: &HtmlElement) -> Vec<(Element, bool, String)> {
    let trs = by_test_id(host, "breakdown")
        .query_selector_all("tbody tr")
        .unwrap();
    (0..trs.length())
        .map(|i| {
            let tr: Element = trs.item(i).unwrap().unchecked_into();
            let total = tr
                .get_attribute("class")
                .is_some_and(|c| c.split(' ').any(|x| x == "total"));
            let text = tr.text_content().unwrap_or_default();
            (tr, total, text)
        })
        .collect()
}

#[wasm_bindgen_test]
async fn the_breakdown_follows_a_batch_step_in_place_and_keeps_its_subtotals_marked() {
    let (host, _app) = mount_app();
    settle().await;
    let before = breakdown_rows(&host);
    let marks: Vec<bool> = before.iter().map(|r| r.1).collect();
    assert!(
        marks.iter().filter(|&&t| t).count() >= 3,
        "the allocated peak, reserved and device total rows are not marked: {marks:?}"
    );
    set_value(&input_in(&host, "batch", "number"), "96", "input");
    settle().await;
    let after = breakdown_rows(&host);
    assert_eq!(after.len(), before.len(), "a batch step changed the rows");
    assert!(
        before
            .iter()
            .zip(&after)
            .all(|(a, b)| a.0.is_same_node(Some(&b.0))),
        "a batch step rebuilt the rows instead of updating their cells"
    );
    assert_eq!(
        after.iter().map(|r| r.1).collect::<Vec<_>>(),
        marks,
        "the subtotal marks moved"
    );
    assert!(
        before.iter().zip(&after).any(|(a, b)| a.2 != b.2),
        "no row followed the batch"
    );
    // Another model: its rows still mark their subtotals.
    pick(&select_in(&host, "model"), "resnet18");
    settle().await;
    let other = breakdown_rows(&host);
    assert!(
        other.iter().filter(|r| r.1).count() >= 3,
        "another model's rows lost their subtotal marks"
    );
    assert!(other.iter().filter(|r| r.1).all(|r| !r.2.is_empty()));
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
    assert!(
        find(&host, "error").is_none(),
        "error stays after a valid batch"
    );
}

#[wasm_bindgen_test]
async fn picking_another_model_changes_the_peak_and_the_controls() {
    let (host, _app) = mount_app();
    settle().await;
    let picker = select_in(&host, "model");
    assert!(
        picker.query_selector_all("optgroup").unwrap().length() as usize
            == vram_planner::presets::models::Group::ALL.len(),
        "models are not grouped by family and architecture"
    );
    let before = text(&host, "peak");
    assert!(
        shown(&host, "resolution") && !shown(&host, "attention"),
        "a CNN shows a resolution and no attention kernel"
    );
    pick(&picker, "gpt2");
    settle().await;
    assert_ne!(
        text(&host, "peak"),
        before,
        "peak did not change with the model"
    );
    assert!(
        find(&host, "resolution").is_none() && shown(&host, "seq-len"),
        "GPT-2 shows a sequence length, not a resolution"
    );
    assert!(shown(&host, "attention"), "GPT-2 has an attention kernel");
    pick(&select_in(&host, "model"), "lstm-lm");
    settle().await;
    assert!(
        !shown(&host, "checkpointing") && !shown(&host, "attention"),
        "the LSTM has neither checkpointing nor attention"
    );
}

#[wasm_bindgen_test]
async fn the_verdict_follows_the_gpu() {
    let (host, _app) = mount_app();
    settle().await;
    set_value(&input_in(&host, "batch", "number"), "256", "input");
    pick(&select_in(&host, "gpu"), "a100-80");
    settle().await;
    assert_eq!(
        by_test_id(&host, "verdict")
            .get_attribute("data-fits")
            .as_deref(),
        Some("true"),
        "{}",
        text(&host, "verdict")
    );
    pick(&select_in(&host, "gpu"), "t4");
    settle().await;
    assert_eq!(
        by_test_id(&host, "verdict")
            .get_attribute("data-fits")
            .as_deref(),
        Some("false"),
        "{}",
        text(&host, "verdict")
    );
    assert!(
        text(&host, "device-total").contains("of 14.6 GiB"),
        "{}",
        text(&host, "device-total")
    );
}

#[wasm_bindgen_test]
async fn a_suggestion_applies_with_one_click() {
    let (host, _app) = mount_app();
    settle().await;
    set_value(&input_in(&host, "batch", "number"), "512", "input");
    let apply = || {
        host.query_selector("[data-testid='suggestions'] [data-testid='apply-suggestion']")
            .unwrap()
    };
    assert!(
        until(90_000, || apply().is_some()).await,
        "no suggestion for a plan that does not fit: {}",
        text(&host, "suggestions")
    );
    assert_eq!(
        by_test_id(&host, "verdict")
            .get_attribute("data-fits")
            .as_deref(),
        Some("false")
    );
    apply().unwrap().unchecked_into::<HtmlElement>().click();
    assert!(
        until(5000, || by_test_id(&host, "verdict")
            .get_attribute("data-fits")
            .as_deref()
            == Some("true"))
        .await,
        "the first suggestion did not make it fit: {}",
        text(&host, "verdict")
    );
}

#[wasm_bindgen_test]
async fn the_language_switch_shows_chinese() {
    let (host, _app) = mount_app();
    settle().await;
    pick(&select_in(&host, "lang"), "zh");
    settle().await;
    assert!(
        text(&host, "peak").starts_with("已分配峰值："),
        "{}",
        text(&host, "peak")
    );
    assert!(
        text(&host, "verdict").starts_with("可以放入"),
        "{}",
        text(&host, "verdict")
    );
    assert!(
        text(&host, "breakdown").contains("个参数"),
        "breakdown not translated"
    );
    pick(&select_in(&host, "lang"), "en");
    settle().await;
    assert!(text(&host, "peak").starts_with("Allocated peak"));
}

#[wasm_bindgen_test]
async fn every_chart_has_a_data_table() {
    let (host, _app) = mount_app();
    settle().await;
    for id in [
        "chart-batch",
        "chart-length",
        "chart-checkpoint",
        "chart-timeline",
        "chart-layers",
    ] {
        let fig = by_test_id(&host, id);
        let details = fig.query_selector("details").unwrap().expect("details");
        details.set_attribute("open", "").unwrap();
        fire(&details, "toggle");
        let rows = || fig.query_selector_all("tbody tr").unwrap().length();
        assert!(until(3000, || rows() > 0).await, "{id}: no table rows");
    }
}

/// The page starts in the language and units that index.html's first script read from storage
/// (`window.vpLang`, `window.vpUnits`), so it need not touch storage before its first numbers.
#[wasm_bindgen_test]
async fn the_remembered_language_and_units_open_the_page() {
    let w = window();
    js_sys::Reflect::set(&w, &"vpLang".into(), &"zh".into()).unwrap();
    js_sys::Reflect::set(&w, &"vpUnits".into(), &"gb".into()).unwrap();
    let (host, app) = mount_app();
    settle().await;
    let (peak, units) = (text(&host, "peak"), select_in(&host, "units").value());
    let _ = js_sys::Reflect::delete_property(&w, &"vpLang".into());
    let _ = js_sys::Reflect::delete_property(&w, &"vpUnits".into());
    drop(app);
    assert!(peak.starts_with("已分配峰值："), "{peak}");
    assert_eq!(units, "gb");
    assert!(peak.ends_with("GB"), "{peak}");
}

/// The page is idle: no background simulation left to run.
fn idle(host: &HtmlElement) -> bool {
    host.query_selector("[data-busy='false']")
        .unwrap()
        .is_some()
}

/// Rebuilding the suggestions list frees what the list it replaces held: its buttons' listeners
/// (each holding the plan its suggestion applies) are removed with it, so the page's listener
/// count, and its memory, stay flat however often the plan changes.
#[wasm_bindgen_test]
async fn rebuilding_the_suggestions_list_a_thousand_times_keeps_listeners_and_memory_flat() {
    use vram_planner::ui::view::dom::live_listeners;
    let (host, _app) = mount_app();
    settle().await;
    let batch = input_in(&host, "batch", "number");
    let list = || {
        host.query_selector("[data-testid='suggestions'] ol")
            .unwrap()
    };
    let buttons = || {
        host.query_selector_all("[data-testid='apply-suggestion']")
            .unwrap()
            .length()
    };
    // Two batches that do not fit: once each has been shown with the page idle, their
    // suggestions' simulations are cached and every later switch rebuilds the full list at once.
    for b in ["512", "640", "512"] {
        set_value(&batch, b, "input");
        settle().await;
        assert!(
            until(90_000, || idle(&host) && list().is_some()).await,
            "no suggestions at batch {b}: {}",
            text(&host, "suggestions")
        );
    }
    let memory = || {
        wasm_bindgen::memory()
            .unchecked_into::<js_sys::WebAssembly::Memory>()
            .buffer()
            .unchecked_into::<js_sys::ArrayBuffer>()
            .byte_length()
    };
    let (listeners_before, buttons_before, memory_before) = (live_listeners(), buttons(), memory());
    // Out of the layout while the plan flips: a rebuild then waits for no frame to be drawn, so a
    // thousand of them fit in the test run's time limit.
    host.style().set_property("display", "none").unwrap();
    let start = js_sys::Date::now();
    for i in 0..1000 {
        let old = list();
        set_value(&batch, if i % 2 == 0 { "640" } else { "512" }, "input");
        // Rebuilt once the page is idle: a new list element, with its buttons.
        let mut rebuilt = false;
        for _ in 0..2000 {
            if list().is_some_and(|l| Some(&l) != old.as_ref()) {
                rebuilt = true;
                break;
            }
            sleep(1).await;
        }
        assert!(rebuilt, "rebuild {i}: {}", text(&host, "suggestions"));
    }
    // The last switch went back to batch 512: the list has as many buttons as at the start.
    settle().await;
    assert!(until(90_000, || idle(&host) && list().is_some()).await);
    let (listeners_after, buttons_after, memory_after) = (live_listeners(), buttons(), memory());
    console_log!(
        "1000 rebuilds in {:.0} ms: listeners {listeners_before} -> {listeners_after}, \
         apply buttons {buttons_before} -> {buttons_after}, wasm memory {memory_before} -> \
         {memory_after} bytes",
        js_sys::Date::now() - start
    );
    assert_eq!(buttons_after, buttons_before);
    // The same plan shows the same page: exactly the same listeners. A leak would add one per
    // button per rebuild (thousands).
    assert_eq!(listeners_after, listeners_before);
    // Memory only grows in 64 KiB pages and never shrinks; the caches the page keeps (two
    // batches' models and suggestions, already filled) do not grow here. One page of slack for
    // the allocator's fragmentation; the leaked closures (a plan each, six per rebuild) would
    // need well over a megabyte.
    assert!(
        memory_after <= memory_before + 64 * 1024,
        "wasm memory grew from {memory_before} to {memory_after} bytes"
    );
}

/// The model-id box, built when its section opens, answers what it can without the network: a
/// malformed id, and a mirror the page's Content-Security-Policy would refuse (asked of no one;
/// the link's mirror stays in the address as the plan changes).
#[wasm_bindgen_test]
async fn the_model_id_box_refuses_a_bad_id_and_a_mirror_outside_the_policy() {
    let (host, _app) = mount_app();
    settle().await;
    // The box is built when its section first opens.
    assert!(
        find(&host, "hf-id").is_none(),
        "the box is built before it is opened"
    );
    by_test_id(&host, "config")
        .query_selector("summary")
        .unwrap()
        .unwrap()
        .unchecked_into::<HtmlElement>()
        .click();
    assert!(
        until(3000, || find(&host, "hf-id").is_some()).await,
        "opening the section built no box"
    );
    let id: HtmlInputElement = by_test_id(&host, "hf-id").unchecked_into();
    let press = || {
        by_test_id(&host, "hf-fetch")
            .unchecked_into::<HtmlElement>()
            .click()
    };
    set_value(&id, "not an id", "input");
    press();
    assert!(
        until(3000, || shown(&host, "hf-bad-id")).await,
        "no hf-bad-id"
    );
    assert!(text(&host, "hf-bad-id").contains("owner/name"));

    let path = window().location().pathname().unwrap();
    window()
        .history()
        .unwrap()
        .replace_state_with_url(
            &wasm_bindgen::JsValue::NULL,
            "",
            Some(&format!("{path}?hf_endpoint=https%3A%2F%2Fhf-mirror.com")),
        )
        .unwrap();
    set_value(&id, "Qwen/Qwen3-8B", "input");
    press();
    assert!(
        until(3000, || shown(&host, "hf-blocked")).await,
        "no hf-blocked"
    );
    assert!(text(&host, "hf-blocked").contains("huggingface.co"));
    set_value(&input_in(&host, "batch", "number"), "8", "input");
    settle().await;
    let query = window().location().search().unwrap();
    assert!(
        until(3000, || window()
            .location()
            .search()
            .unwrap()
            .contains("batch=8"))
        .await,
        "{query}"
    );
    let query = window().location().search().unwrap();
    let kept = vram_planner::ui::logic::url::hf_endpoint(&query);
    assert_eq!(kept.as_deref(), Some("https://hf-mirror.com"), "{query}");
}

#[wasm_bindgen_test]
async fn a_mixture_of_experts_lists_its_parts_in_the_breakdown() {
    let (host, _app) = mount_app();
    settle().await;
    assert!(
        !text(&host, "breakdown").contains("MoE:"),
        "a CNN has no experts"
    );
    pick(&select_in(&host, "model"), "gpt-oss-20b");
    settle().await;
    let listed = until(20_000, || {
        let t = text(&host, "breakdown");
        t.contains("MoE: routed experts")
            && t.contains("MoE: router")
            && t.contains("MoE: token dispatch")
    })
    .await;
    assert!(listed, "{}", text(&host, "breakdown"));
}
