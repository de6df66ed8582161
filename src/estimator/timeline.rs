//! The category × phase accounting of one training step: live bytes by category after every
//! event, the peak taken over the sum (never the sum of per-category peaks), as PyTorch's
//! `torch/distributed/_tools/mem_tracker.py` does with `_MemRefType` × `_ModState`.

use serde::Serialize;
use std::ops::Range;

use super::units::Bytes;

/// What a live byte is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    Params,
    Buffers,
    Inputs,
    /// Made in forward: what autograd saved, plus the live intermediate values.
    Activations,
    /// Made in backward: activation gradients, recomputed segments, backward scratch.
    BackwardTemps,
    /// Parameter gradients (`.grad`).
    Gradients,
    OptimizerState,
    OptimizerTemps,
    /// Keys and values kept for the next decode steps (inference).
    KvCache,
}

impl Category {
    /// Number of categories.
    pub const COUNT: usize = 9;
    pub const ALL: [Category; Category::COUNT] = [
        Category::Params,
        Category::Buffers,
        Category::Inputs,
        Category::Activations,
        Category::BackwardTemps,
        Category::Gradients,
        Category::OptimizerState,
        Category::OptimizerTemps,
        Category::KvCache,
    ];
    pub fn index(self) -> usize {
        self as usize
    }
    pub fn key(self) -> &'static str {
        match self {
            Category::Params => "params",
            Category::Buffers => "buffers",
            Category::Inputs => "inputs",
            Category::Activations => "activations",
            Category::BackwardTemps => "backward_temps",
            Category::Gradients => "gradients",
            Category::OptimizerState => "optimizer_state",
            Category::OptimizerTemps => "optimizer_temps",
            Category::KvCache => "kv_cache",
        }
    }
    pub fn label(self) -> &'static str {
        match self {
            Category::Params => "Parameters",
            Category::Buffers => "Buffers",
            Category::Inputs => "Input batch",
            Category::Activations => "Activations",
            Category::BackwardTemps => "Backward temporaries",
            Category::Gradients => "Gradients",
            Category::OptimizerState => "Optimizer state",
            Category::OptimizerTemps => "Optimizer temporaries",
            Category::KvCache => "KV cache",
        }
    }
}

/// Phases of one training step, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    ZeroGrad,
    Forward,
    Backward,
    Optimizer,
}

impl Phase {
    pub fn key(self) -> &'static str {
        match self {
            Phase::ZeroGrad => "zero_grad",
            Phase::Forward => "forward",
            Phase::Backward => "backward",
            Phase::Optimizer => "optimizer",
        }
    }
}

/// Live bytes per category.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Live(pub [u64; Category::COUNT]);

impl Live {
    pub fn total(&self) -> Bytes {
        Bytes(self.0.iter().fold(0u64, |a, &b| a.saturating_add(b)))
    }
    pub fn get(&self, c: Category) -> Bytes {
        Bytes(self.0[c.index()])
    }
    /// One block of `b` bytes becomes live.
    pub fn add(&mut self, c: Category, b: Bytes) {
        self.0[c.index()] = self.0[c.index()].saturating_add(b.0);
    }
    /// One block of `b` bytes is freed. A total that saturated stays saturated: past 16 EiB the
    /// frees can no longer be matched against it, and such a step is refused as too large
    /// once simulated (its allocator stream overflows the address space too).
    pub fn sub(&mut self, c: Category, b: Bytes) {
        let v = &mut self.0[c.index()];
        if *v == u64::MAX {
            return;
        }
        debug_assert!(*v >= b.0, "freeing more {:?} than live", c);
        *v = v.saturating_sub(b.0);
    }
}

/// One point of the timeline: the live bytes right after an op ran (its outputs allocated, its
/// inputs not yet freed), the moment the CUDA allocator's high-water mark records.
#[derive(Clone, Debug, Serialize)]
pub struct Event {
    pub phase: Phase,
    /// Index into the forward tape, or `None` for optimizer and bookkeeping events.
    pub op: Option<usize>,
    pub live: Live,
}

/// How a chart `max_cols` columns wide groups a timeline's events, given their phases in order:
/// `n / max_cols` (rounded up) consecutive events to a column, and a new column at each change of
/// phase, so no column straddles two phases.
pub fn column_ranges(
    phases: impl IntoIterator<Item = Phase>,
    n: usize,
    max_cols: usize,
) -> Vec<Range<usize>> {
    let per = n.div_ceil(max_cols.max(1)).max(1);
    let mut out: Vec<Range<usize>> = Vec::new();
    let mut last = None;
    for (i, ph) in phases.into_iter().enumerate() {
        match out.last_mut() {
            Some(r) if last == Some(ph) && r.len() < per => r.end = i + 1,
            _ => out.push(i..i + 1),
        }
        last = Some(ph);
    }
    out
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Timeline {
    pub events: Vec<Event>,
}

impl Timeline {
    pub fn push(&mut self, phase: Phase, op: Option<usize>, live: Live) {
        self.events.push(Event { phase, op, live });
    }
    /// The event with the largest total, the first one on ties.
    pub fn peak(&self) -> Option<&Event> {
        let mut best: Option<&Event> = None;
        for e in &self.events {
            if best.is_none_or(|b| e.live.total() > b.live.total()) {
                best = Some(e);
            }
        }
        best
    }
    pub fn peak_in(&self, phase: Phase) -> Bytes {
        self.events
            .iter()
            .filter(|e| e.phase == phase)
            .map(|e| e.live.total())
            .max()
            .unwrap_or(Bytes::ZERO)
    }
}
