//! "What would make it fit": changes to the plan that lower its device total, each simulated
//! (through the page's cached [`super::workbench::BatchModel`]s, so a suggestion's effect is the
//! estimator's, not a rule of thumb), ranked with the ones that fit first and the cheapest first
//! among those, each with its effect and its cost.

use crate::estimator::config::{Checkpointing, OptimizerImpl, OptimizerKind, Precision};
use crate::estimator::units::Bytes;
use crate::estimator::MAX_ACCUMULATION;
use crate::plan::Plan;

use super::ckpt_info::CkptInfo;
use super::i18n::{fmt_bytes, fmt_pct, suggestions, Lang, Msg, Units};
use super::state::{self, InputSpec};
use super::workbench::Numbers;

/// One change to the plan.
#[derive(Clone, Debug, PartialEq)]
pub enum Fix {
    Precision(Precision),
    Checkpointing(Checkpointing),
    /// A smaller micro-batch with more accumulation steps: the same effective batch.
    Accumulate {
        batch: u64,
        steps: u32,
    },
    FusedOptimizer,
    Optimizer(OptimizerKind),
    /// A smaller resolution or sequence length.
    InputSize(u64),
    /// Several changes together, when no single one fits.
    Combined(Vec<Fix>),
}

impl Fix {
    /// Cheapest first: how much the change costs in speed or in what is trained.
    fn tier(&self) -> u8 {
        match self {
            Fix::FusedOptimizer => 0,
            Fix::Precision(Precision::AmpBf16 | Precision::AmpFp16) => 1,
            Fix::Accumulate { .. } => 2,
            Fix::Checkpointing(_) => 3,
            Fix::Precision(_) => 4,
            Fix::Optimizer(OptimizerKind::Adamw8bit | OptimizerKind::Adam8bit) => 4,
            Fix::Combined(_) => 5,
            Fix::Optimizer(_) => 6,
            Fix::InputSize(_) => 7,
        }
    }

    /// Applies the change to `plan`.
    pub fn apply(&self, plan: &mut Plan) {
        match self {
            Fix::Precision(p) => plan.dtype = *p,
            Fix::Checkpointing(c) => plan.ckpt = *c,
            Fix::Accumulate { batch, steps } => {
                plan.batch = *batch;
                plan.accumulation = *steps;
            }
            Fix::FusedOptimizer => plan.optimizer_impl = Some(OptimizerImpl::Fused),
            Fix::Optimizer(o) => plan.opt = *o,
            Fix::InputSize(v) => state::set_input_size(plan, *v),
            Fix::Combined(fixes) => fixes.iter().for_each(|f| f.apply(plan)),
        }
    }
}

/// A change and the plan it gives.
#[derive(Clone, Debug, PartialEq)]
pub struct Candidate {
    pub fix: Fix,
    pub plan: Plan,
}

fn candidate(plan: &Plan, fix: Fix) -> Candidate {
    let mut p = plan.clone();
    fix.apply(&mut p);
    Candidate { fix, plan: p }
}

/// The changes worth simulating for `plan`. Some follow from simulations already made
/// (`numbers_of`, `None` while a plan's model is still missing): how far the batch must be split
/// for accumulation, and whether the combined changes also need a split. The page calls this
/// again as models arrive, so the list grows until everything it needs is simulated.
pub fn candidates(
    plan: &Plan,
    info: &CkptInfo,
    capacity: Bytes,
    numbers_of: &dyn Fn(&Plan) -> Option<Numbers>,
) -> Vec<Candidate> {
    let mut v = Vec::new();
    if let Some(fit) = largest_fitting(plan, plan.batch.saturating_sub(1), capacity, numbers_of) {
        if let Some((micro, steps)) = split_batch(plan.batch, plan.accumulation, fit) {
            v.push(candidate(
                plan,
                Fix::Accumulate {
                    batch: micro,
                    steps,
                },
            ));
        }
    }
    if matches!(plan.opt, OptimizerKind::Adam | OptimizerKind::Adamw)
        && plan.optimizer_impl() == OptimizerImpl::Foreach
    {
        v.push(candidate(plan, Fix::FusedOptimizer));
    }
    match plan.dtype {
        Precision::Fp32 => v.push(candidate(plan, Fix::Precision(Precision::AmpBf16))),
        Precision::AmpBf16 => v.push(candidate(plan, Fix::Precision(Precision::Bf16))),
        Precision::AmpFp16 => v.push(candidate(plan, Fix::Precision(Precision::Fp16))),
        Precision::Bf16 | Precision::Fp16 => {}
    }
    if info.segments && matches!(plan.ckpt, Checkpointing::None) {
        v.push(candidate(plan, Fix::Checkpointing(Checkpointing::Sqrt)));
    }
    if info.blocks > 0 && plan.ckpt != Checkpointing::Block {
        v.push(candidate(plan, Fix::Checkpointing(Checkpointing::Block)));
    }
    match plan.opt {
        OptimizerKind::Adam | OptimizerKind::Adamw => {
            // bitsandbytes' 8-bit AdamW: the same update with 8-bit moments (Dettmers et al. 2022).
            v.push(candidate(plan, Fix::Optimizer(OptimizerKind::Adamw8bit)));
            v.push(candidate(plan, Fix::Optimizer(OptimizerKind::SgdMomentum)));
        }
        OptimizerKind::SgdMomentum => v.push(candidate(plan, Fix::Optimizer(OptimizerKind::Sgd))),
        _ => {}
    }
    let size = state::input_size(plan);
    let positions = state::input_spec(plan).positions();
    if let Some(&smaller) = positions
        .iter()
        .rev()
        .find(|&&p| p * 2 <= size)
        .or_else(|| positions.iter().rev().find(|&&p| p < size))
    {
        v.push(candidate(plan, Fix::InputSize(smaller)));
    }
    // Everything that keeps the task as it is, together.
    let mut all = Vec::new();
    if plan.dtype == Precision::Fp32 {
        all.push(Fix::Precision(Precision::AmpBf16));
    }
    if info.blocks > 0 && plan.ckpt != Checkpointing::Block {
        all.push(Fix::Checkpointing(Checkpointing::Block));
    }
    if matches!(plan.opt, OptimizerKind::Adam | OptimizerKind::Adamw)
        && plan.optimizer_impl() == OptimizerImpl::Foreach
    {
        all.push(Fix::FusedOptimizer);
    }
    if all.len() >= 2 {
        let c = candidate(plan, Fix::Combined(all.clone()));
        // Together, if still too big, the changes also split the batch.
        let over = numbers_of(&c.plan).map(|n| n.device_total > capacity);
        let fit = if over == Some(true) {
            largest_fitting(&c.plan, plan.batch.saturating_sub(1), capacity, numbers_of)
        } else {
            None
        };
        match fit.and_then(|f| split_batch(plan.batch, plan.accumulation, f)) {
            Some((micro, steps)) => {
                all.push(Fix::Accumulate {
                    batch: micro,
                    steps,
                });
                v.push(c);
                v.push(candidate(plan, Fix::Combined(all)));
            }
            None => v.push(c),
        }
    }
    v
}

/// A ranked suggestion.
#[derive(Clone, Debug, PartialEq)]
pub struct Suggestion {
    pub fix: Fix,
    /// The plan with the change applied (what "Apply" sets).
    pub plan: Plan,
    /// Device total after the change.
    pub after: Bytes,
    pub saving: Bytes,
    pub fits: bool,
    /// Extra compute after the change, as a fraction of a step without checkpointing.
    pub extra_compute: f64,
    /// Extra compute of the current plan.
    pub extra_compute_before: f64,
}

/// The largest batch up to `limit` at which `numbers_of` says the plan fits `capacity`.
fn largest_fitting(
    plan: &Plan,
    limit: u64,
    capacity: Bytes,
    numbers_of: &dyn Fn(&Plan) -> Option<Numbers>,
) -> Option<u64> {
    if limit == 0 {
        return None;
    }
    let fits = |b: u64| {
        Ok(numbers_of(&Plan {
            batch: b,
            ..plan.clone()
        })
        .is_some_and(|n| n.device_total <= capacity))
    };
    crate::plan::sweep::largest_fitting(limit, fits)
        .ok()
        .flatten()
}

/// The micro-batch and steps that keep the effective batch when at most `fit` samples fit:
/// the fewest steps that divide the batch exactly (within twice the minimum), else `fit` per step.
pub fn split_batch(batch: u64, accumulation: u32, fit: u64) -> Option<(u64, u32)> {
    if fit == 0 || fit >= batch {
        return None;
    }
    let min_k = batch.div_ceil(fit);
    let k = (min_k..=(2 * min_k).min(batch))
        .find(|k| batch.is_multiple_of(*k))
        .unwrap_or(min_k);
    let micro = batch.div_ceil(k);
    let steps = (accumulation as u64).saturating_mul(k);
    (steps <= MAX_ACCUMULATION as u64).then_some((micro, steps as u32))
}

/// Evaluates and ranks the candidates. `numbers_of` gives a plan's numbers (`None` while its
/// model is still being simulated: that candidate is left out for now).
pub fn evaluate(
    current: &Numbers,
    capacity: Bytes,
    cands: &[Candidate],
    numbers_of: &dyn Fn(&Plan) -> Option<Numbers>,
) -> Vec<Suggestion> {
    let mut out: Vec<Suggestion> = Vec::new();
    for c in cands {
        let Some(n) = numbers_of(&c.plan) else {
            continue;
        };
        if n.device_total < current.device_total {
            out.push(Suggestion {
                fix: c.fix.clone(),
                plan: c.plan.clone(),
                after: n.device_total,
                saving: current.device_total - n.device_total,
                fits: n.device_total <= capacity,
                extra_compute: n.extra_compute(),
                extra_compute_before: current.extra_compute(),
            });
        }
    }
    // A combination only when no single change fits, and then only its best form.
    if out
        .iter()
        .any(|s| s.fits && !matches!(s.fix, Fix::Combined(_)))
    {
        out.retain(|s| !matches!(s.fix, Fix::Combined(_)));
    } else if out
        .iter()
        .filter(|s| matches!(s.fix, Fix::Combined(_)))
        .count()
        > 1
    {
        if let Some(worse) = out
            .iter()
            .position(|s| matches!(s.fix, Fix::Combined(_)) && !s.fits)
        {
            if out
                .iter()
                .any(|s| matches!(s.fix, Fix::Combined(_)) && s.fits)
            {
                out.remove(worse);
            }
        }
    }
    out.sort_by(|a, b| {
        b.fits
            .cmp(&a.fits)
            .then(if a.fits {
                a.fix.tier().cmp(&b.fix.tier())
            } else {
                std::cmp::Ordering::Equal
            })
            .then(b.saving.cmp(&a.saving))
    });
    out
}

/// What the change is, in a few words.
pub fn title(fix: &Fix, spec: InputSpec, lang: Lang) -> String {
    let fixed = |m: Msg| m.t(lang).to_string();
    match fix {
        Fix::Precision(Precision::AmpBf16) => fixed(Msg::FixAutocastBf16),
        Fix::Precision(Precision::AmpFp16) => fixed(Msg::FixAutocastFp16),
        Fix::Precision(Precision::Bf16) => fixed(Msg::FixPureBf16),
        Fix::Precision(Precision::Fp16) => fixed(Msg::FixPureFp16),
        Fix::Precision(Precision::Fp32) => "fp32".into(),
        Fix::Checkpointing(Checkpointing::Block) => fixed(Msg::FixCkptBlock),
        Fix::Checkpointing(Checkpointing::Stage) => fixed(Msg::FixCkptStage),
        Fix::Checkpointing(Checkpointing::Sqrt) => fixed(Msg::FixCkptSqrt),
        Fix::Checkpointing(Checkpointing::Segments(k)) => suggestions::segments(*k as u64, lang),
        Fix::Checkpointing(Checkpointing::None) => fixed(Msg::FixCkptNone),
        Fix::Accumulate { batch, steps } => suggestions::accumulate(*batch, *steps, lang),
        Fix::FusedOptimizer => fixed(Msg::FixFusedOptimizer),
        Fix::Optimizer(OptimizerKind::SgdMomentum) => fixed(Msg::FixSgdMomentum),
        Fix::Optimizer(OptimizerKind::Sgd) => fixed(Msg::FixPlainSgd),
        Fix::Optimizer(OptimizerKind::Adamw8bit) => fixed(Msg::FixAdamw8bit),
        Fix::Optimizer(o) => o.name().into(),
        Fix::InputSize(v) => suggestions::input_size(spec.is_image(), *v, lang),
        Fix::Combined(fixes) => fixes
            .iter()
            .map(|f| title(f, spec, lang))
            .collect::<Vec<_>>()
            .join(" + "),
    }
}

/// The change's effect: "−3.1 GiB → 20.4 GiB".
pub fn effect(s: &Suggestion, units: Units) -> String {
    format!(
        "−{} → {}",
        fmt_bytes(s.saving, units),
        fmt_bytes(s.after, units)
    )
}

/// What the change costs.
pub fn cost(s: &Suggestion, before: &Plan, lang: Lang) -> String {
    let fixed = |m: Msg| m.t(lang).to_string();
    let compute = s.extra_compute - s.extra_compute_before;
    let mut parts: Vec<String> = Vec::new();
    let fixes: Vec<&Fix> = match &s.fix {
        Fix::Combined(f) => f.iter().collect(),
        f => vec![f],
    };
    for f in fixes {
        parts.push(match f {
            Fix::FusedOptimizer => fixed(Msg::CostFusedOptimizer),
            Fix::Precision(Precision::AmpBf16 | Precision::AmpFp16) => fixed(Msg::CostAutocast),
            Fix::Precision(_) => fixed(Msg::CostPure16Bit),
            Fix::Checkpointing(_) => suggestions::extra_compute(&fmt_pct(compute), lang),
            Fix::Accumulate { batch, steps } => {
                let eff = batch * *steps as u64;
                let was = before.batch * before.accumulation as u64;
                suggestions::effective_batch(eff, was, lang)
            }
            Fix::Optimizer(OptimizerKind::Adamw8bit | OptimizerKind::Adam8bit) => {
                fixed(Msg::CostEightBitOptimizer)
            }
            Fix::Optimizer(_) => fixed(Msg::CostOtherOptimizer),
            Fix::InputSize(_) => fixed(Msg::CostInputSize),
            Fix::Combined(_) => String::new(),
        });
    }
    parts.dedup();
    parts.join(suggestions::cost_separator(lang))
}

/// A suggestion as the page lists it: the plan it applies, whether it fits, and its texts.
#[derive(Clone, Debug, PartialEq)]
pub struct Shown {
    pub plan: Plan,
    pub fits: bool,
    pub title: String,
    pub effect: String,
    pub cost: String,
}

/// Gives a plan's numbers, `None` while its model is still being simulated.
pub type NumbersOf<'a> = &'a dyn Fn(&Plan) -> Option<Numbers>;

/// What the page asks of the suggestions' code: it only runs when a plan does not fit, so a
/// `lazy-chunks` build fetches it then ([`crate::lazy_chunk`]).
#[derive(Clone, Copy)]
pub enum Ask<'a> {
    /// The candidates' plans, for the page to simulate.
    Plans {
        plan: &'a Plan,
        info: &'a CkptInfo,
        capacity: Bytes,
        numbers_of: NumbersOf<'a>,
    },
    /// The ranked suggestions, with their texts.
    Shown {
        plan: &'a Plan,
        current: &'a Numbers,
        info: &'a CkptInfo,
        capacity: Bytes,
        numbers_of: NumbersOf<'a>,
        spec: InputSpec,
        lang: Lang,
        units: Units,
    },
}

pub enum Answer {
    Plans(Vec<Plan>),
    Shown(Vec<Shown>),
}

fn answer(ask: Ask<'_>) -> Answer {
    match ask {
        Ask::Plans {
            plan,
            info,
            capacity,
            numbers_of,
        } => Answer::Plans(
            candidates(plan, info, capacity, numbers_of)
                .into_iter()
                .map(|c| c.plan)
                .collect(),
        ),
        Ask::Shown {
            plan,
            current,
            info,
            capacity,
            numbers_of,
            spec,
            lang,
            units,
        } => {
            let cands = candidates(plan, info, capacity, numbers_of);
            let shown = evaluate(current, capacity, &cands, numbers_of)
                .into_iter()
                .map(|s| Shown {
                    title: title(&s.fix, spec, lang),
                    effect: effect(&s, units),
                    cost: cost(&s, plan, lang),
                    fits: s.fits,
                    plan: s.plan,
                })
                .collect();
            Answer::Shown(shown)
        }
    }
}

crate::lazy_chunk!(suggestions, suggest_split, suggest_preload, fn answer(Ask<'_>) -> Answer);

/// The candidates' plans (see [`candidates`]); Err until the code is fetched ([`load`]).
pub fn candidate_plans(ask: Ask<'_>) -> Result<Vec<Plan>, crate::split::NotLoaded> {
    match call(ask)? {
        Answer::Plans(p) => Ok(p),
        Answer::Shown(_) => Ok(Vec::new()),
    }
}

/// The ranked suggestions with their texts; Err until the code is fetched ([`load`]).
pub fn shown(ask: Ask<'_>) -> Result<Vec<Shown>, crate::split::NotLoaded> {
    match call(ask)? {
        Answer::Shown(s) => Ok(s),
        Answer::Plans(_) => Ok(Vec::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::presets::gpus;
    use crate::ui::logic::workbench::{Wants, Workbench};

    /// Runs the page's logic: candidates, their models, then the ranking.
    fn suggest(plan: &Plan) -> (Numbers, Vec<Suggestion>) {
        let mut wb = Workbench::new();
        let info = wb.ckpt_info(plan);
        let cap = crate::plan::resolve::gpu(plan)
            .ok()
            .flatten()
            .unwrap()
            .memory;
        // As the page does: list, simulate what is missing, list again until nothing is.
        loop {
            let cands = candidates(plan, &info, cap, &|p| wb.numbers(p));
            let wants = Wants {
                exact: false,
                models: cands.iter().map(|c| c.plan.clone()).collect(),
                ..Default::default()
            };
            match wb.next_job(plan, &wants) {
                Some(j) => wb.run(j),
                None => break,
            }
        }
        let cands = candidates(plan, &info, cap, &|p| wb.numbers(p));
        let n = wb.numbers(plan).unwrap();
        let s = evaluate(&n, cap, &cands, &|p| wb.numbers(p));
        (n, s)
    }

    #[test]
    fn a_big_vision_batch_gets_ranked_fixes_that_fit() {
        let plan = Plan {
            batch: 512,
            gpu: Some("rtx4090".into()),
            ..Plan::new("resnet50")
        };
        let (n, s) = suggest(&plan);
        assert!(
            n.device_total > gpus::find("rtx4090").unwrap().memory,
            "the plan should not fit"
        );
        assert!(!s.is_empty());
        assert!(s[0].fits, "the best suggestion fits: {:?}", s[0].fix);
        for w in s.windows(2) {
            assert!(w[0].fits >= w[1].fits, "fitting suggestions come first");
        }
        assert!(s.iter().all(|x| x.saving.0 > 0 && x.after < n.device_total));
        let acc = s
            .iter()
            .find(|x| matches!(x.fix, Fix::Accumulate { .. }))
            .expect("an accumulation split");
        let Fix::Accumulate { batch, steps } = acc.fix else {
            unreachable!()
        };
        assert_eq!(batch * steps as u64, 512, "same effective batch");
        assert!(acc.fits);
        assert!(s
            .iter()
            .any(|x| x.fix == Fix::Precision(Precision::AmpBf16)));
        let ck = s
            .iter()
            .find(|x| matches!(x.fix, Fix::Checkpointing(_)))
            .expect("checkpointing");
        assert!(
            cost(ck, &plan, Lang::En).contains("compute"),
            "{}",
            cost(ck, &plan, Lang::En)
        );
        // Applying a suggestion gives its plan, which the estimator confirms.
        let e = crate::plan::estimate(&s[0].plan).unwrap();
        assert!(e.device_total <= gpus::find("rtx4090").unwrap().memory);
    }

    #[test]
    fn a_llm_that_needs_everything_gets_a_combination() {
        let plan = Plan {
            batch: 8,
            seq: Some(1024),
            gpu: Some("rtx4090".into()),
            ..Plan::new("gpt2-medium")
        };
        let (_, s) = suggest(&plan);
        assert!(!s.is_empty());
        let texts: Vec<String> = s
            .iter()
            .map(|x| {
                format!(
                    "{} {}",
                    title(&x.fix, state::input_spec(&plan), Lang::En),
                    effect(x, Units::Binary)
                )
            })
            .collect();
        assert!(
            texts.iter().all(|t| t.contains("−") && t.contains("→")),
            "{texts:?}"
        );
        assert!(s.iter().any(|x| x.fits), "{texts:?}");
    }

    #[test]
    fn splitting_the_batch_keeps_the_effective_batch() {
        assert_eq!(split_batch(64, 1, 20), Some((16, 4)));
        assert_eq!(split_batch(64, 2, 32), Some((32, 4)));
        assert_eq!(split_batch(97, 1, 40), Some((33, 3)));
        assert_eq!(split_batch(8, 1, 8), None);
        assert_eq!(split_batch(8, 1, 0), None);
        assert_eq!(
            split_batch(1 << 20, 1 << 15, 1),
            None,
            "beyond the accumulation limit"
        );
    }

    #[test]
    fn titles_in_both_languages() {
        let spec = InputSpec::Image {
            default: 224,
            min: 32,
        };
        assert_eq!(
            title(
                &Fix::Accumulate {
                    batch: 16,
                    steps: 4
                },
                spec,
                Lang::En
            ),
            "Batch 16 × 4 accumulation steps"
        );
        assert_eq!(
            title(&Fix::Precision(Precision::AmpBf16), spec, Lang::Zh),
            "bf16 自动混合精度"
        );
        assert_eq!(
            title(
                &Fix::Combined(vec![Fix::FusedOptimizer, Fix::InputSize(112)]),
                spec,
                Lang::En
            ),
            "Fused optimizer (fused=True) + Resolution 112"
        );
    }
}
