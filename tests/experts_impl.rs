//! The experts' implementation (`experts_impl`): transformers' per-expert eager loop against
//! `grouped_mm_experts_forward`, which sorts the token-expert pairs by expert and runs two
//! `torch._grouped_mm` calls over all of them; what each holds, and where the grouped GEMMs are
//! refused.

use serde_json::json;
use vram_planner::estimator::config::{ExpertsImpl, Precision};
use vram_planner::estimator::graph::Graph;
use vram_planner::estimator::optimizer::OptimizerKind;
use vram_planner::estimator::parallel::Parallel;
use vram_planner::estimator::timeline::Phase;
use vram_planner::estimator::tune::{Mode, Quantization};
use vram_planner::plan::{build_graph, estimate, estimate_parallel, Plan};

mod common;

// The widths of `common::small_qwen3_moe`.
const H: u64 = 64;
const I: u64 = 512;
const E: u64 = 8;
const K: u64 = 2;
const LAYERS: u64 = 2;

fn small_qwen3_moe() -> serde_json::Value {
    common::small_qwen3_moe(I)
}

fn plan(experts: Option<ExpertsImpl>, batch: u64, seq: u64) -> Plan {
    let mut p = Plan::new("custom");
    p.hf_config = Some(small_qwen3_moe());
    p.batch = batch;
    p.seq = Some(seq);
    p.dtype = Precision::Bf16;
    p.experts_impl = experts;
    p
}

fn expert_gemm_flops(g: &Graph, kind: &str) -> f64 {
    g.ops
        .iter()
        .filter(|o| o.kind == kind && o.name.contains("mlp.experts"))
        .map(|o| o.flops)
        .sum()
}

/// Two grouped GEMMs per sparse layer over all `S = T·k` rows — `[S, H] → [S, 2I]` and
/// `[S, I] → [S, H]` — doing exactly the multiply-adds of the loop's per-expert projections.
#[test]
fn two_grouped_gemms_per_layer_do_the_loops_work() {
    let (b, s) = (2, 64);
    let grouped = build_graph(&plan(Some(ExpertsImpl::GroupedMm), b, s)).unwrap();
    let eager = build_graph(&plan(None, b, s)).unwrap();
    let gmm: Vec<_> = grouped
        .ops
        .iter()
        .filter(|o| o.kind == "grouped_mm")
        .collect();
    assert_eq!(gmm.len() as u64, 2 * LAYERS);
    let rows = b * s * K;
    for pair in gmm.chunks(2) {
        assert_eq!(grouped.shape(pair[0].outputs[0]), vec![rows, 2 * I]);
        assert_eq!(grouped.shape(pair[1].outputs[0]), vec![rows, H]);
    }
    let per_layer = 2.0 * rows as f64 * (2 * I * H + H * I) as f64;
    assert_eq!(
        expert_gemm_flops(&grouped, "grouped_mm"),
        per_layer * LAYERS as f64
    );
    assert_eq!(
        expert_gemm_flops(&eager, "linear"),
        expert_gemm_flops(&grouped, "grouped_mm")
    );
    assert_eq!(grouped.param_count(), eager.param_count());
}

/// Serving a prompt: the loop holds one expert's `[n, 2I]` projection at a time, the grouped
/// GEMMs every row's at once, so the grouped prefill peaks higher by at least the rows the
/// busiest expert does not hold: `(S − n)·2I` bf16 elements.
#[test]
fn the_grouped_gemms_hold_every_rows_projection_at_once() {
    let serve = |experts| {
        let mut p = plan(experts, 4, 256);
        p.mode = Mode::Infer;
        p.context = Some(256);
        p.new_tokens = Some(1);
        estimate(&p).unwrap().peak_allocated.0
    };
    let (eager, grouped) = (serve(None), serve(Some(ExpertsImpl::GroupedMm)));
    let rows = 4 * 256 * K;
    let per_expert = rows / E;
    assert!(
        grouped >= eager + (rows - per_expert) * 2 * I * 2,
        "grouped {grouped} vs eager {eager}"
    );
    assert_eq!(serve(Some(ExpertsImpl::Eager)), eager);
}

/// Training few tokens through wide experts with plain SGD (the backward peaks): the loop's
/// backward makes, per expert, a zero gradient of the whole `[E, 2I, H]` weight
/// (`select_backward`), the grouped GEMM one gradient per weight; the grouped step peaks lower.
#[test]
fn the_loops_per_expert_weight_gradients_cost_more_than_one_grouped_gradient() {
    let train = |experts| {
        let mut p = plan(experts, 1, 16);
        p.opt = OptimizerKind::Sgd;
        let e = estimate(&p).unwrap();
        assert_eq!(e.peak_phase, Phase::Backward);
        e.peak_allocated.0
    };
    let (eager, grouped) = (train(None), train(Some(ExpertsImpl::GroupedMm)));
    assert!(grouped < eager, "grouped {grouped} vs eager {eager}");
}

#[test]
fn grouped_gemms_are_refused_where_they_are_not_modelled() {
    let err = |p: Plan| estimate(&p).unwrap_err().to_string();
    let mut amp = plan(Some(ExpertsImpl::GroupedMm), 1, 16);
    amp.dtype = Precision::AmpBf16;
    assert!(err(amp).contains("\"dtype\": \"bf16\""));
    let mut fp8 = plan(Some(ExpertsImpl::GroupedMm), 1, 16);
    fp8.hf_config = None;
    fp8.model = "qwen3-30b-a3b".into();
    fp8.mode = Mode::Infer;
    fp8.context = Some(16);
    fp8.new_tokens = Some(1);
    fp8.quantization = Quantization::Fp8;
    assert!(err(fp8).contains("quantized experts"));
    let mut dense = plan(Some(ExpertsImpl::GroupedMm), 1, 16);
    dense.hf_config = None;
    dense.model = "gpt2".into();
    assert!(err(dense).contains("has no experts"));
    // gpt-oss's biased experts run grouped too, but not behind expert parallelism's dispatch.
    let mut oss = plan(Some(ExpertsImpl::GroupedMm), 1, 16);
    oss.hf_config = None;
    oss.model = "gpt-oss-20b".into();
    assert!(estimate(&oss).is_ok());
    oss.parallel = Some(Parallel {
        dp: Some(2),
        ep: 2,
        ..Default::default()
    });
    let ep = estimate_parallel(&oss).unwrap_err().to_string();
    assert!(ep.contains("gpt-oss"), "{ep}");
}

#[test]
fn the_plan_names_the_implementation() {
    let p: Plan = serde_json::from_value(
        json!({"model": "qwen3-30b-a3b", "experts_impl": "grouped_mm", "dtype": "bf16"}),
    )
    .unwrap();
    assert_eq!(p.experts_impl, Some(ExpertsImpl::GroupedMm));
    let bad =
        serde_json::from_value::<Plan>(json!({"model": "qwen3-30b-a3b", "experts_impl": "loop"}))
            .unwrap_err()
            .to_string();
    assert!(bad.contains("eager") && bad.contains("grouped_mm"), "{bad}");
}
