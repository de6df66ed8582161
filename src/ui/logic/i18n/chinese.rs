//! The Chinese texts of [`Msg`] behind a chunk of their own: most readers never switch the page
//! to Chinese, and its UTF-8 text (three bytes a character) is the largest part of the fixed
//! texts, so the first load goes without it. The page fetches it before it shows Chinese: at
//! start-up when the link, the remembered choice or the browser asks for Chinese, else when the
//! reader picks it.

use super::{Msg, ZH};

fn lookup(m: Msg) -> &'static str {
    ZH[m as usize]
}

crate::lazy_chunk!(chinese, chinese_split, chinese_preload, fn lookup(Msg) -> &'static str);

/// `m` in Chinese; `None` while its chunk has not been fetched.
pub fn text(m: Msg) -> Option<&'static str> {
    call(m).ok()
}
