//! The comparison view's logic, as plain functions tested natively: the configurations it opens
//! with and its table (one row per quantity, one column per configuration), with texts in the
//! page's language and sizes in its units. Every number comes from the estimator
//! ([`crate::plan::fit::compare`]).

use crate::estimator::config::Mode;
use crate::estimator::decimal::Fixed;
use crate::estimator::timeline::Category;
use crate::estimator::units::Bytes;
use crate::estimator::Estimate;
use crate::plan::Plan;
use crate::plan::PlanError;
use crate::presets::models;

use super::i18n::comparison;
use super::i18n::{fmt_bytes, fmt_count, Lang, Msg, Units};
use super::mode::MODE_OPTIONS;

fn mode_label(mode: Mode, lang: Lang) -> &'static str {
    MODE_OPTIONS
        .iter()
        .find(|o| o.0 == mode.key())
        .map_or(mode.key(), |o| o.1.t(lang))
}

/// The comparison table: one row per quantity, one column per configuration. Columns whose plan
/// the estimator refuses show "–" and their message in the last row.
pub fn compare_rows(
    plans: &[Plan],
    results: &[Result<Estimate, PlanError>],
    lang: Lang,
    units: Units,
) -> Vec<(&'static str, Vec<String>)> {
    let col = |f: &dyn Fn(&Estimate) -> String| {
        results
            .iter()
            .map(|r| r.as_ref().map_or_else(|_| "–".to_string(), f))
            .collect::<Vec<_>>()
    };
    let act =
        |e: &Estimate| e.category(Category::Activations).0 + e.category(Category::BackwardTemps).0;
    let b = |x: Bytes| fmt_bytes(x, units);
    let mode_batch = |p: &Plan| comparison::mode_batch(mode_label(p.mode, lang), p.batch, lang);
    let mut rows = vec![
        (
            Msg::Model.t(lang),
            plans
                .iter()
                .map(|p| models::find(&p.model).map_or(p.model.clone(), |m| m.name.to_string()))
                .collect(),
        ),
        (
            Msg::ModeBatch.t(lang),
            plans.iter().map(mode_batch).collect(),
        ),
        (
            Msg::Parameters.t(lang),
            col(&|e| fmt_count(e.param_count, lang)),
        ),
        (
            Msg::Trainable.t(lang),
            col(&|e| fmt_count(e.trainable_params, lang)),
        ),
        (Msg::Weights.t(lang), col(&|e| b(e.weights_bytes))),
        (Msg::ActivationsAtPeak.t(lang), col(&|e| b(Bytes(act(e))))),
        (
            Msg::ActivationsPerByte.t(lang),
            col(&|e| {
                if e.weights_bytes.0 == 0 {
                    "–".into()
                } else {
                    Fixed(act(e) as f64 / e.weights_bytes.0 as f64, 2).to_string()
                }
            }),
        ),
        (Msg::KvCache.t(lang), col(&|e| b(e.kv_cache_bytes))),
        (Msg::Peak.t(lang), col(&|e| b(e.peak_allocated))),
        (Msg::DeviceTotal.t(lang), col(&|e| b(e.device_total))),
    ];
    if results.iter().any(|r| r.is_err()) {
        rows.push((
            Msg::MessageRow.t(lang),
            results
                .iter()
                .map(|r| r.as_ref().err().map(|e| e.to_string()).unwrap_or_default())
                .collect(),
        ));
    }
    rows
}

/// The two configurations the comparison view opens with (depthwise-separable against
/// standard convolutions): MobileNetV2 and ResNet-50 with the current plan's other settings.
pub fn compare_defaults(plan: &Plan) -> Vec<Plan> {
    let base = Plan {
        res: None,
        seq: None,
        ..plan.clone()
    };
    ["mobilenet_v2", "resnet50"]
        .iter()
        .map(|m| Plan {
            model: (*m).into(),
            ..base.clone()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::fit;

    #[test]
    fn comparing_mobilenet_and_resnet() {
        let plans = compare_defaults(&Plan::default());
        let results = fit::compare(&plans);
        let rows = compare_rows(&plans, &results, Lang::En, Units::Binary);
        let row = |l: &str| rows.iter().find(|r| r.0 == l).unwrap().1.clone();
        assert_eq!(row("Model"), vec!["MobileNetV2", "ResNet-50"]);
        assert_eq!(row("Parameters"), vec!["3.5 M", "25.6 M"]);
        assert_eq!(
            row("Mode, batch"),
            vec!["Train, batch 32", "Train, batch 32"]
        );
        assert!(row("Weights").iter().all(|w| w.ends_with("MiB")));
        let zh = compare_rows(&plans, &results, Lang::Zh, Units::Decimal);
        let zrow = |l: &str| {
            zh.iter()
                .find(|r| r.0 == l)
                .unwrap_or_else(|| panic!("no row {l}: {zh:?}"))
                .1
                .clone()
        };
        assert_eq!(zrow("模型"), vec!["MobileNetV2", "ResNet-50"]);
        assert_eq!(zrow("参数"), vec!["350.5 万", "2555.7 万"]);
        assert_eq!(zrow("模式、批大小")[0], "训练，批大小 32");
        assert_eq!(zrow("权重"), vec!["14.0 MB", "102 MB"]);
        assert!(
            zrow("已分配峰值").iter().all(|w| w.ends_with(" GB")),
            "{zh:?}"
        );
        // Depthwise-separable convolutions: far fewer weights, not proportionally fewer activations.
        let e: Vec<&Estimate> = results.iter().map(|r| r.as_ref().unwrap()).collect();
        let ratio_w = e[1].weights_bytes.0 as f64 / e[0].weights_bytes.0 as f64;
        let ratio_a = e[1].category(Category::Activations).0 as f64
            / e[0].category(Category::Activations).0 as f64;
        assert!(
            ratio_w > 5.0 && ratio_a < ratio_w,
            "weights ×{ratio_w:.1}, activations ×{ratio_a:.1}"
        );
        let bad = vec![Plan {
            batch: 0,
            ..Plan::default()
        }];
        let rows = compare_rows(&bad, &fit::compare(&bad), Lang::En, Units::Binary);
        assert!(rows.last().unwrap().1[0].contains("batch"));
    }
}
