// End-to-end tests: the release build in dist/, served under /vram-planner/ as GitHub Pages serves
// it, driven through Playwright in Debian's Chromium (no browser download).
//   node tests/e2e/run.mjs          (make test runs it after make dist)
// Env: DIST (default dist), CHROMIUM (default /usr/bin/chromium), E2E_SHOTS (a folder for
// screenshots, default tests/e2e/out), E2E_ONLY (run only the tests whose name contains it).
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { chromium } from 'playwright-core';
import { check, run, test, until } from './harness.mjs';
import { CHARTS, PlannerPage } from './planner.page.mjs';
import { dragFrames, dragSlider, fmt, inputLatency, mib, interactiveTime, onScreenTime, recordInputs, recordPresentation, stats, sweepPositions, takeInputs, takeLongTasks, takePresentation, typeKeys } from './perf.mjs';
import { createHash } from 'node:crypto';
import { serve, servePage } from './server.mjs';
import { variant } from './variant.mjs';

const DIST = process.env.DIST ?? 'dist';
const CHROMIUM = process.env.CHROMIUM ?? '/usr/bin/chromium';
const SHOTS = process.env.E2E_SHOTS ?? 'tests/e2e/out';
mkdirSync(SHOTS, { recursive: true });

// As root Chromium needs --no-sandbox; the rest keep it from calling Google's services. No
// --disable-gpu: it moves compositing onto the browser's own threads, which a user's browser
// does not do, and on a 2-core machine that competes with the page (interactive time measured
// 24 ms slower at the median with it).
const browser = await chromium.launch({
  executablePath: CHROMIUM,
  args: ['--no-sandbox', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run'],
});
let server = await serve(DIST);
let context;
let planner;
let problems;
let requests;
let dialogs;

/** A new browser context (fresh storage) watching errors, dialogs and requests. */
async function fresh(options = {}) {
  await context?.close();
  context = await browser.newContext({ viewport: { width: 1280, height: 900 }, deviceScaleFactor: 2, ...options });
  problems = [];
  requests = [];
  dialogs = [];
  context.on('request', (r) => requests.push(r.url()));
  const page = await context.newPage();
  watch(page);
  planner = new PlannerPage(page);
}

function watch(page) {
  // The policy is a <meta> (no report-uri): every violation, in any frame, is a console error.
  page.addInitScript(() =>
    addEventListener('securitypolicyviolation', (e) => console.error(`CSP violation: ${e.violatedDirective} refused ${e.blockedURI || 'inline code'} (${e.sourceFile}:${e.lineNumber})`)),
  );
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('console', (m) => m.type() === 'error' && problems.push(`console error: ${m.text()}`));
  page.on('dialog', (d) => {
    dialogs.push(d.message());
    d.dismiss().catch(() => {});
  });
}

const url = (query = '') => server.url + (query ? `?${query}` : '');
const changed = (before, after) => CHARTS.filter((id) => before[id] !== after[id]);

test('the page boots under /vram-planner/ with an estimate and every chart', async () => {
  await fresh();
  await planner.open(url());
  check((await planner.page.title()) === 'VRAM Planner', 'title is not the product name');
  check(/^Allocated peak: [\d.]+ [KMGT]iB$/.test(await planner.peakText()), `peak text: ${await planner.peakText()}`);
  check((await planner.error.count()) === 0, 'an error is shown for the default plan');
  check((await planner.notice.count()) === 0, 'a notice is shown for a plain link');
  for (const id of ['reserved', 'device-total', 'verdict', 'max-batch', 'breakdown', 'suggestions', 'copy-link', 'embed', ...CHARTS]) {
    check(await planner.page.getByTestId(id).isVisible(), `${id} is not visible`);
  }
  await until(async () => (await planner.chartSizes()).every((c) => c.cssWidth > 0 && c.width === c.cssWidth * 2), 'a canvas is not drawn at 2 × its CSS width (devicePixelRatio 2)');
  await planner.idle();
  await planner.page.evaluate(() => window.scrollTo(0, 0));
  await planner.page.waitForTimeout(200);
  await planner.page.screenshot({ path: `${SHOTS}/main.png`, fullPage: true });
  await planner.page.screenshot({ path: `${SHOTS}/main-top.png` });
});

test('moving the batch slider changes the numbers and every chart', async () => {
  await planner.idle();
  const peak = await planner.peakText();
  const total = await planner.text(planner.deviceTotal);
  const before = await planner.allChartPixels();
  await planner.slideBatchTo(900);
  check((await planner.batchValue()) === '512', `batch box shows ${await planner.batchValue()} for slider position 900`);
  await until(async () => (await planner.peakText()) !== peak, 'the peak did not change');
  await until(async () => (await planner.text(planner.deviceTotal)) !== total, 'the device total did not change');
  await until(async () => changed(before, await planner.allChartPixels()).length === CHARTS.length, 'not every chart was redrawn');
  const big = await planner.peakText();
  await planner.slideBatchTo(0);
  await until(async () => (await planner.peakText()) !== big, 'the peak did not change back');
  check((await planner.batchValue()) === '1', 'slider position 0 is not batch 1');
});

/** Moves the input-size slider to `index`: its box must show `value`, the peak change and every
 * chart be redrawn. */
async function slideSizeAndCheck(control, index, value, what) {
  await planner.idle();
  const peak = await planner.peakText();
  const before = await planner.allChartPixels();
  await planner.slideSizeTo(index);
  await until(async () => (await control.locator('input[type=number]').inputValue()) === value, `the ${what} box did not follow the slider`);
  await until(async () => (await planner.peakText()) !== peak, 'the peak did not change');
  await until(async () => changed(before, await planner.allChartPixels()).length === CHARTS.length, 'not every chart was redrawn');
}

test('the resolution slider changes the numbers and the charts (vision model)', async () => {
  await fresh();
  await planner.open(url('model=resnet50&batch=32'));
  check(await planner.resolution.isVisible(), 'no resolution control for a CNN');
  check((await planner.seqLen.count()) === 0 || !(await planner.seqLen.isVisible()), 'a sequence-length control for a CNN');
  await slideSizeAndCheck(planner.resolution, 15, '512', 'resolution'); // 512 px
});

test('the sequence-length slider changes the numbers and the charts (text model)', async () => {
  await planner.pick(planner.model, 'gpt2');
  await until(() => planner.seqLen.isVisible(), 'no sequence-length control for GPT-2');
  check(!(await planner.resolution.isVisible().catch(() => false)), 'a resolution control for GPT-2');
  await slideSizeAndCheck(planner.seqLen, 0, '128', 'sequence'); // 128 tokens
});

test('controls that do not apply disappear', async () => {
  const shown = async () => ({ res: await planner.resolution.isVisible().catch(() => false), seq: await planner.seqLen.isVisible().catch(() => false), attn: await planner.attention.isVisible(), ckpt: await planner.checkpointing.isVisible() });
  await planner.pick(planner.model, 'gpt2');
  await until(async () => JSON.stringify(await shown()) === JSON.stringify({ res: false, seq: true, attn: true, ckpt: true }), `GPT-2 shows ${JSON.stringify(await shown())}`);
  await planner.pick(planner.model, 'resnet18');
  await until(async () => JSON.stringify(await shown()) === JSON.stringify({ res: true, seq: false, attn: false, ckpt: true }), `ResNet-18 shows ${JSON.stringify(await shown())}`);
  await planner.pick(planner.model, 'lstm-lm');
  await until(async () => JSON.stringify(await shown()) === JSON.stringify({ res: false, seq: true, attn: false, ckpt: false }), `the LSTM shows ${JSON.stringify(await shown())}`);
  await planner.pick(planner.model, 'vit_b_16');
  await until(async () => (await shown()).attn && (await shown()).res, 'ViT-B/16 has no attention kernel or resolution');
});

test('an unpadded batch skips the causal mask: a lower peak, kept in the link', async () => {
  await fresh();
  await planner.open(url('model=llama-small&seq=2048&batch=8&gpu=h100-80'));
  check(await planner.causalMask.isVisible(), 'no batch-padding control for a decoder');
  const padded = await planner.peakText();
  await planner.pick(planner.causalMask, 'skipped');
  await until(async () => (await planner.peakText()) !== padded, 'the peak did not change');
  await until(async () => decodeURIComponent(planner.page.url()).includes('"causal_mask":"skipped"'), `the link lacks the choice: ${planner.page.url()}`);
  await planner.page.reload();
  await until(async () => (await planner.causalMask.inputValue()) === 'skipped', 'the choice did not survive a reload');
  await planner.pick(planner.model, 'bert-base');
  await until(async () => !(await planner.causalMask.isVisible()), 'BERT has no causal mask to skip');
});

test('every control is labelled and usable from the keyboard', async () => {
  await planner.pick(planner.model, 'resnet50');
  const unlabelled = await planner.page.evaluate(() =>
    [...document.querySelectorAll('input, select, textarea')]
      .filter((el) => !el.closest('[hidden]') && !el.readOnly)
      .filter((el) => !(el.labels?.length || el.getAttribute('aria-label')))
      .map((el) => el.outerHTML.slice(0, 80)),
  );
  check(unlabelled.length === 0, `controls without a label: ${unlabelled.join(' | ')}`);
  const batch = await planner.batchValue();
  await planner.batchSlider.focus();
  for (let i = 0; i < 30; i++) await planner.page.keyboard.press('ArrowRight');
  await until(async () => (await planner.batchValue()) !== batch, 'arrow keys do not move the batch slider');
  const prec = planner.precision;
  const before = await prec.inputValue();
  await prec.focus();
  await planner.page.keyboard.press('ArrowDown');
  await until(async () => (await prec.inputValue()) !== before, 'the precision picker does not follow the keyboard');
  check(/^Allocated peak/.test(await planner.peakText()), 'no estimate after keyboard changes');
});

test('the verdict flips when the GPU changes', async () => {
  await fresh();
  await planner.open(url('model=resnet50&batch=256&gpu=a100-80'));
  await until(async () => (await planner.verdict.getAttribute('data-fits')) === 'true', `ResNet-50 at batch 256 does not fit an A100 80 GB: ${await planner.text(planner.verdict)}`);
  check((await planner.text(planner.verdict)).startsWith('Fits on A100 80 GB'), await planner.text(planner.verdict));
  await planner.setGpu('t4');
  await until(async () => (await planner.verdict.getAttribute('data-fits')) === 'false', 'the verdict did not flip on a T4');
  check((await planner.text(planner.verdict)).startsWith('Does not fit on T4'), await planner.text(planner.verdict));
  await planner.setGpu('custom');
  const box = planner.gpu.locator('input[type=number]');
  await box.fill('200');
  await box.dispatchEvent('change');
  await until(async () => (await planner.verdict.getAttribute('data-fits')) === 'true', 'a custom 200 GiB capacity does not fit it');
  await until(async () => /^\d+$/.test(await planner.text(planner.maxBatch)), 'no largest batch shown');
  await until(async () => (await planner.maxBatch.getAttribute('data-exact')) === 'true', 'the largest batch was not confirmed by full simulations');
});

test('the URL round-trips every control', async () => {
  await fresh();
  await planner.open(url());
  await planner.pick(planner.model, 'gpt2-medium');
  await until(() => planner.seqLen.isVisible(), 'no sequence length for GPT-2');
  await planner.slideSizeTo(4); // 512
  await planner.pick(planner.precision, 'amp_bf16');
  await planner.pick(planner.optimizer, 'sgd_momentum');
  await planner.pick(planner.page.getByTestId('optimizer-impl'), 'fused');
  await planner.pick(planner.checkpointing, 'sqrt');
  await planner.accumulation.fill('4');
  await planner.accumulation.dispatchEvent('change');
  await planner.pick(planner.attention, 'eager');
  await planner.setGpu('h100-80');
  await planner.pick(planner.units, 'gb');
  await planner.batchBox.fill('6');
  await planner.batchBox.dispatchEvent('input');
  const want = { model: 'gpt2-medium', seq: '512', dtype: 'amp_bf16', opt: 'sgd_momentum', opt_impl: 'fused', ckpt: 'sqrt', acc: '4', attn: 'eager', gpu: 'h100-80', units: 'gb', batch: '6' };
  await until(async () => { const q = await planner.query(); return Object.entries(want).every(([k, v]) => q[k] === v); }, `the address bar lacks some settings: ${JSON.stringify(await planner.query())}`);
  await planner.idle();
  const peak = await planner.peakText();
  const link = planner.page.url();
  await fresh();
  await planner.open(link);
  check((await planner.notice.count()) === 0, 'the page refused its own link');
  await planner.idle();
  check((await planner.peakText()) === peak, `the link shows ${await planner.peakText()}, not ${peak}`);
  const values = {
    model: await planner.model.inputValue(),
    batch: await planner.batchValue(),
    seq: await planner.seqLen.locator('input[type=number]').inputValue(),
    dtype: await planner.precision.inputValue(),
    opt: await planner.optimizer.inputValue(),
    opt_impl: await planner.page.getByTestId('optimizer-impl').inputValue(),
    ckpt: await planner.checkpointing.locator('select').inputValue(),
    acc: await planner.accumulation.inputValue(),
    attn: await planner.attention.inputValue(),
    gpu: await planner.gpu.locator('select').inputValue(),
    units: await planner.units.inputValue(),
  };
  for (const [k, v] of Object.entries(want)) check(values[k] === v, `${k}: the reopened link shows ${values[k]}, not ${v}`);
});

test('the mode, parallelism and comparison panels share the plan and its link', async () => {
  await fresh();
  await planner.open(url('model=llama-3-8b&seq=2048&batch=2&gpu=h100-80'));
  check((await planner.mode.count()) === 0, 'the panels are mounted while closed');
  await planner.openPanels();
  const mode = planner.mode;
  await until(() => mode.isVisible(), 'no mode picker in the opened section');
  await mode.selectOption('infer');
  await until(async () => !(await planner.optimizer.isVisible()), 'the optimizer still shows when serving');
  await until(async () => (await planner.query()).x?.includes('"mode":"infer"'), `the link lacks the mode: ${JSON.stringify(await planner.query())}`);
  await planner.idle();
  const peak = await planner.peakText();
  await planner.open(planner.page.url());
  check((await planner.notice.count()) === 0, 'the page refused its own link');
  await planner.idle();
  check((await planner.peakText()) === peak, `the reopened link shows ${await planner.peakText()}, not ${peak}`);
  check(!(await planner.optimizer.isVisible()), 'the reopened link is not in inference mode');
});

test('Copy link gives the link to this plan', async () => {
  await fresh({ permissions: ['clipboard-read', 'clipboard-write'] });
  await planner.open(url('model=vgg16&batch=24&gpu=l4'));
  await planner.copyLink.click();
  await until(async () => (await planner.page.getByTestId('copied').count()) + (await planner.page.getByTestId('link-text').count()) > 0, 'no confirmation after Copy link');
  const copied = (await planner.page.getByTestId('copied').count()) > 0 ? await planner.page.evaluate(() => navigator.clipboard.readText()) : await planner.page.getByTestId('link-text').inputValue();
  check(copied.startsWith(server.url + '?') && copied.includes('model=vgg16') && copied.includes('batch=24') && copied.includes('gpu=l4'), `copied ${copied}`);
});

test('embed mode renders a compact card with one chart, the key numbers and the sliders', async () => {
  await planner.embed.click();
  const snippet = await planner.embedCode.inputValue();
  check(snippet.startsWith('<iframe src="') && snippet.includes('embed=1') && snippet.includes('model=vgg16'), `embed snippet: ${snippet}`);
  await fresh();
  await planner.open(url('embed=1&model=gpt2&batch=8&gpu=t4'));
  check(await planner.embedCard.isVisible(), 'no embed card');
  check(await planner.batchSlider.isVisible() && (await planner.seqLen.locator('input[type=range]').isVisible()), 'the card lacks its sliders');
  check(await planner.verdict.isVisible() && (await planner.deviceTotal.isVisible()), 'the card lacks its numbers');
  const charts = await planner.page.evaluate((ids) => ids.filter((id) => document.querySelector(`[data-testid="${id}"]`)), CHARTS);
  check(charts.length === 1 && charts[0] === 'chart-batch', `the card shows ${charts.join(', ')}`);
  check((await planner.precision.count()) === 0 && (await planner.breakdown.count()) === 0, 'the card shows the full page');
  const peak = await planner.peakText();
  await planner.slideBatchTo(500);
  await until(async () => (await planner.peakText()) !== peak, 'the card\'s slider does not change the peak');
  await planner.idle();
  await planner.page.screenshot({ path: `${SHOTS}/embed.png`, fullPage: true });
  await planner.open(url('embed=1&model=resnet18&chart=timeline'));
  check((await planner.page.getByTestId('chart-timeline').count()) === 1, 'chart=timeline does not pick the chart');
});

test('the language switch shows Chinese, and the choice is remembered', async () => {
  await fresh();
  await planner.open(url());
  await planner.pick(planner.lang, 'zh');
  await until(async () => (await planner.peakText()).startsWith('已分配峰值'), `peak text in Chinese: ${await planner.peakText()}`);
  check((await planner.page.getAttribute('html', 'lang')) === 'zh-CN', 'html lang is not zh-CN');
  check((await planner.text(planner.verdict)).includes('可以放入'), `verdict in Chinese: ${await planner.text(planner.verdict)}`);
  check((await planner.page.getByTestId('chart-batch').locator('h3').textContent()) === '显存随批大小变化', 'chart title not translated');
  // The mode, parallelism and comparison panels follow the page's language too, open or not.
  await planner.openPanels();
  const modes = async () => JSON.stringify(await planner.optionTexts(planner.mode));
  check((await modes()) === JSON.stringify(['训练', '微调', '推理']), `mode options in Chinese: ${await modes()}`);
  await until(async () => (await planner.text(planner.perGpu)).includes('优化器状态'), `per-GPU rows in Chinese: ${await planner.text(planner.perGpu)}`);
  check((await planner.compare.locator('h2').textContent()) === '配置对比', 'comparison heading not translated');
  await planner.pick(planner.lang, 'en');
  await until(async () => (await planner.text(planner.perGpu)).includes('Optimizer state'), `per-GPU rows back in English: ${await planner.text(planner.perGpu)}`);
  check((await modes()) === JSON.stringify(['Train', 'Fine-tune', 'Infer']), `mode options back in English: ${await modes()}`);
  await planner.pick(planner.lang, 'zh');
  await until(async () => (await planner.peakText()).startsWith('已分配峰值'), 'Chinese again');
  // The page stores a choice once it is idle: what a reload finds is what was stored.
  const stored = () => planner.page.evaluate(() => localStorage.getItem('vram-planner.lang'));
  await until(async () => (await stored()) === 'zh', 'the choice of Chinese was not stored');
  await planner.page.goto(url());
  await planner.ready();
  check((await planner.peakText()).startsWith('已分配峰值'), 'the language was not remembered');
  await planner.pick(planner.lang, 'en');
  await until(async () => (await planner.peakText()).startsWith('Allocated peak'), 'back to English');
  // A link's language is shown, not remembered: only a choice made on the page is.
  await until(async () => (await stored()) === 'en', 'the choice of English was not stored');
  await planner.open(url('lang=zh'));
  await planner.idle();
  check((await planner.peakText()).startsWith('已分配峰值'), 'the link\'s language is not shown');
  check((await stored()) === 'en', `opening a link with lang=zh stored ${await stored()}`);
  await planner.page.goto(url());
  await planner.ready();
  check((await planner.peakText()).startsWith('Allocated peak'), 'a link with lang=zh changed the remembered language');
});

test('units switch between GiB and GB', async () => {
  await planner.pick(planner.units, 'gb');
  await until(async () => / [kMGT]?B$/.test(await planner.peakText()) && !(await planner.peakText()).includes('iB'), `peak in GB: ${await planner.peakText()}`);
  await planner.openPanels();
  const perGpu = () => planner.text(planner.perGpu);
  await until(async () => / [MG]B/.test(await perGpu()) && !(await perGpu()).includes('iB'), `per-GPU rows in GB: ${await perGpu()}`);
  await planner.pick(planner.units, 'gib');
  await until(async () => (await planner.peakText()).includes('iB'), 'back to GiB');
  await until(async () => (await perGpu()).includes('iB'), `per-GPU rows back in GiB: ${await perGpu()}`);
});

test('on a phone the page never scrolls sideways (wide tables scroll in their box)', async () => {
  for (const q of ['model=gpt2', 'model=llama-3-70b&seq=8192&gpu=t4&lang=zh', 'embed=1&model=gpt2']) {
    await fresh({ viewport: { width: 390, height: 844 } });
    await planner.open(url(q));
    if (!q.includes('embed')) {
      await planner.openPanels();
      await planner.perGpu.waitFor({ timeout: 15_000 });
    }
    const width = await planner.page.evaluate(() => document.documentElement.scrollWidth);
    check(width <= 390, `${q}: the page is ${width} px wide on a 390 px screen`);
  }
});

test('clicking a suggestion applies it', async () => {
  await fresh();
  await planner.open(url('model=resnet50&batch=512&gpu=rtx4090'));
  check((await planner.verdict.getAttribute('data-fits')) === 'false', 'the plan should not fit');
  const apply = planner.suggestions.getByTestId('apply-suggestion');
  await until(async () => (await apply.count()) >= 3, 'fewer than three suggestions');
  const first = await planner.suggestions.locator('li').first().textContent();
  check(/−[\d.]+ [KMGT]iB → /.test(first), `no effect in ${first}`);
  await apply.first().click();
  await until(async () => (await planner.verdict.getAttribute('data-fits')) === 'true', `applying "${first}" did not make it fit`);
  await until(async () => (await planner.suggestions.textContent()).includes('It fits'), 'suggestions still shown after it fits');
});

test('a hostile URL shows the notice, runs nothing and falls back to defaults', async () => {
  await fresh();
  const evil = 'model=%3Cscript%3Ealert(1)%3C%2Fscript%3E&batch=%3Cimg%20src%3Dx%20onerror%3Dalert(2)%3E&lang=%22%3E%3Csvg%20onload%3Dalert(3)%3E&gpu=custom:-1&cfg=%7B%22model_type%22%3A%22%3Cb%3E%22%7D&%3Cscript%3E=1';
  await planner.open(url(evil));
  await until(() => planner.notice.isVisible(), 'no notice for a hostile link');
  const text = await planner.notice.textContent();
  check(!text.includes('<') && !text.includes('alert'), `the notice echoes the link: ${text}`);
  check(/'model'/.test(text) && /'batch'/.test(text) && /unknown parameter/.test(text), `notice: ${text}`);
  await planner.page.waitForTimeout(500);
  check(dialogs.length === 0, `dialogs opened: ${dialogs.join(', ')}`);
  const injected = await planner.page.evaluate(() => document.querySelectorAll('img[src="x"], svg[onload], script:not([src]):not([type])').length);
  check(injected <= 1, `elements from the link in the page: ${injected}`);
  check(/^Allocated peak: [\d.]+ [KMGT]iB$/.test(await planner.peakText()), 'no default estimate');
  check((await planner.model.inputValue()) === 'resnet50' && (await planner.batchValue()) === '32', 'not the default plan');
  await planner.page.getByTestId('dismiss-notice').click();
  await until(async () => (await planner.notice.count()) === 0, 'the notice does not go away');
});

test('a model whose code cannot be fetched says so and keeps the plan', async () => {
  // (A service worker would serve the chunk past the route.)
  await fresh({ serviceWorkers: 'block' });
  await planner.open(url());
  await planner.idle();
  // Offline before the service worker cached it, or a failed request: the models' chunk fails.
  await planner.page.route(/split_models-[0-9a-f]+\.wasm$/, (r) => r.abort());
  const peak = await planner.peakText();
  await planner.pick(planner.model, 'gpt2');
  const note = planner.page.getByTestId('model-code');
  await until(async () => /could not be fetched/.test((await note.textContent()) ?? ''), 'no message that the model could not be fetched');
  check((await planner.model.inputValue()) === 'resnet50', 'the picker did not go back to the plan\'s model');
  check((await planner.peakText()) === peak, 'the numbers changed without the model');
  // Once it can be fetched, picking the model again works.
  await planner.page.unroute(/split_models-[0-9a-f]+\.wasm$/);
  await planner.pick(planner.model, 'gpt2');
  await until(async () => (await planner.peakText()) !== peak, 'picking the model again did not load it');
  check(!(await note.isVisible()), 'the failure message stays after a successful fetch');
  // The loader reports the aborted request on the console: that one error is expected.
  problems = problems.filter((p) => !/Failed to fetch|net::ERR_FAILED|split_models/.test(p));
});

test('exports: breakdown as CSV and JSON, each chart as PNG, SVG and CSV', async () => {
  await fresh({ acceptDownloads: true });
  await planner.open(url('model=resnet18&batch=16'));
  await planner.idle();
  // At a person's pace: Chromium holds back downloads that follow each other too closely.
  const grab = async (locator) => {
    await planner.page.waitForTimeout(400);
    const [d] = await Promise.all([planner.page.waitForEvent('download', { timeout: 10_000 }), locator.click()]);
    return { name: d.suggestedFilename(), body: readFileSync(await d.path()) };
  };
  const csv = await grab(planner.page.getByTestId('export-csv'));
  check(csv.name.endsWith('.csv') && csv.body.toString().startsWith('key,component,bytes,formula\nparams,Parameters,'), `breakdown CSV: ${csv.body.toString().slice(0, 80)}`);
  const json = JSON.parse((await grab(planner.page.getByTestId('export-json'))).body.toString());
  check(json.plan.model === 'resnet18' && json.rows.some((r) => r.key === 'allocated_peak'), 'breakdown JSON lacks the plan or the peak');
  for (const id of CHARTS) {
    const fig = planner.page.getByTestId(id);
    const png = await grab(fig.getByTestId('export-png'));
    check(png.body.subarray(0, 4).toString('hex') === '89504e47', `${id}: PNG is not a PNG`);
    const svg = (await grab(fig.getByTestId('export-svg'))).body.toString();
    check(svg.startsWith('<svg') && svg.includes('</svg>') && svg.length > 2000, `${id}: SVG is not an SVG`);
    const table = (await grab(fig.getByTestId('export-table'))).body.toString();
    check(table.split('\n').length > 2, `${id}: the table CSV is empty`);
  }
});

test('each chart has its data table as a text alternative', async () => {
  for (const id of CHARTS) {
    const fig = planner.page.getByTestId(id);
    check((await fig.locator('canvas').getAttribute('aria-label'))?.length > 10, `${id}: the canvas has no accessible summary`);
    await fig.locator('summary').click();
    await until(async () => (await fig.locator('tbody tr').count()) > 0, `${id}: no rows in its data table`);
    check((await fig.locator('thead th').count()) >= 2, `${id}: no column headers`);
  }
});

// --- speed -------------------------------------------------------------------------------------

test('speed: slider input to next frame on llama-3-70b at sequence length 8192, all charts visible', async () => {
  // A window tall enough that every chart is on screen (charts out of view are not redrawn).
  await fresh({ deviceScaleFactor: 1, viewport: { width: 1600, height: 5200 } });
  await planner.open(url('model=llama-3-70b&seq=8192&dtype=amp_bf16&batch=1&gpu=h200-141'));
  await planner.idle(120_000);
  for (const id of CHARTS) {
    const box = await planner.page.getByTestId(id).locator('canvas').boundingBox();
    check(box && box.y + box.height <= 5200, `${id} is not within the window`);
  }
  await inputLatency(planner.page, '#batch-range', sweepPositions(0, 1200, 10)); // warm up
  const batch = stats(await inputLatency(planner.page, '#batch-range', sweepPositions(0, 1200, 160)));
  console.log(`    batch slider, input → next frame: ${fmt(batch)}  [budget p95 ≤ 8 ms: ${batch.p95 <= 8 ? 'met' : 'OVER'}]`);
  const intervals = await dragFrames(planner.page, '#batch-range', sweepPositions(0, 1200, 120));
  const late = intervals.filter((d) => d > 25).length;
  console.log(`    batch slider, dragged one step per frame: frame interval ${fmt(stats(intervals))}; ${late} of ${intervals.length} frames late (> 25 ms)`);
  await planner.idle(120_000);
  const seq = stats(await inputLatency(planner.page, '#size-range', [12, 13, 12, 11, 12, 13, 14, 13, 12, 11]));
  console.log(`    sequence-length slider (a new simulation per step), input → next frame: ${fmt(seq)}`);
  check(batch.p95 < 50, `batch slider p95 ${batch.p95.toFixed(1)} ms: far beyond the 8 ms budget`);
  // With the mode, parallelism and comparison section open (its panels follow once input settles).
  await planner.page.getByTestId('more-panels').locator('summary').click();
  await planner.page.getByTestId('mode').waitFor();
  await planner.idle(120_000);
  const open = stats(await inputLatency(planner.page, '#batch-range', sweepPositions(0, 1200, 40)));
  console.log(`    batch slider with the mode/parallelism/comparison section open: ${fmt(open)}`);
  // The largest of the newer presets (DeepSeek-V3, 671B, a mixture of experts simulated in the
  // background) at 8192 tokens, all charts visible.
  await fresh({ deviceScaleFactor: 1, viewport: { width: 1600, height: 5200 } });
  await planner.open(url('model=deepseek-v3&seq=8192&dtype=amp_bf16&batch=1&gpu=h200-141'));
  await planner.idle(120_000);
  await inputLatency(planner.page, '#batch-range', sweepPositions(0, 1200, 10)); // warm up
  const largest = stats(await inputLatency(planner.page, '#batch-range', sweepPositions(0, 1200, 160)));
  console.log(`    deepseek-v3 at 8192 tokens, batch slider, input → next frame: ${fmt(largest)}  [budget p95 ≤ 8 ms: ${largest.p95 <= 8 ? 'met' : 'OVER'}]`);
  check(largest.p95 < 50, `deepseek-v3: batch slider p95 ${largest.p95.toFixed(1)} ms: far beyond the 8 ms budget`);
});

/** Real input to the frame that shows the new numbers, p95, at each CPU slowdown (one frame at 1×). */
const INPUT_BUDGET_MS = { 1: 16.7, 4: 33 };
/** Where a real input's p95 fails the run: far beyond the budget, a regression. */
const INPUT_FAIL_MS = 500;

test('speed: real key presses and slider drags, each to the frame that shows its numbers, at 1× and 4× CPU', async () => {
  // A person's input through the browser's own input pipeline (DevTools protocol key and mouse
  // events), timed from the event's timestamp to the frame that first shows the changed peak.
  // Keys come every 120 ms (quick typing), drag moves every 16 ms (a pointer at 60 Hz). The page
  // runs its background work (the exact estimate, the largest batch, the sweeps) when idle, so
  // the samples include any of it that an input has to wait for. Plans: llama-3-70b at 8192 tokens
  // with all charts in a window tall enough to show them, and the largest new presets.
  // The same keys are typed, round by round and in alternating order, into the same screen as
  // static HTML (no script, each chart an image of its pixels: a typed character is its only
  // change) in a window of the same size, and both pages' presentation delays are printed with
  // their ratio: what this browser takes to present any change to that screen is the floor.
  const failures = [];
  // The last case is a desktop window (1600×1000), where the charts below the controls are out of
  // view: the same plan as the first, to tell the window's size from the page's work.
  const tall = { width: 1600, height: 5200 };
  for (const [q, viewport] of [
    ['model=llama-3-70b&seq=8192&dtype=amp_bf16&batch=1&gpu=h200-141', tall],
    ['model=mixtral-8x7b&seq=4096&dtype=amp_bf16&batch=1&gpu=h200-141', tall],
    ['model=qwen3-30b-a3b&seq=4096&dtype=amp_bf16&batch=1&gpu=h200-141', tall],
    ['model=llama-3-70b&seq=8192&dtype=amp_bf16&batch=1&gpu=h200-141', { width: 1600, height: 1000 }],
  ]) {
    await fresh({ deviceScaleFactor: 1, viewport });
    await planner.open(url(q));
    await planner.idle(120_000);
    const floor = await screenAsStatic(planner.page);
    const floorCtx = await browser.newContext({ deviceScaleFactor: 1, viewport, serviceWorkers: 'block' });
    const still = await floorCtx.newPage();
    await still.goto(floor.url);
    const stillCdp = await floorCtx.newCDPSession(still);
    await recordPresentation(still);
    const cdp = await context.newCDPSession(planner.page);
    await recordInputs(planner.page);
    await recordPresentation(planner.page);
    for (const rate of [1, 4]) {
      await cdp.send('Emulation.setCPUThrottlingRate', { rate });
      await stillCdp.send('Emulation.setCPUThrottlingRate', { rate });
      const keys = [];
      const shown = { page: [], floor: [] };
      for (let round = 0; round < 8; round++) {
        const text = String(12 + round * 7);
        for (const which of round % 2 ? ['floor', 'page'] : ['page', 'floor']) {
          const [pg, session] = which === 'page' ? [planner.page, cdp] : [still, stillCdp];
          // The planner's background work (set off by its own keys) would slow the floor.
          if (which === 'floor') await planner.idle(120_000);
          await pg.bringToFront();
          await pg.evaluate(() => { const b = document.querySelector('[data-testid="batch"] input[type=number]'); b.focus(); b.select(); });
          await typeKeys(session, text, 120);
          await pg.waitForTimeout(400);
          shown[which].push(...(await takePresentation(pg)));
          if (which === 'page') keys.push(...(await takeInputs(planner.page)));
        }
      }
      await dragSlider(planner.page, cdp, '#batch-range', 40, 3, 16);
      await dragSlider(planner.page, cdp, '#batch-range', 40, -3, 16);
      await planner.page.waitForTimeout(400);
      const drags = await takeInputs(planner.page);
      await takePresentation(planner.page); // the drags' input events are not typed keys
      const k = stats(keys);
      const d = stats(drags);
      const budget = INPUT_BUDGET_MS[rate];
      const model = `${new URLSearchParams(q).get('model')} in ${viewport.width}×${viewport.height}`;
      console.log(`    ${model}, CPU ${rate}×: key press → numbers on screen ${fmt(k)}; slider drag → numbers on screen ${fmt(d)}  [budget p95 ≤ ${budget} ms: ${k.p95 <= budget && d.p95 <= budget ? 'met' : 'OVER'}]`);
      const sp = stats(shown.page);
      const sf = stats(shown.floor);
      const below = (xs) => xs.filter((x) => x === 0).length;
      console.log(`      key press → next frame presented (Event Timing alone; 0: under 16 ms, ${below(shown.page)} of ${sp.n} on the page, ${below(shown.floor)} of ${sf.n} on the floor): page ${fmt(sp)}; the same screen as static HTML ${fmt(sf)}; p95 ratio ${sf.p95 > 0 ? (sp.p95 / sf.p95).toFixed(2) : '—'}`);
      check(shown.floor.length >= 10, `${model}: the static screen saw too few typed keys (${shown.floor.length})`);
      check(keys.length >= 10 && drags.length >= 20, `${model}: too few samples (${keys.length} keys, ${drags.length} drag steps) changed the numbers`);
      // The budget is printed, met or OVER; the run fails only far beyond it (a regression),
      // while the page does not yet meet it (see the README's speed figures).
      if (k.p95 > INPUT_FAIL_MS || d.p95 > INPUT_FAIL_MS) failures.push(`${model} at ${rate}×: p95 ${k.p95.toFixed(1)} ms typed, ${d.p95.toFixed(1)} ms dragged (budget ${budget} ms; fails beyond ${INPUT_FAIL_MS} ms)`);
      await planner.idle(120_000);
      // Through the typing, the drags and the background work they set off, until idle.
      const long = await takeLongTasks(planner.page);
      console.log(`    ${model}, CPU ${rate}×: main-thread tasks of 50 ms or more: ${long.length}, longest ${long.length ? Math.max(...long).toFixed(0) : 0} ms`);
    }
    await cdp.send('Emulation.setCPUThrottlingRate', { rate: 1 });
    await floorCtx.close();
    await floor.close();
  }
  check(failures.length === 0, failures.join('; '));
});

/** The budgets on the ratio of the page's interactive time to its floor's, at every CPU speed. */
const FLOOR_BUDGET = { median: 1.2, p95: 1.3 };
/** Where the ratio fails the run: far beyond the budget (a regression); the budget itself is
 * printed, met or OVER, while the page does not yet meet it (see the README's speed figures). */
const FLOOR_FAIL = { median: 2.5, p95: 3 };

/** `html` served as a page of its own from a folder that also holds the page's stylesheet. */
async function serveStatic(html) {
  const dir = mkdtempSync(join(tmpdir(), 'static-'));
  writeFileSync(join(dir, 'index.html'), html);
  for (const f of readdirSync(DIST).filter((f) => f.endsWith('.css'))) copyFileSync(join(DIST, f), join(dir, f));
  const still = await serve(dir);
  return { url: still.url, close: async () => (await still.close(), rmSync(dir, { recursive: true })) };
}

/**
 * The page's first screen as static HTML: its DOM as the first frame holds it, no script, none of
 * what is built after that frame, with the page's stylesheet; served from a folder of its own.
 */
async function firstScreenFloor() {
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 900 }, serviceWorkers: 'block' });
  const page = await ctx.newPage();
  await page.goto(url());
  await interactiveTime(page);
  const html = await page.evaluate(() => {
    const doc = document.documentElement.cloneNode(true);
    for (const e of doc.querySelectorAll('script, link:not([rel=stylesheet]), .charts, .slot')) e.remove();
    return `<!doctype html>${doc.outerHTML}`;
  });
  await ctx.close();
  return serveStatic(html);
}

/**
 * The screen `page` shows, as static HTML served from a folder of its own: its DOM now, no script,
 * each chart's canvas an image of its pixels at the canvas's size, with the page's stylesheet (and
 * without its content policy, which allows no data: images).
 */
async function screenAsStatic(page) {
  const html = await page.evaluate(() => {
    const live = [...document.querySelectorAll('canvas')];
    const doc = document.documentElement.cloneNode(true);
    [...doc.querySelectorAll('canvas')].forEach((c, i) => {
      // The image gets its source only in the HTML text: an image with a source loads even
      // detached, and this page's policy refuses data: URLs.
      const img = document.createElement('img');
      const style = getComputedStyle(live[i]);
      img.setAttribute('data-pixels', String(i));
      img.alt = '';
      img.style.cssText = ['display', 'width', 'height', 'border', 'border-radius', 'box-sizing'].map((k) => `${k}:${style.getPropertyValue(k)}`).join(';');
      c.replaceWith(img);
    });
    for (const e of doc.querySelectorAll('script, link:not([rel=stylesheet]), meta[http-equiv]')) e.remove();
    return `<!doctype html>${doc.outerHTML}`.replace(/data-pixels="(\d+)"/g, (_, i) => `src="${live[Number(i)].toDataURL('image/png')}"`);
  });
  return serveStatic(html);
}

/**
 * One cold load of `at` (a fresh context: no cache, no service worker) with the CPU slowed
 * `rate` times: when the peak's text reached the screen (its Element Timing entry), and the
 * page's own marks.
 */
async function coldLoad(at, rate, watched) {
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 900 }, serviceWorkers: 'block' });
  const page = await ctx.newPage();
  if (watched) watch(page);
  if (rate > 1) await (await ctx.newCDPSession(page)).send('Emulation.setCPUThrottlingRate', { rate });
  await page.goto(at);
  const shown = await onScreenTime(page, 60_000);
  const [ready, start] = await page.evaluate(() => ['ready', 'start'].map((m) => performance.getEntriesByName(`vram-planner:${m}`)[0]?.startTime));
  await ctx.close();
  return { shown, ready, start };
}

test('speed: interactive time against the same first screen as static HTML, interleaved, at 1× and 4× CPU', async () => {
  // Interactive: the numbers on screen with every control live. The controls are live from the
  // first animation frame that paints the numbers (vram-planner:ready); the pixels come once the
  // browser has styled, laid out, rasterised and displayed that frame, which the peak's Element
  // Timing entry dates. The floor is the same first screen as static HTML, dated the same way:
  // what this browser on this machine takes to show that content at all. Loads alternate between
  // the two (page first on even rounds, floor first on odd), 20 each after one warm-up load of
  // each, so the machine's noise falls on both; the budgets are on the ratio.
  const floor = await firstScreenFloor();
  const failures = [];
  for (const rate of [1, 4]) {
    await coldLoad(url(), rate, true);
    await coldLoad(floor.url, rate, false);
    const page = [];
    const still = [];
    for (let i = 0; i < 20; i++) {
      const order = i % 2 ? ['floor', 'page'] : ['page', 'floor'];
      for (const which of order) {
        if (which === 'page') page.push(await coldLoad(url(), rate, true));
        else still.push(await coldLoad(floor.url, rate, false)); // it has no icon: the browser asks for /favicon.ico
      }
    }
    check(page.every((l) => l.start > 0), 'the page did not mark the start of its wasm (vram-planner:start)');
    check(page.every((l) => l.shown >= l.ready), 'the numbers reached the screen before the frame that paints them began');
    const p = stats(page.map((l) => l.shown));
    const f = stats(still.map((l) => l.shown));
    const ratio = { median: p.median / f.median, p95: p.p95 / f.p95 };
    const met = ratio.median <= FLOOR_BUDGET.median && ratio.p95 <= FLOOR_BUDGET.p95;
    console.log(`    CPU ${rate}×: interactive ${fmt(p)}; floor ${fmt(f)}; ratio median ${ratio.median.toFixed(2)}, p95 ${ratio.p95.toFixed(2)}  [budget ≤ ${FLOOR_BUDGET.median} / ≤ ${FLOOR_BUDGET.p95}: ${met ? 'met' : 'OVER'}]`);
    console.log(`      of which navigation → wasm start: ${fmt(stats(page.map((l) => l.start)))}; wasm start → numbers in the page, controls live: ${fmt(stats(page.map((l) => l.ready - l.start)))}; that frame styled, laid out, rasterised and displayed: ${fmt(stats(page.map((l) => l.shown - l.ready)))}`);
    if (ratio.median > FLOOR_FAIL.median || ratio.p95 > FLOOR_FAIL.p95) failures.push(`at ${rate}× CPU the interactive time is ${ratio.median.toFixed(2)}× its floor at the median and ${ratio.p95.toFixed(2)}× at p95 (budget ${FLOOR_BUDGET.median}× / ${FLOOR_BUDGET.p95}×; fails beyond ${FLOOR_FAIL.median}× / ${FLOOR_FAIL.p95}×)`);
  }
  await floor.close();
  check(failures.length === 0, failures.join('; '));
});

test('speed: first-load weight, and what is fetched when', async () => {
  // The weight is what a first visit fetches before the page is interactive and idle, at this
  // 1280×900 viewport, where the charts start below the fold: the responses it got, each file
  // gzipped at level 9 (GitHub Pages compresses; so does this server, at level 6). Lazily fetched chunks
  // are listed apart, with the moment they are fetched.
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 900 }, serviceWorkers: 'block' });
  const page = await ctx.newPage();
  watch(page);
  const fetched = new Set();
  page.on('response', (r) => r.url().startsWith(server.url) && fetched.add(r.url().slice(server.url.length).split('?')[0] || 'index.html'));
  const p = new PlannerPage(page);
  await p.open(url());
  await p.idle();
  const gzOf = (f) => gzipSync(readFileSync(`${DIST}/${f}`), { level: 9 }).length;
  const first = [...fetched].filter((f) => existsSync(`${DIST}/${f}`));
  const gz = first.reduce((sum, f) => sum + gzOf(f), 0);
  const lazy = readdirSync(DIST).filter((f) => /^(split|chunk)_.*\.wasm$/.test(f));
  check(lazy.length > 0, 'dist/ has no lazily loaded chunk: was the wasm split (make split-wasm)?');
  check(!first.some((f) => lazy.includes(f)), `a lazy chunk was fetched on first load: ${first.join(', ')}`);
  // Another model's builder is a chunk of its own, fetched when it is picked.
  const peak = await p.peakText();
  const t0 = Date.now();
  await p.pick(p.model, 'gpt2');
  await until(async () => (await p.peakText()) !== peak, 'picking GPT-2 did not change the peak');
  const pickedAfter = Date.now() - t0;
  const forModels = [...fetched].filter((f) => lazy.includes(f));
  check(forModels.some((f) => f.startsWith('split_models')), `picking GPT-2 fetched no model chunk: ${forModels.join(', ')}`);
  await p.pick(p.model, 'resnet50');
  // What lazy loading costs: the first chart scrolled in, from the scroll to drawn pixels,
  // its chunk fetched on the way.
  const drawnAfter = await page.evaluate(async () => {
    const c = document.querySelector('[data-testid="chart-batch"] canvas');
    const t0 = performance.now();
    c.scrollIntoView();
    while (performance.now() - t0 < 10_000) {
      await new Promise((r) => requestAnimationFrame(r));
      if (c.width > 0 && c.getContext('2d').getImageData(0, 0, c.width, c.height).data.some((v) => v !== 0)) return performance.now() - t0;
    }
    return -1;
  });
  check(drawnAfter >= 0, 'the first chart was not drawn after scrolling to it');
  const forCharts = [...fetched].filter((f) => lazy.includes(f) && !forModels.includes(f));
  check(forCharts.length > 0, `scrolling to the charts fetched no chunk: ${[...fetched].join(', ')}`);
  await p.openPanels();
  const forPanels = [...fetched].filter((f) => lazy.includes(f) && !forModels.includes(f) && !forCharts.includes(f));
  check(forPanels.length > 0, `opening the panels fetched no chunk: ${[...fetched].join(', ')}`);
  await ctx.close();
  check(gz <= 200_000, `the first load is ${(gz / 1000).toFixed(1)} KB gzip: over the 200 KB budget`);
  console.log(`    first load: ${(gz / 1000).toFixed(1)} KB gzip in all, ${first.length} files (budget 200 KB: ${gz <= 200_000 ? 'met' : 'OVER'})`);
  for (const f of first.sort()) console.log(`      ${f.padEnd(44)} ${(gzOf(f) / 1000).toFixed(1).padStart(7)} KB`);
  const kb = (fs) => `${(fs.reduce((sum, f) => sum + gzOf(f), 0) / 1000).toFixed(1)} KB gzip (${fs.join(', ')})`;
  console.log(`    fetched when another model (GPT-2) is first picked: ${kb(forModels)}; pick → new peak shown ${pickedAfter} ms`);
  console.log(`    fetched when the first chart scrolls in: ${kb(forCharts)}; scroll → chart drawn ${drawnAfter.toFixed(0)} ms`);
  console.log(`    fetched when "Mode, parallelism and comparison" first opens: ${kb(forPanels)}`);
});

test('speed: at every window size the first load fetches only what its first screen shows', async () => {
  // A lazily loaded chunk may be fetched at start-up only if what needs it is on screen once the
  // layout is final: the charts' code when a chart is in view. The layout settles while the page
  // builds what lies below its first screen; a chart that crosses the fold only meanwhile must not
  // fetch it. Three cold loads per size: the race this guards against showed in some loads only.
  const lazy = readdirSync(DIST).filter((f) => /^(split|chunk)_.*\.wasm$/.test(f));
  const gzOf = (f) => gzipSync(readFileSync(`${DIST}/${f}`), { level: 9 }).length;
  const sizes = [
    { width: 390, height: 844, deviceScaleFactor: 3, isMobile: true, hasTouch: true },
    { width: 1280, height: 800 },
    { width: 1440, height: 1000 },
    { width: 1920, height: 1080 },
    { width: 2560, height: 1440 },
  ];
  for (const { width, height, ...rest } of sizes) {
    for (let i = 0; i < 3; i++) {
      const ctx = await browser.newContext({ viewport: { width, height }, serviceWorkers: 'block', ...rest });
      const page = await ctx.newPage();
      watch(page);
      const fetched = new Set();
      page.on('response', (r) => r.url().startsWith(server.url) && fetched.add(r.url().slice(server.url.length).split('?')[0] || 'index.html'));
      const p = new PlannerPage(page);
      await p.open(url());
      await p.idle();
      await page.waitForTimeout(300);
      const inView = await page.evaluate((charts) => charts.filter((id) => {
        const r = document.querySelector(`[data-testid="${id}"] canvas`)?.getBoundingClientRect();
        return r && r.bottom > 0 && r.top < innerHeight;
      }), CHARTS);
      await ctx.close();
      const files = [...fetched].filter((f) => existsSync(`${DIST}/${f}`));
      const early = files.filter((f) => lazy.includes(f));
      const first = files.filter((f) => !lazy.includes(f));
      const kb = (fs) => (fs.reduce((sum, f) => sum + gzOf(f), 0) / 1000).toFixed(1);
      if (i === 0 || early.length > 0) {
        console.log(`    ${width}×${height}${rest.isMobile ? ' (phone)' : ''}, load ${i + 1}: first-load files ${kb(first)} KB gzip; charts in view: ${inView.length ? inView.join(', ') : 'none'}; chunks fetched at start-up: ${early.length ? `${kb(early)} KB (${early.join(', ')})` : 'none'}`);
      }
      check(first.reduce((sum, f) => sum + gzOf(f), 0) <= 200_000, `${width}×${height}: the first-load files are ${kb(first)} KB gzip, over the 200 KB budget`);
      check(early.length === 0 || inView.length > 0, `${width}×${height}, load ${i + 1}: no chart is in view, yet ${early.join(', ')} was fetched at start-up`);
    }
  }
});

// --- hosting -----------------------------------------------------------------------------------

// The slowest plans a link can ask for (`cargo bench --bench slowest` lists them natively): the
// largest model at the longest context, the largest mixture of experts at 8192 tokens, the
// deepest preset at batch 4096, and the largest model with a checkpointing policy (its charts want
// dozens of variants of a 600,000-event step: their cached lines once filled the 4 GiB of wasm
// memory until the page aborted). Each must show its numbers or a message, and the page must keep
// answering: no single task of the main thread may block it for longer than a second, and a
// batch typed in afterwards must reach the numbers. The wasm memory is read when the numbers are
// reached and again while the background jobs go on: it must stay flat.
test('the slowest plans a link can ask for never freeze the page', async () => {
  // The batch typed afterwards: 2, or for DeepSeek-V3 (whose peak is its optimizer step's,
  // 12.2 TiB at any small batch) one whose activations show. DeepSeek-V3's link is checked by
  // building its whole graph (184,146 ops) in one task, which also tells the page its
  // checkpointing options; that task and the background build that follows take 0.5-0.7 s here:
  // printed, not held to the second.
  const links = [
    ['model=llama-3.1-405b&seq=131072&batch=1', '2', 1000],
    ['model=qwen3-30b-a3b&seq=8192&batch=8', '2', 1000],
    ['model=llama-3.1-405b&batch=4096', '2', 1000],
    ['model=deepseek-v3&batch=32&dtype=amp_bf16&ckpt=k5', '1024', null],
  ];
  for (const [query, typedBatch, blockLimit] of links) {
    await fresh();
    await planner.page.addInitScript(() => {
      window.vpLongTasks = [];
      new PerformanceObserver((l) => l.getEntries().forEach((e) => window.vpLongTasks.push(e.duration))).observe({ type: 'longtask', buffered: true });
      addEventListener('TrunkApplicationStarted', (e) => Object.defineProperty(window, 'wasmMemory', { value: e.detail.wasm.memory }));
    });
    await planner.page.goto(url(query));
    await until(async () => /\d/.test((await planner.peakText()) ?? '') || (await planner.page.getByTestId('error').count()) > 0, `${query}: neither numbers nor a message`, 30_000);
    const before = await planner.peakText();
    const typed = Date.now();
    await planner.batchBox.fill(typedBatch);
    await until(async () => (await planner.peakText()) !== before, `${query}: typing a batch did not reach the numbers`, 60_000);
    const reached = Date.now() - typed;
    const wasm = () => planner.page.evaluate(() => window.wasmMemory.buffer.byteLength);
    // The first 15 s hold the background jobs' working set (one large model's sweeps: 96 to
    // 164 MiB measured, depending on how far they got before the numbers were read); the next
    // 15 s must add at most 128 MiB more (a runaway cache once filled the 4 GiB).
    const wasmReached = await wasm();
    await planner.page.waitForTimeout(15_000);
    const wasmLater = await wasm();
    await planner.page.waitForTimeout(15_000);
    const wasmLatest = await wasm();
    const longest = await planner.page.evaluate(() => Math.max(0, ...window.vpLongTasks));
    console.log(`    ${query}: longest main-thread task ${longest.toFixed(0)} ms; a typed batch reached the numbers in ${reached} ms; wasm memory ${mib(wasmReached)}, ${mib(wasmLater)} 15 s later, ${mib(wasmLatest)} 30 s later`);
    if (blockLimit !== null) check(longest < blockLimit, `${query}: the main thread was blocked for ${longest.toFixed(0)} ms`);
    check(wasmLater - wasmReached <= 256 * 2 ** 20, `${query}: the wasm memory grew from ${mib(wasmReached)} to ${mib(wasmLater)} in 15 s of background work`);
    check(wasmLatest - wasmLater <= 128 * 2 ** 20, `${query}: the wasm memory kept growing, from ${mib(wasmLater)} to ${mib(wasmLatest)} in the next 15 s`);
  }
});

test('the layout search of a 128-expert model leaves the page live', async () => {
  // Seconds of work in wasm (1.9 s natively): run a few steps per task, the page answers input
  // meanwhile and says how far the search got.
  await fresh();
  await planner.page.addInitScript(() => {
    window.vpLongTasks = [];
    new PerformanceObserver((l) => l.getEntries().forEach((e) => window.vpLongTasks.push({ start: e.startTime, duration: e.duration }))).observe({ type: 'longtask', buffered: true });
  });
  await planner.page.goto(url('model=qwen3-30b-a3b&seq=4096&batch=64&dtype=amp_bf16&gpu=h100-80'));
  await until(async () => /\d/.test((await planner.peakText()) ?? ''), 'qwen3-30b-a3b: no numbers', 30_000);
  await planner.openPanels();
  // Let the start-up's background work finish, so the tasks counted are the search's.
  await planner.page.waitForTimeout(5_000);
  const run = planner.page.getByTestId('layout-search-run');
  const status = planner.page.getByTestId('layout-search-status');
  const found = planner.page.getByTestId('apply-layout');
  const started = await planner.page.evaluate(() => performance.now());
  await run.click();
  check(/\S/.test((await status.textContent()) ?? ''), 'the search shows no progress');
  const before = await planner.peakText();
  const typed = Date.now();
  await planner.batchBox.fill('32');
  await until(async () => (await planner.peakText()) !== before, 'typing a batch during the search did not reach the numbers', 60_000);
  const reached = Date.now() - typed;
  const stillSearching = /\S/.test((await status.textContent()) ?? '');
  await until(async () => !/\S/.test((await status.textContent()) ?? ''), 'the search never answered', 180_000);
  const took = (await planner.page.evaluate(() => performance.now())) - started;
  const layouts = await found.count();
  const tasks = await planner.page.evaluate((t0) => window.vpLongTasks.filter((e) => e.start >= t0).map((e) => [e.start - t0, e.duration]), started);
  const longest = Math.max(0, ...tasks.map((t) => t[1]));
  const over200 = tasks.filter((t) => t[1] >= 200).map((t) => `${t[1].toFixed(0)} ms at +${t[0].toFixed(0)}`);
  console.log(`    qwen3-30b-a3b batch 64: the search answered in ${took.toFixed(0)} ms with ${layouts} layouts; longest main-thread task meanwhile ${longest.toFixed(0)} ms (tasks of 200 ms or more: ${over200.join(', ') || 'none'}); a batch typed during it reached the numbers in ${reached} ms${stillSearching ? ', the search still running' : ' (the search had already answered)'}`);
  check(layouts >= 1, 'the search found no layout');
  check(longest < 1000, `the main thread was blocked for ${longest.toFixed(0)} ms during the search`);
});

test('no request leaves the origin', async () => {
  await fresh();
  await planner.open(url());
  await planner.idle();
  check(requests.length > 0, 'no requests were seen');
  const away = requests.filter((u) => !u.startsWith(server.origin + '/') && !/^(data|blob):/.test(u));
  check(away.length === 0, `requests to other hosts: ${away.join(', ')}`);
});

test('a Hugging Face model id: nothing asked before Fetch, then applied as a pasted config', async () => {
  // A stand-in for the Hub (CI has no internet): the Qwen3 config.json transformers wrote for
  // tests/data/variant-steps.jsonl, 404 for anything else.
  const config = readFileSync('tests/data/variant-steps.jsonl', 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l)).find((r) => r.plan?.hf_config?.model_type === 'qwen3').plan.hf_config;
  const asked = [];
  let hubUp = true;
  await fresh();
  await context.route('https://huggingface.co/**', (route) => {
    const path = new URL(route.request().url()).pathname;
    asked.push(path);
    if (!hubUp) return route.abort('internetdisconnected');
    const ok = path === '/Qwen/Qwen3-8B/resolve/main/config.json';
    return route.fulfill({ status: ok ? 200 : 404, headers: { 'access-control-allow-origin': '*', 'content-type': 'application/json' }, body: ok ? JSON.stringify(config) : '{"error":"Entry not found"}' });
  });
  const page = planner.page;
  await planner.open(url());
  await planner.idle();
  await page.getByTestId('config').locator('summary').click();
  await page.getByTestId('hf-id').fill('Qwen/Qwen3-8B');
  check(asked.length === 0 && requests.every((u) => u.startsWith(server.origin + '/')), `requests before Fetch: ${requests.filter((u) => !u.startsWith(server.origin + '/')).join(', ')}`);
  const before = await planner.peakText();
  await page.getByTestId('hf-fetch').click();
  await page.getByTestId('hf-fetched').waitFor({ timeout: 15_000 });
  check(asked.join() === '/Qwen/Qwen3-8B/resolve/main/config.json', `asked the Hub for ${asked.join(', ')}`);
  await until(async () => (await planner.peakText()) !== before, 'the estimate did not follow the fetched config');
  await until(() => new URL(page.url()).searchParams.get('cfg'), 'the address does not record the config as cfg');
  check(JSON.parse(new URL(page.url()).searchParams.get('cfg')).model_type === 'qwen3', 'the address records another config');
  await planner.idle();
  const fetched = await planner.peakText();
  console.log(`    fetched Qwen/Qwen3-8B: ${fetched}`);
  // The same config pasted gives the same numbers.
  await page.locator('[data-testid=config] textarea').fill(JSON.stringify(config));
  await page.getByTestId('use-config').click();
  await planner.idle();
  check((await planner.peakText()) === fetched, `pasted: ${await planner.peakText()}, fetched: ${fetched}`);
  // A missing id says so and points at the paste box.
  await page.getByTestId('hf-id').fill('nobody/nothing');
  await page.getByTestId('hf-fetch').click();
  const missing = page.getByTestId('hf-missing');
  await missing.waitFor({ timeout: 15_000 });
  check(/paste/.test(await missing.textContent()), `the 404 message: ${await missing.textContent()}`);
  // Offline, the id fetched before comes from storage.
  hubUp = false;
  await page.getByTestId('hf-id').fill('Qwen/Qwen3-8B');
  await page.getByTestId('hf-fetch').click();
  await page.getByTestId('hf-cached').waitFor({ timeout: 15_000 });
  // A mirror the page's policy does not allow is refused before any request (no CSP violation).
  const n = requests.length;
  await planner.open(url('hf_endpoint=https%3A%2F%2Fhf-mirror.com'));
  await page.getByTestId('config').locator('summary').click();
  await page.getByTestId('hf-id').fill('Qwen/Qwen3-8B');
  await page.getByTestId('hf-fetch').click();
  const blocked = page.getByTestId('hf-blocked');
  await blocked.waitFor({ timeout: 15_000 });
  check(/huggingface\.co/.test(await blocked.textContent()), `the policy message: ${await blocked.textContent()}`);
  check(!requests.slice(n).some((u) => u.startsWith('https://hf-mirror.com')), 'the blocked mirror was asked');
  // Chromium logs the 404 and the refused connection themselves; the page logs nothing.
  problems = problems.filter((p) => !/Failed to load resource/.test(p));
});

test('after one visit it reloads and works offline (service worker)', async () => {
  await fresh();
  await planner.open(url());
  await until(() => planner.offlineReady(), 'no service worker took control');
  await server.close();
  await context.setOffline(true);
  await planner.reload();
  const peak = await planner.peakText();
  await planner.slideBatchTo(700);
  await until(async () => (await planner.peakText()) !== peak, 'the peak did not change offline');
  // The panels' chunk was never fetched by the page: the worker cached it in the background.
  await planner.openPanels();
  check((await planner.perGpu.count()) > 0 || (await planner.mode.count()) > 0, 'the panels did not open offline');
  await context.setOffline(false);
  server = await serve(DIST);
});

// --- content policy, embedding, upgrades, long sessions ----------------------------------------

const sha = (algo, bytes) => `${algo}-${createHash(algo).update(bytes).digest('base64')}`;

test('the Content-Security-Policy lets only the page\'s own code run, and its files carry integrity', async () => {
  const html = readFileSync(`${DIST}/index.html`, 'utf8');
  const csp = /<meta http-equiv="Content-Security-Policy" content="([^"]*)"/.exec(html)?.[1];
  check(csp, 'index.html has no Content-Security-Policy meta');
  check(html.indexOf('Content-Security-Policy') < html.indexOf('<script'), 'the policy comes after a script it should cover');
  const directives = Object.fromEntries(csp.split(';').map((d) => d.trim().split(/\s+/)).map(([k, ...v]) => [k, v]));
  const want = { 'default-src': ["'self'"], 'style-src': ["'self'"], 'style-src-attr': ["'unsafe-inline'"], 'connect-src': ["'self'", 'https://huggingface.co'], 'object-src': ["'none'"], 'base-uri': ["'none'"] };
  for (const [k, v] of Object.entries(want)) check(JSON.stringify(directives[k]) === JSON.stringify(v), `${k} is ${directives[k]?.join(' ')}, not ${v.join(' ')}`);
  check(!/'unsafe-(inline|eval|hashes)'|\*|data:|blob:/.test(csp.replace("style-src-attr 'unsafe-inline'", '')), `the policy lets in more than the origin: ${csp}`);
  const inline = [...html.matchAll(/<script\b(?![^>]*\bsrc=)[^>]*>([\s\S]*?)<\/script>/g)].map((m) => `'${sha('sha256', m[1])}'`);
  const scriptSrc = directives['script-src'] ?? [];
  check(JSON.stringify([...scriptSrc].sort()) === JSON.stringify(["'self'", "'wasm-unsafe-eval'", ...inline].sort()), `script-src ${scriptSrc.join(' ')} is not the origin, the wasm and the ${inline.length} inline scripts' hashes`);
  const tags = [...html.matchAll(/<link\b[^>]*\brel="(?:stylesheet|modulepreload)"[^>]*>/g)].map((m) => m[0]);
  check(tags.length >= 3, `expected the stylesheet and two module preloads: ${tags.join(' ')}`);
  for (const tag of tags) {
    const file = /href="\.\/([^"]+)"/.exec(tag)[1];
    check(/integrity="([^"]+)"/.exec(tag)?.[1] === sha('sha384', readFileSync(`${DIST}/${file}`)), `${file}: no integrity, or not the file's`);
    check(tag.includes('crossorigin="anonymous"'), `${file}: integrity without crossorigin`);
  }
  // The browser enforces it: the page runs clean (the run fails on any violation), and code or
  // style injected into it is refused.
  await fresh();
  await planner.open(url());
  await planner.idle();
  const injected = await planner.page.evaluate(async () => {
    const seen = [];
    addEventListener('securitypolicyviolation', (e) => seen.push(e.violatedDirective));
    const s = document.createElement('script');
    s.textContent = 'window.injected = true';
    document.head.append(s);
    const st = document.createElement('style');
    st.textContent = 'body { color: rgb(1, 2, 3) }';
    document.head.append(st);
    const color = getComputedStyle(document.body).color;
    st.remove();
    await new Promise((r) => setTimeout(r, 200));
    return { ran: window.injected === true, styled: color === 'rgb(1, 2, 3)', seen };
  });
  check(!injected.ran && !injected.styled, `injected code ran or style applied: ${JSON.stringify(injected)}`);
  check(injected.seen.includes('script-src-elem') && injected.seen.includes('style-src-elem'), `the refusals were not reported: ${injected.seen.join(', ')}`);
  problems = problems.filter((p) => !/CSP violation|Content Security Policy/.test(p));
  // A stylesheet whose bytes are not the ones sealed is refused.
  const dir = mkdtempSync(join(tmpdir(), 'tampered-'));
  for (const f of readdirSync(DIST)) copyFileSync(join(DIST, f), join(dir, f));
  const css = readdirSync(dir).find((f) => f.endsWith('.css'));
  writeFileSync(join(dir, css), `${readFileSync(join(dir, css), 'utf8')}\nbody { color: red }\n`);
  const tampered = await serve(dir);
  await fresh({ serviceWorkers: 'block' });
  await planner.open(tampered.url);
  const sheets = await planner.page.evaluate(() => [...document.styleSheets].filter((s) => s.href).length);
  await tampered.close();
  rmSync(dir, { recursive: true });
  check(sheets === 0, 'a stylesheet that does not match its integrity was applied');
  check(problems.some((p) => /integrity/.test(p)), `no integrity error reported: ${problems.join(' | ')}`);
  problems = [];
});

test('the embed card works in a sandboxed frame on another origin, which cannot reach its storage', async () => {
  await fresh();
  const src = url('embed=1&model=gpt2&batch=8&gpu=t4');
  const host = await servePage(
    `<!doctype html><title>Another site</title><script>window.messages = []; addEventListener('message', (e) => messages.push(String(e.data)));</script>` +
      `<iframe id="planner" sandbox="allow-scripts" src="${src}" width="720" height="640" title="VRAM Planner"></iframe>`,
  );
  try {
    await planner.page.goto(host.url);
    check(new URL(host.url).origin !== server.origin, 'the embedding page is on the planner\'s origin');
    const card = new PlannerPage(planner.page.frameLocator('#planner'));
    await card.ready();
    check(await card.embedCard.isVisible(), 'no embed card in the sandboxed frame');
    const peak = await card.peakText();
    await card.slideBatchTo(500);
    await until(async () => (await card.peakText()) !== peak, 'the card\'s slider does not change the peak in the frame');
    const frame = planner.page.frames().find((f) => f.url().includes('embed=1'));
    const inside = await frame.evaluate(() => {
      let storage = 'readable';
      try {
        void localStorage.length;
      } catch (e) {
        storage = e.name;
      }
      return { origin: self.origin, storage };
    });
    check(inside.origin === 'null' && inside.storage === 'SecurityError', `the frame is not sandboxed as asked: ${JSON.stringify(inside)}`);
    const outside = await planner.page.evaluate(() => {
      const f = document.getElementById('planner');
      const reach = (get) => {
        try {
          return String(get());
        } catch (e) {
          return e.name;
        }
      };
      return { doc: f.contentDocument === null, storage: reach(() => f.contentWindow.localStorage.length), name: reach(() => f.contentWindow.name), messages: window.messages };
    });
    console.log(`    in the frame: origin ${inside.origin}, storage ${inside.storage}; from the embedding page: document ${outside.doc ? 'null' : 'READABLE'}, storage ${outside.storage}, messages ${outside.messages.length}`);
    check(outside.doc && outside.storage === 'SecurityError', `the embedding page reaches into the planner: ${JSON.stringify(outside)}`);
    check(outside.messages.length === 0, `the planner posted to the embedding page: ${outside.messages.join(' | ')}`);
  } finally {
    await host.close();
  }
});

/** The file names (no path, no query) a tab has fetched since its page loaded, and its page's
 * own references. */
const loadedFiles = (page) =>
  page.evaluate(() => [
    ...new Set([
      ...performance.getEntriesByType('resource').map((e) => e.name),
      ...[...document.querySelectorAll('link[href], script[src]')].map((e) => e.href || e.src),
      ...[...document.scripts].flatMap((s) => [...s.textContent.matchAll(/\.\/([\w.-]+\.(?:js|wasm))/g)].map((m) => m[1])),
    ].map((u) => u.split('/').pop().split('?')[0])),
  ]);

/** Every lazily loaded chunk at work in `tab`: another model, the charts, the panels. */
async function useEveryChunk(tab) {
  const peak = await tab.peakText();
  await tab.pick(tab.model, 'gpt2');
  await until(async () => (await tab.peakText()) !== peak, 'picking GPT-2 did not change the peak');
  await tab.chart.scrollIntoViewIfNeeded();
  await until(() => tab.canvas.evaluate((c) => c.width > 0 && c.getContext('2d').getImageData(0, 0, c.width, c.height).data.some((v) => v !== 0)), 'the chart was not drawn');
  await tab.openPanels();
  await tab.perGpu.waitFor({ timeout: 15_000 });
  await tab.idle();
}

test('a deployed page upgrades safely: an open tab keeps its build, online and offline, and is told of the new one', async () => {
  // Build 2: every hashed file differs from dist/'s (tests/e2e/variant.mjs).
  const dist2 = mkdtempSync(join(tmpdir(), 'vram-planner-deploy-'));
  const renamed = variant(DIST, dist2, 'the next deploy');
  const old = new Set(renamed.keys());
  const next = new Set(renamed.values());
  const lazy = [...old].filter((f) => /^(split|chunk)_.*\.wasm$/.test(f));
  check(lazy.length > 0 && [...old].every((f) => !next.has(f)), 'build 2 does not rename every hashed file');
  const plan = 'model=resnet50&batch=48&gpu=l4';
  const port = server.port;
  const cachedFiles = (page) =>
    page.evaluate(async () => {
      const out = [];
      for (const k of await caches.keys()) for (const r of await (await caches.open(k)).keys()) out.push(r.url.split('/').pop());
      return out;
    });
  const tab = async () => {
    const page = await context.newPage();
    watch(page);
    return new PlannerPage(page);
  };
  const onBuild = async (t, files, what) => {
    const seen = (await loadedFiles(t.page)).filter((f) => old.has(f) || next.has(f));
    check(seen.length > 0 && seen.every((f) => files.has(f)), `${what}: a mix of builds: ${seen.join(', ')}`);
  };
  const fetchable = async (t, what) => {
    const got = await t.page.evaluate((names) => Promise.all(names.map(async (n) => {
      const r = await fetch(`./${n}`);
      return [n, r.status, (await r.arrayBuffer()).byteLength];
    })), lazy);
    const bad = got.filter(([n, status, size]) => status !== 200 || size !== readFileSync(join(DIST, n)).length);
    check(bad.length === 0, `${what}: build 1's chunks cannot all be fetched: ${JSON.stringify(bad)}`);
  };
  try {
    // Two tabs on build 1, once the worker has cached it (its chunks too, in the background).
    await fresh();
    await planner.open(url(plan));
    await until(() => planner.offlineReady(), 'no service worker took control', 20_000);
    await until(async () => { const c = await cachedFiles(planner.page); return lazy.every((f) => c.includes(f)); }, 'the worker did not cache build 1\'s chunks', 20_000);
    const second = await tab();
    await second.open(url(plan));
    await onBuild(planner, old, 'tab 1');
    // The deploy; tab 1 comes back into view, the worker looks and finds build 2.
    server.deploy(dist2);
    await planner.page.evaluate(() => document.dispatchEvent(new Event('visibilitychange')));
    for (const [t, what] of [[planner, 'tab 1'], [second, 'tab 2']]) {
      await until(() => t.page.getByTestId('new-version').isVisible(), `${what} on build 1 was not told of build 2`, 20_000);
    }
    check(/^A new version is ready\. Reload$/.test((await planner.page.getByTestId('new-version').textContent()).trim()), await planner.page.getByTestId('new-version').textContent());
    // A new tab gets build 2, whole.
    const third = await tab();
    await third.open(url(plan));
    await third.idle();
    await onBuild(third, next, 'a tab opened after the deploy');
    check((await third.page.getByTestId('new-version').count()) === 0, 'a tab on the newest build is told of a new version');
    await third.page.close();
    // Online, build 1's tab still fetches each of its chunks, which the server no longer has.
    await fetchable(planner, 'online');
    await useEveryChunk(planner);
    await onBuild(planner, old, 'tab 1 after the deploy');
    // Offline too, and a reload offline shows build 2, whole, with the plan.
    await server.close();
    await context.setOffline(true);
    await fetchable(second, 'offline');
    await useEveryChunk(second);
    const query = JSON.stringify(await second.query());
    await second.reload();
    await second.idle();
    await onBuild(second, next, 'tab 2 reloaded offline');
    check(JSON.stringify(await second.query()) === query && (await second.model.inputValue()) === 'gpt2', `the reload lost the plan: ${JSON.stringify(await second.query())}`);
    await context.setOffline(false);
    server = await serve(dist2, '/vram-planner/', port);
    // The notice's link reloads tab 1 onto build 2 with its plan (GPT-2, picked above), in Chinese as well.
    await planner.pick(planner.lang, 'zh');
    await until(async () => (await planner.page.getByTestId('reload').textContent()) === '重新加载', 'the notice is not in Chinese');
    await until(async () => (await planner.query()).model === 'gpt2', 'the address does not hold the plan');
    await Promise.all([planner.page.waitForEvent('load'), planner.page.getByTestId('reload').click()]);
    await planner.ready();
    await planner.idle();
    check((await planner.query()).model === 'gpt2' && (await planner.model.inputValue()) === 'gpt2', 'the reload lost the plan');
    check((await planner.page.getByTestId('new-version').count()) === 0, 'the notice stays on the newest build');
    await onBuild(planner, next, 'tab 1 reloaded');
    // No tab uses build 1 any more: the worker drops it at its next look.
    await until(async () => {
      await planner.page.evaluate(() => document.dispatchEvent(new Event('visibilitychange')));
      const c = await cachedFiles(planner.page);
      return !c.some((f) => old.has(f)) && [...next].every((f) => c.includes(f));
    }, 'build 1 is still cached with no tab on it, or build 2 is not whole', 20_000);
  } finally {
    await context.setOffline(false);
    await server.close();
    server = await serve(DIST, '/vram-planner/', port);
    rmSync(dist2, { recursive: true });
  }
});

test('a long session: 10,000 slider moves and 1,000 plan changes leave memory, nodes and listeners flat', async () => {
  await fresh({ serviceWorkers: 'block' });
  // The wasm's memory, read-only: Trunk's start script hands the module's exports to this event.
  await planner.page.addInitScript(() => addEventListener('TrunkApplicationStarted', (e) => Object.defineProperty(window, 'wasmMemory', { value: e.detail.wasm.memory })));
  const start = 'model=resnet50&batch=32&gpu=a100-80';
  await planner.open(url(start));
  await planner.idle();
  const cdp = await context.newCDPSession(planner.page);
  // The page's element count once it has settled: idle (no background work) and the same count
  // on two readings half a second apart (a list built when idle may still be on its way).
  const settled = async () => {
    let last = -1;
    for (let i = 0; i < 20; i++) {
      await planner.idle(60_000);
      await planner.page.waitForTimeout(500);
      const now = await planner.page.evaluate(() => document.getElementsByTagName('*').length);
      if (now === last) return now;
      last = now;
    }
    throw new Error(`the page's element count never settled (last ${last})`);
  };
  const measure = async () => {
    const elements = await settled();
    for (let i = 0; i < 3; i++) await cdp.send('HeapProfiler.collectGarbage');
    const { usedSize } = await cdp.send('Runtime.getHeapUsage');
    // Nodes that script still holds but the document no longer has: what a leak of the page's
    // views leaves (the heap snapshot marks them detached; taking it collects garbage fully).
    const chunks = [];
    const keep = (e) => chunks.push(e.chunk);
    cdp.on('HeapProfiler.addHeapSnapshotChunk', keep);
    await cdp.send('HeapProfiler.takeHeapSnapshot', { reportProgress: false });
    cdp.off('HeapProfiler.addHeapSnapshotChunk', keep);
    const snap = JSON.parse(chunks.join(''));
    const fields = snap.snapshot.meta.node_fields;
    const at = fields.indexOf('detachedness');
    let detached = 0;
    for (let i = at; i < snap.nodes.length; i += fields.length) if (snap.nodes[i] === 2) detached++;
    const dom = await cdp.send('Memory.getDOMCounters');
    const wasm = await planner.page.evaluate(() => window.wasmMemory.buffer.byteLength);
    return { heap: usedSize, wasm, elements, nodes: dom.nodes, detached, listeners: dom.jsEventListeners, documents: dom.documents };
  };
  // Page-side batches (a round trip per input through Playwright would take ~10× longer): each
  // plan change is followed by ten slider moves as a drag sends them, one animation frame after
  // every second move, so the page handles each move's input and draws as a user's drag makes it.
  // Every change sets a value and fires the events a user's pick fires (input, change); the panels
  // open and close with a click on their summary. It ends on the plan it started from, panels closed.
  const session = (changes) =>
    planner.page.evaluate(async (changes) => {
      const frame = () => new Promise((r) => requestAnimationFrame(() => r()));
      const q = (s) => document.querySelector(s);
      const select = (testid) => q(`select[data-testid="${testid}"]`) ?? q(`[data-testid="${testid}"] select`);
      const pick = (testid, value) => {
        const el = select(testid);
        el.value = value;
        el.dispatchEvent(new Event('input', { bubbles: true }));
        el.dispatchEvent(new Event('change', { bubbles: true }));
      };
      const panels = async (open) => {
        const details = q('[data-testid="more-panels"]');
        if (details.open !== open) details.querySelector('summary').click();
        for (let i = 0; open && !select('mode') && i < 600; i++) await frame();
        if (open && !select('mode')) throw new Error('the panels did not open');
      };
      const models = ['gpt2', 'vit_b_16', 'bert-base', 'resnet18', 'lstm-lm', 'resnet50'];
      const gpus = ['t4', 'h100-80', 'rtx4090', 'a100-80'];
      const steps = [
        (n) => pick('model', models[n % models.length]),
        (n) => pick('gpu', gpus[n % gpus.length]),
        () => panels(true),
        () => pick('mode', 'infer'),
        (n) => pick('model', models[(n + 3) % models.length]),
        () => pick('mode', 'finetune'),
        () => pick('mode', 'train'),
        () => panels(false),
      ];
      let moves = 0;
      for (let i = 0; i < changes; i++) {
        await steps[i % steps.length](Math.floor(i / steps.length));
        await frame();
        for (let m = 0; m < 10; m++, moves++) {
          const slider = q('#batch-range');
          slider.value = String((moves * 37) % 1200);
          slider.dispatchEvent(new Event('input', { bubbles: true }));
          if (m % 2) await frame();
        }
        q('#batch-range').dispatchEvent(new Event('change', { bubbles: true }));
      }
      await panels(true);
      pick('mode', 'train');
      await panels(false);
      pick('model', 'resnet50');
      pick('gpu', 'a100-80');
      await frame();
      const box = q('[data-testid="batch"] input[type=number]');
      box.value = '32';
      box.dispatchEvent(new Event('input', { bubbles: true }));
      return moves;
    }, changes);
  // The session repeats itself every 480 changes: its plans every 96 (12 rounds of the 8 steps,
  // every model with every GPU in each mode), the batches the slider leaves every 120. One such
  // period first fills what a session keeps once: the model chunks, compiled code, the page's
  // model cache, and the wasm memory's high-water mark, which is set by the largest transient
  // simulation of a (model, batch) pair — memory given back to the allocator stays in the
  // module's memory, which never shrinks. What grows after it is what the long session adds.
  await session(480);
  const before = await measure();
  const t0 = Date.now();
  const moves = await session(1000);
  const seconds = (Date.now() - t0) / 1000;
  const after = await measure();
  check((await planner.query()).model === 'resnet50' && (await planner.batchValue()) === '32', 'the session did not end on the plan it started from');
  console.log(`    ${moves} slider moves and 1000 plan changes in ${seconds.toFixed(1)} s`);
  console.log(`    JS heap ${mib(before.heap)} → ${mib(after.heap)}; wasm memory ${mib(before.wasm)} → ${mib(after.wasm)}; elements in the document ${before.elements} → ${after.elements}; DOM nodes ${before.nodes} → ${after.nodes} (detached, held by script: ${before.detached} → ${after.detached}); listeners ${before.listeners} → ${after.listeners}; documents ${before.documents} → ${after.documents}`);
  check(moves === 10_000, `${moves} slider moves`);
  // Tolerances: a leak of one node or listener per plan change would add 1,000, of 100 bytes per
  // slider move 1 MB. Nodes and listeners may differ by the few a pending timer holds; the JS heap
  // by what V8 keeps of compiled code and feedback (measured within 0.1 MiB). The wasm memory
  // never shrinks, and the page caches up to 64 simulated models (CACHE_MODELS in
  // src/ui/logic/workbench.rs) besides the allocator's free lists: 2-3 MiB of growth here, while
  // a leak of one simulated model per plan change would add tens of MiB; 8 MiB lies between.
  check(after.nodes - before.nodes <= 20, `DOM nodes grew from ${before.nodes} to ${after.nodes}`);
  check(after.detached - before.detached <= 20, `detached nodes held by script grew from ${before.detached} to ${after.detached}`);
  check(after.listeners - before.listeners <= 10, `listeners grew from ${before.listeners} to ${after.listeners}`);
  check(after.documents === before.documents, `documents went from ${before.documents} to ${after.documents}`);
  check(after.heap - before.heap <= 1 * 2 ** 20, `the JS heap grew from ${mib(before.heap)} to ${mib(after.heap)}`);
  check(after.wasm - before.wasm <= 8 * 2 ** 20, `the wasm memory grew from ${mib(before.wasm)} to ${mib(after.wasm)}`);
});

const only = process.env.E2E_ONLY;
const failed = await run({
  each: async (fn) => {
    problems = [];
    await fn();
    check(problems.length === 0, problems.join('\n'));
  },
  only,
});
await context?.close();
await browser.close();
await server.close();
process.exit(failed ? 1 : 0);
