//! The mode, parallelism and comparison panels in a real browser (wasm-bindgen-test in headless
//! Chromium): build [`panels`] on a plan signal, act as a user would, read the DOM by
//! `data-testid` and the plan the panels wrote.
//! Run with `CHROMEDRIVER=/usr/bin/chromedriver cargo test --target wasm32-unknown-unknown --test web_panels`.
#![cfg(target_arch = "wasm32")]

use leptos::prelude::*;
use vram_planner::estimator::config::Mode;
use vram_planner::plan::Plan;
use vram_planner::ui::logic::i18n::{Lang, Units};
use vram_planner::ui::view::panels::panels;
use wasm_bindgen::JsCast;
use wasm_bindgen_test::*;
use web_sys::{
    Element, Event, EventInit, HtmlCanvasElement, HtmlElement, HtmlInputElement, HtmlSelectElement,
};

wasm_bindgen_test_configure!(run_in_browser);

/// Builds the panels under their own owner, as the page does; dropping the guard disposes them.
fn mount(plan: Plan) -> (HtmlElement, RwSignal<Plan>, Mounted) {
    let (host, signal, _, _, guard) = mount_in(plan, Lang::En, Units::Binary);
    (host, signal, guard)
}

/// The same in a language and units, with the signals that switch them.
fn mount_in(
    plan: Plan,
    lang: Lang,
    units: Units,
) -> (
    HtmlElement,
    RwSignal<Plan>,
    RwSignal<Lang>,
    RwSignal<Units>,
    Mounted,
) {
    let host: HtmlElement = document().create_element("div").unwrap().unchecked_into();
    document().body().unwrap().append_child(&host).unwrap();
    // Effects need Leptos's executor, which a mount sets up (the page's mount does this).
    drop(leptos::mount::mount_to(host.clone(), || ()));
    let owner = Owner::new();
    let (signal, lang, units) = owner.with(|| {
        (
            RwSignal::new(plan),
            RwSignal::new(lang),
            RwSignal::new(units),
        )
    });
    host.append_child(&owner.with(|| panels(signal, lang.into(), units.into())))
        .unwrap();
    (host.clone(), signal, lang, units, Mounted(owner, host))
}

struct Mounted(Owner, HtmlElement);

impl Drop for Mounted {
    fn drop(&mut self) {
        self.0.cleanup();
        self.1.remove();
    }
}

async fn settle() {
    let promise = js_sys::Promise::new(&mut |resolve, _| {
        window()
            .set_timeout_with_callback_and_timeout_and_arguments_0(&resolve, 10)
            .unwrap();
    });
    wasm_bindgen_futures::JsFuture::from(promise).await.unwrap();
    leptos::task::tick().await;
}

/// Settles until the layout search has answered (it runs a few steps per task), up to 20 s.
async fn search_answered(host: &HtmlElement) {
    for _ in 0..2000 {
        settle().await;
        if text(host, "layout-search-status").is_empty() {
            return;
        }
    }
    panic!(
        "the layout search never answered: {}",
        text(host, "layout-search")
    );
}

#[track_caller]
fn by_test_id(host: &HtmlElement, id: &str) -> Element {
    host.query_selector(&format!("[data-testid='{id}']"))
        .unwrap()
        .unwrap_or_else(|| panic!("no element with data-testid={id}"))
}

fn text(host: &HtmlElement, id: &str) -> String {
    by_test_id(host, id).text_content().unwrap_or_default()
}

fn fire(el: &Element, event: &str) {
    let init = EventInit::new();
    init.set_bubbles(true);
    el.dispatch_event(&Event::new_with_event_init_dict(event, &init).unwrap())
        .unwrap();
}

fn pick(host: &HtmlElement, id: &str, value: &str) {
    let s: HtmlSelectElement = by_test_id(host, id).unchecked_into();
    s.set_value(value);
    assert_eq!(s.value(), value, "{id} has no option {value}");
    fire(&s, "change");
}

fn type_in(host: &HtmlElement, id: &str, value: &str) {
    let i: HtmlInputElement = by_test_id(host, id).unchecked_into();
    i.set_value(value);
    fire(&i, "input");
}

fn click(el: &Element) {
    el.unchecked_ref::<HtmlElement>().click();
}

fn llama() -> Plan {
    Plan {
        model: "llama-small".into(),
        batch: 1,
        seq: Some(256),
        gpu: Some("t4".into()),
        ..Plan::default()
    }
}

fn gpt2() -> Plan {
    Plan {
        model: "gpt2".into(),
        batch: 4,
        seq: Some(256),
        gpu: Some("a100-40".into()),
        ..Plan::default()
    }
}

#[wasm_bindgen_test]
async fn infer_mode_shows_the_kv_cache_and_the_context_chart() {
    let (host, plan, _h) = mount(llama());
    settle().await;
    assert!(
        by_test_id(&host, "chart-context").has_attribute("hidden"),
        "context chart shown while training"
    );
    assert!(
        host.query_selector("[data-testid='kv-dtype']")
            .unwrap()
            .is_none(),
        "KV control shown while training"
    );
    pick(&host, "mode", "infer");
    settle().await;
    assert_eq!(plan.get_untracked().mode, Mode::Infer);
    let chart = by_test_id(&host, "chart-context");
    assert!(
        !chart.has_attribute("hidden"),
        "context chart hidden in infer mode"
    );
    let canvas: HtmlCanvasElement = chart
        .query_selector("canvas")
        .unwrap()
        .unwrap()
        .unchecked_into();
    assert!(canvas.client_width() > 0 && canvas.width() >= canvas.client_width() as u32);
    let kv = text(&host, "kv-summary");
    assert!(kv.contains("KV cache") && kv.contains("iB"), "{kv:?}");
    assert!(text(&host, "max-context").contains("tokens"));
    // A cheaper cache dtype and a longer context change the numbers.
    pick(&host, "kv-dtype", "fp8");
    settle().await;
    let fp8 = text(&host, "kv-summary");
    assert_ne!(fp8, kv);
    type_in(&host, "context", "1024");
    settle().await;
    assert_eq!(plan.get_untracked().context, Some(1024));
    assert_ne!(text(&host, "kv-summary"), fp8);
    // Fine-tuning shows the LoRA rank instead.
    pick(&host, "mode", "finetune");
    settle().await;
    type_in(&host, "lora-rank", "16");
    settle().await;
    assert_eq!(plan.get_untracked().lora.map(|l| l.rank), Some(16));
    // The targets select offers the model's choices, each option with its own test id.
    for key in ["qv", "qkvo", "all"] {
        by_test_id(&host, &format!("lora-targets-{key}"));
    }
    pick(&host, "lora-targets", "qkvo");
    settle().await;
    assert_eq!(
        plan.get_untracked().lora.map(|l| l.targets),
        Some(vec!["q".into(), "k".into(), "v".into(), "o".into()])
    );
    // Another model (Phi-3 fuses q, k and v) moves the adapters to a choice it offers.
    plan.update(|p| p.model = "phi-3-mini".into());
    settle().await;
    let select: HtmlSelectElement = by_test_id(&host, "lora-targets").unchecked_into();
    let key = select.value();
    assert!(!key.is_empty(), "a choice is selected");
    by_test_id(&host, &format!("lora-targets-{key}"));
    let targets = plan
        .get_untracked()
        .lora
        .map(|l| l.targets)
        .unwrap_or_default();
    assert!(!targets.iter().any(|t| t == "q"), "{targets:?}");
    assert!(host
        .query_selector("[data-testid='kv-dtype']")
        .unwrap()
        .is_none());
}

#[wasm_bindgen_test]
async fn tp_and_zero_change_the_per_gpu_numbers() {
    let (host, plan, _h) = mount(Plan {
        gpu: Some("a100-40".into()),
        ..llama()
    });
    settle().await;
    let one = text(&host, "per-gpu");
    assert!(one.contains("Device total"), "{one:?}");
    type_in(&host, "tp", "2");
    settle().await;
    assert_eq!(plan.get_untracked().parallel.map(|p| p.tp), Some(2));
    let tp2 = text(&host, "per-gpu");
    assert_ne!(tp2, one, "tp did not change the per-GPU numbers");
    type_in(&host, "dp", "4");
    pick(&host, "zero", "3");
    settle().await;
    let z3 = text(&host, "per-gpu");
    assert!(z3.contains("ZeRO-3") && z3 != tp2, "{z3:?}");
    let canvas: HtmlCanvasElement = by_test_id(&host, "chart-zero")
        .query_selector("canvas")
        .unwrap()
        .unwrap()
        .unchecked_into();
    assert!(canvas.width() > 0);
    // A layout the estimator refuses is a message, not a crash.
    type_in(&host, "tp", "5");
    settle().await;
    assert!(text(&host, "parallel-error").contains("Cannot estimate this layout"));
}

#[wasm_bindgen_test]
async fn a_found_layout_applies_with_one_click() {
    let (host, plan, _h) = mount(Plan {
        batch: 64,
        ..gpt2()
    });
    settle().await;
    click(&by_test_id(&host, "layout-search-run"));
    settle().await;
    search_answered(&host).await;
    let found = by_test_id(&host, "layout-search")
        .inner_html()
        .matches("data-testid=\"apply-layout\"")
        .count();
    assert!(
        found >= 1,
        "no layout found: {}",
        text(&host, "layout-search")
    );
    let before = plan.get_untracked();
    click(&by_test_id(&host, "apply-layout"));
    settle().await;
    let after = plan.get_untracked();
    assert_ne!(after, before, "applying a layout did not change the plan");
    assert!(after.parallel.is_some());
    assert!(
        text(&host, "per-gpu").contains("Fits the GPUyes"),
        "{}",
        text(&host, "per-gpu")
    );
}

#[wasm_bindgen_test]
async fn the_comparison_view_holds_mobilenet_resnet_and_more() {
    let (host, _plan, _h) = mount(Plan::default());
    settle().await;
    let view = text(&host, "compare");
    assert!(
        view.contains("MobileNetV2")
            && view.contains("ResNet-50")
            && view.contains("3.5 M")
            && view.contains("25.6 M"),
        "{view:?}"
    );
    let columns = || {
        by_test_id(&host, "compare")
            .inner_html()
            .matches("<th scope=\"col\"")
            .count()
    };
    assert_eq!(columns(), 3);
    click(&by_test_id(&host, "compare-add"));
    settle().await;
    assert_eq!(columns(), 4);
}

#[wasm_bindgen_test]
async fn inference_hides_the_layout_controls() {
    let (host, _plan, _h) = mount(llama());
    settle().await;
    let controls: HtmlElement = by_test_id(&host, "tp")
        .closest(".controls")
        .unwrap()
        .unwrap()
        .unchecked_into();
    assert!(controls.offset_height() > 0);
    pick(&host, "mode", "infer");
    settle().await;
    assert_eq!(
        controls.offset_height(),
        0,
        "layout controls still shown when serving"
    );
    assert!(text(&host, "parallel-panel").contains("estimated on one GPU"));
}

fn option_texts(host: &HtmlElement, id: &str) -> Vec<String> {
    let options = by_test_id(host, id).query_selector_all("option").unwrap();
    (0..options.length())
        .map(|i| options.item(i).unwrap().text_content().unwrap_or_default())
        .collect()
}

#[wasm_bindgen_test]
async fn the_panels_speak_chinese_and_switch_back_to_english() {
    let (host, plan, lang, units, _h) = mount_in(
        Plan {
            gpu: Some("a100-40".into()),
            ..llama()
        },
        Lang::Zh,
        Units::Decimal,
    );
    settle().await;
    let per_gpu = text(&host, "per-gpu");
    assert!(
        per_gpu.contains("优化器状态")
            && per_gpu.contains("设备总用量")
            && per_gpu.contains("能否放入 GPU是"),
        "{per_gpu:?}"
    );
    assert!(
        (per_gpu.contains(" GB") || per_gpu.contains(" MB")) && !per_gpu.contains("iB"),
        "not in GB: {per_gpu:?}"
    );
    assert_eq!(option_texts(&host, "mode"), ["训练", "微调", "推理"]);
    assert!(text(&host, "parallel-panel").contains("张量并行（tp）"));
    assert!(
        text(&host, "chart-zero").contains("黑线为 GPU 容量"),
        "{}",
        text(&host, "chart-zero")
    );
    let aria = by_test_id(&host, "chart-ranks")
        .query_selector("canvas")
        .unwrap()
        .unwrap()
        .get_attribute("aria-label")
        .unwrap_or_default();
    assert_eq!(aria, "各流水线阶段的显存，按用途划分");
    let compare = text(&host, "compare");
    assert!(
        compare.contains("配置对比")
            && compare.contains("添加当前设置")
            && compare.contains("峰值时的激活"),
        "{compare:?}"
    );
    assert_eq!(
        by_test_id(&host, "compare")
            .get_attribute("aria-label")
            .as_deref(),
        Some("对比")
    );
    // The search's outcome is rewritten, not searched again, on a switch.
    click(&by_test_id(&host, "layout-search-run"));
    settle().await;
    search_answered(&host).await;
    assert!(
        text(&host, "layout-search").contains("张 GPU"),
        "{}",
        text(&host, "layout-search")
    );
    let before = plan.get_untracked();

    lang.set(Lang::En);
    units.set(Units::Binary);
    settle().await;
    let per_gpu = text(&host, "per-gpu");
    assert!(
        per_gpu.contains("Optimizer state")
            && per_gpu.contains("Fits the GPUyes")
            && per_gpu.contains("GiB"),
        "{per_gpu:?}"
    );
    assert!(!per_gpu.contains("优化器"), "{per_gpu:?}");
    assert_eq!(option_texts(&host, "mode"), ["Train", "Fine-tune", "Infer"]);
    assert_eq!(
        by_test_id(&host, "mode")
            .unchecked_into::<HtmlSelectElement>()
            .value(),
        "train",
        "the switch lost the mode"
    );
    assert!(text(&host, "compare").contains("Add the current plan"));
    assert!(
        text(&host, "layout-search").contains("GPU: dp"),
        "{}",
        text(&host, "layout-search")
    );
    assert_eq!(
        plan.get_untracked(),
        before,
        "a language switch edited the plan"
    );

    // Serving in Chinese: the inference rows and the longest context.
    lang.set(Lang::Zh);
    pick(&host, "mode", "infer");
    settle().await;
    let kv = text(&host, "kv-summary");
    assert!(
        kv.contains("KV 缓存") && kv.contains("预填充峰值"),
        "{kv:?}"
    );
    assert!(
        text(&host, "max-context").contains("可容纳的最长上下文"),
        "{}",
        text(&host, "max-context")
    );
    assert_eq!(option_texts(&host, "kv-dtype")[0], "与激活相同的数据类型");
}

#[wasm_bindgen_test]
async fn a_box_that_is_not_a_whole_number_says_so_and_leaves_the_plan() {
    let (host, plan, _h) = mount(llama());
    settle().await;
    type_in(&host, "tp", "2");
    settle().await;
    let before = plan.get_untracked();
    type_in(&host, "tp", "-5");
    settle().await;
    assert_eq!(
        plan.get_untracked(),
        before,
        "an invalid box changed the plan"
    );
    assert_eq!(
        by_test_id(&host, "tp")
            .get_attribute("aria-invalid")
            .as_deref(),
        Some("true")
    );
    type_in(&host, "tp", "1");
    settle().await;
    assert_eq!(by_test_id(&host, "tp").get_attribute("aria-invalid"), None);
    assert_eq!(plan.get_untracked().parallel.map_or(1, |p| p.tp), 1);
}

#[wasm_bindgen_test]
async fn fsdp_mixed_precision_is_a_box_that_sets_fp32_master_weights() {
    let (host, plan, _h) = mount(Plan {
        gpu: Some("a100-40".into()),
        ..llama()
    });
    settle().await;
    let bx: HtmlInputElement = by_test_id(&host, "mixed-precision").unchecked_into();
    assert!(
        bx.closest("label")
            .unwrap()
            .unwrap()
            .has_attribute("hidden"),
        "shown without FSDP"
    );
    type_in(&host, "dp", "4");
    pick(&host, "zero", "fsdp");
    settle().await;
    assert!(
        !bx.closest("label")
            .unwrap()
            .unwrap()
            .has_attribute("hidden"),
        "hidden with FSDP"
    );
    bx.set_checked(true);
    fire(&bx, "change");
    settle().await;
    let p = plan.get_untracked();
    assert!(p
        .parallel
        .as_ref()
        .is_some_and(|q| q.mixed_precision.is_some()));
    assert_eq!(p.dtype, vram_planner::estimator::config::Precision::Fp32);
    assert!(
        text(&host, "per-gpu").contains("Device total"),
        "{}",
        text(&host, "per-gpu")
    );
}

#[wasm_bindgen_test]
async fn the_expert_degree_appears_for_experts_and_splits_them() {
    let field = |host: &HtmlElement| by_test_id(host, "ep").closest(".field").unwrap().unwrap();
    let (host, _plan, _h) = mount(gpt2());
    type_in(&host, "dp", "4");
    settle().await;
    assert!(
        field(&host).has_attribute("hidden"),
        "offered for a dense model"
    );
    drop(_h);
    let (host, plan, _h) = mount(Plan {
        model: "custom".into(),
        hf_config: Some(serde_json::json!({
            "model_type": "qwen3_moe", "hidden_size": 64, "intermediate_size": 128,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
            "vocab_size": 256, "head_dim": 16, "num_experts": 8, "num_experts_per_tok": 2,
            "moe_intermediate_size": 512})),
        ..gpt2()
    });
    type_in(&host, "dp", "4");
    settle().await;
    assert!(!field(&host).has_attribute("hidden"), "hidden for experts");
    let one = text(&host, "per-gpu");
    type_in(&host, "ep", "4");
    settle().await;
    assert_eq!(plan.get_untracked().parallel.map(|p| p.ep), Some(4));
    let four = text(&host, "per-gpu");
    assert!(four.contains("Device total") && four != one, "{four:?}");
    // Three does not divide the eight experts (nor dp = 4): a message, not a crash.
    type_in(&host, "ep", "3");
    settle().await;
    assert!(text(&host, "parallel-error").contains("Cannot estimate this layout"));
}
