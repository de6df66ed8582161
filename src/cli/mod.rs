//! The command-line tool on the same core: `estimate` a plan, replay the `reference`
//! measurements, list `models` and `gpus`.

pub mod reference;

use std::io::Read;

use clap::{Parser, Subcommand, ValueEnum};

use crate::estimator::config::Plan;
use crate::estimator::{estimate, Estimate};
use crate::presets::{gpus, models};

#[derive(Parser)]
#[command(name = "vram-planner", version, about = "Plans GPU memory for one deep-learning training step")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Clone, Copy, ValueEnum)]
enum Format {
    Json,
    Table,
}

#[derive(Subcommand)]
enum Cmd {
    /// Estimate a plan given as JSON (stdin or --config FILE).
    Estimate {
        #[arg(long)]
        config: Option<std::path::PathBuf>,
        #[arg(long, value_enum, default_value = "table")]
        format: Format,
    },
    /// Replay reference records (JSON lines) and compare with their measured peaks.
    Reference { file: std::path::PathBuf },
    /// List the model presets.
    Models,
    /// List the GPU presets.
    Gpus,
}

/// Runs the CLI; returns the process exit code.
pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { 2 } else { 0 };
        }
    };
    match run(cli.cmd) {
        Ok(()) => 0,
        Err(msg) => {
            eprintln!("error: {msg}");
            1
        }
    }
}

fn run(cmd: Cmd) -> Result<(), String> {
    match cmd {
        Cmd::Estimate { config, format } => {
            let text = match config {
                Some(p) => std::fs::read_to_string(&p).map_err(|e| format!("cannot read {}: {e}", p.display()))?,
                None => {
                    let mut s = String::new();
                    std::io::stdin().read_to_string(&mut s).map_err(|e| format!("cannot read stdin: {e}"))?;
                    s
                }
            };
            let plan: Plan = serde_json::from_str(&text).map_err(|e| format!("invalid plan: {e}"))?;
            let est = estimate(&plan).map_err(|e| e.to_string())?;
            match format {
                Format::Json => println!("{}", serde_json::to_string_pretty(&estimate_json(&plan, &est)).map_err(|e| e.to_string())?),
                Format::Table => print!("{}", table(&plan, &est)),
            }
            Ok(())
        }
        Cmd::Reference { file } => reference::run(&file),
        Cmd::Models => {
            for m in models::MODELS {
                println!("{:<20} {:<22} {:>14} params  {}", m.id, m.name, m.params, m.family.label());
            }
            Ok(())
        }
        Cmd::Gpus => {
            for g in gpus::GPUS {
                println!("{:<14} {:<30} {:>10}", g.id, g.name, g.memory.to_string());
            }
            Ok(())
        }
    }
}

/// The JSON answer of `estimate`.
pub fn estimate_json(plan: &Plan, e: &Estimate) -> serde_json::Value {
    let mut breakdown = serde_json::Map::new();
    for r in &e.breakdown {
        breakdown.insert(r.category.key().into(), r.bytes.0.into());
    }
    let gpu = plan.gpu.as_deref().and_then(gpus::find);
    let mut v = serde_json::json!({
        "model": e.model,
        "param_count": e.param_count,
        "peak_allocated_bytes": e.peak_allocated.0,
        "peak_phase": e.peak_phase.key(),
        "peak_op": e.peak_op,
        "peak_forward_bytes": e.peak_forward.0,
        "reserved_bytes": e.reserved.0,
        "workspace_bytes": e.workspaces.0,
        "context_bytes": e.context.0,
        "device_total_bytes": e.device_total.0,
        "param_bytes": e.param_bytes.0,
        "grad_bytes": e.grad_bytes.0,
        "opt_state_bytes": e.opt_state_bytes.0,
        "breakdown": breakdown,
        "forward_flops": e.forward_flops,
        "recompute_flops": e.recompute_flops,
        "gpu": gpu.map(|g| serde_json::json!({"id": g.id, "memory_bytes": g.memory.0, "fits": e.device_total <= g.memory})),
    });
    // Fine-tuning and inference (issue 6).
    if let Some(m) = v.as_object_mut() {
        m.insert("mode".into(), e.mode.key().into());
        m.insert("trainable_params".into(), e.trainable_params.into());
        m.insert("weights_bytes".into(), e.weights_bytes.0.into());
        m.insert("kv_cache_bytes".into(), e.kv_cache_bytes.0.into());
        m.insert("paged_opt_state_bytes".into(), e.paged_opt_state_bytes.0.into());
        m.insert("inference".into(), e.inference.as_ref().map(|i| serde_json::json!({"context": i.context, "new_tokens": i.new_tokens, "prefill_peak_bytes": i.prefill_peak.0, "decode_peak_bytes": i.decode_peak.map(|b| b.0), "kv_bytes_per_token": i.kv_bytes_per_token.0})).into());
        // With a GPU, fine-tuning and serving plans also say what fits it.
        if let (Some(g), true) = (&gpu, plan.mode != crate::estimator::tune::Mode::Train) {
            let ok = |r: Result<Option<u64>, _>| r.ok().flatten();
            let ctx = if plan.mode == crate::estimator::tune::Mode::Infer { ok(crate::estimator::fit::max_context(plan, g.memory)) } else { None };
            m.insert("fit".into(), serde_json::json!({"max_batch": ok(crate::estimator::fit::max_batch(plan, g.memory)), "max_context": ctx}));
        }
    }
    v
}

fn table(plan: &Plan, e: &Estimate) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(s, "{}: {} parameters, batch {}", e.model, crate::estimator::units::Elems(e.param_count), plan.batch);
    let _ = writeln!(s, "{:<24} {:>12}", "peak allocated", e.peak_allocated.to_string());
    let _ = writeln!(s, "{:<24} {:>12}", "  in phase", e.peak_phase.key());
    for r in &e.breakdown {
        if r.bytes.0 > 0 {
            let _ = writeln!(s, "  {:<22} {:>12}", r.category.label(), r.bytes.to_string());
        }
    }
    let _ = writeln!(s, "{:<24} {:>12}", "cuBLAS workspaces", e.workspaces.to_string());
    let _ = writeln!(s, "{:<24} {:>12}", "reserved", e.reserved.to_string());
    let _ = writeln!(s, "{:<24} {:>12}", "CUDA context", e.context.to_string());
    let _ = writeln!(s, "{:<24} {:>12}", "device total", e.device_total.to_string());
    if let Some(g) = plan.gpu.as_deref().and_then(gpus::find) {
        let verdict = if e.device_total <= g.memory { "fits" } else { "does NOT fit" };
        let _ = writeln!(s, "{} ({}): {}", g.name, g.memory, verdict);
    }
    s
}
