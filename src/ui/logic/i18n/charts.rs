//! The charts' sentences that carry numbers, in both languages: the checkpoint chart's saving
//! line and each chart's accessible summary. Sizes and percentages come in formatted.

use super::Lang;

/// The checkpoint chart's line on `what` (a policy's name) against no checkpointing: the
/// saving, its share of the peak and the extra compute it costs.
pub fn ckpt_saving(what: &str, saving: &str, share: &str, compute: &str, lang: Lang) -> String {
    match lang {
        Lang::En => {
            format!("{what}: −{saving} of the peak (−{share}) against none, for +{compute} compute")
        }
        Lang::Zh => format!("{what}：与不使用相比峰值减少 {saving}（−{share}），计算量 +{compute}"),
    }
}

/// The batch chart's summary: the plan's batch and its peak, and the largest batch that fits.
pub fn batch_summary(current: Option<(u64, &str)>, best: Option<u64>, lang: Lang) -> String {
    match lang {
        Lang::En => format!(
            "Memory against batch size. {}{}",
            current
                .map(|(x, y)| format!("At batch {x} the allocated peak is {y}. "))
                .unwrap_or_default(),
            best.map(|x| format!("The largest batch that fits is {x}."))
                .unwrap_or_default()
        ),
        Lang::Zh => format!(
            "显存随批大小变化。{}{}",
            current
                .map(|(x, y)| format!("批大小 {x} 时已分配峰值为 {y}。"))
                .unwrap_or_default(),
            best.map(|x| format!("可容纳的最大批大小为 {x}。"))
                .unwrap_or_default()
        ),
    }
}

/// The input-size chart's summary: the peak at the first and the last size.
pub fn length_summary(first: (u64, &str), last: (u64, &str), lang: Lang) -> String {
    let ((x0, y0), (x1, y1)) = (first, last);
    match lang {
        Lang::En => format!("Memory against input size: {y0} at {x0}, {y1} at {x1}."),
        Lang::Zh => format!("显存随输入尺寸变化：{x0} 时 {y0}，{x1} 时 {y1}。"),
    }
}

/// The timeline's summary: the step's peak.
pub fn timeline_summary(peak: &str, lang: Lang) -> String {
    match lang {
        Lang::En => format!("Memory during one training step; peak {peak}."),
        Lang::Zh => format!("一次训练步中的显存；峰值 {peak}。"),
    }
}

/// The per-layer chart's summary: the layer that saves the most and how much.
pub fn layers_summary(layer: &str, bytes: &str, lang: Lang) -> String {
    match lang {
        Lang::En => format!("Saved activations per layer; the largest is {layer} with {bytes}."),
        Lang::Zh => format!("各层保存的激活；最大的是 {layer}，{bytes}。"),
    }
}
