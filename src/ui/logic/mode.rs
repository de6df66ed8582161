//! The mode panel's logic, as plain functions on the [`Plan`] so it is tested natively: the
//! train / fine-tune / infer switch and the keys each mode takes, the inference numbers (KV
//! cache, prefill and decode peaks, the longest context that fits), the context sweep of the
//! inference chart and its words, with their texts in the page's language and sizes in its
//! units. Every number comes from the
//! estimator ([`crate::plan::fit`], [`crate::estimator::estimate`]).

use super::i18n::{category_label, fmt_bytes, inference, Label, Lang, Msg, Units};
use crate::estimator::config::{KvDtype, LoraConfig, Mode, Quantization, Sparsity};
use crate::estimator::timeline::Category;
use crate::estimator::tune::same_targets;
use crate::estimator::units::Bytes;
use crate::estimator::Estimate;
use crate::plan::fit;
use crate::plan::sweep::Point;
use crate::plan::Plan;
use crate::plots::{Marker, StackedChart};
use crate::presets::models;
use crate::presets::text::{LoraChoice, LoraNote};

/// The mode switch: (value, label).
pub const MODE_OPTIONS: [(&str, Label); 3] = [
    ("train", Label::T(Msg::ModeTrain)),
    ("finetune", Label::T(Msg::ModeFinetune)),
    ("infer", Label::T(Msg::ModeInfer)),
];

/// Context lengths the inference chart sweeps (those the model cannot take are skipped).
pub const CONTEXT_POINTS: [u64; 11] = [
    128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072,
];

pub fn mode_value(plan: &Plan) -> &'static str {
    plan.mode.key()
}

/// Switches the mode and drops the keys the new mode refuses (a LoRA config when serving, a
/// context when training, quantizations fine-tuning cannot train), so a switch never turns a
/// valid plan into an error. Inference runs on one GPU: the multi-GPU layout goes.
pub fn set_mode(plan: &mut Plan, value: &str) {
    let mode = match value {
        "train" => Mode::Train,
        "finetune" => Mode::Finetune,
        "infer" => Mode::Infer,
        _ => return,
    };
    if plan.mode == mode {
        return;
    }
    plan.mode = mode;
    if mode != Mode::Finetune {
        plan.lora = None;
        plan.frozen = None;
    }
    if mode != Mode::Infer {
        plan.kv_cache_dtype = None;
        plan.context = None;
        plan.new_tokens = None;
        plan.sparsity = Sparsity::None;
    } else {
        plan.parallel = None;
        plan.offload = None;
    }
    let keep = match mode {
        Mode::Train => false,
        Mode::Finetune => plan.quantization == Quantization::Nf4 && plan.lora.is_some(),
        Mode::Infer => true,
    };
    if !keep {
        set_quantization(plan, "none");
    }
}

/// Options of the quantization select in the plan's mode: (value, label).
pub fn quantization_options(mode: Mode) -> Vec<(&'static str, Label)> {
    use Label::T;
    match mode {
        Mode::Train => vec![("none", T(Msg::QuantNoneTrain))],
        Mode::Finetune => vec![("none", T(Msg::QuantNoneTune)), ("nf4", T(Msg::QuantQlora))],
        Mode::Infer => vec![
            ("none", T(Msg::QuantNoneTrain)),
            ("int8", T(Msg::QuantInt8)),
            ("w8a8", T(Msg::QuantW8a8)),
            ("int4", T(Msg::QuantInt4)),
            ("nf4", Label::Name("NF4")),
            ("fp8", T(Msg::QuantFp8)),
            ("mxfp4", T(Msg::QuantMxfp4)),
        ],
    }
}

pub fn quantization_value(plan: &Plan) -> &'static str {
    plan.quantization.key()
}

/// Sets the weight format. NF4 fine-tuning is QLoRA: it adds adapters ([`new_lora`]) when the
/// plan has none, and double quantization as QLoRA uses it.
pub fn set_quantization(plan: &mut Plan, value: &str) {
    let q = match value {
        "none" => Quantization::None,
        "int8" => Quantization::Int8,
        "w8a8" => Quantization::W8a8,
        "int4" => Quantization::Int4,
        "nf4" => Quantization::Nf4,
        "fp8" => Quantization::Fp8,
        "mxfp4" => Quantization::Mxfp4,
        _ => return,
    };
    plan.quantization = q;
    plan.double_quant = q == Quantization::Nf4 && plan.mode == Mode::Finetune;
    plan.group_size = None;
    if q == Quantization::Nf4 && plan.mode == Mode::Finetune && plan.lora.is_none() {
        plan.lora = Some(new_lora(plan));
    }
    if !matches!(
        q,
        Quantization::None | Quantization::Int8 | Quantization::W8a8
    ) {
        plan.sparsity = Sparsity::None;
    }
}

/// The LoRA rank box (empty: no adapters).
pub fn lora_rank_text(plan: &Plan) -> String {
    plan.lora
        .as_ref()
        .map(|l| l.rank.to_string())
        .unwrap_or_default()
}

/// New adapters for the plan's model: peft's defaults, on the first targets its menu offers
/// (peft's default targets where it has them), so that turning LoRA on never starts from
/// targets the model refuses (Phi-3 has no `q_proj`).
fn new_lora(plan: &Plan) -> LoraConfig {
    let mut l = LoraConfig::default();
    if let Some(c) = lora_menu(plan).first() {
        l.targets = c.targets.iter().map(|s| s.to_string()).collect();
    }
    l
}

/// Sets the LoRA rank; `None` (an empty box) removes the adapters. A rank of 0 is kept for the
/// estimator to refuse with its message. The alpha follows the rank (peft's default ratio 1).
pub fn set_lora_rank(plan: &mut Plan, rank: Option<u64>) {
    match rank {
        None => plan.lora = None,
        Some(r) => {
            let mut l = plan.lora.clone().unwrap_or_else(|| new_lora(plan));
            l.alpha = r as f64;
            l.rank = r;
            plan.lora = Some(l);
        }
    }
}

/// The LoRA targets the plan's model takes, as its targets select offers them
/// ([`crate::presets::text::lora_menu`]); empty where LoRA is not modelled.
pub fn lora_menu(plan: &Plan) -> &'static [LoraChoice] {
    crate::plan::resolve::lora_menu(&plan.model, plan.hf_config.as_ref())
}

/// A choice's label in `lang`: the model's module names, with what peft calls them.
pub fn lora_choice_label(c: &LoraChoice, lang: Lang) -> String {
    let note = match c.note {
        LoraNote::None => return c.modules.to_string(),
        LoraNote::PeftDefault => Msg::LoraPeftDefault.t(lang),
        LoraNote::AllLinear => Msg::LoraAll.t(lang),
    };
    match (c.modules, lang) {
        ("", _) => note.to_string(),
        (m, Lang::Zh) => format!("{m}（{note}）"),
        (m, Lang::En) => format!("{m} ({note})"),
    }
}

/// The key of the choice in `menu` that wraps what the plan's adapters wrap (a link may spell
/// them `q_proj` or `q`); "" when none does (targets written in JSON, the CLI or a link).
pub fn lora_targets_value(plan: &Plan, menu: &[LoraChoice]) -> &'static str {
    let Some(l) = &plan.lora else {
        return "";
    };
    menu.iter()
        .find(|c| same_targets(&l.targets, c.targets))
        .map_or("", |c| c.key)
}

/// Sets the adapters' targets to the choice `key` of `menu` (an unknown key changes nothing).
pub fn set_lora_targets(plan: &mut Plan, menu: &[LoraChoice], key: &str) {
    if let (Some(l), Some(c)) = (plan.lora.as_mut(), menu.iter().find(|c| c.key == key)) {
        l.targets = c.targets.iter().map(|s| s.to_string()).collect();
    }
}

/// When the model has changed under adapters chosen for the previous one: their new targets,
/// the first choice of the model's `menu` (peft's defaults where it has them, as turning LoRA on
/// gives), unless the menu offers the current ones. Phi-3 has no `q_proj`, so LLaMA's `q, v`
/// would only be refused. `None`: nothing to change.
pub fn retargeted_lora(plan: &Plan, menu: &[LoraChoice]) -> Option<Vec<String>> {
    let (l, first) = (plan.lora.as_ref()?, menu.first()?);
    (!menu.iter().any(|c| same_targets(&l.targets, c.targets)))
        .then(|| first.targets.iter().map(|s| s.to_string()).collect())
}

/// The KV-cache dtype select: (value, label); "" = the activations' dtype.
pub const KV_OPTIONS: [(&str, Label); 6] = [
    ("", Label::T(Msg::KvActivationDtype)),
    ("fp32", Label::Name("FP32")),
    ("fp16", Label::Name("FP16")),
    ("bf16", Label::Name("BF16")),
    ("fp8", Label::Name("FP8 (E4M3)")),
    ("int8", Label::Name("INT8")),
];

pub fn kv_value(plan: &Plan) -> &'static str {
    match plan.kv_cache_dtype {
        None => "",
        Some(KvDtype::Fp32) => "fp32",
        Some(KvDtype::Fp16) => "fp16",
        Some(KvDtype::Bf16) => "bf16",
        Some(KvDtype::Fp8) => "fp8",
        Some(KvDtype::Int8) => "int8",
    }
}

pub fn set_kv(plan: &mut Plan, value: &str) {
    plan.kv_cache_dtype = match value {
        "fp32" => Some(KvDtype::Fp32),
        "fp16" => Some(KvDtype::Fp16),
        "bf16" => Some(KvDtype::Bf16),
        "fp8" => Some(KvDtype::Fp8),
        "int8" => Some(KvDtype::Int8),
        _ => None,
    };
}

/// The context the plan serves: its `context`, else its `seq`, else the model's default;
/// `None` for models that take images.
pub fn context_of(plan: &Plan) -> Option<u64> {
    plan.context
        .or(plan.seq)
        .or_else(|| match models::find(&plan.model)?.input {
            models::InputKind::Tokens { default_seq, .. } => Some(default_seq),
            models::InputKind::Image { .. } => None,
        })
}

pub use super::state::parse_batch as parse_count;

/// What the context chart's sweep depends on: the plan without its context, so editing the
/// context moves the marker and does not rerun the sweep.
pub fn context_base(plan: &Plan) -> Plan {
    Plan {
        context: None,
        ..plan.clone()
    }
}

/// Memory against context length for an inference plan (empty for other modes).
pub fn context_points(base: &Plan) -> Vec<Point> {
    if base.mode != Mode::Infer {
        return Vec::new();
    }
    fit::context_sweep(base, &CONTEXT_POINTS)
}

/// The inference chart of a context sweep in `lang` and `units`: the shared stacked chart with the
/// device total, the capacity and the plan's context (its device total) marked.
pub fn context_chart(
    points: &[Point],
    current: Option<(u64, Bytes)>,
    capacity: Option<Bytes>,
    lang: Lang,
    units: Units,
) -> StackedChart<'_> {
    let b = |x: Bytes| fmt_bytes(x, units);
    let mut c = StackedChart::new(points, Msg::ContextLength.t(lang));
    c.unit = crate::ui::logic::chart_data::unit_of(units);
    c.y_desc = format!("{} ({})", Msg::Memory.t(lang), units.axis_unit());
    c.categories = Category::ALL.map(|k| category_label(k, lang));
    c.current = current.map(|(ctx, total)| Marker {
        x: ctx,
        y: total,
        label: inference::context_marker(ctx, &b(total), lang),
    });
    c.capacity = capacity.map(|cap| (cap, format!("{} {}", Msg::Capacity.t(lang), b(cap))));
    c.device_label = Some(Msg::DeviceTotalLine.t(lang));
    c.empty = Msg::NoContextChart.t(lang);
    c
}

/// The inference numbers of an estimate: (label, value) rows; empty when it is not inference.
pub fn inference_rows(e: &Estimate, lang: Lang, units: Units) -> Vec<(&'static str, String)> {
    let Some(inf) = &e.inference else {
        return Vec::new();
    };
    let b = |x: Bytes| fmt_bytes(x, units);
    let mut rows = vec![
        (Msg::KvCache.t(lang), b(e.kv_cache_bytes)),
        (Msg::KvPerToken.t(lang), b(inf.kv_bytes_per_token)),
        (Msg::Weights.t(lang), b(e.weights_bytes)),
        (
            Msg::ContextNewTokens.t(lang),
            format!("{} / {}", inf.context, inf.new_tokens),
        ),
    ];
    // A vision-language model's context counts its text alone: the images' placeholder tokens,
    // which the prefill and the KV cache also take, are shown beside it.
    if inf.image_tokens > 0 {
        rows.push((Msg::ImageTokens.t(lang), inf.image_tokens.to_string()));
    }
    rows.push((Msg::PrefillPeak.t(lang), b(inf.prefill_peak)));
    if let Some(d) = inf.decode_peak {
        rows.push((Msg::DecodePeak.t(lang), b(d)));
    }
    rows.push((Msg::Peak.t(lang), b(e.peak_allocated)));
    rows.push((Msg::DeviceTotal.t(lang), b(e.device_total)));
    rows
}

/// The search for the longest prompt that fits the plan's GPU: the GPU's name and what the search
/// found (`Ok(None)`: not even one token). Kept apart from its sentence so a language switch
/// rewrites the sentence without searching again.
#[derive(Clone, Debug, PartialEq)]
pub struct MaxContext {
    pub gpu: &'static str,
    pub found: Result<Option<u64>, String>,
}

/// The longest prompt that fits the plan's GPU; `None` without a GPU or outside inference.
pub fn max_context(plan: &Plan) -> Option<MaxContext> {
    if plan.mode != Mode::Infer {
        return None;
    }
    let gpu = crate::plan::resolve::gpu(plan).ok().flatten()?;
    Some(MaxContext {
        gpu: gpu.name,
        found: fit::max_context(plan, gpu.memory).map_err(|e| e.to_string()),
    })
}

/// [`max_context`]'s finding as a sentence.
pub fn max_context_text(m: &MaxContext, lang: Lang) -> String {
    inference::max_context(m.gpu, &m.found, lang)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::estimate;

    fn llama() -> Plan {
        Plan {
            model: "llama-small".into(),
            batch: 1,
            seq: Some(256),
            dtype: crate::estimator::config::Precision::Bf16,
            ..Plan::default()
        }
    }

    #[test]
    fn every_mode_switch_keeps_a_valid_plan() {
        let mut p = llama();
        for m in ["finetune", "infer", "train", "infer", "finetune", "train"] {
            set_mode(&mut p, m);
            assert_eq!(mode_value(&p), m);
            estimate(&p).unwrap_or_else(|e| panic!("{m}: {e}"));
        }
        set_mode(&mut p, "junk");
        assert_eq!(mode_value(&p), "train");
    }

    #[test]
    fn switching_drops_the_keys_the_mode_refuses() {
        let mut p = llama();
        set_mode(&mut p, "finetune");
        set_quantization(&mut p, "nf4");
        assert!(
            p.lora.is_some() && p.double_quant,
            "QLoRA adds adapters and double quantization"
        );
        estimate(&p).unwrap();
        set_mode(&mut p, "infer");
        assert!(p.lora.is_none());
        assert_eq!(
            p.quantization,
            Quantization::Nf4,
            "serving keeps the 4-bit weights"
        );
        set_kv(&mut p, "fp8");
        p.context = Some(512);
        estimate(&p).unwrap();
        set_mode(&mut p, "train");
        assert_eq!(
            (p.quantization, p.kv_cache_dtype, p.context),
            (Quantization::None, None, None)
        );
        p.parallel = Some(Default::default());
        set_mode(&mut p, "infer");
        assert!(p.parallel.is_none());
    }

    #[test]
    fn adapters_follow_a_new_model_to_targets_it_has() {
        let mut p = Plan {
            mode: Mode::Finetune,
            lora: Some(LoraConfig {
                targets: vec!["q".into(), "k".into(), "v".into(), "o".into()],
                ..LoraConfig::default()
            }),
            ..Plan::new("llama-3-8b")
        };
        // Attention only is on Mixtral's menu too: kept.
        p.model = "mixtral-8x7b".into();
        assert_eq!(retargeted_lora(&p, lora_menu(&p)), None);
        // Phi-3 fuses q, k and v, DeepSeek-V3 projects through latent attention: their first
        // choices, which estimate.
        for m in ["phi-3-mini", "deepseek-v3"] {
            p.model = m.into();
            let menu = lora_menu(&p);
            let t = retargeted_lora(&p, menu).expect("new targets");
            assert!(same_targets(&t, menu[0].targets), "{m}: {t:?}");
            let mut q = p.clone();
            q.lora.as_mut().unwrap().targets = t;
            q.seq = Some(128);
            assert!(crate::plan::estimate(&q).is_ok(), "{m}");
            assert!(crate::plan::estimate(&p).is_err(), "{m} refuses q, k, v, o");
        }
        // No adapters, or a model without a menu: nothing.
        p.model = "resnet50".into();
        assert_eq!(retargeted_lora(&p, lora_menu(&p)), None);
        p.model = "phi-3-mini".into();
        p.lora = None;
        assert_eq!(retargeted_lora(&p, lora_menu(&p)), None);
    }

    #[test]
    fn lora_rank_box() {
        let mut p = llama();
        set_mode(&mut p, "finetune");
        assert_eq!(lora_rank_text(&p), "");
        set_lora_rank(&mut p, Some(16));
        let menu = lora_menu(&p);
        set_lora_targets(&mut p, menu, "qkvo");
        assert_eq!(
            (lora_rank_text(&p).as_str(), lora_targets_value(&p, menu)),
            ("16", "qkvo")
        );
        let a = estimate(&p).unwrap();
        set_lora_rank(&mut p, Some(64));
        assert!(estimate(&p).unwrap().trainable_params > a.trainable_params);
        set_lora_rank(&mut p, Some(0));
        assert!(estimate(&p).is_err(), "rank 0 is the estimator's message");
        set_lora_rank(&mut p, None);
        assert!(p.lora.is_none());
    }

    /// Each family's menu in its own module names: (preset, keys, first label, its targets).
    #[test]
    fn lora_menus_follow_the_model() {
        let cases: [(&str, &[&str], &str, &[&str]); 12] = [
            (
                "llama-small",
                &["qv", "qkvo", "all"],
                "q_proj, v_proj (peft default)",
                &["q", "v"],
            ),
            (
                "mistral-7b",
                &["qv", "qkvo", "all"],
                "q_proj, v_proj (peft default)",
                &["q", "v"],
            ),
            ("phi-3-mini", &["qkv", "qkv-o", "all"], "qkv_proj", &["qkv"]),
            (
                "modernbert-base",
                &["qkv", "qkv-o", "qkv-o-mlp"],
                "Wqkv",
                &["qkv"],
            ),
            (
                "bert-base",
                &["qv", "qkv"],
                "query, value (peft default)",
                &["q", "v"],
            ),
            (
                "roberta-base",
                &["qv", "qkv"],
                "query, value (peft default)",
                &["q", "v"],
            ),
            (
                "mixtral-8x7b",
                &["qv", "qkvo"],
                "q_proj, v_proj (peft default)",
                &["q", "v"],
            ),
            // peft 0.21.2 has no default targets for these.
            (
                "qwen3-30b-a3b",
                &["qv", "qkvo"],
                "q_proj, v_proj",
                &["q", "v"],
            ),
            (
                "gpt-oss-20b",
                &["qv", "qkvo"],
                "q_proj, v_proj",
                &["q", "v"],
            ),
            (
                "llava-1.5-7b",
                &["qv", "qkvo", "qkvo-mlp"],
                "q_proj, v_proj",
                &["q", "v"],
            ),
            (
                "deepseek-v3",
                &["qkvo"],
                "q_a_proj, q_b_proj, kv_a_proj_with_mqa, kv_b_proj, o_proj",
                &["q_a", "q_b", "kv_a", "kv_b", "o"],
            ),
            (
                "gemma-2-9b",
                &["qv", "qkvo", "all"],
                "q_proj, v_proj (peft default)",
                &["q", "v"],
            ),
        ];
        for (id, keys, label, targets) in cases {
            let menu = lora_menu(&Plan::new(id));
            let got: Vec<&str> = menu.iter().map(|c| c.key).collect();
            assert_eq!(got, keys, "{id}");
            assert_eq!(lora_choice_label(&menu[0], Lang::En), label, "{id}");
            assert_eq!(menu[0].targets, targets, "{id}");
            // Turning LoRA on starts from the menu's first choice.
            let mut p = Plan::new(id);
            set_mode(&mut p, "finetune");
            set_lora_rank(&mut p, Some(8));
            assert_eq!(lora_targets_value(&p, menu), keys[0], "{id}");
        }
        // LoRA is refused on GPT-2 and on models that are not language models: no menu.
        for id in ["gpt2", "resnet50", "vit_b_16", "lstm-lm", "no-such-model"] {
            assert!(lora_menu(&Plan::new(id)).is_empty(), "{id}");
        }
        let all = lora_menu(&Plan::new("llama-small"))[2];
        assert_eq!(lora_choice_label(&all, Lang::En), "all linear layers");
        let qv = lora_menu(&Plan::new("bert-base"))[0];
        assert_eq!(lora_choice_label(&qv, Lang::Zh).chars().last(), Some('）'));
    }

    #[test]
    fn a_pasted_config_gets_its_own_menu() {
        let deepseek = |q_lora_rank: serde_json::Value| Plan {
            hf_config: Some(serde_json::json!({
                "model_type": "deepseek_v3", "hidden_size": 64, "intermediate_size": 128,
                "moe_intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
                "num_key_value_heads": 4, "q_lora_rank": q_lora_rank, "kv_lora_rank": 16,
                "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 12,
                "n_routed_experts": 8, "n_shared_experts": 1, "num_experts_per_tok": 2,
                "n_group": 4, "topk_group": 2, "first_k_dense_replace": 1, "vocab_size": 256
            })),
            ..Plan::new("custom")
        };
        let one_q = lora_menu(&deepseek(serde_json::Value::Null));
        assert_eq!(one_q.len(), 1);
        assert_eq!(one_q[0].targets, ["q", "kv_a", "kv_b", "o"]);
        assert_eq!(lora_menu(&deepseek(24.into()))[0].targets[0], "q_a");
        let broken = Plan {
            hf_config: Some(serde_json::json!({"model_type": "t5"})),
            ..Plan::new("custom")
        };
        assert!(lora_menu(&broken).is_empty(), "the estimate says why");
    }

    #[test]
    fn the_select_shows_the_choice_the_targets_mean() {
        let mut p = llama();
        set_mode(&mut p, "finetune");
        set_lora_rank(&mut p, Some(8));
        let menu = lora_menu(&p);
        // A link or the CLI may spell the modules peft's way, in any order.
        p.lora.as_mut().unwrap().targets = vec!["v_proj".into(), "q_proj".into()];
        assert_eq!(lora_targets_value(&p, menu), "qv");
        p.lora.as_mut().unwrap().targets = vec!["all-linear".into()];
        assert_eq!(lora_targets_value(&p, menu), "all");
        // Targets no choice wraps select nothing (and are kept).
        p.lora.as_mut().unwrap().targets = vec!["q".into(), "k".into()];
        assert_eq!(lora_targets_value(&p, menu), "");
        set_lora_targets(&mut p, menu, "no-such-key");
        assert_eq!(p.lora.as_ref().unwrap().targets, ["q", "k"]);
        // ModernBERT's `Wo` is both output projections: peft's three names are its blocks' all.
        let mut mb = Plan::new("modernbert-base");
        set_mode(&mut mb, "finetune");
        set_lora_rank(&mut mb, Some(8));
        let menu = lora_menu(&mb);
        mb.lora.as_mut().unwrap().targets = vec!["Wqkv".into(), "Wo".into(), "Wi".into()];
        assert_eq!(lora_targets_value(&mb, menu), "qkv-o-mlp");
        // QLoRA on Phi-3 adds adapters it takes.
        let mut phi = Plan::new("phi-3-mini");
        set_mode(&mut phi, "finetune");
        set_quantization(&mut phi, "nf4");
        assert_eq!(phi.lora.as_ref().unwrap().targets, ["qkv"]);
    }

    #[test]
    fn quantization_options_follow_the_mode() {
        assert_eq!(quantization_options(Mode::Train).len(), 1);
        for q in ["int4", "fp8", "mxfp4"] {
            assert!(quantization_options(Mode::Infer).iter().any(|o| o.0 == q));
            let mut p = llama();
            p.mode = Mode::Infer;
            set_quantization(&mut p, q);
            assert_eq!(quantization_value(&p), q);
        }
        for (v, _) in KV_OPTIONS {
            let mut p = llama();
            set_kv(&mut p, v);
            assert_eq!(kv_value(&p), v);
        }
    }

    #[test]
    fn the_context_sweep_has_a_kv_band_that_grows() {
        let mut p = llama();
        set_mode(&mut p, "infer");
        let pts = context_points(&context_base(&p));
        assert!(pts.len() >= 4, "{} points", pts.len());
        let kv = |q: &Point| {
            q.by_category
                .iter()
                .find(|c| c.0 == Category::KvCache)
                .unwrap()
                .1
                 .0
        };
        assert!(pts.windows(2).all(|w| kv(&w[1]) > kv(&w[0])));
        let e = estimate(&p).unwrap();
        let rows = inference_rows(&e, Lang::En, Units::Binary);
        assert!(rows
            .iter()
            .any(|r| r.0 == "KV cache" && r.1.ends_with("iB")));
        let zh = inference_rows(&e, Lang::Zh, Units::Decimal);
        assert_eq!(zh.len(), rows.len());
        assert!(
            zh.iter()
                .any(|r| r.0 == "KV 缓存" && r.1.ends_with(" MB") && !r.1.contains("iB")),
            "{zh:?}"
        );
        assert!(
            zh.iter().any(|r| r.0 == "预填充峰值") && zh.iter().all(|r| !r.1.contains("iB")),
            "{zh:?}"
        );
        assert!(
            context_points(&context_base(&llama())).is_empty(),
            "no sweep when training"
        );
        assert_eq!(context_of(&p), Some(256));
        assert_eq!(context_of(&Plan::default()), None);
    }

    #[test]
    fn llava_serves_with_its_image_tokens_beside_the_context() {
        let mut p = Plan::new("llava-1.5-7b");
        set_mode(&mut p, "infer");
        p.context = Some(128);
        let rows = inference_rows(&estimate(&p).unwrap(), Lang::En, Units::Binary);
        let row = |label: &str| rows.iter().find(|r| r.0 == label).map(|r| r.1.clone());
        assert_eq!(row("Context / new tokens").as_deref(), Some("128 / 1"));
        assert_eq!(row("Image tokens").as_deref(), Some("576"));
        let text = inference_rows(&estimate(&llama_infer()).unwrap(), Lang::En, Units::Binary);
        assert!(text.iter().all(|r| !r.0.starts_with("Image")), "{text:?}");
    }

    fn llama_infer() -> Plan {
        let mut p = llama();
        set_mode(&mut p, "infer");
        p
    }

    #[test]
    fn the_context_chart_speaks_the_page_language() {
        let mut p = llama();
        set_mode(&mut p, "infer");
        let pts = context_points(&context_base(&p));
        let c = context_chart(
            &pts,
            Some((256, Bytes(3_000_000_000))),
            Some(Bytes(16_000_000_000)),
            Lang::Zh,
            Units::Decimal,
        );
        assert_eq!(
            (c.x_desc, c.y_desc.as_str(), c.unit.name),
            ("上下文长度（token）", "显存 (GB)", "GB")
        );
        assert_eq!(c.current.as_ref().unwrap().label, "上下文 256：3.00 GB");
        assert_eq!(c.capacity.as_ref().unwrap().1, "GPU 容量 16.0 GB");
        assert!(c.categories.contains(&"KV 缓存"));
        let en = context_chart(&pts, None, Some(Bytes(16 << 30)), Lang::En, Units::Binary);
        assert_eq!(
            (en.y_desc.as_str(), en.capacity.unwrap().1.as_str()),
            ("Memory (GiB)", "GPU capacity 16.0 GiB")
        );
    }

    #[test]
    fn max_context_needs_a_gpu() {
        let mut p = llama();
        set_mode(&mut p, "infer");
        assert_eq!(max_context(&p), None);
        p.gpu = Some("t4".into());
        let m = max_context(&p).unwrap();
        assert!(max_context_text(&m, Lang::En).starts_with("Longest context that fits T4"));
        let zh = max_context_text(&m, Lang::Zh);
        assert!(
            zh.starts_with("T4")
                && zh.contains("可容纳的最长上下文：")
                && zh.ends_with(" 个 token"),
            "{zh}"
        );
    }
}
