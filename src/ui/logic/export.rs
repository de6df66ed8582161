//! Downloads of the breakdown: CSV (one row per component, with its formula) and JSON (the plan
//! and the rows). Cells that a spreadsheet would run as a formula are quoted with a leading `'`.

use crate::plan::Plan;

use super::breakdown::Row;
use super::chart_data::Table;

/// A CSV cell: quoted when it holds a comma, quote or line break; defused when a spreadsheet
/// would take it for a formula (`=`, `+`, `-`, `@` first).
pub fn csv_cell(s: &str) -> String {
    let s = if s.starts_with(['=', '+', '-', '@', '\t', '\r']) {
        format!("'{s}")
    } else {
        s.to_string()
    };
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s
    }
}

/// The breakdown as CSV: `key,component,bytes,formula`.
pub fn breakdown_csv(rows: &[Row]) -> String {
    let mut out = String::from("key,component,bytes,formula\n");
    for r in rows {
        out.push_str(&format!(
            "{},{},{},{}\n",
            r.key,
            csv_cell(&r.label),
            r.bytes.0,
            csv_cell(&r.formula)
        ));
    }
    out
}

/// The breakdown as JSON: the plan and its rows (bytes as integers). Err until the JSON code is
/// fetched ([`super::json::load`]).
pub fn breakdown_json(
    plan: &Plan,
    exact: bool,
    rows: &[Row],
) -> Result<String, super::json::NotLoaded> {
    super::json::breakdown(plan, exact, rows)
}

/// A chart's table as CSV.
pub fn table_csv(t: &Table) -> String {
    let mut out = t
        .headers
        .iter()
        .map(|h| csv_cell(h))
        .collect::<Vec<_>>()
        .join(",");
    out.push('\n');
    for r in &t.rows {
        out.push_str(&r.iter().map(|c| csv_cell(c)).collect::<Vec<_>>().join(","));
        out.push('\n');
    }
    out
}

/// A file name for a download: `vram-planner-<model>-b<batch>.<ext>`, only safe characters.
pub fn file_name(plan: &Plan, what: &str, ext: &str) -> String {
    let model: String = plan
        .model
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .take(40)
        .collect();
    format!("vram-planner-{model}-b{}-{what}.{ext}", plan.batch)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::estimator::units::Bytes;
    use crate::ui::logic::explain;
    use crate::ui::logic::i18n::{Lang, Units};
    use crate::ui::logic::workbench::BatchModel;

    #[test]
    fn cells_are_quoted_and_defused() {
        assert_eq!(csv_cell("plain"), "plain");
        assert_eq!(csv_cell("a, b"), "\"a, b\"");
        assert_eq!(csv_cell("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(csv_cell("=cmd()"), "'=cmd()");
        assert_eq!(csv_cell("-1"), "'-1");
    }

    #[test]
    fn breakdown_exports() {
        let plan = Plan {
            batch: 8,
            ..Plan::new("resnet18")
        };
        let n = BatchModel::new(&plan).unwrap().at(8, None);
        let rows = explain::rows(&n, &plan, None, Lang::En, Units::Binary);
        let csv = breakdown_csv(&rows);
        assert!(csv.starts_with("key,component,bytes,formula\nparams,Parameters,"));
        assert_eq!(csv.lines().count(), rows.len() + 1);
        let json: serde_json::Value =
            serde_json::from_str(&breakdown_json(&plan, false, &rows).unwrap()).unwrap();
        assert_eq!(json["plan"]["model"], "resnet18");
        assert_eq!(json["rows"][0]["key"], "params");
        assert_eq!(
            json["rows"][0]["bytes"],
            n.category(crate::estimator::timeline::Category::Params).0
        );
        let peak = json["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["key"] == "allocated_peak")
            .unwrap();
        assert_eq!(Bytes(peak["bytes"].as_u64().unwrap()), n.peak);
        assert_eq!(
            file_name(
                &Plan {
                    model: "a/b<c>".into(),
                    ..plan
                },
                "breakdown",
                "csv"
            ),
            "vram-planner-a-b-c--b8-breakdown.csv"
        );
    }
}
