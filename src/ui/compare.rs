//! The comparison view (issue #6): two or more configurations side by side — parameters,
//! weights, activations, KV cache, peak — e.g. MobileNet against ResNet to see what
//! depthwise-separable convolutions save. It opens with MobileNetV2 and ResNet-50 at the page's
//! settings; "Add the current plan" appends the plan being edited. Logic in [`super::mode_logic`].

use leptos::prelude::*;

use super::dom::{button, h, select, table_body, El};
use super::mode_logic as ml;
use super::state::{model_options, set_model};
use crate::estimator::config::Plan;
use crate::estimator::fit::compare;

/// The header cell of configuration `i`: its model picker, "×" (remove) and "Edit" (load it
/// into the planner).
fn column_head(plan: RwSignal<Plan>, configs: RwSignal<Vec<Plan>>, i: usize) -> El {
    let n = i + 1;
    let options = || model_options().into_iter().map(|(id, name)| (id.to_string(), name.to_string())).collect();
    let current = move || configs.with(|c| c.get(i).map(|p| p.model.clone()).unwrap_or_default());
    let picker = select(&format!("compare-model-{n}"), &format!("compare-model-{n}"), options, current, move |id| configs.update(|c| {
        if let Some(p) = c.get_mut(i) {
            set_model(p, &id)
        }
    }))
    .attr("aria-label", &format!("Model of configuration {n}"));
    let remove = button("", || "×".into(), move || configs.update(|c| {
        if c.len() > 1 && i < c.len() {
            c.remove(i);
        }
    }))
    .attr("aria-label", &format!("Remove configuration {n}"))
    .dyn_attr("disabled", move || (configs.with(Vec::len) <= 1).then(String::new));
    let edit = button("", || "Edit".into(), move || {
        if let Some(p) = configs.with_untracked(|c| c.get(i).cloned()) {
            plan.set(p)
        }
    })
    .attr("aria-label", &format!("Edit configuration {n} in the planner"));
    h("th").attr("scope", "col").child(picker).text(" ").child(remove).text(" ").child(edit)
}

pub fn compare_panel(plan: RwSignal<Plan>) -> El {
    let configs = RwSignal::new(plan.with_untracked(ml::compare_defaults));
    let results = Memo::new_with_compare(move |_| configs.with(|c| compare(c)), |_, _| true);
    let count = Memo::new(move |_| configs.with(Vec::len));

    // The header is rebuilt only when configurations are added or removed.
    let head = h("tr").dyn_children(move || {
        let mut cells = vec![h("th").attr("scope", "col").text("Configuration")];
        cells.extend((0..count.get()).map(|i| column_head(plan, configs, i)));
        cells
    });
    let body = table_body(
        move || {
            configs.with(|plans| results.with(|res| ml::compare_rows(plans, res))).into_iter().map(|(label, cells)| std::iter::once(label.to_string()).chain(cells).collect()).collect()
        },
        true,
    );

    h("section")
        .cls("panel compare")
        .attr("aria-label", "Comparison")
        .testid("compare")
        .child(h("h2").text("Compare configurations"))
        .child(button("compare-add", || "Add the current plan".into(), move || configs.update(|c| c.push(plan.get_untracked()))))
        .child(h("div").cls("table-scroll").child(h("table").child(h("thead").child(head)).child(body)))
}
