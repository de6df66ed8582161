//! The page's logic as plain types and functions, built and tested natively: the plan's inputs
//! ([`state`]), the checkpointing a model accepts ([`ckpt_info`]), what the page derives from a
//! plan ([`workbench`], shared through [`shared_workbench`]), links ([`url`]), the breakdown
//! ([`explain`], its rows in [`breakdown`]), suggestions ([`suggest`]), chart data
//! ([`chart_data`]), exports ([`export`], [`json`]), the mode panel's model ([`mode`]), the
//! comparison's ([`comparison`]), the parallelism panel's ([`parallel`]) and every text in both
//! languages ([`i18n`]). Nothing here names the view.

pub mod breakdown;
pub mod chart_data;
pub mod ckpt_info;
pub mod comparison;
pub mod explain;
pub mod export;
pub mod hub;
pub mod i18n;
pub mod json;
pub mod mode;
pub mod parallel;
pub mod shared_workbench;
pub mod state;
pub mod suggest;
pub mod url;
pub mod workbench;
