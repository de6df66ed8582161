//! The inference panel's sentences in both languages.

use super::Lang;

/// The context chart's marker: the plan's context and its device total (already formatted).
pub fn context_marker(context: u64, total: &str, lang: Lang) -> String {
    match lang {
        Lang::En => format!("context {context}: {total}"),
        Lang::Zh => format!("上下文 {context}：{total}"),
    }
}

/// What the search for the longest prompt that fits `gpu` found: `Ok(Some(tokens))`, `Ok(None)`
/// (not even one token) or the estimator's message.
pub fn max_context(gpu: &str, found: &Result<Option<u64>, String>, lang: Lang) -> String {
    match (found, lang) {
        (Ok(Some(c)), Lang::En) => format!("Longest context that fits {gpu}: {c} tokens"),
        (Ok(Some(c)), Lang::Zh) => format!("{gpu} 可容纳的最长上下文：{c} 个 token"),
        (Ok(None), Lang::En) => format!("Even a one-token prompt does not fit {gpu}"),
        (Ok(None), Lang::Zh) => format!("{gpu} 连只有 1 个 token 的提示词也放不下"),
        (Err(e), Lang::En) => format!("Cannot find the longest context: {e}"),
        (Err(e), Lang::Zh) => format!("无法求出最长上下文：{e}"),
    }
}
