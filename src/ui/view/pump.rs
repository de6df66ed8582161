//! The background pump: after each plan change it runs the page workbench's jobs (simulations
//! the page wants, most visible first) one per idle period, so input stays responsive while
//! charts and suggestions fill in.

use std::cell::Cell;

use leptos::prelude::*;

use super::browser::now;
use super::page_workbench::wb;
use super::planner::Planner;
use crate::plan::Plan;
use crate::ui::logic::chart_data;
use crate::ui::logic::state;
use crate::ui::logic::suggest;
use crate::ui::logic::workbench::{Wants, Workbench};

thread_local! {
    static PUMP_SCHEDULED: Cell<bool> = const { Cell::new(false) };
    static LAST_CHANGE: Cell<f64> = const { Cell::new(0.0) };
    static FETCHING_SUGGESTIONS: Cell<bool> = const { Cell::new(false) };
    /// The page that owns the pump (the latest mounted); a run scheduled for another stops.
    static OWNER: Cell<u64> = const { Cell::new(0) };
}

/// How long one task of background work runs before it gives the thread back to input: jobs
/// come in slices of simulation (`Workbench::run`), each a few milliseconds, and an input that
/// arrives meanwhile waits for the task to end. Where the browser says whether input is waiting
/// ([`super::dom::input_pending`]) the task stops as soon as some is, and may run for a longer
/// idle period ([`TASK_BUDGET_ASKING_MS`]): a 60,000-op mixture of experts then fills its charts
/// in as fast as in one task per simulation.
pub const TASK_BUDGET_MS: f64 = 5.0;
/// [`TASK_BUDGET_MS`] where the browser says whether input is waiting: within a frame's idle
/// time, which `requestIdleCallback` grants up to 50 ms of.
pub const TASK_BUDGET_ASKING_MS: f64 = 40.0;

/// How long the plan must stay unchanged before the exact estimate runs (so dragging a slider
/// never waits for a full simulation).
pub const SETTLE_MS: f64 = 150.0;

/// A newly mounted page owns the pump; the number it returns goes in its [`Planner`]. A run still
/// scheduled by a page mounted before it (a test's, whose signals may outlive its unmount) stops
/// instead of running that page's jobs: the pages share one workbench, and two pumps would
/// take turns replacing each other's exact estimate for ever. Nor may such a run make the new
/// page's wake-up look done.
pub fn adopt() -> u64 {
    PUMP_SCHEDULED.with(|s| s.set(false));
    FETCHING_SUGGESTIONS.with(|f| f.set(false));
    OWNER.with(|o| {
        o.set(o.get() + 1);
        o.get()
    })
}

/// Whether `p`'s page still owns the pump.
fn owns(p: Planner) -> bool {
    OWNER.with(Cell::get) == p.pump
}

/// Notes a change of the plan (the exact estimate waits for quiet) and wakes the pump.
pub fn plan_changed(p: Planner) {
    LAST_CHANGE.with(|c| c.set(now()));
    schedule_pump(p, 0.0);
}

/// Runs the pump once the page is idle (after the frame is drawn and any queued input), now or
/// after `delay_ms`: a job may take longer than a frame, and it must not run ahead of an input.
fn schedule_pump(p: Planner, delay_ms: f64) {
    if !owns(p) || PUMP_SCHEDULED.with(|s| s.replace(true)) {
        return;
    }
    super::dom::when_idle_after(delay_ms, Box::new(move || run_pump(p)));
}

/// Fetches the suggestions' code once; when it is here, what reads the workbench reads it
/// again and the pump wakes to simulate the candidates.
fn fetch_suggestions(p: Planner) {
    if FETCHING_SUGGESTIONS.with(|f| f.replace(true)) {
        return;
    }
    leptos::task::spawn_local(async move {
        let ok = suggest::load().await;
        if !owns(p) {
            return;
        }
        FETCHING_SUGGESTIONS.with(|f| f.set(false));
        if ok {
            p.version.update(|v| *v += 1);
            schedule_pump(p, 0.0);
        }
    });
}

/// What the page wants simulated for `plan`, most visible first: the suggestions' variants
/// (only when it does not fit), the input-size sweep, the checkpointing sweep.
pub fn wanted(w: &mut Workbench, plan: &Plan, embed: bool, exact: bool) -> Wants {
    let info = w.ckpt_info(plan);
    let w = &*w;
    let mut models = Vec::new();
    let mut suggestions_code = false;
    let gpu = state::gpu_of(plan);
    if let (Some(g), false) = (gpu, embed) {
        // Only once input has settled: the candidates move with the batch (the largest input
        // that fits, the accumulation split), so each slider step would ask for new
        // simulations, and one running when the next input arrives delays its frame.
        let over = w.numbers(plan).is_some_and(|n| n.device_total > g.memory);
        if over && exact {
            // The suggestions' code is fetched the first time a plan does not fit.
            match suggest::candidate_plans(suggest::Ask::Plans {
                plan,
                info: &info,
                capacity: g.memory,
                numbers_of: &|p| w.numbers(p),
            }) {
                Ok(plans) => models.extend(plans),
                Err(_) => suggestions_code = true,
            }
        }
    }
    models.extend(chart_data::length_plans(plan));
    if !embed {
        models.extend(chart_data::ckpt_plans(plan, &info));
    }
    Wants {
        exact,
        models,
        suggestions_code,
    }
}

/// Whether background work begun at `start` should give the main thread back: input waits, or
/// the task's budget ([`TASK_BUDGET_ASKING_MS`] where the browser tells of waiting input,
/// [`TASK_BUDGET_MS`] where it cannot) is spent.
pub fn over_budget(start: f64) -> bool {
    let spent = now() - start;
    match super::dom::input_pending() {
        Some(waiting) => waiting || spent >= TASK_BUDGET_ASKING_MS,
        None => spent >= TASK_BUDGET_MS,
    }
}

/// Slices of jobs for up to [`TASK_BUDGET_MS`], then more in a later task; when only the exact
/// estimate is left and input has not settled, waits for it to settle.
fn run_pump(p: Planner) {
    if !owns(p) {
        return;
    }
    PUMP_SCHEDULED.with(|s| s.set(false));
    let Some(plan) = p.plan.try_get_untracked() else {
        return;
    };
    let quiet = now() - LAST_CHANGE.with(|c| c.get());
    let exact = quiet >= SETTLE_MS;
    let start = now();
    let (wants, job) = wb(|w| {
        let wants = wanted(w, &plan, p.embed, exact);
        let job = w.next_job(&plan, &wants);
        (wants, job)
    });
    if wants.suggestions_code {
        fetch_suggestions(p);
    }
    match job {
        Some(job) => {
            // What reads the workbench reads it again only once a job has answered, not after
            // each slice.
            let answered = wb(|w| loop {
                w.run(job.clone());
                if w.next_job(&plan, &wants).as_ref() != Some(&job) {
                    break true;
                }
                if over_budget(start) {
                    break false;
                }
            });
            if answered {
                p.version.update(|v| *v += 1);
            }
            schedule_pump(p, 0.0);
        }
        None if !exact => schedule_pump(p, SETTLE_MS - quiet),
        // (Not idle while code it needs is on its way.)
        None if FETCHING_SUGGESTIONS.with(Cell::get) => {}
        None => {
            p.idle.set(true);
        }
    }
}
