//! The parallelism panel's logic, as plain functions on the [`Plan`] so it is tested
//! natively: reading and writing the `parallel` and `offload` keys, the curves of per-GPU memory
//! against the number of GPUs for each ZeRO stage and the words of the panel's charts, the
//! per-GPU summary and the layout search,
//! their texts in the page's language and sizes in its units. Every number comes from
//! [`crate::estimator::parallel`]; nothing here knows about Leptos.

use super::i18n::{fmt_bytes, fmt_seconds, parallelism, Label, Lang, Msg, Units};
use crate::estimator::config::Precision;
use crate::estimator::decimal::Fixed;
use crate::estimator::error::EstimateError;
use crate::estimator::parallel::{
    evaluate, MixedPrecision, MpDtype, Offload, Parallel, ParallelEstimate, Prepared,
};
use crate::estimator::tune::Mode;
use crate::estimator::units::Bytes;
use crate::plan::search::{Candidate, SearchOptions, SearchSteps};
use crate::plan::Plan;
use crate::plan::PlanError;
use crate::plots::rank_chart::RankChart;
use crate::plots::zero_chart::ZeroCurve;
use crate::plots::PanelWords;
use crate::presets::links::{LinkKind, LINKS};

/// Data-parallel degrees the ZeRO chart tries (GPUs = dp · tp · pp).
pub const DP_DEGREES: [u64; 8] = [1, 2, 4, 8, 16, 32, 64, 128];
/// Nodes hold this many GPUs when the plan does not say (an HGX/DGX board).
pub const DEFAULT_GPUS_PER_NODE: u64 = 8;

/// The sharding schemes of the ZeRO select: (value, label, zero stage, FSDP).
pub const ZERO_OPTIONS: [(&str, Label, u8, bool); 6] = [
    ("0", Label::T(Msg::Zero0), 0, false),
    ("1", Label::T(Msg::Zero1), 1, false),
    ("2", Label::T(Msg::Zero2), 2, false),
    ("3", Label::T(Msg::Zero3), 3, false),
    ("fsdp", Label::Name("FSDP FULL_SHARD"), 3, true),
    ("fsdp-grad-op", Label::Name("FSDP SHARD_GRAD_OP"), 2, true),
];

/// The plan's `parallel` key, or one GPU's.
pub fn parallel_of(plan: &Plan) -> Parallel {
    plan.parallel.clone().unwrap_or_default()
}

fn edit(plan: &mut Plan, f: impl FnOnce(&mut Parallel)) {
    let mut p = parallel_of(plan);
    f(&mut p);
    plan.parallel = if p == Parallel::default() {
        None
    } else {
        Some(p)
    };
}

/// A degree box's text that is neither empty nor a whole number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("a degree is a whole number, or empty to derive it")]
pub struct NotADegree;

/// Reads a degree box: a whole number, or empty for "derive it" (`None`). Junk is an error so
/// the box can keep what the user typed without touching the plan.
pub fn parse_degree(s: &str) -> Result<Option<u64>, NotADegree> {
    let s = s.trim();
    if s.is_empty() {
        return Ok(None);
    }
    s.parse::<u64>().map(Some).map_err(|_| NotADegree)
}

/// Which degree a box sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Degree {
    GpusPerNode,
    Nodes,
    Dp,
    Tp,
    Pp,
    Ep,
}

/// Sets one degree; `None` derives it (tp and pp go back to 1). Zero is kept: the estimator
/// refuses it with its own message.
pub fn set_degree(plan: &mut Plan, which: Degree, v: Option<u64>) {
    edit(plan, |p| match which {
        Degree::GpusPerNode => p.gpus_per_node = v,
        Degree::Nodes => p.nodes = v,
        Degree::Dp => p.dp = v,
        Degree::Tp => p.tp = v.unwrap_or(1),
        Degree::Pp => p.pp = v.unwrap_or(1),
        Degree::Ep => p.ep = v.unwrap_or(1),
    });
}

/// The value a degree box shows (empty when derived).
pub fn degree_text(plan: &Plan, which: Degree) -> String {
    let p = parallel_of(plan);
    let v = match which {
        Degree::GpusPerNode => p.gpus_per_node,
        Degree::Nodes => p.nodes,
        Degree::Dp => p.dp,
        Degree::Tp => Some(p.tp),
        Degree::Pp => Some(p.pp),
        Degree::Ep => Some(p.ep),
    };
    v.map(|v| v.to_string()).unwrap_or_default()
}

/// The ZeRO select's value for the plan.
pub fn zero_value(plan: &Plan) -> &'static str {
    let p = parallel_of(plan);
    let z = p.zero.unwrap_or(if p.fsdp { 3 } else { 0 });
    ZERO_OPTIONS
        .iter()
        .find(|o| o.2 == z && o.3 == p.fsdp)
        .map_or("0", |o| o.0)
}

/// Picks a sharding scheme by the ZeRO select's value; unknown values change nothing.
pub fn set_zero(plan: &mut Plan, value: &str) {
    if let Some(&(_, _, z, fsdp)) = ZERO_OPTIONS.iter().find(|o| o.0 == value) {
        edit(plan, |p| {
            p.zero = (z > 0 || fsdp).then_some(z);
            p.fsdp = fsdp;
            if !fsdp {
                // The policy is FSDP's: other schemes do not take it.
                p.mixed_precision = None;
            }
        });
    }
}

/// Whether the plan uses FSDP's bf16 `MixedPrecisionPolicy`.
pub fn mixed_precision_on(plan: &Plan) -> bool {
    plan.parallel
        .as_ref()
        .is_some_and(|p| p.mixed_precision.is_some())
}

/// Turns FSDP's bf16 mixed precision (bf16 compute, fp32 reduction) on or off. The policy keeps
/// the sharded weights in fp32, so turning it on sets the weights to fp32.
pub fn set_mixed_precision(plan: &mut Plan, on: bool) {
    edit(plan, |p| {
        p.mixed_precision = on.then_some(MixedPrecision {
            param_dtype: MpDtype::Bf16,
            reduce_dtype: MpDtype::Fp32,
        })
    });
    if on {
        plan.dtype = Precision::Fp32;
    }
}

/// What can be offloaded to host memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OffloadTarget {
    Optimizer,
    Params,
    Activations,
}

pub fn offload_on(plan: &Plan, what: OffloadTarget) -> bool {
    let o = plan.offload.clone().unwrap_or_default();
    match what {
        OffloadTarget::Optimizer => o.optimizer,
        OffloadTarget::Params => o.params,
        OffloadTarget::Activations => o.activations,
    }
}

/// Turns one offload target on or off; the key disappears when nothing is offloaded.
pub fn set_offload(plan: &mut Plan, what: OffloadTarget, on: bool) {
    let mut o = plan.offload.clone().unwrap_or_default();
    match what {
        OffloadTarget::Optimizer => o.optimizer = on,
        OffloadTarget::Params => o.params = on,
        OffloadTarget::Activations => o.activations = on,
    }
    plan.offload = if o == Offload::default() {
        None
    } else {
        Some(o)
    };
}

/// Options of a link select of one kind: (id, name), the GPU's default first as "". Link names
/// are product names and read the same in every language.
pub fn link_options(kind: LinkKind, lang: Lang) -> Vec<(&'static str, &'static str)> {
    std::iter::once(("", Msg::GpuDefault.t(lang)))
        .chain(
            LINKS
                .iter()
                .filter(|l| l.kind == kind)
                .map(|l| (l.id, l.name)),
        )
        .collect()
}

/// The link the plan names for `kind` ("" = the GPU's default).
pub fn link_value(plan: &Plan, kind: LinkKind) -> String {
    let p = parallel_of(plan);
    match kind {
        LinkKind::IntraNode => p.intra_link,
        LinkKind::InterNode => p.inter_link,
        LinkKind::Host => plan.offload.as_ref().and_then(|o| o.link.clone()),
    }
    .unwrap_or_default()
}

/// Sets the link of `kind` ("" = the GPU's default).
pub fn set_link(plan: &mut Plan, kind: LinkKind, id: &str) {
    let v = (!id.is_empty()).then(|| id.to_string());
    match kind {
        LinkKind::IntraNode => edit(plan, |p| p.intra_link = v),
        LinkKind::InterNode => edit(plan, |p| p.inter_link = v),
        LinkKind::Host => {
            let mut o = plan.offload.clone().unwrap_or_default();
            o.link = v;
            plan.offload = if o == Offload::default() {
                None
            } else {
                Some(o)
            };
        }
    }
}

/// The plan's GPU preset (an unknown id reads as none; the estimator reports it).
pub use super::state::gpu_of;

/// The multi-GPU estimate of the plan (a single GPU when it has no `parallel` key).
/// Whether the expert-parallel degree is offered: for a model with routed experts (the layout's
/// estimate holds some), or while a degree is set, so that it can be undone.
pub fn expert_parallel_applies(
    plan: &Plan,
    est: Option<&Result<ParallelEstimate, PlanError>>,
) -> bool {
    parallel_of(plan).ep > 1 || matches!(est, Some(Ok(e)) if e.expert_params_bytes > 0)
}

pub fn estimate(plan: &Plan) -> Result<ParallelEstimate, PlanError> {
    if plan.mode == Mode::Infer {
        return Err(PlanError::Estimate(EstimateError::Unsupported("inference plans are estimated on one GPU: switch the mode to train or fine-tune to plan a multi-GPU layout".into())));
    }
    crate::plan::estimate_parallel(plan)
}

/// The ZeRO chart's data: for each scheme, per-GPU device total at each data-parallel degree of
/// [`DP_DEGREES`] with the plan's tp, pp, micro-batches and offload. The model is built and
/// simulated once ([`prepare`]); each layout is then one [`evaluate`]. Layouts the estimator
/// refuses (parameter offload below stage 3, ...) are left out of their line.
pub fn zero_curves(plan: &Plan) -> Result<Vec<ZeroCurve>, PlanError> {
    if plan.mode == Mode::Infer {
        return Err(PlanError::Estimate(EstimateError::Unsupported(
            "inference plans are estimated on one GPU".into(),
        )));
    }
    let gpu = crate::plan::resolve::gpu(plan)?;
    let base = parallel_of(plan);
    let gpn = base.gpus_per_node.unwrap_or(DEFAULT_GPUS_PER_NODE).max(1);
    let mut prepared: Option<Prepared> = None;
    let mut curves: Vec<ZeroCurve> = Vec::new();
    let schemes = [
        ("DDP (ZeRO-0)", 0u8, false),
        ("ZeRO-1", 1, false),
        ("ZeRO-2", 2, false),
        ("ZeRO-3", 3, false),
        ("FSDP", 3, true),
    ];
    let mut first_err = None;
    for (label, zero, fsdp) in schemes {
        let mut points = Vec::new();
        for dp in DP_DEGREES {
            let world = dp.saturating_mul(base.tp).saturating_mul(base.pp);
            let (node_gpus, nodes) = if world <= gpn {
                (world, 1)
            } else if world % gpn == 0 {
                (gpn, world / gpn)
            } else {
                (world, 1)
            };
            let mut p = plan.clone();
            let mut par = base.clone();
            par.gpus_per_node = Some(node_gpus);
            par.nodes = Some(nodes);
            par.dp = Some(dp);
            par.zero = Some(zero);
            par.fsdp = fsdp;
            p.parallel = Some(par);
            let layout = match crate::plan::layout(&p) {
                Ok(l) => l,
                Err(e) => {
                    first_err.get_or_insert(e);
                    continue;
                }
            };
            if prepared.is_none() {
                prepared = Some(crate::plan::prepare(&p, &layout)?);
            }
            if let Some(prep) = &prepared {
                let e = evaluate(&p.setup(), &layout, prep, gpu.as_ref(), None);
                points.push((layout.world, Bytes(e.per_gpu.device_total_bytes)));
            }
        }
        curves.push(ZeroCurve {
            label: label.into(),
            points,
        });
    }
    if curves.iter().all(|c| c.points.is_empty()) {
        return Err(first_err.unwrap_or_else(|| {
            PlanError::Estimate(EstimateError::Unsupported(
                "no layout of this plan can be estimated".into(),
            ))
        }));
    }
    Ok(curves)
}

fn memory_axis(lang: Lang, units: Units) -> String {
    format!("{} ({})", Msg::PerGpuMemory.t(lang), units.axis_unit())
}

fn capacity_label(capacity: Option<Bytes>, lang: Lang, units: Units) -> Option<String> {
    capacity.map(|c| format!("{} {}", Msg::Capacity.t(lang), fmt_bytes(c, units)))
}

/// The ZeRO chart's words: axes, the capacity line and the plan's own layout (its GPU count and
/// per-GPU device total).
pub fn zero_words(
    current: Option<(u64, Bytes)>,
    capacity: Option<Bytes>,
    lang: Lang,
    units: Units,
) -> PanelWords {
    PanelWords {
        unit: crate::ui::logic::chart_data::unit_of(units),
        x_desc: Msg::Gpus.t(lang).into(),
        y_desc: memory_axis(lang, units),
        empty: Msg::NoLayoutChart.t(lang).into(),
        capacity: capacity_label(capacity, lang, units),
        mark: current
            .map(|(gpus, total)| parallelism::your_layout(gpus, &fmt_bytes(total, units), lang)),
        legend: Vec::new(),
    }
}

/// The rank chart of an estimate (no bars without one) in `lang` and `units`.
pub fn rank_chart(
    e: Option<&ParallelEstimate>,
    capacity: Option<Bytes>,
    lang: Lang,
    units: Units,
) -> RankChart {
    let mut chart = match e {
        Some(e) => RankChart::from_estimate(e, capacity),
        None => RankChart {
            bars: Vec::new(),
            peak: 0,
            capacity,
            words: None,
        },
    };
    if let Some(e) = e {
        let one = e.ranks.len() == 1;
        for (bar, rank) in chart.bars.iter_mut().zip(&e.ranks) {
            bar.label = if one {
                Msg::EveryGpu.t(lang).into()
            } else {
                parallelism::stage(rank.stage, lang)
            };
        }
    }
    let mark = chart
        .bars
        .get(chart.peak)
        .map(|b| parallelism::peak_rank(&fmt_bytes(b.device_total, units), lang));
    let legend = [
        Msg::Parameters,
        Msg::Gradients,
        Msg::OptimizerState,
        Msg::Activations,
        Msg::RankOther,
    ]
    .iter()
    .map(|m| m.t(lang).to_string())
    .collect();
    chart.words = Some(PanelWords {
        unit: crate::ui::logic::chart_data::unit_of(units),
        x_desc: Msg::PipelineRank.t(lang).into(),
        y_desc: memory_axis(lang, units),
        empty: Msg::NoRank.t(lang).into(),
        capacity: capacity_label(capacity, lang, units),
        mark,
        legend,
    });
    chart
}

/// The per-GPU numbers of a multi-GPU estimate, as (label, value) rows.
pub fn per_gpu_rows(e: &ParallelEstimate, lang: Lang, units: Units) -> Vec<(&'static str, String)> {
    let m = &e.per_gpu;
    let b = |v: u64| fmt_bytes(Bytes(v), units);
    let l = &e.layout;
    let degrees = parallelism::Degrees {
        dp: l.dp,
        tp: l.tp,
        pp: l.pp,
        ep: l.ep,
        scheme: e.scheme,
    };
    let layout = parallelism::layout(l.world, l.nodes, l.gpus_per_node, degrees, lang);
    let mut rows = vec![
        (Msg::Layout.t(lang), layout),
        (Msg::Parameters.t(lang), b(m.params_bytes)),
        (Msg::Gradients.t(lang), b(m.grads_bytes)),
        (Msg::OptimizerState.t(lang), b(m.optimizer_state_bytes)),
        (Msg::Activations.t(lang), b(m.activations_bytes)),
        (Msg::OtherMemory.t(lang), b(m.other_bytes)),
        (Msg::Peak.t(lang), b(m.peak_allocated_bytes)),
        (Msg::DeviceTotal.t(lang), b(m.device_total_bytes)),
    ];
    if e.host_bytes > 0 {
        rows.push((Msg::HostPerGpu.t(lang), b(e.host_bytes)));
    }
    let comm = parallelism::communication(
        &b(e.comm_bytes_per_step),
        &fmt_seconds(e.comm_seconds_per_step),
        lang,
    );
    rows.push((Msg::CommPerStep.t(lang), comm));
    if let Some(s) = e.step_seconds {
        rows.push((Msg::StepTime.t(lang), fmt_seconds(s)));
    }
    if let Some(eff) = e.scaling_efficiency {
        rows.push((
            Msg::ScalingEfficiency.t(lang),
            format!("{} %", Fixed(eff * 100.0, 0)),
        ));
    }
    if let Some(o) = &e.offload {
        rows.push((Msg::Offload.t(lang), parallelism::offload_verdict(o, lang)));
    }
    if let Some(f) = e.fits {
        rows.push((
            Msg::FitsGpu.t(lang),
            if f { Msg::Yes } else { Msg::No }.t(lang).into(),
        ));
    }
    rows
}

/// The search the panel runs: up to 64 GPUs in nodes of the plan's size, the five cheapest.
pub fn search_options(plan: &Plan) -> SearchOptions {
    let gpn = parallel_of(plan)
        .gpus_per_node
        .unwrap_or(DEFAULT_GPUS_PER_NODE)
        .max(1);
    SearchOptions {
        max_gpus: 64,
        gpus_per_node: gpn,
        top: 5,
        ..SearchOptions::default()
    }
}

/// The search for the cheapest layouts that fit the plan's GPU (fewest GPUs, then the
/// shortest step), not yet begun: the page runs it a few steps per task.
pub fn layout_search(plan: &Plan) -> Result<SearchSteps, PlanError> {
    if plan.mode == Mode::Infer {
        return Err(PlanError::Estimate(EstimateError::Unsupported(
            "the layout search plans training and fine-tuning: inference is estimated on one GPU"
                .into(),
        )));
    }
    if plan.gpu.is_none() {
        return Err(PlanError::Estimate(EstimateError::Unsupported(
            "pick a GPU first: the search looks for layouts that fit it".into(),
        )));
    }
    SearchSteps::new(plan, &search_options(plan))
}

/// [`layout_search`] run to its end.
pub fn layouts(plan: &Plan) -> Result<Vec<Candidate>, PlanError> {
    Ok(layout_search(plan)?.finish())
}

/// One line describing a found layout.
pub fn candidate_text(c: &Candidate, lang: Lang, units: Units) -> String {
    let peak = fmt_bytes(Bytes(c.peak_device_bytes), units);
    let offload = c.offload_optimizer || c.offload_params;
    let step = c.step_seconds.map(fmt_seconds);
    let found = parallelism::Found {
        gpus: c.gpus,
        degrees: parallelism::Degrees {
            dp: c.dp,
            tp: c.tp,
            pp: c.pp,
            ep: c.ep,
            scheme: c.scheme,
        },
        offload_params: offload.then_some(c.offload_params),
        micro_batch: c.micro_batch,
        micro_batches: c.micro_batches,
        peak: &peak,
        step: step.as_deref(),
    };
    parallelism::found_layout(&found, lang)
}

/// Applies a found layout: its plan replaces the current one (same model and settings, the
/// layout's degrees, micro-batch and offload).
pub fn apply_candidate(plan: &mut Plan, c: &Candidate) {
    *plan = c.plan.clone();
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn a_single_gpu_layout_reads_well_in_both_languages() {
        assert_eq!(fmt_seconds(-0.0), "0 s");
        assert_eq!(fmt_seconds(0.0), "0 s");
        assert_eq!(fmt_seconds(2.5e-4), "250 µs");
        let e = estimate(&gpt2()).unwrap();
        let zh = per_gpu_rows(&e, Lang::Zh, Units::Binary)
            .into_iter()
            .map(|(k, v)| format!("{k}{v}"))
            .collect::<String>();
        assert!(
            zh.contains("单副本") && !zh.contains("single replica") && !zh.contains("-0"),
            "{zh}"
        );
        let en = per_gpu_rows(&e, Lang::En, Units::Binary)
            .into_iter()
            .map(|(k, v)| format!("{k}{v}"))
            .collect::<String>();
        assert!(
            en.contains("1 GPU (1 × 1)") && en.contains("single replica") && !en.contains("-0"),
            "{en}"
        );
    }

    #[test]
    fn the_offload_verdict_reads_in_chinese() {
        let mut p = Plan {
            gpu: Some("a100-40".into()),
            ..gpt2()
        };
        set_degree(&mut p, Degree::Dp, Some(4));
        set_zero(&mut p, "3");
        set_offload(&mut p, OffloadTarget::Optimizer, true);
        let e = estimate(&p).unwrap();
        let row = |lang| {
            per_gpu_rows(&e, lang, Units::Binary)
                .into_iter()
                .find(|(k, _)| *k == Msg::Offload.t(lang))
                .map(|(_, v)| v)
                .unwrap()
        };
        let (en, zh) = (row(Lang::En), row(Lang::Zh));
        assert!(en.contains("copies"), "{en}");
        assert!(zh.contains("拷贝") && !zh.contains("copies"), "{zh}");
    }

    #[test]
    fn mixed_precision_follows_fsdp() {
        let mut p = Plan {
            dtype: Precision::Bf16,
            ..gpt2()
        };
        set_degree(&mut p, Degree::Dp, Some(4));
        set_zero(&mut p, "fsdp");
        set_mixed_precision(&mut p, true);
        assert!(
            mixed_precision_on(&p) && p.dtype == Precision::Fp32,
            "fp32 master weights"
        );
        assert!(estimate(&p).is_ok());
        set_zero(&mut p, "3");
        assert!(
            !mixed_precision_on(&p),
            "ZeRO without FSDP drops the policy"
        );
        assert!(estimate(&p).is_ok());
    }

    #[test]
    fn degrees_round_trip_through_the_plan() {
        let mut p = gpt2();
        assert_eq!(degree_text(&p, Degree::Tp), "1");
        assert_eq!(degree_text(&p, Degree::Dp), "");
        set_degree(&mut p, Degree::Tp, Some(2));
        set_degree(&mut p, Degree::Dp, Some(4));
        assert_eq!(parallel_of(&p).tp, 2);
        assert_eq!(degree_text(&p, Degree::Dp), "4");
        set_degree(&mut p, Degree::Tp, None);
        set_degree(&mut p, Degree::Dp, None);
        assert_eq!(p.parallel, None, "back to one GPU: the key goes away");
        assert_eq!(parse_degree(" 8 "), Ok(Some(8)));
        assert_eq!(parse_degree(""), Ok(None));
        assert_eq!(parse_degree("x"), Err(NotADegree));
    }

    #[test]
    fn the_expert_degree_is_offered_for_experts_only() {
        let mut p = gpt2();
        set_degree(&mut p, Degree::Dp, Some(4));
        let dense = estimate(&p);
        assert!(!expert_parallel_applies(&p, Some(&dense)));
        set_degree(&mut p, Degree::Ep, Some(2));
        assert_eq!(degree_text(&p, Degree::Ep), "2");
        let refused = estimate(&p);
        assert!(refused.unwrap_err().to_string().contains("has none"));
        assert!(
            expert_parallel_applies(&p, None),
            "a set degree stays on screen"
        );
        set_degree(&mut p, Degree::Ep, None);
        assert_eq!(parallel_of(&p).ep, 1);
        let mut moe = Plan::new("custom");
        moe.hf_config = Some(serde_json::json!({
            "model_type": "qwen3_moe", "hidden_size": 64, "intermediate_size": 128,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
            "vocab_size": 256, "head_dim": 16, "num_experts": 8, "num_experts_per_tok": 2,
            "moe_intermediate_size": 64}));
        moe.seq = Some(32);
        set_degree(&mut moe, Degree::Dp, Some(4));
        assert!(expert_parallel_applies(&moe, Some(&estimate(&moe))));
        // The layout row names ep where the experts are split, and not otherwise.
        let row = |p: &Plan, lang| {
            per_gpu_rows(&estimate(p).unwrap(), lang, Units::Binary)[0]
                .1
                .clone()
        };
        assert!(!row(&moe, Lang::En).contains("ep "));
        set_degree(&mut moe, Degree::Ep, Some(4));
        assert!(row(&moe, Lang::En).contains("dp 4 · tp 1 · pp 1 · ep 4,"));
        assert!(row(&moe, Lang::Zh).contains("· ep 4，"));
    }

    #[test]
    fn zero_select_maps_to_stage_and_fsdp() {
        let mut p = gpt2();
        assert_eq!(zero_value(&p), "0");
        for (v, _, z, fsdp) in ZERO_OPTIONS {
            set_zero(&mut p, v);
            assert_eq!(zero_value(&p), v);
            let par = parallel_of(&p);
            assert_eq!((par.zero.unwrap_or(0), par.fsdp), (z, fsdp));
        }
        set_zero(&mut p, "0");
        assert_eq!(p.parallel, None);
        set_zero(&mut p, "junk");
        assert_eq!(p.parallel, None);
    }

    #[test]
    fn offload_and_links_edit_their_keys() {
        let mut p = gpt2();
        set_offload(&mut p, OffloadTarget::Optimizer, true);
        assert!(offload_on(&p, OffloadTarget::Optimizer));
        set_link(&mut p, LinkKind::IntraNode, "pcie4");
        assert_eq!(link_value(&p, LinkKind::IntraNode), "pcie4");
        set_link(&mut p, LinkKind::IntraNode, "");
        set_offload(&mut p, OffloadTarget::Optimizer, false);
        assert_eq!((p.parallel.clone(), p.offload.clone()), (None, None));
        assert!(link_options(LinkKind::IntraNode, Lang::En)
            .iter()
            .any(|(id, _)| *id == "nvlink3"));
        assert!(link_options(LinkKind::InterNode, Lang::En)
            .iter()
            .all(|(id, _)| !id.starts_with("nvlink")));
        assert_eq!(
            link_options(LinkKind::IntraNode, Lang::En)[0],
            ("", "GPU's default")
        );
        assert_eq!(
            link_options(LinkKind::IntraNode, Lang::Zh)[0],
            ("", "GPU 默认")
        );
    }

    #[test]
    fn zero_curves_fall_with_the_stage_and_the_gpus() {
        let curves = zero_curves(&gpt2()).unwrap();
        assert_eq!(curves.len(), 5);
        let at = |c: &ZeroCurve, n: u64| c.points.iter().find(|p| p.0 == n).map(|p| p.1).unwrap();
        // One GPU: every scheme holds the whole model.
        let one: Vec<Bytes> = curves[..4].iter().map(|c| at(c, 1)).collect();
        assert!(
            one.windows(2).all(|w| w[0].0.abs_diff(w[1].0) < w[0].0 / 8),
            "{one:?}"
        );
        // Eight GPUs: each stage shards more.
        let eight: Vec<u64> = curves[..4].iter().map(|c| at(c, 8).0).collect();
        assert!(eight.windows(2).all(|w| w[1] < w[0]), "{eight:?}");
        // ZeRO-3 keeps falling as GPUs are added; DDP stays flat.
        assert!(at(&curves[3], 64) < at(&curves[3], 8));
        assert!(at(&curves[0], 64).0.abs_diff(at(&curves[0], 8).0) < at(&curves[0], 8).0 / 10);
    }

    #[test]
    fn zero_curves_match_the_full_estimate() {
        let mut p = gpt2();
        set_degree(&mut p, Degree::Dp, Some(4));
        set_zero(&mut p, "2");
        let e = estimate(&p).unwrap();
        let curves = zero_curves(&p).unwrap();
        let z2 = curves.iter().find(|c| c.label == "ZeRO-2").unwrap();
        assert_eq!(
            z2.points.iter().find(|q| q.0 == 4).unwrap().1 .0,
            e.per_gpu.device_total_bytes
        );
    }

    #[test]
    fn bad_layouts_are_messages_not_panics() {
        let mut p = gpt2();
        set_degree(&mut p, Degree::Tp, Some(5));
        let msg = estimate(&p).unwrap_err().to_string();
        assert!(!msg.is_empty());
        assert!(zero_curves(&p).is_err());
        set_degree(&mut p, Degree::Tp, Some(0));
        assert!(estimate(&p).is_err());
        let mut r = Plan::new("resnet18");
        set_degree(&mut r, Degree::Tp, Some(2));
        assert!(estimate(&r)
            .unwrap_err()
            .to_string()
            .contains("tensor parallelism"));
        let inf = Plan {
            mode: Mode::Infer,
            ..gpt2()
        };
        assert!(estimate(&inf).is_err() && zero_curves(&inf).is_err() && layouts(&inf).is_err());
    }

    #[test]
    fn rows_cover_the_per_gpu_numbers() {
        let mut p = gpt2();
        set_degree(&mut p, Degree::Dp, Some(2));
        let e = estimate(&p).unwrap();
        let rows = per_gpu_rows(&e, Lang::En, Units::Binary);
        for label in [
            "Parameters",
            "Gradients",
            "Optimizer state",
            "Activations",
            "Device total",
            "Fits the GPU",
        ] {
            assert!(rows.iter().any(|r| r.0 == label), "missing {label}");
        }
        assert!(
            rows.iter()
                .any(|r| r.0 == "Device total" && r.1.ends_with("GiB")),
            "{rows:?}"
        );
        let zh = per_gpu_rows(&e, Lang::Zh, Units::Decimal);
        assert_eq!(zh.len(), rows.len());
        for label in [
            "布局",
            "参数",
            "梯度",
            "优化器状态",
            "激活",
            "设备总用量",
            "能否放入 GPU",
        ] {
            assert!(zh.iter().any(|r| r.0 == label), "missing {label}: {zh:?}");
        }
        assert!(
            zh.iter().any(|r| r.0 == "能否放入 GPU" && r.1 == "是"),
            "{zh:?}"
        );
        assert!(
            zh.iter()
                .any(|r| r.0 == "布局" && r.1.starts_with("2 张 GPU")),
            "{zh:?}"
        );
        assert!(
            zh.iter().all(|r| !r.1.contains("iB")) && zh.iter().any(|r| r.1.ends_with(" GB")),
            "{zh:?}"
        );
    }

    /// The page's search, a shape per step, finds what the command line's finds, and reports
    /// how far it got.
    #[test]
    fn the_stepped_search_is_the_search() {
        let p = Plan {
            batch: 64,
            ..gpt2()
        };
        let mut steps = layout_search(&p).unwrap();
        let (mut n, mut gpus) = (0, Vec::new());
        let found = loop {
            n += 1;
            if let Some(f) = steps.step() {
                break f;
            }
            gpus.push(steps.gpus());
        };
        let whole = crate::plan::search::search(&p, &search_options(&p)).unwrap();
        assert_eq!(
            serde_json::to_string(&found).unwrap(),
            serde_json::to_string(&whole).unwrap()
        );
        assert!(n > 3, "{n} steps");
        assert!(
            gpus.windows(2).all(|w| w[0] <= w[1]) && gpus[0] >= 1,
            "{gpus:?}"
        );
    }

    #[test]
    fn search_finds_layouts_that_apply() {
        let mut p = gpt2();
        p.gpu = None;
        assert!(layouts(&p).unwrap_err().to_string().contains("GPU"));
        let p = gpt2();
        let found = layouts(&p).unwrap();
        assert!(!found.is_empty());
        assert_eq!(found[0].gpus, 1, "gpt2 at batch 4 fits one A100");
        let mut q = p.clone();
        apply_candidate(&mut q, &found[0]);
        assert_eq!(estimate(&q).unwrap().fits, Some(true));
        assert!(candidate_text(&found[0], Lang::En, Units::Binary).starts_with("1 GPU: dp 1"));
        let zh = candidate_text(&found[0], Lang::Zh, Units::Decimal);
        assert!(
            zh.starts_with("1 张 GPU：dp 1")
                && zh.contains("每张 GPU")
                && zh.contains("GB")
                && !zh.contains("iB"),
            "{zh}"
        );
    }

    #[test]
    fn chart_words_follow_language_and_units() {
        let mut p = gpt2();
        set_degree(&mut p, Degree::Pp, Some(2));
        let e = estimate(&p).unwrap();
        let cap = Some(Bytes(40_000_000_000));
        let r = rank_chart(Some(&e), cap, Lang::Zh, Units::Decimal);
        let w = r.words.as_ref().unwrap();
        assert_eq!(
            (w.x_desc.as_str(), w.y_desc.as_str(), w.unit.name),
            ("流水线阶段", "单卡显存 (GB)", "GB")
        );
        assert_eq!(w.capacity.as_deref(), Some("GPU 容量 40.0 GB"));
        assert!(
            w.mark.as_deref().unwrap().starts_with("峰值阶段："),
            "{:?}",
            w.mark
        );
        assert_eq!(w.legend[2], "优化器状态");
        assert_eq!(
            r.bars.iter().map(|b| b.label.as_str()).collect::<Vec<_>>(),
            ["阶段 0", "阶段 1"]
        );
        let en = rank_chart(Some(&e), cap, Lang::En, Units::Binary);
        assert_eq!(en.bars[1].label, "stage 1");
        assert_eq!(en.words.unwrap().y_desc, "Per-GPU memory (GiB)");
        let z = zero_words(
            Some((8, Bytes(12_000_000_000))),
            cap,
            Lang::Zh,
            Units::Decimal,
        );
        assert_eq!(z.mark.as_deref(), Some("当前布局，8 张 GPU：12.0 GB"));
        assert_eq!(
            zero_words(Some((1, Bytes(1 << 30))), None, Lang::En, Units::Binary)
                .mark
                .as_deref(),
            Some("your layout, 1 GPU: 1.00 GiB")
        );
    }

    #[test]
    fn durations_pick_their_unit() {
        assert_eq!(fmt_seconds(2.5), "2.50 s");
        assert_eq!(fmt_seconds(0.0123), "12.3 ms");
        assert_eq!(fmt_seconds(5e-5), "50 µs");
        assert_eq!(fmt_seconds(f64::NAN), "–");
    }
}
