//! Vision transformers and the LSTM language model: exact parameter counts, every measured CUDA
//! step of these models within 3 % (CPU steps within 1 %, ViT segment steps within 0.1 %), and
//! the errors a user can run into.
//!
//! Measurements: `data/pytorch-step-memory.jsonl` (the shared reference set) and
//! `data/vit-lstm-oracle.jsonl`, eight further steps measured with the same harness
//! (`shared/reference/harness/measure.py`, fake CUDA device, torch 2.15.0, torchvision 0.29.2)
//! for settings the reference set lacks: ViT-L/16 (fp32, bf16 autocast, per-block
//! checkpointing), pure bf16, resolutions 160 and 512, and the native LSTM in bf16 and under
//! autocast at another shape. Each line keeps the record's settings, `peak_r512` and
//! `peak_forward_r512`.
//!
//! CPU kernels (`device: cpu`, oneDNN's LSTM layer, the CPU flash attention, CPU autocast,
//! the per-parameter optimizer loop): the reference set's two CPU records of these models and
//! `data/cpu-oracle.jsonl`, eight further CPU steps measured with the same harness in its fake
//! mode on the CPU (LSTM in bf16, under bf16 autocast, at batch 1 where the optimizer step is
//! the peak, with SGD; ViT-B/16 in pure bf16, under autocast, with per-block checkpointing, at
//! 384 px with momentum SGD).

mod common;

use vram_planner::estimator::config::{Checkpointing, Device, OptimizerImpl, Precision};
use vram_planner::estimator::error::EstimateError;
use vram_planner::plan::{build_graph, estimate};
use vram_planner::plan::{Plan, PlanError};
use vram_planner::presets::models;

fn plan(model: &str, batch: u64) -> Plan {
    let mut p = Plan::new(model);
    p.batch = batch;
    p
}

fn params_at(model: &str, f: impl FnOnce(&mut Plan)) -> u64 {
    let mut p = plan(model, 1);
    f(&mut p);
    build_graph(&p).expect("builds").param_count()
}

#[test]
fn parameter_counts_are_exact() {
    // torchvision 0.29.2: sum(p.numel() for p in vit_*(weights=None, image_size=res).parameters()).
    assert_eq!(params_at("vit_b_16", |_| {}), 86_567_656);
    assert_eq!(params_at("vit_b_16", |p| p.res = Some(384)), 86_859_496);
    assert_eq!(params_at("vit_b_16", |p| p.res = Some(16)), 86_417_896);
    assert_eq!(params_at("vit_l_16", |_| {}), 304_326_632);
    assert_eq!(params_at("vit_l_16", |p| p.res = Some(512)), 305_174_504);
    // Embedding 5 120 000 + nn.LSTM(512, 512, 2) 4 202 496 + Linear 5 130 000, either kernel.
    assert_eq!(params_at("lstm-lm", |p| p.cudnn = Some(false)), 14_452_496);
    assert_eq!(params_at("lstm-lm", |p| p.cudnn = Some(true)), 14_452_496);
    for id in ["vit_b_16", "vit_l_16", "lstm-lm"] {
        let preset = models::find(id).expect("registered");
        assert_eq!(params_at(id, |_| {}), preset.params, "{id}");
    }
}

#[test]
fn presets_are_registered_in_their_families() {
    use models::{Family, InputKind};
    for id in ["vit_b_16", "vit_l_16"] {
        let m = models::find(id).unwrap();
        assert_eq!(m.family, Family::VisionTransformer);
        assert_eq!(
            m.input,
            InputKind::Image {
                default_res: 224,
                min_res: 16
            }
        );
    }
    let m = models::find("lstm-lm").unwrap();
    assert_eq!(m.family, Family::Rnn);
    assert_eq!(
        m.input,
        InputKind::Tokens {
            default_seq: 512,
            max_seq: None
        }
    );
}

/// Replays the records of these models measured on `cpu` (or, when `cpu` is false, on CUDA),
/// asserts each within `tol` and returns how many there were.
fn check_within(file: &common::Measured, cpu: bool, tol: f64) -> usize {
    let cases = file.replay_where(|r| {
        matches!(
            r["model"].as_str(),
            Some("vit_b_16" | "vit_l_16" | "lstm-lm")
        ) && (r["device"] == "cpu") == cpu
    });
    common::assert_within(&cases, tol);
    cases.len()
}

#[test]
fn cpu_reference_cases_within_1_percent() {
    // lstm-lm/L512/b32/fp32/adam and vit_b_16/r224/b32/fp32/adam on the CPU (both exact when
    // this was written).
    assert_eq!(check_within(&common::REFERENCE_SET, true, 0.01), 2);
}

#[test]
fn further_cpu_oracle_measurements_within_1_percent() {
    assert_eq!(check_within(&common::CPU, true, 0.01), 8);
}

#[test]
fn cpu_kernels_are_the_cpu_ones() {
    let mut p = plan("lstm-lm", 4);
    p.seq = Some(16);
    p.device = Device::Cpu;
    let g = build_graph(&p).unwrap();
    // One oneDNN op per layer; no per-step cells, no cuDNN.
    assert_eq!(
        g.ops
            .iter()
            .filter(|o| o.kind == "mkldnn_rnn_layer")
            .count(),
        2
    );
    assert!(!g
        .ops
        .iter()
        .any(|o| matches!(o.kind, "lstm_cell" | "cudnn_rnn")));
    let mut p = plan("vit_b_16", 2);
    p.device = Device::Cpu;
    let g = build_graph(&p).unwrap();
    assert_eq!(
        g.ops.iter().filter(|o| o.kind == "sdpa_flash_cpu").count(),
        12
    );
    // PyTorch's default optimizer implementation: foreach on CUDA, the for-loop on the CPU.
    assert_eq!(p.optimizer_impl(), OptimizerImpl::ForLoop);
    p.device = Device::Cuda;
    assert_eq!(p.optimizer_impl(), OptimizerImpl::Foreach);
}

#[test]
fn cpu_lstm_refuses_what_does_not_run_there() {
    let mut p = plan("lstm-lm", 2);
    p.seq = Some(8);
    p.device = Device::Cpu;
    assert!(estimate(&p).is_ok());
    p.cudnn = Some(false);
    assert!(
        estimate(&p).is_ok(),
        "cudnn: false changes nothing on the CPU"
    );
    p.cudnn = Some(true);
    match estimate(&p) {
        Err(PlanError::Estimate(EstimateError::Unsupported(msg))) => {
            assert!(msg.contains("cudnn"), "{msg}")
        }
        other => panic!(
            "expected an error, got {:?}",
            other.map(|e| e.peak_allocated)
        ),
    }
    p.cudnn = None;
    p.dtype = Precision::Fp16;
    assert!(matches!(
        estimate(&p),
        Err(PlanError::Estimate(EstimateError::Unsupported(_)))
    ));
    // oneDNN's layer is one op: no step limit on the CPU.
    p.dtype = Precision::Fp32;
    p.seq = Some(vram_planner::presets::rnn::MAX_NATIVE_STEPS + 1);
    assert!(estimate(&p).is_ok());
}

#[test]
fn every_reference_case_within_3_percent() {
    assert_eq!(
        check_within(&common::REFERENCE_SET, false, 0.03),
        21,
        "the reference set holds 12 ViT-B/16 and 9 LSTM CUDA cases"
    );
}

#[test]
fn further_oracle_measurements_within_3_percent() {
    assert_eq!(check_within(&common::VIT_LSTM, false, 0.03), 8);
}

#[test]
fn resolution_not_divisible_by_the_patch_is_an_error() {
    for res in [225, 100, 17] {
        let mut p = plan("vit_b_16", 2);
        p.res = Some(res);
        match estimate(&p) {
            Err(PlanError::Estimate(EstimateError::Unsupported(msg))) => {
                assert!(msg.contains("divisible by 16"), "{msg}")
            }
            other => panic!(
                "res {res}: expected an error, got {:?}",
                other.map(|e| e.peak_allocated)
            ),
        }
    }
    let mut p = plan("vit_l_16", 2);
    p.res = Some(8);
    assert!(matches!(
        estimate(&p),
        Err(PlanError::Estimate(
            EstimateError::ResolutionTooSmall { .. }
        ))
    ));
    p.res = Some(16);
    assert!(
        estimate(&p).is_ok(),
        "one patch plus the class token is a valid ViT"
    );
}

/// ViTs under `checkpoint_sequential` over their encoder layers (√N, 4 and 12 segments, uneven
/// segments of ViT-L/16), measured with the same harness (`data/PROVENANCE.md`,
/// `vit-segments-steps.jsonl`): the recomputation is modelled op by op, so within 0.1 %.
#[test]
fn vit_segment_cases_within_a_tenth_of_a_percent() {
    common::assert_replays(&common::VIT_SEGMENTS, 6, 1e-3);
}

#[test]
fn vit_checkpointing_policies() {
    let peak = |ckpt: Checkpointing| {
        let mut p = plan("vit_b_16", 32);
        p.ckpt = ckpt;
        estimate(&p).map(|e| e.peak_allocated.0)
    };
    let none = peak(Checkpointing::None).unwrap();
    let block = peak(Checkpointing::Block).unwrap();
    let sqrt = peak(Checkpointing::Sqrt).unwrap();
    let k4 = peak(Checkpointing::Segments(4)).unwrap();
    assert!(
        block < none && sqrt < none && k4 < none,
        "{block} {sqrt} {k4} < {none}"
    );
    // One segment is `checkpoint_sequential`'s un-checkpointed last segment: no saving.
    assert_eq!(peak(Checkpointing::Segments(1)).unwrap(), none);
    assert!(matches!(
        peak(Checkpointing::Stage),
        Err(PlanError::Estimate(EstimateError::Unsupported(_)))
    ));
}

#[test]
fn lstm_cudnn_builds_for_every_precision_and_grows_with_the_batch() {
    for dtype in [
        Precision::Fp32,
        Precision::AmpBf16,
        Precision::AmpFp16,
        Precision::Bf16,
    ] {
        let peak = |batch: u64| {
            let mut p = plan("lstm-lm", batch);
            p.seq = Some(256);
            p.dtype = dtype;
            p.cudnn = Some(true);
            estimate(&p).expect("cudnn LSTM estimates").peak_allocated.0
        };
        let (a, b) = (peak(8), peak(32));
        assert!(
            b > a,
            "{dtype:?}: batch 32 ({b}) must need more than batch 8 ({a})"
        );
    }
    // cuDNN keeps one reserve per layer instead of the native cell's per-step gates, hidden and
    // cell states and weight copies: it needs less at a long sequence.
    let peak = |cudnn: bool| {
        let mut p = plan("lstm-lm", 32);
        p.cudnn = Some(cudnn);
        p.dtype = Precision::AmpBf16;
        estimate(&p).unwrap().peak_allocated.0
    };
    assert!(peak(true) < peak(false));
}

#[test]
fn lstm_default_sequence_and_cudnn() {
    let p = plan("lstm-lm", 4);
    let g = build_graph(&p).unwrap();
    // cuDNN is the default when the plan leaves it out: one RNN op, no per-step cells.
    assert!(g.ops.iter().any(|o| o.kind == "cudnn_rnn"));
    assert!(!g.ops.iter().any(|o| o.kind == "lstm_cell"));
    let mut p = p;
    p.cudnn = Some(false);
    let g = build_graph(&p).unwrap();
    // Default sequence 512, two layers: one fused cell per step and layer.
    assert_eq!(
        g.ops.iter().filter(|o| o.kind == "lstm_cell").count(),
        2 * 512
    );
}

#[test]
fn native_lstm_refuses_sequences_it_cannot_unroll() {
    let mut p = plan("lstm-lm", 1);
    p.cudnn = Some(false);
    p.seq = Some(vram_planner::presets::rnn::MAX_NATIVE_STEPS + 1);
    match estimate(&p) {
        Err(PlanError::Estimate(EstimateError::Unsupported(msg))) => {
            assert!(msg.contains("cudnn: true"), "{msg}")
        }
        other => panic!(
            "expected an error, got {:?}",
            other.map(|e| e.peak_allocated)
        ),
    }
    p.cudnn = Some(true);
    assert!(
        estimate(&p).is_ok(),
        "the cuDNN RNN is one op at any length"
    );
}

#[test]
fn options_that_do_not_apply_are_refused() {
    let mut p = plan("vit_b_16", 2);
    p.attn = vram_planner::estimator::config::AttnImpl::Eager;
    assert!(matches!(
        estimate(&p),
        Err(PlanError::Estimate(EstimateError::Unsupported(_)))
    ));
    let mut p = plan("lstm-lm", 2);
    p.ckpt = Checkpointing::Block;
    assert!(matches!(
        estimate(&p),
        Err(PlanError::Estimate(EstimateError::Unsupported(_)))
    ));
}
