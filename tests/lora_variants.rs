//! peft LoRA beyond the LLaMA layer: Phi-3's fused `qkv_proj` and `gate_up_proj` (one adapter
//! each, its `lora_B` as wide as the fused output), in bf16, under autocast and over NF4 weights
//! (QLoRA), RoBERTa's `query`/`key`/`value`, ModernBERT's `Wqkv`, `Wo`, `Wi` and LLaVA's
//! language model with the CLIP tower's same-named projections, measured by
//! `tests/data/oracle/lora_steps.py`; and the targets each model refuses because it has no module
//! of that name.

mod common;

use serde_json::json;
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
fn llava_refuses_all_linear_and_4_bit_weights() {
    let e = build_graph(&llava(json!({"rank": 8, "targets": ["all"]})))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("vision tower and the projector"), "{e}");
    let mut p = llava(json!({"rank": 8}));
    p.quantization = vram_planner::estimator::config::Quantization::Nf4;
    let e = build_graph(&p).err().unwrap().to_string();
    assert!(e.contains("llava"), "{e}");
    let e = build_graph(&llava(json!({"rank": 8, "targets": ["qkv"]})))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("q, k, v, o, gate, up, down"), "{e}");
}
