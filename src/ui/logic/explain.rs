//! The breakdown table: each row's bytes at the peak, with the formula that gives them and the
//! plan's numbers substituted ("25.6 M params × 4 B = 97.5 MiB"). Static memory (parameters,
//! gradients, optimizer state) follows from the parameter count and dtypes; what scales with
//! the batch is shown as `batch × per sample`, the per-sample figure being the slope of the
//! category at the peak (two simulations, [`super::workbench::BatchModel`]); the device-level rows
//! follow `estimator::device`.

use crate::estimator::config::{OptimizerImpl, OptimizerKind, Plan};
use crate::estimator::device::cublas_workspaces;
use crate::estimator::timeline::Category;
use crate::estimator::units::Bytes;
use crate::presets::gpus::Gpu;

use super::i18n::{category_label, fmt_bytes, fmt_count, phase_label, Lang, Msg, Units};
use super::workbench::Numbers;

use super::breakdown::Row;

fn tr(lang: Lang, en: String, zh: String) -> String {
    match lang {
        Lang::En => en,
        Lang::Zh => zh,
    }
}

/// `batch × per-sample [+ fixed] = total` for a category that grows with the batch.
fn scaled(n: &Numbers, c: Category, units: Units, lang: Lang) -> String {
    let (fixed, slope) = n.per_sample[c.index()];
    let total = n.category(c);
    if slope <= 0.5 {
        return tr(
            lang,
            format!("does not grow with the batch = {}", fmt_bytes(total, units)),
            format!("不随批大小变化 = {}", fmt_bytes(total, units)),
        );
    }
    let per = fmt_bytes(Bytes(slope.round() as u64), units);
    let head = tr(
        lang,
        format!("{} samples × {per}", n.batch),
        format!("{} 个样本 × {per}", n.batch),
    );
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
    let params_formula = match bpp {
        Some(k) => tr(
            lang,
            format!("{count} params × {k} B = {}", b(n.param_bytes)),
            format!("{count} 个参数 × {k} B = {}", b(n.param_bytes)),
        ),
        None => tr(
            lang,
            format!("{count} params = {}", b(n.param_bytes)),
            format!("{count} 个参数 = {}", b(n.param_bytes)),
        ),
    };
    push(
        "params",
        category_label(Category::Params, lang).into(),
        n.category(Category::Params),
        params_formula,
        false,
    );

    let buffers = n.category(Category::Buffers);
    if buffers.0 > 0 {
        let f = tr(
            lang,
            format!(
                "running statistics of normalisation layers and other buffers = {}",
                b(buffers)
            ),
            format!("归一化层的运行统计量等缓冲区 = {}", b(buffers)),
        );
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
    let act = tr(
        lang,
        format!("saved for backward: {saved}"),
        format!("为反向保存：{saved}"),
    );
    push(
        "activations",
        category_label(Category::Activations, lang).into(),
        n.category(Category::Activations),
        act,
        false,
    );
    let bt = tr(
        lang,
        format!(
            "activation gradients and recomputed segments: {}",
            scaled(n, Category::BackwardTemps, units, lang)
        ),
        format!(
            "激活梯度与重计算的段：{}",
            scaled(n, Category::BackwardTemps, units, lang)
        ),
    );
    push(
        "backward_temps",
        category_label(Category::BackwardTemps, lang).into(),
        n.category(Category::BackwardTemps),
        bt,
        false,
    );

    let grads = n.category(Category::Gradients);
    let full = match bpp {
        Some(k) if n.grad_bytes == n.param_bytes => tr(
            lang,
            format!("{count} grads × {k} B = {}", b(n.grad_bytes)),
            format!("{count} 个梯度 × {k} B = {}", b(n.grad_bytes)),
        ),
        _ => tr(
            lang,
            format!("one per trainable parameter = {}", b(n.grad_bytes)),
            format!("每个可训练参数一个 = {}", b(n.grad_bytes)),
        ),
    };
    let gf = if grads.0 as f64 >= 0.99 * n.grad_bytes.0 as f64 {
        full
    } else {
        let ph = phase_label(n.phase, lang);
        tr(
            lang,
            format!(
                "{full} once all exist; {} live at the peak ({ph})",
                b(grads)
            ),
            format!("全部生成后 {full}；峰值时（{ph}）存活 {}", b(grads)),
        )
    };
    push(
        "gradients",
        category_label(Category::Gradients, lang).into(),
        grads,
        gf,
        false,
    );

    let states = plan.opt.states_per_param();
    let of = match (plan.opt, bpp) {
        (OptimizerKind::Sgd, _) => tr(
            lang,
            "plain SGD keeps no state = 0 B".into(),
            "普通 SGD 不保存状态 = 0 B".into(),
        ),
        (o, Some(k)) => {
            let names = if o == OptimizerKind::SgdMomentum {
                "momentum_buffer"
            } else {
                "exp_avg, exp_avg_sq"
            };
            tr(
                lang,
                format!(
                    "{states} states ({names}) × {count} × {k} B = {}",
                    b(n.opt_state_bytes)
                ),
                format!(
                    "{states} 个状态（{names}）× {count} × {k} B = {}",
                    b(n.opt_state_bytes)
                ),
            )
        }
        (_, None) => tr(
            lang,
            format!("{states} states per parameter = {}", b(n.opt_state_bytes)),
            format!("每个参数 {states} 个状态 = {}", b(n.opt_state_bytes)),
        ),
    };
    push(
        "optimizer_state",
        category_label(Category::OptimizerState, lang).into(),
        n.category(Category::OptimizerState),
        of,
        false,
    );

    let temps = plan.opt.step_temporaries(plan.optimizer_impl());
    let ot = n.category(Category::OptimizerTemps);
    let otf = match (temps, plan.optimizer_impl()) {
        (0, OptimizerImpl::Fused) => tr(lang, format!("fused step: no temporaries = {}", b(ot)), format!("融合实现：无临时张量 = {}", b(ot))),
        (0, _) => tr(lang, format!("no parameter-sized temporaries = {}", b(ot)), format!("无与参数同大小的临时张量 = {}", b(ot))),
        (_, _) => tr(
            lang,
            format!("foreach step: sqrt(exp_avg_sq), one parameter-sized temporary ({}), live only during the step; at the peak {}", b(n.grad_bytes), b(ot)),
            format!("foreach 实现：sqrt(exp_avg_sq)，一个与参数同大小的临时张量（{}），仅在更新时存活；峰值时 {}", b(n.grad_bytes), b(ot)),
        ),
    };
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
        let f = tr(
            lang,
            format!("keys and values of every layer for the context so far: {kv_text}"),
            format!("各层截至当前上下文的键和值：{kv_text}"),
        );
        push(
            "kv_cache",
            category_label(Category::KvCache, lang).into(),
            kv,
            f,
            false,
        );
    }

    let ph = phase_label(n.phase, lang);
    let pf = match &n.peak_op {
        Some(op) => tr(
            lang,
            format!("sum of the rows above, during {ph} at {op}; each tensor rounded to 512 B"),
            format!("以上各项之和，出现在{ph}（{op}）；每个张量按 512 B 取整"),
        ),
        None => tr(
            lang,
            format!("sum of the rows above, during {ph}; each tensor rounded to 512 B"),
            format!("以上各项之和，出现在{ph}；每个张量按 512 B 取整"),
        ),
    };
    push("allocated_peak", Msg::Peak.t(lang).into(), n.peak, pf, true);

    let cache = n
        .reserved
        .saturating_sub(n.peak)
        .saturating_sub(n.workspaces);
    let cf = tr(
        lang,
        "caching allocator: 2 MiB segments for blocks up to 1 MiB, 20 MiB up to 10 MiB, larger ones rounded to 2 MiB; kept after frees".into(),
        "缓存分配器：1 MiB 以下的块用 2 MiB 段，10 MiB 以下用 20 MiB 段，更大的按 2 MiB 取整；释放后仍保留".into(),
    );
    push(
        "allocator_cache",
        tr(lang, "Allocator cache".into(), "分配器缓存".into()),
        cache,
        cf,
        false,
    );
    let sm = gpu.map(|g| g.sm).unwrap_or(90);
    let wf = if sm == 0 {
        tr(
            lang,
            "no cuBLAS on this device = 0 B".into(),
            "此设备无 cuBLAS = 0 B".into(),
        )
    } else {
        let per = if sm >= 90 { "32 MiB" } else { "8.06 MiB" };
        tr(
            lang,
            format!(
                "cuBLAS + cuBLASLt, forward and backward threads: 2 × ({per} + 1 MiB) = {}",
                b(cublas_workspaces(sm))
            ),
            format!(
                "cuBLAS + cuBLASLt，前向与反向两个线程：2 × ({per} + 1 MiB) = {}",
                b(cublas_workspaces(sm))
            ),
        )
    };
    push(
        "workspaces",
        tr(lang, "Workspaces".into(), "工作空间".into()),
        n.workspaces,
        wf,
        false,
    );
    push(
        "reserved",
        Msg::Reserved.t(lang).into(),
        n.reserved,
        tr(
            lang,
            "allocated peak + allocator cache + workspaces".into(),
            "已分配峰值 + 分配器缓存 + 工作空间".into(),
        ),
        true,
    );
    let name = gpu.map(|g| g.name).unwrap_or("GPU");
    push(
        "context",
        tr(lang, "CUDA context".into(), "CUDA 上下文".into()),
        n.context,
        tr(lang, format!("driver state and loaded kernels, typical for {name}; not allocated through PyTorch"), format!("驱动状态与已加载的内核，{name} 的典型值；不经 PyTorch 分配")),
        false,
    );
    push(
        "device_total",
        Msg::DeviceTotal.t(lang).into(),
        n.device_total,
        tr(
            lang,
            "reserved + CUDA context: what nvidia-smi shows".into(),
            "已预留 + CUDA 上下文：即 nvidia-smi 显示的用量".into(),
        ),
        true,
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::estimator::config::Precision;
    use crate::estimator::estimate;
    use crate::presets::gpus;
    use crate::ui::logic::workbench::BatchModel;

    fn numbers(plan: &Plan) -> Numbers {
        let gpu = crate::ui::logic::state::gpu_of(plan);
        BatchModel::new(plan).unwrap().at(plan.batch, gpu.as_ref())
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
            w.formula.contains("2 × (8.06 MiB + 1 MiB)"),
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
