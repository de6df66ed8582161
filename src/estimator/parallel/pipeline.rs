//! Pipeline parallelism: the model's blocks, their split into stages, a stage as a graph of its
//! own, and how many micro-batches each stage holds in flight.
//!
//! Blocks come from module names: everything up to the first numeric component is one block
//! (`layer1.0.conv1` → `layer1.0`, `model.layers.12.mlp` → `model.layers.12`,
//! `encoder.layers.encoder_layer_3.mlp` → `encoder.layers.encoder_layer_3`), an unnumbered
//! top-level module is a block of its own (`conv1`, `fc`, `loss`), and an unnamed op joins the block
//! before it. Numbered blocks are the "layers" (residual blocks, transformer layers); they are also
//! the units FSDP wraps (see [`super::zero`]).
//!
//! Stages take contiguous runs of blocks with balanced parameter counts, as DeepSpeed's
//! `PipelineModule(partition_method="parameters")` does (`deepspeed/runtime/pipe/module.py`), so a
//! stage holds whole blocks and a weight shared by two stages (a tied embedding) lives on both, as
//! in Megatron-LM. Each stage is simulated as its own step ([`slice`]): the activations it
//! receives are inputs that require grad, the activation it sends on is kept until its gradient
//! comes back.

use std::collections::HashMap;
use std::ops::Range;

use crate::estimator::graph::{Graph, OpRecord, Storage, StorageKind, Tensor, TensorId};

/// A run of consecutive ops of one module.
#[derive(Clone, Debug, PartialEq)]
pub struct Block {
    pub name: String,
    pub ops: Range<usize>,
    /// A numbered block (a layer): an FSDP unit and what "layers" counts.
    pub numbered: bool,
    /// Elements of the parameters first used in this block.
    pub param_elems: u64,
}

/// A component that numbers a repeated module: `0`, `12` (`nn.Sequential`, `nn.ModuleList`) or
/// `encoder_layer_11` (torchvision's ViT names its layers so).
fn is_index(c: &str) -> bool {
    let digits = c.trim_end_matches(|ch: char| ch.is_ascii_digit());
    digits.len() < c.len() && (digits.is_empty() || digits.ends_with('_'))
}

/// The block an op named `name` belongs to: a prefix of the name, borrowed (a 128-expert model
/// has tens of thousands of ops, and a search splits it for every pipeline depth).
fn block_key(name: &str) -> (&str, bool) {
    let mut end = 0;
    for c in name.split('.') {
        end += c.len();
        if is_index(c) {
            return (&name[..end], true);
        }
        end += 1;
    }
    (name.split('.').next().unwrap_or(""), false)
}

/// The tensors each op reads that are parameters, looking through autocast's cached casts.
pub fn op_params(g: &Graph) -> Vec<Vec<TensorId>> {
    let mut cast_of: Vec<Option<TensorId>> = vec![None; g.tensors.len()];
    for &(p, c) in &g.cast_cache {
        cast_of[c] = Some(p);
    }
    g.ops
        .iter()
        .map(|op| {
            let mut v: Vec<TensorId> = Vec::new();
            for &t in &op.inputs {
                let p = if g.tensors[t].is_param {
                    Some(t)
                } else {
                    cast_of[t]
                };
                if let Some(p) = p {
                    if !v.contains(&p) {
                        v.push(p);
                    }
                }
            }
            v
        })
        .collect()
}

/// Splits the tape into blocks. [`blocks_with`] without a list of each op's parameters: a
/// search cuts a graph of tens of thousands of ops once per model-parallel degree, and a list
/// per op was most of that.
pub fn blocks(g: &Graph) -> Vec<Block> {
    let mut cast_of: Vec<Option<TensorId>> = vec![None; g.tensors.len()];
    for &(p, c) in &g.cast_cache {
        cast_of[c] = Some(p);
    }
    let mut seen = vec![false; g.tensors.len()];
    group_blocks(g, |i| {
        let mut elems = 0u64;
        for &t in &g.ops[i].inputs {
            let p = if g.tensors[t].is_param {
                Some(t)
            } else {
                cast_of[t]
            };
            if let Some(p) = p.filter(|&p| !seen[p]) {
                seen[p] = true;
                elems += g.tensors[p].numel();
            }
        }
        elems
    })
}

/// [`blocks`] given the graph's [`op_params`].
pub fn blocks_with(g: &Graph, params: &[Vec<TensorId>]) -> Vec<Block> {
    let mut seen = vec![false; g.tensors.len()];
    group_blocks(g, |i| {
        let mut elems = 0u64;
        for &p in &params[i] {
            if !seen[p] {
                seen[p] = true;
                elems += g.tensors[p].numel();
            }
        }
        elems
    })
}

/// The blocks of `g`, given the elements of the parameters each op uses first (`first_elems`,
/// called once per op in order).
fn group_blocks(g: &Graph, mut first_elems: impl FnMut(usize) -> u64) -> Vec<Block> {
    let mut out: Vec<Block> = Vec::new();
    for (i, op) in g.ops.iter().enumerate() {
        let elems = first_elems(i);
        // An unnamed op joins the block before it, and so does an op inside the numbered block
        // before it: a numbered block's name ends at the first index component of its ops' names,
        // so a name that extends it by a component has that same first index and key
        // ([`block_key`] on each of the tens of thousands of ops of a mixture of experts was a
        // twentieth of a layout search).
        if let Some(b) = out
            .last_mut()
            .filter(|b| op.name.is_empty() || extends(b, &op.name))
        {
            b.ops.end = i + 1;
            b.param_elems += elems;
            continue;
        }
        let (key, numbered) = block_key(&op.name);
        match out.last_mut() {
            Some(b) if b.name == key => {
                b.ops.end = i + 1;
                b.param_elems += elems;
            }
            _ => out.push(Block {
                name: key.to_string(),
                ops: i..i + 1,
                numbered,
                param_elems: elems,
            }),
        }
    }
    out
}

/// Whether `name` is the numbered block `b`'s name or extends it by whole components, and so
/// has `b`'s key.
fn extends(b: &Block, name: &str) -> bool {
    b.numbered
        && name
            .strip_prefix(b.name.as_str())
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
}

/// The first index in `lo..hi` where `pred` is false (`hi` if none), for a `pred` true on a
/// prefix of the range.
fn first_false(mut lo: usize, mut hi: usize, pred: impl Fn(usize) -> bool) -> usize {
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if pred(mid) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

/// Which of `chunks` pieces ([`partition`] of the blocks' `weights`) holds each block; `None`
/// when there are no chunks or more chunks than blocks.
pub fn piece_of_blocks(weights: &[u64], chunks: u64) -> Option<Vec<usize>> {
    if chunks == 0 || chunks > weights.len() as u64 {
        return None;
    }
    let mut piece_of = vec![0usize; weights.len()];
    for (k, r) in partition(weights, chunks as usize).into_iter().enumerate() {
        piece_of[r].fill(k);
    }
    Some(piece_of)
}

/// Splits `weights` into `k` contiguous non-empty runs minimising the largest sum (the classic
/// linear partition, by dynamic programming); returns the run boundaries as index ranges.
/// `k` must be between 1 and `weights.len()`.
pub fn partition(weights: &[u64], k: usize) -> Vec<Range<usize>> {
    let n = weights.len();
    let k = k.clamp(1, n.max(1));
    if n == 0 {
        return std::iter::once(0..0).collect();
    }
    let mut prefix = vec![0u64; n + 1];
    for (i, w) in weights.iter().enumerate() {
        prefix[i + 1] = prefix[i] + w;
    }
    // best[j][i]: smallest max-sum splitting the first i items into j runs; cut[j][i]: start of the last run.
    let inf = u64::MAX;
    let mut best = vec![vec![inf; n + 1]; k + 1];
    let mut cut = vec![vec![0usize; n + 1]; k + 1];
    best[0][0] = 0;
    // The last run starts at s in j-1..i: the cost max(best[j-1][s], prefix[i] - prefix[s]) is
    // the larger of a part that grows with s (more items in fewer runs never costs less: for
    // weights >= 0 best[j][i] does not decrease with i) and one that shrinks, so its minimum
    // sits where they cross, found by bisection; ties prefer the latest cut, so early stages
    // (which hold more micro-batches) get less. Trying every s made 2048 stages of 2048 blocks
    // take 20 s.
    for j in 1..=k {
        let prev = &best[j - 1];
        let mut row = vec![inf; n + 1];
        let mut cuts = vec![0usize; n + 1];
        for i in j..=n {
            let lo = j - 1;
            let tail = |s: usize| prefix[i] - prefix[s];
            // The first s where the growing part reaches the shrinking one.
            let cross = first_false(lo, i, |s| prev[s] < tail(s));
            let (mut v, mut at) = (inf, lo);
            if cross > lo {
                (v, at) = (tail(cross - 1), cross - 1);
            }
            if cross < i && prev[cross] <= v {
                v = prev[cross];
                // The latest s past the crossing with the same cost.
                at = first_false(cross, i, |s| prev[s] <= v) - 1;
            }
            row[i] = v;
            cuts[i] = at;
        }
        best[j] = row;
        cut[j] = cuts;
    }
    let mut ranges = Vec::with_capacity(k);
    let mut i = n;
    for j in (1..=k).rev() {
        let s = cut[j][i];
        ranges.push(s..i);
        i = s;
    }
    ranges.reverse();
    ranges
}

/// The op ranges of `chunks` pipeline chunks with balanced parameters (whole blocks each).
pub fn stage_ranges(g: &Graph, bl: &[Block], chunks: usize) -> Vec<Range<usize>> {
    let w: Vec<u64> = bl.iter().map(|b| b.param_elems).collect();
    partition(&w, chunks)
        .into_iter()
        .map(|r| {
            let start = bl.get(r.start).map(|b| b.ops.start).unwrap_or(0);
            let end = if r.end == 0 {
                start
            } else {
                bl[r.end - 1].ops.end
            };
            start..end.min(g.ops.len())
        })
        .collect()
}

/// The ops `range` of `g` as a graph of their own (one pipeline stage): activations made before
/// the range are received inputs (requiring grad as before), activations the range makes and later
/// ops read are kept for the gradient that comes back (the largest one seeds backward); the
/// loss stays kept on the last stage. Parameters, buffers and collectives of the range come along.
pub fn slice(g: &Graph, range: Range<usize>) -> Graph {
    slice_with(g, &mut Lifetimes::of(g), range)
}

/// What [`slice`] reads of the whole graph, computed once for all the stages of a pipeline:
/// per storage the op that makes it and the last op that touches it, and the ops that read it
/// in order (op, input position, tensor). Recomputing it per stage made a deep pipeline of a
/// large model quadratic (2048 stages of a 2048-layer model: over a minute).
pub struct Lifetimes {
    born: Vec<usize>,
    last_use: Vec<usize>,
    reads: Vec<Vec<(usize, TensorId)>>,
    /// The whole graph's storages and tensors to a slice's, reused by every slice and reset to
    /// `usize::MAX` after each: a fresh pair per stage cleared the whole graph's ids each time
    /// (2048 stages of a 2048-layer model), a map per stage hashed every id.
    smap: Vec<usize>,
    tmap: Vec<TensorId>,
}

impl Lifetimes {
    pub fn of(g: &Graph) -> Lifetimes {
        let ns = g.storages.len();
        let mut born = vec![usize::MAX; ns];
        let mut last_use = vec![0usize; ns];
        let mut reads: Vec<Vec<(usize, TensorId)>> = vec![Vec::new(); ns];
        for (i, op) in g.ops.iter().enumerate() {
            for &t in &op.outputs {
                let s = g.tensors[t].storage;
                born[s] = born[s].min(i);
            }
            for &t in op.inputs.iter().chain(op.outputs.iter()) {
                let s = g.tensors[t].storage;
                last_use[s] = last_use[s].max(i);
            }
            for &t in &op.inputs {
                reads[g.tensors[t].storage].push((i, t));
            }
        }
        Lifetimes {
            born,
            last_use,
            reads,
            smap: vec![usize::MAX; ns],
            tmap: vec![usize::MAX; g.tensors.len()],
        }
    }
}

/// [`slice`] with the whole graph's [`Lifetimes`] given.
pub fn slice_with(g: &Graph, life: &mut Lifetimes, range: Range<usize>) -> Graph {
    let Lifetimes {
        born,
        last_use,
        reads,
        smap,
        tmap,
    } = life;
    let mut out = Graph::new(g.precision);
    out.tp.size = g.tp.size;
    out.tp.sequence_parallel = g.tp.sequence_parallel;
    out.tp.seq_dim = g.tp.seq_dim;
    out.tp.heads = g.tp.heads;
    let mut m = Mapper {
        smap,
        tmap,
        mapped_storages: Vec::new(),
        mapped_tensors: Vec::new(),
        born,
        start: range.start,
    };
    let mut seg_map: HashMap<usize, usize> = HashMap::new();
    for i in range.clone() {
        let op = &g.ops[i];
        let r = OpRecord {
            name: op.name.clone(),
            inputs: op.inputs.iter().map(|&t| m.map(g, t, &mut out)).collect(),
            outputs: op.outputs.iter().map(|&t| m.map(g, t, &mut out)).collect(),
            saved: op.saved.iter().map(|&t| m.map(g, t, &mut out)).collect(),
            grads: op
                .grads
                .iter()
                .map(|&(t, f)| (m.map(g, t, &mut out), f))
                .collect(),
            segment: op.segment.map(|s| {
                let next = seg_map.len();
                *seg_map.entry(s).or_insert(next)
            }),
            ..OpRecord::of_kind(op)
        };
        out.ops.push(r);
    }
    out.segments = seg_map.len();
    for &(p, c) in &g.cast_cache {
        if let (Some(np), Some(nc)) = (m.mapped(p), m.mapped(c)) {
            out.cast_cache.push((np, nc));
        }
    }
    // The loss (last stage), else what later stages read.
    for &t in &g.kept {
        if let Some(n) = m.mapped(t) {
            out.kept.push(n);
        }
    }
    if out.kept.is_empty() {
        let mut sent: Vec<TensorId> = Vec::new();
        for i in range.clone() {
            for &t in &g.ops[i].outputs {
                let s = g.tensors[t].storage;
                if born[s] == i
                    && last_use[s] >= range.end
                    && g.storages[s].kind == StorageKind::Activation
                {
                    sent.push(t);
                }
            }
        }
        // Later ops may read these storages through views: keep the view they read, so its
        // shape is right.
        // Each sent storage's first read after the range, in the order the later ops read them.
        let mut first: Vec<(usize, usize, TensorId)> = Vec::new();
        for &x in &sent {
            let s = g.tensors[x].storage;
            if first.iter().any(|f| g.tensors[f.2].storage == s) {
                continue;
            }
            let reads = &reads[s];
            let k = reads.partition_point(|&(i, _)| i < range.end);
            if let Some(&(i, t)) = reads.get(k) {
                let pos = g.ops[i].inputs.iter().position(|&u| u == t).unwrap_or(0);
                first.push((i, pos, t));
            }
        }
        first.sort_unstable_by_key(|f| (f.0, f.1));
        let mut by_storage: Vec<TensorId> = first.into_iter().map(|f| f.2).collect();
        by_storage.sort_by_key(|&t| std::cmp::Reverse((g.tensors[t].requires_grad, g.bytes(t))));
        for t in by_storage {
            let n = m.map(g, t, &mut out);
            out.kept.push(n);
        }
    }
    for c in &g.tp.comm {
        if range.contains(&c.op) {
            let mut c = c.clone();
            c.op -= range.start;
            out.tp.comm.push(c);
        }
    }
    for s in m.mapped_storages {
        m.smap[s] = usize::MAX;
    }
    for t in m.mapped_tensors {
        m.tmap[t] = usize::MAX;
    }
    out
}

/// Old storage and tensor ids to the slice's. Maps, not tables as long as the whole graph: a
/// 2048-stage pipeline slices its graph 2048 times, and zeroing two whole-graph tables per
/// slice took most of its estimate.
/// Storages and tensors of the whole graph to the slice's (`usize::MAX`: not in it yet), in
/// the vectors of [`Lifetimes`], with the ids it set, to reset them.
struct Mapper<'a> {
    smap: &'a mut Vec<usize>,
    tmap: &'a mut Vec<TensorId>,
    mapped_storages: Vec<usize>,
    mapped_tensors: Vec<TensorId>,
    born: &'a [usize],
    start: usize,
}

impl Mapper<'_> {
    fn mapped(&self, t: TensorId) -> Option<TensorId> {
        Some(self.tmap[t]).filter(|&n| n != usize::MAX)
    }
    fn map(&mut self, g: &Graph, t: TensorId, out: &mut Graph) -> TensorId {
        if let Some(n) = self.mapped(t) {
            return n;
        }
        let old = &g.tensors[t];
        let s = old.storage;
        let sid = match Some(self.smap[s]).filter(|&x| x != usize::MAX) {
            Some(x) => x,
            None => {
                let st = &g.storages[s];
                let kind = if st.kind == StorageKind::Activation && self.born[s] < self.start {
                    StorageKind::Input
                } else {
                    st.kind
                };
                out.storages.push(Storage {
                    bytes: st.bytes,
                    kind,
                });
                self.smap[s] = out.storages.len() - 1;
                self.mapped_storages.push(s);
                out.storages.len() - 1
            }
        };
        out.tensors.push(Tensor {
            shape: old.shape.clone(),
            dtype: old.dtype,
            storage: sid,
            requires_grad: old.requires_grad,
            is_param: old.is_param,
            expert: old.expert,
        });
        self.tmap[t] = out.tensors.len() - 1;
        self.mapped_tensors.push(t);
        out.tensors.len() - 1
    }
}

/// Bytes each stage sends to the next per micro-batch (the activations later stages read);
/// the gradient coming back has the same size.
pub fn boundary_bytes(g: &Graph, range: &Range<usize>) -> u64 {
    let sub = slice(g, range.clone());
    if range.end >= g.ops.len() {
        return 0;
    }
    sub.kept.iter().map(|&t| sub.bytes(t).0).sum()
}

/// Micro-batches (in model chunks) rank `i` of `p` holds in flight at its peak under 1F1B
/// (PipeDream-Flush, Narayanan et al. 2021 §2.2.1: `min(p − i, m)`), or under the interleaved
/// schedule with `v` chunks per device (§2.2.2), counted in chunk-micro-batches as Megatron-LM's
/// `forward_backward_pipelining_with_interleaving` warms up:
/// `min((p − i − 1)·2 + (v − 1)·p + 1, m·v)` (`megatron/core/pipeline_parallel/schedules.py`).
pub fn in_flight(i: u64, p: u64, m: u64, v: u64) -> u64 {
    if v <= 1 {
        return (p - i).min(m).max(1);
    }
    ((p - i - 1) * 2 + (v - 1) * p + 1).min(m * v).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Grouping ops into blocks with the shortcut for ops inside the numbered block before them
    /// gives the blocks [`block_key`] gives for every op.
    #[test]
    fn blocks_are_those_of_every_op_key() {
        let names = [
            "embed",
            "model.layers.0",
            "model.layers.0.mlp",
            "",
            "model.layers.0.mlp.experts.3.up",
            "model.layers.01.x",
            "model.layers.1",
            "model.layers.10.attn",
            "model.layers.1.attn",
            "model.layers.1x",
            "conv1",
            "conv1.0",
            "layer1.0.conv1",
            "layer1.0",
            "layer1.01",
            "encoder.layers.encoder_layer_3.mlp",
            "encoder.layers.encoder_layer_3",
            "encoder.layers.encoder_layer_30",
            "fc",
            "fc.weight",
            "loss",
        ];
        let mut keyed: Vec<(String, bool)> = Vec::new();
        for name in names {
            let (k, n) = block_key(name);
            match keyed.last() {
                Some((last, _)) if name.is_empty() || last == k => {}
                _ => keyed.push((k.to_string(), n)),
            }
        }
        let mut g = Graph::new(crate::estimator::graph::Precision::Fp32);
        let x = g
            .input(vec![4], crate::estimator::units::DType::F32)
            .unwrap();
        for name in names {
            g.record_simple("relu", vec![x], vec![x], vec![], 0.0);
            g.ops.last_mut().unwrap().name = name.into();
        }
        let got: Vec<(String, bool)> = blocks(&g)
            .into_iter()
            .map(|b| (b.name, b.numbered))
            .collect();
        assert_eq!(got, keyed);
    }

    #[test]
    fn block_keys() {
        assert_eq!(block_key("layer1.0.conv1"), ("layer1.0", true));
        assert_eq!(
            block_key("model.layers.12.mlp.up"),
            ("model.layers.12", true)
        );
        assert_eq!(block_key("fc"), ("fc", false));
        assert_eq!(block_key("bn1"), ("bn1", false));
        assert_eq!(block_key("layer1"), ("layer1", false));
        assert_eq!(block_key("layers.7"), ("layers.7", true));
        assert_eq!(
            block_key("encoder.layers.encoder_layer_3.mlp"),
            ("encoder.layers.encoder_layer_3", true)
        );
    }

    #[test]
    fn partition_by_bisection_equals_trying_every_cut() {
        // The cubic dynamic programme it replaces, cut for cut.
        fn every_cut(weights: &[u64], k: usize) -> Vec<Range<usize>> {
            let n = weights.len();
            let k = k.clamp(1, n.max(1));
            let mut prefix = vec![0u64; n + 1];
            for (i, w) in weights.iter().enumerate() {
                prefix[i + 1] = prefix[i] + w;
            }
            let inf = u64::MAX;
            let mut best = vec![vec![inf; n + 1]; k + 1];
            let mut cut = vec![vec![0usize; n + 1]; k + 1];
            best[0][0] = 0;
            for j in 1..=k {
                for i in j..=n {
                    for s in (j - 1)..i {
                        if best[j - 1][s] == inf {
                            continue;
                        }
                        let v = best[j - 1][s].max(prefix[i] - prefix[s]);
                        if v <= best[j][i] {
                            best[j][i] = v;
                            cut[j][i] = s;
                        }
                    }
                }
            }
            let mut ranges = Vec::new();
            let mut i = n;
            for j in (1..=k).rev() {
                ranges.push(cut[j][i]..i);
                i = cut[j][i];
            }
            ranges.reverse();
            ranges
        }
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for case in 0..3000 {
            let n = 1 + case % 23;
            let w: Vec<u64> = (0..n)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    // Few distinct values and zeros: many ties.
                    [0, 1, 1, 2, 3, 5, 8, 100][(x % 8) as usize]
                })
                .collect();
            for k in 1..=n + 1 {
                assert_eq!(partition(&w, k), every_cut(&w, k), "{w:?} into {k}");
            }
        }
    }

    #[test]
    fn partition_balances() {
        let r = partition(&[1, 1, 1, 1, 4], 2);
        assert_eq!(r, vec![0..4, 4..5]);
        let r = partition(&[5, 5, 5, 5], 4);
        assert_eq!(r.len(), 4);
        assert!(r.iter().all(|x| x.len() == 1));
    }

    #[test]
    fn one_f_one_b_in_flight() {
        assert_eq!(in_flight(0, 4, 8, 1), 4);
        assert_eq!(in_flight(3, 4, 8, 1), 1);
        assert_eq!(in_flight(0, 4, 2, 1), 2);
        // Interleaved, 4 stages, 2 chunks: the first rank warms up 2·3 + 4 = 10 chunk-micro-batches.
        assert_eq!(in_flight(0, 4, 8, 2), 11);
    }
}
