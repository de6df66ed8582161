//! Expert parallelism (`parallel.ep`): the routed experts of each sparse layer split over `ep`
//! of the data-parallel ranks, the tokens exchanged by all-to-alls (Megatron-Core's
//! `MoEAlltoAllTokenDispatcher`), the experts' states sharded over the ranks that hold the same
//! experts, and the settings it is refused for.

use vram_planner::estimator::optimizer::OptimizerKind;
use vram_planner::estimator::parallel::comm::{ring_bytes, Collective, Traffic};
use vram_planner::estimator::parallel::{Parallel, ParallelEstimate};
use vram_planner::plan::search::{search, SearchOptions};
use vram_planner::plan::{estimate_parallel, Plan};

mod common;

// The widths of `common::small_qwen3_moe`.
const HIDDEN: u64 = 64;
const EXPERT_WIDTH: u64 = 512;
const EXPERTS: u64 = 8;
const TOP_K: u64 = 2;
const LAYERS: u64 = 2;

fn small_qwen3_moe() -> serde_json::Value {
    common::small_qwen3_moe(EXPERT_WIDTH)
}

fn train(cfg: serde_json::Value, par: Parallel) -> Plan {
    let mut p = Plan::new("custom");
    p.hf_config = Some(cfg);
    p.batch = 2;
    p.seq = Some(64);
    p.opt = OptimizerKind::Adam;
    p.gpu = Some("h100-80".into());
    p.parallel = Some(par);
    p
}

fn layout(dp: u64, ep: u64, zero: u8, fsdp: bool) -> Parallel {
    Parallel {
        dp: Some(dp),
        ep,
        zero: Some(zero),
        fsdp,
        ..Default::default()
    }
}

fn run(dp: u64, ep: u64, zero: u8, fsdp: bool) -> ParallelEstimate {
    estimate_parallel(&train(small_qwen3_moe(), layout(dp, ep, zero, fsdp))).unwrap()
}

/// fp32 bytes of every routed expert of the model: `E · 3 · H · I` weights per sparse layer.
fn all_expert_bytes() -> u64 {
    LAYERS * EXPERTS * 3 * HIDDEN * EXPERT_WIDTH * 4
}

/// Under DDP each rank holds the whole model but only its `E/ep` experts: parameters and
/// gradients shrink by exactly the experts it no longer holds, the Adam state by twice that.
#[test]
fn a_rank_holds_its_share_of_the_experts() {
    let one = run(4, 1, 0, false);
    let four = run(4, 4, 0, false);
    let gone = all_expert_bytes() - all_expert_bytes() / 4;
    assert_eq!(one.per_gpu.params_bytes - four.per_gpu.params_bytes, gone);
    assert_eq!(
        one.per_gpu.optimizer_state_bytes - four.per_gpu.optimizer_state_bytes,
        2 * gone
    );
    assert_eq!(four.layout.ep, 4);
    assert!(four.per_gpu.peak_allocated_bytes < one.per_gpu.peak_allocated_bytes);
}

/// The token exchange: per sparse layer and micro-batch a dispatch and a combine in forward and
/// the reverse pair in backward, each a rank's `T·k` rows of `H` (balanced routing: a rank
/// receives what it sends), of which `(ep − 1)/ep` leave the rank (GShard, Lepikhin et al.
/// 2020, §2.2: two all-to-alls per MoE layer in forward, two in backward).
#[test]
fn the_all_to_alls_move_every_routed_row_four_times_per_layer() {
    let e = run(4, 4, 0, false);
    let tokens = 2 * 64;
    let buffer = tokens * TOP_K * HIDDEN * 4;
    let ep: Vec<_> = e
        .communication
        .iter()
        .filter(|c| c.scheme == Traffic::Ep)
        .collect();
    assert_eq!(ep.len(), 2, "forward and backward: {ep:#?}");
    for c in &ep {
        assert_eq!(c.collective, Some(Collective::AllToAll));
        assert_eq!(c.group, 4);
        assert_eq!(c.buffer_bytes, buffer);
        assert_eq!(c.calls, 2 * LAYERS);
        let expected = ring_bytes(Collective::AllToAll, 4, buffer) * (2 * LAYERS) as f64;
        assert_eq!(c.bytes_sent, expected.round() as u64);
        assert_eq!(c.bytes_sent, 3 * buffer / 4 * 2 * LAYERS);
        assert!(c.seconds > 0.0 && c.exposed_seconds == c.seconds);
    }
    // Without expert parallelism no token leaves the rank.
    let one = run(4, 1, 0, false);
    assert!(one.communication.iter().all(|c| c.scheme != Traffic::Ep));
    assert!(e.comm_exposed_seconds_per_step > one.comm_exposed_seconds_per_step);
}

/// With ep = dp every rank holds experts no other rank holds: their gradients are not
/// all-reduced at all, and DDP's all-reduce carries the dense gradients only.
#[test]
fn experts_reduce_their_gradients_over_the_ranks_that_share_them() {
    let dense_and_experts = |e: &ParallelEstimate| -> Vec<(u64, u64)> {
        e.communication
            .iter()
            .filter(|c| c.scheme == Traffic::Dp)
            .map(|c| (c.group, c.buffer_bytes))
            .collect()
    };
    let one = run(4, 1, 0, false);
    let all = dense_and_experts(&one);
    assert_eq!(all.len(), 1, "{all:?}");
    let full = run(4, 4, 0, false);
    let dense = dense_and_experts(&full);
    assert_eq!(dense, vec![(4, all[0].1 - all_expert_bytes())]);
    // ep = 2 of dp = 4: each expert lives on two ranks, which all-reduce its gradient.
    let half = run(4, 2, 0, false);
    let parts = dense_and_experts(&half);
    assert_eq!(
        parts,
        vec![
            (4, all[0].1 - all_expert_bytes()),
            (2, all_expert_bytes() / 2)
        ]
    );
}

/// Under full sharding the experts' states are split over `dp/ep` ranks instead of `dp`, each
/// rank holding `E/ep` experts: the same bytes at rest (within FSDP's row padding), so expert
/// parallelism saves what a layer gathers, not what it keeps.
#[test]
fn under_full_sharding_the_states_at_rest_stay_and_the_gathers_shrink() {
    let one = run(8, 1, 3, true);
    let four = run(8, 4, 3, true);
    let (a, b) = (
        one.per_gpu.optimizer_state_bytes as f64,
        four.per_gpu.optimizer_state_bytes as f64,
    );
    assert!((a - b).abs() / a < 0.01, "{a} vs {b}");
    assert!(
        four.per_gpu.params_bytes < one.per_gpu.params_bytes,
        "a gathered layer holds 2 experts, not 8: {} vs {}",
        four.per_gpu.params_bytes,
        one.per_gpu.params_bytes
    );
    let gathers = |e: &ParallelEstimate| -> u64 {
        e.communication
            .iter()
            .filter(|c| c.scheme == Traffic::Fsdp && c.collective == Some(Collective::AllGather))
            .map(|c| c.bytes_sent)
            .sum()
    };
    assert!(gathers(&four) < gathers(&one));
}

/// A skewed router under expert parallelism: the rank holding the busiest expert receives `ep`
/// ranks' share of it, so its receive buffers and its experts' activations grow.
#[test]
fn a_hot_expert_loads_the_rank_that_holds_it() {
    let mut p = train(small_qwen3_moe(), layout(4, 4, 0, false));
    let balanced = estimate_parallel(&p).unwrap().per_gpu.activations_bytes;
    p.expert_skew = Some(3.0);
    let skewed = estimate_parallel(&p).unwrap().per_gpu.activations_bytes;
    assert!(skewed > balanced, "{skewed} vs {balanced}");
}

#[test]
fn expert_parallelism_is_refused_where_it_cannot_apply() {
    let err = |p: Plan| estimate_parallel(&p).unwrap_err().to_string();
    let e = err(train(small_qwen3_moe(), layout(6, 4, 0, false)));
    assert!(e.contains("ep = 4 must divide dp = 6"), "{e}");
    let e = err(train(small_qwen3_moe(), layout(3, 3, 0, false)));
    assert!(
        e.contains("does not divide the 8 routed experts") && e.contains("1, 2, 4, 8"),
        "{e}"
    );
    let mut dense = train(small_qwen3_moe(), layout(2, 2, 0, false));
    dense.hf_config = None;
    dense.model = "gpt2".into();
    let e = err(dense);
    assert!(e.contains("has none"), "{e}");
    let e = err(train(small_qwen3_moe(), layout(4, 0, 0, false)));
    assert!(e.contains("parallel.ep"), "{e}");
}

/// The rank's experts as grouped GEMMs over the rows it received: the same exchange, the same
/// weights on the rank.
#[test]
fn grouped_gemms_run_the_local_experts_behind_the_same_exchange() {
    let base = || {
        let mut p = train(small_qwen3_moe(), layout(4, 4, 0, false));
        p.dtype = vram_planner::estimator::config::Precision::Bf16;
        p
    };
    let loop_ = estimate_parallel(&base()).unwrap();
    let mut p = base();
    p.experts_impl = Some(vram_planner::estimator::config::ExpertsImpl::GroupedMm);
    let grouped = estimate_parallel(&p).unwrap();
    let a2a = |e: &ParallelEstimate| -> Vec<u64> {
        e.communication
            .iter()
            .filter(|c| c.scheme == Traffic::Ep)
            .map(|c| c.bytes_sent)
            .collect()
    };
    assert_eq!(a2a(&loop_), a2a(&grouped));
    assert_eq!(loop_.expert_params_bytes, grouped.expert_params_bytes);
    assert_ne!(
        loop_.per_gpu.peak_allocated_bytes,
        grouped.per_gpu.peak_allocated_bytes
    );
}

fn with_capacity(factor: Option<f64>, pad: bool, skew: Option<f64>) -> Plan {
    let mut par = layout(4, 4, 0, false);
    par.capacity_factor = factor;
    par.pad_to_capacity = pad;
    let mut p = train(small_qwen3_moe(), par);
    p.expert_skew = skew;
    p
}

/// The rows a rank sends in the dispatch all-to-all (the forward item of its buffer size).
fn dispatched_rows(e: &ParallelEstimate) -> Vec<u64> {
    let mut rows: Vec<u64> = e
        .communication
        .iter()
        .filter(|c| c.scheme == Traffic::Ep && c.what.contains("forward"))
        .map(|c| c.buffer_bytes / (HIDDEN * 4))
        .collect();
    rows.sort_unstable();
    rows
}

/// Megatron-Core's capacity (`get_capacity`: `⌈T·k / E · f⌉` per expert and rank). Under a
/// router skewed 3× over 128 tokens × top 2 of 8 experts the hot expert would take 96 rows and
/// the others 23 or 22 (six 23s, one 22); at capacity factor 1.0 the hot one is cut to 32, so a
/// rank sends 32 + 6·23 + 22 = 192 rows instead of 256; padded at factor 1.5, every expert gets
/// exactly 48: 384 rows. The rank holding experts 0 and 1 receives 4 ranks' share of each:
/// 4·(32 + 23) = 220 rows dropped, 4·(48 + 48) = 384 padded.
#[test]
fn a_capacity_drops_or_pads_what_each_expert_receives() {
    let dropless = estimate_parallel(&with_capacity(None, false, Some(3.0))).unwrap();
    let dropped = estimate_parallel(&with_capacity(Some(1.0), false, Some(3.0))).unwrap();
    let padded = estimate_parallel(&with_capacity(Some(1.5), true, Some(3.0))).unwrap();
    assert_eq!(dispatched_rows(&dropless), vec![256, 4 * (96 + 23)]);
    assert_eq!(dispatched_rows(&dropped), vec![192, 220]);
    assert_eq!(dispatched_rows(&padded), vec![384]);
    assert!(dropped.per_gpu.activations_bytes < dropless.per_gpu.activations_bytes);
    // Balanced routing at factor 1 drops nothing.
    let balanced = estimate_parallel(&with_capacity(None, false, None)).unwrap();
    let capped = estimate_parallel(&with_capacity(Some(1.0), false, None)).unwrap();
    assert_eq!(balanced.per_gpu, capped.per_gpu);
}

#[test]
fn a_capacity_needs_the_all_to_all_dispatch() {
    let err = |p: Plan| estimate_parallel(&p).unwrap_err().to_string();
    let mut no_ep = with_capacity(Some(1.0), false, None);
    no_ep.parallel.as_mut().unwrap().ep = 1;
    assert!(err(no_ep).contains("dropless"));
    assert!(err(with_capacity(None, true, None)).contains("set capacity_factor"));
    for bad in [0.0, -1.0, f64::NAN] {
        assert!(err(with_capacity(Some(bad), false, None)).contains("capacity_factor must be"));
    }
}

/// The layout search tries expert parallelism for a model with routed experts. On a card that
/// holds the model's states under DDP with ep = 8 of 8 ranks but not with every expert on every
/// rank, and with ZeRO off (ZeRO would shard the experts anyway), the fitting 8-GPU layouts are
/// those that split the experts; each candidate's plan estimates to what the search reported,
/// and every ep divides both dp and the experts. A dense model is never given an ep.
#[test]
fn the_layout_search_splits_the_experts_when_that_is_what_fits() {
    let wide = || common::small_qwen3_moe(8192);
    let total = |ep: u64| {
        estimate_parallel(&train(wide(), layout(8, ep, 0, false)))
            .unwrap()
            .per_gpu
            .device_total_bytes
    };
    let (all, split) = (total(1), total(8));
    assert!(split < all);
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    let mut plan = train(wide(), Parallel::default());
    plan.batch = 16;
    plan.gpu = Some(format!("custom:{:.4}", (gib(all) + gib(split)) / 2.0));
    let opts = SearchOptions {
        max_gpus: 8,
        top: 50,
        zero_stages: vec![0],
        ..Default::default()
    };
    let found = search(&plan, &opts).unwrap();
    let at8: Vec<_> = found
        .iter()
        .filter(|c| c.gpus == 8 && c.tp == 1 && c.pp == 1)
        .collect();
    assert!(!at8.is_empty(), "no data-parallel layout over 8 GPUs fits");
    for c in &at8 {
        assert!(c.ep > 1, "dp {} fits without splitting the experts", c.dp);
    }
    for c in &found {
        assert!(
            c.dp.is_multiple_of(c.ep) && EXPERTS.is_multiple_of(c.ep),
            "ep {} of dp {}",
            c.ep,
            c.dp
        );
        let again = estimate_parallel(&c.plan).unwrap();
        assert_eq!(again.layout.ep, c.ep);
        assert_eq!(again.per_gpu.device_total_bytes, c.peak_device_bytes);
    }
    let mut dense = Plan::new("gpt2");
    dense.seq = Some(128);
    dense.batch = 8;
    dense.gpu = Some("h100-80".into());
    let opts = SearchOptions {
        max_gpus: 8,
        top: 50,
        ..Default::default()
    };
    assert!(search(&dense, &opts).unwrap().iter().all(|c| c.ep == 1));
}
