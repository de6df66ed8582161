//! A mixture of experts as memory: the routed experts, the router, the shared experts and the
//! token dispatch, as the builder tags their ops ([`crate::estimator::graph::OpRecord::moe`], `presets::moe`), and the
//! experts' weights as it marks them ([`crate::estimator::graph::Tensor::expert`]).

use serde::Serialize;

use super::graph::{Graph, MoePart};
use super::units::Bytes;

/// What each part of the sparse layers holds: weights on the device, and activations saved for
/// the backward once the forward is done (zero for serving).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct MoeParts {
    /// The routed experts' weights in their stored formats, scales included (every expert of
    /// every sparse layer held here).
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

/// The parts of `g`'s sparse layers; `saved[i]`: bytes op `i` leaves saved after the forward.
pub fn moe_parts(g: &Graph, saved: &[u64]) -> MoeParts {
    let mut out = MoeParts::default();
    let mut counted = vec![false; g.storages.len()];
    // The experts' parameters and their weight-format constants (scales).
    for t in g.tensors.iter().filter(|t| t.expert) {
        if !std::mem::replace(&mut counted[t.storage], true) {
            out.expert_weights += g.storages[t.storage].bytes;
        }
    }
    for (i, op) in g.ops.iter().enumerate() {
        let Some(part) = op.moe else {
            continue;
        };
        let b = Bytes(saved.get(i).copied().unwrap_or(0));
        let weights = match part {
            MoePart::Experts => {
                out.expert_saved += b;
                continue;
            }
            MoePart::Dispatch => {
                out.dispatch_saved += b;
                continue;
            }
            MoePart::Router => {
                out.router_saved += b;
                &mut out.router_weights
            }
            MoePart::Shared => {
                out.shared_expert_saved += b;
                &mut out.shared_expert_weights
            }
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
