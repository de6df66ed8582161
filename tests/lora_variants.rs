//! peft LoRA beyond the LLaMA layer: Phi-3's fused `qkv_proj` and `gate_up_proj` (one adapter
//! each, its `lora_B` as wide as the fused output), in bf16, under autocast and over NF4 weights
//! (QLoRA), RoBERTa's `query`/`key`/`value` and ModernBERT's `Wqkv`, `Wo`, `Wi`, measured by
//! `tests/data/oracle/lora_steps.py`; and the targets each model refuses because it has no module
//! of that name.

mod common;

use serde_json::json;
use vram_planner::plan::{build_graph, Plan};

#[test]
fn measured_lora_steps_replay_within_a_fiftieth_of_a_percent() {
    common::assert_replays(&common::LORA, RECORDS, 0.0002);
}

const RECORDS: usize = 9;

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
