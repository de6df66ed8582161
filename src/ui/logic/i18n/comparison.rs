//! The comparison view's texts that carry numbers, in both languages.

use super::Lang;

/// Which control of a comparison column an aria-label names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ColumnControl {
    Model,
    Remove,
    Edit,
}

/// The aria-label of a comparison column's control, for configuration `n` (counted from 1).
pub fn column_control_label(what: ColumnControl, n: usize, lang: Lang) -> String {
    match (what, lang) {
        (ColumnControl::Model, Lang::En) => format!("Model of configuration {n}"),
        (ColumnControl::Model, Lang::Zh) => format!("配置 {n} 的模型"),
        (ColumnControl::Remove, Lang::En) => format!("Remove configuration {n}"),
        (ColumnControl::Remove, Lang::Zh) => format!("移除配置 {n}"),
        (ColumnControl::Edit, Lang::En) => format!("Edit configuration {n} in the planner"),
        (ColumnControl::Edit, Lang::Zh) => format!("在规划器中编辑配置 {n}"),
    }
}

/// A configuration's mode (its label) and batch, as one cell.
pub fn mode_batch(mode: &str, batch: u64, lang: Lang) -> String {
    match lang {
        Lang::En => format!("{mode}, batch {batch}"),
        Lang::Zh => format!("{mode}，批大小 {batch}"),
    }
}
