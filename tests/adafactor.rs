//! Adafactor as transformers runs it (`transformers/optimization.py` `Adafactor.step`, HF
//! Trainer's `optim="adafactor"`): its factored state counted from GPT-2's parameter shapes
//! (Radford et al. 2019; `models/gpt2/modeling_gpt2.py`, `Conv1D` weights `[in, out]`), its
//! per-parameter fp32 temporaries, and the layouts it is refused for.

use vram_planner::estimator::config::Precision;
use vram_planner::estimator::optimizer::OptimizerKind;
use vram_planner::estimator::timeline::{Category, Phase};
use vram_planner::plan::{estimate, parse_json, Plan};

fn gpt2(dtype: Precision, opt: OptimizerKind) -> Plan {
    let mut p = Plan::new("gpt2");
    p.seq = Some(128);
    p.batch = 2;
    p.dtype = dtype;
    p.opt = opt;
    p
}

/// Bytes of Adafactor's state for a parameter of this shape: a row and a column of fp32 for a
/// matrix, the whole vector for a vector, and the 0-d `RMS`.
fn factored(shape: &[u64]) -> u64 {
    let state = match *shape {
        [n] => n * 4,
        [n, m] => (n + m) * 4,
        _ => unreachable!("GPT-2 has vectors and matrices only"),
    };
    state + 4
}

/// GPT-2 small's trainable parameters by shape: the token and position embeddings (the LM head
/// is tied to the first), twelve blocks, the final norm.
fn gpt2_shapes() -> Vec<Vec<u64>> {
    let (h, v, ctx) = (768, 50257, 1024);
    let mut s = vec![vec![v, h], vec![ctx, h]];
    for _ in 0..12 {
        s.extend([
            vec![h],
            vec![h],
            vec![h, 3 * h],
            vec![3 * h],
            vec![h, h],
            vec![h],
            vec![h],
            vec![h],
            vec![h, 4 * h],
            vec![4 * h],
            vec![4 * h, h],
            vec![h],
        ]);
    }
    s.extend([vec![h], vec![h]]);
    s
}

#[test]
fn the_state_is_a_row_and_a_column_per_matrix() {
    let shapes = gpt2_shapes();
    let count: u64 = shapes.iter().map(|s| s.iter().product::<u64>()).sum();
    let want: u64 = shapes.iter().map(|s| factored(s)).sum();
    let e = estimate(&gpt2(Precision::Fp32, OptimizerKind::Adafactor)).unwrap();
    assert_eq!(e.param_count, count, "GPT-2's 124,439,808 parameters");
    assert_eq!(e.opt_state_bytes.0, want);
    // Against Adam's two fp32 moments per parameter: 0.13 % of it.
    let adam = estimate(&gpt2(Precision::Fp32, OptimizerKind::Adamw)).unwrap();
    assert_eq!(adam.opt_state_bytes.0, 8 * count);
    assert!(e.opt_state_bytes.0 * 500 < adam.opt_state_bytes.0);
    // The state is fp32 whatever the weights are (`torch.zeros(...).to(grad)` after
    // `grad.float()`).
    let bf16 = estimate(&gpt2(Precision::Bf16, OptimizerKind::Adafactor)).unwrap();
    assert_eq!(bf16.opt_state_bytes.0, want);
}

/// The step's temporaries peak at the word embeddings, the first and largest parameter: two
/// fp32 copies of its size (`grad**2` and `+ eps`), and two more in pure bf16, where the loop
/// holds `grad.float()` and `p.float()` (each tensor rounded to the allocator's 512 B).
#[test]
fn the_step_holds_two_fp32_parameters_and_the_copies_of_a_16_bit_one() {
    let wte = 50257 * 768 * 4;
    let temps = |dtype| {
        let e = estimate(&gpt2(dtype, OptimizerKind::Adafactor)).unwrap();
        e.timeline
            .events
            .iter()
            .filter(|ev| ev.phase == Phase::Optimizer)
            .map(|ev| ev.live.get(Category::OptimizerTemps).0)
            .max()
            .unwrap()
    };
    assert_eq!(temps(Precision::Fp32), 2 * wte);
    assert_eq!(temps(Precision::Bf16), 4 * wte);
}

/// A smaller state than Adam's gives a lower peak on the same step, and the allocator's replay
/// of the loop's stream keeps reserved at or above the allocated peak.
#[test]
fn adafactor_peaks_below_adam_and_reserves_above_its_peak() {
    let ada = estimate(&gpt2(Precision::Fp32, OptimizerKind::Adafactor)).unwrap();
    let adam = estimate(&gpt2(Precision::Fp32, OptimizerKind::Adamw)).unwrap();
    assert!(ada.peak_allocated < adam.peak_allocated);
    assert!(ada.reserved >= ada.peak_allocated);
}

#[test]
fn layouts_and_offload_are_refused_with_a_message() {
    for extra in [
        r#""parallel":{"gpus_per_node":2,"dp":2}"#,
        r#""parallel":{"gpus_per_node":1},"offload":{"optimizer":true}"#,
    ] {
        let text = format!(r#"{{"model":"gpt2","seq":128,"opt":"adafactor",{extra}}}"#);
        let p = parse_json(&text).unwrap();
        let msg = estimate(&p).unwrap_err().to_string();
        assert!(msg.contains("Adafactor") && msg.contains("adamw"), "{msg}");
    }
}

/// transformers' Adafactor has no foreach or fused variant: the setting does not change it.
#[test]
fn the_implementation_setting_does_not_apply() {
    let base = gpt2(Precision::Fp32, OptimizerKind::Adafactor);
    let mut fused = base.clone();
    fused.optimizer_impl = Some(vram_planner::estimator::optimizer::OptimizerImpl::Fused);
    let (a, b) = (estimate(&base).unwrap(), estimate(&fused).unwrap());
    assert_eq!(a.peak_allocated, b.peak_allocated);
    assert_eq!(a.reserved, b.reserved);
}
