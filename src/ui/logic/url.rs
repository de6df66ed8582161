//! The page's state in the query string, both ways. Every control has a key; what a link sets
//! is checked as strictly as what a user types, and anything that cannot be used falls back to
//! its default and is named in a notice (the names of known keys only: nothing a link carries is
//! ever echoed, and the page inserts no text as HTML anyway).
//!
//! Keys: `model`, `cfg` (a pasted config.json), `batch`, `res`, `seq`, `dtype`, `opt`,
//! `opt_impl`, `ckpt`, `acc`, `attn`, `gpu`, `lang`, `units`, `embed`, `chart`, `hf_endpoint`
//! (a Hugging Face mirror for the model-id box, kept in every link), and `x`: every
//! other plan setting that differs from its default (mode, LoRA, quantization, the parallel
//! layout, offloading, …) as one JSON object with the plan's own keys, read by the plan's own
//! deserializer (unknown keys refused), so settings added to [`Plan`] later round-trip too.

use crate::estimator::config::{AttnImpl, Checkpointing, OptimizerImpl, OptimizerKind, Precision};
use crate::estimator::{MAX_ACCUMULATION, MAX_BATCH};
use crate::plan::build_graph;
use crate::plan::Plan;
use crate::presets::{gpus, models};

use super::ckpt_info::CkptInfo;
use super::i18n::{Lang, Units};
use super::json;
use super::state::{self, InputSpec};
use super::workbench::model_plan;

/// The longest query string read; longer ones are ignored whole.
pub const MAX_QUERY: usize = 64 * 1024;
/// The most `key=value` pairs read.
pub const MAX_PAIRS: usize = 64;

/// Which chart a view shows (the embed card shows one).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ChartKind {
    #[default]
    Batch,
    Length,
    Checkpoint,
    Timeline,
    Layers,
}

impl ChartKind {
    pub const ALL: [ChartKind; 5] = [
        ChartKind::Batch,
        ChartKind::Length,
        ChartKind::Checkpoint,
        ChartKind::Timeline,
        ChartKind::Layers,
    ];
    pub fn code(self) -> &'static str {
        match self {
            ChartKind::Batch => "batch",
            ChartKind::Length => "length",
            ChartKind::Checkpoint => "checkpoint",
            ChartKind::Timeline => "timeline",
            ChartKind::Layers => "layers",
        }
    }
    pub fn parse(s: &str) -> Option<ChartKind> {
        Self::ALL.into_iter().find(|c| c.code() == s)
    }
    /// The `data-testid` of the element holding the chart.
    pub fn test_id(self) -> &'static str {
        match self {
            ChartKind::Batch => "chart-batch",
            ChartKind::Length => "chart-length",
            ChartKind::Checkpoint => "chart-checkpoint",
            ChartKind::Timeline => "chart-timeline",
            ChartKind::Layers => "chart-layers",
        }
    }
}

/// How the page shows the plan: language (when the link sets one), units, embed card.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct View {
    pub lang: Option<Lang>,
    pub units: Units,
    pub embed: bool,
    pub chart: ChartKind,
}

impl View {
    /// What a link keeps of the view ([`to_query`]): English, the default, is not written, so
    /// a link made in English opens in the reader's own language.
    pub fn linked(self) -> View {
        View {
            lang: self.lang.filter(|l| *l != Lang::En),
            ..self
        }
    }
}

/// What a query string gave: the plan and view, and what could not be used.
#[derive(Clone, Debug, PartialEq)]
pub struct Parsed {
    pub plan: Plan,
    pub view: View,
    /// Known keys whose values were refused (each falls back to its default).
    pub rejected: Vec<&'static str>,
    /// Keys the page does not know.
    pub unknown: usize,
    /// The query was too long or had too many pairs, and was ignored.
    pub too_long: bool,
    /// The plan's checkpointing options, when the graph the parse built tells them
    /// ([`CkptInfo::of_graph`]): the page starts with them instead of building the model again.
    pub ckpt: Option<CkptInfo>,
}

impl Parsed {
    /// Whether the page should show a notice.
    pub fn has_problems(&self) -> bool {
        !self.rejected.is_empty() || self.unknown > 0 || self.too_long
    }
}

const KEYS: [&str; 18] = [
    "model",
    "cfg",
    "batch",
    "res",
    "seq",
    "dtype",
    "opt",
    "opt_impl",
    "ckpt",
    "acc",
    "attn",
    "gpu",
    "lang",
    "units",
    "embed",
    "chart",
    "hf_endpoint",
    "x",
];

/// Decodes `%XX` escapes and `+`; `None` for a broken escape or bytes that are not UTF-8.
pub fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let hex = b.get(i + 1..i + 3)?;
                let v = u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?;
                out.push(v);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// Escapes everything but unreserved characters and the few that read well in a query (`:`, `,`).
pub fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for &b in s.as_bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b':' | b',') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn uint(v: &str, min: u64, max: u64) -> Option<u64> {
    state::parse_uint(v).filter(|n| (min..=max).contains(n))
}

fn precision(v: &str) -> Option<Precision> {
    [
        Precision::Fp32,
        Precision::AmpBf16,
        Precision::AmpFp16,
        Precision::Bf16,
        Precision::Fp16,
    ]
    .into_iter()
    .find(|p| p.name() == v)
}

fn optimizer(v: &str) -> Option<OptimizerKind> {
    OptimizerKind::ALL.into_iter().find(|o| o.name() == v)
}

pub fn optimizer_impl_name(o: OptimizerImpl) -> &'static str {
    match o {
        OptimizerImpl::Foreach => "foreach",
        OptimizerImpl::Fused => "fused",
        OptimizerImpl::ForLoop => "for_loop",
    }
}

fn optimizer_impl(v: &str) -> Option<OptimizerImpl> {
    [
        OptimizerImpl::Foreach,
        OptimizerImpl::Fused,
        OptimizerImpl::ForLoop,
    ]
    .into_iter()
    .find(|o| optimizer_impl_name(*o) == v)
}

pub fn attn_name(a: AttnImpl) -> &'static str {
    match a {
        AttnImpl::Sdpa => "sdpa",
        AttnImpl::Eager => "eager",
    }
}

fn attn(v: &str) -> Option<AttnImpl> {
    [AttnImpl::Sdpa, AttnImpl::Eager]
        .into_iter()
        .find(|a| attn_name(*a) == v)
}

fn ckpt(v: &str) -> Option<Checkpointing> {
    if v.len() > 12 {
        return None;
    }
    Checkpointing::parse(v)
        .ok()
        .filter(|c| !matches!(c, Checkpointing::Segments(k) if *k > 4096))
}

/// A query string's pairs (without its `?`), at most [`MAX_PAIRS`]: the decoded key (`None` for
/// a broken escape) and the raw value.
fn pairs(query: &str) -> impl Iterator<Item = (Option<String>, &str)> {
    let q = query.strip_prefix('?').unwrap_or(query);
    q.split('&')
        .filter(|p| !p.is_empty())
        .take(MAX_PAIRS)
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (percent_decode(k), v)
        })
}

/// Whether the plan a query string asks for needs the builders behind [`crate::plan::lazy`]
/// (all but the ResNets'): a `cfg`, or a `model` whose builder is deferred. Judged before
/// [`parse_query`], which builds the plan to check it.
pub fn wants_lazy_models(query: &str) -> bool {
    pairs(query).any(|(k, v)| match k.as_deref() {
        Some("cfg") => true,
        Some("model") => percent_decode(v)
            .and_then(|m| models::find(&m))
            .is_some_and(crate::plan::lazy::deferred),
        _ => false,
    })
}

/// The language a query string sets (`lang`), judged before [`parse_query`]: the page fetches
/// the Chinese texts before it mounts in Chinese.
pub fn lang(query: &str) -> Option<Lang> {
    let (_, v) = pairs(query).find(|(k, _)| k.as_deref() == Some("lang"))?;
    percent_decode(v).and_then(|l| Lang::parse(&l))
}

/// The longest `hf_endpoint` kept: a mirror's address, not a document.
const MAX_ENDPOINT: usize = 256;

/// The Hugging Face endpoint a query string names (`hf_endpoint`), as written: the model-id box
/// checks it ([`super::hub::Endpoint::parse`]) when it fetches, so its code stays out of the
/// first load; too long a value counts as none.
pub fn hf_endpoint(query: &str) -> Option<String> {
    let (_, v) = pairs(query).find(|(k, _)| k.as_deref() == Some("hf_endpoint"))?;
    percent_decode(v).filter(|e| e.len() <= MAX_ENDPOINT)
}

/// `query` (from [`to_query`]) keeping the `hf_endpoint` of the address it replaces: the mirror
/// is the reader's setting, not the plan's, and stays in every link made from the page.
pub fn keep_hf_endpoint(query: String, current: &str) -> String {
    match hf_endpoint(current) {
        Some(e) => format!("{query}&hf_endpoint={}", percent_encode(&e)),
        None => query,
    }
}

/// Whether a query string has a `cfg` or an `x`: JSON, read with [`json`]'s code.
pub fn wants_json(query: &str) -> bool {
    pairs(query).any(|(k, _)| matches!(k.as_deref(), Some("cfg" | "x")))
}

/// A setting that may not go with the model: its query key, whether the plan has it, and how
/// to drop it.
type Fallback = (&'static str, fn(&Plan) -> bool, fn(&mut Plan));

/// Reads a query string (with or without its `?`). Never fails: what cannot be used falls back
/// to the page's defaults ([`state::initial_plan`]) and is reported.
pub fn parse_query(query: &str) -> Parsed {
    let mut out = Parsed {
        plan: state::initial_plan(),
        view: View::default(),
        rejected: Vec::new(),
        unknown: 0,
        too_long: false,
        ckpt: None,
    };
    let q = query.strip_prefix('?').unwrap_or(query);
    if q.len() > MAX_QUERY || q.split('&').count() > MAX_PAIRS {
        out.too_long = true;
        return out;
    }
    let mut seen: Vec<&'static str> = Vec::new();
    let mut values: Vec<(&'static str, String)> = Vec::new();
    for (k, v) in pairs(q) {
        let key = k.and_then(|k| KEYS.iter().copied().find(|known| *known == k));
        let Some(key) = key else {
            out.unknown += 1;
            continue;
        };
        if seen.contains(&key) {
            reject(&mut out.rejected, key);
            continue;
        }
        seen.push(key);
        match percent_decode(v) {
            Some(v) => values.push((key, v)),
            None => reject(&mut out.rejected, key),
        }
    }
    let get = |key: &str| {
        values
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.as_str())
    };
    let plan = &mut out.plan;

    // The model first: everything else is judged against it. A config.json, when it can be
    // built, names the model itself.
    let mut from_config = false;
    if let Some(cfg) = get("cfg") {
        let mut p = plan.clone();
        if state::set_config(&mut p, cfg).is_ok() && build_graph(&model_plan(&p)).is_ok() {
            *plan = p;
            from_config = true;
        } else {
            reject(&mut out.rejected, "cfg");
        }
    }
    if let (false, Some(m)) = (from_config, get("model")) {
        match models::find(m) {
            Some(preset) => plan.model = preset.id.to_string(),
            None => reject(&mut out.rejected, "model"),
        }
    }
    let spec = state::input_spec(plan);
    for (key, v) in &values {
        let v = v.as_str();
        let ok = match *key {
            "batch" => uint(v, 1, MAX_BATCH).map(|b| plan.batch = b).is_some(),
            "res" => match spec {
                InputSpec::Image { min, .. } => uint(v, min.max(1), crate::estimator::MAX_RES)
                    .map(|r| plan.res = Some(r))
                    .is_some(),
                InputSpec::Tokens { .. } => false,
            },
            "seq" => match spec {
                InputSpec::Tokens { max, .. } => uint(
                    v,
                    1,
                    max.unwrap_or(crate::estimator::MAX_SEQ)
                        .min(crate::estimator::MAX_SEQ),
                )
                .map(|s| plan.seq = Some(s))
                .is_some(),
                InputSpec::Image { .. } => false,
            },
            "dtype" => precision(v).map(|p| plan.dtype = p).is_some(),
            "opt" => optimizer(v).map(|o| plan.opt = o).is_some(),
            "opt_impl" => optimizer_impl(v)
                .map(|o| plan.optimizer_impl = Some(o))
                .is_some(),
            "ckpt" => ckpt(v).map(|c| plan.ckpt = c).is_some(),
            "acc" => uint(v, 1, MAX_ACCUMULATION as u64)
                .map(|a| plan.accumulation = a as u32)
                .is_some(),
            "attn" => attn(v).map(|a| plan.attn = a).is_some(),
            "gpu" => (v.len() <= 32 && gpus::find(v).is_some())
                .then(|| plan.gpu = Some(v.to_string()))
                .is_some(),
            "lang" => Lang::parse(v).map(|l| out.view.lang = Some(l)).is_some(),
            "units" => Units::parse(v).map(|u| out.view.units = u).is_some(),
            "embed" => matches!(v, "1" | "0" | "true" | "false")
                .then(|| out.view.embed = matches!(v, "1" | "true"))
                .is_some(),
            "chart" => ChartKind::parse(v).map(|c| out.view.chart = c).is_some(),
            // Read again, and judged, when the model-id box fetches ([`hf_endpoint`]).
            "hf_endpoint" => v.len() <= MAX_ENDPOINT,
            _ => true,
        };
        if !ok {
            reject(&mut out.rejected, key);
        }
    }

    if let Some(x) = get("x") {
        // (Not fetched: the page fetches the JSON code before it reads a link with `x`.)
        match json::apply_extra(plan, x) {
            Ok(Some(p)) if build_graph(&model_plan(&p)).is_ok() => *plan = p,
            _ => reject(&mut out.rejected, "x"),
        }
    }

    // The page's defaults build (tested below): a link that leaves the plan at them (no query,
    // or only view settings) skips the checks that build the model's graph, at start-up.
    if *plan == state::initial_plan() {
        return out;
    }
    // Settings that are each valid but do not go together with the model fall back one by one.
    let fallbacks: [Fallback; 3] = [
        (
            "ckpt",
            |p| p.ckpt != Checkpointing::None,
            |p| p.ckpt = Checkpointing::None,
        ),
        (
            "attn",
            |p| p.attn != AttnImpl::Sdpa,
            |p| p.attn = AttnImpl::Sdpa,
        ),
        (
            "res",
            |p| p.res.is_some() || p.seq.is_some(),
            |p| {
                p.res = None;
                p.seq = None
            },
        ),
    ];
    // Each graph is built once: a plan that builds is not built again below. The graph that
    // builds under the plan's checkpointing policy also tells whether the builder applied it
    // (any checkpointed region), which probing every policy (`CkptInfo::probe`: three more
    // builds) would only repeat: for DeepSeek-V3 those builds held a link's parse for seconds.
    let mut builds = false;
    // Checkpointed regions of the graph that built (a policy the fallbacks kept built).
    let mut regions = 0;
    for (key, set, undo) in fallbacks {
        if let Ok(g) = build_graph(&model_plan(plan)) {
            builds = true;
            regions = g.segments;
            out.ckpt = CkptInfo::of_graph(plan, &g);
            break;
        }
        if set(plan) {
            undo(plan);
            reject(
                &mut out.rejected,
                if key == "res" && !spec.is_image() {
                    "seq"
                } else {
                    key
                },
            );
        }
    }
    // A policy some builders ignore rather than refuse (ResNets have no sequential segments).
    if plan.ckpt != Checkpointing::None && regions == 0 {
        plan.ckpt = Checkpointing::None;
        reject(&mut out.rejected, "ckpt");
        builds = false;
    }
    if !builds && build_graph(&model_plan(plan)).is_err() {
        out.plan = state::initial_plan();
        out.ckpt = None;
        reject(&mut out.rejected, "model");
    }
    out
}

fn reject(list: &mut Vec<&'static str>, key: &'static str) {
    if !list.contains(&key) {
        list.push(key);
    }
}

/// The query string (without `?`) for a plan and view. Keys that do not apply to the model are
/// left out; the language, units and embed settings only when they differ from the defaults.
/// Err while a `cfg` or `x` needs the JSON code and it has not been fetched ([`json::load`]).
pub fn to_query(plan: &Plan, view: &View) -> Result<String, json::NotLoaded> {
    let mut q: Vec<(&str, String)> = Vec::new();
    match &plan.hf_config {
        Some(cfg) => q.push(("cfg", json::config_text(cfg)?)),
        None => q.push(("model", plan.model.clone())),
    }
    q.push(("batch", plan.batch.to_string()));
    if let Some(r) = plan.res {
        q.push(("res", r.to_string()));
    }
    if let Some(s) = plan.seq {
        q.push(("seq", s.to_string()));
    }
    q.push(("dtype", plan.dtype.name().into()));
    q.push(("opt", plan.opt.name().into()));
    if let Some(o) = plan.optimizer_impl {
        q.push(("opt_impl", optimizer_impl_name(o).into()));
    }
    q.push(("ckpt", plan.ckpt.name()));
    if plan.accumulation != 1 {
        q.push(("acc", plan.accumulation.to_string()));
    }
    if plan.attn != AttnImpl::default() {
        q.push(("attn", attn_name(plan.attn).into()));
    }
    if let Some(g) = &plan.gpu {
        q.push(("gpu", g.clone()));
    }
    if let Some(x) = json::extra(plan)? {
        q.push(("x", x));
    }
    if let Some(l) = view.lang.filter(|l| *l != Lang::En) {
        q.push(("lang", l.code().into()));
    }
    if view.units != Units::default() {
        q.push(("units", view.units.code().into()));
    }
    if view.embed {
        q.push(("embed", "1".into()));
        if view.chart != ChartKind::default() {
            q.push(("chart", view.chart.code().into()));
        }
    }
    Ok(q.iter()
        .map(|(k, v)| format!("{k}={}", percent_encode(v)))
        .collect::<Vec<_>>()
        .join("&"))
}

#[cfg(test)]
mod tests {
    use super::super::ckpt_info::CkptInfo;
    use super::*;

    /// A link's checkpointing policy is kept exactly when the model accepts it (what the
    /// controls offer, [`CkptInfo`]), judged from the one graph the parse builds: a model of
    /// each kind under every policy.
    #[test]
    fn a_linked_policy_is_kept_exactly_when_the_model_accepts_it() {
        let policies = [
            ("block", Checkpointing::Block),
            ("stage", Checkpointing::Stage),
            ("sqrt", Checkpointing::Sqrt),
            ("k2", Checkpointing::Segments(2)),
            ("k5", Checkpointing::Segments(5)),
        ];
        for model in [
            "gpt2",
            "resnet18",
            "mobilenet_v2",
            "unet",
            "vit_b_16",
            "lstm-lm",
            "bert-base",
            "llama-small",
        ] {
            let info = CkptInfo::probe(&Plan::new(model));
            for (name, policy) in policies {
                let parsed = parse_query(&format!("model={model}&ckpt={name}"));
                let kept = parsed.plan.ckpt == policy;
                assert_eq!(kept, info.allows(policy), "{model} under {name}");
                assert_eq!(
                    parsed.rejected.contains(&"ckpt"),
                    !kept,
                    "{model} under {name}: {:?}",
                    parsed.rejected
                );
            }
        }
    }

    fn round_trip(plan: &Plan, view: &View) {
        let q = to_query(plan, view).unwrap();
        let back = parse_query(&q);
        assert!(!back.has_problems(), "{q}: {:?}", back.rejected);
        assert_eq!(&back.plan, plan, "{q}");
        assert_eq!(&back.view, view, "{q}");
    }

    /// The targets travel in `x` as the plan's own list, whatever the model calls them: the
    /// menu's choices of each family round-trip, and a link written before the menu followed
    /// the model (`q`, `k`, `v`, `o`) still opens on its choice.
    #[test]
    fn lora_targets_round_trip_for_every_family() {
        use crate::ui::logic::mode::{
            lora_menu, lora_targets_value, set_lora_rank, set_lora_targets, set_mode,
        };
        for id in [
            "llama-3-8b",
            "phi-3-mini",
            "modernbert-base",
            "roberta-base",
            "deepseek-v3",
            "llava-1.5-7b",
        ] {
            let mut plan = Plan {
                gpu: Some("h100-80".into()),
                ..Plan::new(id)
            };
            set_mode(&mut plan, "finetune");
            set_lora_rank(&mut plan, Some(16));
            let menu = lora_menu(&plan);
            for c in menu {
                set_lora_targets(&mut plan, menu, c.key);
                round_trip(&plan, &View::default());
                let back = parse_query(&to_query(&plan, &View::default()).unwrap());
                assert_eq!(lora_targets_value(&back.plan, menu), c.key, "{id}");
            }
        }
        let old = parse_query(
            "model=llama-2-7b&x=%7B%22mode%22%3A%22finetune%22%2C%22lora%22%3A%7B%22rank%22%3A16%2C%22targets%22%3A%5B%22q%22%2C%22k%22%2C%22v%22%2C%22o%22%5D%7D%7D",
        );
        assert!(!old.has_problems(), "{:?}", old.rejected);
        let menu = lora_menu(&old.plan);
        assert_eq!(lora_targets_value(&old.plan, menu), "qkvo");
    }

    /// Found by fuzzing `url_query` (`model=gpt2&lang=en`): the view round-trips as a link
    /// keeps it, English left to the reader, Chinese written.
    #[test]
    fn a_link_leaves_english_to_the_reader() {
        let en = parse_query("model=gpt2&lang=en");
        assert_eq!(en.view.lang, Some(Lang::En));
        let q = to_query(&en.plan, &en.view).unwrap();
        assert!(!q.contains("lang"), "{q}");
        assert_eq!(parse_query(&q).view, en.view.linked());
        let zh = parse_query("model=gpt2&lang=zh");
        let q = to_query(&zh.plan, &zh.view).unwrap();
        assert!(q.contains("lang=zh"), "{q}");
        assert_eq!(parse_query(&q).view, zh.view);
    }

    /// Found by fuzzing `url_query` (a libFuzzer timeout): a link with DeepSeek-V3 and a
    /// checkpointing policy took seconds to parse, building the model's graph four times (once
    /// for the plan, three times to probe every policy); it now builds it once. What the page
    /// makes of such a link in time is the e2e's (the slowest links a page may be sent).
    #[test]
    fn a_large_model_with_a_policy_parses_from_one_graph() {
        let parsed = parse_query("model=deepseek-v3&u=\0stch=32&dtype=amp_bf16&opt=0&ckpt=k5");
        assert_eq!(parsed.plan.model, "deepseek-v3");
        assert_eq!(parsed.plan.ckpt, Checkpointing::Segments(5));
        assert_eq!(parsed.plan.dtype, Precision::AmpBf16);
        let q = to_query(&parsed.plan, &parsed.view).unwrap();
        assert_eq!(parse_query(&q).plan, parsed.plan, "{q}");
    }

    #[test]
    fn json_links_are_told_apart_before_parsing() {
        for (q, yes) in [
            ("", false),
            ("?model=gpt2&batch=8", false),
            ("x=%7B%7D", true),
            ("?model=gpt2&cfg=%7B%7D", true),
            ("%78=1", true),
            ("xx=1", false),
        ] {
            assert_eq!(wants_json(q), yes, "{q}");
        }
    }

    #[test]
    fn lazy_model_links_are_told_apart_before_parsing() {
        for (q, yes) in [
            ("", false),
            ("?model=resnet50&batch=8", false),
            ("model=unet", true),
            ("model=wide_resnet50_2", false),
            ("?model=gpt2", true),
            ("batch=4&model=llama-3-70b", true),
            ("model=vit_b_16", true),
            ("model=lstm-lm", true),
            ("cfg=%7B%7D", true),
            ("model=nonsense", false),
            ("%6Dodel=gpt2", true),
        ] {
            assert_eq!(wants_lazy_models(q), yes, "{q}");
        }
    }

    #[test]
    fn the_language_is_read_before_the_plan() {
        for (q, want) in [
            ("lang=zh", Some(Lang::Zh)),
            ("model=gpt2&lang=en", Some(Lang::En)),
            ("?batch=4&%6Cang=zh", Some(Lang::Zh)),
            ("lang=fr", None),
            ("lang=%FF", None),
            ("model=gpt2", None),
        ] {
            assert_eq!(lang(q), want, "{q}");
            if let Some(l) = want {
                assert_eq!(parse_query(q).view.lang, Some(l), "{q}");
            }
        }
    }

    #[test]
    fn every_control_round_trips() {
        let plan = Plan {
            batch: 48,
            res: Some(320),
            dtype: Precision::AmpBf16,
            opt: OptimizerKind::SgdMomentum,
            optimizer_impl: Some(OptimizerImpl::Fused),
            ckpt: Checkpointing::Stage,
            accumulation: 4,
            gpu: Some("custom:23.5".into()),
            ..state::initial_plan()
        };
        round_trip(
            &plan,
            &View {
                lang: Some(Lang::Zh),
                units: Units::Decimal,
                embed: true,
                chart: ChartKind::Timeline,
            },
        );
        let text = Plan {
            seq: Some(8192),
            attn: AttnImpl::Eager,
            ckpt: Checkpointing::Segments(7),
            gpu: Some("h200-141".into()),
            ..Plan::new("llama-3-70b")
        };
        round_trip(&text, &View::default());
        round_trip(&state::initial_plan(), &View::default());
        round_trip(
            &Plan {
                ckpt: Checkpointing::Sqrt,
                gpu: Some(state::DEFAULT_GPU.into()),
                ..Plan::new("gpt2")
            },
            &View {
                lang: Some(Lang::En),
                ..View::default()
            }
            .linked(),
        );
    }

    #[test]
    fn settings_without_a_key_of_their_own_round_trip() {
        let mut plan = Plan {
            seq: Some(2048),
            gpu: Some("h100-80".into()),
            ..Plan::new("llama-3-8b")
        };
        plan.mode = crate::estimator::config::Mode::Finetune;
        plan.lora = Some(serde_json::from_str(r#"{"rank": 16}"#).unwrap());
        plan.quantization = crate::estimator::config::Quantization::Nf4;
        let q = to_query(&plan, &View::default()).unwrap();
        assert!(q.contains("&x=%7B"), "{q}");
        round_trip(&plan, &View::default());
        let unpadded = Plan {
            causal_mask: crate::estimator::config::CausalMask::Skipped,
            gpu: Some("h100-80".into()),
            ..Plan::new("gpt2")
        };
        assert!(to_query(&unpadded, &View::default())
            .unwrap()
            .contains("causal_mask"));
        round_trip(&unpadded, &View::default());
        // The software stack (and so the CUDA context) travels in `x` too.
        let old_stack = Plan {
            stack: Some(serde_json::from_str(r#"{"cuda": "11.2"}"#).unwrap()),
            gpu: Some("v100-16".into()),
            ..Plan::new("bert-large")
        };
        assert!(to_query(&old_stack, &View::default())
            .unwrap()
            .contains("stack"));
        round_trip(&old_stack, &View::default());
        // A hostile or broken `x` is refused whole; what it cannot set is refused too.
        for bad in [
            "x=%7B%22batch%22%3A5%7D",
            "x=%7B%22nope%22%3A1%7D",
            "x=%5B1%5D",
            "x=%7B%22mode%22%3A%22%3Cscript%3E%22%7D",
            "x=%7B%22stack%22%3A%7B%22cuda%22%3A%2211.2%22%2C%22module_loading%22%3A%22lazy%22%7D%7D",
        ] {
            let p = parse_query(&format!("model=gpt2&{bad}"));
            assert!(p.rejected.contains(&"x"), "{bad}: {:?}", p.rejected);
            assert_eq!(p.plan.model, "gpt2");
        }
    }

    #[test]
    fn a_hub_mirror_is_kept_in_links() {
        let q = "model=gpt2&hf_endpoint=http%3A%2F%2F127.0.0.1%3A8080%2Ffake-hub";
        let parsed = parse_query(q);
        assert!(!parsed.has_problems(), "{parsed:?}");
        let e = hf_endpoint(q).unwrap();
        assert_eq!(e, "http://127.0.0.1:8080/fake-hub");
        let kept = keep_hf_endpoint("model=gpt2".into(), q);
        assert_eq!(hf_endpoint(&kept), Some(e));
        assert_eq!(
            keep_hf_endpoint("model=gpt2".into(), "?lang=zh"),
            "model=gpt2"
        );
        // Kept as written, whatever it says (the box judges it), but never echoed unescaped.
        let odd = "hf_endpoint=javascript%3Aalert(1)%26x%3D1";
        assert_eq!(hf_endpoint(odd).as_deref(), Some("javascript:alert(1)&x=1"));
        let kept = keep_hf_endpoint("a=1".into(), odd);
        assert_eq!(kept, "a=1&hf_endpoint=javascript:alert%281%29%26x%3D1");
        let long = format!("hf_endpoint={}", "a".repeat(MAX_ENDPOINT + 1));
        assert_eq!(parse_query(&long).rejected, ["hf_endpoint"]);
        assert_eq!(keep_hf_endpoint("a=1".into(), &long), "a=1");
    }

    #[test]
    fn a_pasted_config_round_trips() {
        let mut plan = state::initial_plan();
        state::set_config(&mut plan, r#"{"model_type": "llama", "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000}"#).unwrap();
        plan.seq = Some(2048);
        round_trip(&plan, &View::default());
    }

    #[test]
    fn an_empty_query_is_the_default() {
        for q in ["", "?", "&&", "?&"] {
            let p = parse_query(q);
            assert_eq!(p.plan, state::initial_plan());
            assert!(!p.has_problems(), "{q:?}");
        }
        // parse_query skips its build checks for the defaults: they must build, and the page's
        // start-up check of the checkpointing policy must accept them.
        let d = state::initial_plan();
        assert!(build_graph(&model_plan(&d)).is_ok());
        assert!(CkptInfo::probe(&d).allows(d.ckpt));
    }

    #[test]
    fn hostile_values_fall_back_with_a_notice() {
        let cases: &[(&str, &str)] = &[
            ("model=<script>alert(1)</script>", "model"),
            ("model=%3Cimg%20src%3Dx%20onerror%3Dalert(1)%3E", "model"),
            ("batch=-1", "batch"),
            ("batch=0", "batch"),
            ("batch=99999999999999999999999", "batch"),
            ("batch=1e3", "batch"),
            ("batch=NaN", "batch"),
            ("batch=%FF%FE", "batch"),
            ("batch=%", "batch"),
            ("batch=%zz", "batch"),
            ("res=0", "res"),
            ("res=1%00", "res"),
            ("dtype=javascript:alert(1)", "dtype"),
            ("ckpt=k0", "ckpt"),
            ("ckpt=k4294967296", "ckpt"),
            ("gpu=custom:-5", "gpu"),
            ("gpu=custom:inf", "gpu"),
            ("gpu=custom:1e999", "gpu"),
            ("acc=70000", "acc"),
            ("lang=%22%3E%3Csvg%20onload%3Dalert(1)%3E", "lang"),
            ("embed=yes", "embed"),
            ("chart=../../etc/passwd", "chart"),
            ("cfg=%7B%22model_type%22%3A%22evil%22%7D", "cfg"),
            ("cfg=not-json", "cfg"),
            (
                "cfg=%7B%22model_type%22%3A%22%3Cb%3E%22%7D&model=%3Cscript%3E",
                "model",
            ),
            ("batch=8&batch=9", "batch"),
            ("model=gpt2&seq=999999", "seq"),
            ("model=unet&ckpt=sqrt", "ckpt"),
        ];
        for (q, key) in cases {
            let p = parse_query(q);
            assert!(p.rejected.contains(key), "{q}: rejected {:?}", p.rejected);
            assert!(p.has_problems());
            assert!(
                crate::plan::estimate(&p.plan).is_ok(),
                "{q}: the fallback plan does not estimate"
            );
        }
        // What was valid beside a bad key is kept.
        let p = parse_query("batch=bad&dtype=bf16&model=gpt2");
        assert_eq!(
            (p.plan.batch, p.plan.dtype, p.plan.model.as_str()),
            (state::initial_plan().batch, Precision::Bf16, "gpt2")
        );
    }

    #[test]
    fn unknown_keys_and_floods_are_counted_not_echoed() {
        let p = parse_query("y=1&%3Cb%3E=2&model=vgg16");
        assert_eq!((p.unknown, p.plan.model.as_str()), (2, "vgg16"));
        let long = format!("model={}", "a".repeat(MAX_QUERY + 1));
        let p = parse_query(&long);
        assert!(p.too_long && p.plan == state::initial_plan());
        let many = (0..100)
            .map(|i| format!("k{i}=1"))
            .collect::<Vec<_>>()
            .join("&");
        assert!(parse_query(&many).too_long);
    }

    #[test]
    fn settings_the_model_cannot_take_are_dropped() {
        // resolution for a text model, sequence length for a CNN
        let p = parse_query("model=gpt2&res=512");
        assert_eq!(p.plan.res, None);
        assert!(p.rejected.contains(&"res"));
        let p = parse_query("model=resnet50&seq=512");
        assert_eq!(p.plan.seq, None);
        // a resolution the U-Net cannot pool down: the size falls back
        let p = parse_query("model=unet&res=40");
        assert!(
            p.rejected.contains(&"res") && p.plan.res.is_none(),
            "{:?}",
            p
        );
    }

    #[test]
    fn encoding_is_reversible() {
        for s in ["a b", "{\"x\": [1, 2]}", "中文", "100%", "a+b&c=d"] {
            assert_eq!(percent_decode(&percent_encode(s)).as_deref(), Some(s));
        }
        assert_eq!(percent_decode("%E4%B8%AD"), Some("中".into()));
        assert_eq!(percent_decode("%E4%B8"), None);
    }
}
