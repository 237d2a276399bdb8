import { execFileSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import puppeteer, { type Browser, type Page } from 'puppeteer-core';

const REPO = fileURLToPath(new URL('../../../', import.meta.url));
export const CHROMIUM = '/usr/bin/chromium';

/**
 * Debian's chromium, headless, driven by puppeteer-core (installed by scripts/ensure-browser.sh
 * when missing, as ensure-host-deps.sh does QEMU). No sandbox: the tests run as root.
 */
export async function launchBrowser(): Promise<Browser> {
  execFileSync('bash', [join(REPO, 'scripts', 'ensure-browser.sh')], { stdio: 'inherit' });
  return puppeteer.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-dev-shm-usage',
      '--disable-background-networking',
      '--disable-extensions',
      '--disable-sync',
      '--no-first-run',
      '--no-default-browser-check',
      '--mute-audio',
      '--window-size=1366,900',
    ],
    defaultViewport: { width: 1366, height: 900 },
  });
}

/** Where the screenshots go: docs/dashboard/ (kept in the repository, shown in docs/dashboard.md). */
export const SHOTS = join(REPO, 'docs', 'dashboard');

export async function screenshot(page: Page, name: string): Promise<void> {
  mkdirSync(SHOTS, { recursive: true });
  await page.screenshot({ path: join(SHOTS, `${name}.png`) as `${string}.png` });
}

/** Waits until `fn` (run in the page) is true. */
export async function until(page: Page, fn: string, timeout = 15_000): Promise<void> {
  await page.waitForFunction(fn, { timeout, polling: 100 });
}

/** Opens the dashboard at `url` in a new page of `browser` and logs in with `token`. */
export async function loggedIn(browser: Browser, url: string, token: string): Promise<Page> {
  const page = await browser.newPage();
  await page.goto(url);
  await page.waitForSelector('[data-test=login]');
  await page.type('[data-test=token]', token);
  await page.click('[data-test=login-submit]');
  return page;
}
