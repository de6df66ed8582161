// Page object for the planner: every element is found by its data-testid (see README.md).
export class PlannerPage {
  /** @param {import('playwright-core').Page} page */
  constructor(page) {
    this.page = page;
    this.model = page.getByTestId('model');
    this.batch = page.getByTestId('batch');
    this.batchSlider = this.batch.locator('input[type=range]');
    this.batchBox = this.batch.locator('input[type=number]');
    this.peak = page.getByTestId('peak');
    this.error = page.getByTestId('error');
    this.chart = page.getByTestId('chart-batch');
    this.canvas = this.chart.locator('canvas');
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
    await this.peak.filter({ hasText: 'iB' }).waitFor({ timeout: 15_000 });
  }

  peakText() {
    return this.peak.textContent();
  }

  /** Moves the batch slider to position `pos` (batch = 2^(pos/100)). */
  async slideBatchTo(pos) {
    await this.batchSlider.fill(String(pos));
  }

  batchValue() {
    return this.batchBox.inputValue();
  }

  /** The chart's pixels, to tell whether it was redrawn. */
  chartPixels() {
    return this.canvas.evaluate((c) => c.toDataURL('image/png'));
  }

  /** Whether a service worker controls the page (offline use is set up); poll it. */
  offlineReady() {
    return this.page.evaluate(() => navigator.serviceWorker?.controller != null);
  }
}
