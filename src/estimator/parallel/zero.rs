//! Data parallelism and the ZeRO stages: what one data-parallel rank keeps of the parameters,
//! gradients and optimizer state, and which communication buffers it adds.
//!
//! The stages are those of Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training
//! Trillion Parameter Models" (§5, Fig. 1), run as PyTorch runs them:
//!
//! * **0: DDP** (`torch/nn/parallel/distributed.py`). Everything is replicated; the C++ reducer
//!   keeps flat bucket buffers (`Bucket::gradients` in `torch/csrc/distributed/c10d/reducer.hpp`),
//!   sized by `bucket_cap_mb` (default `_DEFAULT_BUCKET_CAP_MB = 25` MiB, the first bucket
//!   `dist._DEFAULT_FIRST_BUCKET_BYTES = 1` MiB), filled in gradient-ready order (the reverse of the
//!   forward) once the reducer rebuilt its buckets after the first iteration. With the default
//!   `gradient_as_bucket_view=False` the buckets duplicate the gradients (`.grad` is copied in, the
//!   all-reduced result copied back); with `True` the gradients are views into them.
//! * **1: ZeroRedundancyOptimizer** over DDP (`torch/distributed/optim/zero_redundancy_optimizer.py`):
//!   each rank keeps the optimizer state of whole parameters assigned greedily, largest first, to
//!   the least-loaded rank (`_partition_parameters`); after its step a rank broadcasts its
//!   parameters.
//! * **2 and 3: FSDP** (`torch/distributed/fsdp/_fully_shard/_fully_shard.py`, FSDP2). Each
//!   parameter is split along dim 0 into `ceil(d0/N)`-row shards, padded to equal size; optimizer
//!   state and reduced gradients are kept as shards. Every numbered block (a layer) is a unit; the
//!   rest of the model is the root unit. In forward and backward a unit's parameters are
//!   all-gathered and, with the rate limiter, at most the current unit and the prefetched next one
//!   are unsharded (`limit_all_gathers` in `fully_sharded_data_parallel.py`: "the current instance
//!   running computation and the next instance whose all-gather is prefetched"). Stage 3 reshards
//!   each unit after its forward and gathers it again in backward (`reshard_after_forward=True`);
//!   stage 2 keeps it unsharded until its backward is done (`False`, SHARD_GRAD_OP). The root is
//!   never resharded after forward (FSDP2's default for the root). A unit's gradients stay
//!   unsharded until its backward ends, then are reduce-scattered; the reduce-scatter input (one
//!   unit's full gradients) is in flight while the next unit computes.
//!
//! Without `fsdp`, stages 2 and 3 are the paper's partitioning: stage 2 keeps parameters
//! replicated at all times (no shard copy), stage 3 gathers the root's parameters only while its
//! ops run.

use std::ops::Range;

use crate::estimator::graph::{Graph, TensorId};
use crate::estimator::timeline::{Category, Event, Phase};
use crate::estimator::units::Bytes;

use super::Piece;

/// Per-GPU model-state bytes of the ZeRO paper (Rajbhandari et al. 2020, §5.1, Fig. 1) for Ψ
/// parameters, `nd` data-parallel ranks and `k` bytes of optimizer state per parameter (12 for
/// mixed-precision Adam: fp32 master weights, momentum and variance), with 2-byte parameters and
/// gradients: stage 0 `(2 + 2 + K)Ψ`, 1 `4Ψ + KΨ/N`, 2 `2Ψ + (2 + K)Ψ/N`, 3 `(2 + 2 + K)Ψ/N`.
pub fn paper_model_states(psi: f64, nd: f64, k: f64, stage: u8) -> f64 {
    let s = shard_model_states(
        ModelStates {
            params: 2.0 * psi,
            grads: 2.0 * psi,
            optimizer: k * psi,
        },
        nd,
        stage,
    );
    s.params + s.grads + s.optimizer
}

/// Parameter, gradient and optimizer-state bytes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ModelStates {
    pub params: f64,
    pub grads: f64,
    pub optimizer: f64,
}

/// What one of `nd` ranks keeps of `full` at ZeRO `stage` (the paper's P_os, P_os+g, P_os+g+p).
pub fn shard_model_states(full: ModelStates, nd: f64, stage: u8) -> ModelStates {
    let nd = nd.max(1.0);
    ModelStates {
        params: if stage >= 3 {
            full.params / nd
        } else {
            full.params
        },
        grads: if stage >= 2 {
            full.grads / nd
        } else {
            full.grads
        },
        optimizer: if stage >= 1 {
            full.optimizer / nd
        } else {
            full.optimizer
        },
    }
}

/// Rows of dim 0 that rank `rank` of `n` holds (`torch.chunk` semantics, as FSDP2 shards):
/// `ceil(d0/n)` rows each, the last ranks fewer or none. Summed over ranks it is `d0`.
pub fn shard_rows(d0: u64, n: u64, rank: u64) -> u64 {
    let n = n.max(1);
    let c = d0.div_ceil(n);
    d0.saturating_sub(rank * c).min(c)
}

/// Elements of a tensor of `shape` that rank `rank` of `n` holds (unpadded).
pub fn shard_elems(shape: &[u64], n: u64, rank: u64) -> u64 {
    let d0 = shape.first().copied().unwrap_or(1);
    let rest: u64 = shape.iter().skip(1).product();
    shard_rows(d0, n, rank) * rest
}

/// Elements of the padded shard every rank allocates (FSDP2 pads dim 0 to a multiple of `n`).
pub fn padded_shard_elems(shape: &[u64], n: u64) -> u64 {
    let d0 = shape.first().copied().unwrap_or(1);
    let rest: u64 = shape.iter().skip(1).product();
    d0.div_ceil(n.max(1)) * rest
}

/// ZeroRedundancyOptimizer's partition: parameters (by element count) sorted largest first, each
/// to the rank with the fewest elements so far. Returns the parameter indices of each rank.
pub fn greedy_partition(numels: &[u64], n: u64) -> Vec<Vec<usize>> {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    let n = n.max(1) as usize;
    let mut order: Vec<usize> = (0..numels.len()).collect();
    // Stable sort, as Python's `sorted`: equal sizes keep registration order.
    order.sort_by_key(|&i| Reverse(numels[i]));
    // `_get_min_index` takes the first rank of least load: a min-heap on (load, rank).
    let mut heap: BinaryHeap<Reverse<(u64, usize)>> = (0..n.min(numels.len().max(1)))
        .map(|r| Reverse((0, r)))
        .collect();
    let mut out = vec![Vec::new(); n];
    for i in order {
        if let Some(Reverse((load, r))) = heap.pop() {
            out[r].push(i);
            heap.push(Reverse((load + numels[i], r)));
        }
    }
    out
}

/// DDP's gradient buckets: gradients in ready order (reverse of the forward) grouped until a
/// bucket reaches its cap (1 MiB for the first, `cap` after; a single larger gradient gets a
/// bucket of its own size). Returns each bucket's bytes.
pub fn ddp_buckets(grad_bytes_ready_order: &[u64], first_cap: u64, cap: u64) -> Vec<u64> {
    let mut out = Vec::new();
    let mut cur = 0u64;
    for &b in grad_bytes_ready_order {
        cur += b;
        let limit = if out.is_empty() { first_cap } else { cap };
        if cur >= limit {
            out.push(cur);
            cur = 0;
        }
    }
    if cur > 0 {
        out.push(cur);
    }
    out
}

/// `bucket_cap_mb` default (`_DEFAULT_BUCKET_CAP_MB = 25`, MiB).
pub const DDP_BUCKET_CAP: u64 = 25 << 20;
/// `dist._DEFAULT_FIRST_BUCKET_BYTES` (1 MiB).
pub const DDP_FIRST_BUCKET: u64 = 1 << 20;

/// Bytes of one rank's shard of a parameter of `d0` rows of `row` elements of `bits` bits
/// replicated over `replicas` ranks, as the allocator holds it: FSDP2 pads dim 0 to a multiple
/// of the ranks ([`padded_shard_elems`]), so every rank holds `ceil(d0/replicas)` rows.
pub(super) fn shard_bytes(d0: u64, row: u64, bits: u64, replicas: u64) -> u64 {
    let rows = d0.div_ceil(replicas.max(1));
    Bytes((rows * row * bits).div_ceil(8)).allocator_block().0
}

/// How one data-parallel rank holds the model states.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sharding {
    pub dp: u64,
    /// Expert-parallel degree within `dp`: a routed expert's weights are replicated (and their
    /// states sharded) over the `dp/ep` ranks holding the same experts only.
    pub ep: u64,
    pub zero: u8,
    pub fsdp: bool,
    pub bucket_view: bool,
    /// Optimizer state (and reduced gradient shards) live in host memory.
    pub offload_optimizer: bool,
    /// Parameter shards live in host memory (stage 3 only).
    pub offload_params: bool,
}

impl Sharding {
    pub fn none() -> Sharding {
        Sharding {
            dp: 1,
            ep: 1,
            zero: 0,
            fsdp: false,
            bucket_view: false,
            offload_optimizer: false,
            offload_params: false,
        }
    }
    pub(super) fn params_sharded(&self) -> bool {
        self.zero >= 3 || (self.zero == 2 && self.fsdp)
    }
    /// Ranks a parameter is replicated over, which its states are sharded across: the
    /// data-parallel group, or for an expert's weights the expert-data-parallel one (`dp/ep`;
    /// DeepSpeed-MoE's `expert_data_parallel_group`, Megatron-LM's expert data parallelism).
    pub fn replicas(&self, expert: bool) -> u64 {
        if expert {
            (self.dp / self.ep.max(1)).max(1)
        } else {
            self.dp.max(1)
        }
    }
}

/// One parameter as a rank holds it.
#[derive(Clone, Debug)]
struct ParamShard {
    full: u64,
    shard: u64,
    trainable: bool,
    expert: bool,
    unit: Option<usize>,
}

/// One parameter of a piece, as every sharding sees it.
#[derive(Clone, Debug)]
struct ParamFact {
    full: u64,
    /// Rows of dim 0 and elements per row (FSDP shards along dim 0), and its dtype's bits.
    d0: u64,
    row: u64,
    bits: u64,
    trainable: bool,
    expert: bool,
    unit: Option<usize>,
    /// Backward op at which its gradient arrives (AccumulateGrad steals it into `.grad`).
    arrival: Option<usize>,
}

/// What [`Sharded`] needs of a piece that no sharding changes, found once per piece: a layout
/// search shards each prepared piece for every data-parallel degree, ZeRO stage and offload it
/// tries, and walking a 128-expert model's ops and tensors each time was a quarter of it.
#[derive(Clone, Debug, Default)]
pub struct ShardFacts {
    params: Vec<ParamFact>,
    unit_full: Vec<u64>,
    unit_grad_full: Vec<u64>,
    root_full: u64,
    /// Fraction of the backward's work done once op i's backward has run.
    done_after: Vec<f64>,
    /// Next unit whose first op comes after op i (forward prefetch), previous unit before op i.
    next_unit: Vec<Option<usize>>,
    prev_unit: Vec<Option<usize>>,
    /// Per op i: the parameters of the units begun by op i (`start <= i`), how many units those
    /// are, and the trainable gradients held unreduced at op i.
    started_full: Vec<u64>,
    units_started: Vec<u32>,
    unreduced_grads: Vec<u64>,
    /// The unit whose backward finishes first (the latest start, the first such unit): the last
    /// one reduced whenever any is.
    latest_unit: Option<usize>,
}

impl ShardFacts {
    pub fn of(
        g: &Graph,
        op_params: &[Vec<TensorId>],
        unit_of_op: &[Option<usize>],
        units: &[Range<usize>],
    ) -> ShardFacts {
        let mut params = Vec::new();
        let mut index_of = vec![usize::MAX; g.tensors.len()];
        for (ti, t) in g.tensors.iter().enumerate() {
            if !t.is_param {
                continue;
            }
            index_of[ti] = params.len();
            params.push(ParamFact {
                full: g.storages[t.storage].bytes.allocator_block().0,
                d0: t.shape.first().copied().unwrap_or(1),
                row: t.shape.iter().skip(1).product(),
                bits: t.dtype.bits(),
                trainable: t.requires_grad,
                expert: t.expert,
                unit: None,
                arrival: None,
            });
        }
        for (i, ps) in op_params.iter().enumerate() {
            for &p in ps {
                let k = index_of[p];
                if k != usize::MAX && params[k].unit.is_none() {
                    params[k].unit = unit_of_op[i];
                }
            }
        }
        // A gradient arrives at the latest op (in forward order) whose backward produces it; the
        // simulator steals it into `.grad` there. Under autocast the parameter's gradient comes
        // from its cached cast (`to_copy`), whose record lists it: this covers both.
        for (i, op) in g.ops.iter().enumerate() {
            for &(t, _) in &op.grads {
                let k = index_of[t];
                if k != usize::MAX {
                    params[k].arrival = Some(params[k].arrival.map_or(i, |a: usize| a.max(i)));
                }
            }
        }
        let nu = units.len();
        let mut unit_full = vec![0u64; nu];
        let mut unit_grad_full = vec![0u64; nu];
        let mut root_full = 0u64;
        for p in &params {
            match p.unit {
                Some(u) => {
                    unit_full[u] += p.full;
                    if p.trainable {
                        unit_grad_full[u] += p.full;
                    }
                }
                None => root_full += p.full,
            }
        }
        // Backward ≈ 2× the op's forward FLOPs, in reverse order: when a gradient arriving at
        // op i is ready.
        let total_bwd: f64 = g.ops.iter().map(|o| o.flops).sum::<f64>().max(1.0);
        let nops = g.ops.len();
        let mut done_after = vec![0.0f64; nops];
        let mut acc = 0.0;
        for i in (0..nops).rev() {
            acc += g.ops[i].flops;
            done_after[i] = acc / total_bwd;
        }
        let mut next_unit = vec![None; nops];
        let mut prev_unit = vec![None; nops];
        let mut nxt = None;
        for i in (0..nops).rev() {
            if let Some(u) = unit_of_op[i] {
                if units[u].start == i {
                    nxt = Some(u);
                }
            }
            next_unit[i] = nxt.filter(|&u| Some(u) != unit_of_op[i]);
        }
        let mut prv = None;
        for (prev, &unit) in prev_unit.iter_mut().zip(unit_of_op) {
            *prev = prv.filter(|&u| Some(u) != unit);
            if let Some(u) = unit {
                prv = Some(u);
            }
        }
        // Prefix sums by op index; a parameter whose gradient arrives past the last op stays
        // unreduced to the end.
        let mut started_full = vec![0u64; nops];
        let mut units_started = vec![0u32; nops];
        for (u, r) in units.iter().enumerate() {
            if r.start < nops {
                started_full[r.start] += unit_full[u];
                units_started[r.start] += 1;
            }
        }
        let mut ends = vec![0u64; nops + 1];
        let mut unreduced_grads = vec![0u64; nops];
        for p in params.iter().filter(|p| p.trainable) {
            let lo = p.unit.map_or(0, |u| units[u].start);
            if let Some(a) = p.arrival.filter(|&a| lo <= a && lo < nops) {
                unreduced_grads[lo] += p.full;
                ends[a.min(nops - 1) + 1] += p.full;
            }
        }
        let (mut f, mut n, mut live) = (0u64, 0u32, 0u64);
        for i in 0..nops {
            f += started_full[i];
            n += units_started[i];
            live = live + unreduced_grads[i] - ends[i];
            started_full[i] = f;
            units_started[i] = n;
            unreduced_grads[i] = live;
        }
        let mut latest_unit: Option<usize> = None;
        for (u, r) in units.iter().enumerate() {
            if latest_unit.is_none_or(|l: usize| units[l].start < r.start) {
                latest_unit = Some(u);
            }
        }
        ShardFacts {
            params,
            unit_full,
            unit_grad_full,
            root_full,
            done_after,
            next_unit,
            prev_unit,
            started_full,
            units_started,
            unreduced_grads,
            latest_unit,
        }
    }
}

/// The static facts of a piece under a sharding, precomputed once.
pub struct Sharded<'a> {
    piece: &'a Piece,
    facts: &'a ShardFacts,
    sh: Sharding,
    params: Vec<ParamShard>,
    unit_full: &'a [u64],
    unit_grad_full: &'a [u64],
    root_full: u64,
    param_shard_total: u64,
    grad_shard_total: u64,
    opt_full: u64,
    opt_rank: u64,
    /// DDP bucket buffers (stages 0 and 1 with more than one rank).
    pub buckets: Vec<u64>,
    /// Fraction of the backward elapsed when each bucket's last gradient is ready.
    pub bucket_ready: Vec<f64>,
    /// FSDP's mixed-precision policy, if any (gradients are reduced in its `reduce_dtype`).
    mp: Option<super::MixedPrecision>,
    /// The gradient shards of the first k units begun, by k ([`ShardFacts::units_started`]).
    started_grad_shard: Vec<u64>,
    unit_grad_shard_total: u64,
    buckets_total: u64,
}

/// Live bytes of one rank at one moment: the simulator's categories plus communication buffers.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RankLive {
    pub cats: [u64; Category::COUNT],
    pub comm_buffers: u64,
}

impl RankLive {
    pub fn total(&self) -> u64 {
        self.cats
            .iter()
            .fold(self.comm_buffers, |a, &b| a.saturating_add(b))
    }
    pub fn add(&mut self, o: &RankLive) {
        for i in 0..Category::COUNT {
            self.cats[i] = self.cats[i].saturating_add(o.cats[i]);
        }
        self.comm_buffers = self.comm_buffers.saturating_add(o.comm_buffers);
    }
}

impl<'a> Sharded<'a> {
    /// `mp`: FSDP's mixed precision — the graph was built in its `param_dtype`; the shards (and so
    /// the sharded gradients and the optimizer state) are fp32.
    pub fn new(
        piece: &'a Piece,
        sh: Sharding,
        states_per_param: u64,
        mp: Option<super::MixedPrecision>,
    ) -> Sharded<'a> {
        let facts = &piece.shard_facts;
        let n = sh.dp.max(1);
        let params: Vec<ParamShard> = facts
            .params
            .iter()
            .map(|p| {
                // Under a mixed-precision policy the shards are the model's fp32 master weights
                // (`Layout::resolve` refuses the policy over other weights).
                let bits = if mp.is_some() {
                    crate::estimator::units::DType::F32.bits()
                } else {
                    p.bits
                };
                ParamShard {
                    full: p.full,
                    shard: shard_bytes(p.d0, p.row, bits, sh.replicas(p.expert)),
                    trainable: p.trainable,
                    expert: p.expert,
                    unit: p.unit,
                }
            })
            .collect();
        let mut unit_grad_shard = vec![0u64; facts.unit_full.len()];
        for p in params.iter().filter(|p| p.trainable) {
            if let Some(u) = p.unit {
                unit_grad_shard[u] += p.shard;
            }
        }
        let param_shard_total: u64 = params.iter().map(|p| p.shard).sum();
        let grad_shard_total: u64 = params.iter().filter(|p| p.trainable).map(|p| p.shard).sum();
        let opt_full: u64 = params
            .iter()
            .filter(|p| p.trainable)
            .map(|p| p.full * states_per_param)
            .sum();
        let opt_rank = match sh.zero {
            0 => opt_full,
            // Experts' states are partitioned over their own group (a parameter group of its
            // own, as DeepSpeed-MoE splits them): the rank most loaded in each, summed, which is
            // rank 0 of both when the largest tensors lead.
            1 if !sh.fsdp => [false, true]
                .iter()
                .map(|&expert| {
                    let tr: Vec<&ParamShard> = params
                        .iter()
                        .filter(|p| p.trainable && p.expert == expert)
                        .collect();
                    let numels: Vec<u64> = tr.iter().map(|p| p.full).collect();
                    greedy_partition(&numels, sh.replicas(expert))
                        .iter()
                        .map(|idx| {
                            idx.iter()
                                .map(|&i| tr[i].full * states_per_param)
                                .sum::<u64>()
                        })
                        .max()
                        .unwrap_or(0)
                })
                .sum(),
            _ => params
                .iter()
                .filter(|p| p.trainable)
                .map(|p| p.shard * states_per_param)
                .sum(),
        };
        let (mut buckets, mut bucket_ready) = (Vec::new(), Vec::new());
        if n > 1 && sh.zero <= 1 && !sh.fsdp {
            // Ready order: the reverse of the forward.
            let mut order: Vec<(usize, u64)> = facts
                .params
                .iter()
                .filter(|p| p.trainable)
                .map(|p| (p.arrival.unwrap_or(0), p.full))
                .collect();
            order.sort_by_key(|&(a, _)| std::cmp::Reverse(a));
            let bytes: Vec<u64> = order.iter().map(|&(_, b)| b).collect();
            let sizes = ddp_buckets(&bytes, DDP_FIRST_BUCKET, DDP_BUCKET_CAP);
            let mut k = 0;
            for b in sizes {
                let mut got = 0;
                let mut ready = 0.0f64;
                while got < b && k < order.len() {
                    got += order[k].1;
                    ready = ready.max(facts.done_after.get(order[k].0).copied().unwrap_or(1.0));
                    k += 1;
                }
                buckets.push(Bytes(b).allocator_block().0);
                bucket_ready.push(ready);
            }
        }
        // Units begin in op order: the shards of the first k begun, by k.
        let mut started_grad_shard = Vec::with_capacity(unit_grad_shard.len() + 1);
        started_grad_shard.push(0u64);
        let mut acc = 0u64;
        for &b in &unit_grad_shard {
            acc += b;
            started_grad_shard.push(acc);
        }
        Sharded {
            unit_grad_shard_total: acc,
            started_grad_shard,
            buckets_total: buckets.iter().sum::<u64>(),
            piece,
            facts,
            sh,
            params,
            unit_full: &facts.unit_full,
            unit_grad_full: &facts.unit_grad_full,
            root_full: facts.root_full,
            param_shard_total,
            grad_shard_total,
            opt_full,
            opt_rank,
            buckets,
            bucket_ready,
            mp,
        }
    }

    /// Bytes of the parameters at rest on this rank (shards when they are sharded).
    pub fn params_at_rest(&self) -> u64 {
        if self.sh.params_sharded() {
            self.param_shard_total
        } else {
            self.params.iter().map(|p| p.full).sum()
        }
    }
    pub fn params_full(&self) -> u64 {
        self.params.iter().map(|p| p.full).sum()
    }
    /// Bytes of the routed experts' weights this rank holds unsharded (its `E/ep` experts).
    pub fn expert_params_full(&self) -> u64 {
        self.params
            .iter()
            .filter(|p| p.expert)
            .map(|p| p.full)
            .sum()
    }
    /// The experts' part of [`Sharded::grads_reduced`]: reduced over the expert-data-parallel
    /// group, not the whole data-parallel one.
    pub fn expert_grads_reduced(&self) -> u64 {
        self.reduced_bytes(
            self.params
                .iter()
                .filter(|p| p.trainable && p.expert)
                .map(|p| p.full)
                .sum(),
        )
    }
    pub fn grads_full(&self) -> u64 {
        self.params
            .iter()
            .filter(|p| p.trainable)
            .map(|p| p.full)
            .sum()
    }
    /// Gradient bytes as reduced (in FSDP's `reduce_dtype`).
    pub fn grads_reduced(&self) -> u64 {
        self.reduced_bytes(self.grads_full())
    }
    fn reduced_bytes(&self, unsharded: u64) -> u64 {
        match self.mp {
            Some(m) => {
                (unsharded as u128 * m.reduce_dtype.bits() as u128 / m.param_dtype.bits() as u128)
                    as u64
            }
            None => unsharded,
        }
    }
    /// Gradient bytes this rank keeps after reduction.
    pub fn grads_at_rest(&self) -> u64 {
        if self.sh.zero >= 2 {
            self.grad_shard_total
        } else {
            self.grads_full()
        }
    }
    pub fn optimizer_state(&self) -> u64 {
        self.opt_rank
    }
    pub fn optimizer_state_full(&self) -> u64 {
        self.opt_full
    }
    /// `bytes` scaled to the share of the parameters whose optimizer state this rank owns
    /// (everything at stage 0, 1/N from stage 1): what an offloaded optimizer steps on.
    pub fn optimizer_share(&self, bytes: u64) -> u64 {
        if self.opt_full == 0 || self.sh.zero == 0 {
            return bytes;
        }
        (bytes as u128 * self.opt_rank as u128 / self.opt_full as u128) as u64
    }
    pub fn unit_params_full(&self) -> &[u64] {
        self.unit_full
    }
    pub fn root_params_full(&self) -> u64 {
        self.root_full
    }
    pub fn unit_grads_full(&self) -> &[u64] {
        self.unit_grad_full
    }

    /// Whether unit `u`'s backward is finished when op `i` runs its backward.
    fn reduced(&self, u: usize, i: usize) -> bool {
        i < self.piece.units[u].start
    }

    /// The rank's live bytes at one event of the piece's simulated step.
    pub fn at(&self, ev: &Event) -> RankLive {
        let mut c = ev.live.0;
        let sh = &self.sh;
        let phase = ev.phase;
        let op = ev.op;
        let unit = op.and_then(|i| self.piece.unit_of_op[i]);
        let stepping = matches!(phase, Phase::Forward | Phase::Backward) && op.is_some();
        let mut comm = self.buckets_total;

        // Parameters.
        if sh.params_sharded() {
            let rest = if sh.offload_params {
                0
            } else {
                self.param_shard_total
            };
            let mut gathered = 0u64;
            if stepping {
                let i = op.unwrap_or(0);
                let root_live = sh.fsdp || unit.is_none();
                if root_live {
                    gathered += self.root_full;
                }
                if sh.zero == 2 {
                    // Gathered once in forward, kept until each unit's backward is done.
                    gathered += self.facts.started_full[i];
                    if phase == Phase::Forward {
                        if let Some(n) = self.facts.next_unit[i] {
                            gathered += self.unit_full[n];
                        }
                    }
                } else {
                    if let Some(u) = unit {
                        gathered += self.unit_full[u];
                    }
                    let pre = if phase == Phase::Forward {
                        self.facts.next_unit[i]
                    } else {
                        self.facts.prev_unit[i]
                    };
                    if let Some(n) = pre {
                        gathered += self.unit_full[n];
                    }
                }
            }
            c[Category::Params.index()] = rest + gathered;
        } else if sh.offload_params {
            c[Category::Params.index()] = 0;
        }

        // Gradients.
        if sh.zero >= 2 {
            let mut g = 0u64;
            let persist = self.piece.grads_persist;
            let shards_on_gpu = !sh.offload_optimizer;
            match (phase, op) {
                (Phase::Backward, Some(i)) => {
                    // Units whose backward is done (op i comes before their first op) hold
                    // their reduced shards.
                    if shards_on_gpu && !persist {
                        g += self.unit_grad_shard_total
                            - self.started_grad_shard[self.facts.units_started[i] as usize];
                    }
                    let last_reduced = self.facts.latest_unit.filter(|&u| self.reduced(u, i));
                    if persist && shards_on_gpu {
                        g += self.grad_shard_total;
                    }
                    g += self.facts.unreduced_grads[i];
                    // The last reduce-scatter's input is in flight while the next unit computes.
                    if let Some(u) = last_reduced {
                        comm += self.reduced_bytes(self.unit_grad_full[u]);
                    }
                }
                (Phase::Forward, _) if !persist => {}
                _ => {
                    if shards_on_gpu {
                        g = self.grad_shard_total;
                    }
                }
            }
            c[Category::Gradients.index()] = g;
        } else {
            if sh.bucket_view && !self.buckets.is_empty() {
                // `.grad` are views into the buckets.
                c[Category::Gradients.index()] = 0;
            }
            if sh.offload_optimizer && phase == Phase::Optimizer {
                // Gradients were copied to the host; the GPU copy is freed before the step.
                c[Category::Gradients.index()] = 0;
            }
        }

        // Optimizer state and the step's temporaries.
        if sh.offload_optimizer {
            c[Category::OptimizerState.index()] = 0;
            c[Category::OptimizerTemps.index()] = 0;
        } else if sh.zero >= 1 && self.opt_full > 0 {
            c[Category::OptimizerState.index()] = self.opt_rank;
            let t = c[Category::OptimizerTemps.index()] as u128 * self.opt_rank as u128
                / self.opt_full as u128;
            c[Category::OptimizerTemps.index()] = t as u64;
        } else if sh.zero >= 1 {
            c[Category::OptimizerState.index()] = 0;
        }
        RankLive {
            cats: c,
            comm_buffers: comm,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_rows_sum_to_the_whole() {
        for d0 in [1u64, 7, 8, 1000, 50257] {
            for n in [1u64, 2, 3, 8, 64] {
                let s: u64 = (0..n).map(|r| shard_rows(d0, n, r)).sum();
                assert_eq!(s, d0);
            }
        }
    }

    #[test]
    fn buckets_cover_every_gradient() {
        let b = ddp_buckets(
            &[4 << 20, 1 << 20, 30 << 20, 2 << 20],
            DDP_FIRST_BUCKET,
            DDP_BUCKET_CAP,
        );
        assert_eq!(b.iter().sum::<u64>(), 37 << 20);
        assert_eq!(b[0], 4 << 20);
    }

    #[test]
    fn greedy_is_largest_first() {
        let p = greedy_partition(&[1, 5, 3, 3], 2);
        let loads: Vec<u64> = p
            .iter()
            .map(|v| v.iter().map(|&i| [1u64, 5, 3, 3][i]).sum())
            .collect();
        assert_eq!(loads.iter().max(), Some(&6));
    }
}
