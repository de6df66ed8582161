//! The scale-out and fine-tune/inference charts drawn to SVG strings: what the page draws on a
//! canvas, checked without a browser. Data comes from the estimator through the UI's logic
//! modules, exactly as the page computes it.

use plotters::prelude::*;
use vram_planner::estimator::timeline::Category;
use vram_planner::estimator::units::Bytes;
use vram_planner::plan::Plan;
use vram_planner::plots::batch::draw_stacked_chart;
use vram_planner::plots::context_chart::context_bands;
use vram_planner::plots::rank_chart::{draw_rank_chart, RankChart};
use vram_planner::plots::zero_chart::{draw_zero_chart, ZeroChart};
use vram_planner::plots::Theme;
use vram_planner::ui::logic::i18n::{Lang, Units};
use vram_planner::ui::logic::{mode as mode_logic, parallel as scale_logic};

fn svg(draw: impl FnOnce(&DrawingArea<SVGBackend, plotters::coord::Shift>)) -> String {
    let mut s = String::new();
    {
        let root = SVGBackend::with_string(&mut s, (720, 400)).into_drawing_area();
        draw(&root);
        root.present().unwrap();
    }
    s
}

fn gpt2() -> Plan {
    Plan {
        model: "gpt2".into(),
        batch: 4,
        seq: Some(256),
        gpu: Some("a100-40".into()),
        ..Plan::default()
    }
}

#[test]
fn zero_chart_has_a_line_per_scheme_and_the_capacity() {
    let plan = gpt2();
    let curves = scale_logic::zero_curves(&plan).unwrap();
    let current = scale_logic::estimate(&plan)
        .map(|e| (e.layout.world, Bytes(e.per_gpu.device_total_bytes)))
        .ok();
    let capacity = scale_logic::gpu_of(&plan).map(|g| g.memory);
    let out = svg(|root| {
        draw_zero_chart(
            root,
            &ZeroChart {
                curves: &curves,
                current,
                capacity,
                words: None,
            },
            &Theme::default(),
        )
        .unwrap()
    });
    for label in [
        "DDP (ZeRO-0)",
        "ZeRO-1",
        "ZeRO-2",
        "ZeRO-3",
        "FSDP",
        "GPU capacity 39.4 GiB",
        "your layout, 1 GPU",
        "GPUs",
        "Per-GPU memory (GiB)",
    ] {
        assert!(out.contains(label), "missing {label:?}");
    }
    assert!(out.matches("<polyline").count() >= 5, "one line per scheme");
}

#[test]
fn zero_chart_without_data_says_so() {
    let out = svg(|root| {
        draw_zero_chart(
            root,
            &ZeroChart {
                curves: &[],
                current: None,
                capacity: None,
                words: None,
            },
            &Theme::default(),
        )
        .unwrap()
    });
    assert!(out.contains("No layout of this plan can be estimated"));
}

#[test]
fn rank_chart_marks_the_peak_stage() {
    let mut plan = Plan {
        model: "llama-small".into(),
        batch: 2,
        seq: Some(256),
        gpu: Some("a100-40".into()),
        ..Plan::default()
    };
    scale_logic::set_degree(&mut plan, scale_logic::Degree::Pp, Some(4));
    let e = scale_logic::estimate(&plan).unwrap();
    assert_eq!(e.ranks.len(), 4);
    let data = RankChart::from_estimate(&e, Some(Bytes(40 << 30)));
    assert_eq!(data.peak, e.peak_rank);
    // The bars are the estimator's per-GPU numbers, unchanged.
    let m = &e.ranks[0].memory;
    assert_eq!(
        data.bars[0].parts,
        [
            m.params_bytes,
            m.grads_bytes,
            m.optimizer_state_bytes,
            m.activations_bytes,
            m.other_bytes
        ]
    );
    let out = svg(|root| draw_rank_chart(root, &data, &Theme::default()).unwrap());
    for label in [
        "stage 0",
        "stage 3",
        "peak rank",
        "Optimizer state",
        "GPU capacity",
    ] {
        assert!(out.contains(label), "missing {label:?}");
    }
}

#[test]
fn context_chart_draws_the_kv_band_on_top() {
    let mut plan = Plan {
        model: "llama-small".into(),
        seq: Some(256),
        gpu: Some("t4".into()),
        ..Plan::default()
    };
    mode_logic::set_mode(&mut plan, "infer");
    let points = mode_logic::context_points(&mode_logic::context_base(&plan));
    let bands = context_bands(&points);
    assert_eq!(
        bands.last().map(|b| b.0),
        Some(Category::KvCache),
        "KV cache is the top band"
    );
    // The bands stack to the allocated peak at every point.
    for (i, p) in points.iter().enumerate() {
        let top = bands.iter().map(|b| b.1[i].2).fold(0.0, f64::max);
        assert!((top - p.peak_allocated.gib()).abs() < 1e-9);
    }
    let e = vram_planner::plan::estimate(&plan).unwrap();
    let data = mode_logic::context_chart(
        &points,
        Some((256, e.device_total)),
        Some(Bytes(15 << 30)),
        Lang::En,
        Units::Binary,
    );
    let out = svg(|root| draw_stacked_chart(root, &data, &Theme::default()).unwrap());
    for label in [
        "KV cache",
        "Context length (tokens)",
        "GPU capacity 15.0 GiB",
        "context 256:",
        "Device total",
    ] {
        assert!(out.contains(label), "missing {label:?}");
    }
    let empty = svg(|root| {
        draw_stacked_chart(
            root,
            &mode_logic::context_chart(&[], None, None, Lang::En, Units::Binary),
            &Theme::default(),
        )
        .unwrap()
    });
    assert!(empty.contains("No context length"));
}

#[test]
fn big_model_inference_finds_its_longest_context() {
    let mut plan = Plan {
        model: "llama-2-7b".into(),
        gpu: Some("rtx4090".into()),
        ..Plan::default()
    };
    mode_logic::set_mode(&mut plan, "infer");
    mode_logic::set_quantization(&mut plan, "int4");
    let t = std::time::Instant::now();
    let pts = mode_logic::context_points(&mode_logic::context_base(&plan));
    let sweep = t.elapsed();
    let t = std::time::Instant::now();
    let max = mode_logic::max_context_text(
        &mode_logic::max_context(&plan).unwrap(),
        vram_planner::ui::logic::i18n::Lang::En,
    );
    eprintln!(
        "llama-2-7b: sweep of {} points {sweep:?}, {max} in {:?}",
        pts.len(),
        t.elapsed()
    );
    assert!(max.starts_with("Longest context"), "{max}");
}

#[test]
fn panel_charts_draw_the_page_words_and_units() {
    use vram_planner::ui::logic::i18n::{Lang, Units};
    let mut plan = gpt2();
    scale_logic::set_degree(&mut plan, scale_logic::Degree::Pp, Some(2));
    let curves = scale_logic::zero_curves(&plan).unwrap();
    let e = scale_logic::estimate(&plan).unwrap();
    let current = Some((e.layout.world, Bytes(e.per_gpu.device_total_bytes)));
    let capacity = scale_logic::gpu_of(&plan).map(|g| g.memory);
    let words = scale_logic::zero_words(current, capacity, Lang::Zh, Units::Decimal);
    let out = svg(|root| {
        draw_zero_chart(
            root,
            &ZeroChart {
                curves: &curves,
                current,
                capacity,
                words: Some(&words),
            },
            &Theme::default(),
        )
        .unwrap()
    });
    for label in [
        "GPU 数量",
        "单卡显存 (GB)",
        "GPU 容量 42.3 GB",
        "当前布局，2 张 GPU",
    ] {
        assert!(out.contains(label), "missing {label:?}");
    }
    assert!(!out.contains("GiB") && !out.contains("your layout"));
    let data = scale_logic::rank_chart(Some(&e), capacity, Lang::Zh, Units::Decimal);
    let out = svg(|root| draw_rank_chart(root, &data, &Theme::default()).unwrap());
    for label in [
        "流水线阶段",
        "阶段 1",
        "峰值阶段：",
        "优化器状态",
        "GPU 容量",
    ] {
        assert!(out.contains(label), "missing {label:?}");
    }
    assert!(!out.contains("GiB") && !out.contains("stage 1"));
}
