//! The layout search's resident floor (`ResidentFloor`, `resident_over`): under every simulated
//! piece it stands for, equal to the sharded model state where it counts all of it, the same
//! for every micro-batch of a build, and the search's answers the same with the floors as
//! without them, while the floors spare builds and simulations.

mod common;
use vram_planner::estimator::config::{OptimizerKind, Precision};
use vram_planner::estimator::parallel::zero::{Sharded, Sharding};
use vram_planner::estimator::parallel::*;
use vram_planner::estimator::units::Bytes;
use vram_planner::plan::search::{search_counted, SearchOptions};
use vram_planner::plan::{self, Plan};

/// Plans the floor is checked on: a decoder with tied embeddings in fp32, one under autocast,
/// one with every layer checkpointed, a mixture of experts at two expert-parallel degrees, and
/// a CNN.
fn plans() -> Vec<Plan> {
    let text = |model: &str, dtype: Precision, ckpt: &str| {
        let mut p = Plan::new(model);
        p.batch = 2;
        p.seq = Some(128);
        p.dtype = dtype;
        p.ckpt = serde_json::from_str(ckpt).unwrap();
        p.gpu = Some("h100-80".into());
        p
    };
    let moe = |ep: u64| {
        let mut p = text("custom", Precision::AmpBf16, "\"none\"");
        p.hf_config = Some(common::small_qwen3_moe(512));
        p.parallel = Some(Parallel {
            ep,
            ..Default::default()
        });
        p
    };
    let mut cnn = Plan::new("resnet18");
    cnn.batch = 4;
    cnn.gpu = Some("h100-80".into());
    vec![
        text("gpt2", Precision::Fp32, "\"none\""),
        text("llama-small", Precision::AmpBf16, "\"none\""),
        text("llama-small", Precision::Bf16, "\"block\""),
        moe(1),
        moe(4),
        cnn,
    ]
}

/// ZeRO stage, FSDP, optimizer offload, parameter offload, `gradient_as_bucket_view`.
type Stage = (u8, bool, bool, bool, bool);

const STAGES: [Stage; 9] = [
    (0, false, false, false, false),
    (0, false, false, false, true),
    (0, false, true, false, false),
    (1, false, false, false, false),
    (1, false, true, false, false),
    (2, false, false, false, false),
    (2, true, true, false, false),
    (3, false, false, false, false),
    (3, false, true, true, false),
];

fn with_layout(base: &Plan, dp: u64, pp: u64, m: u32, stage: Stage) -> Plan {
    let (zero, fsdp, off_opt, off_params, view) = stage;
    let mut p = base.clone();
    let mut par = p.parallel.clone().unwrap_or_default();
    par.dp = Some(dp);
    par.pp = pp;
    par.micro_batches = Some(m);
    par.zero = Some(zero);
    par.fsdp = fsdp;
    par.gradient_as_bucket_view = view;
    p.parallel = Some(par);
    p.offload = (off_opt || off_params).then(|| Offload {
        optimizer: off_opt,
        params: off_params,
        ..Default::default()
    });
    p
}

/// The floor is under the least a simulated piece holds at any forward or backward event, for
/// every stage, offload, pipeline depth and micro-batch count; where it counts all of a
/// piece's model state (one piece, ZeRO-3 on the GPU, gradients persisting) it is that state
/// to the byte: the shards of the parameters, the gradients and the optimizer state
/// (`Sharded::params_at_rest`, `grads_at_rest`, `optimizer_state`).
#[test]
fn the_resident_floor_is_under_every_simulated_piece() {
    let mut exact = 0;
    for base in plans() {
        for pp in [1u64, 2] {
            for m in [1u32, 4] {
                for stage in STAGES {
                    let p = with_layout(&base, 4, pp, m, stage);
                    let what = format!("{} pp {pp} m {m} {stage:?}", p.model);
                    let Ok(layout) = plan::layout(&p) else {
                        continue;
                    };
                    let Ok(prep) = plan::prepare(&p, &layout) else {
                        continue;
                    };
                    let setup = p.setup();
                    let (_, g) = plan::layout_graph(&p, &layout).unwrap();
                    let floor = ResidentFloor::of(&g, &setup)
                        .pieces(&setup, &layout)
                        .unwrap();
                    let least = resident::least_forward_backward(&setup, &layout, &prep);
                    assert_eq!(floor.len(), least.len(), "{what}");
                    for (c, (&f, &l)) in floor.iter().zip(&least).enumerate() {
                        assert!(f <= l, "{what} piece {c}: {f} > {l}");
                    }
                    if pp == 1 && m > 1 && stage == (3, false, false, false, false) {
                        let s = Sharded::new(
                            &prep.pieces[0],
                            Sharding {
                                dp: layout.dp,
                                ep: layout.ep,
                                zero: layout.zero,
                                fsdp: layout.fsdp,
                                bucket_view: layout.gradient_as_bucket_view,
                                offload_optimizer: layout.offload.optimizer,
                                offload_params: layout.offload.params,
                            },
                            setup.opt.states_per_param(),
                            layout.mixed_precision,
                        );
                        let state = s.params_at_rest() + s.grads_at_rest() + s.optimizer_state();
                        assert_eq!(floor[0], state, "{what}");
                        assert!(state > 0, "{what}");
                        exact += 1;
                    }
                }
            }
        }
    }
    assert_eq!(exact, plans().len());
}

/// The floor does not depend on the micro-batch the graph was built at (a search reads it off
/// the first build of each tensor- and expert-parallel degree for all micro-batches).
#[test]
fn the_resident_floor_is_the_same_at_every_micro_batch() {
    for base in plans() {
        for stage in [STAGES[0], STAGES[3], STAGES[7]] {
            let floors: Vec<Vec<u64>> = [1u64, 2, 8]
                .iter()
                .map(|&b| {
                    let mut p = with_layout(&base, 4, 2, 4, stage);
                    p.batch = b;
                    let layout = plan::layout(&p).unwrap();
                    let (_, g) = plan::layout_graph(&p, &layout).unwrap();
                    ResidentFloor::of(&g, &p.setup())
                        .pieces(&p.setup(), &layout)
                        .unwrap()
                })
                .collect();
            assert_eq!(floors[0], floors[1], "{} {stage:?}", base.model);
            assert_eq!(floors[0], floors[2], "{} {stage:?}", base.model);
        }
    }
}

/// `resident_over` passes over no layout that fits: on a GPU shrunk step by step, every layout
/// it rules out is over the GPU in the full estimate, and it rules some out.
#[test]
fn resident_over_never_passes_over_a_layout_that_fits() {
    for base in plans() {
        for stage in [STAGES[0], STAGES[3], STAGES[7]] {
            let p = with_layout(&base, 4, 2, 4, stage);
            let what = format!("{} {stage:?}", p.model);
            let layout = plan::layout(&p).unwrap();
            let prep = plan::prepare(&p, &layout).unwrap();
            let setup = p.setup();
            let (_, g) = plan::layout_graph(&p, &layout).unwrap();
            let floor = ResidentFloor::of(&g, &setup)
                .pieces(&setup, &layout)
                .unwrap();
            let saved = SavedFloor::of(&g).pieces(2).unwrap();
            let mut gpu = plan::resolve::gpu(&p).unwrap().unwrap();
            let full = evaluate(&setup, &layout, &prep, Some(&gpu), None)
                .per_gpu
                .device_total_bytes;
            let mut passed_over = 0;
            for k in 0..=64u64 {
                gpu.memory = Bytes(k * full / 32);
                let peak = evaluate(&setup, &layout, &prep, Some(&gpu), None);
                for s in [None, Some(saved.as_slice())] {
                    if resident_over(&setup, &layout, &floor, s, &gpu) {
                        passed_over += 1;
                        assert_eq!(peak.fits, Some(false), "{what} at {} B", gpu.memory.0);
                    }
                }
            }
            assert!(passed_over > 0, "{what}");
        }
    }
}

/// The floors change no answer: the same layouts, estimates and plans with them as without,
/// while they prepare fewer layouts. Cases: a mixture of experts whose every expert on one GPU
/// is far too large (with and without offload), a dense decoder that only a deep pipeline
/// holds, and an 8-bit optimizer the build refuses under ZeRO (where the graph built for the
/// first stage of a micro-batch serves the later ones, so the resident floor stands aside).
#[test]
fn the_floors_change_no_search_answer() {
    let mut moe = Plan::new("custom");
    moe.hf_config = Some(
        serde_json::json!({"model_type": "qwen3_moe", "hidden_size": 64,
        "intermediate_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4,
        "num_key_value_heads": 2, "vocab_size": 256, "head_dim": 16, "num_experts": 16,
        "num_experts_per_tok": 4, "moe_intermediate_size": 256}),
    );
    moe.batch = 8;
    moe.seq = Some(256);
    moe.dtype = Precision::AmpBf16;
    moe.gpu = Some("custom:0.6".into());
    let mut moe_big = moe.clone();
    moe_big.gpu = Some("custom:0.6".into());
    let mut dense = Plan::new("gpt2");
    dense.batch = 16;
    dense.seq = Some(1024);
    dense.gpu = Some("custom:6".into());
    let mut bnb = Plan::new("gpt2");
    bnb.batch = 16;
    bnb.seq = Some(1024);
    bnb.opt = OptimizerKind::Adam8bit;
    bnb.gpu = Some("custom:4".into());
    for (plan, offload) in [(moe_big, false), (moe, true), (dense, true), (bnb, true)] {
        let opts = SearchOptions {
            max_gpus: 16,
            top: 40,
            offload,
            ..Default::default()
        };
        let what = format!("{} offload {offload}", plan.model);
        let (with, prepared_with) = search_counted(&plan, &opts, true).unwrap();
        let (without, prepared_without) = search_counted(&plan, &opts, false).unwrap();
        assert!(!with.is_empty(), "{what}");
        assert_eq!(
            serde_json::to_string(&with).unwrap(),
            serde_json::to_string(&without).unwrap(),
            "{what}"
        );
        assert!(
            prepared_with < prepared_without,
            "{what}: {prepared_with} of {prepared_without}"
        );
    }
}
