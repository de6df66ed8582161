//! The closed-form activation model of a GPT layer under tensor and sequence parallelism,
//! Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models",
//! §4, Table 2. It assumes 16-bit activations, 1-byte dropout masks, `s` sequence length,
//! `b` micro-batch, `h` hidden size, `a` heads and `t` the tensor-parallel degree.
//!
//! The estimator never uses these formulas for an answer (activations come from the simulated
//! tape); they are the yardstick the tensor-parallel hook ([`super::tp`]) is tested against.

/// The rows of Korthikanti et al. 2022, Table 2.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheme {
    /// No parallelism: `sbh(34 + 5as/h)`.
    None,
    /// Tensor parallelism: `sbh(10 + 24/t + 5as/(ht))`: the layer-norm inputs, the inputs of the
    /// QKV and first MLP GEMMs and the two dropout masks after the parallel regions (10 sbh) stay
    /// replicated.
    Tensor,
    /// Tensor + sequence parallelism: `sbh(34/t + 5as/(ht))`: the replicated part is split along
    /// the sequence as well.
    TensorSequence,
    /// Tensor parallelism with selective recomputation of the attention core: `sbh(10 + 24/t)`.
    TensorSelective,
    /// Tensor + sequence parallelism with selective recomputation: `34 sbh/t`.
    TensorSequenceSelective,
    /// Full recomputation: only the layer input is kept, `2sbh`.
    Full,
}

/// Activation bytes one transformer layer keeps for backward on one tensor-parallel rank.
pub fn layer_activation_bytes(s: u64, b: u64, h: u64, a: u64, t: u64, scheme: Scheme) -> f64 {
    let (s, b, h, a, t) = (s as f64, b as f64, h as f64, a as f64, t.max(1) as f64);
    let sbh = s * b * h;
    let attn = 5.0 * a * s / h;
    match scheme {
        Scheme::None => sbh * (34.0 + attn),
        Scheme::Tensor => sbh * (10.0 + 24.0 / t + attn / t),
        Scheme::TensorSequence => sbh * (34.0 / t + attn / t),
        Scheme::TensorSelective => sbh * (10.0 + 24.0 / t),
        Scheme::TensorSequenceSelective => sbh * 34.0 / t,
        Scheme::Full => sbh * 2.0,
    }
}

/// Activation bytes of the first pipeline stage, which holds the most (Korthikanti et al. 2022,
/// §4.2.3): `L` layers over `p` stages, each stage keeping `p` micro-batches in flight under 1F1B,
/// so the first stage stores `L` layers' worth; the interleaved schedule with `v` model chunks per
/// device multiplies it by `1 + (p − 1)/(p·v)`.
pub fn first_stage_activation_bytes(per_layer: f64, layers: u64, p: u64, v: u64) -> f64 {
    let (l, p, v) = (layers as f64, p.max(1) as f64, v.max(1) as f64);
    let factor = if v > 1.0 {
        1.0 + (p - 1.0) / (p * v)
    } else {
        1.0
    };
    per_layer * l * factor
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn degree_one_is_the_unparallel_row() {
        let none = layer_activation_bytes(2048, 1, 12288, 96, 1, Scheme::None);
        assert_eq!(
            layer_activation_bytes(2048, 1, 12288, 96, 1, Scheme::Tensor),
            none
        );
        assert_eq!(
            layer_activation_bytes(2048, 1, 12288, 96, 1, Scheme::TensorSequence),
            none
        );
    }
}
