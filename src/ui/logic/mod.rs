//! The page's logic as plain types and functions, built and tested natively: the plan's inputs
//! ([`state`]), what the page derives from a plan ([`workbench`]), links ([`url`]), the
//! breakdown ([`explain`]), suggestions ([`suggest`]), chart data ([`chart_data`]), exports
//! ([`export`], [`json`]), the mode and comparison panels' models ([`mode`], [`comparison`]),
//! the parallelism panel's model ([`parallel`]) and every text in both languages ([`i18n`]).

pub mod breakdown;
pub mod chart_data;
pub mod ckpt_info;
pub mod comparison;
pub mod explain;
pub mod export;
pub mod i18n;
pub mod json;
pub mod mode;
pub mod parallel;
pub mod state;
pub mod suggest;
pub mod url;
pub mod workbench;
