//! The parallelism panel's texts that carry numbers, in both languages: the layout line, the
//! chart marks, a found layout, the offload verdict. Sizes and durations come in formatted.

use super::{fmt_seconds, Lang};
use crate::estimator::decimal::Fixed;
use crate::estimator::parallel::{OffloadReport, Scheme};

/// "GPU" with the plural English wants for `n`.
fn gpus_en(n: u64) -> &'static str {
    if n == 1 {
        "GPU"
    } else {
        "GPUs"
    }
}

/// The estimator's name of a data-parallel scheme: the API names (DDP, ZeRO-n, FSDP modes) read
/// the same in both languages; only the one-replica case is prose.
pub fn scheme_name(scheme: Scheme, lang: Lang) -> String {
    match (scheme, lang) {
        (Scheme::SingleReplica, Lang::Zh) => "单副本（无数据并行）".into(),
        _ => scheme.to_string(),
    }
}

/// The ZeRO chart's mark: the plan's own layout, its GPU count and per-GPU device total.
pub fn your_layout(gpus: u64, total: &str, lang: Lang) -> String {
    match lang {
        Lang::En => format!("your layout, {gpus} {}: {total}", gpus_en(gpus)),
        Lang::Zh => format!("当前布局，{gpus} 张 GPU：{total}"),
    }
}

/// A bar of the rank chart: a pipeline stage.
pub fn stage(stage: u64, lang: Lang) -> String {
    match lang {
        Lang::En => format!("stage {stage}"),
        Lang::Zh => format!("阶段 {stage}"),
    }
}

/// The rank chart's mark on its highest bar.
pub fn peak_rank(total: &str, lang: Lang) -> String {
    match lang {
        Lang::En => format!("peak rank: {total}"),
        Lang::Zh => format!("峰值阶段：{total}"),
    }
}

/// A multi-GPU layout's degrees.
#[derive(Clone, Copy, Debug)]
pub struct Degrees {
    pub dp: u64,
    pub tp: u64,
    pub pp: u64,
    /// Expert parallelism (1: every rank holds every expert; then not shown).
    pub ep: u64,
    /// The data-parallel scheme ([`scheme_name`]).
    pub scheme: Scheme,
}

/// `dp · tp · pp`, and `· ep` where the experts are split.
fn degree_list(d: &Degrees) -> String {
    let mut s = format!("dp {} · tp {} · pp {}", d.dp, d.tp, d.pp);
    if d.ep > 1 {
        s.push_str(&format!(" · ep {}", d.ep));
    }
    s
}

/// The layout row: GPUs, nodes × GPUs per node, degrees and scheme.
pub fn layout(world: u64, nodes: u64, gpus_per_node: u64, d: Degrees, lang: Lang) -> String {
    let (degrees, scheme) = (degree_list(&d), d.scheme);
    match lang {
        Lang::En => format!(
            "{world} {} ({nodes} × {gpus_per_node}): {degrees}, {scheme}",
            gpus_en(world)
        ),
        Lang::Zh => format!(
            "{world} 张 GPU（{nodes} 节点 × {gpus_per_node}）：{degrees}，{}",
            scheme_name(scheme, lang)
        ),
    }
}

/// The communication row: bytes sent per step and the time they take.
pub fn communication(sent: &str, time: &str, lang: Lang) -> String {
    match lang {
        Lang::En => format!("{sent} sent, {time}"),
        Lang::Zh => format!("发送 {sent}，耗时 {time}"),
    }
}

/// A layout the search found.
#[derive(Clone, Copy, Debug)]
pub struct Found<'a> {
    pub gpus: u64,
    pub degrees: Degrees,
    /// Offloaded: `None`, the optimizer state (`Some(false)`), or it and the parameters.
    pub offload_params: Option<bool>,
    pub micro_batch: u64,
    pub micro_batches: u64,
    /// Device total per GPU, formatted.
    pub peak: &'a str,
    /// Step time, formatted, when a GPU gives one.
    pub step: Option<&'a str>,
}

/// One line describing a found layout.
pub fn found_layout(f: &Found, lang: Lang) -> String {
    let (degrees, scheme) = (degree_list(&f.degrees), f.degrees.scheme);
    let (gpus, peak) = (f.gpus, f.peak);
    let (micro, count) = (f.micro_batch, f.micro_batches);
    match lang {
        Lang::En => {
            let mut s = format!("{gpus} {}: {degrees}, {scheme}", gpus_en(gpus));
            match f.offload_params {
                Some(true) => s.push_str(", optimizer + parameters offloaded"),
                Some(false) => s.push_str(", optimizer offloaded"),
                None => {}
            }
            s.push_str(&format!(", micro-batch {micro} × {count}, {peak} per GPU"));
            if let Some(t) = f.step {
                s.push_str(&format!(", step {t}"));
            }
            s
        }
        Lang::Zh => {
            let mut s = format!("{gpus} 张 GPU：{degrees}，{}", scheme_name(scheme, lang));
            match f.offload_params {
                Some(true) => s.push_str("，卸载优化器状态与参数"),
                Some(false) => s.push_str("，卸载优化器状态"),
                None => {}
            }
            s.push_str(&format!("，微批 {micro} × {count}，每张 GPU {peak}"));
            if let Some(t) = f.step {
                s.push_str(&format!("，单步 {t}"));
            }
            s
        }
    }
}

/// The offload verdict: how long the copies per step take over the host link and whether
/// compute hides them, from the estimator's facts. English keeps three decimals of a second (the
/// CLI prints the same sentence); 中文 formats the times as the rest of the page does.
pub fn offload_verdict(o: &OffloadReport, lang: Lang) -> String {
    let link = o.link_name;
    match lang {
        Lang::En => {
            let secs = o.transfer_seconds_per_step;
            let mut t = if !o.timed {
                format!(
                    "{} s of copies per step over {link}; give a GPU to compare with compute",
                    Fixed(secs, 3)
                )
            } else if o.hidden {
                format!(
                    "copies ({} s per step over {link}) hide behind compute",
                    Fixed(secs, 3)
                )
            } else {
                format!(
                    "copies take {} s per step over {link}, {} s of it not hidden behind compute{}",
                    Fixed(secs, 3),
                    Fixed(o.exposed_seconds_per_step, 3),
                    if o.on_compute_stream {
                        " (save_on_cpu copies run on the compute stream)"
                    } else {
                        ""
                    }
                )
            };
            if o.shared_memory {
                t.push_str(
                    "; host and GPU share one memory pool, so the machine's total does not shrink",
                );
            }
            t
        }
        Lang::Zh => {
            let secs = fmt_seconds(o.transfer_seconds_per_step);
            let mut t = if !o.timed {
                format!("经 {link} 每步拷贝 {secs}；选择 GPU 后可与计算时间比较")
            } else if o.hidden {
                format!("拷贝（经 {link} 每步 {secs}）可被计算掩盖")
            } else {
                let act = if o.on_compute_stream {
                    "（save_on_cpu 的拷贝在计算流上执行）"
                } else {
                    ""
                };
                format!(
                    "经 {link} 每步拷贝 {secs}，其中 {} 无法被计算掩盖{act}",
                    fmt_seconds(o.exposed_seconds_per_step)
                )
            };
            if o.shared_memory {
                t.push_str("；主机与 GPU 共用同一内存池，整机总量不会减少");
            }
            t
        }
    }
}
