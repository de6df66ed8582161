//! The page's controls as plain functions on the [`Plan`], so they are tested natively and the
//! components stay thin: slider scales, parsing what the user typed, which controls apply to
//! the chosen model, and the pickers' options. Nothing here knows about Leptos or the DOM.

use crate::estimator::config::Checkpointing;
use crate::estimator::decimal::Fixed;
use crate::estimator::error::EstimateError;
use crate::estimator::units::parse_decimal;
use crate::estimator::{MAX_ACCUMULATION, MAX_BATCH, MAX_RES, MAX_SEQ};
use crate::plan::Plan;
use crate::plan::PlanError;
use crate::presets::gpus::{self, GPUS};
use crate::presets::models::{self, Family, Group, InputKind, MODELS};

use super::ckpt_info::CkptInfo;
use super::i18n::Msg;

/// The batch slider's range (log scale from 1 to 4096).
pub const BATCH_MIN: u64 = 1;
pub const BATCH_MAX: u64 = 4096;
/// Slider positions per doubling of the batch: fine enough that every batch up to 100 has its
/// own position.
pub const STEPS_PER_OCTAVE: u32 = 100;

/// The GPU the page opens with: a common 24 GB card, so the verdict means something at once.
pub const DEFAULT_GPU: &str = "rtx4090";

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
    // (A browser writes plain decimals; an exponent is taken too, so an absurd value clamps.)
    let s = s.trim();
    let (m, e) = s.split_once(['e', 'E']).unwrap_or((s, "0"));
    let e: i32 = e.strip_prefix('+').unwrap_or(e).parse().ok()?;
    let p = parse_decimal(m)? * 10f64.powi(e.clamp(-400, 400));
    Some(slider_to_batch(p.round().min(u32::MAX as f64) as u32))
}

/// Reads the batch number box. Any whole number is taken, even 0 or one above the slider's range:
/// [`check_batch`] judges it and the page shows the message.
pub fn parse_batch(s: &str) -> Option<u64> {
    s.trim().parse::<u64>().ok()
}

/// Reads a whole number typed in a box (resolution, sequence length, segments, steps).
pub fn parse_uint(s: &str) -> Option<u64> {
    let s = s.trim();
    if s.is_empty() || s.len() > 12 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// The estimator's verdict on a batch size, without simulating (the page validates the batch
/// itself because it never re-simulates on a batch change).
pub fn check_batch(b: u64) -> Result<(), PlanError> {
    if b < 1 {
        return Err(PlanError::Estimate(EstimateError::TooSmall {
            field: "batch",
            min: 1,
            got: b,
        }));
    }
    if b > MAX_BATCH {
        return Err(PlanError::Estimate(EstimateError::TooBig {
            field: "batch",
            max: MAX_BATCH,
            got: b,
        }));
    }
    Ok(())
}

/// Slider positions of the sequence length: powers of two and the halfway steps between them
/// (128, 192, 256, 384, … 131072), so every position is a round size people train at.
pub fn seq_positions() -> Vec<u64> {
    let mut v = Vec::new();
    let mut p = 128u64;
    while p <= 131_072 {
        v.push(p);
        if p < 131_072 {
            v.push(p + p / 2);
        }
        p *= 2;
    }
    v
}

/// Slider positions of the image side: 32 to 2048 pixels, in steps of 32 up to 512, then of 64
/// up to 1024, then of 256.
pub fn res_positions() -> Vec<u64> {
    let mut v: Vec<u64> = (1..=16).map(|i| i * 32).collect();
    v.extend((9..=16).map(|i| i * 64));
    v.extend((5..=8).map(|i| i * 256));
    v
}

/// The index of the position nearest to `value` on a log scale.
pub fn nearest_position(positions: &[u64], value: u64) -> usize {
    let lv = (value.max(1) as f64).ln();
    positions
        .iter()
        .enumerate()
        .min_by(|(_, a), (_, b)| {
            (((**a as f64).ln() - lv).abs()).total_cmp(&((**b as f64).ln() - lv).abs())
        })
        .map_or(0, |(i, _)| i)
}

/// What the model eats: square images or token sequences, with its limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InputSpec {
    Image { default: u64, min: u64 },
    Tokens { default: u64, max: Option<u64> },
}

impl InputSpec {
    /// The slider positions this model accepts.
    pub fn positions(self) -> Vec<u64> {
        match self {
            InputSpec::Image { min, .. } => {
                res_positions().into_iter().filter(|&r| r >= min).collect()
            }
            InputSpec::Tokens { max, .. } => seq_positions()
                .into_iter()
                .filter(|&s| max.is_none_or(|m| s <= m))
                .collect(),
        }
    }
    pub fn is_image(self) -> bool {
        matches!(self, InputSpec::Image { .. })
    }
}

/// The plan's input kind (a pasted config.json is a language model).
pub fn input_spec(plan: &Plan) -> InputSpec {
    if plan.hf_config.is_some() {
        let max = plan.hf_config.as_ref().and_then(|c| {
            let kind = c.get("model_type").and_then(|v| v.as_str()).unwrap_or("");
            let key = if kind == "gpt2" {
                "n_positions"
            } else {
                "max_position_embeddings"
            };
            // Only learned position tables (GPT-2, BERT, RoBERTa) stop at their size; rotary
            // models do not.
            matches!(kind, "gpt2" | "bert" | "roberta")
                .then(|| c.get(key).and_then(|v| v.as_u64()))
                .flatten()
        });
        return InputSpec::Tokens { default: 512, max };
    }
    match models::find(&plan.model).map(|m| m.input) {
        Some(InputKind::Image {
            default_res,
            min_res,
        }) => InputSpec::Image {
            default: default_res,
            min: min_res,
        },
        Some(InputKind::Tokens {
            default_seq,
            max_seq,
        }) => InputSpec::Tokens {
            default: default_seq,
            max: max_seq,
        },
        None => InputSpec::Image {
            default: 224,
            min: 1,
        },
    }
}

/// The input size the plan runs at (its own or the model's default).
pub fn input_size(plan: &Plan) -> u64 {
    match input_spec(plan) {
        InputSpec::Image { default, .. } => plan.res.unwrap_or(default),
        InputSpec::Tokens { default, .. } => plan.seq.unwrap_or(default),
    }
}

/// Sets the input size (resolution or sequence length, whichever the model takes).
pub fn set_input_size(plan: &mut Plan, v: u64) {
    if input_spec(plan).is_image() {
        plan.res = Some(v);
    } else {
        plan.seq = Some(v);
    }
}

/// The plan with another input size.
pub fn with_input_size(plan: &Plan, v: u64) -> Plan {
    let mut p = plan.clone();
    set_input_size(&mut p, v);
    p
}

/// The model's family (a pasted config is a language model).
pub fn family(plan: &Plan) -> Family {
    if plan.hf_config.is_some() {
        return Family::Language;
    }
    models::find(&plan.model).map_or(Family::Cnn, |m| m.family)
}

/// Which optional controls apply to the plan's model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Applies {
    pub resolution: bool,
    pub seq_len: bool,
    /// Attention kernel: transformers only.
    pub attention: bool,
    pub checkpointing: bool,
    /// Optimizer, checkpointing and accumulation: not when serving (inference mode).
    pub training: bool,
    /// foreach, fused or for-loop: PyTorch's optimizers (transformers' Adafactor has one loop).
    pub optimizer_impl: bool,
    /// Padded or unpadded batch: decoders trained with SDPA, whose causal mask it decides.
    pub causal_mask: bool,
}

pub fn applies(plan: &Plan, ckpt: &CkptInfo) -> Applies {
    let image = input_spec(plan).is_image();
    let fam = family(plan);
    Applies {
        resolution: image,
        seq_len: !image,
        attention: matches!(fam, Family::Language | Family::VisionTransformer),
        checkpointing: ckpt.any() && plan.mode != crate::estimator::config::Mode::Infer,
        training: plan.mode != crate::estimator::config::Mode::Infer,
        optimizer_impl: plan.mode != crate::estimator::config::Mode::Infer
            && !plan.opt.loops_over_parameters(),
        causal_mask: plan.mode != crate::estimator::config::Mode::Infer
            && plan.attn == crate::estimator::config::AttnImpl::Sdpa
            && has_causal_mask(plan),
    }
}

/// The plan's GPU preset, if it names one.
pub fn gpu_of(plan: &Plan) -> Option<gpus::Gpu> {
    crate::plan::resolve::gpu(plan).ok().flatten()
}

/// Whether the plan's model is a decoder whose causal mask the batch's padding decides (GPT-2,
/// LLaMA, Mistral, Qwen2, LLaVA's language model — not the encoders BERT, RoBERTa and
/// ModernBERT, whose attention is bidirectional, nor vision models).
pub fn has_causal_mask(plan: &Plan) -> bool {
    let kind = match &plan.hf_config {
        Some(c) => c.get("model_type").and_then(|t| t.as_str()),
        None => models::text_model_type(&plan.model),
    };
    kind.is_some_and(|t| !matches!(t, "bert" | "roberta" | "modernbert"))
}

/// The checkpointing picker's choices for a model: `(value, label)`. `stage` only where it
/// differs from `block` (ResNet stages).
pub fn ckpt_choices(info: &CkptInfo) -> Vec<(&'static str, Msg)> {
    let mut v = vec![("none", Msg::CkptNone)];
    if info.stages > 0 && info.stages != info.blocks {
        v.push(("stage", Msg::CkptEveryStage));
    }
    if info.blocks > 0 {
        v.push(("block", Msg::CkptEveryBlock));
    }
    if info.segments {
        v.push(("sqrt", Msg::SqrtSegments));
        v.push(("k", Msg::CkptKSegments));
    }
    v
}

/// The picker value of a policy (`k` for any number of segments).
pub fn ckpt_choice(c: Checkpointing) -> &'static str {
    match c {
        Checkpointing::None => "none",
        Checkpointing::Stage => "stage",
        Checkpointing::Block => "block",
        Checkpointing::Sqrt => "sqrt",
        Checkpointing::Segments(_) => "k",
    }
}

/// The policy for a picker value; `k` keeps the current number of segments, or starts at 2.
pub fn ckpt_from_choice(choice: &str, current: Checkpointing) -> Checkpointing {
    match choice {
        "stage" => Checkpointing::Stage,
        "block" => Checkpointing::Block,
        "sqrt" => Checkpointing::Sqrt,
        "k" => match current {
            Checkpointing::Segments(k) => Checkpointing::Segments(k),
            _ => Checkpointing::Segments(2),
        },
        _ => Checkpointing::None,
    }
}

/// The plan the page opens with: the core's default plan (or the first preset) on [`DEFAULT_GPU`].
pub fn initial_plan() -> Plan {
    let plan = Plan {
        gpu: Some(DEFAULT_GPU.into()),
        ..Plan::default()
    };
    if MODELS.iter().any(|m| m.id == plan.model) {
        return plan;
    }
    Plan {
        model: MODELS
            .first()
            .map_or(plan.model.clone(), |m| m.id.to_string()),
        ..plan
    }
}

/// Options of the model picker: (id, display name), in catalogue order.
pub fn model_options() -> Vec<(&'static str, &'static str)> {
    MODELS.iter().map(|m| (m.id, m.name)).collect()
}

/// The model picker's groups in [`Group::ALL`]'s order, each with its presets in catalogue
/// order.
pub fn model_groups() -> Vec<(Group, Vec<(&'static str, &'static str)>)> {
    Group::ALL
        .into_iter()
        .map(|g| {
            (
                g,
                MODELS
                    .iter()
                    .filter(|m| m.group == g)
                    .map(|m| (m.id, m.name))
                    .collect::<Vec<_>>(),
            )
        })
        .filter(|(_, v)| !v.is_empty())
        .collect()
}

/// The model picker's value for a plan (`custom` for a pasted config).
pub fn model_choice(plan: &Plan) -> String {
    if plan.hf_config.is_some() {
        "custom".into()
    } else {
        plan.model.clone()
    }
}

/// Selects a model. Settings that belonged to the previous model (input size, a pasted config,
/// checkpointing it may not support, the attention kernel) go back to defaults.
pub fn set_model(plan: &mut Plan, id: &str) {
    if plan.model != id || plan.hf_config.is_some() {
        plan.model = id.to_string();
        plan.hf_config = None;
        plan.res = None;
        plan.seq = None;
        plan.ckpt = Checkpointing::None;
    }
}

/// Uses a pasted `config.json`. Only its JSON shape is checked here; the estimator says what it
/// cannot model.
pub fn set_config(plan: &mut Plan, text: &str) -> Result<(), PlanError> {
    let v = super::json::parse(text)
        .map_err(|_| PlanError::CodeNotLoaded)?
        .map_err(|e| PlanError::Estimate(EstimateError::BadHfConfig(e)))?;
    set_config_value(plan, v)
}

/// [`set_config`] for a config.json already read (one fetched from the Hub).
pub fn set_config_value(plan: &mut Plan, v: serde_json::Value) -> Result<(), PlanError> {
    if !v.is_object() {
        return Err(PlanError::Estimate(EstimateError::BadHfConfig(
            "a config.json is a JSON object".into(),
        )));
    }
    let kind = v
        .get("model_type")
        .and_then(|t| t.as_str())
        .unwrap_or("config");
    plan.model = kind
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        .take(40)
        .collect();
    if plan.model.is_empty() {
        plan.model = "config".into();
    }
    plan.hf_config = Some(v);
    plan.res = None;
    plan.seq = None;
    plan.ckpt = Checkpointing::None;
    Ok(())
}

/// Clamps a typed input size into the estimator's range.
pub fn clamp_input(v: u64, spec: InputSpec) -> u64 {
    match spec {
        InputSpec::Image { min, .. } => v.clamp(min.max(1), MAX_RES),
        InputSpec::Tokens { max, .. } => v.clamp(1, max.unwrap_or(MAX_SEQ).min(MAX_SEQ)),
    }
}

/// Clamps typed accumulation steps into the estimator's range.
pub fn clamp_accumulation(v: u64) -> u32 {
    v.clamp(1, MAX_ACCUMULATION as u64) as u32
}

/// The GPU picker's options in catalogue order: id, and the name with its memory size and
/// bandwidth ("H100 80 GB · 3350 GB/s").
pub fn gpu_options() -> Vec<(&'static str, String)> {
    GPUS.iter()
        .map(|g| {
            (
                g.id,
                format!("{} · {} GB/s", g.name, Fixed(g.bandwidth_gbs, 0)),
            )
        })
        .collect()
}

/// The picker value for the plan's GPU (`custom` for a custom capacity).
pub fn gpu_choice(plan: &Plan) -> String {
    match plan.gpu.as_deref() {
        Some(id) if id.starts_with("custom:") => "custom".into(),
        Some(id) => id.into(),
        None => String::new(),
    }
}

/// The custom capacity in GiB, if the plan has one.
pub fn custom_gib(plan: &Plan) -> Option<f64> {
    parse_decimal(plan.gpu.as_deref()?.strip_prefix("custom:")?)
}

/// A custom capacity as a GPU id (`custom:24`); `None` unless a positive, finite size.
pub fn custom_gpu(gib: &str) -> Option<String> {
    let v = parse_decimal(gib.trim())?;
    let id = format!("custom:{}", trim_float(v));
    gpus::find(&id).map(|_| id)
}

/// A float without trailing zeros ("24", "23.5").
pub fn trim_float(v: f64) -> String {
    let s = Fixed(v, 3).to_string();
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// Backing-store size of a canvas shown at `css` pixels on a screen with `ratio` device pixels per
/// CSS pixel, so charts stay sharp on high-DPI screens.
pub fn backing_size(css: (f64, f64), ratio: f64) -> (u32, u32) {
    let r = if ratio.is_finite() && ratio > 0.0 {
        ratio.min(4.0)
    } else {
        1.0
    };
    let px = |v: f64| (v.max(1.0) * r).round() as u32;
    (px(css.0), px(css.1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::estimate;

    #[test]
    fn the_padding_control_applies_to_decoders_trained_with_sdpa() {
        for (model, yes) in [
            ("gpt2", true),
            ("llama-3-8b", true),
            ("qwen2-0.5b", true),
            ("bert-base", false),
            ("roberta-base", false),
            ("modernbert-base", false),
            ("llava-1.5-7b", true),
            ("vit_b_16", false),
            ("resnet50", false),
            ("lstm-lm", false),
        ] {
            assert_eq!(has_causal_mask(&Plan::new(model)), yes, "{model}");
        }
        let shown = |p: Plan| applies(&p, &CkptInfo::default()).causal_mask;
        assert!(shown(Plan::new("gpt2")));
        assert!(
            !shown(Plan {
                attn: crate::estimator::config::AttnImpl::Eager,
                ..Plan::new("gpt2")
            }),
            "eager always builds its mask"
        );
        assert!(
            !shown(Plan {
                mode: crate::estimator::config::Mode::Infer,
                ..Plan::new("gpt2")
            }),
            "serving never builds it"
        );
    }

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
        assert_eq!(parse_slider("1e300"), Some(4096));
        assert_eq!(parse_uint("0512"), Some(512));
        assert_eq!(parse_uint("5e3"), None);
        assert_eq!(parse_uint("９"), None);
        assert!(check_batch(0)
            .unwrap_err()
            .to_string()
            .contains("batch must be at least 1"));
        assert!(check_batch(MAX_BATCH + 1).is_err());
        assert!(check_batch(7).is_ok());
    }

    #[test]
    fn sequence_positions_are_round_sizes_from_128_to_131072() {
        let s = seq_positions();
        assert_eq!((s[0], s[1], *s.last().unwrap()), (128, 192, 131_072));
        assert_eq!(s.len(), 21);
        assert!(s.contains(&8192) && s.contains(&3072));
        assert!(s.windows(2).all(|w| w[0] < w[1]));
        let r = res_positions();
        assert_eq!((r[0], *r.last().unwrap()), (32, 2048));
        assert!(r.contains(&224) && r.contains(&512) && r.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(s[nearest_position(&s, 8000)], 8192);
        assert_eq!(r[nearest_position(&r, 230)], 224);
    }

    #[test]
    fn controls_that_do_not_apply_disappear() {
        let gpt2 = Plan::new("gpt2");
        let a = applies(&gpt2, &CkptInfo::probe(&gpt2));
        assert!(!a.resolution && a.seq_len && a.attention && a.checkpointing);
        let rn = Plan::new("resnet50");
        let a = applies(&rn, &CkptInfo::probe(&rn));
        assert!(a.resolution && !a.seq_len && !a.attention && a.checkpointing);
        let lstm = Plan::new("lstm-lm");
        let a = applies(&lstm, &CkptInfo::probe(&lstm));
        assert!(!a.resolution && a.seq_len && !a.attention && !a.checkpointing);
        let vit = Plan::new("vit_b_16");
        assert!(applies(&vit, &CkptInfo::probe(&vit)).attention);
        assert!(a.optimizer_impl);
        let mut ada = Plan::new("gpt2");
        ada.opt = crate::estimator::optimizer::OptimizerKind::Adafactor;
        let a = applies(&ada, &CkptInfo::probe(&ada));
        assert!(
            a.training && !a.optimizer_impl,
            "Adafactor has no foreach or fused step"
        );
    }

    #[test]
    fn input_limits_follow_the_model() {
        assert_eq!(
            *input_spec(&Plan::new("gpt2")).positions().last().unwrap(),
            1024
        );
        assert_eq!(
            *input_spec(&Plan::new("llama-3-8b"))
                .positions()
                .last()
                .unwrap(),
            131_072
        );
        assert_eq!(input_spec(&Plan::new("resnet50")).positions()[0], 32);
        assert_eq!(input_size(&Plan::new("llama-3-70b")), 8192);
        assert_eq!(clamp_input(5000, input_spec(&Plan::new("gpt2"))), 1024);
        let mut p = Plan::new("gpt2");
        set_input_size(&mut p, 256);
        assert_eq!((p.seq, p.res), (Some(256), None));
    }

    #[test]
    fn ckpt_choices_per_model() {
        let names = |id: &str| {
            ckpt_choices(&CkptInfo::probe(&Plan::new(id)))
                .into_iter()
                .map(|c| c.0)
                .collect::<Vec<_>>()
        };
        assert_eq!(names("resnet50"), ["none", "stage", "block", "sqrt", "k"]);
        assert_eq!(names("gpt2"), ["none", "block", "sqrt", "k"]);
        assert_eq!(names("lstm-lm"), ["none"]);
        assert_eq!(
            ckpt_from_choice("k", Checkpointing::Segments(5)),
            Checkpointing::Segments(5)
        );
        assert_eq!(
            ckpt_from_choice("k", Checkpointing::Block),
            Checkpointing::Segments(2)
        );
        for c in [
            Checkpointing::None,
            Checkpointing::Stage,
            Checkpointing::Block,
            Checkpointing::Sqrt,
            Checkpointing::Segments(3),
        ] {
            assert_eq!(
                ckpt_from_choice(ckpt_choice(c), Checkpointing::Segments(3)),
                c
            );
        }
    }

    #[test]
    fn changing_model_resets_what_belonged_to_the_old_one() {
        let mut p = Plan {
            res: Some(512),
            ckpt: Checkpointing::Stage,
            ..initial_plan()
        };
        let same = p.model.clone();
        set_model(&mut p, &same);
        assert_eq!(p.res, Some(512));
        set_model(&mut p, "resnet18");
        assert_eq!(
            (p.model.as_str(), p.res, p.ckpt),
            ("resnet18", None, Checkpointing::None)
        );
    }

    #[test]
    fn pasted_config_becomes_a_language_model() {
        let mut p = initial_plan();
        assert!(set_config(&mut p, "[1,2]").is_err());
        assert!(set_config(&mut p, "{nope").is_err());
        let cfg = r#"{"model_type": "gpt2", "n_embd": 256, "n_layer": 2, "n_head": 4, "n_positions": 512, "vocab_size": 1000}"#;
        set_config(&mut p, cfg).unwrap();
        assert_eq!(model_choice(&p), "custom");
        assert_eq!(
            input_spec(&p),
            InputSpec::Tokens {
                default: 512,
                max: Some(512)
            }
        );
        assert!(estimate(&p).is_ok());
        set_model(&mut p, "gpt2");
        assert!(p.hf_config.is_none());
    }

    #[test]
    fn initial_plan_is_a_preset_on_a_gpu() {
        let p = initial_plan();
        assert!(model_options().iter().any(|(id, _)| *id == p.model));
        assert!(p.gpu.as_deref().and_then(gpus::find).is_some());
        let groups = model_groups();
        assert_eq!(groups[0].0, Group::Cnn);
        let moe = groups
            .iter()
            .find(|g| g.0 == Group::MixtureOfExperts)
            .unwrap();
        assert!(moe.1.iter().any(|(id, _)| *id == "deepseek-v3"));
        assert_eq!(
            groups.iter().map(|g| g.1.len()).sum::<usize>(),
            MODELS.len()
        );
    }

    #[test]
    fn gpu_options_show_memory_and_bandwidth() {
        let o = gpu_options();
        assert!(
            o.iter()
                .any(|(id, t)| *id == "h100-80" && t == "H100 80 GB · 3350 GB/s"),
            "{o:?}"
        );
        for want in [
            "v100-16",
            "v100-32",
            "a100-40",
            "a100-80",
            "h200-141",
            "b200-192",
            "gh200-96",
            "l4",
            "t4",
            "a10",
            "rtx3090",
            "rtx4090",
            "rtx5090",
            "rtx6000ada",
            "mi300x",
            "m3-max-128",
        ] {
            assert!(
                o.iter().any(|(id, _)| *id == want),
                "{want} missing from the catalogue"
            );
        }
    }

    #[test]
    fn custom_gpu_capacity() {
        assert_eq!(custom_gpu("24").as_deref(), Some("custom:24"));
        assert_eq!(custom_gpu("23.50").as_deref(), Some("custom:23.5"));
        assert_eq!(custom_gpu("-1"), None);
        assert_eq!(custom_gpu("NaN"), None);
        let p = Plan {
            gpu: Some("custom:12".into()),
            ..initial_plan()
        };
        assert_eq!(
            (gpu_choice(&p).as_str(), custom_gib(&p)),
            ("custom", Some(12.0))
        );
    }

    #[test]
    fn backing_store_scales_with_the_pixel_ratio() {
        assert_eq!(backing_size((640.0, 360.0), 2.0), (1280, 720));
        assert_eq!(backing_size((640.0, 360.0), f64::NAN), (640, 360));
        assert_eq!(backing_size((0.0, 0.0), 1.0), (1, 1));
    }
}
