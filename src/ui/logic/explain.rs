//! The breakdown table: each row's bytes at the peak, with the formula that gives them and the
//! plan's numbers substituted ("25.6 M params × 4 B = 97.5 MiB"). Static memory (parameters,
//! gradients, optimizer state) follows from the parameter count and dtypes; what scales with
//! the batch is shown as `batch × per sample`, the per-sample figure being the slope of the
//! category at the peak (two simulations, [`super::workbench::BatchModel`]); the device-level rows
//! follow `estimator::device`.

use crate::estimator::config::{OptimizerImpl, OptimizerKind};
use crate::estimator::context::ModuleLoading;
use crate::estimator::hardware::DEFAULT_SM;
use crate::estimator::timeline::Category;
use crate::estimator::units::Bytes;
use crate::plan::Plan;
use crate::presets::gpus::Gpu;

use super::i18n::formulas::Formula;
use super::i18n::{category_label, fmt_bytes, fmt_count, phase_label, Lang, Msg, Units};
use super::workbench::Numbers;

use super::breakdown::Row;

/// `batch × per-sample [+ fixed] = total` for a category that grows with the batch.
fn scaled(n: &Numbers, c: Category, units: Units, lang: Lang) -> String {
    let (fixed, slope) = n.per_sample[c.index()];
    let total = n.category(c);
    if slope <= 0.5 {
        let total = fmt_bytes(total, units);
        return Formula::Unscaled { total: &total }.text(lang);
    }
    let per = fmt_bytes(Bytes(slope.round() as u64), units);
    let head = Formula::Samples {
        batch: n.batch,
        per: &per,
    }
    .text(lang);
    if fixed.abs() >= 0.01 * total.0.max(1) as f64 && fixed.abs() >= 1024.0 {
        let sign = if fixed < 0.0 { "−" } else { "+" };
        format!(
            "{head} {sign} {} = {}",
            fmt_bytes(Bytes(fixed.abs().round() as u64), units),
            fmt_bytes(total, units)
        )
    } else {
        format!("{head} = {}", fmt_bytes(total, units))
    }
}

/// Bytes per parameter as written in a formula ("4 B", "2 B").
fn per_param(n: &Numbers) -> Option<u64> {
    (n.param_count > 0 && n.param_bytes.0.is_multiple_of(n.param_count))
        .then(|| n.param_bytes.0 / n.param_count)
}

/// The breakdown rows, subtotals included, in the order the memory stacks up.
pub fn rows(n: &Numbers, plan: &Plan, gpu: Option<&Gpu>, lang: Lang, units: Units) -> Vec<Row> {
    let b = |x: Bytes| fmt_bytes(x, units);
    let count = fmt_count(n.param_count, lang);
    let mut out = Vec::new();
    let mut push = |key, label: String, bytes, formula: String, total| {
        out.push(Row {
            key,
            label,
            bytes,
            formula,
            total,
        })
    };

    let bpp = per_param(n);
    let params_formula = Formula::Params {
        count: &count,
        bytes_each: bpp,
        total: &b(n.param_bytes),
    }
    .text(lang);
    push(
        "params",
        category_label(Category::Params, lang).into(),
        n.category(Category::Params),
        params_formula,
        false,
    );

    let buffers = n.category(Category::Buffers);
    if buffers.0 > 0 {
        let f = Formula::Buffers { total: &b(buffers) }.text(lang);
        push(
            "buffers",
            category_label(Category::Buffers, lang).into(),
            buffers,
            f,
            false,
        );
    }
    push(
        "inputs",
        category_label(Category::Inputs, lang).into(),
        n.category(Category::Inputs),
        scaled(n, Category::Inputs, units, lang),
        false,
    );
    let saved = scaled(n, Category::Activations, units, lang);
    let act = Formula::SavedForBackward { scaled: &saved }.text(lang);
    push(
        "activations",
        category_label(Category::Activations, lang).into(),
        n.category(Category::Activations),
        act,
        false,
    );
    let bt = Formula::BackwardTemps {
        scaled: &scaled(n, Category::BackwardTemps, units, lang),
    }
    .text(lang);
    push(
        "backward_temps",
        category_label(Category::BackwardTemps, lang).into(),
        n.category(Category::BackwardTemps),
        bt,
        false,
    );

    let grads = n.category(Category::Gradients);
    let grad_bytes = b(n.grad_bytes);
    let full = match bpp {
        Some(k) if n.grad_bytes == n.param_bytes => Formula::Grads {
            count: &count,
            bytes_each: k,
            total: &grad_bytes,
        },
        _ => Formula::GradsPerTrainable { total: &grad_bytes },
    }
    .text(lang);
    let gf = if grads.0 as f64 >= 0.99 * n.grad_bytes.0 as f64 {
        full
    } else {
        Formula::GradsLive {
            full: &full,
            live: &b(grads),
            phase: phase_label(n.phase, lang),
        }
        .text(lang)
    };
    push(
        "gradients",
        category_label(Category::Gradients, lang).into(),
        grads,
        gf,
        false,
    );

    let states = plan.opt.states_per_param();
    let state_bytes = b(n.opt_state_bytes);
    let of = match (plan.opt, bpp) {
        (OptimizerKind::Sgd, _) => Formula::PlainSgdState,
        (OptimizerKind::Adafactor, _) => Formula::FactoredStates {
            total: &state_bytes,
        },
        (o, Some(k)) => Formula::OptimizerStates {
            states,
            names: if o == OptimizerKind::SgdMomentum {
                "momentum_buffer"
            } else {
                "exp_avg, exp_avg_sq"
            },
            count: &count,
            bytes_each: k,
            total: &state_bytes,
        },
        (_, None) => Formula::StatesPerParam {
            states,
            total: &state_bytes,
        },
    }
    .text(lang);
    push(
        "optimizer_state",
        category_label(Category::OptimizerState, lang).into(),
        n.category(Category::OptimizerState),
        of,
        false,
    );

    let temps = plan.opt.step_temporaries(plan.optimizer_impl());
    let ot = n.category(Category::OptimizerTemps);
    let (ot_text, temporary) = (b(ot), b(n.grad_bytes));
    let otf = match (temps, plan.optimizer_impl()) {
        _ if plan.opt == OptimizerKind::Adafactor => Formula::AdafactorStep { peak: &ot_text },
        (0, OptimizerImpl::Fused) => Formula::FusedStep { total: &ot_text },
        (0, _) => Formula::NoTemporaries { total: &ot_text },
        (_, _) => Formula::ForeachStep {
            temporary: &temporary,
            peak: &ot_text,
        },
    }
    .text(lang);
    push(
        "optimizer_temps",
        category_label(Category::OptimizerTemps, lang).into(),
        ot,
        otf,
        false,
    );

    let kv = n.category(Category::KvCache);
    if kv.0 > 0 {
        let kv_text = scaled(n, Category::KvCache, units, lang);
        let f = Formula::KvCache { scaled: &kv_text }.text(lang);
        push(
            "kv_cache",
            category_label(Category::KvCache, lang).into(),
            kv,
            f,
            false,
        );
    }

    let pf = Formula::PeakSum {
        phase: phase_label(n.phase, lang),
        op: n.peak_op.as_deref(),
    }
    .text(lang);
    push("allocated_peak", Msg::Peak.t(lang).into(), n.peak, pf, true);

    let cache = n
        .reserved
        .saturating_sub(n.peak)
        .saturating_sub(n.workspaces);
    push(
        "allocator_cache",
        Msg::AllocatorCache.t(lang).into(),
        cache,
        Formula::AllocatorCache.text(lang),
        false,
    );
    let sm = gpu.map_or(DEFAULT_SM, |g| g.sm);
    let wf = if sm == 0 {
        Formula::NoCublas.text(lang)
    } else {
        Formula::Cublas {
            sm_90: sm >= 90,
            total: &b(n.workspaces),
        }
        .text(lang)
    };
    push(
        "workspaces",
        Msg::Workspaces.t(lang).into(),
        n.workspaces,
        wf,
        false,
    );
    push(
        "reserved",
        Msg::Reserved.t(lang).into(),
        n.reserved,
        Formula::Reserved.text(lang),
        true,
    );
    let name = gpu.map(|g| g.name).unwrap_or("GPU");
    let stack = plan.stack();
    push(
        "context",
        Msg::CudaContext.t(lang).into(),
        n.context,
        Formula::Context {
            gpu: name,
            cuda: &stack.cuda().to_string(),
            eager: stack.loading() == ModuleLoading::Eager,
        }
        .text(lang),
        false,
    );
    push(
        "device_total",
        Msg::DeviceTotal.t(lang).into(),
        n.device_total,
        Formula::DeviceTotal.text(lang),
        true,
    );
    // A mixture of experts' parts, from a full simulation: what the rows above hold of them.
    if let Some(m) = &n.moe {
        for (key, label, w, s) in [
            (
                "moe_experts",
                Msg::MoeExperts,
                m.expert_weights,
                m.expert_saved,
            ),
            (
                "moe_router",
                Msg::MoeRouter,
                m.router_weights,
                m.router_saved,
            ),
            (
                "moe_dispatch",
                Msg::MoeDispatch,
                Bytes::ZERO,
                m.dispatch_saved,
            ),
            (
                "moe_shared",
                Msg::MoeShared,
                m.shared_expert_weights,
                m.shared_expert_saved,
            ),
        ] {
            if w.0 > 0 || s.0 > 0 {
                let f = Formula::MoePart {
                    weights: &b(w),
                    saved: &b(s),
                }
                .text(lang);
                push(key, label.t(lang).into(), w + s, f, false);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::estimator::config::Precision;
    use crate::plan::estimate;
    use crate::presets::gpus;
    use crate::ui::logic::workbench::BatchModel;

    fn numbers(plan: &Plan) -> Numbers {
        let gpu = crate::ui::logic::state::gpu_of(plan);
        BatchModel::new(plan).unwrap().at(plan.batch, gpu.as_ref())
    }

    #[test]
    fn a_mixture_of_experts_shows_its_parts_once_simulated() {
        let mut plan = Plan::new("custom");
        plan.hf_config = Some(serde_json::json!({
            "model_type": "qwen2_moe", "hidden_size": 64, "intermediate_size": 128,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
            "vocab_size": 256, "num_experts": 8, "num_experts_per_tok": 2,
            "moe_intermediate_size": 64, "shared_expert_intermediate_size": 128}));
        plan.seq = Some(32);
        let interpolated = numbers(&plan);
        let keys = |n: &Numbers| -> Vec<&'static str> {
            rows(n, &plan, None, Lang::En, Units::Binary)
                .iter()
                .map(|r| r.key)
                .filter(|k| k.starts_with("moe_"))
                .collect()
        };
        assert!(keys(&interpolated).is_empty());
        let e = estimate(&plan).unwrap();
        let m = e.moe.clone().unwrap();
        // 2 layers × 8 experts × 3 × 64 × 64 fp32 weights; the router 8 × 64 per layer.
        assert_eq!(m.expert_weights, Bytes(2 * 8 * 3 * 64 * 64 * 4));
        assert_eq!(m.router_weights, Bytes(2 * 8 * 64 * 4));
        // The shared expert (3 × 64 × 128) and its gate (64) per layer.
        assert_eq!(m.shared_expert_weights, Bytes(2 * (3 * 64 * 128 + 64) * 4));
        assert!(m.expert_saved.0 > 0 && m.router_saved.0 > 0 && m.dispatch_saved.0 > 0);
        let exact = interpolated.clone().with_exact(&e);
        assert_eq!(
            keys(&exact),
            ["moe_experts", "moe_router", "moe_dispatch", "moe_shared"]
        );
        let all = rows(&exact, &plan, None, Lang::En, Units::Binary);
        let experts = all.iter().find(|r| r.key == "moe_experts").unwrap();
        assert_eq!(experts.bytes, m.expert_weights + m.expert_saved);
        assert_eq!(experts.label, "MoE: routed experts");
        let weights = fmt_bytes(m.expert_weights, Units::Binary);
        assert!(experts.formula.starts_with(&format!("weights {weights}")));
        let dispatch = all.iter().find(|r| r.key == "moe_dispatch").unwrap();
        assert_eq!(dispatch.bytes, m.dispatch_saved);
        let dense = Plan::new("gpt2");
        assert!(estimate(&dense).unwrap().moe.is_none());
    }

    #[test]
    fn resnet50_formulas_show_count_times_bytes() {
        let plan = Plan {
            batch: 32,
            gpu: Some("a100-80".into()),
            ..Plan::new("resnet50")
        };
        let rows = rows(
            &numbers(&plan),
            &plan,
            gpus::find("a100-80").as_ref(),
            Lang::En,
            Units::Binary,
        );
        let p = rows.iter().find(|r| r.key == "params").unwrap();
        assert_eq!(p.formula, "25.6 M params × 4 B = 97.5 MiB");
        let o = rows.iter().find(|r| r.key == "optimizer_state").unwrap();
        assert_eq!(
            o.formula,
            "2 states (exp_avg, exp_avg_sq) × 25.6 M × 4 B = 195.0 MiB"
        );
        let a = rows.iter().find(|r| r.key == "activations").unwrap();
        assert!(
            a.formula.starts_with("saved for backward: 32 samples × "),
            "{}",
            a.formula
        );
        assert!(a.formula.ends_with(&a.bytes.to_string()), "{}", a.formula);
        let w = rows.iter().find(|r| r.key == "workspaces").unwrap();
        assert!(
            w.formula.contains("2 × 4 MiB + 8 × 16 KiB) = 8.12 MiB"),
            "{}",
            w.formula
        );
    }

    #[test]
    fn rows_add_up_to_the_estimate() {
        for plan in [
            Plan {
                batch: 16,
                gpu: Some("h100-80".into()),
                ..Plan::new("resnet18")
            },
            Plan {
                batch: 4,
                seq: Some(512),
                dtype: Precision::AmpBf16,
                gpu: Some("rtx4090".into()),
                ..Plan::new("gpt2")
            },
            Plan {
                batch: 2,
                opt: OptimizerKind::Sgd,
                gpu: Some("t4".into()),
                ..Plan::new("vit_b_16")
            },
        ] {
            let n = numbers(&plan);
            let e = estimate(&plan).unwrap();
            let n = n.with_exact(&e);
            let rows = rows(
                &n,
                &plan,
                crate::ui::logic::state::gpu_of(&plan).as_ref(),
                Lang::En,
                Units::Binary,
            );
            let sum = |keys: &[&str]| {
                rows.iter()
                    .filter(|r| keys.contains(&r.key))
                    .map(|r| r.bytes)
                    .sum::<Bytes>()
            };
            let cats = [
                "params",
                "buffers",
                "inputs",
                "activations",
                "backward_temps",
                "gradients",
                "optimizer_state",
                "optimizer_temps",
            ];
            assert_eq!(sum(&cats), e.peak_allocated, "{}", plan.model);
            assert_eq!(
                sum(&["allocated_peak", "allocator_cache", "workspaces"]),
                e.reserved,
                "{}",
                plan.model
            );
            assert_eq!(
                sum(&["reserved", "context"]),
                e.device_total,
                "{}",
                plan.model
            );
            assert!(
                rows.iter()
                    .find(|r| r.key == "allocated_peak")
                    .unwrap()
                    .formula
                    .contains(" at "),
                "exact numbers name the peak op"
            );
        }
    }

    #[test]
    fn chinese_and_decimal_units() {
        let plan = Plan {
            batch: 8,
            opt: OptimizerKind::Sgd,
            ..Plan::new("resnet18")
        };
        let rows = rows(&numbers(&plan), &plan, None, Lang::Zh, Units::Decimal);
        let p = rows.iter().find(|r| r.key == "params").unwrap();
        assert_eq!(p.label, "参数");
        assert!(
            p.formula.contains("个参数 × 4 B = 46.8 MB"),
            "{}",
            p.formula
        );
        assert!(rows
            .iter()
            .any(|r| r.formula.contains("普通 SGD 不保存状态")));
    }
}
