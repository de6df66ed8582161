//! Published numbers the estimator must reproduce, each with its source and tolerance.

use vram_planner::estimator::config::Precision;
use vram_planner::estimator::graph::Graph;
use vram_planner::estimator::ops::Act;
use vram_planner::estimator::optimizer::{OptimizerImpl, OptimizerKind};
use vram_planner::estimator::simulate::{simulate, StepOptions};
use vram_planner::estimator::units::{tensor_bytes, Bytes, DType, Elems};

#[track_caller]
fn assert_close(got: f64, want: f64, rel_tol: f64) {
    let err = (got - want).abs() / want;
    assert!(
        err <= rel_tol,
        "got {got}, want {want} (rel err {err:.4} > {rel_tol})"
    );
}

fn opts(opt: OptimizerKind) -> StepOptions {
    StepOptions {
        optimizer: opt,
        optimizer_impl: OptimizerImpl::Foreach,
        accumulation: 1,
        device: Default::default(),
    }
}

/// One 128-channel 512×512 fp32 feature map at batch 64 is exactly 8 GiB.
#[test]
fn feature_map_128x512x512_batch64_is_8_gib() {
    let b = tensor_bytes(Elems::of_shape(&[64, 128, 512, 512]).unwrap(), DType::F32).unwrap();
    assert_eq!(b, Bytes(8 << 30));
}

/// ZeRO (Rajbhandari et al. 2020, §3.1): mixed-precision Adam holds 16 bytes per parameter —
/// fp16 weights and gradients (2 + 2), fp32 master weights, momentum and variance (12).
/// Modelled as the ZeRO paper's set-up: fp32 master + Adam (params, grads, 2 states = 16 B under
/// fp32 training) is what our simulator keeps live at the optimizer step, minus the fp16 copies
/// it does not need: we check 4 B params + 4 B grads + 8 B Adam state = 16 B/param, exactly.
#[test]
fn zero_paper_16_bytes_per_param_for_adam() {
    let mut g = Graph::new(Precision::Fp32);
    let n = 1_000_000u64;
    let x = g.input(vec![1, n / 1000], DType::F32).unwrap();
    let y = g.input(vec![1], DType::I64).unwrap();
    let h = g.linear("fc", x, n / 1000, 1000, false).unwrap();
    g.cross_entropy(h, y).unwrap();
    let mut o = opts(OptimizerKind::Adam);
    o.optimizer_impl = OptimizerImpl::Fused;
    let r = simulate(&g, &o);
    let opt_event = r
        .timeline
        .events
        .iter()
        .find(|e| e.phase == vram_planner::estimator::timeline::Phase::Optimizer)
        .unwrap();
    use vram_planner::estimator::timeline::Category::*;
    let model_states = opt_event.live.get(Params).0
        + opt_event.live.get(Gradients).0
        + opt_event.live.get(OptimizerState).0;
    assert_close(model_states as f64 / n as f64, 16.0, 1e-3);
}

/// Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models",
/// §4.1 eq. (1): a GPT layer stores `sbh(34 + 5as/h)` bytes of activations in 16-bit training
/// with 1-byte dropout masks and no recomputation. Built here as Megatron's layer: LN, fused QKV
/// projection split into views, QKᵀ, softmax, dropout, attention over V, output projection,
/// dropout, residual, LN, 4h MLP with GeLU, dropout, residual.
#[test]
fn korthikanti_gpt_layer_activations() {
    let (s, b, h, a) = (512u64, 2u64, 1024u64, 16u64);
    let hn = h / a;
    let mut g = Graph::new(Precision::Fp16);
    let x0 = g.input(vec![s, b, h], DType::F16).unwrap();
    let target = g.input(vec![s * b], DType::I64).unwrap();
    // A first linear so the layer input requires grad (as inside a deep stack).
    let x = g.linear("pre", x0, h, h, false).unwrap();
    let first_layer_op = g.ops.len();
    let ln1 = g.layer_norm("ln1", x, true).unwrap();
    let qkv = g.linear("qkv", ln1, h, 3 * h, true).unwrap();
    let qkv = g
        .split(
            qkv,
            vec![vec![b * a, s, hn], vec![b * a, hn, s], vec![b * a, s, hn]],
        )
        .unwrap();
    let (q, k, v) = (qkv[0], qkv[1], qkv[2]);
    let scores = g.matmul(q, k).unwrap();
    let probs = g.softmax(scores).unwrap();
    let probs = g.dropout(probs, 0.1).unwrap();
    let ctx = g.matmul(probs, v).unwrap();
    let ctx = g.contiguous(ctx, vec![s, b, h]).unwrap();
    let o = g.linear("dense", ctx, h, h, true).unwrap();
    let o = g.dropout(o, 0.1).unwrap();
    let r1 = g.add(o, x, false).unwrap();
    let ln2 = g.layer_norm("ln2", r1, true).unwrap();
    let f1 = g.linear("fc1", ln2, h, 4 * h, true).unwrap();
    let f1 = g.act(f1, Act::Gelu, false).unwrap();
    let f2 = g.linear("fc2", f1, 4 * h, h, true).unwrap();
    let f2 = g.dropout(f2, 0.1).unwrap();
    let out = g.add(f2, r1, false).unwrap();
    let last_layer_op = g.ops.len();
    let logits = g.view(out, vec![s * b, h]).unwrap();
    g.cross_entropy(logits, target).unwrap();
    let r = simulate(&g, &opts(OptimizerKind::Sgd));
    let layer: u64 = r.saved_after_forward[first_layer_op..last_layer_op]
        .iter()
        .sum();
    let want = (s * b * h) as f64 * (34.0 + 5.0 * (a * s) as f64 / h as f64);
    // The only extras: layer-norm mean/rstd (fp32, s·b each) and 512-B block rounding.
    assert_close(layer as f64, want, 0.005);
}

/// Chen et al. 2016, "Training Deep Nets with Sublinear Memory Cost": N equal layers in k
/// checkpointed segments keep k segment inputs plus one recomputed segment of N/k layers, so
/// activation memory is minimised at k ≈ √N and falls from O(N) to O(√N).
#[test]
fn chen_sqrt_n_segments_minimise_activation_memory() {
    let n = 16u64;
    let (rows, width) = (4096u64, 256u64);
    let peak_acts = |k: Option<u64>| -> u64 {
        let mut g = Graph::new(Precision::Fp32);
        let x0 = g.input(vec![rows, width], DType::F32).unwrap();
        let y = g.input(vec![rows], DType::I64).unwrap();
        let mut x = g.linear("in", x0, width, width, false).unwrap();
        let per = k.map(|k| n / k).unwrap_or(n);
        for seg in 0..n / per {
            x = g
                .checkpointed(k.is_some(), |g| {
                    let mut x = x;
                    for l in 0..per {
                        x = g
                            .scoped(format!("l{}", seg * per + l), |g| {
                                g.act(x, Act::Gelu, false)
                            })
                            .unwrap();
                    }
                    Ok::<_, ()>(x)
                })
                .unwrap();
        }
        let logits = g.linear("out", x, width, 2, false).unwrap();
        g.cross_entropy(logits, y).unwrap();
        let r = simulate(&g, &opts(OptimizerKind::Sgd));
        use vram_planner::estimator::timeline::Category::*;
        r.timeline
            .events
            .iter()
            .map(|e| e.live.get(Activations).0 + e.live.get(BackwardTemps).0)
            .max()
            .unwrap()
    };
    let none = peak_acts(None);
    let by_k: Vec<(u64, u64)> = [1, 2, 4, 8, 16]
        .iter()
        .map(|&k| (k, peak_acts(Some(k))))
        .collect();
    let best = by_k.iter().min_by_key(|(_, m)| *m).unwrap().0;
    assert_eq!(
        best, 4,
        "√16 = 4 segments should use the least memory: {by_k:?}"
    );
    let unit = (rows * width * 4) as f64;
    // √N checkpointing keeps about 2√N = 8 layer outputs instead of N = 16 (plus gradients).
    let at4 = by_k.iter().find(|(k, _)| *k == 4).unwrap().1 as f64;
    assert!(
        at4 < none as f64 * 0.75,
        "sqrt checkpointing saves memory: {at4} vs {none}"
    );
    assert_close((none as f64 - at4) / unit, (n - 2 * 4) as f64, 0.3);
}

/// Upsampling saves nothing for backward (`upsample_nearest2d_backward` needs only sizes): its
/// input is freed right after the op unless something else keeps it, and its gradient is a new
/// input-sized tensor.
#[test]
fn upsample_saves_nothing_and_allocates_its_output() {
    let mut g = Graph::new(Precision::Fp32);
    let x0 = g.input(vec![2, 4, 8, 8], DType::F32).unwrap();
    let y = g.input(vec![2], DType::I64).unwrap();
    let x = g
        .conv2d(
            "c",
            x0,
            vram_planner::estimator::ops::Conv::new(4, 4, 1, 1, 0),
        )
        .unwrap();
    let u = g.upsample2d(x, 2, false).unwrap();
    assert_eq!(g.shape(u), vec![2, 4, 16, 16]);
    assert!(g.ops.last().unwrap().saved.is_empty());
    let p = g.adaptive_avg_pool2d(u, 1).unwrap();
    let p = g.view(p, vec![2, 4]).unwrap();
    g.cross_entropy(p, y).unwrap();
    let r = simulate(&g, &opts(OptimizerKind::Sgd));
    assert!(r.timeline.peak().is_some());
    assert!(g.upsample2d(x0, 0, true).is_err());
}
