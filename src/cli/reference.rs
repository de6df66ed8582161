//! `vram-planner reference FILE.jsonl`: replays measured steps and prints the estimate beside
//! each measurement. Two record formats: the shared reference set's (the settings as fields,
//! `tests/data/pytorch-step-memory.jsonl`), and records that carry the vram-planner `plan` they
//! measured (`tests/data/finetune-infer-steps.jsonl`: training steps with `peak_r512`, serving
//! with `prefill_peak_r512` and `decode_peak_r512`), and published real-GPU figures that name
//! their `metric` (`max_memory_allocated`, `max_memory_reserved` or `nvidia_smi_total`) and
//! `measured_bytes`, compared with the estimate's allocated peak, reserved bytes or device total.

use serde::Deserialize;

use crate::estimator::config::{AttnImpl, Checkpointing, Device, OptimizerKind, Precision};
use crate::plan::{estimate, Plan};

/// The fields of a reference record that define the case.
#[derive(Deserialize)]
pub struct Record {
    pub case_id: String,
    pub model: String,
    #[serde(default)]
    pub hf_config: Option<serde_json::Value>,
    pub batch: u64,
    #[serde(default)]
    pub res: Option<u64>,
    #[serde(default)]
    pub seq: Option<u64>,
    pub dtype: Precision,
    pub opt: OptimizerKind,
    #[serde(default)]
    pub ckpt: Option<String>,
    #[serde(default)]
    pub attn: Option<AttnImpl>,
    #[serde(default)]
    pub cudnn: Option<bool>,
    #[serde(default)]
    pub device: Option<String>,
    pub peak_r512: u64,
}

impl Record {
    pub fn plan(&self) -> Result<Plan, String> {
        let ckpt = match &self.ckpt {
            Some(c) => Checkpointing::parse(c)?,
            None => Checkpointing::None,
        };
        Ok(Plan {
            model: self.model.clone(),
            hf_config: self.hf_config.clone(),
            batch: self.batch,
            res: self.res,
            seq: self.seq,
            dtype: self.dtype,
            opt: self.opt,
            ckpt,
            attn: self.attn.unwrap_or_default(),
            cudnn: self.cudnn,
            device: match self.device.as_deref() {
                None | Some("cuda") => Device::Cuda,
                Some("cpu") => Device::Cpu,
                Some(other) => return Err(format!("unknown device '{other}'")),
            },
            ..Plan::default()
        })
    }
}

/// One compared case.
pub struct Compared {
    pub case_id: String,
    pub model: String,
    /// What was compared: `peak_r512`, `step`, `prefill`, `decode`, `per-GPU step`, or a
    /// published record's metric.
    pub metric: String,
    pub predicted: u64,
    pub measured: u64,
    pub rel_err: f64,
}

/// Compares one JSON line; `Err` carries the reason it is unsupported.
pub fn compare_line(line: &str) -> Result<(Compared, serde_json::Value), (String, String)> {
    let v: serde_json::Value = serde_json::from_str(line).map_err(|e| {
        (
            "<unparsable>".to_string(),
            format!("not a JSON record: {e}"),
        )
    })?;
    let id = v
        .get("case_id")
        .and_then(|c| c.as_str())
        .unwrap_or("<no case_id>")
        .to_string();
    if v.get("plan").is_some() {
        return compare_plan_record(&v, id);
    }
    let rec: Record = serde_json::from_value(v)
        .map_err(|e| (id.clone(), format!("record not understood: {e}")))?;
    let plan = as_measured(rec.plan().map_err(|e| (id.clone(), e))?);
    let est = estimate(&plan).map_err(|e| (id.clone(), e.to_string()))?;
    let predicted = est.peak_allocated.0;
    let rel_err = (predicted as f64 - rec.peak_r512 as f64) / rec.peak_r512 as f64;
    let out = serde_json::json!({
        "case_id": rec.case_id,
        "peak_r512_predicted": predicted,
        "peak_forward_predicted": est.peak_forward.0,
        "param_bytes_predicted": est.param_bytes.0,
        "grad_bytes_predicted": est.grad_bytes.0,
        "opt_state_bytes_predicted": est.opt_state_bytes.0,
        "measured_peak_r512": rec.peak_r512,
        "rel_err": rel_err,
    });
    Ok((
        Compared {
            case_id: rec.case_id,
            model: rec.model,
            metric: "peak_r512".to_string(),
            predicted,
            measured: rec.peak_r512,
            rel_err,
        },
        out,
    ))
}

/// A record holding its own `plan`: the training step's peak, or a serving plan's prefill and
/// decode peaks, whichever the estimate misses most.
fn compare_plan_record(
    v: &serde_json::Value,
    id: String,
) -> Result<(Compared, serde_json::Value), (String, String)> {
    let plan: Plan = serde_json::from_value(v["plan"].clone())
        .map_err(|e| (id.clone(), format!("plan not understood: {e}")))?;
    let measured = |k: &str| v.get(k).and_then(|x| x.as_u64());
    if let Some(metric) = v.get("metric").and_then(|m| m.as_str()) {
        return compare_published(&plan, metric, measured("measured_bytes"), id);
    }
    let plan = as_measured(plan);
    let mut checks = Vec::new();
    if plan.is_parallel() && plan.mode != crate::estimator::config::Mode::Infer {
        // A multi-GPU record measures one rank: compare with the per-GPU estimate.
        let par = crate::plan::estimate_parallel(&plan).map_err(|e| (id.clone(), e.to_string()))?;
        checks.extend(
            measured("peak_r512").map(|m| ("per-GPU step", par.per_gpu.peak_allocated_bytes, m)),
        );
    } else {
        let est = estimate(&plan).map_err(|e| (id.clone(), e.to_string()))?;
        match &est.inference {
            Some(inf) => {
                checks.extend(
                    measured("prefill_peak_r512").map(|m| ("prefill", inf.prefill_peak.0, m)),
                );
                if let (Some(d), Some(m)) = (inf.decode_peak, measured("decode_peak_r512")) {
                    checks.push(("decode", d.0, m));
                }
            }
            None => checks.extend(measured("peak_r512").map(|m| ("step", est.peak_allocated.0, m))),
        }
    }
    let rel = |(_, p, m): &(&str, u64, u64)| (*p as f64 - *m as f64) / (*m).max(1) as f64;
    let worst = checks
        .iter()
        .max_by(|a, b| rel(a).abs().total_cmp(&rel(b).abs()))
        .ok_or_else(|| {
            (
                id.clone(),
                "the record has no measured peak for this plan".to_string(),
            )
        })?;
    let rel_err = rel(worst);
    let out = serde_json::json!({
        "case_id": id,
        "compared": worst.0,
        "predicted": worst.1,
        "measured": worst.2,
        "rel_err": rel_err,
    });
    Ok((
        Compared {
            case_id: id,
            model: plan.model.clone(),
            metric: worst.0.to_string(),
            predicted: worst.1,
            measured: worst.2,
            rel_err,
        },
        out,
    ))
}

/// A published real-GPU figure: the estimate's output that its `metric` names, beside the
/// estimate's allocated, reserved and device-total figures.
fn compare_published(
    plan: &Plan,
    metric: &str,
    measured: Option<u64>,
    id: String,
) -> Result<(Compared, serde_json::Value), (String, String)> {
    let measured = measured.ok_or_else(|| (id.clone(), "no measured_bytes".to_string()))?;
    let est = estimate(plan).map_err(|e| (id.clone(), e.to_string()))?;
    let predicted = match metric {
        "max_memory_allocated" => est.peak_allocated.0,
        "max_memory_reserved" => est.reserved.0,
        "nvidia_smi_total" => est.device_total.0,
        other => {
            return Err((
                id,
                format!("unknown metric '{other}'; use max_memory_allocated, max_memory_reserved or nvidia_smi_total"),
            ))
        }
    };
    let rel_err = (predicted as f64 - measured as f64) / measured.max(1) as f64;
    let out = serde_json::json!({
        "case_id": id,
        "metric": metric,
        "predicted": predicted,
        "measured": measured,
        "rel_err": rel_err,
        "allocated_predicted": est.peak_allocated.0,
        "reserved_predicted": est.reserved.0,
        "device_total_predicted": est.device_total.0,
    });
    Ok((
        Compared {
            case_id: id,
            model: plan.model.clone(),
            metric: metric.to_string(),
            predicted,
            measured,
            rel_err,
        },
        out,
    ))
}

/// A measured step's plan as it was measured: under the reference harness's tracker, a
/// `TorchDispatchMode` ([`crate::estimator::simulate::StepOptions::dispatch_mode`]). Published
/// real-GPU figures are not measured steps and keep their plans as they are.
pub fn as_measured(mut plan: Plan) -> Plan {
    plan.dispatch_mode = true;
    plan
}

/// Compares every record of a JSON-lines text; the first unsupported record is the error.
pub fn replay(text: &str) -> Result<Vec<Compared>, (String, String)> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| compare_line(l).map(|(c, _)| c))
        .collect()
}

/// Median, 90th percentile and maximum of absolute relative errors.
pub fn summary(errs: &[f64]) -> (f64, f64, f64) {
    let mut a: Vec<f64> = errs.iter().map(|e| e.abs()).collect();
    a.sort_by(|x, y| x.total_cmp(y));
    if a.is_empty() {
        return (0.0, 0.0, 0.0);
    }
    let q = |p: f64| a[((p * (a.len() - 1) as f64).round() as usize).min(a.len() - 1)];
    (q(0.5), q(0.9), *a.last().unwrap())
}

/// The summary of compared cases: median, p90 and maximum of |error|, and how many are
/// under-estimates (the direction that ends in an out-of-memory error).
fn summary_json(cases: &[&Compared]) -> serde_json::Value {
    let errs: Vec<f64> = cases.iter().map(|c| c.rel_err).collect();
    let (med, p90, max) = summary(&errs);
    serde_json::json!({
        "cases": errs.len(),
        "median_abs_rel_err": med,
        "p90_abs_rel_err": p90,
        "max_abs_rel_err": max,
        "under_estimates": errs.iter().filter(|e| **e < 0.0).count(),
    })
}

/// The summary by compared metric, metrics in order of first appearance.
pub fn by_metric(cases: &[Compared]) -> serde_json::Map<String, serde_json::Value> {
    let mut metrics: Vec<&str> = Vec::new();
    for c in cases {
        if !metrics.contains(&c.metric.as_str()) {
            metrics.push(&c.metric);
        }
    }
    metrics
        .into_iter()
        .map(|m| {
            let of: Vec<&Compared> = cases.iter().filter(|c| c.metric == m).collect();
            (m.to_string(), summary_json(&of))
        })
        .collect()
}

pub fn run(path: &std::path::Path) -> Result<(), String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let mut errs = Vec::new();
    let mut cases = Vec::new();
    let mut unsupported = 0;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        match compare_line(line) {
            Ok((c, out)) => {
                errs.push(c.rel_err);
                cases.push(c);
                super::emit(&format!("{out}\n"))?;
            }
            Err((id, reason)) => {
                unsupported += 1;
                super::emit(&format!(
                    "{}\n",
                    serde_json::json!({"case_id": id, "unsupported": reason})
                ))?;
            }
        }
    }
    let (med, p90, max) = summary(&errs);
    super::emit(&format!(
        "{}\n",
        serde_json::json!({"summary": {"cases": errs.len(), "unsupported": unsupported, "median_abs_rel_err": med, "p90_abs_rel_err": p90, "max_abs_rel_err": max, "by_metric": by_metric(&cases)}})
    ))?;
    Ok(())
}
