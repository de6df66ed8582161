//! A layout evaluated: each pipeline rank's peak over its chunks' timelines rewritten for the
//! data-parallel sharding and the micro-batches in flight, its host memory, its traffic
//! ([`super::traffic`]) and the step time.

use super::comm::{self, CommItem, Traffic};
use super::layout::{Layout, Links};
use super::piece::Prepared;
use super::pipeline;
use super::report::{OffloadReport, ParallelEstimate, PerGpu, RankReport};
use super::settings::Offload;
use super::traffic::comm_items;
use super::zero::{RankLive, Sharded};
use crate::estimator::config::Setup;
use crate::estimator::error::EstimateError;
use crate::estimator::estimate::Estimate;
use crate::estimator::hardware::{DeviceOverhead, Gpu};
use crate::estimator::timeline::{Category, Phase};

fn cat_name(i: usize) -> &'static str {
    Category::ALL[i].key()
}

/// Estimates `setup` on its multi-GPU layout over `links`, with pieces made by `prep`
/// ([`super::prepare`] for a model, [`super::prepare_graph`] for a graph built by hand). With
/// offload, the same layout without it is evaluated too, for what offload saves.
pub fn estimate_parallel_with(
    plan: &Setup,
    gpu: Option<&Gpu>,
    links: Links,
    prep: impl Fn(&Layout) -> Result<Prepared, EstimateError>,
) -> Result<ParallelEstimate, EstimateError> {
    let layout = Layout::resolve(plan, links)?;
    let prepared = prep(&layout)?;
    let baseline = if layout.offload.any() {
        let mut base = layout.clone();
        base.offload = Offload::default();
        let without = if layout.offload.activations {
            evaluate(plan, &base, &prep(&base)?, gpu, None)
        } else {
            evaluate(plan, &base, &prepared, gpu, None)
        };
        Some(without.per_gpu.peak_allocated_bytes)
    } else {
        None
    };
    Ok(evaluate(plan, &layout, &prepared, gpu, baseline))
}

/// One pipeline rank's memory at its peak and what it keeps on the host.
struct RankMemory {
    stage: u64,
    chunks: Vec<usize>,
    in_flight: u64,
    peak_phase: Phase,
    peak_op: Option<String>,
    memory: PerGpu,
    breakdown: Vec<(String, u64)>,
    host: u64,
}

/// An op of a rank's chunk: (chunk, op index in its graph).
type OpAt = (usize, usize);

/// What one pipeline rank's peak is made of besides its chunks' own timelines.
struct RankSetup {
    /// Its model chunks (interleaved stages), as indices of the prepared pieces.
    chunks: Vec<usize>,
    /// Micro-batches in flight at its peak.
    n_in_flight: u64,
    /// The saved activations of the micro-batches in flight beyond the one running.
    extra: u64,
    /// What each chunk holds while another runs: its state at the start of the step, without
    /// the micro-batch's inputs (counted in flight).
    statics: Vec<RankLive>,
}

fn rank_setup(layout: &Layout, prep: &Prepared, sharded: &[Sharded], i: u64) -> RankSetup {
    let m = layout.micro_batches as u64;
    let (pp, v) = (layout.pp, layout.interleave);
    let chunks: Vec<usize> = (0..v)
        .map(|j| (i + j * pp) as usize)
        .filter(|&c| c < prep.pieces.len())
        .collect();
    let n_in_flight = pipeline::in_flight(i, pp, m, v);
    let mean_in_flight = chunks
        .iter()
        .map(|&c| prep.pieces[c].in_flight)
        .sum::<u64>()
        / chunks.len().max(1) as u64;
    let statics = chunks
        .iter()
        .map(|&c| {
            let ev = &prep.pieces[c].r.timeline.events[0];
            let mut l = sharded[c].at(ev);
            l.cats[Category::Inputs.index()] = 0;
            l
        })
        .collect();
    RankSetup {
        chunks,
        n_in_flight,
        extra: n_in_flight.saturating_sub(1) * mean_in_flight,
        statics,
    }
}

/// Each prepared piece as one data-parallel rank of `layout` holds it.
fn shard_pieces<'a>(plan: &Setup, layout: &Layout, prep: &'a Prepared) -> Vec<Sharded<'a>> {
    let (sh, states) = (layout.sharding(), plan.opt.states_per_param());
    prep.pieces
        .iter()
        .map(|p| Sharded::new(p, sh, states, layout.mixed_precision))
        .collect()
}

/// Whether `layout` surely does not fit `gpu`, told without walking the timelines: a rank's
/// sharding only rewrites the parameters, gradients and optimizer state of an event
/// ([`Sharded::at`]), so the largest rest of a forward or backward event
/// ([`Piece::max_unsharded`]), with the micro-batches in flight and the other chunks' state, is
/// a lower bound of its peak. A layout search asks this first: most layouts it tries are far
/// too large.
pub fn surely_over(plan: &Setup, layout: &Layout, prep: &Prepared, gpu: &Gpu) -> bool {
    let sharded = shard_pieces(plan, layout, prep);
    let overhead = DeviceOverhead::of(Some(gpu), &plan.stack);
    let fixed = prep.overhead + overhead.workspaces.0 + overhead.context.0;
    (0..layout.pp).any(|i| {
        let r = rank_setup(layout, prep, &sharded, i);
        let all: u64 = r.statics.iter().map(RankLive::total).sum();
        r.chunks.iter().enumerate().any(|(k, &c)| {
            let others = all - r.statics[k].total();
            let low = prep.pieces[c].max_unsharded + r.extra + others;
            low.saturating_add(fixed) > gpu.memory.0
        })
    })
}

/// Whether `layout` surely does not fit `gpu`, told before its pieces are prepared, from
/// [`super::SavedFloor::pieces`] (`floors`, one per chunk): what [`surely_over`] would tell at
/// most. For each chunk `c` of a rank, [`surely_over`]'s floor is `max_unsharded(c) + extra +
/// others + overhead + workspaces + context`, with `extra = (in flight - 1) × mean in_flight`
/// over the rank's chunks; `max_unsharded(c)` and `in_flight(c)` are each at least
/// `floors[c]` (see [`super::SavedFloor`]), and `others` and the allocator overhead at least 0.
/// So a layout over here is over there too, and skipping it changes no answer. `false` under
/// activation offload (the floor does not hold there).
pub fn floor_over(plan: &Setup, layout: &Layout, floors: &[u64], gpu: &Gpu) -> bool {
    if layout.offload.activations {
        return false;
    }
    let overhead = DeviceOverhead::of(Some(gpu), &plan.stack);
    let fixed = overhead.workspaces.0 + overhead.context.0;
    let m = layout.micro_batches as u64;
    let (pp, v) = (layout.pp, layout.interleave);
    (0..pp).any(|i| {
        let chunks: Vec<usize> = (0..v)
            .map(|j| (i + j * pp) as usize)
            .filter(|&c| c < floors.len())
            .collect();
        let mean = chunks.iter().map(|&c| floors[c]).sum::<u64>() / chunks.len().max(1) as u64;
        let extra = pipeline::in_flight(i, pp, m, v)
            .saturating_sub(1)
            .saturating_mul(mean);
        chunks
            .iter()
            .any(|&c| floors[c].saturating_add(extra).saturating_add(fixed) > gpu.memory.0)
    })
}

/// Per-rank memory, communication and time of `layout` over prepared pieces.
/// `baseline_peak`: the peak allocated of the same layout without offload, to report what
/// offload saves (`None`: not computed, reported as 0).
pub fn evaluate(
    plan: &Setup,
    layout: &Layout,
    prep: &Prepared,
    gpu: Option<&Gpu>,
    baseline_peak: Option<u64>,
) -> ParallelEstimate {
    let sharded = shard_pieces(plan, layout, prep);
    let topo = layout.topology();
    let overhead = DeviceOverhead::of(gpu, &plan.stack);
    let (workspaces, context) = (overhead.workspaces.0, overhead.context.0);
    let peak_flops = gpu.map(|g| comm::peak_flops(g, layout.compute_precision(plan)) * layout.mfu);
    let m = layout.micro_batches as u64;
    let (pp, v) = (layout.pp, layout.interleave);

    let mut ranks = Vec::new();
    for i in 0..pp {
        let RankSetup {
            chunks,
            n_in_flight,
            extra,
            statics,
        } = rank_setup(layout, prep, &sharded, i);
        // The peak is found on totals alone, and its categories rebuilt for that one event: a
        // search evaluates hundreds of layouts over timelines of a hundred thousand events.
        let mut best: Option<(u64, Phase, Option<OpAt>, RankLive)> = None;
        let mut opt_sum = RankLive::default();
        for (k, &c) in chunks.iter().enumerate() {
            let piece = &prep.pieces[c];
            let mut others = RankLive::default();
            for (k2, s) in statics.iter().enumerate() {
                if k2 != k {
                    others.add(s);
                }
            }
            let others_total = others.total();
            let mut top: Option<(u64, usize)> = None;
            for (e, ev) in piece.r.timeline.events.iter().enumerate() {
                if ev.phase == Phase::Optimizer {
                    opt_sum.add(&sharded[c].at(ev));
                    continue;
                }
                let mut t = sharded[c].at(ev).total();
                if matches!(ev.phase, Phase::Forward | Phase::Backward) {
                    t = t.saturating_add(extra);
                }
                if top.is_none_or(|(b, _)| t > b) {
                    top = Some((t, e));
                }
            }
            let Some((t, e)) = top else { continue };
            let t = t.saturating_add(others_total);
            if best.as_ref().is_none_or(|b| t > b.0) {
                let ev = &piece.r.timeline.events[e];
                let mut l = sharded[c].at(ev);
                if matches!(ev.phase, Phase::Forward | Phase::Backward) {
                    l.cats[Category::Activations.index()] += extra;
                }
                l.add(&others);
                best = Some((t, ev.phase, ev.op.map(|o| (c, o)), l));
            }
        }
        if best.as_ref().is_none_or(|b| opt_sum.total() > b.0) {
            best = Some((opt_sum.total(), Phase::Optimizer, None, opt_sum));
        }
        let best = best.map(|(_, ph, at, l)| (l, ph, at));
        let (live, peak_phase, peak_at) =
            best.unwrap_or((RankLive::default(), Phase::Forward, None));
        let peak_op = peak_at.map(|(c, o)| {
            let op = &prep.pieces[c].g.ops[o];
            if op.name.is_empty() {
                op.kind.to_string()
            } else {
                format!("{} ({})", op.name, op.kind)
            }
        });
        let memory = PerGpu::of(&live, prep.overhead, workspaces, context);
        let mut breakdown: Vec<(String, u64)> = (0..Category::COUNT)
            .map(|k| (cat_name(k).to_string(), live.cats[k]))
            .collect();
        breakdown.push(("comm_buffers".into(), live.comm_buffers));

        // Host memory of this rank.
        let mut host = 0u64;
        for &c in &chunks {
            let s = &sharded[c];
            if layout.offload.optimizer {
                // The state, and the gradients and parameters of the share this rank steps on,
                // pinned (with parameter offload that copy is the parameter shard itself).
                host += s.optimizer_state()
                    + s.optimizer_share(s.grads_full())
                    + s.optimizer_share(s.params_full());
            } else if layout.offload.params {
                host += s.params_at_rest();
            }
            host += prep.pieces[c].offloaded * n_in_flight.max(1).min(m.max(1) * v);
        }
        ranks.push(RankMemory {
            stage: i,
            chunks,
            in_flight: n_in_flight,
            peak_phase,
            peak_op,
            memory,
            breakdown,
            host,
        });
    }

    // Communication and time per rank.
    let mut reports = Vec::new();
    let mut all_items: Vec<Vec<CommItem>> = Vec::new();
    let mut compute_per_mb = Vec::new();
    let mut fwd_per_mb = Vec::new();
    for r in &ranks {
        let (i, chunks) = (&r.stage, &r.chunks);
        let f: f64 = chunks.iter().map(|&c| prep.pieces[c].forward_flops()).sum();
        let st: f64 = chunks.iter().map(|&c| prep.pieces[c].step_flops()).sum();
        let (cf, cs) = match peak_flops {
            Some(pf) => (f / pf, st / pf),
            None => (0.0, 0.0),
        };
        fwd_per_mb.push(cf);
        compute_per_mb.push(cs);
        let items = comm_items(layout, &topo, prep, &sharded, chunks, *i, cf, cs - cf);
        all_items.push(items);
    }
    let c_max = compute_per_mb.iter().cloned().fold(0.0, f64::max);
    let compute = if pp > 1 {
        c_max * (m as f64 + (pp - 1) as f64 / v as f64)
    } else {
        c_max * m as f64
    };
    // Ranks wait for each other every step: the slowest sets the pace.
    let exposed_max = all_items
        .iter()
        .map(|it| it.iter().map(|x| x.exposed_seconds).sum::<f64>())
        .fold(0.0, f64::max);
    let step = compute + exposed_max;
    for (k, r) in ranks.into_iter().enumerate() {
        let items = &all_items[k];
        reports.push(RankReport {
            stage: r.stage,
            chunks: r.chunks.iter().map(|&c| c as u64).collect(),
            micro_batches_in_flight: r.in_flight,
            peak_phase: r.peak_phase,
            peak_op: r.peak_op,
            memory: r.memory,
            breakdown: r.breakdown,
            host_bytes: r.host,
            compute_seconds: compute_per_mb[k] * m as f64,
            comm_bytes_sent: items
                .iter()
                .filter(|x| x.scheme != Traffic::Offload)
                .map(|x| x.bytes_sent)
                .sum(),
            comm_seconds: items
                .iter()
                .filter(|x| x.scheme != Traffic::Offload)
                .map(|x| x.seconds)
                .sum(),
            exposed_comm_seconds: items
                .iter()
                .filter(|x| x.scheme != Traffic::Offload)
                .map(|x| x.exposed_seconds)
                .sum(),
        });
    }
    let peak_rank = (0..reports.len())
        .max_by_key(|&k| (reports[k].memory.device_total_bytes, std::cmp::Reverse(k)))
        .unwrap_or(0);
    let busiest = (0..reports.len())
        .max_by(|&a, &b| reports[a].comm_bytes_sent.cmp(&reports[b].comm_bytes_sent))
        .unwrap_or(0);
    let per_gpu = reports[peak_rank].memory.clone();
    let expert_params_bytes = reports[peak_rank]
        .chunks
        .iter()
        .map(|&c| sharded[c as usize].expert_params_full())
        .sum();
    let host_bytes = reports.iter().map(|r| r.host_bytes).max().unwrap_or(0);
    let useful = compute_per_mb.iter().sum::<f64>() / compute_per_mb.len().max(1) as f64 * m as f64;

    let offload = layout.offload.any().then(|| {
        let items: Vec<&CommItem> = all_items[peak_rank]
            .iter()
            .filter(|x| x.scheme == Traffic::Offload)
            .collect();
        let transfer: u64 = items.iter().map(|x| x.bytes_sent + x.bytes_received).sum();
        let secs: f64 = items.iter().map(|x| x.seconds).sum();
        let exposed: f64 = items.iter().map(|x| x.exposed_seconds).sum();
        let hidden = exposed <= 1e-3 * step.max(1e-9) || exposed == 0.0;
        OffloadReport {
            link: layout.host_link.id,
            link_gbs_per_direction: layout.host_link.gbs_per_direction,
            link_name: layout.host_link.name,
            shared_memory: layout.host_link.shared_memory,
            host_bytes,
            host_bytes_per_node: host_bytes.saturating_mul(layout.gpus_per_node),
            gpu_bytes_saved: baseline_peak
                .map_or(0, |b| b.saturating_sub(per_gpu.peak_allocated_bytes)),
            transfer_bytes_per_step: transfer,
            transfer_seconds_per_step: secs,
            exposed_seconds_per_step: exposed,
            hidden,
            timed: peak_flops.is_some(),
            on_compute_stream: layout.offload.activations,
        }
    });
    let communication = all_items[busiest].clone();
    let fits = gpu.map(|g| per_gpu.device_total_bytes <= g.memory.0);
    ParallelEstimate {
        scheme: layout.scheme(),
        layout: layout.clone(),
        peak_rank,
        per_gpu,
        host_bytes,
        expert_params_bytes,
        comm_bytes_per_step: reports[busiest].comm_bytes_sent,
        comm_seconds_per_step: reports[busiest].comm_seconds,
        comm_exposed_seconds_per_step: reports[busiest].exposed_comm_seconds,
        communication,
        compute_seconds: peak_flops.map(|_| compute),
        step_seconds: peak_flops.map(|_| step),
        scaling_efficiency: peak_flops.map(|_| if step > 0.0 { useful / step } else { 1.0 }),
        samples_per_step: plan.batch.saturating_mul(m).saturating_mul(layout.dp),
        ranks: reports,
        offload,
        fits,
    }
}

/// Compute seconds of a single-GPU step at the default MFU.
pub fn single_gpu_step_seconds(plan: &Setup, e: &Estimate, gpu: &Gpu) -> f64 {
    e.step_flops(plan.accumulation) / (comm::peak_flops(gpu, plan.dtype) * comm::DEFAULT_MFU)
}
