//! The page's JSON: the link's `x` settings and `cfg`, a pasted config.json, the breakdown
//! download. serde_json and the plan's (de)serialisers are a large share of the page's code and
//! the default page needs none of it, so a `lazy-chunks` build keeps them in a chunk fetched when
//! first needed (a link with `x` or `cfg`, a paste, the panels, a setting without a query key of
//! its own, a JSON download) and then calls into it synchronously ([`crate::split`]). Every other
//! build links them in: [`loaded`] is always true there.

use serde::Serialize;
use serde_json::{Map, Value};

use crate::plan::Plan;

use super::breakdown::Row;

/// The plan's fields that have a query key of their own (everything else goes in `x`).
pub const OWN_KEYS: [&str; 12] = [
    "model",
    "hf_config",
    "batch",
    "res",
    "seq",
    "dtype",
    "opt",
    "optimizer_impl",
    "ckpt",
    "attn",
    "accumulation",
    "gpu",
];

/// The longest `x` or `cfg` value read.
pub const MAX_JSON: usize = 16 * 1024;

pub use crate::split::NotLoaded;

/// `plan` with only the settings that have a query key of their own ([`OWN_KEYS`]); the rest at
/// their defaults.
fn own_only(plan: &Plan) -> Plan {
    Plan {
        model: plan.model.clone(),
        hf_config: plan.hf_config.clone(),
        batch: plan.batch,
        res: plan.res,
        seq: plan.seq,
        dtype: plan.dtype,
        opt: plan.opt,
        optimizer_impl: plan.optimizer_impl,
        ckpt: plan.ckpt,
        attn: plan.attn,
        accumulation: plan.accumulation,
        gpu: plan.gpu.clone(),
        ..Plan::default()
    }
}

/// Whether `plan` has settings without a query key of their own away from their defaults, i.e.
/// whether its link needs an `x` (no JSON involved: the page asks on every change).
pub fn has_extra(plan: &Plan) -> bool {
    own_only(plan) != *plan
}

/// The settings of [`has_extra`] as a JSON object (`None` when there are none).
pub fn extra(plan: &Plan) -> Result<Option<String>, NotLoaded> {
    if !has_extra(plan) {
        return Ok(None);
    }
    match call(Op::Extra(plan))? {
        Out::Text(t) => Ok(t),
        _ => Err(NotLoaded),
    }
}

/// `plan` with the settings of an `x` object applied; `Ok(None)` if they do not make a plan.
pub fn apply_extra(plan: &Plan, x: &str) -> Result<Option<Plan>, NotLoaded> {
    if x.len() > MAX_JSON {
        return Ok(None);
    }
    match call(Op::ApplyExtra(plan, x))? {
        Out::Plan(p) => Ok(p.map(|p| *p)),
        _ => Err(NotLoaded),
    }
}

/// A config.json value as compact text (the link's `cfg`).
pub fn config_text(cfg: &Value) -> Result<String, NotLoaded> {
    match call(Op::ConfigText(cfg))? {
        Out::Text(t) => Ok(t.unwrap_or_default()),
        _ => Err(NotLoaded),
    }
}

/// Parses JSON text; the inner error is serde_json's message (line and column).
pub fn parse(text: &str) -> Result<Result<Value, String>, NotLoaded> {
    match call(Op::Parse(text))? {
        Out::Parsed(v) => Ok(v),
        _ => Err(NotLoaded),
    }
}

/// The breakdown download: the plan and its rows (bytes as integers), indented.
pub fn breakdown(plan: &Plan, exact: bool, rows: &[Row]) -> Result<String, NotLoaded> {
    match call(Op::Breakdown(plan, exact, rows))? {
        Out::Text(t) => Ok(t.unwrap_or_default()),
        _ => Err(NotLoaded),
    }
}

/// One request to the JSON code: a single entry point keeps the chunk to one split function.
#[derive(Clone, Copy)]
enum Op<'a> {
    Extra(&'a Plan),
    ApplyExtra(&'a Plan, &'a str),
    ConfigText(&'a Value),
    Parse(&'a str),
    Breakdown(&'a Plan, bool, &'a [Row]),
}

enum Out {
    Text(Option<String>),
    /// Boxed: a plan is far larger than the other answers.
    Plan(Option<Box<Plan>>),
    Parsed(Result<Value, String>),
}

#[derive(Serialize)]
struct Export<'a> {
    plan: &'a Plan,
    /// Whether the numbers come from a full simulation at this batch.
    exact: bool,
    rows: &'a [Row],
}

fn run(op: Op<'_>) -> Out {
    match op {
        Op::Extra(plan) => Out::Text(extra_settings(plan).map(|x| Value::Object(x).to_string())),
        Op::ApplyExtra(plan, x) => Out::Plan(with_extra(plan, x).map(Box::new)),
        Op::ConfigText(v) => Out::Text(Some(serde_json::to_string(v).unwrap_or_default())),
        Op::Parse(text) => Out::Parsed(serde_json::from_str(text).map_err(|e| e.to_string())),
        Op::Breakdown(plan, exact, rows) => Out::Text(Some(
            serde_json::to_string_pretty(&Export { plan, exact, rows })
                .unwrap_or_else(|_| "{}".into()),
        )),
    }
}

/// The fields in which `plan` differs from [`own_only`] of it.
fn extra_settings(plan: &Plan) -> Option<Map<String, Value>> {
    let Value::Object(mine) = serde_json::to_value(plan).ok()? else {
        return None;
    };
    let Value::Object(base) = serde_json::to_value(own_only(plan)).ok()? else {
        return None;
    };
    let extra: Map<_, _> = mine
        .into_iter()
        .filter(|(k, v)| base.get(k) != Some(v))
        .collect();
    (!extra.is_empty()).then_some(extra)
}

fn with_extra(plan: &Plan, x: &str) -> Option<Plan> {
    let Value::Object(extra) = serde_json::from_str(x).ok()? else {
        return None;
    };
    let Value::Object(mut base) = serde_json::to_value(plan).ok()? else {
        return None;
    };
    for (k, v) in extra {
        if OWN_KEYS.contains(&k.as_str()) {
            return None;
        }
        base.insert(k, v);
    }
    serde_json::from_value(Value::Object(base)).ok()
}

crate::lazy_chunk!(json, json_split, json_preload, fn run(Op<'_>) -> Out);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::estimator::config::{CausalMask, Checkpointing, Precision};

    /// `own_only` keeps exactly the fields named in `OWN_KEYS`.
    #[test]
    fn own_only_keeps_the_own_keys() {
        let mut plan = Plan::new("gpt2");
        plan.causal_mask = CausalMask::Skipped;
        plan.lora = Some(serde_json::from_str(r#"{"rank": 16}"#).unwrap());
        plan.batch = 7;
        plan.gpu = Some("h100-80".into());
        let (all, own, default) = (
            serde_json::to_value(&plan).unwrap(),
            serde_json::to_value(own_only(&plan)).unwrap(),
            serde_json::to_value(Plan::default()).unwrap(),
        );
        for (k, v) in own.as_object().unwrap() {
            let expected = if OWN_KEYS.contains(&k.as_str()) {
                &all[k]
            } else {
                &default[k]
            };
            assert_eq!(v, expected, "{k}");
        }
    }

    /// `has_extra` (field by field) agrees with what the JSON writer finds.
    #[test]
    fn extras_are_found_without_json() {
        let base = Plan::new("gpt2");
        let mut own = base.clone();
        own.batch = 7;
        own.dtype = Precision::Bf16;
        own.ckpt = Checkpointing::Block;
        own.gpu = Some("h100-80".into());
        let mut masked = base.clone();
        masked.causal_mask = CausalMask::Skipped;
        let mut lora = base.clone();
        lora.lora = Some(serde_json::from_str(r#"{"rank": 16}"#).unwrap());
        for (plan, yes) in [(base, false), (own, false), (masked, true), (lora, true)] {
            assert_eq!(has_extra(&plan), yes, "{plan:?}");
            assert_eq!(extra(&plan).unwrap().is_some(), yes);
        }
    }
}
