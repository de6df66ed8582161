//! The suggestions' texts that carry numbers, in both languages: a change's title and what it
//! costs. The fixed ones are messages ([`super::Msg`]).

use super::Lang;

/// Title: `k` checkpointed segments.
pub fn segments(k: u64, lang: Lang) -> String {
    match lang {
        Lang::En => format!("Checkpoint {k} segments"),
        Lang::Zh => format!("检查点分 {k} 段"),
    }
}

/// Title: a smaller micro-batch with more accumulation steps.
pub fn accumulate(batch: u64, steps: u32, lang: Lang) -> String {
    match lang {
        Lang::En => format!("Batch {batch} × {steps} accumulation steps"),
        Lang::Zh => format!("批大小 {batch} × {steps} 步梯度累积"),
    }
}

/// Title: another input size, a resolution (`image`) or a sequence length.
pub fn input_size(image: bool, value: u64, lang: Lang) -> String {
    match (image, lang) {
        (true, Lang::En) => format!("Resolution {value}"),
        (true, Lang::Zh) => format!("分辨率 {value}"),
        (false, Lang::En) => format!("Sequence length {value}"),
        (false, Lang::Zh) => format!("序列长度 {value}"),
    }
}

/// Cost: the extra compute of recomputation, a formatted percentage.
pub fn extra_compute(pct: &str, lang: Lang) -> String {
    match lang {
        Lang::En => format!("+{pct} compute"),
        Lang::Zh => format!("计算量 +{pct}"),
    }
}

/// Cost of accumulation: the effective batch (`was` before the change).
pub fn effective_batch(now: u64, was: u64, lang: Lang) -> String {
    match (now == was, lang) {
        (true, Lang::En) => format!("same effective batch ({now}), smaller kernels"),
        (true, Lang::Zh) => format!("等效批大小不变（{now}），内核更小"),
        (false, Lang::En) => format!("effective batch {now} instead of {was}"),
        (false, Lang::Zh) => format!("等效批大小为 {now}（原为 {was}）"),
    }
}

/// What joins the costs of a combined change.
pub fn cost_separator(lang: Lang) -> &'static str {
    match lang {
        Lang::En => "; ",
        Lang::Zh => "；",
    }
}
