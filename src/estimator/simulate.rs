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

use super::allocator::AllocTrace;
use super::config::{Setup, ZeroGrad};
use super::device::{reduction_blocks, ReduceDevice};
use super::graph::{GradFlow, Graph, OpRecord, StorageKind, TensorId};
use super::hardware::Device;
use super::optimizer::{OptimizerImpl, OptimizerKind, BNB_MIN_8BIT_SIZE};
use super::step_stream::{StepOne, StepStream, NO_BLOCK};
use super::timeline::{Category, Live, Phase, Timeline};
use super::units::{insert_sorted, Bytes, DType};

#[derive(Clone, Copy, Debug)]
pub struct StepOptions {
    pub optimizer: OptimizerKind,
    pub optimizer_impl: OptimizerImpl,
    /// Micro-batches per optimizer step; from the second on, `.grad` already exists.
    pub accumulation: u32,
    /// Where the step runs: decides whether the optimizer's step counters are device memory.
    pub device: Device,
    /// The cuBLAS workspace each matrix multiply allocates and frees (0: none), which only the
    /// allocator's stream carries: the measured steps count tensors, not kernels' scratch.
    pub gemm_workspace: u64,
    /// The card whose CUDA reduction kernels allocate staging blocks in backward
    /// ([`OpRecord::bwd_reductions`]); none: no such blocks (the CPU, a non-NVIDIA device, or
    /// a replay without kernels' scratch). Like the GEMM workspace, only the allocator's stream
    /// carries them.
    pub reduce_device: Option<ReduceDevice>,
    /// The step runs under a `TorchDispatchMode` (the reference harness's `LiveTracker`,
    /// FakeTensorMode). Autograd's `InputBuffer::accumulate` (`torch/csrc/autograd/
    /// input_buffer.cpp`) adds a later gradient into the buffered one in place only when it
    /// holds the last reference to it and its storage (`can_accumulate_inplace`); a tensor
    /// that passed through Python dispatch (or a tensor subclass) never qualifies, so each
    /// sum is `old + new`, a third tensor beside both addends. A plain training loop sums in
    /// place (torch 2.15 on the CPU: `aten::add_` without a mode, `aten::add` under one).
    pub dispatch_mode: bool,
    /// What `zero_grad` does between steps; [`ZeroGrad::Zero`] keeps `.grad` resident.
    pub zero_grad: ZeroGrad,
}

impl StepOptions {
    /// Whether `.grad` is resident through the replayed step: a later micro-batch of gradient
    /// accumulation, or a loop whose `zero_grad` zeroes gradients in place.
    pub fn grads_persist(&self) -> bool {
        self.accumulation > 1 || self.zero_grad == ZeroGrad::Zero
    }

    /// How a training loop runs `setup`'s step, without kernels' scratch in the stream (the
    /// estimate adds the cuBLAS workspace where the allocator replays it).
    pub fn of(setup: &Setup) -> StepOptions {
        StepOptions {
            optimizer: setup.opt,
            optimizer_impl: setup.optimizer_impl(),
            accumulation: setup.accumulation,
            device: setup.device,
            gemm_workspace: 0,
            reduce_device: None,
            dispatch_mode: setup.dispatch_mode,
            zero_grad: setup.zero_grad,
        }
    }

    /// A plain CUDA step with `optimizer` (foreach), one micro-batch, under no dispatch mode.
    pub fn plain(optimizer: OptimizerKind) -> StepOptions {
        StepOptions {
            optimizer,
            optimizer_impl: OptimizerImpl::Foreach,
            accumulation: 1,
            device: Device::Cuda,
            gemm_workspace: 0,
            reduce_device: None,
            dispatch_mode: false,
            zero_grad: ZeroGrad::SetToNone,
        }
    }
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
    /// The loop's malloc/free stream (the model, then two steps) for the caching allocator.
    pub alloc_trace: AllocTrace,
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

/// Ops that run cuBLAS matrix multiplies (SDPA's fused kernels and convolutions do not).
fn is_gemm(kind: &str) -> bool {
    matches!(kind, "linear" | "matmul" | "bmm" | "addmm" | "bilinear")
}

/// A gradient tensor of the backward pass, shared by the inputs it was passed through to.
struct GradObj {
    bytes: u64,
    refs: u32,
    cat: Category,
    block: u32,
}

/// Replays `g` for one steady-state step (the second of a loop: optimizer state exists).
pub fn simulate(g: &Graph, opt: &StepOptions) -> StepResult {
    replay_step(g, opt, true)
}

/// [`simulate`] for the timeline alone: neither the replay of the loop's first step nor the
/// loop's malloc/free stream, which only the caching allocator reads (`alloc_trace` is empty).
/// The multi-GPU layouts take their allocator overhead from the whole model's step and simulate
/// each pipeline chunk so.
pub fn simulate_timeline(g: &Graph, opt: &StepOptions) -> StepResult {
    replay_step(g, opt, false)
}

/// One body for both (the page's first load carries one copy of the replay).
#[inline(never)]
fn replay_step(g: &Graph, opt: &StepOptions, trace: bool) -> StepResult {
    let tape = Tape::new(g);
    // How the loop's first step differs (see `StepOne`): a step's first micro-batch, or a
    // loop's first step when `.grad` is zeroed in place, has no `.grad` yet, so its backward
    // steals the gradients where they were computed, among the activations' blocks, and keeps
    // them. Replayed separately for the allocator; the steady step's timeline holds the peak.
    let accumulates = opt.accumulation > 1;
    let first =
        (trace && !g.inference && (accumulates || opt.zero_grad == ZeroGrad::Zero)).then(|| {
            let mut first = Replay::new(&tape);
            let fresh = StepOptions {
                zero_grad: ZeroGrad::SetToNone,
                accumulation: 1,
                ..*opt
            };
            first.run(&fresh, !accumulates);
            first.close_step();
            first.stream
        });
    let one = match &first {
        None => StepOne::Same,
        Some(f) if accumulates => StepOne::FirstMicroBatch {
            first: f,
            every_step: opt.zero_grad == ZeroGrad::SetToNone,
        },
        Some(f) => StepOne::Whole(f),
    };
    let mut step = Replay::new(&tape);
    let (forward_flops, saved_after_forward, recompute_flops) = step.run(opt, true);
    let alloc_trace = if trace {
        step.loop_trace(one)
    } else {
        AllocTrace::default()
    };
    StepResult {
        timeline: step.tl,
        forward_flops,
        recompute_flops,
        saved_after_forward,
        alloc_trace,
    }
}

/// Appends a validation pass to a loop's allocator stream: `g` is the model's forward at the
/// validation batch under `torch.no_grad()` (an inference graph over the same parameters), run
/// after the training steps as a script's `model.eval()` loop does, so the caching allocator
/// serves it from the segments the steps left and keeps what it grows for it. Only the
/// validation batch is new: the parameters are the training step's. Returns the pass's own
/// live bytes at its peak (without the training's `.grad` and optimizer state, which stay
/// resident until the next step's `zero_grad`).
pub fn validation_pass(trace: &mut AllocTrace, g: &Graph, opt: &StepOptions) -> Live {
    let tape = Tape::new(g);
    let mut pass = Replay::new(&tape);
    pass.run(opt, false);
    pass.close_step();
    let inputs: Vec<u64> = g
        .storages
        .iter()
        .enumerate()
        .filter(|(_, s)| s.kind == StorageKind::Input)
        .map(|(i, _)| tape.sbytes[i])
        .filter(|&b| b > 0)
        .collect();
    pass.stream.append_pass(trace, &inputs);
    pass.tl.peak().map(|e| e.live).unwrap_or_default()
}

/// What the forward tape says before anything runs: each storage's rounded size, the op that
/// creates it and the last op that touches it, who saves it for backward, and the extent and
/// inputs of each checkpointed segment.
struct Tape<'g> {
    g: &'g Graph,
    /// Bytes of each storage as the caching allocator hands them out.
    sbytes: Vec<u64>,
    last_use: Vec<Option<usize>>,
    /// The op that creates each activation storage.
    born: Vec<Option<usize>>,
    /// Backward nodes (and segments) that hold each storage after forward.
    savers: Vec<u32>,
    seg_first: Vec<usize>,
    seg_last: Vec<usize>,
    /// Kept alive by the training loop (the loss).
    kept: Vec<bool>,
    /// Autocast's cached weight casts.
    cached: Vec<bool>,
    /// Storages each op's backward releases: its saved tensors, or a segment's inputs at the
    /// segment's first op.
    held_until: Vec<Vec<usize>>,
    distinct_saved: Vec<Vec<usize>>,
}

impl<'g> Tape<'g> {
    fn new(g: &'g Graph) -> Self {
        let ns = g.storages.len();
        let nops = g.ops.len();
        let mut t = Tape {
            g,
            sbytes: g.storages.iter().map(|s| rounded(s.bytes)).collect(),
            last_use: vec![None; ns],
            born: vec![None; ns],
            savers: vec![0; ns],
            seg_first: vec![usize::MAX; g.segments],
            seg_last: vec![0; g.segments],
            kept: vec![false; ns],
            cached: vec![false; ns],
            held_until: vec![Vec::new(); nops],
            distinct_saved: vec![Vec::new(); nops],
        };
        for (i, op) in g.ops.iter().enumerate() {
            for &x in op.inputs.iter().chain(op.outputs.iter()) {
                t.last_use[g.tensors[x].storage] = Some(i);
            }
            for &x in &op.outputs {
                let s = g.tensors[x].storage;
                if t.born[s].is_none() && !t.persistent(s) {
                    t.born[s] = Some(i);
                }
            }
            if let Some(seg) = op.segment {
                t.seg_first[seg] = t.seg_first[seg].min(i);
                t.seg_last[seg] = t.seg_last[seg].max(i);
            }
        }
        for &x in &g.kept {
            t.kept[g.tensors[x].storage] = true;
        }
        for &(_, c) in &g.cast_cache {
            t.cached[g.tensors[c].storage] = true;
        }
        t.pin_saved();
        t.pin_segment_inputs();
        t
    }

    /// Parameters, buffers, inputs and the KV cache outlive the step.
    fn persistent(&self, s: usize) -> bool {
        self.g.storages[s].kind != StorageKind::Activation
    }
    fn storage(&self, t: TensorId) -> usize {
        self.g.tensors[t].storage
    }

    /// Saved tensors of ordinary ops pin their storage until the op's backward (autograd's
    /// `SavedVariable`s live in the node).
    fn pin_saved(&mut self) {
        for (i, op) in self.g.ops.iter().enumerate() {
            let mut ss: Vec<usize> = Vec::with_capacity(op.saved.len());
            for &x in &op.saved {
                insert_sorted(&mut ss, self.storage(x));
            }
            self.distinct_saved[i] = ss.clone();
            if op.segment.is_none() {
                for &s in &ss {
                    if !self.persistent(s) {
                        self.savers[s] += 1;
                        self.held_until[i].push(s);
                    }
                }
            }
        }
    }

    /// A checkpointed segment saves nothing but keeps its inputs (non-reentrant
    /// `torch.utils.checkpoint` saves the inputs of the recomputation) until its first op has
    /// run backward.
    fn pin_segment_inputs(&mut self) {
        for seg in 0..self.g.segments {
            let first = self.seg_first[seg];
            if first == usize::MAX {
                continue;
            }
            let mut inputs: Vec<usize> = Vec::new();
            for op in &self.g.ops[first..=self.seg_last[seg]] {
                for &x in &op.inputs {
                    let s = self.storage(x);
                    if !self.persistent(s)
                        && self.born[s].is_some_and(|b| b < first)
                        && !inputs.contains(&s)
                    {
                        inputs.push(s);
                    }
                }
            }
            for s in inputs {
                self.savers[s] += 1;
                self.held_until[first].push(s);
            }
        }
    }
}

/// The step being replayed: live bytes by category, the timeline, which storages are alive,
/// and the gradients of the backward pass.
struct Replay<'t, 'g> {
    tape: &'t Tape<'g>,
    live: Live,
    tl: Timeline,
    alive: Vec<bool>,
    cat_of: Vec<Category>,
    /// Holders left of each storage (counts down in backward).
    savers: Vec<u32>,
    /// Parameter gradients that stay between micro-batches (gradient accumulation).
    grads_persist: bool,
    objs: Vec<GradObj>,
    grad_of: Vec<Option<usize>>,
    /// Parameters whose `.grad` exists.
    has_grad: Vec<bool>,
    /// Parameters that received a gradient in this backward (their `InputBuffer` holds one).
    arrived: Vec<bool>,
    dispatch_mode: bool,
    /// Recomputed copies of a segment's storages and the savers still holding each.
    re_alive: Vec<bool>,
    re_savers: Vec<u32>,
    seg_done: Vec<bool>,
    /// Last op of a recomputation that uses each storage.
    re_last: Vec<Option<usize>>,
    /// The step's allocations in order, and the block of each live storage and recomputed copy.
    stream: StepStream,
    block: Vec<u32>,
    re_block: Vec<u32>,
    /// What exists before the step: parameters, buffers, the batch (by storage), the optimizer
    /// state in creation order, and `.grad` when it persists across micro-batches.
    resident: Vec<u64>,
    state: Vec<u64>,
    gemm_workspace: u64,
    reduce_device: Option<ReduceDevice>,
}

impl<'t, 'g> Replay<'t, 'g> {
    fn new(tape: &'t Tape<'g>) -> Self {
        let (g, ns) = (tape.g, tape.g.storages.len());
        Replay {
            tape,
            live: Live::default(),
            tl: Timeline::default(),
            alive: vec![false; ns],
            cat_of: vec![Category::Activations; ns],
            savers: tape.savers.clone(),
            grads_persist: false,
            objs: Vec::new(),
            grad_of: vec![None; g.tensors.len()],
            has_grad: vec![false; g.tensors.len()],
            arrived: vec![false; g.tensors.len()],
            dispatch_mode: false,
            re_alive: vec![false; ns],
            re_savers: vec![0; ns],
            seg_done: vec![false; g.segments],
            re_last: vec![None; ns],
            stream: StepStream::default(),
            block: vec![NO_BLOCK; ns],
            re_block: vec![NO_BLOCK; ns],
            resident: Vec::new(),
            state: Vec::new(),
            gemm_workspace: 0,
            reduce_device: None,
        }
    }

    /// A block the step allocates (counted live under `c`).
    fn take(&mut self, c: Category, b: u64) -> u32 {
        self.live.add(c, Bytes(b));
        self.stream.alloc(b)
    }
    fn give(&mut self, c: Category, b: u64, block: u32) {
        self.live.sub(c, Bytes(b));
        self.stream.free(block);
    }
    /// Records the timeline point of op `op` with `scratch` allocated for the op's duration (and
    /// in the allocator's stream a GEMM's cuBLAS workspace, then in backward its reductions'
    /// staging blocks: the engine sums a bias gradient after the node's GEMMs).
    fn push_with_scratch(&mut self, phase: Phase, op: Option<usize>, c: Category, scratch: u64) {
        let mut at = self.live;
        at.add(c, Bytes(scratch));
        self.tl.push(phase, op, at);
        let id = self.stream.alloc(scratch);
        if op.is_some_and(|i| is_gemm(self.tape.g.ops[i].kind)) {
            let ws = self.stream.alloc(self.gemm_workspace);
            self.stream.free(ws);
        }
        if let (Phase::Backward, Some(i), Some(dev)) = (phase, op, self.reduce_device) {
            let rec: &OpRecord = &self.tape.g.ops[i];
            for r in &rec.bwd_reductions {
                // `gpu_reduce_kernel`'s `buffer` and `semaphores` go out of scope in reverse.
                let ids: Vec<u32> = reduction_blocks(r, dev)
                    .into_iter()
                    .map(|b| self.stream.alloc(rounded(Bytes(b))))
                    .collect();
                for &b in ids.iter().rev() {
                    self.stream.free(b);
                }
            }
        }
        self.stream.free(id);
    }

    /// The loop's whole stream for the caching allocator: the blocks the loop still holds after
    /// the step (the loss) are dropped by `del loss` before the next one.
    fn loop_trace(&mut self, one: StepOne<'_>) -> AllocTrace {
        self.close_step();
        let mut start = AllocTrace::default();
        if let Some(init) = &self.tape.g.init {
            (init.replay)(&init.model, &mut start, self.reduce_device);
        }
        self.stream
            .two_steps(one, start, &self.resident, &self.state)
    }

    /// One step: `zero_grad`, the forward, then (training) the backward and, with `optimizer`,
    /// the optimizer step (a micro-batch before the last has none).
    /// Returns the forward FLOPs, the bytes each op leaves saved and the recomputation FLOPs;
    /// inference (`torch.no_grad()`) is the forward alone and saves nothing.
    fn run(&mut self, opt: &StepOptions, optimizer: bool) -> (f64, Vec<u64>, f64) {
        self.gemm_workspace = opt.gemm_workspace;
        self.reduce_device = opt.reduce_device.filter(|_| opt.device == Device::Cuda);
        self.dispatch_mode = opt.dispatch_mode;
        self.zero_grad(opt);
        let forward_flops = self.forward();
        self.end_autocast();
        if self.tape.g.inference {
            return (forward_flops, vec![0; self.tape.g.ops.len()], 0.0);
        }
        let saved_after_forward = self.saved_after_forward();
        let recompute_flops = self.backward();
        if optimizer {
            self.optimizer_step(opt);
        }
        (forward_flops, saved_after_forward, recompute_flops)
    }

    /// Marks the blocks the loop still holds after the step (the loss), which its `del loss`
    /// drops before the next one.
    fn close_step(&mut self) {
        for s in 0..self.alive.len() {
            if self.alive[s] && !self.tape.persistent(s) {
                self.stream.keep_past_step(self.block[s]);
            }
        }
    }

    /// Bytes of each trainable parameter's storage, in tensor order.
    fn trainable(&self) -> Vec<u64> {
        self.tape
            .g
            .tensors
            .iter()
            .filter(|t| t.is_param && t.requires_grad)
            .map(|t| self.tape.sbytes[t.storage])
            .collect()
    }

    /// The start of the step: parameters, buffers, the batch and the optimizer state are
    /// resident, and `.grad` from the previous step is still there until
    /// `optimizer.zero_grad(set_to_none=True)` drops it. With gradient accumulation the
    /// replayed micro-batch is a later one, whose `.grad` exists and is added to in place.
    /// Paged optimizer state lives in CUDA managed memory, outside the caching allocator.
    fn zero_grad(&mut self, opt: &StepOptions) {
        let (g, tape) = (self.tape.g, self.tape);
        for (s, st) in g.storages.iter().enumerate() {
            if tape.persistent(s) {
                self.alive[s] = true;
                self.cat_of[s] = kind_category(st.kind);
                self.live.add(self.cat_of[s], Bytes(tape.sbytes[s]));
                // A model initialised by its own stream leaves its weights where that stream put
                // them (`Graph::init`).
                let by_init =
                    g.init.is_some() && matches!(st.kind, StorageKind::Param | StorageKind::Buffer);
                if tape.sbytes[s] > 0 && !by_init {
                    self.resident.push(tape.sbytes[s]);
                }
            }
        }
        let counter = Bytes(
            opt.optimizer
                .step_counter_bytes(opt.optimizer_impl, opt.device),
        )
        .allocator_block();
        if !opt.optimizer.is_paged() {
            let mut any_8bit = false;
            for t in g.tensors.iter().filter(|t| t.is_param && t.requires_grad) {
                let states = opt.optimizer.state_storages(&t.shape, t.dtype);
                any_8bit |= opt.optimizer.is_bnb() && t.numel() >= BNB_MIN_8BIT_SIZE;
                // `_init_group` creates a parameter's step counter, then its moments.
                if counter.0 > 0 {
                    self.live.add(Category::OptimizerState, counter);
                    self.state.push(counter.0);
                }
                for b in states {
                    self.live
                        .add(Category::OptimizerState, Bytes(rounded(Bytes(b))));
                    self.state.push(rounded(Bytes(b)));
                }
            }
            for b in opt.optimizer.shared_state(any_8bit) {
                self.live
                    .add(Category::OptimizerState, Bytes(rounded(Bytes(b))));
                self.state.push(rounded(Bytes(b)));
            }
        }
        let trainable = self.trainable();
        for &b in &trainable {
            self.live.add(Category::Gradients, Bytes(b));
        }
        self.tl.push(Phase::ZeroGrad, None, self.live);
        self.grads_persist = opt.grads_persist();
        if !self.grads_persist {
            for &b in &trainable {
                self.live.sub(Category::Gradients, Bytes(b));
            }
        }
    }

    /// Frees an activation storage (the caching allocator takes the block back).
    fn free(&mut self, s: usize) {
        if self.alive[s] {
            self.alive[s] = false;
            self.give(self.cat_of[s], self.tape.sbytes[s], self.block[s]);
        }
    }

    /// The forward pass: each op allocates its outputs (and scratch it frees again); a storage
    /// is freed after its last use unless autograd saved it, the loop keeps it (the loss) or
    /// autocast caches it. Returns the forward FLOPs.
    fn forward(&mut self) -> f64 {
        let tape = self.tape;
        let mut flops = 0.0;
        for (i, op) in tape.g.ops.iter().enumerate() {
            flops += op.flops;
            for &t in &op.outputs {
                let s = tape.storage(t);
                if tape.born[s] == Some(i) && !self.alive[s] {
                    self.alive[s] = true;
                    self.cat_of[s] = Category::Activations;
                    self.block[s] = self.take(Category::Activations, tape.sbytes[s]);
                }
            }
            self.push_with_scratch(
                Phase::Forward,
                Some(i),
                Category::Activations,
                rounded(op.fwd_scratch),
            );
            for &t in op.inputs.iter().chain(op.outputs.iter()) {
                let s = tape.storage(t);
                if tape.last_use[s] == Some(i)
                    && !tape.persistent(s)
                    && self.savers[s] == 0
                    && !tape.kept[s]
                    && !tape.cached[s]
                {
                    self.free(s);
                }
            }
        }
        flops
    }

    /// The autocast region ends: its weight-cast cache is cleared (`torch.autocast.__exit__`
    /// calls `clear_autocast_cache`); casts autograd saved stay with their nodes.
    fn end_autocast(&mut self) {
        for s in 0..self.alive.len() {
            if self.tape.cached[s] && self.savers[s] == 0 && !self.tape.kept[s] {
                self.free(s);
            }
        }
    }

    /// Bytes each op leaves saved for backward, each saved storage attributed once, to the
    /// first op that holds it (for the per-layer chart).
    fn saved_after_forward(&self) -> Vec<u64> {
        let tape = self.tape;
        let mut counted = vec![false; self.alive.len()];
        let mut saved = vec![0u64; tape.g.ops.len()];
        for (i, held) in tape.held_until.iter().enumerate() {
            for &s in held {
                if self.alive[s] && !counted[s] {
                    counted[s] = true;
                    saved[i] += tape.sbytes[s];
                }
            }
        }
        saved
    }

    /// Frees the recomputed copy of storage `s`.
    fn drop_recomputed(&mut self, s: usize) {
        self.re_alive[s] = false;
        self.give(
            Category::BackwardTemps,
            self.tape.sbytes[s],
            self.re_block[s],
        );
    }

    /// Drops one reference to a gradient tensor; the last one frees it.
    fn drop_ref(&mut self, o: usize) {
        let ob = &mut self.objs[o];
        ob.refs -= 1;
        if ob.refs == 0 {
            let (cat, bytes, block) = (ob.cat, ob.bytes, ob.block);
            self.give(cat, bytes, block);
        }
    }

    /// The backward pass (`loss.backward()`): the autograd engine runs the nodes in reverse
    /// order of the tape, each one reached by a gradient. At the end the graph is freed.
    /// Returns the FLOPs of checkpoint recomputation.
    fn backward(&mut self) -> f64 {
        let g = self.tape.g;
        // The loss gradient (`torch.ones_like(loss)`). `torch.autograd.backward` keeps its own
        // reference (`grad_tensors_`) until the engine returns, so it lives through all of
        // backward.
        let loss_grad = g.kept.first().map(|_| 0usize);
        if let Some(&loss) = g.kept.first() {
            let b = rounded(g.bytes(loss));
            let block = self.take(Category::BackwardTemps, b);
            self.objs.push(GradObj {
                bytes: b,
                refs: 2,
                cat: Category::BackwardTemps,
                block,
            });
            self.grad_of[loss] = Some(0);
        }
        if self.grads_persist {
            for (t, x) in g.tensors.iter().enumerate() {
                if x.is_param {
                    self.has_grad[t] = true;
                }
            }
        }
        let mut recompute_flops = 0.0;
        for i in (0..g.ops.len()).rev() {
            let op = &g.ops[i];
            if op.grads.is_empty() || !op.outputs.iter().any(|&t| self.grad_of[t].is_some()) {
                continue;
            }
            if let Some(seg) = op.segment {
                if !self.seg_done[seg] {
                    self.seg_done[seg] = true;
                    recompute_flops += self.recompute(seg);
                }
            }
            self.run_node(i);
        }
        self.free_graph(loss_grad);
        recompute_flops
    }

    /// Non-reentrant `torch.utils.checkpoint` re-runs a segment's forward when the first of its
    /// nodes runs backward, up to its last op that saves anything (early stop). Its recomputed
    /// tensors are backward temporaries, freed after their last recomputing use unless a node of
    /// the segment saved them. Returns the recomputation's FLOPs.
    fn recompute(&mut self, seg: usize) -> f64 {
        let tape = self.tape;
        let g = tape.g;
        let first = tape.seg_first[seg];
        let stop = (first..=tape.seg_last[seg])
            .rev()
            .find(|&j| !g.ops[j].saved.is_empty())
            .unwrap_or(first);
        // Autograd saves an op's inputs before its kernel runs and its outputs after (the
        // VariableType codegen); the recomputation raises `_StopRecomputationError` at the last
        // save (`torch/utils/checkpoint.py`, early stop). So when the last saving op keeps none
        // of its own outputs, its kernel never runs again.
        let stop_runs = g.ops[stop]
            .saved
            .iter()
            .any(|t| g.ops[stop].outputs.contains(t));
        let run_to = if stop_runs { stop + 1 } else { stop };
        // Only entries of storages this segment touches are read below, and each is rewritten
        // here first, so one buffer serves every segment.
        for j in first..run_to {
            for &t in g.ops[j].inputs.iter().chain(g.ops[j].outputs.iter()) {
                self.re_last[tape.storage(t)] = Some(j);
            }
        }
        for saved in &tape.distinct_saved[first..=stop] {
            for &s in saved {
                if !tape.persistent(s) && tape.born[s].is_some_and(|b| b >= first) {
                    self.re_savers[s] += 1;
                }
            }
        }
        let mut flops = 0.0;
        for j in first..run_to {
            let rop = &g.ops[j];
            flops += rop.flops;
            for &t in &rop.outputs {
                let s = tape.storage(t);
                if tape.born[s] == Some(j) && !self.re_alive[s] {
                    self.re_alive[s] = true;
                    self.re_block[s] = self.take(Category::BackwardTemps, tape.sbytes[s]);
                }
            }
            self.push_with_scratch(
                Phase::Backward,
                Some(j),
                Category::BackwardTemps,
                rounded(rop.fwd_scratch),
            );
            for &t in rop.inputs.iter().chain(rop.outputs.iter()) {
                let s = tape.storage(t);
                if self.re_alive[s] && self.re_last[s] == Some(j) && self.re_savers[s] == 0 {
                    self.drop_recomputed(s);
                }
            }
        }
        flops
    }

    /// One backward node: it allocates its input gradients (or passes the incoming one on) and
    /// its scratch, delivers the gradients, then frees its output gradient and what it saved.
    fn run_node(&mut self, i: usize) {
        let tape = self.tape;
        let g = tape.g;
        let op = &g.ops[i];
        let out_obj = op.outputs.iter().find_map(|&t| self.grad_of[t]);
        let mut new_objs: Vec<(usize, usize)> = Vec::new();
        for &(t, flow) in &op.grads {
            let o = match (flow, out_obj) {
                (GradFlow::Alias, Some(o)) if !g.tensors[t].is_param => {
                    self.objs[o].refs += 1;
                    o
                }
                _ => {
                    let b = rounded(g.bytes(t));
                    let block = self.take(Category::BackwardTemps, b);
                    self.objs.push(GradObj {
                        bytes: b,
                        refs: 1,
                        cat: Category::BackwardTemps,
                        block,
                    });
                    self.objs.len() - 1
                }
            };
            new_objs.push((t, o));
        }
        self.push_with_scratch(
            Phase::Backward,
            Some(i),
            Category::BackwardTemps,
            rounded(op.bwd_scratch),
        );

        // `Engine::evaluate_function` releases the node's incoming gradients (consumed by
        // `apply`) and its saved variables (`release_variables`) before it adds the outputs to
        // the next nodes' input buffers.
        for &t in &op.outputs {
            if let Some(o) = self.grad_of[t].take() {
                self.drop_ref(o);
            }
        }
        if op.segment.is_some() {
            for &s in &tape.distinct_saved[i] {
                if self.re_savers[s] > 0 {
                    self.re_savers[s] -= 1;
                    if self.re_savers[s] == 0 && self.re_alive[s] {
                        self.drop_recomputed(s);
                    }
                }
            }
        }
        for &s in &tape.held_until[i] {
            self.savers[s] -= 1;
            if self.savers[s] == 0 && !tape.kept[s] {
                self.free(s);
            }
        }
        for (t, o) in new_objs {
            self.deliver(i, t, o);
        }
    }

    /// Hands gradient `o` of tensor `t` (from node `i`) on. A parameter's `AccumulateGrad`
    /// steals the tensor into `.grad`, or adds it in place when `.grad` exists (the new tensor
    /// dies); a non-leaf's `InputBuffer` keeps the first gradient and accumulates later ones
    /// into it in place. Under a dispatch mode each sum within one backward is out of place
    /// ([`StepOptions::dispatch_mode`]): the sum exists beside both addends for a moment, then
    /// replaces them (the same bytes as the one it replaces).
    fn deliver(&mut self, i: usize, t: TensorId, o: usize) {
        let is_param = self.tape.g.tensors[t].is_param;
        let buffered = if is_param {
            self.arrived[t]
        } else {
            self.grad_of[t].is_some()
        };
        if self.dispatch_mode && buffered {
            let b = self.objs[o].bytes;
            let sum = self.take(Category::BackwardTemps, b);
            self.tl.push(Phase::Backward, Some(i), self.live);
            self.give(Category::BackwardTemps, b, sum);
        }
        if is_param {
            self.arrived[t] = true;
            if self.has_grad[t] {
                self.drop_ref(o);
            } else {
                self.has_grad[t] = true;
                let ob = &mut self.objs[o];
                self.live.sub(ob.cat, Bytes(ob.bytes));
                ob.cat = Category::Gradients;
                self.live.add(Category::Gradients, Bytes(ob.bytes));
                let block = ob.block;
                self.stream.keep_as_grad(block);
            }
        } else if buffered {
            self.drop_ref(o);
        } else {
            self.grad_of[t] = Some(o);
        }
    }

    /// The engine returns and the graph is freed: whatever no node released (nodes no gradient
    /// reached) goes now, then the gradients still buffered and the loss gradient.
    fn free_graph(&mut self, loss_grad: Option<usize>) {
        let tape = self.tape;
        for s in 0..self.alive.len() {
            if self.alive[s] && !tape.persistent(s) && !tape.kept[s] {
                self.free(s);
            }
            if self.re_alive[s] {
                self.drop_recomputed(s);
            }
        }
        for t in 0..self.grad_of.len() {
            if let Some(o) = self.grad_of[t].take() {
                self.drop_ref(o);
            }
        }
        if let Some(o) = loss_grad {
            self.drop_ref(o);
        }
        self.tl.push(Phase::Backward, None, self.live);
    }

    /// Adafactor's step as malloc/free events, parameter by parameter
    /// ([`OptimizerKind::adafactor_peak`]): a name rebound frees what it held only after the
    /// new value exists, and the last parameter's tensors live until `step` returns.
    fn adafactor_stream(&mut self, params: &[(u64, bool)]) {
        let (mut update, mut copies) = (NO_BLOCK, [NO_BLOCK; 2]);
        for &(f, half) in params {
            // `grad = p.grad; grad = grad.float()`, then `p_data_fp32 = p; ….float()`.
            for c in &mut copies {
                self.stream.free(*c);
                *c = if half { self.stream.alloc(f) } else { NO_BLOCK };
            }
            let square = self.stream.alloc(f);
            let sum = self.stream.alloc(f);
            self.stream.free(square);
            self.stream.free(update);
            // `_approx_sq_grad(row, col)` or `exp_avg_sq.rsqrt()`, then `update` is rebound.
            update = self.stream.alloc(f);
            self.stream.free(sum);
            let negated = self.stream.alloc(f);
            self.stream.free(negated);
        }
        self.stream.free(update);
        for c in copies {
            self.stream.free(c);
        }
    }

    /// `optimizer.step()`: the state of every trained parameter exists from the first step on
    /// (steady state); the step adds its temporaries. The for-loop implementation works one
    /// parameter at a time ([`OptimizerKind::for_loop_peak`]); the foreach and fused ones
    /// (`torch/optim/adam.py` `_multi_tensor_adam`) make their temporaries for a whole dtype
    /// group at once, the largest group being the peak.
    fn optimizer_step(&mut self, opt: &StepOptions) {
        let (g, tape) = (self.tape.g, self.tape);
        self.stream.optimizer_starts();
        let mut at = self.live;
        match opt.optimizer_impl {
            _ if opt.optimizer.loops_over_parameters() => {
                let params: Vec<(u64, bool)> = g
                    .tensors
                    .iter()
                    .filter(|t| t.is_param && t.requires_grad)
                    .map(|t| {
                        (
                            rounded(Bytes(t.numel().saturating_mul(4))),
                            t.dtype.bits() == 16,
                        )
                    })
                    .collect();
                at.add(
                    Category::OptimizerTemps,
                    Bytes(OptimizerKind::adafactor_peak(&params)),
                );
                self.adafactor_stream(&params);
            }
            OptimizerImpl::ForLoop => {
                let sizes = self.trainable();
                at.add(
                    Category::OptimizerTemps,
                    Bytes(opt.optimizer.for_loop_peak(&sizes)),
                );
                // Each parameter's update makes its temporaries; one of them lives on until the
                // next parameter's are made (the peak `for_loop_peak` takes).
                let k = opt.optimizer.step_temporaries(OptimizerImpl::ForLoop);
                let mut lingering = NO_BLOCK;
                for &b in sizes.iter().filter(|_| k > 0) {
                    let ids: Vec<u32> = (0..k).map(|_| self.stream.alloc(b)).collect();
                    self.stream.free(lingering);
                    for &id in &ids[1..] {
                        self.stream.free(id);
                    }
                    lingering = ids[0];
                }
                self.stream.free(lingering);
            }
            _ => {
                let temps = opt.optimizer.step_temporaries(opt.optimizer_impl);
                let mut by_dtype: Vec<(DType, u64)> = Vec::new();
                for t in g.tensors.iter().filter(|t| t.is_param && t.requires_grad) {
                    let b = tape.sbytes[t.storage];
                    match by_dtype.iter_mut().find(|(d, _)| *d == t.dtype) {
                        Some((_, v)) => *v += b,
                        None => by_dtype.push((t.dtype, b)),
                    }
                }
                let group = by_dtype.iter().max_by_key(|(_, b)| *b).map(|(d, _)| *d);
                // The foreach kernels run one dtype group at a time; each group's temporaries
                // are made for all its parameters, then freed.
                for &(dtype, _) in &by_dtype {
                    let mut ids: Vec<u32> = Vec::new();
                    for t in g
                        .tensors
                        .iter()
                        .filter(|t| t.is_param && t.requires_grad && t.dtype == dtype)
                    {
                        for _ in 0..temps {
                            if Some(dtype) == group {
                                at.add(Category::OptimizerTemps, Bytes(tape.sbytes[t.storage]));
                            }
                            ids.push(self.stream.alloc(tape.sbytes[t.storage]));
                        }
                    }
                    for id in ids {
                        self.stream.free(id);
                    }
                }
            }
        }
        self.tl.push(Phase::Optimizer, None, at);
    }
}
