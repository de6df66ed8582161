//! A small DOM builder on Leptos's reactive graph. Every binding is type-erased (`Box<dyn Fn>`)
//! before it reaches an effect, so each kind of binding exists once in the WebAssembly however
//! often the page uses it: typed view trees cost a generic instantiation per element and per
//! closure, which the page's size budget cannot afford. Text is only ever set as text
//! (`textContent`, attributes, `value`): nothing is parsed as HTML.

use leptos::prelude::*;
use leptos::reactive::graph::{AnySubscriber, Observer, Subscriber};
use wasm_bindgen::closure::Closure;
use wasm_bindgen::JsCast;
use web_sys::{Element, Event, HtmlInputElement};

/// An element being built.
#[derive(Clone)]
pub struct El(pub Element);

/// Creates an element.
pub fn h(tag: &str) -> El {
    El(document().create_element(tag).expect("create element"))
}

type Text = Box<dyn Fn() -> String>;

/// Runs `f` now and whenever what it reads changes, until the owner in force now is cleaned.
pub fn effect(f: Box<dyn Fn()>) {
    let reader = Reader::new();
    Effect::new(move |_| {
        reader.note();
        f()
    });
}

/// A memo of `f` that leaves what it read with the owner in force now (see [`Reader`]).
pub fn memo<T: PartialEq + Send + Sync + 'static>(
    f: impl Fn() -> T + Send + Sync + 'static,
) -> Memo<T> {
    let reader = Reader::new();
    Memo::new(move |_| {
        reader.note();
        f()
    })
}

/// [`memo`] for values that are not compared: every recomputation counts as a change.
pub fn memo_always<T: Send + Sync + 'static>(f: impl Fn() -> T + Send + Sync + 'static) -> Memo<T> {
    let reader = Reader::new();
    Memo::new_with_compare(
        move |_| {
            reader.note();
            f()
        },
        |_, _| true,
    )
}

/// A memo or effect that leaves the signals it read when the owner in force at its creation is
/// cleaned. The reactive graph (reactive_graph 0.2) removes a subscriber from a signal's list only
/// when that subscriber runs again: one disposed for good (the bindings of rebuilt children, a
/// closed panel) stays listed, and its allocation with it, in every signal it read for as long as
/// that signal lives; for the page's language, units and plan that is the page's life, one entry
/// per binding per rebuild. Call [`Reader::note`] at the start of each run.
#[derive(Clone, Default)]
pub struct Reader(std::sync::Arc<std::sync::OnceLock<AnySubscriber>>);

impl Reader {
    pub fn new() -> Self {
        let r = Reader::default();
        let me = r.clone();
        on_cleanup(move || {
            if let Some(s) = me.0.get() {
                s.clear_sources(s);
            }
        });
        r
    }
    /// Learns which memo or effect is running (its first run is enough: it stays the same).
    pub fn note(&self) {
        if self.0.get().is_none() {
            if let Some(s) = Observer::get() {
                let _ = self.0.set(s);
            }
        }
    }
}

impl El {
    pub fn attr(self, k: &str, v: &str) -> El {
        let _ = self.0.set_attribute(k, v);
        self
    }
    pub fn cls(self, c: &str) -> El {
        self.attr("class", c)
    }
    pub fn id(self, id: &str) -> El {
        self.attr("id", id)
    }
    pub fn testid(self, id: &str) -> El {
        self.attr("data-testid", id)
    }
    /// Appends fixed text.
    pub fn text(self, t: &str) -> El {
        let _ = self.0.append_with_str_1(t);
        self
    }
    pub fn child(self, c: El) -> El {
        let _ = self.0.append_child(&c.0);
        self
    }
    pub fn children(self, cs: Vec<El>) -> El {
        for c in cs {
            let _ = self.0.append_child(&c.0);
        }
        self
    }
    /// Appends a text node kept equal to `f()`.
    pub fn dyn_text(self, f: impl Fn() -> String + 'static) -> El {
        self.bind_text(Box::new(f))
    }
    fn bind_text(self, f: Text) -> El {
        let node = document().create_text_node("");
        let _ = self.0.append_child(&node);
        effect(Box::new(move || {
            let v = f();
            if node.data() != v {
                node.set_data(&v);
            }
        }));
        self
    }
    /// An attribute kept equal to `f()` (removed when `None`).
    pub fn dyn_attr(self, k: &'static str, f: impl Fn() -> Option<String> + 'static) -> El {
        self.bind_attr(k, Box::new(f))
    }
    fn bind_attr(self, k: &'static str, f: Box<dyn Fn() -> Option<String>>) -> El {
        let el = self.0.clone();
        effect(Box::new(move || match f() {
            Some(v) => {
                if el.get_attribute(k).as_deref() != Some(v.as_str()) {
                    let _ = el.set_attribute(k, &v);
                }
            }
            None => {
                let _ = el.remove_attribute(k);
            }
        }));
        self
    }
    /// Shown while `f()` holds (the `hidden` attribute otherwise).
    pub fn show(self, f: impl Fn() -> bool + 'static) -> El {
        self.dyn_attr("hidden", move || (!f()).then(String::new))
    }
    /// An input's or select's value kept equal to `f()`.
    pub fn dyn_value(self, f: impl Fn() -> String + 'static) -> El {
        self.bind_value(Box::new(f))
    }
    fn bind_value(self, f: Text) -> El {
        let el = self.0.clone();
        effect(Box::new(move || {
            let v = f();
            if let Some(i) = el.dyn_ref::<HtmlInputElement>() {
                if i.value() != v {
                    i.set_value(&v);
                }
            } else if let Some(s) = el.dyn_ref::<web_sys::HtmlSelectElement>() {
                if s.value() != v {
                    s.set_value(&v);
                }
            } else if let Some(t) = el.dyn_ref::<web_sys::HtmlTextAreaElement>() {
                t.set_value(&v);
            }
        }));
        self
    }
    /// Children rebuilt whenever what `f` reads changes.
    pub fn dyn_children(self, f: impl Fn() -> Vec<El> + 'static) -> El {
        self.bind_children(Box::new(f))
    }
    fn bind_children(self, f: Box<dyn Fn() -> Vec<El>>) -> El {
        let el = self.0.clone();
        effect(Box::new(move || {
            let kids = f();
            el.set_text_content(None);
            for k in kids {
                let _ = el.append_child(&k.0);
            }
        }));
        self
    }
    /// Children rebuilt once the page is idle whenever what `track` reads changes (at most once
    /// per idle period): for secondary content that must not delay a slider's numbers.
    pub fn later_children(
        self,
        track: impl Fn() + 'static,
        build: impl Fn() -> Vec<El> + 'static,
    ) -> El {
        self.bind_later(Box::new(track), std::rc::Rc::new(build))
    }
    fn bind_later(self, track: Box<dyn Fn()>, build: std::rc::Rc<dyn Fn() -> Vec<El>>) -> El {
        let later = Later::new(&self.0);
        let pending = std::rc::Rc::new(std::cell::Cell::new(false));
        effect(Box::new(move || {
            track();
            if pending.replace(true) {
                return;
            }
            let (later, build, pending) = (later.clone(), build.clone(), pending.clone());
            when_idle(Box::new(move || {
                pending.set(false);
                later.fill(Box::new(|| build()));
            }));
        }));
        self
    }
    /// Children built once, in the task after the next frame: for what is below the first
    /// screen, so the frame that paints the numbers comes sooner.
    pub fn children_after_frame(self, build: Box<dyn FnOnce() -> Vec<El>>) -> El {
        let later = Later::new(&self.0);
        after_frame(Box::new(move || later.fill(build)));
        self
    }
    /// Listens to `event`.
    pub fn on(self, event: &str, f: impl Fn(Event) + 'static) -> El {
        self.listen(event, Box::new(f))
    }
    fn listen(self, event: &str, f: Box<dyn Fn(Event)>) -> El {
        let listener = Listener::new(&self.0, event, f);
        keep_while_owned(listener);
        self
    }
}

/// Keeps `value` alive as long as the reactive owner in force now: it is dropped when that
/// owner is cleaned up (an effect's next run, a [`Later`] build's replacement, the page's
/// unmount). What [`El::dyn_children`] and [`El::later_children`] rebuild is built under such an
/// owner, so the old children's listeners go with them instead of piling up for the page's
/// life. Outside any owner nothing would drop it: it lives as long as the page.
pub fn keep_while_owned<T: 'static>(value: T) {
    // The arena entry is what holds the value; the handle itself is `Copy` and not needed.
    let _ = StoredValue::new_local(value);
}

thread_local! {
    static LIVE_LISTENERS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// How many event listeners the page's elements hold now: rebuilding children must leave this
/// flat (the page's own tests count it).
pub fn live_listeners() -> usize {
    LIVE_LISTENERS.with(std::cell::Cell::get)
}

/// An event listener that is removed from its element and freed when dropped.
struct Listener {
    target: Element,
    event: String,
    callback: Closure<dyn Fn(Event)>,
}

impl Listener {
    fn new(target: &Element, event: &str, f: Box<dyn Fn(Event)>) -> Self {
        let callback = Closure::<dyn Fn(Event)>::new(f);
        let _ = target.add_event_listener_with_callback(event, callback.as_ref().unchecked_ref());
        LIVE_LISTENERS.with(|n| n.set(n.get() + 1));
        Listener {
            target: target.clone(),
            event: event.to_string(),
            callback,
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        // Removed first: a freed closure that the element could still call would throw.
        let _ = self.target.remove_event_listener_with_callback(
            &self.event,
            self.callback.as_ref().unchecked_ref(),
        );
        LIVE_LISTENERS.with(|n| n.set(n.get().saturating_sub(1)));
    }
}

/// Where children built in a later task go. They are built under an owner of their own, made
/// once as a child of the one in force when the element was built, and cleaned before each build:
/// their effects are disposed with the page and when the next build replaces them (a later task
/// runs outside any owner: effects created there would otherwise live on). One owner for every
/// build, not one per build: an owner keeps a weak handle to each child it ever made until it is
/// itself cleaned, so a new child of the page's owner per build would keep that handle and the
/// child's allocation for the page's life.
#[derive(Clone)]
struct Later {
    el: Element,
    /// Held by the page's owner, as everything the page builds: a build due after an unmount
    /// (idle time can be seconds away) finds it gone and builds nothing, as does one of an
    /// element built outside any owner.
    owner: StoredValue<Option<Owner>, LocalStorage>,
}

impl Later {
    fn new(el: &Element) -> Self {
        Later {
            el: el.clone(),
            owner: StoredValue::new_local(Owner::current().map(|o| o.child())),
        }
    }
    // Not generic: one copy serves every caller (the wasm's first load is on a byte budget).
    fn fill(&self, build: Box<dyn FnOnce() -> Vec<El> + '_>) {
        let Some(owner) = self.owner.try_with_value(Clone::clone).flatten() else {
            return;
        };
        owner.cleanup();
        let kids = owner.with(|| untrack(build));
        self.el.set_text_content(None);
        for k in kids {
            let _ = self.el.append_child(&k.0);
        }
    }
}

/// Runs `f` in a task right after the next frame is drawn.
pub fn after_frame(f: Box<dyn FnOnce()>) {
    request_animation_frame(move || set_timeout(f, std::time::Duration::ZERO));
}

/// Runs `f` once the main thread is idle (`requestIdleCallback`): after the frame is drawn, and
/// after any input event, timer or message already queued, or after [`IDLE_WAIT_MS`] at the
/// latest. Work that follows an input but is not its numbers (the charts, background
/// simulations, the suggestions list) goes here so an input that arrives while it waits is
/// handled first: in a task right after a frame (what [`after_frame`] gives) it would run ahead
/// of that input. Browsers without `requestIdleCallback` (Safari before 18.4) get [`after_frame`].
pub fn when_idle(f: Box<dyn FnOnce()>) {
    thread_local! {
        // Looked up once: the charts ask on every slider step.
        static RIC: Option<(js_sys::Function, js_sys::Object)> = {
            let ric = js_sys::Reflect::get(&window(), &"requestIdleCallback".into()).ok().and_then(|f| f.dyn_into::<js_sys::Function>().ok());
            ric.map(|f| {
                let opts = js_sys::Object::new();
                let _ = js_sys::Reflect::set(&opts, &"timeout".into(), &IDLE_WAIT_MS.into());
                (f, opts)
            })
        };
    }
    RIC.with(|ric| match ric {
        Some((ric, opts)) => {
            let _ = ric.call2(&window(), &Closure::once_into_js(f), opts);
        }
        None => after_frame(f),
    })
}

/// [`when_idle`], no sooner than `delay_ms` from now (a throttle's or a settle's wait).
pub fn when_idle_after(delay_ms: f64, f: Box<dyn FnOnce()>) {
    if delay_ms > 0.0 {
        set_timeout(
            move || when_idle(f),
            std::time::Duration::from_millis(delay_ms.ceil() as u64),
        );
    } else {
        when_idle(f);
    }
}

/// Whether an input event (continuous ones too: pointer moves of a drag) waits for the main
/// thread, where the browser can say (`navigator.scheduling.isInputPending`, Chromium); `None`
/// where it cannot.
pub fn input_pending() -> Option<bool> {
    thread_local! {
        // Looked up once: background work asks between every two slices.
        static IIP: Option<(js_sys::Function, wasm_bindgen::JsValue, js_sys::Object)> = {
            let scheduling = js_sys::Reflect::get(&window().navigator(), &"scheduling".into()).ok().filter(|s| s.is_object());
            scheduling.and_then(|s| {
                let f = js_sys::Reflect::get(&s, &"isInputPending".into()).ok()?.dyn_into::<js_sys::Function>().ok()?;
                let opts = js_sys::Object::new();
                let _ = js_sys::Reflect::set(&opts, &"includeContinuous".into(), &true.into());
                Some((f, s, opts))
            })
        };
    }
    IIP.with(|iip| {
        iip.as_ref()
            .map(|(f, s, opts)| f.call1(s, opts).is_ok_and(|v| v.is_truthy()))
    })
}

/// How long secondary work may wait for an idle moment. A safety net only: browsers grant idle
/// time after each frame they draw. Once it expires the callback is an ordinary task, which can
/// run ahead of a waiting input: at 50 ms that happened to 9–19 % of the e2e run's slider
/// samples (headless Chromium on two cores), at 2 s to none.
pub const IDLE_WAIT_MS: u32 = 2000;

/// The value of the element an event came from (input, select, textarea).
pub fn value_of(ev: &Event) -> String {
    let Some(t) = ev.target() else {
        return String::new();
    };
    if let Some(i) = t.dyn_ref::<HtmlInputElement>() {
        i.value()
    } else if let Some(s) = t.dyn_ref::<web_sys::HtmlSelectElement>() {
        s.value()
    } else if let Some(a) = t.dyn_ref::<web_sys::HtmlTextAreaElement>() {
        a.value()
    } else {
        String::new()
    }
}

/// A `<label for>` and its text.
pub fn label(for_id: &str, text: impl Fn() -> String + 'static) -> El {
    h("label").cls("label").attr("for", for_id).dyn_text(text)
}

/// A `<select>` whose options are `(value, text)`, rebuilt when what `options` reads changes;
/// `value` selects one, `pick` receives the user's choice.
pub fn select(
    id: &str,
    testid: &str,
    options: impl Fn() -> Vec<(String, String)> + 'static,
    value: impl Fn() -> String + 'static,
    pick: impl Fn(String) + 'static,
) -> El {
    select_erased(
        id,
        testid,
        Box::new(options),
        std::rc::Rc::new(value),
        Box::new(pick),
    )
}

fn select_erased(
    id: &str,
    testid: &str,
    options: Box<dyn Fn() -> Vec<(String, String)>>,
    value: std::rc::Rc<dyn Fn() -> String>,
    pick: Box<dyn Fn(String)>,
) -> El {
    let v2 = value.clone();
    h("select")
        .id(id)
        .testid(testid)
        .dyn_children(move || {
            // The current value marks its option, but only the options' own inputs rebuild them.
            let current = untrack(|| v2());
            options()
                .into_iter()
                .map(|(v, t)| {
                    let o = h("option").attr("value", &v).text(&t);
                    if v == current {
                        let _ = o.0.set_attribute("selected", "");
                    }
                    o
                })
                .collect()
        })
        .dyn_value(move || value())
        .on("change", move |ev| pick(value_of(&ev)))
}

/// A `<tbody>` that follows `rows` (the first cell of each a row header if `row_headers`),
/// updating only the cells whose text changed: a slider step rewrites a few numbers, not the
/// table.
pub fn table_body(rows: impl Fn() -> Vec<Vec<String>> + 'static, row_headers: bool) -> El {
    table_body_erased(
        Box::new(move || {
            rows()
                .into_iter()
                .map(|cells| Row {
                    cells,
                    total: false,
                })
                .collect()
        }),
        row_headers,
    )
}

/// A table row: its cells' texts, and whether it is a subtotal (class `total`).
pub struct Row {
    pub cells: Vec<String>,
    pub total: bool,
}

/// [`table_body`] whose rows say which of them are subtotals.
pub fn table_body_marked(rows: impl Fn() -> Vec<Row> + 'static, row_headers: bool) -> El {
    table_body_erased(Box::new(rows), row_headers)
}

fn table_body_erased(rows: Box<dyn Fn() -> Vec<Row>>, row_headers: bool) -> El {
    let body = h("tbody");
    let el = body.0.clone();
    let mark = |tr: &Element, total: bool| {
        let _ = if total {
            tr.set_attribute("class", "total")
        } else {
            tr.remove_attribute("class")
        };
    };
    // The previous rows are compared in Rust: reading each cell's text back from the DOM would
    // cost a string conversion per cell per step.
    let reader = Reader::new();
    Effect::new(move |prev: Option<Vec<Row>>| {
        reader.note();
        let now = rows();
        let same_shape = prev.as_ref().is_some_and(|p| {
            p.len() == now.len()
                && p.iter()
                    .zip(&now)
                    .all(|(a, b)| a.cells.len() == b.cells.len())
        });
        match prev {
            Some(old) if same_shape => {
                let trs = el.children();
                for (i, (was, row)) in old.iter().zip(&now).enumerate() {
                    let Some(tr) = trs.item(i as u32) else {
                        continue;
                    };
                    if was.total != row.total {
                        mark(&tr, row.total);
                    }
                    let tds = tr.children();
                    for (j, (a, b)) in was.cells.iter().zip(&row.cells).enumerate() {
                        if a != b {
                            if let Some(cell) = tds.item(j as u32) {
                                cell.set_text_content(Some(b));
                            }
                        }
                    }
                }
            }
            _ => {
                el.set_text_content(None);
                for row in &now {
                    let tr = h("tr");
                    mark(&tr.0, row.total);
                    for (j, c) in row.cells.iter().enumerate() {
                        let cell = if j == 0 && row_headers {
                            h("th").attr("scope", "row")
                        } else {
                            h("td")
                        };
                        let _ = tr.0.append_child(&cell.text(c).0);
                    }
                    let _ = el.append_child(&tr.0);
                }
            }
        }
        now
    });
    body
}

/// A button.
pub fn button(testid: &str, text: impl Fn() -> String + 'static, click: impl Fn() + 'static) -> El {
    let b = h("button").attr("type", "button");
    let b = if testid.is_empty() {
        b
    } else {
        b.testid(testid)
    };
    b.dyn_text(text).on("click", move |_| click())
}
