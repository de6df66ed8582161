//! The model cut for a layout: built with its tensor-parallel degree, sliced into pipeline
//! chunks, each chunk simulated once ([`Piece`]); [`Prepared`] is what every layout with the
//! same model-parallel degrees shares.

use std::ops::Range;
use std::sync::Arc;

use super::layout::{bad, Layout};
use super::zero::ShardFacts;
use super::{offload, pipeline};
use crate::estimator::allocator::packed_peak;
use crate::estimator::config::Setup;
use crate::estimator::error::EstimateError;
use crate::estimator::graph::{Graph, StorageKind, TensorId};
use crate::estimator::model::ModelSpec;
use crate::estimator::simulate::{simulate, simulate_timeline, StepOptions, StepResult};
use crate::estimator::timeline::{Category, Phase};

/// One simulated piece of the model (the whole model, or one pipeline chunk).
pub struct Piece {
    /// Shared with the caller's build for a one-chunk layout (a search prepares many layouts of
    /// one build: a copy each was a tenth of a 128-expert search).
    pub g: Arc<Graph>,
    pub r: StepResult,
    /// Parameters each op reads (through autocast's casts).
    pub op_params: Vec<Vec<TensorId>>,
    /// The FSDP unit (numbered block) of each op; `None`: the root.
    pub unit_of_op: Vec<Option<usize>>,
    pub units: Vec<Range<usize>>,
    /// What every sharding of this piece reads ([`super::zero::Sharded`]).
    pub shard_facts: ShardFacts,
    /// `.grad` stays between micro-batches or steps ([`StepOptions::grads_persist`]).
    pub grads_persist: bool,
    /// Bytes one micro-batch leaves on the GPU after its forward (saved activations, the inputs it
    /// received, the output it sends): what each further micro-batch in flight adds.
    pub in_flight: u64,
    /// The most bytes a forward or backward event holds outside the parameters, gradients and
    /// optimizer state, which a layout's sharding rewrites: the floor of every layout's peak
    /// ([`super::evaluate::surely_over`]).
    pub max_unsharded: u64,
    /// Saved-activation bytes packed to the host per micro-batch (activation offload).
    pub offloaded: u64,
    /// Bytes sent to the next chunk per micro-batch, and gradient bytes sent back to the previous.
    pub send_next: u64,
    pub send_prev: u64,
}

impl Piece {
    /// `trace`: keep the allocator's stream (read for the layout's overhead, see
    /// [`prepare_with`]); without it the piece is simulated for its timeline alone.
    fn new(
        mut g: Arc<Graph>,
        opts: &StepOptions,
        offload_acts: bool,
        last: bool,
        trace: bool,
    ) -> Piece {
        let offloaded = if offload_acts {
            offload::offload_activations(Arc::make_mut(&mut g))
        } else {
            0
        };
        let r = if trace {
            simulate(&g, opts)
        } else {
            simulate_timeline(&g, opts)
        };
        let op_params = pipeline::op_params(&g);
        let bl = pipeline::blocks_with(&g, &op_params);
        let mut unit_of_op = vec![None; g.ops.len()];
        let mut units = Vec::new();
        for b in bl.iter().filter(|b| b.numbered) {
            for u in unit_of_op[b.ops.clone()].iter_mut() {
                *u = Some(units.len());
            }
            units.push(b.ops.clone());
        }
        let mut saved_in_op = vec![false; g.storages.len()];
        for op in &g.ops {
            for &t in &op.saved {
                saved_in_op[g.tensors[t].storage] = true;
            }
        }
        let mut in_flight: u64 = r.saved_after_forward.iter().sum();
        let mut send_prev = 0;
        for (s, st) in g.storages.iter().enumerate() {
            if st.kind == StorageKind::Input {
                in_flight += st.bytes.allocator_block().0;
                let _ = s;
            }
        }
        for t in g
            .tensors
            .iter()
            .filter(|t| g.storages[t.storage].kind == StorageKind::Input && t.requires_grad)
        {
            send_prev += g.storages[t.storage].bytes.0;
        }
        let mut seen = Vec::new();
        let mut send_next = 0;
        for &t in &g.kept {
            let s = g.tensors[t].storage;
            if !saved_in_op[s] && !seen.contains(&s) {
                seen.push(s);
                in_flight += g.storages[s].bytes.allocator_block().0;
            }
            if !last {
                send_next += g.storages[s].bytes.0;
            }
        }
        let max_unsharded = r
            .timeline
            .events
            .iter()
            .filter(|e| matches!(e.phase, Phase::Forward | Phase::Backward))
            .map(|e| {
                e.live.total().0
                    - [
                        Category::Params,
                        Category::Gradients,
                        Category::OptimizerState,
                        Category::OptimizerTemps,
                    ]
                    .iter()
                    .map(|&c| e.live.get(c).0)
                    .sum::<u64>()
            })
            .max()
            .unwrap_or(0);
        let shard_facts = ShardFacts::of(&g, &op_params, &unit_of_op, &units);
        Piece {
            shard_facts,
            g,
            r,
            max_unsharded,
            op_params,
            unit_of_op,
            units,
            grads_persist: opts.grads_persist(),
            in_flight,
            offloaded,
            send_next,
            send_prev,
        }
    }

    pub(super) fn forward_flops(&self) -> f64 {
        self.r.forward_flops
    }
    pub(super) fn step_flops(&self) -> f64 {
        3.0 * self.r.forward_flops + self.r.recompute_flops
    }
}

fn tp_check(model: &ModelSpec, g: &Graph, tp: u64) -> Result<(), EstimateError> {
    if tp <= 1 {
        return Ok(());
    }
    if g.tp.size == tp && g.tp.heads.is_some() {
        return Ok(());
    }
    if !model.caps.attention {
        return Err(bad(format!(
            "{} has no attention heads to split: tensor parallelism (tp = {tp}) applies to transformer models; use dp, zero or pp",
            model.label
        )));
    }
    Err(bad(format!(
        "the builder of {} does not shard its layers yet (it must call the tensor-parallel hook, `estimator::parallel::tp`): tp = {tp} cannot be estimated",
        model.label
    )))
}

/// A floor under what each piece of a pipeline cut of a graph keeps saved for its backward,
/// read off the whole graph without simulating it. A layout search builds one per
/// model-parallel degree and micro-batch and asks it ([`super::evaluate::floor_over`]) before
/// preparing a layout's pieces: simulating each piece is most of a search's time, and most
/// layouts a search tries are far too large (a 128-expert model with every expert on each GPU).
///
/// Why it is a floor. The simulator's forward (`Replay::forward` in `estimator/simulate.rs`)
/// allocates an activation storage at the first op that outputs it and frees it there only when
/// nothing holds it for backward; the end of autocast frees only casts nothing holds. Holders
/// are the ops outside checkpointed segments that save it (`Tape::pin_saved`) and the segments
/// that read it from before their first op (`Tape::pin_segment_inputs`: non-reentrant
/// checkpointing keeps a segment's inputs). A held activation is live, counted as
/// `Activations`, from its birth to the end of the forward: at the last forward event, and
/// once in `StepResult::saved_after_forward`. A pipeline piece ([`pipeline::slice_with`]) is a
/// run of whole blocks whose ops keep their saved tensors and segments, and a storage born
/// inside it stays an activation; so a storage counts for a piece when its birth and one of
/// its holders (the saving op, or the whole segment) lie in the piece. A piece's floor is
/// therefore at most its [`Piece::max_unsharded`] (the last forward event less parameters,
/// gradients and optimizer state) and its [`Piece::in_flight`] (the saved bytes plus inputs and
/// outputs). Activation offload moves saved tensors to the host
/// (`offload::offload_activations`): there the floor is not asked.
pub struct SavedFloor {
    /// Parameter elements first used in each block (what stages balance, as [`prepare`] cuts).
    weights: Vec<u64>,
    /// Held activation bytes by the block of their birth and the block of their earliest
    /// holder's end (a piece holding both holds them).
    held: Vec<(usize, usize, u64)>,
}

impl SavedFloor {
    pub fn of(g: &Graph) -> SavedFloor {
        let bl = pipeline::blocks(g);
        let mut block_of = vec![0usize; g.ops.len()];
        for (k, b) in bl.iter().enumerate() {
            block_of[b.ops.clone()].fill(k);
        }
        let none = usize::MAX;
        let activation = |s: usize| g.storages[s].kind == StorageKind::Activation;
        let mut born = vec![none; g.storages.len()];
        // The earliest op by which some holder of each storage has ended.
        let mut held_by = vec![none; g.storages.len()];
        let mut seg_first = vec![none; g.segments];
        let mut seg_last = vec![0usize; g.segments];
        for (i, op) in g.ops.iter().enumerate() {
            for &t in &op.outputs {
                let s = g.tensors[t].storage;
                if born[s] == none && activation(s) {
                    born[s] = i;
                }
            }
            match op.segment {
                None => {
                    for &t in &op.saved {
                        let s = g.tensors[t].storage;
                        held_by[s] = held_by[s].min(i);
                    }
                }
                Some(seg) => {
                    seg_first[seg] = seg_first[seg].min(i);
                    seg_last[seg] = seg_last[seg].max(i);
                }
            }
        }
        for seg in (0..g.segments).filter(|&k| seg_first[k] != none) {
            let first = seg_first[seg];
            for op in &g.ops[first..=seg_last[seg]] {
                for &t in &op.inputs {
                    let s = g.tensors[t].storage;
                    if born[s] != none && born[s] < first {
                        held_by[s] = held_by[s].min(seg_last[seg]);
                    }
                }
            }
        }
        // Storages come mostly in the order of their blocks: runs of one block pair are summed
        // as they come, then the runs sorted and merged (a map entry per storage was a fifth of
        // this floor on a 128-expert model).
        let mut held: Vec<(usize, usize, u64)> = Vec::new();
        for (s, st) in g.storages.iter().enumerate() {
            if born[s] != none && held_by[s] != none {
                let (lo, hi) = (born[s].min(held_by[s]), born[s].max(held_by[s]));
                let (a, b, n) = (block_of[lo], block_of[hi], st.bytes.allocator_block().0);
                match held.last_mut() {
                    Some(last) if (last.0, last.1) == (a, b) => last.2 += n,
                    _ => held.push((a, b, n)),
                }
            }
        }
        held.sort_unstable();
        held.dedup_by(|next, kept| {
            let same = (next.0, next.1) == (kept.0, kept.1);
            if same {
                kept.2 += next.2;
            }
            same
        });
        SavedFloor {
            weights: bl.iter().map(|b| b.param_elems).collect(),
            held,
        }
    }

    /// The floor of each of `chunks` pieces, cut as [`prepare`] cuts them (`None`: more chunks
    /// than blocks, which [`prepare`] refuses).
    pub fn pieces(&self, chunks: u64) -> Option<Vec<u64>> {
        let piece_of = pipeline::piece_of_blocks(&self.weights, chunks)?;
        let mut out = vec![0u64; chunks as usize];
        for &(lo, hi, n) in &self.held {
            if piece_of[lo] == piece_of[hi] {
                out[piece_of[lo]] += n;
            }
        }
        Some(out)
    }
}

/// Everything that depends only on the model and the model-parallel degrees (tp, pp, chunks),
/// shared by layouts that differ in dp, ZeRO stage or links.
pub struct Prepared {
    pub pieces: Vec<Piece>,
    pub chunks: u64,
    pub forward_flops_full: f64,
    /// Reserved minus allocated of the simulated step (allocator fragmentation), carried to ranks.
    pub overhead: u64,
}

/// Builds the graph for `layout`'s tensor-parallel degree, cuts it into `pp·interleave` chunks
/// and simulates each.
pub fn prepare(
    model: &ModelSpec,
    plan: &Setup,
    layout: &Layout,
) -> Result<Prepared, EstimateError> {
    prepare_reusing(model, plan, layout, None)
}

/// [`prepare`] with [`Prepared::overhead`] already known from a layout that differs only in its
/// pipeline (depth, interleaving) or offload: the overhead is the unsharded step's, which the
/// pipeline does not change, so a search saves a whole-model simulation per deeper pipeline.
pub fn prepare_reusing(
    model: &ModelSpec,
    plan: &Setup,
    layout: &Layout,
    overhead: Option<u64>,
) -> Result<Prepared, EstimateError> {
    let g = layout_graph(model, plan, layout)?;
    prepare_with(&model.label, plan, layout, Arc::new(g), overhead)
}

/// The whole model as [`prepare`] builds it for `layout` before cutting it: with the layout's
/// tensor-parallel degree and compute precision, at the plan's micro-batch. It does not depend
/// on the pipeline, the data-parallel degree, the ZeRO stage or offload, so a search builds it
/// once for all of those ([`SavedFloor`], [`prepare_built`]).
pub fn layout_graph(
    model: &ModelSpec,
    plan: &Setup,
    layout: &Layout,
) -> Result<Graph, EstimateError> {
    let mut bp = plan.clone();
    let mut par = bp.parallel.clone().unwrap_or_default();
    par.tp = layout.tp;
    par.sequence_parallel = layout.sequence_parallel;
    bp.parallel = Some(par);
    bp.accumulation = 1;
    // Under a mixed-precision policy the step runs as a model in its param_dtype would; the
    // fp32 shards are accounted by the sharding.
    bp.dtype = layout.compute_precision(plan);
    let g = crate::estimator::estimate::build_graph(model, &bp)?;
    tp_check(model, &g, layout.tp)?;
    Ok(g)
}

/// [`prepare_reusing`] for the graph [`layout_graph`] built for `layout` (or a layout that
/// differs from it only in what that graph does not depend on), shared: a pipeline's pieces
/// are slices of it, and a one-chunk layout's piece holds it (copied only to offload its
/// activations).
pub fn prepare_built(
    label: &str,
    plan: &Setup,
    layout: &Layout,
    g: &Arc<Graph>,
    overhead: Option<u64>,
) -> Result<Prepared, EstimateError> {
    prepare_with(label, plan, layout, Arc::clone(g), overhead)
}

/// [`prepare`] for a graph already built with `layout.tp` (a model outside the presets).
pub fn prepare_graph(
    label: &str,
    plan: &Setup,
    layout: &Layout,
    g: Graph,
) -> Result<Prepared, EstimateError> {
    prepare_with(label, plan, layout, Arc::new(g), None)
}

fn prepare_with(
    label: &str,
    plan: &Setup,
    layout: &Layout,
    g: Arc<Graph>,
    known_overhead: Option<u64>,
) -> Result<Prepared, EstimateError> {
    if layout.tp > 1 && (g.tp.size != layout.tp || g.tp.heads.is_none()) {
        return Err(bad(format!(
            "the graph was not built with tensor parallelism tp = {}",
            layout.tp
        )));
    }
    let opts = StepOptions {
        accumulation: layout.micro_batches,
        ..StepOptions::of(plan)
    };
    let chunks = layout.pp * layout.interleave;
    let bl = pipeline::blocks(&g);
    if chunks as usize > bl.len() {
        let layers = bl.iter().filter(|b| b.numbered).count();
        return Err(bad(format!(
            "the pipeline (pp = {}{}) is deeper than the layers of {}: it splits into {} blocks ({layers} numbered layers plus the rest); use at most pp·interleave = {}",
            layout.pp,
            if layout.interleave > 1 { format!(" × interleave {}", layout.interleave) } else { String::new() },
            label,
            bl.len(),
            bl.len()
        )));
    }
    let forward_flops_full: f64 = g.ops.iter().map(|o| o.flops).sum();
    // What the allocator's segments hold beyond the whole model's allocated peak, packed
    // perfectly: a rank's own stream (its all-gathers, reduce-scatters and copies on their own
    // streams) is not recorded, so the unsharded step's fragmentation would not be its own.
    let overhead_of = |whole: &StepResult| {
        packed_peak(&whole.alloc_trace)
            .0
            .saturating_sub(whole.timeline.peak().map(|e| e.live.total().0).unwrap_or(0))
    };
    // A one-chunk layout without activation offload simulates exactly the whole step: its
    // piece gives the overhead, so the step is simulated once.
    let piece_is_whole = chunks == 1 && !layout.offload.activations;
    let known_overhead =
        known_overhead.or_else(|| (!piece_is_whole).then(|| overhead_of(&simulate(&g, &opts))));
    let trace = known_overhead.is_none();
    let mut pieces: Vec<Piece> = if chunks == 1 {
        vec![Piece::new(
            g,
            &opts,
            layout.offload.activations,
            true,
            trace,
        )]
    } else {
        let ranges = pipeline::stage_ranges(&g, &bl, chunks as usize);
        let n = ranges.len();
        let mut life = pipeline::Lifetimes::of(&g);
        ranges
            .into_iter()
            .enumerate()
            .map(|(i, r)| {
                Piece::new(
                    Arc::new(pipeline::slice_with(&g, &mut life, r)),
                    &opts,
                    layout.offload.activations,
                    i + 1 == n,
                    trace,
                )
            })
            .collect()
    };
    let overhead = known_overhead.unwrap_or_else(|| overhead_of(&pieces[0].r));
    // The allocator's stream is only read for the overhead above; a search keeps many
    // prepared layouts, and each stream is as long as the step.
    for p in &mut pieces {
        p.r.alloc_trace = Default::default();
    }
    Ok(Prepared {
        pieces,
        chunks,
        forward_flops_full,
        overhead,
    })
}
