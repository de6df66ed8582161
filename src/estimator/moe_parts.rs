//! A mixture of experts as memory: the routed experts, the router, the shared experts and the
//! token dispatch, told apart by the module paths the builders give their ops (`mlp.experts`,
//! `mlp.gate` / `mlp.router`, `mlp.shared_expert(s)`, `presets::moe`) and by the experts'
//! weights being marked ([`crate::estimator::graph::Tensor::expert`]).

use serde::Serialize;

use super::graph::{Graph, OpRecord};
use super::units::Bytes;

/// What each part of the sparse layers holds: weights on the device, and activations saved for
/// the backward once the forward is done (zero for serving).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct MoeParts {
    /// The routed experts' weights (every expert of every sparse layer held here).
    pub expert_weights: Bytes,
    pub router_weights: Bytes,
    pub shared_expert_weights: Bytes,
    /// Saved by the experts' computation: their projections, activations and weighting.
    pub expert_saved: Bytes,
    /// Saved by the router: logits, probabilities, the top-k choices.
    pub router_saved: Bytes,
    /// Saved by the token dispatch: the gathered rows, indices and masks, the exchange buffers.
    pub dispatch_saved: Bytes,
    pub shared_expert_saved: Bytes,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Part {
    Experts,
    Router,
    Dispatch,
    Shared,
    Other,
}

/// Op kinds inside the experts' scope that move or index tokens rather than compute on them.
const DISPATCH_KINDS: [&str; 19] = [
    "one_hot",
    "sum",
    "gt",
    "ge",
    "nonzero",
    "index",
    "index_add",
    "index_put",
    "argsort",
    "sort",
    "floor_divide",
    "histc",
    "cumsum",
    "arange",
    "all_to_all",
    "sort_chunks",
    "masked_fill_",
    "zeros",
    "python_ref",
];

fn part_of(op: &OpRecord) -> Part {
    let mut part = Part::Other;
    for seg in op.name.split('.') {
        match seg {
            "experts" => {
                part = if DISPATCH_KINDS.contains(&op.kind) {
                    Part::Dispatch
                } else {
                    Part::Experts
                }
            }
            "gate" | "router" if part == Part::Other => part = Part::Router,
            "shared_expert" | "shared_experts" | "shared_expert_gate" => part = Part::Shared,
            _ => {}
        }
    }
    part
}

/// The parts of `g`'s sparse layers; `saved[i]`: bytes op `i` leaves saved after the forward.
pub fn moe_parts(g: &Graph, saved: &[u64]) -> MoeParts {
    let mut out = MoeParts::default();
    let mut counted = vec![false; g.storages.len()];
    for t in g.tensors.iter().filter(|t| t.is_param && t.expert) {
        if !std::mem::replace(&mut counted[t.storage], true) {
            out.expert_weights += g.storages[t.storage].bytes;
        }
    }
    for (i, op) in g.ops.iter().enumerate() {
        let part = part_of(op);
        let b = Bytes(saved.get(i).copied().unwrap_or(0));
        match part {
            Part::Experts => out.expert_saved += b,
            Part::Router => out.router_saved += b,
            Part::Dispatch => out.dispatch_saved += b,
            Part::Shared => out.shared_expert_saved += b,
            Part::Other => continue,
        }
        let weights = match part {
            Part::Router => &mut out.router_weights,
            Part::Shared => &mut out.shared_expert_weights,
            _ => continue,
        };
        for &x in &op.inputs {
            let t = &g.tensors[x];
            if t.is_param && !std::mem::replace(&mut counted[t.storage], true) {
                *weights += g.storages[t.storage].bytes;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(name: &str, kind: &'static str) -> OpRecord {
        let g = Graph::new(crate::estimator::graph::Precision::Fp32);
        let mut o = g.op(kind, "");
        o.name = name.into();
        o
    }

    #[test]
    fn module_paths_name_the_parts() {
        assert_eq!(part_of(&op("layers.1.mlp.gate", "linear")), Part::Router);
        assert_eq!(part_of(&op("layers.1.mlp.router", "topk")), Part::Router);
        assert_eq!(
            part_of(&op("layers.1.mlp.experts", "linear")),
            Part::Experts
        );
        assert_eq!(
            part_of(&op("layers.1.mlp.experts", "index")),
            Part::Dispatch
        );
        assert_eq!(
            part_of(&op("layers.1.mlp.shared_expert.gate_proj", "linear")),
            Part::Shared
        );
        assert_eq!(
            part_of(&op("layers.1.mlp.shared_expert_gate", "linear")),
            Part::Shared
        );
        // A dense MLP's gate projection is not a router.
        assert_eq!(
            part_of(&op("layers.1.mlp.gate_proj", "linear")),
            Part::Other
        );
        assert_eq!(part_of(&op("layers.1.self_attn", "sdpa")), Part::Other);
    }
}
