// Opens printed pages (the card game, the exit quiz: `hdlib handouts`) in headless Chromium for
// tests/test_browser.py: what the page shows (its text, its size, console messages and page errors),
// a screenshot of the whole page, and the page printed to PDF on A4 (how many sheets it takes).
//
//   node pages.mjs CONFIG.json
//   CONFIG: {"out" (folder for report.json and the screenshots), "pages": [absolute path, ...]}

import { readFileSync, writeFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import { launch } from './launch.mjs';

const config = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const report = { pages: {}, error: null };

async function main() {
  const browser = await launch();
  try {
    for (const path of config.pages) {
      const entry = { messages: [], text: '', width: 0, height: 0, screenshot: null, pdf_pages: 0 };
      report.pages[basename(path)] = entry;
      const page = await browser.newPage({ viewport: { width: 900, height: 1200 } });
      page.on('console', (m) => entry.messages.push(`${m.type()}: ${m.text()}`));
      page.on('pageerror', (e) => entry.messages.push(`pageerror: ${e.message}`));
      await page.goto(`file://${path}`, { waitUntil: 'load' });
      entry.text = await page.evaluate(() => document.body.innerText);
      const box = await page.evaluate(() => [document.body.scrollWidth, document.body.scrollHeight]);
      [entry.width, entry.height] = box;
      entry.screenshot = join(config.out, basename(path).replace(/\.html$/, '.png'));
      await page.screenshot({ path: entry.screenshot, fullPage: true });
      const pdf = await page.pdf({ format: 'A4', printBackground: true });
      // Each sheet of a PDF is one "/Type /Page" object (the tree's root is "/Type /Pages").
      entry.pdf_pages = (pdf.toString('latin1').match(/\/Type\s*\/Page[^s]/g) || []).length;
      await page.close();
    }
  } finally {
    await browser.close();
  }
}

main()
  .catch((e) => { report.error = String(e.stack || e); })
  .finally(() => writeFileSync(join(config.out, 'report.json'), JSON.stringify(report, null, 1)));
