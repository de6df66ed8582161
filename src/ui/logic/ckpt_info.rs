//! Which checkpointing policies a model accepts, found by building its tape under each: the
//! controls offer only those ([`super::state::applies`]), the charts sweep only those.

use crate::estimator::config::Checkpointing;
use crate::plan::build_graph;
use crate::plan::Plan;

/// Which checkpointing policies a model accepts, and how many blocks it has.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CkptInfo {
    /// Checkpointed regions under `block` (0: not supported).
    pub blocks: u64,
    /// Checkpointed regions under `stage` (0: not supported; ResNet stages).
    pub stages: u64,
    /// Whether `sqrt` and `k` segments (`checkpoint_sequential`) apply.
    pub segments: bool,
    /// Ops in the tape (under `block`, else without checkpointing): what a simulation costs.
    pub ops: usize,
}

impl CkptInfo {
    /// Builds the model's tape under each policy (batch 1) and counts its checkpointed regions.
    pub fn probe(plan: &Plan) -> CkptInfo {
        // The model's plan (batch 1, no GPU: what `workbench::model_plan` keys models on) under
        // one policy: its checkpointed regions and its length, if it builds.
        let probe = |ckpt| {
            build_graph(&Plan {
                ckpt,
                batch: 1,
                gpu: None,
                ..plan.clone()
            })
            .ok()
            .map(|g| (g.segments as u64, g.ops.len()))
        };
        let [block, stage, seq] = [
            Checkpointing::Block,
            Checkpointing::Stage,
            Checkpointing::Segments(2),
        ]
        .map(probe);
        let regions = |p: Option<(u64, usize)>| p.map_or(0, |(r, _)| r);
        let ops = [block, stage, seq]
            .into_iter()
            .flatten()
            .map(|(_, n)| n)
            .max()
            .or_else(|| probe(Checkpointing::None).map(|(_, n)| n))
            .unwrap_or(0);
        CkptInfo {
            blocks: regions(block),
            stages: regions(stage),
            segments: regions(seq) > 0,
            ops,
        }
    }
    pub fn any(&self) -> bool {
        self.blocks > 0 || self.stages > 0 || self.segments
    }
    /// Whether the plan's policy applies to this model.
    pub fn allows(&self, c: Checkpointing) -> bool {
        match c {
            Checkpointing::None => true,
            Checkpointing::Block => self.blocks > 0,
            Checkpointing::Stage => self.stages > 0,
            Checkpointing::Sqrt | Checkpointing::Segments(_) => self.segments,
        }
    }
}
