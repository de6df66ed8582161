// Page object for the planner: every element is found by its data-testid (see README.md).
export const CHARTS = ['chart-batch', 'chart-length', 'chart-checkpoint', 'chart-timeline', 'chart-layers'];

export class PlannerPage {
  /** @param {import('playwright-core').Page} page */
  constructor(page) {
    this.page = page;
    this.model = page.getByTestId('model');
    this.batch = page.getByTestId('batch');
    this.batchSlider = this.batch.locator('input[type=range]');
    this.batchBox = this.batch.locator('input[type=number]');
    this.resolution = page.getByTestId('resolution');
    this.seqLen = page.getByTestId('seq-len');
    this.precision = page.getByTestId('precision');
    this.optimizer = page.getByTestId('optimizer');
    this.checkpointing = page.getByTestId('checkpointing');
    this.accumulation = page.getByTestId('accumulation');
    this.attention = page.getByTestId('attention');
    this.causalMask = page.getByTestId('causal-mask');
    this.gpu = page.getByTestId('gpu');
    this.lang = page.getByTestId('lang');
    this.units = page.getByTestId('units');
    this.peak = page.getByTestId('peak');
    this.reserved = page.getByTestId('reserved');
    this.deviceTotal = page.getByTestId('device-total');
    this.verdict = page.getByTestId('verdict');
    this.maxBatch = page.getByTestId('max-batch');
    this.breakdown = page.getByTestId('breakdown');
    this.suggestions = page.getByTestId('suggestions');
    this.copyLink = page.getByTestId('copy-link');
    this.embed = page.getByTestId('embed');
    this.embedCode = page.getByTestId('embed-code');
    this.embedCard = page.getByTestId('embed-card');
    this.notice = page.getByTestId('notice');
    this.error = page.getByTestId('error');
    this.chart = page.getByTestId('chart-batch');
    this.canvas = this.chart.locator('canvas');
    // The collapsed "more panels" section: mode, parallelism, comparison.
    this.morePanels = page.getByTestId('more-panels');
    this.mode = page.getByTestId('mode');
    this.perGpu = page.getByTestId('per-gpu');
    this.compare = page.getByTestId('compare');
  }

  /** Opens the "more panels" section and waits until its panels are mounted. */
  async openPanels() {
    await this.morePanels.locator('summary').click();
    await this.mode.waitFor({ timeout: 15_000 });
  }

  /** The visible texts of a select's options. */
  optionTexts(locator) {
    return locator.locator('option').allTextContents();
  }

  async open(url) {
    await this.page.goto(url);
    await this.ready();
  }

  async reload() {
    await this.page.reload();
    await this.ready();
  }

  /** Waits until the app has mounted and shows an estimate. */
  async ready() {
    await this.peak.filter({ hasText: /\d/ }).waitFor({ timeout: 15_000 });
  }

  /** Waits until the background work (sweeps, suggestions, exact estimate) is done. */
  async idle(timeout = 30_000) {
    await this.page.locator('[data-busy="false"]').waitFor({ timeout });
  }

  peakText() {
    return this.peak.textContent();
  }

  text(locator) {
    return locator.textContent();
  }

  /** Moves the batch slider to position `pos` (batch = 2^(pos/100)). */
  async slideBatchTo(pos) {
    await this.batchSlider.fill(String(pos));
  }

  batchValue() {
    return this.batchBox.inputValue();
  }

  /** The input-size slider (resolution or sequence length) and its number box. */
  sizeSlider() {
    return this.page.locator('#size-range');
  }

  async slideSizeTo(index) {
    await this.sizeSlider().fill(String(index));
  }

  async pick(locator, value) {
    const select = (await locator.evaluate((el) => el.tagName)) === 'SELECT' ? locator : locator.locator('select').first();
    await select.selectOption(value);
  }

  async setGpu(id) {
    await this.pick(this.gpu, id);
  }

  /** A chart's canvas pixels, to tell whether it was redrawn. Charts out of view are not
   * redrawn, so it is scrolled into view first and given a few frames to draw. */
  async chartPixels(testid = 'chart-batch') {
    const canvas = this.page.getByTestId(testid).locator('canvas');
    await canvas.scrollIntoViewIfNeeded();
    await this.page.waitForTimeout(120);
    return canvas.evaluate((c) => c.toDataURL('image/png'));
  }

  /** Every chart's pixels. */
  async allChartPixels() {
    const out = {};
    for (const id of CHARTS) out[id] = await this.chartPixels(id);
    return out;
  }

  /** The charts' canvases: CSS width and backing-store width (each scrolled into view first). */
  async chartSizes() {
    for (const id of CHARTS) {
      await this.page.getByTestId(id).locator('canvas').scrollIntoViewIfNeeded();
      await this.page.waitForTimeout(100);
    }
    return this.page.evaluate((ids) => ids.map((id) => {
      const c = document.querySelector(`[data-testid="${id}"] canvas`);
      return { id, width: c?.width ?? 0, cssWidth: c?.clientWidth ?? 0 };
    }), CHARTS);
  }

  /** Whether a service worker controls the page (offline use is set up); poll it. */
  offlineReady() {
    return this.page.evaluate(() => navigator.serviceWorker?.controller != null);
  }

  /** The address bar's query string as a map. */
  query() {
    return this.page.evaluate(() => Object.fromEntries(new URLSearchParams(location.search)));
  }
}
