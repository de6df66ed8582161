//! How `torch.utils.checkpoint.checkpoint_sequential` cuts a run of children into segments, and
//! the √N rule (Chen et al. 2016, "Training Deep Nets with Sublinear Memory Cost") that picks
//! their number. Every builder that offers `sqrt` or `Segments(k)` (the features CNNs, the
//! ResNets, ViT, the text models) cuts through here, so they agree with each other and with
//! PyTorch, including where PyTorch refuses.

use std::ops::Range;

use super::config::Checkpointing;
use super::error::EstimateError;
use super::graph::{CkptStack, Graph};

/// `round(√n)` segments, at least one: Chen et al.'s √N segments of √N layers each, which bound
/// the saved activations by O(√N) for one extra forward. The harness's `sqrt` mode computes the
/// same (`max(1, round(math.sqrt(n)))`; Python's `round` never meets a tie here, since √n is
/// never k + ½ for an integer n).
pub fn sqrt_segments(n: usize) -> usize {
    ((n as f64).sqrt().round() as usize).max(1)
}

/// The children `checkpoint_sequential(functions, segments)` checkpoints
/// (`torch/utils/checkpoint.py`): `segments - 1` runs of `len // segments` children each. The
/// remaining children (the last segment) run without checkpointing, because its output must
/// carry the graph. More segments than children makes PyTorch's `range` step zero, an error,
/// so it is one here too; `children` names what is being cut, for the message.
pub fn sequential_segments(
    n: usize,
    segments: usize,
    children: &str,
) -> Result<Vec<Range<usize>>, EstimateError> {
    if segments == 0 || segments > n {
        return Err(EstimateError::Unsupported(format!(
            "checkpoint_sequential needs between 1 and {n} segments for this model's {n} {children}, got {segments}"
        )));
    }
    let size = n / segments;
    Ok((0..segments - 1)
        .map(|s| s * size..(s + 1) * size)
        .collect())
}

/// The checkpointed runs under `sqrt` or `Segments(k)` over `n` children; `None` for the
/// policies that are not `checkpoint_sequential`.
pub fn sequential_ranges(
    ckpt: Checkpointing,
    n: usize,
    children: &str,
) -> Result<Option<Vec<Range<usize>>>, EstimateError> {
    Ok(match ckpt {
        Checkpointing::Sqrt => Some(sequential_segments(n, sqrt_segments(n), children)?),
        Checkpointing::Segments(k) => Some(sequential_segments(n, k as usize, children)?),
        _ => None,
    })
}

/// All `n` children in order as runs, each with whether it runs checkpointed, for a model whose
/// `block` policy wraps each child and which has no stages (`Stage` means `Block` for a model
/// that calls each layer a stage; pass `stage_is_block`).
pub fn runs(
    ckpt: Checkpointing,
    n: usize,
    children: &str,
    stage_is_block: bool,
) -> Result<Vec<(Range<usize>, bool)>, EstimateError> {
    match ckpt {
        Checkpointing::None => Ok(vec![(0..n, false)]),
        Checkpointing::Block => Ok((0..n).map(|i| (i..i + 1, true)).collect()),
        Checkpointing::Stage if stage_is_block => Ok((0..n).map(|i| (i..i + 1, true)).collect()),
        Checkpointing::Stage => Err(EstimateError::Unsupported(format!(
            "stage checkpointing applies to ResNets (layer1..4); this model's {children} form no stages: use block, sqrt or a number of segments"
        ))),
        Checkpointing::Sqrt | Checkpointing::Segments(_) => {
            let ranges = sequential_ranges(ckpt, n, children)?.unwrap_or_default();
            let rest = ranges.last().map_or(0, |r| r.end);
            let mut out: Vec<_> = ranges.into_iter().map(|r| (r, true)).collect();
            out.push((rest..n, false));
            Ok(out)
        }
    }
}

impl Graph {
    /// [`runs`] over a stack of `n` children, noted in [`Graph::ckpt_stacks`] whatever the
    /// policy (before the policy is judged, so a refused policy still notes it).
    pub fn checkpoint_runs(
        &mut self,
        ckpt: Checkpointing,
        n: usize,
        children: &str,
        stage_is_block: bool,
    ) -> Result<Vec<(Range<usize>, bool)>, EstimateError> {
        self.ckpt_stacks.push(CkptStack {
            children: n,
            stage_is_block,
        });
        runs(ckpt, n, children, stage_is_block)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_cover_every_child_once_in_order() {
        for n in 1..40 {
            for ckpt in [
                Checkpointing::None,
                Checkpointing::Block,
                Checkpointing::Sqrt,
                Checkpointing::Segments(1),
                Checkpointing::Segments(n as u32),
            ] {
                let r = runs(ckpt, n, "layers", false).unwrap();
                let flat: Vec<usize> = r.iter().flat_map(|(r, _)| r.clone()).collect();
                assert_eq!(flat, (0..n).collect::<Vec<_>>(), "{ckpt:?} over {n}");
                // checkpoint_sequential's last segment always runs normally.
                if matches!(ckpt, Checkpointing::Sqrt | Checkpointing::Segments(_)) {
                    assert!(!r.last().unwrap().1);
                }
            }
        }
    }

    #[test]
    fn twelve_layers_in_five_segments_as_pytorch_cuts_them() {
        // len 12 // 5 = 2: four checkpointed pairs, then layers 8..12 unwrapped.
        let r = runs(Checkpointing::Segments(5), 12, "layers", false).unwrap();
        assert_eq!(
            r,
            vec![
                (0..2, true),
                (2..4, true),
                (4..6, true),
                (6..8, true),
                (8..12, false)
            ]
        );
        assert_eq!(
            runs(Checkpointing::Sqrt, 12, "layers", false)
                .unwrap()
                .len(),
            3
        );
    }

    #[test]
    fn more_segments_than_children_is_refused_as_pytorch_refuses() {
        let e = runs(Checkpointing::Segments(13), 12, "transformer layers", false)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("between 1 and 12 segments")
                && e.contains("12 transformer layers")
                && e.contains("got 13"),
            "{e}"
        );
        assert!(runs(Checkpointing::Stage, 12, "encoder layers", false).is_err());
        assert_eq!(
            runs(Checkpointing::Stage, 3, "layers", true).unwrap().len(),
            3
        );
    }
}
