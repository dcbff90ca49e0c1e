// Debian's Chromium, headless, as both drivers start it (notebooks.mjs, pages.mjs).
import { chromium } from 'playwright-core';

export function launch() {
  return chromium.launch({
    executablePath: '/usr/bin/chromium',
    headless: true,
    args: [...(process.getuid?.() === 0 ? ['--no-sandbox'] : []), '--disable-dev-shm-usage', '--disable-gpu'],
  });
}
