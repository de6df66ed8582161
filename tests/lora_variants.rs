//! peft LoRA beyond the LLaMA layer: Phi-3's fused `qkv_proj` and `gate_up_proj` (one adapter
//! each, its `lora_B` as wide as the fused output), in bf16, under autocast and over NF4 weights
//! (QLoRA), RoBERTa's `query`/`key`/`value`, ModernBERT's `Wqkv`, `Wo`, `Wi` and LLaVA's
//! language model with the CLIP tower's same-named projections, measured by
//! `tests/data/oracle/lora_steps.py`; and the targets each model refuses because it has no module
//! of that name.

mod common;

use serde_json::json;
use vram_planner::plan::resolve::lora_menu;
use vram_planner::plan::{build_graph, Plan};

#[test]
fn measured_lora_steps_replay_within_a_fiftieth_of_a_percent() {
    common::assert_replays(&common::LORA, RECORDS, 0.0002);
}

const RECORDS: usize = 13;

fn plan(model_type: &str, lora: serde_json::Value) -> Plan {
    serde_json::from_value(json!({
        "model": "custom", "mode": "finetune", "batch": 1, "seq": 32, "dtype": "bf16",
        "hf_config": {"model_type": model_type, "hidden_size": 64, "intermediate_size": 128,
                      "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4,
                      "vocab_size": 256},
        "lora": lora
    }))
    .unwrap()
}

fn adapters(p: &Plan) -> Vec<Vec<u64>> {
    let g = build_graph(p).unwrap();
    g.tensors
        .iter()
        .filter(|t| t.is_param && t.requires_grad)
        .map(|t| t.shape.clone())
        .collect()
}

#[test]
fn a_fused_projection_takes_one_adapter_of_its_fused_width() {
    let p = plan(
        "phi3",
        json!({"rank": 8, "targets": ["qkv_proj", "gate_up_proj"]}),
    );
    // Per layer: qkv_proj [64 -> 3·64] and gate_up_proj [64 -> 2·128].
    assert_eq!(
        adapters(&p),
        [[8, 64], [192, 8], [8, 64], [256, 8]].repeat(2)
    );
}

#[test]
fn targets_a_model_lacks_are_refused_with_its_own_names() {
    for (model, targets, names) in [
        ("phi3", json!(["q", "v"]), "qkv (qkv_proj)"),
        ("roberta", json!(["o"]), "query, key, value"),
        ("roberta", json!(["all"]), "MLM head"),
        ("modernbert", json!(["all"]), "MLM head"),
        ("modernbert", json!(["q"]), "Wqkv"),
        ("llama", json!(["qkv"]), "q, k, v, o, gate, up, down"),
    ] {
        let p = plan(model, json!({"rank": 8, "targets": targets}));
        let e = build_graph(&p).err().unwrap().to_string();
        assert!(e.contains(names), "{model} {targets}: {e}");
    }
    let p = plan("gpt2", json!({"rank": 8}));
    assert!(build_graph(&p)
        .err()
        .unwrap()
        .to_string()
        .contains("Conv1D"));
}

#[test]
fn encoders_keep_their_model_dtype_weights() {
    let mut p = plan("roberta", json!({"rank": 8}));
    p.quantization = vram_planner::estimator::config::Quantization::Nf4;
    let e = build_graph(&p).err().unwrap().to_string();
    assert!(e.contains("not roberta"), "{e}");
}

fn llava(lora: serde_json::Value) -> Plan {
    serde_json::from_value(json!({
        "model": "custom", "mode": "finetune", "batch": 1, "seq": 32, "dtype": "bf16",
        "hf_config": {"model_type": "llava", "vision_feature_layer": -2,
                      "vision_feature_select_strategy": "default", "image_token_index": 200,
                      "vision_config": {"model_type": "clip_vision_model", "hidden_size": 32,
                                        "intermediate_size": 64, "num_hidden_layers": 3,
                                        "num_attention_heads": 2, "image_size": 32, "patch_size": 16},
                      "text_config": {"model_type": "llama", "hidden_size": 64,
                                      "intermediate_size": 128, "num_hidden_layers": 1,
                                      "num_attention_heads": 4, "num_key_value_heads": 4,
                                      "vocab_size": 256}},
        "lora": lora
    }))
    .unwrap()
}

#[test]
fn llava_targets_also_wrap_the_towers_projections_of_the_same_name() {
    let p = llava(json!({"rank": 4, "targets": ["q", "v", "o"]}));
    // peft's suffix match: `q_proj` and `v_proj` of the tower's two layers before the selected
    // hidden state (the third feeds nothing and trains nothing), then the language model's
    // `q_proj`, `v_proj` and `o_proj`; the tower's `out_proj` is no `o_proj`.
    assert_eq!(
        adapters(&p),
        [
            [[4, 32], [32, 4], [4, 32], [32, 4]].repeat(2),
            [[4, 64], [64, 4]].repeat(3)
        ]
        .concat()
    );
    let lora_params = |p: &Plan| {
        let g = build_graph(p).unwrap();
        g.tensors
            .iter()
            .filter(|t| t.is_param && t.shape.contains(&4))
            .count()
    };
    assert_eq!(lora_params(&p), 2 * (2 * 3 + 3));
}

#[test]
fn llava_refuses_all_linear_and_quantizes_every_linear_but_the_head_under_qlora() {
    let e = build_graph(&llava(json!({"rank": 8, "targets": ["all"]})))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("vision tower and the projector"), "{e}");
    // QLoRA: transformers' `replace_with_bnb_linear` swaps every `nn.Linear` but `lm_head`: the
    // tower's q, k, v, out_proj [32, 32] and fc1, fc2 (three layers), the projector's linear_1,
    // linear_2 [64, 32], [64, 64], the language model's seven projections.
    let mut p = llava(json!({"rank": 8}));
    p.quantization = vram_planner::estimator::config::Quantization::Nf4;
    let g = build_graph(&p).unwrap();
    let mut nf4: Vec<[u64; 2]> = g
        .tensors
        .iter()
        .filter(|t| t.is_param && t.dtype == vram_planner::estimator::units::DType::I4)
        .map(|t| [t.shape[0], t.shape[1]])
        .collect();
    nf4.sort();
    let mut want = [[32, 32], [32, 32], [32, 32], [32, 32], [64, 32], [32, 64]].repeat(3);
    want.extend([[64, 32], [64, 64]]);
    want.extend([[64, 64]; 4]);
    want.extend([[128, 64], [128, 64], [64, 128]]);
    want.sort();
    assert_eq!(nf4, want);
    // The refusal of a target LLaVA lacks offers only what it takes: `all` is refused above.
    let e = build_graph(&llava(json!({"rank": 8, "targets": ["qkv"]})))
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.ends_with("names no llama module: target q, k, v, o, gate, up, down"),
        "{e}"
    );
}

#[test]
fn a_mixture_of_experts_offers_only_its_attention() {
    let e = build_graph(&plan("mixtral", json!({"rank": 8, "targets": ["qkv"]})))
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.ends_with("names no mixtral module: target q, k, v, o"),
        "{e}"
    );
}

fn small_deepseek(q_lora_rank: serde_json::Value) -> Plan {
    serde_json::from_value(json!({
        "model": "custom", "mode": "finetune", "batch": 1, "seq": 32, "dtype": "bf16",
        "hf_config": {"model_type": "deepseek_v3", "hidden_size": 64, "intermediate_size": 128,
                      "moe_intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
                      "num_key_value_heads": 4, "q_lora_rank": q_lora_rank, "kv_lora_rank": 16,
                      "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 12,
                      "n_routed_experts": 8, "n_shared_experts": 1, "num_experts_per_tok": 2,
                      "n_group": 4, "topk_group": 2, "first_k_dense_replace": 1, "vocab_size": 256},
        "lora": {"rank": 4}
    }))
    .unwrap()
}

/// The page's targets menu offers nothing the builder refuses: every choice of every family
/// builds, and each wraps more than the one before it.
#[test]
fn every_choice_of_the_targets_menu_builds() {
    let mut plans: Vec<Plan> = [
        "llama",
        "phi3",
        "bert",
        "roberta",
        "modernbert",
        "mixtral",
        "qwen3_moe",
    ]
    .iter()
    .map(|mt| plan(mt, json!({"rank": 4})))
    .collect();
    plans.extend([
        llava(json!({"rank": 4})),
        small_deepseek(json!(24)),
        small_deepseek(serde_json::Value::Null),
    ]);
    for mut p in plans {
        let mt = p.hf_config.as_ref().unwrap()["model_type"].clone();
        let menu = lora_menu(&p.model, p.hf_config.as_ref());
        assert!(!menu.is_empty(), "{mt}");
        let mut last = 0;
        for c in menu {
            p.lora.as_mut().unwrap().targets = c.targets.iter().map(|s| s.to_string()).collect();
            let n = adapters(&p).len();
            assert!(n > last, "{mt} {}: {n} adapter tensors", c.key);
            last = n;
        }
    }
    assert!(lora_menu("custom", Some(&json!({"model_type": "gpt2"}))).is_empty());
}
