//! A floor under what one rank of a layout keeps resident through its forward and backward
//! (parameters, gradients, optimizer state and DDP's buckets), read off the unsimulated graph.
//! A layout search asks it before building a graph for a micro-batch and before simulating a
//! layout's pieces: the resident state does not depend on the micro-batch, so one build per
//! tensor- and expert-parallel degree tells it for all of them, and most layouts a search tries
//! are over the GPU on their model state alone (a 30B mixture of experts on one or two GPUs).
//!
//! Why it is a floor: every term is a lower bound of a category [`super::zero::Sharded::at`]
//! reports at every forward and backward event of a piece, term by term:
//!
//! * Parameters. Sharded (`Sharding::params_sharded`): the rank's shards, `rest` in
//!   `Sharded::at` (0 with parameter offload), the same bytes as `Sharded::new` gives each
//!   shard ([`super::zero::shard_bytes`]). Otherwise the simulator's `Params`: every parameter
//!   storage is made live by the step's start (`Replay::zero_grad` in `estimator/simulate.rs`)
//!   and never freed (the frees skip persistent storages, and saved tensors never pin them), so
//!   each storage's `rounded` bytes.
//! * Gradients. ZeRO 2 and 3: the gradient shards while `.grad` persists on the GPU
//!   (`grad_shard_total` in `Sharded::at`). Below: the simulator's `Gradients`, which holds every
//!   trainable parameter's `.grad` (`Replay::zero_grad`) through the step when it persists, and
//!   nothing is counted where `.grad` are views into DDP's buckets (set to 0 there).
//! * Optimizer state. ZeRO 1 with ZeroRedundancyOptimizer: the most loaded rank of the greedy
//!   partition, at least the mean, `Σ states / replicas`; with FSDP or from stage 2 the shards'
//!   states (`opt_rank` in `Sharded::new`); at stage 0 the simulator's state storages made live
//!   at the start (`Replay::zero_grad`, step counters and shared state left out); 0 offloaded.
//! * DDP's buckets (stages 0 and 1 over several ranks): `buckets_total` covers every trainable
//!   gradient ([`super::zero::ddp_buckets`] sums to its input).
//!
//! A parameter is counted for the piece holding the first op that reads it (a pipeline piece is
//! a run of whole blocks, [`super::pipeline::slice_with`], and takes every tensor its ops read),
//! so a parameter several pieces read counts once, and the floor stays below each piece.

use super::layout::Layout;
use super::pipeline;
use super::zero::shard_bytes;
use crate::estimator::config::Setup;
use crate::estimator::graph::{Graph, StorageKind};
use crate::estimator::units::{Bytes, DType};

/// Parameter tensors alike in everything every sharding reads (a layer's experts are), and
/// how many.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct ParamRow {
    /// The block of the first op that reads it.
    block: usize,
    /// Its storage's bytes rounded to the allocator's block (`ShardFacts::of`'s `full`).
    full: u64,
    d0: u64,
    row: u64,
    bits: u64,
    trainable: bool,
    expert: bool,
    /// Its storage's bytes where this is the storage's first parameter tensor, else 0 (the
    /// simulator's `Params` counts storages).
    storage: u64,
    /// The stage-0 optimizer state the simulator makes live for it (`Replay::zero_grad`).
    state: u64,
    count: u64,
}

/// The resident floor of a graph's parameters, for every pipeline cut and sharding.
pub struct ResidentFloor {
    /// Parameter elements first used in each block (what stages balance, as `prepare` cuts).
    weights: Vec<u64>,
    params: Vec<ParamRow>,
}

impl ResidentFloor {
    /// `plan`: the setup the graph was built for (its optimizer).
    pub fn of(g: &Graph, plan: &Setup) -> ResidentFloor {
        let bl = pipeline::blocks(g);
        let mut block_of = vec![0usize; g.ops.len()];
        for (k, b) in bl.iter().enumerate() {
            block_of[b.ops.clone()].fill(k);
        }
        let mut seen = vec![false; g.tensors.len()];
        let mut storage_seen = vec![false; g.storages.len()];
        let paged = plan.opt.is_paged();
        let mut params = Vec::new();
        for (i, op) in g.ops.iter().enumerate() {
            for &t in &op.inputs {
                let tensor = &g.tensors[t];
                if !tensor.is_param || seen[t] {
                    continue;
                }
                seen[t] = true;
                let st = &g.storages[tensor.storage];
                let full = st.bytes.allocator_block().0;
                let storage = if st.kind == StorageKind::Param && !storage_seen[tensor.storage] {
                    storage_seen[tensor.storage] = true;
                    full
                } else {
                    0
                };
                let state = if tensor.requires_grad && !paged {
                    plan.opt
                        .state_storages(&tensor.shape, tensor.dtype)
                        .into_iter()
                        .map(|b| Bytes(b).allocator_block().0)
                        .sum()
                } else {
                    0
                };
                params.push(ParamRow {
                    block: block_of[i],
                    full,
                    d0: tensor.shape.first().copied().unwrap_or(1),
                    row: tensor.shape.iter().skip(1).product(),
                    bits: tensor.dtype.bits(),
                    trainable: tensor.requires_grad,
                    expert: tensor.expert,
                    storage,
                    state,
                    count: 1,
                });
            }
        }
        // A 128-expert layer's experts are one row each: a search asks the floor of every
        // layout it tries, and 20,000 rows each time were a tenth of its work.
        params.sort_unstable();
        params.dedup_by(|next, kept| {
            let alike = ParamRow {
                count: kept.count,
                ..next.clone()
            } == *kept;
            if alike {
                kept.count += next.count;
            }
            alike
        });
        ResidentFloor {
            weights: bl.iter().map(|b| b.param_elems).collect(),
            params,
        }
    }

    /// The floor of each of `layout`'s `pp·interleave` pieces (`None`: more chunks than blocks,
    /// which `prepare` refuses). `plan`: the setup of the layout (its optimizer, `zero_grad`).
    pub fn pieces(&self, plan: &Setup, layout: &Layout) -> Option<Vec<u64>> {
        let chunks = layout.pp * layout.interleave;
        let piece_of = pipeline::piece_of_blocks(&self.weights, chunks)?;
        let sh = layout.sharding();
        let states = plan.opt.states_per_param();
        // `StepOptions::grads_persist` of the pieces `prepare` simulates.
        let persist = crate::estimator::simulate::StepOptions {
            accumulation: layout.micro_batches,
            ..crate::estimator::simulate::StepOptions::of(plan)
        }
        .grads_persist();
        // Under a mixed-precision policy the shards are fp32 (`Sharded::new`).
        let mp = layout.mixed_precision.is_some();
        let buckets = sh.dp > 1 && sh.zero <= 1 && !sh.fsdp;
        let mut out = vec![0u64; chunks as usize];
        // ZeRO-1's state per piece, by group (dense, experts), divided once summed.
        let mut zero1 = vec![[0u64; 2]; chunks as usize];
        for p in &self.params {
            let c = piece_of[p.block];
            let bits = if mp { DType::F32.bits() } else { p.bits };
            let shard = shard_bytes(p.d0, p.row, bits, sh.replicas(p.expert));
            let mut b = 0u64;
            b += match (sh.params_sharded(), sh.offload_params) {
                (_, true) => 0,
                (true, false) => shard,
                (false, false) => p.storage,
            };
            if p.trainable {
                if sh.zero >= 2 {
                    if persist && !sh.offload_optimizer {
                        b += shard;
                    }
                } else if persist && !(sh.bucket_view && buckets) {
                    b += p.full;
                }
                if buckets {
                    b += p.full;
                }
                if !sh.offload_optimizer {
                    match sh.zero {
                        0 => b += p.state,
                        1 if !sh.fsdp => {
                            zero1[c][usize::from(p.expert)] +=
                                p.full.saturating_mul(states).saturating_mul(p.count)
                        }
                        _ => b += shard.saturating_mul(states),
                    }
                }
            }
            out[c] = out[c].saturating_add(b.saturating_mul(p.count));
        }
        for (c, groups) in zero1.iter().enumerate() {
            for (k, &s) in groups.iter().enumerate() {
                out[c] = out[c].saturating_add(s / sh.replicas(k == 1));
            }
        }
        Some(out)
    }
}

/// Whether `layout` surely does not fit `gpu`, from the resident floor of each chunk
/// (`resident`, [`ResidentFloor::pieces`]) and, where the graph of its micro-batch was built,
/// the saved-activation floor (`saved`, [`super::SavedFloor::pieces`]). At a chunk's last
/// forward event the saved activations and the resident state are live together, so
/// `Sharded::at` there is at least `resident[c] + saved[c]`; the peak `evaluate` finds is at
/// least that event plus the micro-batches in flight beyond it (`extra`, each at least the
/// chunks' mean saved floor, as [`super::evaluate::floor_over`] argues) plus the workspaces and
/// the context; the other chunks' state and the allocator overhead are at least 0. The saved
/// floor is not asked under activation offload (it does not hold there).
pub fn resident_over(
    plan: &Setup,
    layout: &Layout,
    resident: &[u64],
    saved: Option<&[u64]>,
    gpu: &crate::estimator::hardware::Gpu,
) -> bool {
    let saved = saved.filter(|_| !layout.offload.activations);
    let overhead = crate::estimator::hardware::DeviceOverhead::of(Some(gpu), &plan.stack);
    let fixed = overhead.workspaces.0.saturating_add(overhead.context.0);
    let m = layout.micro_batches as u64;
    let (pp, v) = (layout.pp, layout.interleave);
    let saved_at = |c: usize| saved.and_then(|s| s.get(c).copied()).unwrap_or(0);
    (0..pp).any(|i| {
        let chunks: Vec<usize> = (0..v)
            .map(|j| (i + j * pp) as usize)
            .filter(|&c| c < resident.len())
            .collect();
        let mean = chunks.iter().map(|&c| saved_at(c)).sum::<u64>() / chunks.len().max(1) as u64;
        let extra = pipeline::in_flight(i, pp, m, v)
            .saturating_sub(1)
            .saturating_mul(mean);
        chunks.iter().any(|&c| {
            resident[c]
                .saturating_add(saved_at(c))
                .saturating_add(extra)
                .saturating_add(fixed)
                > gpu.memory.0
        })
    })
}

/// What the floor is checked against in tests: for each prepared piece of `layout`, the least
/// [`super::zero::Sharded::at`] total over its forward and backward events.
pub fn least_forward_backward(plan: &Setup, layout: &Layout, prep: &super::Prepared) -> Vec<u64> {
    let (sh, states) = (layout.sharding(), plan.opt.states_per_param());
    prep.pieces
        .iter()
        .map(|p| {
            let s = super::zero::Sharded::new(p, sh, states, layout.mixed_precision);
            p.r.timeline
                .events
                .iter()
                .filter(|e| {
                    matches!(
                        e.phase,
                        crate::estimator::timeline::Phase::Forward
                            | crate::estimator::timeline::Phase::Backward
                    )
                })
                .map(|e| s.at(e).total())
                .min()
                .unwrap_or(0)
        })
        .collect()
}
