//! The charts drawn natively to SVG strings: what the page draws on its canvas, checked without
//! a browser.

use plotters::prelude::*;
use vram_planner::estimator::timeline::Category;
use vram_planner::estimator::units::Bytes;
use vram_planner::plan::estimate;
use vram_planner::plan::sweep::{log_points, sweep, Axis};
use vram_planner::plan::Plan;
use vram_planner::plots::batch::bands;
use vram_planner::plots::timeline::columns;
use vram_planner::plots::{
    draw_checkpoint_chart, draw_layers_chart, draw_stacked_chart, draw_timeline_chart,
    CheckpointChart, CkptPoint, LayersChart, Marker, PlotError, StackedChart, Theme, TimelineChart,
};

type Area<'a> = plotters::drawing::DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;

/// Runs a draw function on an SVG string.
#[track_caller]
fn svg_with(size: (u32, u32), draw: impl FnOnce(&Area) -> Result<(), PlotError>) -> String {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        draw(&root).expect("chart draws");
        root.present().expect("svg completes");
    }
    svg
}

/// Draws the batch chart to an SVG string.
#[track_caller]
fn svg_of(data: &StackedChart, theme: Theme, size: (u32, u32)) -> String {
    svg_with(size, |root| draw_stacked_chart(root, data, &theme))
}

fn batch_chart<'a>(
    points: &'a [vram_planner::plan::sweep::Point],
    current: Option<(u64, Bytes)>,
    capacity: Option<Bytes>,
) -> StackedChart<'a> {
    let mut c = StackedChart::new(points, "Batch size");
    c.current = current.map(|(x, y)| Marker {
        x,
        y,
        label: format!("batch {x}: {y}"),
    });
    c.capacity = capacity.map(|b| (b, format!("GPU capacity {b}")));
    c
}

fn resnet18_sweep() -> Vec<vram_planner::plan::sweep::Point> {
    sweep(
        &Plan::new("resnet18"),
        Axis::Batch,
        &log_points(1, 4096, 12),
    )
}

#[test]
fn batch_chart_has_axes_legend_and_marker() {
    let points = resnet18_sweep();
    assert!(points.len() >= 10, "sweep kept {} points", points.len());
    let plan = Plan {
        batch: 64,
        ..Plan::new("resnet18")
    };
    let peak = estimate(&plan).unwrap().peak_allocated;
    let svg = svg_of(
        &batch_chart(&points, Some((64, peak)), None),
        Theme::default(),
        (800, 450),
    );
    assert!(
        svg.starts_with("<svg"),
        "not an SVG: {}",
        &svg[..svg.len().min(80)]
    );
    for text in [
        "Batch size",
        "Allocated peak (GiB)",
        "Parameters",
        "Activations",
        "Gradients",
        "Optimizer state",
    ] {
        assert!(svg.contains(text), "missing {text:?}");
    }
    assert!(
        svg.contains(&format!("batch 64: {peak}")),
        "current batch is not labelled"
    );
    assert!(svg.contains("<polygon"), "no stacked bands");
    assert!(
        !svg.contains("GPU capacity"),
        "capacity drawn without a GPU"
    );
}

#[test]
fn capacity_line_when_a_gpu_is_chosen() {
    let points = resnet18_sweep();
    let svg = svg_of(
        &batch_chart(&points, None, Some(Bytes(24 << 30))),
        Theme::default(),
        (640, 360),
    );
    assert!(svg.contains("GPU capacity 24"), "no capacity label");
}

#[test]
fn moving_the_batch_changes_the_drawing() {
    let points = resnet18_sweep();
    let at = |b: u64| {
        let peak = estimate(&Plan {
            batch: b,
            ..Plan::new("resnet18")
        })
        .unwrap()
        .peak_allocated;
        svg_of(
            &batch_chart(&points, Some((b, peak)), None),
            Theme::default(),
            (640, 360),
        )
    };
    assert_ne!(at(8), at(512));
}

/// Font sizes used in an SVG, in order of appearance.
fn font_sizes(svg: &str) -> Vec<f64> {
    svg.split("font-size=\"")
        .skip(1)
        .filter_map(|s| s.split('"').next()?.parse().ok())
        .collect()
}

#[test]
fn high_dpi_scales_the_text() {
    let points = resnet18_sweep();
    let data = batch_chart(&points, None, None);
    let one = font_sizes(&svg_of(&data, Theme { scale: 1.0 }, (640, 360)));
    let two = font_sizes(&svg_of(&data, Theme { scale: 2.0 }, (1280, 720)));
    assert!(
        !one.is_empty() && one.len() == two.len(),
        "{} vs {} labels",
        one.len(),
        two.len()
    );
    for (a, b) in one.iter().zip(&two) {
        assert!(
            (b / a - 2.0).abs() < 1e-6,
            "label {a} px became {b} px at 2x"
        );
    }
}

#[test]
fn empty_sweep_draws_a_message_not_a_panic() {
    let svg = svg_of(&batch_chart(&[], None, None), Theme::default(), (640, 360));
    assert!(svg.contains("Nothing in range can be estimated"));
}

#[test]
fn bands_stack_to_the_allocated_peak() {
    let points = resnet18_sweep();
    let bands = bands(&points);
    assert_eq!(bands.first().map(|b| b.category), Some(Category::Params));
    let top = bands.last().unwrap();
    for (p, &(x, _, hi)) in points.iter().zip(&top.edges) {
        assert_eq!(x, p.x as f64);
        assert!(
            (hi - p.peak_allocated.gib()).abs() < 1e-9,
            "stack {hi} GiB ≠ peak {} at batch {}",
            p.peak_allocated.gib(),
            p.x
        );
    }
    for pair in bands.windows(2) {
        for (lower, upper) in pair[0].edges.iter().zip(&pair[1].edges) {
            assert_eq!(lower.2, upper.1, "bands do not touch");
        }
    }
}

#[test]
fn batch_chart_marks_the_largest_batch_and_the_device_total() {
    let points = resnet18_sweep();
    let mut c = batch_chart(&points, Some((64, Bytes(3 << 30))), Some(Bytes(24 << 30)));
    c.best = Some(Marker {
        x: 700,
        y: Bytes(20 << 30),
        label: "largest that fits: 700".into(),
    });
    c.device_label = Some("device total");
    let svg = svg_of(&c, Theme::default(), (800, 450));
    assert!(svg.contains("largest that fits: 700") && svg.contains("device total"));
    assert!(
        svg.contains("stroke-dasharray") || svg.matches("<polyline").count() > 2,
        "no dashed device line"
    );
}

fn ck(k: u64, gib: f64, extra: f64) -> CkptPoint {
    CkptPoint {
        k,
        peak: Bytes((gib * (1u64 << 30) as f64) as u64),
        activations: Bytes((gib * 0.6 * (1u64 << 30) as f64) as u64),
        extra_compute: extra,
    }
}

#[test]
fn checkpoint_chart_has_two_axes_and_marks() {
    let points: Vec<CkptPoint> = (1..=12)
        .map(|k| ck(k, 10.0 - k as f64 * 0.4, if k == 1 { 0.0 } else { 0.3 }))
        .collect();
    let mut c = CheckpointChart::new(&points);
    c.sqrt_k = Some(3);
    c.block = Some(ck(12, 4.0, 0.33));
    c.current = Some(points[2]);
    c.saving = "√N segments: −1.2 GiB".into();
    let svg = svg_with((800, 450), |a| {
        draw_checkpoint_chart(a, &c, &Theme::default())
    });
    for t in [
        "Checkpoint segments k",
        "Extra compute (%)",
        "√N = 3",
        "every block",
        "current",
        "√N segments: −1.2 GiB",
        "Activation memory",
    ] {
        assert!(svg.contains(t), "missing {t:?}");
    }
    let empty = svg_with((640, 360), |a| {
        draw_checkpoint_chart(a, &CheckpointChart::new(&[]), &Theme::default())
    });
    assert!(empty.contains("no checkpointing"));
}

#[test]
fn timeline_chart_shades_the_phases_and_marks_the_peak() {
    use vram_planner::estimator::timeline::Phase;
    let e = estimate(&Plan {
        batch: 16,
        ..Plan::new("resnet18")
    })
    .unwrap();
    let events: Vec<(Phase, [u64; Category::COUNT])> = e
        .timeline
        .events
        .iter()
        .map(|ev| (ev.phase, ev.live.0))
        .collect();
    let cols = columns(events, 300);
    let peak: u64 = cols.live[cols.peak].iter().sum();
    assert!(
        peak.abs_diff(e.peak_allocated.0) == 0,
        "the columns lost the peak"
    );
    let mut c = TimelineChart::new(&cols);
    c.peak_label = format!("peak {}", e.peak_allocated);
    c.capacity = Some((Bytes(e.peak_allocated.0 * 3 / 2), "GPU capacity".into()));
    let svg = svg_with((800, 450), |a| {
        draw_timeline_chart(a, &c, &Theme::default())
    });
    for t in [
        "forward",
        "backward",
        "Live memory (GiB)",
        "Activations",
        "Gradients",
        "GPU capacity",
        &format!("peak {}", e.peak_allocated),
    ] {
        assert!(svg.contains(t), "missing {t:?}");
    }
    // A capacity far above the step would flatten it: then it is left out.
    c.capacity = Some((Bytes(e.peak_allocated.0 * 10), "GPU capacity".into()));
    let far = svg_with((800, 450), |a| {
        draw_timeline_chart(a, &c, &Theme::default())
    });
    assert!(!far.contains("GPU capacity"));
}

#[test]
fn layers_chart_has_a_bar_per_module() {
    let e = estimate(&Plan {
        batch: 16,
        ..Plan::new("resnet18")
    })
    .unwrap();
    let layers: Vec<(String, Bytes)> = e
        .layers
        .iter()
        .map(|l| (l.layer.clone(), l.bytes))
        .collect();
    assert!(layers.len() >= 5);
    let mut c = LayersChart::new(&layers);
    c.max_label = "largest".into();
    let svg = svg_with((800, 450), |a| draw_layers_chart(a, &c, &Theme::default()));
    assert!(
        svg.matches("<rect").count() >= layers.len(),
        "fewer bars than layers"
    );
    assert!(svg.contains("Saved activations (GiB)") && svg.contains("largest"));
}
