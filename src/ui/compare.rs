//! The comparison view (issue #6): two or more configurations side by side — parameters,
//! weights, activations, KV cache, peak — e.g. MobileNet against ResNet to see what
//! depthwise-separable convolutions save. It opens with MobileNetV2 and ResNet-50 at the page's
//! settings; "Add the current plan" appends the plan being edited. Logic in [`super::mode_logic`].

use leptos::prelude::*;

use super::mode_logic as ml;
use super::state::{model_options, set_model};
use crate::estimator::config::Plan;
use crate::estimator::fit::compare;

#[component]
pub fn ComparePanel(plan: RwSignal<Plan>) -> impl IntoView {
    let configs = RwSignal::new(plan.with_untracked(ml::compare_defaults));
    let results = Memo::new_with_compare(move |_| configs.with(|c| compare(c)), |_, _| true);

    let header = move || {
        let n = configs.with(Vec::len);
        (0..n)
            .map(|i| {
                let current = move || configs.with(|c| c.get(i).map(|p| p.model.clone()).unwrap_or_default());
                let options = model_options()
                    .into_iter()
                    .map(|(id, name)| view! { <option value=id selected=move || current() == id>{name}</option> })
                    .collect_view();
                view! {
                    <th scope="col">
                        <select
                            aria-label=format!("Model of configuration {}", i + 1)
                            prop:value=current
                            on:change=move |ev| {
                                let id = event_target_value(&ev);
                                configs.update(|c| if let Some(p) = c.get_mut(i) { set_model(p, &id) });
                            }
                        >
                            {options}
                        </select>
                        " "
                        <button
                            type="button"
                            aria-label=format!("Remove configuration {}", i + 1)
                            disabled=move || configs.with(Vec::len) <= 1
                            on:click=move |_| configs.update(|c| if c.len() > 1 && i < c.len() { c.remove(i); })
                        >"×"</button>
                        " "
                        <button
                            type="button"
                            aria-label=format!("Edit configuration {} in the planner", i + 1)
                            on:click=move |_| if let Some(p) = configs.with_untracked(|c| c.get(i).cloned()) { plan.set(p) }
                        >"Edit"</button>
                    </th>
                }
            })
            .collect_view()
    };
    let body = move || {
        configs.with(|plans| results.with(|res| ml::compare_rows(plans, res)))
            .into_iter()
            .map(|(label, cells)| view! { <tr><th scope="row">{label}</th>{cells.into_iter().map(|c| view! { <td>{c}</td> }).collect_view()}</tr> })
            .collect_view()
    };

    view! {
        <section class="panel compare" aria-label="Comparison" data-testid="compare">
            <h2>"Compare configurations"</h2>
            <button type="button" data-testid="compare-add" on:click=move |_| configs.update(|c| c.push(plan.get_untracked()))>"Add the current plan"</button>
            <div class="table-scroll">
                <table>
                    <thead><tr><th scope="col">"Configuration"</th>{header}</tr></thead>
                    <tbody>{body}</tbody>
                </table>
            </div>
        </section>
    }
}
