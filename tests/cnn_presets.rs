//! The CNN presets: exact parameter counts (torchvision 0.29.2 and the reference harness), the
//! smallest resolution each builds at, checkpointing segment rules, every measured step of the
//! CNNs added here within 3 % (and 0.5 %, the drift that means an op's modelling changed), and
//! the ResNet `checkpoint_sequential` and smallest-resolution steps within 0.1 %.

mod common;

use vram_planner::estimator::checkpoint::{sequential_segments, sqrt_segments};
use vram_planner::estimator::config::Checkpointing;
use vram_planner::plan::build_graph;
use vram_planner::plan::Plan;
use vram_planner::presets::models::{self, Family, InputKind};

/// `sum(p.numel() for p in model.parameters())` of torchvision 0.29.2 / `harness/models.py`.
const PARAMS: &[(&str, u64)] = &[
    ("resnet18", 11_689_512),
    ("resnet34", 21_797_672),
    ("resnet50", 25_557_032),
    ("resnet101", 44_549_160),
    ("resnet152", 60_192_808),
    ("wide_resnet50_2", 68_883_240),
    ("mobilenet_v2", 3_504_872),
    ("mobilenet_v3_small", 2_542_856),
    ("mobilenet_v3_large", 5_483_032),
    ("efficientnet_b0", 5_288_548),
    ("vgg16", 138_357_544),
    ("convnext_tiny", 28_589_128),
    ("plainconv128", 595_850),
    ("unet", 31_037_698),
];

/// Models whose reference cases this test holds to 3 %.
const CHECKED: &[&str] = &[
    "mobilenet_v2",
    "mobilenet_v3_small",
    "mobilenet_v3_large",
    "efficientnet_b0",
    "vgg16",
    "convnext_tiny",
    "plainconv128",
    "unet",
];

fn plan(model: &str, res: u64, batch: u64) -> Plan {
    let mut p = Plan::new(model);
    p.res = Some(res);
    p.batch = batch;
    p
}

#[test]
fn exact_param_counts() {
    for &(id, n) in PARAMS {
        let m = models::find(id).unwrap_or_else(|| panic!("{id} is not registered"));
        assert_eq!(m.family, Family::Cnn, "{id}");
        assert_eq!(m.params, n, "{id}: registry count");
        let InputKind::Image { default_res, .. } = m.input else {
            panic!("{id} takes images")
        };
        let g = build_graph(&plan(id, default_res, 2)).unwrap();
        assert_eq!(g.param_count(), n, "{id}: built graph");
    }
    let cnns = models::MODELS
        .iter()
        .filter(|m| m.family == Family::Cnn)
        .count();
    assert_eq!(cnns, PARAMS.len(), "every CNN preset has its count here");
}

#[test]
fn min_res_is_the_smallest_that_builds() {
    for m in models::MODELS.iter().filter(|m| m.family == Family::Cnn) {
        let InputKind::Image { min_res, .. } = m.input else {
            continue;
        };
        assert!(
            build_graph(&plan(m.id, min_res, 1)).is_ok(),
            "{} builds at {min_res}",
            m.id
        );
        if min_res > 1 {
            assert!(
                build_graph(&plan(m.id, min_res - 1, 1)).is_err(),
                "{} is refused below {min_res}",
                m.id
            );
        }
    }
}

#[test]
fn unet_needs_a_multiple_of_16() {
    assert!(build_graph(&plan("unet", 520, 1)).is_err());
    assert!(build_graph(&plan("unet", 528, 1)).is_ok());
}

#[test]
fn checkpoint_sequential_segments() {
    // checkpoint_sequential(features, k): k - 1 checkpointed runs of len // k, the rest plain.
    assert_eq!(
        sequential_segments(17, 4, "blocks").unwrap(),
        vec![0..4, 4..8, 8..12]
    );
    assert_eq!(
        sequential_segments(31, 6, "blocks").unwrap(),
        vec![0..5, 5..10, 10..15, 15..20, 20..25]
    );
    assert_eq!(sequential_segments(9, 1, "blocks").unwrap(), vec![]);
    assert!(sequential_segments(9, 10, "blocks").is_err());
    assert!(sequential_segments(9, 0, "blocks").is_err());
    assert_eq!(sqrt_segments(17), 4);
    assert_eq!(sqrt_segments(13), 4);
    assert_eq!(sqrt_segments(9), 3);
    assert_eq!(sqrt_segments(31), 6);
    assert_eq!(sqrt_segments(8), 3);
}

#[test]
fn checkpointing_modes_build_or_explain() {
    for id in [
        "mobilenet_v2",
        "mobilenet_v3_small",
        "mobilenet_v3_large",
        "efficientnet_b0",
        "vgg16",
        "convnext_tiny",
    ] {
        for ck in [
            Checkpointing::Block,
            Checkpointing::Sqrt,
            Checkpointing::Segments(2),
        ] {
            let mut p = plan(id, 224, 2);
            p.ckpt = ck;
            let g = build_graph(&p).unwrap_or_else(|e| panic!("{id} {ck:?}: {e}"));
            assert!(g.segments > 0, "{id} {ck:?} checkpoints something");
        }
        let mut p = plan(id, 224, 2);
        p.ckpt = Checkpointing::Stage;
        assert!(build_graph(&p).is_err(), "{id}: stage is a ResNet mode");
        p.ckpt = Checkpointing::Segments(100);
        assert!(
            build_graph(&p).is_err(),
            "{id}: more segments than children"
        );
    }
    for id in ["plainconv128", "unet"] {
        let mut p = plan(id, 64, 2);
        p.ckpt = Checkpointing::Block;
        assert!(build_graph(&p).unwrap().segments > 0);
        p.ckpt = Checkpointing::Sqrt;
        assert!(build_graph(&p).is_err());
    }
}

#[test]
fn checkpointing_saves_memory() {
    for id in [
        "mobilenet_v3_large",
        "efficientnet_b0",
        "vgg16",
        "convnext_tiny",
        "mobilenet_v2",
    ] {
        let p = plan(id, 224, 32);
        let none = vram_planner::plan::estimate(&p).unwrap().peak_allocated;
        let mut q = p.clone();
        q.ckpt = Checkpointing::Sqrt;
        let sqrt = vram_planner::plan::estimate(&q).unwrap().peak_allocated;
        assert!(sqrt < none, "{id}: sqrt {sqrt} < none {none}");
    }
}

/// Replays the CUDA records of the checked models.
fn checked_cases(file: &common::Measured) -> Vec<common::Replayed> {
    file.replay_where(|r| {
        CHECKED.contains(&r["model"].as_str().unwrap_or("")) && r["device"].as_str() != Some("cpu")
    })
}

#[test]
fn reference_cases_within_3_percent() {
    let cases = checked_cases(&common::REFERENCE_SET);
    assert_eq!(
        cases.len(),
        63,
        "CUDA reference cases of the models added here"
    );
    common::assert_within(&cases, 0.03);
}

/// MobileNetV2, ConvNeXt-T and the checkpointing modes the shared set lacks, measured with the
/// same harness (`tests/data/PROVENANCE.md`).
#[test]
fn extra_oracle_cases_within_3_percent() {
    let cases = checked_cases(&common::CNN_EXTRA);
    assert_eq!(cases.len(), 22);
    common::assert_within(&cases, 0.03);
}

/// ResNets under `checkpoint_sequential` over their residual blocks (√N, 2 and 8 segments),
/// measured with the shared harness (`tests/data/PROVENANCE.md`): the segments' recomputation is
/// modelled op by op, so these are held to 0.1 %.
#[test]
fn resnet_segment_cases_within_a_tenth_of_a_percent() {
    common::assert_replays(&common::RESNET_SEGMENTS, 6, 1e-3);
}

/// Every image model at the smallest resolution it takes (ResNets at 1–24 px: every ResNet
/// convolution and its max pool are padded), measured with the shared harness
/// (`tests/data/PROVENANCE.md`): exact, as at 224.
#[test]
fn smallest_resolutions_match_pytorch() {
    common::assert_replays(&common::SMALL_RES, 10, 1e-3);
}

#[test]
fn resnet_segments_follow_checkpoint_sequential() {
    let mut p = plan("resnet50", 224, 2);
    p.ckpt = Checkpointing::Sqrt;
    assert_eq!(
        build_graph(&p).unwrap().segments,
        3,
        "√16 = 4 segments, the last one not checkpointed"
    );
    p.ckpt = Checkpointing::Segments(16);
    assert_eq!(build_graph(&p).unwrap().segments, 15);
    p.ckpt = Checkpointing::Segments(17);
    let e = build_graph(&p).unwrap_err().to_string();
    assert!(e.contains("between 1 and 16 segments"), "{e}");
    // A segment spans stages: 2 segments of ResNet-50 put layer1..layer3.1 (8 blocks) in one.
    p.ckpt = Checkpointing::Segments(2);
    assert_eq!(build_graph(&p).unwrap().segments, 1);
}

/// The simulation replays these models almost byte for byte; a drift above 0.5 % means an op's
/// modelling changed.
#[test]
fn reference_cases_stay_tight() {
    for file in [&common::REFERENCE_SET, &common::CNN_EXTRA] {
        common::assert_within(&checked_cases(file), 0.005);
    }
}

/// A checkpointing policy is either applied (the tape has checkpointed regions) or refused with
/// a message: never silently dropped, which would report the uncheckpointed peak as if it were
/// checkpointed (as ResNets once did with `sqrt`).
#[test]
fn every_model_applies_or_refuses_each_checkpointing_policy() {
    for m in models::MODELS {
        for ck in [
            Checkpointing::Stage,
            Checkpointing::Block,
            Checkpointing::Sqrt,
            Checkpointing::Segments(2),
        ] {
            let mut p = Plan::new(m.id);
            p.batch = 1;
            p.ckpt = ck;
            if let Ok(g) = build_graph(&p) {
                assert!(
                    g.segments > 0,
                    "{} {ck:?} builds with nothing checkpointed",
                    m.id
                );
            }
        }
    }
}

/// `checkpoint_sequential` with more segments than children is an error in PyTorch (its `range`
/// step is zero): every model that takes k segments refuses one more than each of its blocks
/// gets, instead of quietly cutting fewer.
#[test]
fn every_model_refuses_more_segments_than_it_has_blocks() {
    for m in models::MODELS {
        let plan = |ckpt| Plan {
            batch: 1,
            ckpt,
            ..Plan::new(m.id)
        };
        let Ok(block) = build_graph(&plan(Checkpointing::Block)) else {
            continue;
        };
        if build_graph(&plan(Checkpointing::Segments(2))).is_err() {
            continue; // no checkpoint_sequential for this model
        }
        let n = block.segments as u32;
        let fits = build_graph(&plan(Checkpointing::Segments(n)));
        assert!(
            fits.is_ok(),
            "{}: {n} segments over {n} blocks: {:?}",
            m.id,
            fits.err()
        );
        let e = build_graph(&plan(Checkpointing::Segments(n + 1)))
            .err()
            .unwrap_or_else(|| panic!("{}: {} segments over {n} blocks built", m.id, n + 1));
        assert!(
            e.to_string()
                .contains(&format!("between 1 and {n} segments")),
            "{}: {e}",
            m.id
        );
    }
}
