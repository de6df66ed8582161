//! The KV-cache update of transformers' `DynamicLayer` (`transformers/cache_utils.py`).

use super::R;
use crate::estimator::graph::{Graph, TensorId};
use crate::estimator::units::Bytes;

impl Graph {
    /// `DynamicLayer.update`: `torch.cat([cache, new], dim=-2)` makes a new cache tensor (in
    /// prefill the cat with an empty tensor is a copy of the new keys), and the old one is freed
    /// once the new one is written: during the copy both exist. The cache is modelled as one
    /// persistent storage at its final length; the old tensor is the op's scratch. Returns the
    /// whole cache `[B, KV, T, D]` for the attention. A cache of another dtype than the keys
    /// (fp8/int8) is written by a quantizing copy.
    pub fn kv_update(&mut self, new: TensorId, cache: TensorId, past: u64) -> R {
        let cs = self.shape(cache);
        let ns = self.shape(new);
        if cs.len() != 4 || ns.len() != 4 || cs[0] != ns[0] || cs[1] != ns[1] || cs[3] != ns[3] {
            return Err(self.bad_shape(format!("cache {cs:?} does not take keys {ns:?}")));
        }
        let old = crate::estimator::units::tensor_bytes(
            crate::estimator::units::Elems::of_shape(&[cs[0], cs[1], past, cs[3]])?,
            self.dtype(cache),
        )?;
        let all = self.alias(cache, cs, false);
        let mut op = self.op("kv_cache_update", "");
        op.inputs = vec![new, cache];
        op.outputs = vec![all];
        op.fwd_scratch = if past > 0 {
            old.allocator_block()
        } else {
            Bytes::ZERO
        };
        self.record(op);
        Ok(all)
    }
}
