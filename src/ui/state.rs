//! The page's logic as plain functions on the [`Plan`], so it is tested natively and the
//! components stay thin: slider scales, parsing what the user typed, the texts shown and the
//! chart's data. Nothing here knows about Leptos or the DOM.

use crate::estimator::config::Plan;
use crate::estimator::error::EstimateError;
use crate::estimator::sweep::{log_points, Point};
use crate::estimator::Estimate;
use crate::plots::BatchChart;
use crate::presets::models::MODELS;

/// The batch slider's range (issue #4: log scale from 1 to 4096).
pub const BATCH_MIN: u64 = 1;
pub const BATCH_MAX: u64 = 4096;
/// Slider positions per doubling of the batch: fine enough that every batch up to 100 has its
/// own position.
pub const STEPS_PER_OCTAVE: u32 = 100;
/// Sweep points of the batch chart.
pub const CHART_POINTS: usize = 32;

/// The slider's largest position (`BATCH_MAX` = 2¹²).
pub fn slider_max() -> u32 {
    batch_to_slider(BATCH_MAX)
}

/// Slider position of a batch, clamped to the slider's range.
pub fn batch_to_slider(batch: u64) -> u32 {
    let b = batch.clamp(BATCH_MIN, BATCH_MAX) as f64;
    (b.log2() * STEPS_PER_OCTAVE as f64).round() as u32
}

/// The batch at a slider position: 2^(pos / steps), rounded to an integer.
pub fn slider_to_batch(pos: u32) -> u64 {
    let b = (pos as f64 / STEPS_PER_OCTAVE as f64).exp2().round() as u64;
    b.clamp(BATCH_MIN, BATCH_MAX)
}

/// Reads a slider's value (`"734"`); `None` when it is not a position.
pub fn parse_slider(s: &str) -> Option<u64> {
    s.trim().parse::<f64>().ok().filter(|p| p.is_finite() && *p >= 0.0).map(|p| slider_to_batch(p.round() as u32))
}

/// Reads the batch number box. Any whole number is taken, even 0 or one above the slider's range:
/// the estimator judges it and the page shows its message.
pub fn parse_batch(s: &str) -> Option<u64> {
    s.trim().parse::<u64>().ok()
}

/// The plan the page opens with: the core's default plan when its model is a preset, otherwise the
/// first preset.
pub fn initial_plan() -> Plan {
    let plan = Plan::default();
    if MODELS.iter().any(|m| m.id == plan.model) {
        return plan;
    }
    Plan { model: MODELS.first().map_or(plan.model.clone(), |m| m.id.to_string()), ..plan }
}

/// Options of the model picker: (id, display name), in catalogue order.
pub fn model_options() -> Vec<(&'static str, &'static str)> {
    MODELS.iter().map(|m| (m.id, m.name)).collect()
}

/// Selects a model. Settings that belonged to the previous model's input (resolution, sequence
/// length) go back to the new model's defaults.
pub fn set_model(plan: &mut Plan, id: &str) {
    if plan.model != id {
        plan.model = id.to_string();
        plan.res = None;
        plan.seq = None;
    }
}

/// What the batch chart's sweep depends on: the plan with the batch left out, so moving the
/// batch slider only moves the marker and never reruns the sweep.
pub fn sweep_base(plan: &Plan) -> Plan {
    Plan { batch: 1, ..plan.clone() }
}

/// Batch sizes swept for the chart.
pub fn chart_batches() -> Vec<u64> {
    log_points(BATCH_MIN, BATCH_MAX, CHART_POINTS)
}

/// The allocated-peak line, or `None` when the plan cannot be estimated.
pub fn peak_text(est: &Result<Estimate, EstimateError>) -> Option<String> {
    est.as_ref().ok().map(|e| format!("Allocated peak: {}", e.peak_allocated))
}

/// A second line putting the peak in context: parameter count and the phase of the peak.
pub fn detail_text(est: &Result<Estimate, EstimateError>) -> Option<String> {
    est.as_ref().ok().map(|e| format!("{} parameters · peak during {}", params_text(e.param_count), e.peak_phase.key().replace('_', " ")))
}

/// The estimator's message for a plan it refuses.
pub fn error_text(est: &Result<Estimate, EstimateError>) -> Option<String> {
    est.as_ref().err().map(|e| format!("Cannot estimate this plan: {e}"))
}

/// A parameter count in decimal units ("25.6 M").
pub fn params_text(n: u64) -> String {
    match n {
        0..1_000 => n.to_string(),
        1_000..1_000_000 => format!("{:.1} K", n as f64 / 1e3),
        1_000_000..1_000_000_000 => format!("{:.1} M", n as f64 / 1e6),
        _ => format!("{:.2} B", n as f64 / 1e9),
    }
}

/// The batch chart's data: the sweep, with the current batch marked when it can be estimated.
pub fn batch_chart<'a>(points: &'a [Point], plan: &Plan, est: &Result<Estimate, EstimateError>) -> BatchChart<'a> {
    BatchChart {
        points,
        current: est.as_ref().ok().map(|e| (plan.batch, e.peak_allocated)),
        capacity: plan.gpu.as_deref().and_then(crate::presets::gpus::find).map(|g| g.memory),
    }
}

/// Backing-store size of a canvas shown at `css` pixels on a screen with `ratio` device pixels per
/// CSS pixel, so charts stay sharp on high-DPI screens.
pub fn backing_size(css: (f64, f64), ratio: f64) -> (u32, u32) {
    let r = if ratio.is_finite() && ratio > 0.0 { ratio.min(4.0) } else { 1.0 };
    let px = |v: f64| (v.max(1.0) * r).round() as u32;
    (px(css.0), px(css.1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::estimator::estimate;

    #[test]
    fn slider_covers_1_to_4096_on_a_log_scale() {
        assert_eq!(slider_to_batch(0), 1);
        assert_eq!(slider_to_batch(slider_max()), 4096);
        assert_eq!(batch_to_slider(64), 600);
        for b in [1, 2, 3, 7, 32, 100, 1000, 4096] {
            let back = slider_to_batch(batch_to_slider(b));
            assert!(back.abs_diff(b) * 100 <= b, "batch {b} came back as {back}");
        }
        assert_eq!(batch_to_slider(0), 0);
        assert_eq!(batch_to_slider(1 << 20), slider_max());
    }

    #[test]
    fn every_batch_up_to_100_has_a_slider_position() {
        for b in 1..=100 {
            assert_eq!(slider_to_batch(batch_to_slider(b)), b);
        }
    }

    #[test]
    fn parsing_ignores_junk_and_keeps_what_the_estimator_judges() {
        assert_eq!(parse_batch(" 48 "), Some(48));
        assert_eq!(parse_batch("0"), Some(0));
        assert_eq!(parse_batch("abc"), None);
        assert_eq!(parse_batch("-3"), None);
        assert_eq!(parse_slider("600"), Some(64));
        assert_eq!(parse_slider("x"), None);
    }

    #[test]
    fn texts_follow_the_estimate() {
        let mut plan = initial_plan();
        let ok = estimate(&plan);
        assert!(peak_text(&ok).unwrap().starts_with("Allocated peak: "));
        assert!(error_text(&ok).is_none());
        plan.batch = 0;
        let err = estimate(&plan);
        assert!(peak_text(&err).is_none());
        assert!(error_text(&err).unwrap().contains("batch"));
    }

    #[test]
    fn sweep_base_ignores_the_batch() {
        let mut a = initial_plan();
        let b = Plan { batch: 999, ..a.clone() };
        assert_eq!(sweep_base(&a), sweep_base(&b));
        a.model = "other".into();
        assert_ne!(sweep_base(&a), sweep_base(&b));
    }

    #[test]
    fn changing_model_resets_its_input_size() {
        let mut p = Plan { res: Some(512), ..initial_plan() };
        let same = p.model.clone();
        set_model(&mut p, &same);
        assert_eq!(p.res, Some(512));
        set_model(&mut p, "resnet18");
        assert_eq!((p.model.as_str(), p.res), ("resnet18", None));
    }

    #[test]
    fn initial_plan_is_a_preset() {
        assert!(model_options().iter().any(|(id, _)| *id == initial_plan().model));
    }

    #[test]
    fn backing_store_scales_with_the_pixel_ratio() {
        assert_eq!(backing_size((640.0, 360.0), 2.0), (1280, 720));
        assert_eq!(backing_size((640.0, 360.0), f64::NAN), (640, 360));
        assert_eq!(backing_size((0.0, 0.0), 1.0), (1, 1));
    }

    #[test]
    fn params_in_decimal_units() {
        assert_eq!(params_text(25_557_032), "25.6 M");
        assert_eq!(params_text(7_000_000_000), "7.00 B");
        assert_eq!(params_text(999), "999");
    }
}
