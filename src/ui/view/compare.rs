//! The comparison view: two or more configurations side by side — parameters,
//! weights, activations, KV cache, peak — e.g. MobileNet against ResNet to see what
//! depthwise-separable convolutions save. It opens with MobileNetV2 and ResNet-50 at the page's
//! settings; "Add the current plan" appends the plan being edited. Logic and texts in
//! [`crate::ui::logic::mode`] and [`crate::ui::logic::i18n`].

use leptos::prelude::*;

use super::dom::{button, h, memo, memo_always, select, table_body, El};
use super::widgets::Prefs;
use crate::plan::fit::compare;
use crate::plan::Plan;
use crate::ui::logic::comparison::{compare_defaults, compare_rows};
use crate::ui::logic::i18n::comparison::{column_control_label, ColumnControl};
use crate::ui::logic::i18n::{Label, Msg};
use crate::ui::logic::state::{model_options, set_model};

/// The header cell of configuration `i`: its model picker, "×" (remove) and "Edit" (load it
/// into the planner).
fn column_head(plan: RwSignal<Plan>, cx: Prefs, configs: RwSignal<Vec<Plan>>, i: usize) -> El {
    let n = i + 1;
    let aria =
        move |what: ColumnControl| move || Some(column_control_label(what, n, cx.lang.get()));
    let options = || {
        model_options()
            .into_iter()
            .map(|(id, name)| (id.to_string(), name.to_string()))
            .collect()
    };
    let current = move || configs.with(|c| c.get(i).map(|p| p.model.clone()).unwrap_or_default());
    let picker = select(
        &format!("compare-model-{n}"),
        &format!("compare-model-{n}"),
        options,
        current,
        move |id| {
            configs.update(|c| {
                if let Some(p) = c.get_mut(i) {
                    set_model(p, &id)
                }
            })
        },
    )
    .dyn_attr("aria-label", aria(ColumnControl::Model));
    let remove = button(
        "",
        || "×".into(),
        move || {
            configs.update(|c| {
                if c.len() > 1 && i < c.len() {
                    c.remove(i);
                }
            })
        },
    )
    .dyn_attr("aria-label", aria(ColumnControl::Remove))
    .dyn_attr("disabled", move || {
        (configs.with(Vec::len) <= 1).then(String::new)
    });
    let edit = button("", cx.text(Msg::Edit), move || {
        if let Some(p) = configs.with_untracked(|c| c.get(i).cloned()) {
            plan.set(p)
        }
    })
    .dyn_attr("aria-label", aria(ColumnControl::Edit));
    h("th")
        .attr("scope", "col")
        .child(picker)
        .text(" ")
        .child(remove)
        .text(" ")
        .child(edit)
}

pub fn compare_panel(plan: RwSignal<Plan>, cx: Prefs) -> El {
    let configs = RwSignal::new(plan.with_untracked(compare_defaults));
    let results = memo_always(move || configs.with(|c| compare(c)));
    let count = memo(move || configs.with(Vec::len));

    // The header is rebuilt only when configurations are added or removed; its texts follow
    // the language on their own.
    let head = h("tr").dyn_children(move || {
        let mut cells = vec![h("th")
            .attr("scope", "col")
            .dyn_text(cx.text(Msg::Configuration))];
        cells.extend((0..count.get()).map(|i| column_head(plan, cx, configs, i)));
        cells
    });
    let body = table_body(
        move || {
            let (lang, units) = (cx.lang.get(), cx.units.get());
            configs
                .with(|plans| results.with(|res| compare_rows(plans, res, lang, units)))
                .into_iter()
                .map(|(label, cells)| std::iter::once(label.to_string()).chain(cells).collect())
                .collect()
        },
        true,
    );

    h("section")
        .cls("panel compare")
        .dyn_attr("aria-label", cx.attr(Label::T(Msg::CompareAria)))
        .testid("compare")
        .child(h("h2").dyn_text(cx.text(Msg::CompareHeading)))
        .child(button("compare-add", cx.text(Msg::CompareAdd), move || {
            configs.update(|c| c.push(plan.get_untracked()))
        }))
        .child(
            h("div")
                .cls("table-scroll")
                .child(h("table").child(h("thead").child(head)).child(body)),
        )
}
