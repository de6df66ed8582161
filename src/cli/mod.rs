//! The command-line tool on the same core: `estimate` a plan, replay the `reference`
//! measurements, list `models` and `gpus`.

pub mod heap;
pub mod hub;
pub mod reference;

use std::io::{IsTerminal, Read};

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::estimator::parallel::{self, OffloadReport, ParallelEstimate};
use crate::estimator::Estimate;
use crate::plan::{self, estimate, search, Plan};
use crate::presets::{gpus, models};

#[derive(Parser)]
#[command(
    name = "vram-planner",
    version,
    about = "Plans GPU memory for one deep-learning training step"
)]
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
    #[command(
        long_about = "Estimate one training (or fine-tuning, or serving) step of a plan given as JSON on stdin or in --config FILE: the peak memory PyTorch allocates, its breakdown, the device total and, with a `gpu` key, whether it fits. A plan with `parallel` or `offload` keys is also estimated per GPU of its layout. Serving (`\"mode\": \"infer\"`) reports the prefill of `context` prompt tokens and the last of `new_tokens` decode steps; `context` counts text tokens, and a vision-language model (llava) adds each image's placeholder tokens (`images` per sample, 576 each for LLaVA-1.5) to the prompt and the KV cache.",
        after_help = "Example:\n  echo '{\"model\":\"resnet50\",\"batch\":64,\"gpu\":\"a100-40\"}' | vram-planner estimate\n  echo '{\"seq\":4096,\"dtype\":\"bf16\",\"gpu\":\"h100-80\"}' | vram-planner estimate --hf Qwen/Qwen3-8B\n  # serving LLaVA-1.5 7B: one image (576 tokens) and 512 text tokens, 16 new tokens\n  echo '{\"model\":\"llava-1.5-7b\",\"mode\":\"infer\",\"context\":512,\"new_tokens\":16,\"dtype\":\"bf16\"}' | vram-planner estimate\n\nThe JSON output (--format json) is described by docs/estimate.schema.json."
    )]
    Estimate {
        #[command(flatten)]
        source: PlanSource,
        /// `table` for people, `json` for programs (keys in docs/estimate.schema.json).
        #[arg(long, value_enum, default_value = "table")]
        format: Format,
        /// Also give the caching allocator's segment map when the allocated bytes peak: each
        /// segment's size and its blocks, as `torch.cuda.memory_snapshot()` lists them.
        #[arg(long)]
        segments: bool,
    },
    /// The cheapest multi-GPU layouts of a plan (JSON, stdin or --config FILE) that fit its GPU:
    /// fewest GPUs, then the shortest step, for the plan's global batch.
    #[command(
        long_about = "The cheapest multi-GPU layouts of a plan (JSON on stdin or in --config FILE; it must name a `gpu`) that fit that GPU: fewest GPUs first, then the shortest step, keeping the plan's global batch (batch x micro-batches). Tries data, tensor and pipeline parallelism and ZeRO stages 0-3.",
        after_help = "Example:\n  echo '{\"model\":\"llama-2-7b\",\"seq\":2048,\"dtype\":\"bf16\",\"gpu\":\"a100-40\"}' | vram-planner search --max-gpus 16\n\nThe output is a JSON array described by docs/search.schema.json."
    )]
    Search {
        #[command(flatten)]
        source: PlanSource,
        /// The most GPUs a layout may use (at most 4096).
        #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=search::MAX_SEARCH_GPUS))]
        max_gpus: u64,
        /// GPUs in one node: tensor parallelism stays within a node.
        #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=1024))]
        gpus_per_node: u64,
        /// How many fitting layouts to print.
        #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=1000))]
        top: u64,
        /// Also try optimizer and parameter offload to host memory.
        #[arg(long)]
        offload: bool,
    },
    /// Replay reference records (JSON lines) and compare with their measured peaks.
    #[command(
        long_about = "Replay reference records (one JSON object per line, as in tests/data/*.jsonl: a plan's keys plus the measured peak) and print the estimate beside each measurement, then the worst and mean errors."
    )]
    Reference {
        /// The JSON-lines file of records.
        file: std::path::PathBuf,
    },
    /// List the model presets.
    #[command(
        long_about = "List the model presets: the id a plan's `model` key takes, the name, the parameter count and the family."
    )]
    Models,
    /// List the GPU presets.
    #[command(
        long_about = "List the GPU presets: the id a plan's `gpu` key takes (or `custom:<GiB>`), the name and the memory."
    )]
    Gpus,
}

/// Where a plan comes from: a file or stdin, and the model's config.json from the Hub.
#[derive(Args)]
struct PlanSource {
    /// The plan's JSON file (default: read stdin; with --hf, stdin only when piped, and the
    /// plan may leave out `model`).
    #[arg(long, value_name = "FILE")]
    config: Option<std::path::PathBuf>,
    /// A Hugging Face model id (owner/name, e.g. Qwen/Qwen3-8B): its config.json, fetched from
    /// the Hub and cached, is the plan's `hf_config` (HF_TOKEN for gated models; HF_HUB_OFFLINE=1
    /// reads the cache only).
    #[arg(long, value_name = "ID")]
    hf: Option<String>,
    /// The Hub's address for --hf (default: $HF_ENDPOINT, else https://huggingface.co).
    #[arg(long, value_name = "URL", requires = "hf")]
    hf_endpoint: Option<String>,
}

/// Writes `text` to stdout. Output piped into a reader that stops early (`| head`) ends the
/// program quietly, where `print!` would panic on the closed pipe.
pub(crate) fn emit(text: &str) -> Result<(), String> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        Err(e) => Err(format!("cannot write the output: {e}")),
    }
}

/// Runs the CLI; returns the process exit code.
pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        // Help and version print in full; a usage error is one line naming what to fix.
        Err(e)
            if !e.use_stderr()
                || e.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand =>
        {
            let _ = e.print();
            return if e.use_stderr() { 2 } else { 0 };
        }
        Err(e) => {
            eprintln!("{}", usage_error_line(&e.render().to_string()));
            return 2;
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

/// clap's usage error as one line: its first paragraph (`error: ...` and what it lists below,
/// such as the possible values or the missing arguments), any tip, then where to read more.
fn usage_error_line(rendered: &str) -> String {
    let mut first: Vec<&str> = rendered
        .lines()
        .map(str::trim)
        .skip_while(|l| l.is_empty())
        .take_while(|l| !l.is_empty())
        .collect();
    first.extend(
        rendered
            .lines()
            .map(str::trim)
            .filter(|l| l.starts_with("tip:")),
    );
    let line = if first.is_empty() {
        "error: invalid arguments".to_string()
    } else {
        first.join(" ")
    };
    format!("{line}; see 'vram-planner --help'")
}

fn run(cmd: Cmd) -> Result<(), String> {
    match cmd {
        Cmd::Estimate {
            source,
            format,
            segments,
        } => {
            let plan = read_plan(source)?;
            let est = estimate(&plan).map_err(|e| e.to_string())?;
            let segs = if segments {
                Some(plan::segments_at_peak(&plan).map_err(|e| e.to_string())?)
            } else {
                None
            };
            let par = if plan.is_parallel() {
                Some(plan::estimate_parallel(&plan).map_err(|e| e.to_string())?)
            } else {
                None
            };
            match format {
                Format::Json => {
                    let mut v = estimate_json_with(&plan, &est, par.as_ref());
                    if let (Some(o), Some(segs)) = (v.as_object_mut(), &segs) {
                        o.insert("segments_at_peak".into(), serde_json::json!(segs));
                    }
                    emit(&(serde_json::to_string_pretty(&v).map_err(|e| e.to_string())? + "\n"))?
                }
                Format::Table => {
                    emit(&table(&plan, &est))?;
                    if let Some(segs) = &segs {
                        emit(&segment_table(segs))?;
                    }
                    if let Some(p) = &par {
                        emit(&parallel_table(&plan, p))?;
                    }
                }
            }
            Ok(())
        }
        Cmd::Search {
            source,
            max_gpus,
            gpus_per_node,
            top,
            offload,
        } => {
            let plan = read_plan(source)?;
            let opts = search::SearchOptions {
                max_gpus,
                gpus_per_node,
                top: top as usize,
                offload,
                ..Default::default()
            };
            let found = search::search(&plan, &opts).map_err(|e| e.to_string())?;
            if found.is_empty() {
                return Err(format!("no layout of up to {max_gpus} GPUs fits: raise --max-gpus, enable offload or checkpointing"));
            }
            emit(&(serde_json::to_string_pretty(&found).map_err(|e| e.to_string())? + "\n"))?;
            Ok(())
        }
        Cmd::Reference { file } => reference::run(&file),
        Cmd::Models => {
            for m in models::MODELS {
                emit(&format!(
                    "{:<20} {:<22} {:>14} params  {}\n",
                    m.id,
                    m.name,
                    m.params,
                    m.family.label()
                ))?;
            }
            Ok(())
        }
        Cmd::Gpus => {
            for g in gpus::GPUS {
                emit(&format!(
                    "{:<14} {:<30} {:>10}\n",
                    g.id,
                    g.name,
                    g.memory.to_string()
                ))?;
            }
            Ok(())
        }
    }
}

fn read_plan(source: PlanSource) -> Result<Plan, String> {
    let PlanSource {
        config,
        hf,
        hf_endpoint,
    } = source;
    let text = match config {
        Some(p) => {
            std::fs::read_to_string(&p).map_err(|e| format!("cannot read {}: {e}", p.display()))?
        }
        // With --hf a plan is optional: a terminal on stdin means there is none to wait for.
        None if hf.is_some() && std::io::stdin().is_terminal() => String::new(),
        None => {
            let mut s = String::new();
            std::io::stdin()
                .read_to_string(&mut s)
                .map_err(|e| format!("cannot read stdin: {e}"))?;
            s
        }
    };
    match hf {
        Some(id) => with_hub_config(&text, &id, hf_endpoint.as_deref()),
        None => plan::parse_json(&text).map_err(|e| e.to_string()),
    }
}

/// The plan in `text` (empty: every default) with `id`'s config.json as its `hf_config`, and the
/// id as its `model` label unless the plan names one: the same plan as a file holding that
/// config, so both estimate alike.
fn with_hub_config(text: &str, id: &str, endpoint: Option<&str>) -> Result<Plan, String> {
    let mut keys = if text.trim().is_empty() {
        serde_json::Map::new()
    } else {
        match serde_json::from_str::<serde_json::Value>(text) {
            Ok(serde_json::Value::Object(m)) => m,
            Ok(_) => return Err("invalid plan: expected a JSON object".into()),
            Err(e) => return Err(format!("invalid plan: {e}")),
        }
    };
    if keys.contains_key("hf_config") {
        return Err("the plan has an hf_config and --hf names another: drop one of them".into());
    }
    let (cfg, from) =
        hub::config(id, endpoint, &hub::Env::from_process()).map_err(|e| e.to_string())?;
    if let hub::Source::Cache(why) = from {
        eprintln!("note: {why}; using the cached config.json of {}", id.trim());
    }
    keys.entry("model")
        .or_insert_with(|| id.trim().to_string().into());
    keys.insert("hf_config".into(), cfg);
    plan::parse_json(&serde_json::Value::Object(keys).to_string()).map_err(|e| e.to_string())
}

/// The JSON answer of `estimate` for a single-GPU plan.
pub fn estimate_json(plan: &Plan, e: &Estimate) -> serde_json::Value {
    estimate_json_with(plan, e, None)
}

/// The JSON answer of `estimate`: the simulated step's keys, then `per_gpu`, `host_bytes`,
/// `communication` and `step_seconds` (for one GPU too: no traffic, the compute time), and
/// `parallel` with every rank when the plan has a `parallel` or `offload` key. The top-level keys
/// describe the simulated step of one tensor-parallel rank holding every layer.
pub fn estimate_json_with(
    plan: &Plan,
    e: &Estimate,
    par: Option<&ParallelEstimate>,
) -> serde_json::Value {
    let mut v = estimate_json_base(plan, e);
    let gpu = crate::plan::resolve::gpu(plan).ok().flatten();
    let extra = match par {
        Some(p) => serde_json::json!({
            "per_gpu": p.per_gpu,
            "host_bytes": p.host_bytes,
            "communication": {
                "bytes_per_step": p.comm_bytes_per_step,
                "seconds_per_step": p.comm_seconds_per_step,
                "exposed_seconds_per_step": p.comm_exposed_seconds_per_step,
                "items": p.communication,
            },
            "step_seconds": p.step_seconds,
            "parallel": {
                "scheme": p.scheme,
                "layout": p.layout,
                "peak_rank": p.peak_rank,
                "ranks": p.ranks,
                "compute_seconds": p.compute_seconds,
                "scaling_efficiency": p.scaling_efficiency,
                "samples_per_step": p.samples_per_step,
                "expert_params_bytes": p.expert_params_bytes,
                "offload": p.offload.as_ref().map(offload_json),
                "fits": p.fits,
            },
        }),
        None => serde_json::json!({
            "per_gpu": parallel::single_gpu(e),
            "host_bytes": 0,
            "communication": {"bytes_per_step": 0, "seconds_per_step": 0.0, "exposed_seconds_per_step": 0.0, "items": []},
            "step_seconds": gpu.map(|g| parallel::single_gpu_step_seconds(&plan.setup(), e, &g)),
        }),
    };
    if let (Some(o), serde_json::Value::Object(x)) = (v.as_object_mut(), extra) {
        o.extend(x);
    }
    v
}

/// The segment map, one line a segment: its pool, size, bytes in use and blocks in address order
/// (`*` marks an allocated block).
fn segment_table(segs: &[crate::estimator::allocator::SegmentView]) -> String {
    use crate::estimator::units::Bytes;
    use std::fmt::Write;
    let mut s = format!("segments at the peak    {:>12}\n", segs.len());
    for g in segs {
        let used: u64 = g
            .blocks
            .iter()
            .filter(|b| b.allocated)
            .map(|b| b.size)
            .sum();
        let blocks: Vec<String> = g
            .blocks
            .iter()
            .map(|b| format!("{}{}", Bytes(b.size), if b.allocated { "*" } else { "" }))
            .collect();
        let _ = writeln!(
            s,
            "  {:<5} {:>10} {:>10} used  {}",
            if g.small { "small" } else { "large" },
            Bytes(g.size).to_string(),
            Bytes(used).to_string(),
            blocks.join(" ")
        );
    }
    s
}

/// The offload report with its verdict in words.
fn offload_json(o: &OffloadReport) -> serde_json::Value {
    let mut v = serde_json::json!(o);
    if let Some(m) = v.as_object_mut() {
        m.insert("verdict".into(), offload_verdict(o).into());
    }
    v
}

/// Whether offload's copies hide behind compute, in the page's English sentence.
fn offload_verdict(o: &OffloadReport) -> String {
    crate::ui::logic::i18n::parallelism::offload_verdict(o, crate::ui::logic::i18n::Lang::En)
}

fn estimate_json_base(plan: &Plan, e: &Estimate) -> serde_json::Value {
    let mut breakdown = serde_json::Map::new();
    for r in &e.breakdown {
        breakdown.insert(r.category.key().into(), r.bytes.0.into());
    }
    let gpu = crate::plan::resolve::gpu(plan).ok().flatten();
    let mut v = serde_json::json!({
        "model": e.model,
        "param_count": e.param_count,
        "active_param_count": e.active_param_count,
        "peak_allocated_bytes": e.peak_allocated.0,
        "peak_phase": e.peak_phase.key(),
        "peak_op": e.peak_op,
        "peak_forward_bytes": e.peak_forward.0,
        "reserved_bytes": e.reserved.0,
        "fragmentation_at_peak_bytes": e.fragmentation_at_peak.0,
        "alloc_retries": e.alloc_retries,
        "validation_peak_bytes": e.validation_peak.map(|b| b.0),
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
    // Fine-tuning and inference.
    if let Some(m) = v.as_object_mut() {
        m.insert("mode".into(), e.mode.key().into());
        m.insert("trainable_params".into(), e.trainable_params.into());
        m.insert("weights_bytes".into(), e.weights_bytes.0.into());
        m.insert(
            "moe".into(),
            e.moe
                .as_ref()
                .map(|p| {
                    serde_json::json!({
                        "expert_weights_bytes": p.expert_weights.0,
                        "router_weights_bytes": p.router_weights.0,
                        "shared_expert_weights_bytes": p.shared_expert_weights.0,
                        "expert_saved_bytes": p.expert_saved.0,
                        "router_saved_bytes": p.router_saved.0,
                        "dispatch_saved_bytes": p.dispatch_saved.0,
                        "shared_expert_saved_bytes": p.shared_expert_saved.0,
                    })
                })
                .into(),
        );
        m.insert("kv_cache_bytes".into(), e.kv_cache_bytes.0.into());
        m.insert(
            "paged_opt_state_bytes".into(),
            e.paged_opt_state_bytes.0.into(),
        );
        m.insert("inference".into(), e.inference.as_ref().map(|i| serde_json::json!({"context": i.context, "image_tokens": i.image_tokens, "new_tokens": i.new_tokens, "prefill_peak_bytes": i.prefill_peak.0, "decode_peak_bytes": i.decode_peak.map(|b| b.0), "kv_bytes_per_token": i.kv_bytes_per_token.0})).into());
        // With a GPU, fine-tuning and serving plans also say what fits it.
        if let (Some(g), true) = (&gpu, plan.mode != crate::estimator::tune::Mode::Train) {
            let ok = |r: Result<Option<u64>, _>| r.ok().flatten();
            let ctx = if plan.mode == crate::estimator::tune::Mode::Infer {
                ok(crate::plan::fit::max_context(plan, g.memory))
            } else {
                None
            };
            m.insert("fit".into(), serde_json::json!({"max_batch": ok(crate::plan::fit::max_batch(plan, g.memory)), "max_context": ctx}));
        }
    }
    v
}

fn parallel_table(plan: &Plan, p: &ParallelEstimate) -> String {
    use crate::estimator::units::Bytes;
    use std::fmt::Write;
    let l = &p.layout;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "\n{} GPUs ({} node(s) × {}): dp {} · tp {} · pp {}{}{}, {}, {} micro-batch(es) of {}",
        l.world,
        l.nodes,
        l.gpus_per_node,
        l.dp,
        l.tp,
        l.pp,
        if l.ep > 1 {
            format!(" · ep {} (of dp)", l.ep)
        } else {
            String::new()
        },
        if l.interleave > 1 {
            format!(" (interleave {})", l.interleave)
        } else {
            String::new()
        },
        p.scheme,
        l.micro_batches,
        plan.batch
    );
    let _ = writeln!(
        s,
        "{:<6} {:>12} {:>12} {:>12} {:>12} {:>12} {:>12}  peak at",
        "stage", "params", "grads", "opt state", "activations", "other", "device"
    );
    for r in &p.ranks {
        let m = &r.memory;
        let _ = writeln!(
            s,
            "{:<6} {:>12} {:>12} {:>12} {:>12} {:>12} {:>12}  {} {}",
            r.stage,
            Bytes(m.params_bytes).to_string(),
            Bytes(m.grads_bytes).to_string(),
            Bytes(m.optimizer_state_bytes).to_string(),
            Bytes(m.activations_bytes).to_string(),
            Bytes(m.other_bytes).to_string(),
            Bytes(m.device_total_bytes).to_string(),
            r.peak_phase.key(),
            r.peak_op.clone().unwrap_or_default()
        );
    }
    let _ = writeln!(
        s,
        "peak rank: stage {}, {} per GPU",
        p.ranks[p.peak_rank].stage,
        Bytes(p.per_gpu.device_total_bytes)
    );
    if p.expert_params_bytes > 0 {
        let _ = writeln!(
            s,
            "routed experts on the peak rank: {} of weights ({})",
            Bytes(p.expert_params_bytes),
            if l.ep > 1 {
                format!("1/{} of each sparse layer's experts", l.ep)
            } else {
                "every expert of each sparse layer".into()
            }
        );
    }
    let _ = writeln!(
        s,
        "communication: {} sent per GPU per step, {:.4} s ({:.4} s not hidden by compute)",
        Bytes(p.comm_bytes_per_step),
        p.comm_seconds_per_step,
        p.comm_exposed_seconds_per_step
    );
    for c in &p.communication {
        let _ = writeln!(
            s,
            "  {:<8} {:<72} {:>12} {:>9.4} s over {}",
            c.scheme,
            c.what,
            Bytes(c.bytes_sent.max(c.bytes_received)).to_string(),
            c.seconds,
            c.link
        );
    }
    if let (Some(step), Some(eff)) = (p.step_seconds, p.scaling_efficiency) {
        let _ = writeln!(
            s,
            "step: {:.4} s (compute {:.4} s), scaling efficiency {:.1} %",
            step,
            p.compute_seconds.unwrap_or(0.0),
            eff * 100.0
        );
    }
    if let Some(o) = &p.offload {
        let _ = writeln!(
            s,
            "offload over {}: host {} per GPU ({} per node), GPU saves {}; {}",
            o.link,
            Bytes(o.host_bytes),
            Bytes(o.host_bytes_per_node),
            Bytes(o.gpu_bytes_saved),
            offload_verdict(o)
        );
    }
    if let (Some(f), Some(g)) = (p.fits, crate::plan::resolve::gpu(plan).ok().flatten()) {
        let _ = writeln!(
            s,
            "{} ({}): {}",
            g.name,
            g.memory,
            if f { "fits" } else { "does NOT fit" }
        );
    }
    s
}

fn table(plan: &Plan, e: &Estimate) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let active = if e.active_param_count == e.param_count {
        String::new()
    } else {
        format!(
            " ({} active per token)",
            crate::estimator::units::Elems(e.active_param_count)
        )
    };
    let _ = writeln!(
        s,
        "{}: {} parameters{active}, batch {}",
        e.model,
        crate::estimator::units::Elems(e.param_count),
        plan.batch
    );
    let _ = writeln!(
        s,
        "{:<24} {:>12}",
        "peak allocated",
        e.peak_allocated.to_string()
    );
    let _ = writeln!(s, "{:<24} {:>12}", "  in phase", e.peak_phase.key());
    for r in &e.breakdown {
        if r.bytes.0 > 0 {
            let _ = writeln!(
                s,
                "  {:<22} {:>12}",
                r.category.label(),
                r.bytes.to_string()
            );
        }
    }
    let _ = writeln!(
        s,
        "{:<24} {:>12}",
        "cuBLAS workspaces",
        e.workspaces.to_string()
    );
    let _ = writeln!(s, "{:<24} {:>12}", "reserved", e.reserved.to_string());
    let _ = writeln!(
        s,
        "  {:<22} {:>12}",
        "free at the peak",
        e.fragmentation_at_peak.to_string()
    );
    let _ = writeln!(s, "{:<24} {:>12}", "CUDA context", e.context.to_string());
    let _ = writeln!(
        s,
        "{:<24} {:>12}",
        "device total",
        e.device_total.to_string()
    );
    if let Some(m) = &e.moe {
        let _ = writeln!(
            s,
            "{:<22} {:>12} {:>20}",
            "mixture of experts", "weights", "saved for backward"
        );
        for (part, w, saved) in [
            ("routed experts", m.expert_weights, m.expert_saved),
            ("router", m.router_weights, m.router_saved),
            (
                "token dispatch",
                crate::estimator::units::Bytes::ZERO,
                m.dispatch_saved,
            ),
            (
                "shared experts",
                m.shared_expert_weights,
                m.shared_expert_saved,
            ),
        ] {
            if w.0 > 0 || saved.0 > 0 {
                let _ = writeln!(
                    s,
                    "  {part:<20} {:>12} {:>20}",
                    w.to_string(),
                    saved.to_string()
                );
            }
        }
    }
    if let Some(g) = crate::plan::resolve::gpu(plan).ok().flatten() {
        let verdict = if e.device_total <= g.memory {
            "fits"
        } else {
            "does NOT fit"
        };
        let _ = writeln!(s, "{} ({}): {}", g.name, g.memory, verdict);
    }
    s
}
