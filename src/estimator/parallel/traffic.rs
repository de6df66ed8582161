//! What each pipeline rank sends and receives in one optimizer step, and how much of it compute
//! hides: DDP buckets, ZeRO and FSDP gathers and reduce-scatters, tensor-parallel collectives,
//! pipeline sends and offload copies.

use super::comm::{self, Collective, CommItem, Topology, Traffic};
use super::layout::Layout;
use super::piece::Prepared;
use super::tp::CommGroup;
use super::zero::{self, Sharded};

#[allow(clippy::too_many_arguments)]
fn item(
    scheme: Traffic,
    what: String,
    c: Collective,
    n: u64,
    buffer: u64,
    calls: u64,
    link: &comm::GroupLink,
    exposed: f64,
) -> CommItem {
    let per = comm::ring_bytes(c, n, buffer);
    let bytes = (per * calls as f64).round() as u64;
    let secs = comm::collective_seconds(c, n, buffer, link) * calls as f64;
    CommItem {
        scheme,
        what,
        collective: Some(c),
        group: n,
        buffer_bytes: buffer,
        calls,
        bytes_sent: bytes,
        bytes_received: bytes,
        link: link.link,
        seconds: secs,
        exposed_seconds: exposed.clamp(0.0, secs),
    }
}

/// The traffic of pipeline rank `stage` per optimizer step, with the part of each kind that
/// compute cannot hide. `fwd`/`bwd`: compute seconds of one micro-batch's forward and backward.
#[allow(clippy::too_many_arguments)]
pub(super) fn comm_items(
    layout: &Layout,
    topo: &Topology,
    prep: &Prepared,
    sharded: &[Sharded],
    chunks: &[usize],
    stage: u64,
    fwd: f64,
    bwd: f64,
) -> Vec<CommItem> {
    let mut out = Vec::new();
    let m = layout.micro_batches as u64;
    let (dp, tp, pp) = (layout.dp, layout.tp, layout.pp);
    let _ = stage;
    // Data parallelism: the dense weights over the data-parallel group, the routed experts'
    // over the ranks holding the same experts (each group its own communicator and stream).
    let expert_share = |full: u64, expert: u64| {
        if full == 0 {
            0.0
        } else {
            expert as f64 / full as f64
        }
    };
    let ep = layout.ep.max(1);
    // Without expert parallelism the experts share the data-parallel group.
    let split = |f: &dyn Fn(&Sharded) -> u64| -> u64 {
        if ep > 1 {
            chunks.iter().map(|&c| f(&sharded[c])).sum()
        } else {
            0
        }
    };
    let grads_all: u64 = chunks.iter().map(|&c| sharded[c].grads_reduced()).sum();
    let grads_exp = split(&|s| s.expert_grads_reduced());
    let params_all: u64 = chunks.iter().map(|&c| sharded[c].params_full()).sum();
    let params_exp = split(&|s| s.expert_params_full());
    for (experts, n, stride, part, grads, params, what) in [
        (
            false,
            dp,
            tp,
            1.0 - expert_share(grads_all, grads_exp),
            grads_all - grads_exp,
            params_all - params_exp,
            "",
        ),
        (
            true,
            dp / ep,
            tp * ep,
            expert_share(grads_all, grads_exp),
            grads_exp,
            params_exp,
            " (experts, over the ranks holding the same experts)",
        ),
    ] {
        if n > 1 && (grads > 0 || params > 0) {
            let l = topo.group(stride, n);
            let part = DpPart {
                n,
                share: part,
                grads,
                params,
                experts,
                what,
            };
            out.extend(dp_items(layout, &l, sharded, chunks, &part, fwd, bwd));
        }
    }
    // Tensor parallelism: the collectives the builder recorded, on the critical path.
    if tp > 1 {
        let l = topo.group(1, tp);
        let mut by_kind: Vec<(Collective, bool, u64, u64)> = Vec::new();
        for &c in chunks {
            let g = &prep.pieces[c].g;
            for r in g.tp.comm.iter().filter(|r| r.group == CommGroup::Tp) {
                let recompute = !r.backward && g.ops.get(r.op).is_some_and(|o| o.segment.is_some());
                let calls = if recompute { 2 } else { 1 };
                match by_kind
                    .iter_mut()
                    .find(|x| x.0 == r.collective && x.1 == r.backward && x.2 == r.bytes)
                {
                    Some(x) => x.3 += calls,
                    None => by_kind.push((r.collective, r.backward, r.bytes, calls)),
                }
            }
        }
        for (c, backward, bytes, calls) in by_kind {
            let what = format!(
                "Megatron {} {:?} per micro-batch",
                if backward { "backward" } else { "forward" },
                c
            )
            .to_ascii_lowercase();
            out.push(item(
                Traffic::Tp,
                what,
                c,
                tp,
                bytes,
                calls * m,
                &l,
                f64::INFINITY,
            ));
        }
    }
    // Expert parallelism: the token all-to-alls the builder recorded, on the critical path (the
    // experts wait for their tokens, the next layer for the combine); a recomputed segment
    // dispatches again.
    if ep > 1 {
        let l = topo.group(tp, ep);
        let mut by_kind: Vec<(bool, u64, u64)> = Vec::new();
        for &c in chunks {
            let g = &prep.pieces[c].g;
            for r in g.tp.comm.iter().filter(|r| r.group == CommGroup::Ep) {
                let recompute = !r.backward && g.ops.get(r.op).is_some_and(|o| o.segment.is_some());
                let calls = if recompute { 2 } else { 1 };
                match by_kind
                    .iter_mut()
                    .find(|x| x.0 == r.backward && x.1 == r.bytes)
                {
                    Some(x) => x.2 += calls,
                    None => by_kind.push((r.backward, r.bytes, calls)),
                }
            }
        }
        for (backward, bytes, calls) in by_kind {
            out.push(item(
                Traffic::Ep,
                format!(
                    "token all-to-all in {} per micro-batch (dispatch and combine)",
                    if backward { "backward" } else { "forward" }
                ),
                Collective::AllToAll,
                ep,
                bytes,
                calls * m,
                &l,
                f64::INFINITY,
            ));
        }
    }
    // Pipeline parallelism: activations forward, gradients back, per micro-batch and chunk.
    if pp > 1 {
        let l = topo.pair(tp * dp, pp);
        let next: u64 = chunks.iter().map(|&c| prep.pieces[c].send_next).sum();
        let prev: u64 = chunks.iter().map(|&c| prep.pieces[c].send_prev).sum();
        let sent = (next + prev) * m;
        let secs = (comm::collective_seconds(Collective::SendRecv, 2, next, &l)
            + comm::collective_seconds(Collective::SendRecv, 2, prev, &l))
            * m as f64;
        out.push(CommItem {
            scheme: Traffic::Pp,
            what: "activations to the next stage, gradients to the previous (each micro-batch)"
                .into(),
            collective: Some(Collective::SendRecv),
            group: 2,
            buffer_bytes: next.max(prev),
            calls: m * chunks.len() as u64,
            bytes_sent: sent,
            bytes_received: sent,
            link: l.link,
            seconds: secs,
            exposed_seconds: secs,
        });
    }
    // Offload copies over the host link.
    let hl = &layout.host_link;
    let host_item = |what: String, bytes: u64, calls: u64, d2h: bool, window: f64| {
        let secs = comm::copy_seconds(bytes, hl) * calls as f64;
        CommItem {
            scheme: Traffic::Offload,
            what,
            collective: None,
            group: 1,
            buffer_bytes: bytes,
            calls,
            bytes_sent: if d2h { bytes * calls } else { 0 },
            bytes_received: if d2h { 0 } else { bytes * calls },
            link: hl.id,
            seconds: secs,
            exposed_seconds: (secs - window).max(0.0),
        }
    };
    if layout.offload.optimizer {
        let g: u64 = chunks
            .iter()
            .map(|&c| sharded[c].optimizer_share(sharded[c].grads_full()))
            .sum();
        let p: u64 = chunks
            .iter()
            .map(|&c| sharded[c].optimizer_share(sharded[c].params_full()))
            .sum();
        out.push(host_item(
            "gradients to the host optimizer (overlaps the last backward)".into(),
            g,
            1,
            true,
            bwd,
        ));
        out.push(host_item(
            "updated parameters back from the host".into(),
            p,
            1,
            false,
            0.0,
        ));
    }
    if layout.offload.params {
        let p: u64 = chunks.iter().map(|&c| sharded[c].params_at_rest()).sum();
        out.push(host_item(
            "parameter shards to the GPU before each gather (forward and backward)".into(),
            p,
            2 * m,
            false,
            (fwd + bwd) * m as f64,
        ));
    }
    if layout.offload.activations {
        let a: u64 = chunks.iter().map(|&c| prep.pieces[c].offloaded).sum();
        out.push(host_item(
            "saved activations to the host (save_on_cpu, compute stream)".into(),
            a,
            m,
            true,
            0.0,
        ));
        out.push(host_item(
            "saved activations back for backward".into(),
            a,
            m,
            false,
            0.0,
        ));
    }
    out
}

/// One data-parallel group's share of the weights: the dense part or the routed experts'.
struct DpPart {
    n: u64,
    /// Fraction of the gradients (and DDP buckets) that are this part's.
    share: f64,
    grads: u64,
    params: u64,
    /// The routed experts' part (none of it in the root unit).
    experts: bool,
    what: &'static str,
}

/// The data-parallel traffic of one part of the weights over its group of `part.n` ranks.
fn dp_items(
    layout: &Layout,
    l: &comm::GroupLink,
    sharded: &[Sharded],
    chunks: &[usize],
    part: &DpPart,
    fwd: f64,
    bwd: f64,
) -> Vec<CommItem> {
    let mut out = Vec::new();
    let m = layout.micro_batches as u64;
    let (dp, grads, params) = (part.n, part.grads, part.params);
    let scale = |b: u64| (b as f64 * part.share).round() as u64;
    let secs = |c: Collective, b: u64| comm::collective_seconds(c, dp, b, l);
    match (layout.zero, layout.fsdp) {
        (0 | 1, false) => {
            // Bucketed all-reduce once per step (`no_sync` on earlier micro-batches), overlapping
            // the last backward; the last bucket (the first layers) is ready only at its end.
            let buckets: Vec<(u64, f64)> = chunks
                .iter()
                .flat_map(|&c| {
                    sharded[c]
                        .buckets
                        .iter()
                        .map(|&b| scale(b))
                        .zip(sharded[c].bucket_ready.iter().copied())
                })
                .collect();
            let total: f64 = buckets
                .iter()
                .map(|&(b, _)| secs(Collective::AllReduce, b))
                .sum();
            // The comm stream takes buckets in order as they become ready during the last
            // backward (Li et al. 2020, "PyTorch Distributed", §3.2.3); what runs past the
            // backward's end is exposed.
            let mut end = 0.0f64;
            for &(b, ready) in &buckets {
                end = end.max(ready * bwd) + secs(Collective::AllReduce, b);
            }
            let exposed = (end - bwd).max(0.0);
            let mut it = item(
                Traffic::Dp,
                format!("DDP gradient all-reduce ({} buckets)", buckets.len()),
                Collective::AllReduce,
                dp,
                grads,
                1,
                l,
                0.0,
            );
            it.seconds = total;
            it.exposed_seconds = exposed.min(total);
            out.push(it);
            if layout.zero == 1 {
                out.push(item(
                    Traffic::Zero,
                    "ZeroRedundancyOptimizer parameter broadcast after the step".into(),
                    Collective::AllGather,
                    dp,
                    params,
                    1,
                    l,
                    f64::INFINITY,
                ));
            }
        }
        (2, false) => {
            let t = secs(Collective::ReduceScatter, grads) * m as f64;
            let tail = secs(Collective::ReduceScatter, grads.min(zero::DDP_BUCKET_CAP));
            out.push(item(
                Traffic::Zero,
                "gradient reduce-scatter (each micro-batch)".into(),
                Collective::ReduceScatter,
                dp,
                grads,
                m,
                l,
                (t - bwd * m as f64).max(tail * m as f64),
            ));
            out.push(item(
                Traffic::Zero,
                "parameter all-gather after the step".into(),
                Collective::AllGather,
                dp,
                params,
                1,
                l,
                f64::INFINITY,
            ));
        }
        (z, _) => {
            // FSDP / ZeRO-3: gathers per unit, prefetched one ahead; the first unit's gather and
            // the last reduce-scatter cannot hide.
            let first_unit = scale(
                chunks
                    .iter()
                    .filter_map(|&c| sharded[c].unit_params_full().first().copied())
                    .next()
                    .unwrap_or(0)
                    + chunks
                        .iter()
                        .map(|&c| sharded[c].root_params_full())
                        .sum::<u64>(),
            );
            let last_unit = chunks
                .iter()
                .filter_map(|&c| sharded[c].unit_grads_full().first().copied())
                .next()
                .map_or(grads, scale);
            let agf = secs(Collective::AllGather, params);
            out.push(item(
                if layout.fsdp {
                    Traffic::Fsdp
                } else {
                    Traffic::Zero
                },
                "parameter all-gather in forward (each micro-batch)".into(),
                Collective::AllGather,
                dp,
                params,
                m,
                l,
                ((agf - fwd).max(secs(Collective::AllGather, first_unit))) * m as f64,
            ));
            let mut bwd_busy = 0.0;
            if z >= 3 {
                // The root unit (embeddings, head) holds no experts.
                let root: u64 = if layout.fsdp && !part.experts {
                    chunks.iter().map(|&c| sharded[c].root_params_full()).sum()
                } else {
                    0
                };
                let b = params.saturating_sub(root);
                let agb = secs(Collective::AllGather, b);
                bwd_busy += agb;
                out.push(item(
                    if layout.fsdp {
                        Traffic::Fsdp
                    } else {
                        Traffic::Zero
                    },
                    "parameter all-gather in backward (each micro-batch)".into(),
                    Collective::AllGather,
                    dp,
                    b,
                    m,
                    l,
                    0.0,
                ));
            }
            let rs = secs(Collective::ReduceScatter, grads);
            bwd_busy += rs;
            let exposed =
                ((bwd_busy - bwd).max(secs(Collective::ReduceScatter, last_unit))) * m as f64;
            out.push(item(
                if layout.fsdp {
                    Traffic::Fsdp
                } else {
                    Traffic::Zero
                },
                "gradient reduce-scatter (each micro-batch)".into(),
                Collective::ReduceScatter,
                dp,
                grads,
                m,
                l,
                exposed,
            ));
        }
    }
    for it in &mut out {
        it.what.push_str(part.what);
    }
    out
}
