// The page's speed figures, measured in the page.
//
// Input → next frame: each sample sets a slider's value and dispatches the `input` event a user's
// drag fires, at the start of a task right after a frame, then measures the main thread's work
// until the next frame can be drawn: the event handlers, the reactive updates they trigger (the
// numbers, the tables, every chart redrawn on its canvas), and style and layout (forced with
// getBoundingClientRect). The background work the page defers past the next frame is not in it;
// the drag measure below shows whether it still costs frames.
//
// Drag: an input event in every animation frame for a number of frames, as a pointer drag gives;
// reports the frame intervals and how many frames were late (longer than 1.5 vsyncs).

/** Median and 95th percentile of `xs`. */
export function stats(xs) {
  const s = [...xs].sort((a, b) => a - b);
  const at = (q) => s[Math.min(s.length - 1, Math.ceil(q * s.length) - 1)];
  return { n: s.length, median: at(0.5), p95: at(0.95), max: s[s.length - 1] };
}

/** Bytes in MiB, for the memory figures. */
export const mib = (b) => `${(b / 2 ** 20).toFixed(2)} MiB`;

export const fmt = (st) => `median ${st.median.toFixed(2)} ms, p95 ${st.p95.toFixed(2)} ms, max ${st.max.toFixed(2)} ms (${st.n} samples)`;

/** Input → next-frame work for each value of `values` set on the range input `selector`. */
export function inputLatency(page, selector, values) {
  return page.evaluate(
    async ({ selector, values }) => {
      const el = document.querySelector(selector);
      const afterFrame = () => new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));
      const task = () => new Promise((r) => { const c = new MessageChannel(); c.port1.onmessage = () => r(); c.port2.postMessage(0); });
      const out = [];
      for (const v of values) {
        await afterFrame();
        const t0 = performance.now();
        el.value = String(v);
        el.dispatchEvent(new Event('input', { bubbles: true }));
        await task(); // the handlers' microtasks (reactive effects, chart redraws) have run
        document.body.getBoundingClientRect(); // style and layout of the next frame
        out.push(performance.now() - t0);
      }
      return out;
    },
    { selector, values },
  );
}

/** Frame intervals while the slider moves through `values`, one value per animation frame. */
export function dragFrames(page, selector, values) {
  return page.evaluate(
    ({ selector, values }) =>
      new Promise((done) => {
        const el = document.querySelector(selector);
        const stamps = [];
        let i = 0;
        const frame = (t) => {
          stamps.push(t);
          if (i < values.length) {
            el.value = String(values[i++]);
            el.dispatchEvent(new Event('input', { bubbles: true }));
            requestAnimationFrame(frame);
          } else {
            done(stamps.slice(1).map((s, k) => s - stamps[k]));
          }
        };
        requestAnimationFrame(frame);
      }),
    { selector, values },
  );
}

/** Milliseconds from navigation to the page's `vram-planner:ready` mark (numbers shown, controls live). */
export async function interactiveTime(page) {
  return page.evaluate(
    () =>
      new Promise((done) => {
        const look = () => {
          const m = performance.getEntriesByName('vram-planner:ready')[0];
          if (m) done(m.startTime);
          else setTimeout(look, 5);
        };
        look();
      }),
  );
}

/**
 * When the peak's text first reached the screen: its Element Timing entry's `renderTime`, the
 * presentation time of the frame that first painted it (the page marks the element with
 * `elementtiming="peak"`). It comes after `vram-planner:ready` by the first frame's style, layout
 * and paint on the main thread and its raster and display by the compositor.
 */
export async function onScreenTime(page, timeoutMs = 20_000) {
  return page.evaluate(
    (timeoutMs) =>
      new Promise((done, fail) => {
        if (!PerformanceObserver.supportedEntryTypes?.includes('element')) {
          fail(new Error('this browser has no Element Timing: the numbers on screen cannot be dated'));
          return;
        }
        const timer = setTimeout(() => fail(new Error(`the peak (elementtiming="peak") was not painted within ${timeoutMs} ms`)), timeoutMs);
        new PerformanceObserver((list, obs) => {
          const e = list.getEntries().find((x) => x.identifier === 'peak');
          if (e) {
            obs.disconnect();
            clearTimeout(timer);
            done(e.renderTime || e.loadTime);
          }
        }).observe({ type: 'element', buffered: true });
      }),
    timeoutMs,
  );
}

/** Slider positions that sweep back and forth over `lo..hi`, `n` of them. */
export function sweepPositions(lo, hi, n) {
  const out = [];
  for (let i = 0; i < n; i++) {
    const t = (i % 40) / 39;
    const up = Math.floor(i / 40) % 2 === 0;
    out.push(Math.round(lo + (up ? t : 1 - t) * (hi - lo)));
  }
  return out;
}

/**
 * Installs the recorder of real input in `page`: for each trusted `input` event (a key typed in
 * the batch box, a drag of a slider), the time from the event's timestamp to the end of the
 * main thread's work on the first frame that shows a changed peak (found in that frame's
 * animation callback; the task queued there runs once the frame's style, layout and paint are
 * done). Event Timing entries of `input` events (`duration`: from the event's timestamp to the
 * presentation of the next frame, in steps of 8 ms, reported from 16 ms) are kept beside them:
 * a sample is the larger of the two, so the compositor's share is never left out. A key that
 * leaves the box's value as it was (typing "1" over a selected "1") changes no number and is no
 * sample: the peak that would move later is the settled exact estimate's, not that key's.
 */
export function recordInputs(page) {
  return page.evaluate(() => {
    window.vpInputs = [];
    window.vpEventTiming = [];
    window.vpLongTasks = [];
    new PerformanceObserver((list) => {
      for (const e of list.getEntries()) window.vpLongTasks.push(e.duration);
    }).observe({ type: 'longtask' });
    new PerformanceObserver((list) => {
      for (const e of list.getEntries()) if (e.name === 'input') window.vpEventTiming.push({ start: e.startTime, duration: e.duration });
    }).observe({ type: 'event', durationThreshold: 16 });
    const peak = () => document.querySelector('[data-testid="peak"]')?.textContent;
    const was = new WeakMap();
    document.addEventListener('beforeinput', (e) => e.isTrusted && was.set(e.target, e.target.value), true);
    document.addEventListener(
      'input',
      (e) => {
        if (!e.isTrusted) return;
        const unchanged = was.has(e.target) && was.get(e.target) === e.target.value;
        was.delete(e.target);
        if (unchanged) return;
        const before = peak();
        const t0 = e.timeStamp;
        let frames = 0;
        const look = () => {
          frames++;
          const changed = peak() !== before;
          if (changed || frames >= 60) {
            const c = new MessageChannel();
            c.port1.onmessage = () => window.vpInputs.push({ t0, ms: performance.now() - t0, frames, changed });
            c.port2.postMessage(0);
          } else requestAnimationFrame(look);
        };
        requestAnimationFrame(look);
      },
      true,
    );
  });
}

/**
 * The main thread's tasks of 50 ms or more (Long Tasks API) since the last call: what an input
 * arriving meanwhile would wait for, whoever ran them (the page's background simulations, its
 * charts, the browser's own work on the main thread).
 */
export async function takeLongTasks(page) {
  return page.evaluate(() => {
    const out = window.vpLongTasks;
    window.vpLongTasks = [];
    return out;
  });
}

/** The samples recorded since the last call: each changed frame's latency, Event Timing merged. */
export async function takeInputs(page) {
  return page.evaluate(() => {
    const out = window.vpInputs
      .filter((s) => s.changed)
      .map((s) => {
        const et = window.vpEventTiming.find((e) => Math.abs(e.start - s.t0) < 1);
        return Math.max(s.ms, et ? et.duration : 0);
      });
    window.vpInputs = [];
    window.vpEventTiming = [];
    return out;
  });
}

/**
 * Types `keys` into the focused field as a keyboard does, through the DevTools protocol's
 * `Input.dispatchKeyEvent` (a trusted key press, handled by the browser's input pipeline), one
 * key every `gapMs`.
 */
export async function typeKeys(cdp, keys, gapMs) {
  for (const k of keys) {
    const code = /\d/.test(k) ? `Digit${k}` : k;
    await cdp.send('Input.dispatchKeyEvent', { type: 'keyDown', key: k, code, text: k, unmodifiedText: k, windowsVirtualKeyCode: k.charCodeAt(0) });
    await cdp.send('Input.dispatchKeyEvent', { type: 'keyUp', key: k, code, windowsVirtualKeyCode: k.charCodeAt(0) });
    await new Promise((r) => setTimeout(r, gapMs));
  }
}

/**
 * Drags the range input `selector` with the mouse through `Input.dispatchMouseEvent`: pressed on
 * its thumb, moved `steps` times by `dx` CSS pixels one move per `gapMs` (a hand's drag at 60 Hz),
 * then released.
 */
export async function dragSlider(page, cdp, selector, steps, dx, gapMs) {
  const at = await page.evaluate((selector) => {
    const el = document.querySelector(selector);
    el.scrollIntoView({ block: 'center' });
    const r = el.getBoundingClientRect();
    const f = (Number(el.value) - Number(el.min || 0)) / (Number(el.max || 100) - Number(el.min || 0));
    // The thumb's centre: the track runs between half a thumb from each end (16 px thumbs).
    return { x: r.left + 8 + f * (r.width - 16), y: r.top + r.height / 2 };
  }, selector);
  const mouse = (type, x) => cdp.send('Input.dispatchMouseEvent', { type, x, y: at.y, button: 'left', buttons: type === 'mouseReleased' ? 0 : 1, clickCount: 1 });
  await mouse('mousePressed', at.x);
  let x = at.x;
  for (let i = 0; i < steps; i++) {
    x += dx;
    await mouse('mouseMoved', x);
    await new Promise((r) => setTimeout(r, gapMs));
  }
  await mouse('mouseReleased', x);
}

/**
 * Installs the recorder of presentation delays in `page`, a page with or without script of its
 * own: for each trusted `input` event, its Event Timing `duration` (from the event's timestamp to
 * the presentation of the next frame, in steps of 8 ms), or 0 where the browser reported none (it
 * reports from 16 ms). The same figure on the planner and on its static first screen, where a
 * typed character is the only change, tells the page's share from this browser's on this machine.
 */
export function recordPresentation(page) {
  return page.evaluate(() => {
    window.vpTyped = [];
    window.vpPresented = [];
    new PerformanceObserver((list) => {
      for (const e of list.getEntries()) if (e.name === 'input') window.vpPresented.push({ start: e.startTime, duration: e.duration });
    }).observe({ type: 'event', durationThreshold: 16 });
    document.addEventListener('input', (e) => e.isTrusted && window.vpTyped.push(e.timeStamp), true);
  });
}

/** The presentation delays recorded since the last call, one per trusted `input` event. */
export async function takePresentation(page) {
  // Entries are queued until the frame is presented: wait for one more frame and task.
  await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => setTimeout(r, 50))));
  return page.evaluate(() => {
    const out = window.vpTyped.map((t) => window.vpPresented.find((e) => Math.abs(e.start - t) < 1)?.duration ?? 0);
    window.vpTyped = [];
    window.vpPresented = [];
    return out;
  });
}
