//! The Chinese texts behind a chunk of their own: the fixed texts of [`Msg`] and the breakdown's
//! formula sentences ([`Formula`]). Most readers never switch the page to Chinese, and its UTF-8
//! text (three bytes a character) is the largest part of the page's texts, so the first load goes
//! without it. The page fetches it before it shows Chinese: at start-up when the link, the
//! remembered choice or the browser asks for Chinese, else when the reader picks it.

use super::formulas::Formula;
use super::{Msg, ZH};

/// What the chunk is asked for.
enum Ask<'a> {
    Msg(Msg),
    Formula(&'a Formula<'a>),
}

enum Answer {
    Msg(&'static str),
    Formula(String),
}

fn lookup(ask: Ask<'_>) -> Answer {
    match ask {
        Ask::Msg(m) => Answer::Msg(ZH[m as usize]),
        Ask::Formula(f) => Answer::Formula(f.chinese()),
    }
}

crate::lazy_chunk!(chinese, chinese_split, chinese_preload, fn lookup(Ask<'_>) -> Answer);

/// `m` in Chinese; `None` while its chunk has not been fetched.
pub fn text(m: Msg) -> Option<&'static str> {
    match call(Ask::Msg(m)) {
        Ok(Answer::Msg(t)) => Some(t),
        _ => None,
    }
}

/// `f`'s sentence in Chinese; `None` while the chunk has not been fetched.
pub fn formula(f: &Formula<'_>) -> Option<String> {
    match call(Ask::Formula(f)) {
        Ok(Answer::Formula(t)) => Some(t),
        _ => None,
    }
}
