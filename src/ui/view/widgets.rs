//! The panels' widget kit: the page's language and units as widgets read them ([`Prefs`]),
//! a canvas figure, labelled selects and number boxes bound to a plan, description-list rows and
//! alerts. Built on the page's DOM builder ([`super::dom`]) rather than typed view trees: every
//! binding is type-erased, which keeps the WebAssembly within its size budget. Texts follow the
//! page's language and sizes its units; a switch rewrites texts and never reruns an estimate.

use leptos::prelude::*;
use wasm_bindgen::JsCast;
use web_sys::HtmlCanvasElement;

use super::backend::Draw;
use super::dom::{h, value_of, El};
use crate::plan::Plan;
use crate::plots::PlotError;
use crate::ui::logic::i18n::{Label, Lang, Msg, Units};

/// The page's language and units as the panels read them. Bindings that read them rebuild only
/// their texts: the estimates live in memos that do not depend on either.
#[derive(Clone, Copy)]
pub struct Prefs {
    pub lang: Signal<Lang>,
    pub units: Signal<Units>,
}

impl Prefs {
    /// A fixed text that follows the language. One closure type for every such text, so the
    /// bindings it feeds exist once in the WebAssembly.
    pub(crate) fn text(self, m: Msg) -> Box<dyn Fn() -> String> {
        Box::new(move || m.t(self.lang.get()).to_string())
    }
    /// The same, as an attribute's value (aria-label, placeholder).
    pub(crate) fn attr(self, m: Label) -> Box<dyn Fn() -> Option<String>> {
        Box::new(move || Some(m.t(self.lang.get()).to_string()))
    }
}

/// Paints `canvas` at its CSS box, measured now (a default size before layout), through
/// [`super::backend::paint_canvas`].
pub(crate) fn paint(canvas: &HtmlCanvasElement, draw: &Draw<'_>) -> Result<(), PlotError> {
    let css = match (canvas.client_width(), canvas.client_height()) {
        (w, h) if w > 0 && h > 0 => (w as f64, h as f64),
        _ => (640.0, 360.0),
    };
    super::backend::paint_canvas(canvas, css, draw)
}

/// A canvas in a figure with its caption, both in the page's language; the figure carries
/// `testid`.
pub(crate) fn figure(cx: Prefs, testid: &str, aria: Msg, caption: Msg) -> (El, HtmlCanvasElement) {
    let canvas = h("canvas")
        .attr("role", "img")
        .dyn_attr("aria-label", cx.attr(Label::T(aria)));
    let el: HtmlCanvasElement = canvas.0.clone().unchecked_into();
    (
        h("figure")
            .cls("chart")
            .testid(testid)
            .child(canvas)
            .child(h("figcaption").dyn_text(cx.text(caption))),
        el,
    )
}

/// A labelled `<select>` whose value follows the plan and whose options, `options(lang)`, follow
/// the plan and the language; `set` applies a pick.
pub(crate) fn plan_select(
    plan: RwSignal<Plan>,
    cx: Prefs,
    label: Msg,
    testid: &str,
    options: impl Fn(Lang) -> Vec<(&'static str, &'static str)> + 'static,
    value: impl Fn(&Plan) -> String + 'static,
    set: impl Fn(&mut Plan, &str) + 'static,
) -> El {
    select_erased(
        plan,
        cx,
        label,
        testid,
        Box::new(options),
        Box::new(value),
        Box::new(set),
    )
}

type Options = Box<dyn Fn(Lang) -> Vec<(&'static str, &'static str)>>;
/// Applies a control's text to the plan.
type SetFromText = Box<dyn Fn(&mut Plan, &str)>;
/// Applies a control's text to the plan; false when the text is not a value.
type TrySetFromText = Box<dyn Fn(&mut Plan, &str) -> bool>;

fn select_erased(
    plan: RwSignal<Plan>,
    cx: Prefs,
    label: Msg,
    testid: &str,
    options: Options,
    value: Box<dyn Fn(&Plan) -> String>,
    set: SetFromText,
) -> El {
    let id = format!("x-{testid}");
    let list = move || {
        options(cx.lang.get())
            .into_iter()
            .map(|(v, l)| (v.to_string(), l.to_string()))
            .collect()
    };
    h("div")
        .cls("field")
        .child(super::dom::label(&id, cx.text(label)))
        .child(super::dom::select(
            &id,
            testid,
            list,
            move || plan.with(|p| value(p)),
            move |v| plan.update(|p| set(p, &v)),
        ))
}

/// A labelled whole-number box; `set` turns its text into a plan edit and returns false when
/// the text is not a number (the plan is left alone).
pub(crate) fn plan_number(
    plan: RwSignal<Plan>,
    cx: Prefs,
    label: Msg,
    testid: &str,
    placeholder: Option<Label>,
    value: impl Fn(&Plan) -> String + 'static,
    set: impl Fn(&mut Plan, &str) -> bool + 'static,
) -> El {
    number_erased(
        plan,
        cx,
        label,
        testid,
        placeholder,
        Box::new(value),
        Box::new(set),
    )
}

fn number_erased(
    plan: RwSignal<Plan>,
    cx: Prefs,
    label: Msg,
    testid: &str,
    placeholder: Option<Label>,
    value: Box<dyn Fn(&Plan) -> String>,
    set: TrySetFromText,
) -> El {
    let id = format!("x-{testid}");
    let input = h("input")
        .id(&id)
        .testid(testid)
        .attr("type", "number")
        .attr("min", "0")
        .attr("step", "1")
        .attr("inputmode", "numeric")
        .dyn_value(move || plan.with(|p| value(p)))
        .on("input", move |ev| {
            let mut next = plan.get_untracked();
            let ok = set(&mut next, &value_of(&ev));
            // Text that is not a whole number leaves the plan alone; the box says so, as the
            // numbers below still describe the last valid value.
            if let Some(el) = ev
                .target()
                .and_then(|t| t.dyn_into::<web_sys::Element>().ok())
            {
                let _ = if ok {
                    el.remove_attribute("aria-invalid")
                } else {
                    el.set_attribute("aria-invalid", "true")
                };
            }
            if ok && next != plan.get_untracked() {
                plan.set(next);
            }
        });
    let input = match placeholder {
        Some(p) => input.dyn_attr("placeholder", cx.attr(p)),
        None => input,
    };
    h("div")
        .cls("field")
        .child(super::dom::label(&id, cx.text(label)))
        .child(input)
}

/// (label, value) rows as the children of a description list.
pub(crate) fn rows_view(rows: Vec<(&'static str, String)>) -> Vec<El> {
    rows.into_iter()
        .flat_map(|(k, v)| [h("dt").text(k), h("dd").text(&v)])
        .collect()
}

/// A message in an alert paragraph.
pub(crate) fn alert(testid: &str, message: &str) -> El {
    let p = h("p").cls("error").attr("role", "alert").text(message);
    if testid.is_empty() {
        p
    } else {
        p.testid(testid)
    }
}
