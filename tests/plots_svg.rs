//! The charts drawn natively to SVG strings: what the page draws on its canvas, checked without
//! a browser.

use plotters::prelude::*;
use vram_planner::estimator::config::Plan;
use vram_planner::estimator::estimate;
use vram_planner::estimator::sweep::{log_points, sweep, Axis};
use vram_planner::estimator::timeline::Category;
use vram_planner::estimator::units::Bytes;
use vram_planner::plots::batch::bands;
use vram_planner::plots::{draw_batch_chart, BatchChart, Theme};

/// Draws the batch chart to an SVG string.
#[track_caller]
fn svg_of(data: &BatchChart, theme: Theme, size: (u32, u32)) -> String {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        draw_batch_chart(&root, data, &theme).expect("chart draws");
        root.present().expect("svg completes");
    }
    svg
}

fn resnet18_sweep() -> Vec<vram_planner::estimator::sweep::Point> {
    sweep(&Plan::new("resnet18"), Axis::Batch, &log_points(1, 4096, 12))
}

#[test]
fn batch_chart_has_axes_legend_and_marker() {
    let points = resnet18_sweep();
    assert!(points.len() >= 10, "sweep kept {} points", points.len());
    let plan = Plan { batch: 64, ..Plan::new("resnet18") };
    let peak = estimate(&plan).unwrap().peak_allocated;
    let svg = svg_of(&BatchChart { points: &points, current: Some((64, peak)), capacity: None }, Theme::default(), (800, 450));
    assert!(svg.starts_with("<svg"), "not an SVG: {}", &svg[..svg.len().min(80)]);
    for text in ["Batch size", "Allocated peak (GiB)", "Parameters", "Activations", "Gradients", "Optimizer state"] {
        assert!(svg.contains(text), "missing {text:?}");
    }
    assert!(svg.contains(&format!("batch 64: {peak}")), "current batch is not labelled");
    assert!(svg.contains("<polygon"), "no stacked bands");
    assert!(!svg.contains("GPU capacity"), "capacity drawn without a GPU");
}

#[test]
fn capacity_line_when_a_gpu_is_chosen() {
    let points = resnet18_sweep();
    let svg = svg_of(&BatchChart { points: &points, current: None, capacity: Some(Bytes(24 << 30)) }, Theme::default(), (640, 360));
    assert!(svg.contains("GPU capacity 24"), "no capacity label");
}

#[test]
fn moving_the_batch_changes_the_drawing() {
    let points = resnet18_sweep();
    let at = |b: u64| {
        let peak = estimate(&Plan { batch: b, ..Plan::new("resnet18") }).unwrap().peak_allocated;
        svg_of(&BatchChart { points: &points, current: Some((b, peak)), capacity: None }, Theme::default(), (640, 360))
    };
    assert_ne!(at(8), at(512));
}

/// Font sizes used in an SVG, in order of appearance.
fn font_sizes(svg: &str) -> Vec<f64> {
    svg.split("font-size=\"").skip(1).filter_map(|s| s.split('"').next()?.parse().ok()).collect()
}

#[test]
fn high_dpi_scales_the_text() {
    let points = resnet18_sweep();
    let data = BatchChart { points: &points, current: None, capacity: None };
    let one = font_sizes(&svg_of(&data, Theme { scale: 1.0 }, (640, 360)));
    let two = font_sizes(&svg_of(&data, Theme { scale: 2.0 }, (1280, 720)));
    assert!(!one.is_empty() && one.len() == two.len(), "{} vs {} labels", one.len(), two.len());
    for (a, b) in one.iter().zip(&two) {
        assert!((b / a - 2.0).abs() < 1e-6, "label {a} px became {b} px at 2x");
    }
}

#[test]
fn empty_sweep_draws_a_message_not_a_panic() {
    let svg = svg_of(&BatchChart { points: &[], current: None, capacity: None }, Theme::default(), (640, 360));
    assert!(svg.contains("No batch size in range"));
}

#[test]
fn bands_stack_to_the_allocated_peak() {
    let points = resnet18_sweep();
    let bands = bands(&points);
    assert_eq!(bands.first().map(|b| b.category), Some(Category::Params));
    let top = bands.last().unwrap();
    for (p, &(x, _, hi)) in points.iter().zip(&top.edges) {
        assert_eq!(x, p.x as f64);
        assert!((hi - p.peak_allocated.gib()).abs() < 1e-9, "stack {hi} GiB ≠ peak {} at batch {}", p.peak_allocated.gib(), p.x);
    }
    for pair in bands.windows(2) {
        for (lower, upper) in pair[0].edges.iter().zip(&pair[1].edges) {
            assert_eq!(lower.2, upper.1, "bands do not touch");
        }
    }
}
