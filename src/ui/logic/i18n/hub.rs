//! The model-id box's sentences in both languages: each failure says what to do next, and all
//! of them point at the paste box below it, which works without the Hub.

use super::Lang;
use crate::ui::logic::hub::{HubError, PageStatus};

/// A status line written out in both languages at once: the page builds it where the fetch runs
/// (a chunk of its own), so these sentences stay out of the page's first load, and a language
/// switch afterwards still shows the right one.
#[derive(Clone, Debug, PartialEq)]
pub struct StatusLine {
    pub test_id: &'static str,
    pub failed: bool,
    texts: [String; 2],
}

impl StatusLine {
    pub fn of(s: &PageStatus) -> StatusLine {
        StatusLine {
            test_id: s.test_id(),
            failed: s.failed(),
            texts: Lang::ALL.map(|l| status(s, l)),
        }
    }

    pub fn text(&self, lang: Lang) -> &str {
        &self.texts[lang as usize]
    }
}

/// The status line under the model-id box (empty while nothing was asked).
pub fn status(s: &PageStatus, lang: Lang) -> String {
    let zh = lang == Lang::Zh;
    let (id, error) = match s {
        PageStatus::Idle => return String::new(),
        PageStatus::Fetching(id) if zh => return format!("正在获取 {id} 的 config.json…"),
        PageStatus::Fetching(id) => return format!("Fetching the config.json of {id}…"),
        PageStatus::Applied { id, cached } => {
            return match (cached, zh) {
                (false, false) => {
                    format!("Fetched the config.json of {id}: the estimate below is for it.")
                }
                (false, true) => format!("已获取 {id} 的 config.json，下面的估算即针对该模型。"),
                (true, false) => format!("Offline: using the config.json of {id} fetched earlier."),
                (true, true) => format!("离线：使用之前获取的 {id} 的 config.json。"),
            }
        }
        PageStatus::Failed { id, error } => (id, error),
    };
    match (error, zh) {
        (HubError::BadId(_), false) => "That is not a model id: write it as in the model page's address, owner/name (e.g. Qwen/Qwen3-8B), or paste the config.json below.".into(),
        (HubError::BadId(_), true) => "这不是模型 ID：请按模型页面地址写成 owner/name（例如 Qwen/Qwen3-8B），或在下方粘贴 config.json。".into(),
        (HubError::BadEndpoint(_), false) => "The link's hf_endpoint is not an http(s) URL: remove it, or paste the config.json below.".into(),
        (HubError::BadEndpoint(_), true) => "链接中的 hf_endpoint 不是 http(s) 地址：请删除它，或在下方粘贴 config.json。".into(),
        (HubError::Gated { page, .. }, false) => format!("{id} is gated or private (or does not exist): accept its licence at {page} while signed in, download its config.json there and paste it below."),
        (HubError::Gated { page, .. }, true) => format!("{id} 需要授权或为私有（也可能不存在）：请登录后在 {page} 接受其许可，下载其 config.json 并粘贴到下方。"),
        (HubError::Missing { .. }, false) => format!("{id} has no config.json on the Hub: check the id, or paste the config.json below."),
        (HubError::Missing { .. }, true) => format!("Hub 上没有 {id} 的 config.json：请检查 ID，或在下方粘贴 config.json。"),
        (HubError::Http { status, .. }, false) => format!("The Hub answered HTTP {status}: try again later, or paste the config.json below."),
        (HubError::Http { status, .. }, true) => format!("Hub 返回 HTTP {status}：请稍后再试，或在下方粘贴 config.json。"),
        (HubError::Unreachable { .. } | HubError::NotCached { .. }, false) => format!("The Hub cannot be reached (offline?) and {id} was not fetched here before: paste its config.json below."),
        (HubError::Unreachable { .. } | HubError::NotCached { .. }, true) => format!("无法连接 Hub（是否离线？），且此前未在此获取过 {id}：请在下方粘贴其 config.json。"),
        (HubError::NotJson { .. }, false) => format!("What the Hub returned for {id} is not a config.json: paste the config.json below."),
        (HubError::NotJson { .. }, true) => format!("Hub 为 {id} 返回的不是 config.json：请在下方粘贴 config.json。"),
        (HubError::Unsupported(why), false) => format!("{id} cannot be estimated: {why}. Check the id, or paste the config.json of a supported model below."),
        (HubError::Unsupported(why), true) => format!("无法估算 {id}：{why}。请在下方粘贴受支持模型的 config.json。"),
        (HubError::Blocked(origin), false) => format!("This page's Content-Security-Policy allows fetching only from huggingface.co, not {origin}: download the config.json there and paste it below."),
        (HubError::Blocked(origin), true) => format!("本页面的内容安全策略只允许从 huggingface.co 获取，不允许 {origin}：请从该处下载 config.json 并粘贴到下方。"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_failure_points_at_the_paste_box_in_both_languages() {
        let failed = |error| PageStatus::Failed {
            id: "a/b".into(),
            error,
        };
        for s in [
            failed(HubError::BadId("x y".into())),
            failed(HubError::BadEndpoint("ftp://m".into())),
            failed(HubError::Gated {
                id: "a/b".into(),
                status: 401,
                page: "https://huggingface.co/a/b".into(),
            }),
            failed(HubError::Missing {
                id: "a/b".into(),
                url: "u".into(),
            }),
            failed(HubError::Http {
                status: 502,
                url: "u".into(),
            }),
            failed(HubError::Unreachable {
                endpoint: "e".into(),
                detail: "d".into(),
            }),
            failed(HubError::NotJson {
                url: "u".into(),
                detail: "d".into(),
            }),
            failed(HubError::Unsupported(
                "model_type 't5' is not supported".into(),
            )),
            failed(HubError::Blocked("https://hf-mirror.com".into())),
        ] {
            let en = status(&s, Lang::En);
            let zh = status(&s, Lang::Zh);
            assert!(en.contains("paste") && en.contains("below"), "{en}");
            assert!(zh.contains("粘贴") && zh.contains("下方"), "{zh}");
        }
        let blocked = status(&failed(HubError::Blocked("https://m".into())), Lang::En);
        assert!(blocked.contains("Content-Security-Policy") && blocked.contains("huggingface.co"));
        assert!(status(&PageStatus::Idle, Lang::En).is_empty());
        let line = StatusLine::of(&failed(HubError::BadId("x".into())));
        assert_eq!(line.test_id, "hf-bad-id");
        assert!(line.failed);
        for lang in Lang::ALL {
            assert_eq!(
                line.text(lang),
                status(&failed(HubError::BadId("x".into())), lang)
            );
        }
    }
}
