//! A skewed router (`expert_skew`): the busiest expert's tokens as a multiple of the balanced
//! share, what it changes in the eager per-expert loop (the busiest expert's inputs, outputs and
//! temporaries) and what it does not (the grouped GEMMs of gpt-oss's MXFP4 experts), and the
//! settings it is refused for.

use serde_json::json;
use vram_planner::estimator::config::Precision;
use vram_planner::estimator::tune::{Mode, Quantization};
use vram_planner::plan::{build_graph, estimate, Plan};
use vram_planner::presets::moe::{Moe, MoeKind};
use vram_planner::ui::logic::url;

fn moe(experts: u64, top_k: u64) -> Moe {
    Moe {
        kind: MoeKind::Qwen3,
        experts,
        top_k,
        expert_intermediate: 8,
        norm_topk: false,
        shared_intermediate: None,
        sparse_step: 1,
        dense_layers: vec![],
        aux_loss: false,
    }
}

#[test]
fn the_busiest_expert_takes_its_multiple_and_the_rest_share_what_is_left() {
    let m = moe(8, 2);
    // 100 tokens × top 2 over 8 experts: 25 each when balanced.
    let shares =
        |skew: f64| -> Vec<u64> { (0..8).map(|e| m.tokens_of(100, e, skew).unwrap()).collect() };
    assert_eq!(
        shares(1.0),
        (0..8)
            .map(|e| m.balanced_tokens(100, e))
            .collect::<Vec<_>>()
    );
    let s = shares(2.5);
    assert_eq!(s[0], 63, "⌈2.5 · 200 / 8⌉");
    assert_eq!(s.iter().sum::<u64>(), 200);
    assert!(s[1..].iter().all(|&n| n == 19 || n == 20), "{s:?}");
    // A token picks an expert once: the busiest expert gets at most every token.
    assert_eq!(shares(4.0)[0], 100);
    assert_eq!(shares(4.0).iter().sum::<u64>(), 200);
    for bad in [0.5, f64::NAN, 4.01] {
        let e = m.tokens_of(100, 0, bad).unwrap_err().to_string();
        assert!(e.contains("expert_skew"), "{e}");
    }
}

fn small_qwen3_moe() -> serde_json::Value {
    json!({"model_type": "qwen3_moe", "hidden_size": 64, "intermediate_size": 128,
           "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
           "vocab_size": 256, "head_dim": 16, "num_experts": 8, "num_experts_per_tok": 2,
           "moe_intermediate_size": 512})
}

fn serve(cfg: serde_json::Value, skew: Option<f64>) -> Plan {
    let mut p = Plan::new("custom");
    p.hf_config = Some(cfg);
    p.mode = Mode::Infer;
    p.context = Some(512);
    p.new_tokens = Some(1);
    p.batch = 4;
    p.dtype = Precision::Bf16;
    p.expert_skew = skew;
    p
}

#[test]
fn skew_grows_the_eager_loops_peak_with_the_busiest_expert() {
    let peak = |skew| {
        estimate(&serve(small_qwen3_moe(), skew))
            .unwrap()
            .peak_allocated
            .0
    };
    let (balanced, skewed) = (peak(None), peak(Some(3.0)));
    assert_eq!(peak(Some(1.0)), balanced);
    // 2048 tokens: 512 per expert balanced, 1536 for the busiest at 3×. Its gate-up output
    // alone is [1536, 1024] bf16, 2 MiB more than the balanced expert's.
    assert!(
        skewed >= balanced + 2 * 1024 * 1024,
        "{skewed} against {balanced}"
    );
    let g = build_graph(&serve(small_qwen3_moe(), Some(3.0))).unwrap();
    let rows: Vec<u64> = g
        .ops
        .iter()
        .filter(|o| o.kind == "index" && g.shape(o.outputs[0])[1] == 64)
        .map(|o| g.shape(o.outputs[0])[0])
        .take(8)
        .collect();
    assert_eq!(rows[0], 1536);
    assert_eq!(rows.iter().sum::<u64>(), 4096);
}

#[test]
fn skew_leaves_the_grouped_gemms_of_mxfp4_experts_alone() {
    let mut a = Plan::new("gpt-oss-20b");
    a.mode = Mode::Infer;
    a.context = Some(256);
    a.new_tokens = Some(1);
    a.dtype = Precision::Bf16;
    a.quantization = Quantization::Mxfp4;
    let mut b = a.clone();
    b.expert_skew = Some(4.0);
    assert_eq!(
        estimate(&a).unwrap().peak_allocated,
        estimate(&b).unwrap().peak_allocated
    );
    b.expert_skew = Some(9.0);
    let msg = estimate(&b).unwrap_err().to_string();
    assert!(msg.contains("E / k = 8"), "{msg}");
}

#[test]
fn skew_is_refused_for_models_without_experts() {
    let mut p = Plan::new("llama-3-8b");
    p.seq = Some(128);
    p.expert_skew = Some(2.0);
    let msg = estimate(&p).unwrap_err().to_string();
    assert!(
        msg.contains("expert_skew") && msg.contains("no experts"),
        "{msg}"
    );
    let mut r = Plan::new("resnet50");
    r.expert_skew = Some(2.0);
    assert!(estimate(&r).is_err());
}

#[test]
fn skew_travels_in_the_plan_json_and_the_link() {
    let p: Plan =
        serde_json::from_str(r#"{"model": "mixtral-8x7b", "seq": 256, "expert_skew": 2.5}"#)
            .unwrap();
    assert_eq!(p.expert_skew, Some(2.5));
    let parsed = url::parse_query("?model=mixtral-8x7b");
    let mut plan = parsed.plan;
    plan.expert_skew = Some(2.5);
    let q = url::to_query(&plan, &parsed.view).unwrap();
    assert_eq!(url::parse_query(&q).plan.expert_skew, Some(2.5));
}
