// End-to-end tests: the release build in dist/, served under /vram-planner/ as GitHub Pages serves
// it, driven through Playwright in Debian's Chromium (no browser download).
//   node tests/e2e/run.mjs          (make test runs it after make dist)
// Env: DIST (default dist), CHROMIUM (default /usr/bin/chromium), E2E_SHOTS (a folder for screenshots).
import { mkdirSync } from 'node:fs';
import { chromium } from 'playwright-core';
import { check, run, test, until } from './harness.mjs';
import { PlannerPage } from './planner.page.mjs';
import { serve } from './server.mjs';

const DIST = process.env.DIST ?? 'dist';
const CHROMIUM = process.env.CHROMIUM ?? '/usr/bin/chromium';
const SHOTS = process.env.E2E_SHOTS ?? 'tests/e2e/out';

// As root Chromium needs --no-sandbox; the rest keep it from calling Google's services.
const browser = await chromium.launch({
  executablePath: CHROMIUM,
  args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run'],
});
let server = await serve(DIST);
let context;
let planner;
let problems;
let requests;

/** A new browser context (fresh storage, no service worker) watching errors and requests. */
async function fresh() {
  await context?.close();
  context = await browser.newContext({ viewport: { width: 1100, height: 900 }, deviceScaleFactor: 2 });
  problems = [];
  requests = [];
  context.on('request', (r) => requests.push(r.url()));
  const page = await context.newPage();
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('console', (m) => m.type() === 'error' && problems.push(`console error: ${m.text()}`));
  planner = new PlannerPage(page);
}

test('the page boots under /vram-planner/ with an estimate and a chart', async () => {
  await fresh();
  await planner.open(server.url);
  check((await planner.page.title()) === 'VRAM Planner', 'title is not the product name');
  check(/^Allocated peak: [\d.]+ [KMGT]iB$/.test(await planner.peakText()), `peak text: ${await planner.peakText()}`);
  check((await planner.error.count()) === 0, 'an error is shown for the default plan');
  const { width, cssWidth } = await planner.canvas.evaluate((c) => ({ width: c.width, cssWidth: c.clientWidth }));
  check(width === cssWidth * 2, `canvas backing store ${width} px is not 2 × ${cssWidth} CSS px`);
  mkdirSync(SHOTS, { recursive: true });
  await planner.page.screenshot({ path: `${SHOTS}/main.png`, fullPage: true });
});

test('moving the batch slider changes the memory shown and redraws the chart', async () => {
  const peak = await planner.peakText();
  const pixels = await planner.chartPixels();
  await planner.slideBatchTo(900);
  check((await planner.batchValue()) === '512', `batch box shows ${await planner.batchValue()} for slider position 900`);
  await until(async () => (await planner.peakText()) !== peak, 'the peak did not change');
  await until(async () => (await planner.chartPixels()) !== pixels, 'the chart was not redrawn');
  const big = await planner.peakText();
  await planner.slideBatchTo(0);
  await until(async () => (await planner.peakText()) !== big, 'the peak did not change back');
  check((await planner.batchValue()) === '1', 'slider position 0 is not batch 1');
});

test('no request leaves the origin', async () => {
  check(requests.length > 0, 'no requests were seen');
  const away = requests.filter((u) => !u.startsWith(server.origin + '/') && !/^(data|blob):/.test(u));
  check(away.length === 0, `requests to other hosts: ${away.join(', ')}`);
});

test('after one visit it reloads and works offline (service worker)', async () => {
  await fresh();
  await planner.open(server.url);
  await until(() => planner.offlineReady(), 'no service worker took control');
  await server.close();
  await context.setOffline(true);
  await planner.reload();
  const peak = await planner.peakText();
  await planner.slideBatchTo(700);
  await until(async () => (await planner.peakText()) !== peak, 'the peak did not change offline');
  await context.setOffline(false);
});

const failed = await run({
  each: async (fn) => {
    await fn();
    check(problems.length === 0, problems.join('\n'));
  },
});
await context?.close();
await browser.close();
await server.close();
process.exit(failed ? 1 : 0);
