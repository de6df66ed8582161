// A minimal test runner: named async tests run in order, each failure is reported with its
// stack, and the run ends with one summary line, `N passed, M failed`, and a non-zero exit
// status when anything failed.
const tests = [];

/** Registers a test. */
export function test(name, fn) {
  tests.push({ name, fn });
}

/** Throws with `message` unless `cond` holds. */
export function check(cond, message) {
  if (!cond) throw new Error(message);
}

/** Polls `probe` until it returns a truthy value; throws `message` after `timeoutMs`. */
export async function until(probe, message, timeoutMs = 10_000) {
  return within(timeoutMs, message, async () => {
    for (;;) {
      const v = await probe();
      if (v) return v;
      await new Promise((r) => setTimeout(r, 50));
    }
  });
}

/** Runs `fn`, failing with `message` if it takes longer than `ms`. */
async function within(ms, message, fn) {
  let timer;
  const limit = new Promise((_, fail) => {
    timer = setTimeout(() => fail(new Error(`timed out after ${ms} ms: ${message}`)), ms);
  });
  try {
    return await Promise.race([fn(), limit]);
  } finally {
    clearTimeout(timer);
  }
}

/** No single test may take longer than this. */
const TEST_TIMEOUT_MS = 240_000;

/** Runs every registered test (those whose name contains `hooks.only`, if given) with
 * `hooks.each` around it; returns the number of failures. */
export async function run(hooks = {}) {
  let passed = 0;
  let failed = 0;
  const started = Date.now();
  for (const t of tests.filter((t) => !hooks.only || t.name.includes(hooks.only))) {
    const t0 = Date.now();
    try {
      await within(TEST_TIMEOUT_MS, t.name, () => (hooks.each ? hooks.each(t.fn) : t.fn()));
      passed++;
      console.log(`  ok    ${t.name} (${Date.now() - t0} ms)`);
    } catch (e) {
      failed++;
      console.log(`  FAIL  ${t.name} (${Date.now() - t0} ms)\n${indent(e?.stack ?? String(e))}`);
    }
  }
  console.log(`\n${passed} passed, ${failed} failed (${((Date.now() - started) / 1000).toFixed(1)} s)`);
  return failed;
}

const indent = (s) => s.replace(/^/gm, '        ');
