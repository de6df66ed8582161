//! Which checkpointing policies a model accepts, found by building its tape under each: the
//! controls offer only those ([`super::state::applies`]), the charts sweep only those.

use crate::estimator::config::Checkpointing;
use crate::estimator::graph::{CkptStack, Graph};
use crate::estimator::tune::Mode;
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

/// The model's plan (batch 1, no GPU: what `workbench::model_plan` keys models on) under one
/// policy.
fn probe_plan(plan: &Plan, ckpt: Checkpointing) -> Plan {
    Plan {
        ckpt,
        batch: 1,
        gpu: None,
        ..plan.clone()
    }
}

impl CkptInfo {
    /// Builds the model's tape under `block` (batch 1) and counts its checkpointed regions. A
    /// builder that cut one stack of layers says there what every policy makes of it
    /// ([`CkptInfo::of_graph`]): one build instead of three, which for a 61-layer, 256-expert
    /// model is most of what probing it costs. Other models are built under each policy
    /// ([`CkptInfo::probe_each`]).
    pub fn probe(plan: &Plan) -> CkptInfo {
        let block = build_graph(&probe_plan(plan, Checkpointing::Block)).ok();
        match block.as_ref().and_then(|g| CkptInfo::of_graph(plan, g)) {
            Some(info) => info,
            None => CkptInfo::probe_each(plan, block.map(|g| (g.segments as u64, g.ops.len()))),
        }
    }

    /// What a tape of `plan`'s model built under any policy tells of every policy, when its
    /// builder cut one stack of layers with [`Graph::checkpoint_runs`] (`None` otherwise): the
    /// builder's only choice that depends on the policy is that cut, which `block` makes one
    /// region per layer. Serving refuses every policy before the builder runs.
    pub fn of_graph(plan: &Plan, g: &Graph) -> Option<CkptInfo> {
        match g.ckpt_stacks.as_slice() {
            &[stack] if plan.mode != Mode::Infer => Some(CkptInfo::of_stack(
                stack,
                stack.children as u64,
                g.ops.len(),
            )),
            _ => None,
        }
    }

    /// What `checkpoint::runs` makes of one stack under each policy, from the stack and the
    /// tape built under `block` (its `regions` and `ops`): `stage` is `block` where the stack's
    /// layers are its stages, else refused; `checkpoint_sequential` needs two children.
    fn of_stack(stack: CkptStack, regions: u64, ops: usize) -> CkptInfo {
        CkptInfo {
            blocks: regions,
            stages: if stack.stage_is_block { regions } else { 0 },
            segments: regions > 0 && stack.children >= 2,
            ops,
        }
    }

    /// Builds the model's tape under each policy (batch 1) and counts its checkpointed regions;
    /// `block`: the build under `block`, when already made.
    fn probe_each(plan: &Plan, block: Option<(u64, usize)>) -> CkptInfo {
        let probe = |ckpt| {
            build_graph(&probe_plan(plan, ckpt))
                .ok()
                .map(|g| (g.segments as u64, g.ops.len()))
        };
        let [stage, seq] = [Checkpointing::Stage, Checkpointing::Segments(2)].map(probe);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::presets::models::MODELS;

    /// One build under any policy tells every policy's answer for the models whose builder cuts
    /// one stack: the same as building under each, for every preset, in training and in
    /// serving (where every policy is refused), and at a sequence too short for some.
    #[test]
    fn one_build_answers_as_a_build_per_policy() {
        let mut derived = 0;
        for m in MODELS {
            let mut plans = vec![Plan::new(m.id)];
            if m.id == "gpt2" || m.id == "vit_b_16" {
                plans.push(Plan {
                    mode: Mode::Infer,
                    ..Plan::new(m.id)
                });
                plans.push(Plan {
                    seq: Some(1),
                    ..Plan::new(m.id)
                });
            }
            for plan in plans {
                let block = build_graph(&probe_plan(&plan, Checkpointing::Block)).ok();
                derived += usize::from(block.as_ref().is_some_and(|g| g.ckpt_stacks.len() == 1));
                let each =
                    CkptInfo::probe_each(&plan, block.map(|g| (g.segments as u64, g.ops.len())));
                assert_eq!(CkptInfo::probe(&plan), each, "{plan:?}");
                // The link's parse builds under the link's policy, not `block`.
                for policy in [Checkpointing::None, Checkpointing::Segments(2)] {
                    if let Ok(g) = build_graph(&probe_plan(&plan, policy)) {
                        if let Some(info) = CkptInfo::of_graph(&plan, &g) {
                            assert_eq!(info, each, "{plan:?} built under {policy:?}");
                        }
                    }
                }
            }
        }
        // Most presets are text models, which cut one stack.
        assert!(derived * 2 > MODELS.len(), "{derived} of {}", MODELS.len());
    }

    /// A stack of one layer has no two segments to cut, and a stack whose layers are not its
    /// stages refuses `stage`.
    #[test]
    fn what_one_stack_allows() {
        let one = CkptStack {
            children: 1,
            stage_is_block: true,
        };
        let info = CkptInfo::of_stack(one, 1, 10);
        assert_eq!((info.blocks, info.stages, info.segments), (1, 1, false));
        let vit = CkptStack {
            children: 12,
            stage_is_block: false,
        };
        let info = CkptInfo::of_stack(vit, 12, 10);
        assert_eq!((info.blocks, info.stages, info.segments), (12, 0, true));
        assert!(!CkptInfo::of_stack(vit, 0, 10).any());
    }
}
