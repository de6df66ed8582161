//! Replays a forward tape the way PyTorch runs one training step and records live bytes.
//!
//! Forward: each op allocates its outputs; a storage is freed after its last forward user unless
//! autograd saved it, the loop keeps it (the loss) or autocast caches it (low-precision weight
//! copies, until the autocast region ends). Checkpointed segments (non-reentrant
//! `torch.utils.checkpoint`) save nothing but keep their inputs. Backward runs the nodes in
//! reverse: a segment is recomputed when its backward starts, each node allocates its input
//! gradients, then frees its output gradient and its saved tensors; parameter gradients are
//! stolen into `.grad` (`AccumulateGrad`) or added in place when `.grad` exists. The optimizer
//! step then adds its state and temporaries. Every allocation is rounded to the caching
//! allocator's 512-byte blocks.

use super::config::Device;
use super::graph::{GradFlow, Graph, StorageKind};
use super::optimizer::{OptimizerImpl, OptimizerKind};
use super::timeline::{Category, Live, Phase, Timeline};
use super::units::Bytes;

#[derive(Clone, Copy, Debug)]
pub struct StepOptions {
    pub optimizer: OptimizerKind,
    pub optimizer_impl: OptimizerImpl,
    /// Micro-batches per optimizer step; from the second on, `.grad` already exists.
    pub accumulation: u32,
    /// Where the step runs: decides whether the optimizer's step counters are device memory.
    pub device: Device,
}

/// What the replay measured besides the timeline.
#[derive(Clone, Debug, Default)]
pub struct StepResult {
    pub timeline: Timeline,
    /// Forward FLOPs of one micro-batch, and the extra FLOPs of checkpoint recomputation.
    pub forward_flops: f64,
    pub recompute_flops: f64,
    /// Bytes each op leaves saved for backward (by op index), for the per-layer chart.
    pub saved_after_forward: Vec<u64>,
}

fn rounded(b: Bytes) -> u64 {
    b.allocator_block().0
}

fn kind_category(k: StorageKind) -> Category {
    match k {
        StorageKind::Param => Category::Params,
        StorageKind::Buffer => Category::Buffers,
        StorageKind::Input => Category::Inputs,
        StorageKind::Activation => Category::Activations,
        StorageKind::KvCache => Category::KvCache,
    }
}

struct GradObj {
    bytes: u64,
    refs: u32,
    cat: Category,
}

/// Replays `g` for one steady-state step (the second of a loop: optimizer state exists).
pub fn simulate(g: &Graph, opt: &StepOptions) -> StepResult {
    let ns = g.storages.len();
    let nops = g.ops.len();
    let sbytes: Vec<u64> = g.storages.iter().map(|s| rounded(s.bytes)).collect();
    let persistent = |s: usize| g.storages[s].kind != StorageKind::Activation;

    // Static liveness facts of the forward tape.
    let mut last_use = vec![None::<usize>; ns];
    let mut born = vec![None::<usize>; ns];
    let mut savers = vec![0u32; ns];
    let mut seg_first = vec![usize::MAX; g.segments];
    let mut seg_last = vec![0usize; g.segments];
    for (i, op) in g.ops.iter().enumerate() {
        for &t in op.inputs.iter().chain(op.outputs.iter()) {
            let s = g.tensors[t].storage;
            last_use[s] = Some(i);
        }
        for &t in &op.outputs {
            let s = g.tensors[t].storage;
            if born[s].is_none() && !persistent(s) {
                born[s] = Some(i);
            }
        }
        if let Some(seg) = op.segment {
            seg_first[seg] = seg_first[seg].min(i);
            seg_last[seg] = seg_last[seg].max(i);
        }
    }
    let mut kept = vec![false; ns];
    for &t in &g.kept {
        kept[g.tensors[t].storage] = true;
    }
    let mut cached = vec![false; ns];
    for &(_, c) in &g.cast_cache {
        cached[g.tensors[c].storage] = true;
    }
    // Saved tensors of ordinary ops pin their storage until the op's backward; a segment's
    // inputs are pinned by the checkpoint until the segment's first op has run backward.
    let mut held_until: Vec<Vec<usize>> = vec![Vec::new(); nops];
    let mut distinct_saved: Vec<Vec<usize>> = vec![Vec::new(); nops];
    for (i, op) in g.ops.iter().enumerate() {
        let mut ss: Vec<usize> = op.saved.iter().map(|&t| g.tensors[t].storage).collect();
        ss.sort_unstable();
        ss.dedup();
        distinct_saved[i] = ss.clone();
        if op.segment.is_none() {
            for &s in &ss {
                if !persistent(s) {
                    savers[s] += 1;
                    held_until[i].push(s);
                }
            }
        }
    }
    let mut seg_inputs: Vec<Vec<usize>> = vec![Vec::new(); g.segments];
    for (seg, inputs) in seg_inputs.iter_mut().enumerate() {
        if seg_first[seg] == usize::MAX {
            continue;
        }
        for i in seg_first[seg]..=seg_last[seg] {
            for &t in &g.ops[i].inputs {
                let s = g.tensors[t].storage;
                if !persistent(s)
                    && born[s].is_some_and(|b| b < seg_first[seg])
                    && !inputs.contains(&s)
                {
                    inputs.push(s);
                }
            }
        }
        for &s in inputs.iter() {
            savers[s] += 1;
            held_until[seg_first[seg]].push(s);
        }
    }

    let mut live = Live::default();
    let mut tl = Timeline::default();
    let mut alive = vec![false; ns];
    let mut cat_of = vec![Category::Activations; ns];

    // Start of the step: params, buffers, the batch, optimizer state; `.grad` from the previous
    // step is still there until `zero_grad(set_to_none=True)`.
    let mut param_bytes_by_dtype: Vec<(super::units::DType, u64)> = Vec::new();
    let mut grads_total = 0u64;
    for (s, st) in g.storages.iter().enumerate() {
        if persistent(s) {
            alive[s] = true;
            cat_of[s] = kind_category(st.kind);
            live.add(cat_of[s], Bytes(sbytes[s]));
        }
    }
    for t in g.tensors.iter().filter(|t| t.is_param && t.requires_grad) {
        let b = sbytes[t.storage];
        grads_total += b;
        match param_bytes_by_dtype.iter_mut().find(|(d, _)| *d == t.dtype) {
            Some((_, v)) => *v += b,
            None => param_bytes_by_dtype.push((t.dtype, b)),
        }
    }
    let trainable: Vec<u64> = g
        .tensors
        .iter()
        .filter(|t| t.is_param && t.requires_grad)
        .map(|t| sbytes[t.storage])
        .collect();
    let counter = Bytes(
        opt.optimizer
            .step_counter_bytes(opt.optimizer_impl, opt.device),
    )
    .allocator_block();
    // Paged optimizer state lives in CUDA managed memory, outside the caching allocator.
    if !opt.optimizer.is_paged() {
        let mut any_8bit = false;
        for t in g.tensors.iter().filter(|t| t.is_param && t.requires_grad) {
            let states = opt.optimizer.state_storages(t.numel(), t.dtype);
            any_8bit |= opt.optimizer.is_bnb() && t.numel() >= super::optimizer::BNB_MIN_8BIT_SIZE;
            for b in states {
                live.add(Category::OptimizerState, Bytes(rounded(Bytes(b))));
            }
            if counter.0 > 0 {
                live.add(Category::OptimizerState, counter);
            }
        }
        for b in opt.optimizer.shared_state(any_8bit) {
            live.add(Category::OptimizerState, Bytes(rounded(Bytes(b))));
        }
    }
    for &b in &trainable {
        live.add(Category::Gradients, Bytes(b));
    }
    let _ = grads_total;
    tl.push(Phase::ZeroGrad, None, live);
    let grads_persist = opt.accumulation > 1;
    if !grads_persist {
        for &b in &trainable {
            live.sub(Category::Gradients, Bytes(b));
        }
    }

    // ---- forward ----
    let mut forward_flops = 0.0;
    let mut saved_after_forward = vec![0u64; nops];
    let free = |s: usize, alive: &mut Vec<bool>, live: &mut Live, cat_of: &Vec<Category>| {
        if alive[s] {
            alive[s] = false;
            live.sub(cat_of[s], Bytes(sbytes[s]));
        }
    };
    for (i, op) in g.ops.iter().enumerate() {
        forward_flops += op.flops;
        for &t in &op.outputs {
            let s = g.tensors[t].storage;
            if born[s] == Some(i) && !alive[s] {
                alive[s] = true;
                cat_of[s] = Category::Activations;
                live.add(Category::Activations, Bytes(sbytes[s]));
            }
        }
        let mut at = live;
        at.add(Category::Activations, Bytes(rounded(op.fwd_scratch)));
        tl.push(Phase::Forward, Some(i), at);
        for &t in op.inputs.iter().chain(op.outputs.iter()) {
            let s = g.tensors[t].storage;
            if last_use[s] == Some(i) && !persistent(s) && savers[s] == 0 && !kept[s] && !cached[s]
            {
                free(s, &mut alive, &mut live, &cat_of);
            }
        }
    }
    // The autocast region ends: its weight-cast cache is cleared.
    for s in 0..ns {
        if cached[s] && savers[s] == 0 && !kept[s] {
            free(s, &mut alive, &mut live, &cat_of);
        }
    }
    // Inference (`torch.no_grad()`): the step is the forward alone.
    if g.inference {
        return StepResult {
            timeline: tl,
            forward_flops,
            recompute_flops: 0.0,
            saved_after_forward,
        };
    }
    // Attribute each saved storage once, to the first op that holds it.
    let mut counted = vec![false; ns];
    for i in 0..nops {
        for &s in &held_until[i] {
            if alive[s] && !counted[s] {
                counted[s] = true;
                saved_after_forward[i] += sbytes[s];
            }
        }
    }

    // ---- backward ----
    let mut objs: Vec<GradObj> = Vec::new();
    let mut grad_of: Vec<Option<usize>> = vec![None; g.tensors.len()];
    let mut has_grad = vec![false; g.tensors.len()];
    let mut recompute_flops = 0.0;
    // Recomputed copies of a segment's storages and the savers still holding each.
    let mut re_alive = vec![false; ns];
    let mut re_savers = vec![0u32; ns];
    let mut seg_done = vec![false; g.segments];
    // Last op of a recomputation that uses each storage.
    let mut re_last = vec![None::<usize>; ns];

    let drop_ref = |o: usize, objs: &mut Vec<GradObj>, live: &mut Live| {
        let ob = &mut objs[o];
        ob.refs -= 1;
        if ob.refs == 0 {
            live.sub(ob.cat, Bytes(ob.bytes));
        }
    };

    // The loss gradient (`torch.ones_like(loss)`). `torch.autograd.backward` keeps its own
    // reference (`grad_tensors_`) until the engine returns, so it lives through all of backward.
    let loss_grad = g.kept.first().map(|_| 0usize);
    if let Some(&loss) = g.kept.first() {
        let b = rounded(g.bytes(loss));
        objs.push(GradObj {
            bytes: b,
            refs: 2,
            cat: Category::BackwardTemps,
        });
        live.add(Category::BackwardTemps, Bytes(b));
        grad_of[loss] = Some(0);
    }
    for t in g
        .tensors
        .iter()
        .enumerate()
        .filter(|(_, t)| t.is_param && grads_persist)
        .map(|(i, _)| i)
    {
        has_grad[t] = true;
    }

    for i in (0..nops).rev() {
        let op = &g.ops[i];
        if op.grads.is_empty() || !op.outputs.iter().any(|&t| grad_of[t].is_some()) {
            continue;
        }
        if let Some(seg) = op.segment {
            if !seg_done[seg] {
                seg_done[seg] = true;
                // Re-run the segment's forward up to its last op that saves anything (early stop).
                let first = seg_first[seg];
                let stop = (first..=seg_last[seg])
                    .rev()
                    .find(|&j| !g.ops[j].saved.is_empty())
                    .unwrap_or(first);
                // Autograd saves an op's inputs before its kernel runs and its outputs after
                // (the VariableType codegen); the recomputation raises `_StopRecomputationError`
                // at the last save (`torch/utils/checkpoint.py`, early stop). So when the last
                // saving op keeps none of its own outputs, its kernel never runs again.
                let stop_runs = g.ops[stop]
                    .saved
                    .iter()
                    .any(|t| g.ops[stop].outputs.contains(t));
                let run_to = if stop_runs { stop + 1 } else { stop };
                // Only entries of storages this segment touches are read below, and each is
                // rewritten here first, so one buffer serves every segment.
                for j in first..run_to {
                    for &t in g.ops[j].inputs.iter().chain(g.ops[j].outputs.iter()) {
                        re_last[g.tensors[t].storage] = Some(j);
                    }
                }
                for saved in &distinct_saved[first..=stop] {
                    for &s in saved {
                        if !persistent(s) && born[s].is_some_and(|b| b >= first) {
                            re_savers[s] += 1;
                        }
                    }
                }
                for j in first..run_to {
                    let rop = &g.ops[j];
                    recompute_flops += rop.flops;
                    for &t in &rop.outputs {
                        let s = g.tensors[t].storage;
                        if born[s] == Some(j) && !re_alive[s] {
                            re_alive[s] = true;
                            live.add(Category::BackwardTemps, Bytes(sbytes[s]));
                        }
                    }
                    let mut at = live;
                    at.add(Category::BackwardTemps, Bytes(rounded(rop.fwd_scratch)));
                    tl.push(Phase::Backward, Some(j), at);
                    for &t in rop.inputs.iter().chain(rop.outputs.iter()) {
                        let s = g.tensors[t].storage;
                        if re_alive[s] && re_last[s] == Some(j) && re_savers[s] == 0 {
                            re_alive[s] = false;
                            live.sub(Category::BackwardTemps, Bytes(sbytes[s]));
                        }
                    }
                }
            }
        }
        // The node runs: it allocates its input gradients and scratch.
        let out_obj = op.outputs.iter().find_map(|&t| grad_of[t]);
        let mut new_objs: Vec<(usize, usize)> = Vec::new();
        for &(t, flow) in &op.grads {
            let o = match (flow, out_obj) {
                (GradFlow::Alias, Some(o)) if !g.tensors[t].is_param => {
                    objs[o].refs += 1;
                    o
                }
                _ => {
                    let b = rounded(g.bytes(t));
                    objs.push(GradObj {
                        bytes: b,
                        refs: 1,
                        cat: Category::BackwardTemps,
                    });
                    live.add(Category::BackwardTemps, Bytes(b));
                    objs.len() - 1
                }
            };
            new_objs.push((t, o));
        }
        let scratch = rounded(op.bwd_scratch);
        let mut at = live;
        at.add(Category::BackwardTemps, Bytes(scratch));
        tl.push(Phase::Backward, Some(i), at);

        // Deliver the gradients.
        for (t, o) in new_objs {
            if g.tensors[t].is_param {
                if has_grad[t] {
                    // `.grad += new` in place; the new tensor dies.
                    drop_ref(o, &mut objs, &mut live);
                } else {
                    // AccumulateGrad steals the tensor into `.grad`.
                    has_grad[t] = true;
                    let ob = &mut objs[o];
                    live.sub(ob.cat, Bytes(ob.bytes));
                    ob.cat = Category::Gradients;
                    live.add(Category::Gradients, Bytes(ob.bytes));
                }
            } else if let Some(prev) = grad_of[t] {
                // InputBuffer accumulates into the buffered gradient in place.
                let _ = prev;
                drop_ref(o, &mut objs, &mut live);
            } else {
                grad_of[t] = Some(o);
            }
        }
        // Free the output gradients and what this node saved.
        for &t in &op.outputs {
            if let Some(o) = grad_of[t].take() {
                drop_ref(o, &mut objs, &mut live);
            }
        }
        if op.segment.is_some() {
            for &s in &distinct_saved[i] {
                if re_savers[s] > 0 {
                    re_savers[s] -= 1;
                    if re_savers[s] == 0 && re_alive[s] {
                        re_alive[s] = false;
                        live.sub(Category::BackwardTemps, Bytes(sbytes[s]));
                    }
                }
            }
        }
        for &s in &held_until[i] {
            savers[s] -= 1;
            if savers[s] == 0 && !kept[s] {
                free(s, &mut alive, &mut live, &cat_of);
            }
        }
    }
    // The graph is freed: whatever no node released (unreached nodes) goes now.
    for s in 0..ns {
        if alive[s] && !persistent(s) && !kept[s] {
            free(s, &mut alive, &mut live, &cat_of);
        }
        if re_alive[s] {
            re_alive[s] = false;
            live.sub(Category::BackwardTemps, Bytes(sbytes[s]));
        }
    }
    for o in grad_of.iter_mut() {
        if let Some(ob) = o.take() {
            drop_ref(ob, &mut objs, &mut live);
        }
    }
    if let Some(o) = loss_grad {
        drop_ref(o, &mut objs, &mut live);
    }
    tl.push(Phase::Backward, None, live);

    // ---- optimizer step ----
    // Parameters that got no gradient are skipped by the optimizer; the state of the others
    // exists from the first step on (steady state).
    let temps = opt.optimizer.step_temporaries(opt.optimizer_impl);
    let mut at = live;
    match opt.optimizer_impl {
        OptimizerImpl::ForLoop => at.add(
            Category::OptimizerTemps,
            Bytes(opt.optimizer.for_loop_peak(&trainable)),
        ),
        _ => {
            // One temporary per parameter of the largest dtype group.
            let group = param_bytes_by_dtype
                .iter()
                .max_by_key(|(_, b)| *b)
                .map(|(d, _)| *d);
            for t in g
                .tensors
                .iter()
                .filter(|t| t.is_param && t.requires_grad && Some(t.dtype) == group)
            {
                for _ in 0..temps {
                    at.add(Category::OptimizerTemps, Bytes(sbytes[t.storage]));
                }
            }
        }
    }
    tl.push(Phase::Optimizer, None, at);

    StepResult {
        timeline: tl,
        forward_flops,
        recompute_flops,
        saved_after_forward,
    }
}
