//! Gradient sums under a `TorchDispatchMode` (the plan's `dispatch_mode`): autograd's
//! `InputBuffer::accumulate` adds a second gradient out of place there and in place in a plain
//! training loop (`tests/data/PROVENANCE.md`, last section).

use serde_json::json;
use vram_planner::estimator::config::Precision;
use vram_planner::estimator::graph::Graph;
use vram_planner::estimator::optimizer::OptimizerKind;
use vram_planner::estimator::simulate::{simulate, StepOptions};
use vram_planner::estimator::timeline::Phase;
use vram_planner::estimator::units::DType;
use vram_planner::plan::{estimate, Plan};

fn backward_peak(g: &Graph, dispatch_mode: bool) -> u64 {
    let opts = StepOptions {
        dispatch_mode,
        ..StepOptions::plain(OptimizerKind::Sgd)
    };
    simulate(g, &opts).timeline.peak_in(Phase::Backward).0
}

/// One 4 MiB weight read by two linears: its second gradient is summed into the first. In a
/// plain loop the backward peaks while the second linear's backward holds its inputs (the
/// incoming gradient, the saved input) beside both weight gradients; under a dispatch mode the
/// engine first releases those, then allocates the 4 MiB sum beside both addends.
#[test]
fn a_weight_read_twice_is_summed_out_of_place_under_a_dispatch_mode() {
    let mut g = Graph::new(Precision::Fp32);
    let w = g.param(vec![1024, 1024]).unwrap();
    let x = g.input(vec![8, 1024], DType::F32).unwrap();
    let h = g.linear_with(x, w, None).unwrap();
    let y = g.linear_with(h, w, None).unwrap();
    let t = g.input(vec![8], DType::I64).unwrap();
    g.cross_entropy(y, t).unwrap();
    let plain = backward_peak(&g, false);
    let traced = backward_peak(&g, true);
    // The first linear's backward: `h`'s gradient (its incoming one) and its saved input `x`
    // (an input of the batch, so not freed) against the 4 MiB sum.
    let weight = 4 << 20;
    let incoming = 8 * 1024 * 4;
    assert_eq!(traced - plain, weight - incoming, "{plain} {traced}");
}

/// A tied embedding (GPT-2): the output projection's and the embedding's gradients of the one
/// weight meet; only the dispatch mode holds a third vocabulary-sized tensor for it.
#[test]
fn a_tied_embedding_sums_its_two_gradients_only_under_a_dispatch_mode() {
    let mut p: Plan =
        serde_json::from_value(json!({"model": "gpt2", "batch": 1, "seq": 128})).unwrap();
    let plain = estimate(&p).unwrap();
    p.dispatch_mode = true;
    let traced = estimate(&p).unwrap();
    let wte = 50257 * 768 * 4;
    let b = |e: &vram_planner::estimator::estimate::Estimate| e.timeline.peak_in(Phase::Backward).0;
    assert!(b(&traced) > b(&plain), "{} {}", b(&plain), b(&traced));
    assert!(b(&traced) - b(&plain) <= wte);
}
