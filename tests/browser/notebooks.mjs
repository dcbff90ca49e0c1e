// Drives JupyterLab in headless Chromium for tests/test_browser.py, which starts the server, reads
// the report this writes and asserts on it. Here: only what a person does (open a notebook, Run >
// Run All Cells, click, move sliders, show a widget again, reload the page) and what the page then
// shows (sizes, titles, legend colours, labels, figure data, console messages), measured cell by cell.
//
//   node notebooks.mjs CONFIG.json
//   CONFIG: {"url", "token", "out" (folder for report.json and screenshots), "notebooks": [file, ...],
//            "timeout_s" (a run of all cells, or one interaction)}

import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { launch } from './launch.mjs';

const config = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const TIMEOUT = config.timeout_s * 1000;
const VIEWPORT = { width: 1400, height: 1400 };  // a widget's cell fits: its pictures need no resizing
const report = { notebooks: {}, error: null };
const save = () => writeFileSync(join(config.out, 'report.json'), JSON.stringify(report, null, 1));

// Cells whose outputs show a widget: StepThrough in 03, StepMechanics in 05.
const WIDGET_CELL = '.jp-CodeCell:has(.widget-vbox)';

async function main() {
  const browser = await launch();
  try {
    for (const file of config.notebooks) {
      const entry = { messages: [], warnings: [], snapshots: {}, screenshots: [], seconds: null, timeline: [], error: null };
      report.notebooks[file] = entry;
      const started = Date.now();
      const page = await browser.newPage({ viewport: VIEWPORT });
      const nb = new Notebook(page, file, entry);
      try {
        await nb.open();
        await nb.runAll();
        await nb.snapshot('run');
        await nb.screenshot('run', { full: true });
        if (file.startsWith('03_')) await stepThrough(nb);
        if (file.startsWith('05_')) await stepMechanics(nb);
      } catch (error) {
        entry.error = String(error?.stack || error);
        await nb.screenshot('failure', { full: true }).catch(() => {});
      } finally {
        entry.seconds = (Date.now() - started) / 1000;
        await page.close();
        await shutDownKernels();
        save();
      }
    }
  } finally {
    await browser.close();
  }
}

// Notebook 03: the StepThrough widget, clicked as a person would: a tier, the step, the temperature,
// the budget. Then the predict game, the second widget, which opens in the game: its first drawing
// (snapshot 'game'), the slider, play and the settings tried as a student would (snapshot 'game
// tried'), then five rounds of a guess (accepted drafts, tier), reveal (snapshot 'reveal N') and next
// (snapshot 'next N'); after the fifth reveal the game is over.
async function stepThrough(nb) {
  const cell = nb.page.locator(WIDGET_CELL).first();
  const tier = () => cell.getByRole('checkbox', { name: 'model', exact: true }).click();
  await nb.act('tier', cell, 'answer', tier);
  await nb.act('step', cell, 'answer', () => nb.pressOnSlider(cell, 'step', 'End'));
  // To the slider's maximum: one step (0.05) often samples the greedy answer token for token, and
  // the figure would not change.
  await nb.act('temperature', cell, 'answer', () => nb.pressOnSlider(cell, 'temperature', 'End'));
  // The budget control: 4 draft tokens per step, a new generation with fewer drafts per step.
  await nb.act('budget', cell, 'tokens per step', () => cell.getByRole('button', { name: '4', exact: true }).click());

  const game = nb.page.locator(WIDGET_CELL).nth(1);
  await game.scrollIntoViewIfNeeded();
  await nb.snapshot('game');
  await nb.screenshot('game', { locator: game });
  // What a student tries on a step not revealed: the step slider to its end, play, a setting. Each is
  // disabled, so nothing changes (the snapshot after is compared with the one before).
  nb.phase = 'game tried';
  await nb.pressOnSlider(game, 'step', 'End');
  for (const button of await game.locator('.widget-play button').all()) await button.click({ force: true, timeout: 2000 }).catch(() => {});
  await game.getByRole('button', { name: '64', exact: true }).click({ force: true, timeout: 2000 }).catch(() => {});
  await game.getByRole('button', { name: 'next', exact: true }).click({ force: true, timeout: 2000 }).catch(() => {});
  await nb.page.waitForTimeout(1500);
  await nb.waitIdle();
  await nb.snapshot('game tried');
  const labelled = (kind, text) => game.locator(kind, { has: nb.page.locator('.widget-label', { hasText: text }) });
  nb.entry.rounds = [];
  for (let round = 0; round < 5; round++) {
    nb.phase = `guess ${round}`;
    const accepted = labelled('.widget-text', /^accepted$/).locator('input');
    await accepted.fill(String(round % 3));
    await accepted.press('Enter');
    await labelled('.widget-dropdown', /^tier$/).locator('select').selectOption({ index: round % 2 });
    await nb.waitIdle();
    await nb.act(`reveal ${round}`, game, 'step', () => game.getByRole('button', { name: 'reveal', exact: true }).click());
    nb.entry.rounds.push(await game.locator('.hd-score').innerText());
    if (round < 4) {
      await nb.act(`next ${round}`, game, 'step', () => game.getByRole('button', { name: 'next', exact: true }).click());
    }
  }
  await nb.addCell('view', 'again');  // the first widget shown a second time
  await nb.reload();
}

// Notebook 05: the StepMechanics widget, its slider, a second view, and labels that need escaping.
async function stepMechanics(nb) {
  const cell = nb.page.locator(WIDGET_CELL).last();
  await nb.act('step', cell, 'step ', () => nb.pressOnSlider(cell, 'step', 'ArrowLeft'));
  await nb.addCell('mechanics', 'again');
  await nb.addCell(
    [
      'from hdlib.tiers import Tier',
      'from hdlib.engine.tree import DraftTree',
      'quoted = DraftTree(root=0)',
      'quoted.add([1, 2], Tier.CONTEXT, 2, 2)',
      "viz.draft_tree_figure(quoted, {0: 'say', 1: '\"', 2: '<b>bold'}.get)",
    ].join('\n'),
    'labels',
  );
}

class Notebook {
  constructor(page, file, entry) {
    this.page = page;
    this.file = file;
    this.entry = entry;
    this.started = Date.now();
    this.phase = 'open';
    page.on('console', (msg) => {
      if (msg.type() === 'error') entry.messages.push({ phase: this.phase, kind: 'console', text: msg.text(), t: this.since() });
      if (msg.type() === 'warning') entry.warnings.push({ phase: this.phase, text: msg.text().slice(0, 1000) });
    });
    page.on('pageerror', (error) => {
      entry.messages.push({ phase: this.phase, kind: 'pageerror', text: String(error?.message ?? error), t: this.since() });
    });
    // The kernel's messages after the reload (type, comm, method, size, time): what the widget
    // manager asked and got while it restored the widgets, beside the console errors' times, for a
    // report that has to say why a widget came back missing (see pyproject.toml: jupyterlab_widgets).
    entry.kernelTraffic = [];
    page.on('websocket', (ws) => {
      if (!ws.url().includes('/channels')) return;
      const log = (direction) => (frame) => {
        if (this.phase !== 'reload' || entry.kernelTraffic.length >= 2000) return;
        const msg = kernelMessage(frame.payload);
        if (msg) entry.kernelTraffic.push({ t: this.since(), direction, ...msg });
      };
      ws.on('framesent', log('sent'));
      ws.on('framereceived', log('received'));
    });
  }

  // Seconds since the page was reloaded (or opened): the time of a console message or kernel message.
  since() {
    return (Date.now() - (this.reloadedAt ?? this.started)) / 1000;
  }

  // What the page is doing: console messages are filed under it, and the report times it.
  set phase(name) {
    this._phase = name;
    this.entry?.timeline.push([name, (Date.now() - this.started) / 1000]);
    save();  // a report as far as it got, should the test stop the driver
  }

  get phase() {
    return this._phase;
  }

  url() {
    // A workspace of its own per notebook, so no notebook reopens another's tabs (and kernels).
    const workspace = this.file.replace(/\W/g, '-');
    return `${config.url}/lab/workspaces/${workspace}/tree/${encodeURIComponent(this.file)}?token=${config.token}`;
  }

  async open() {
    await this.page.goto(this.url());
    await this.page.waitForSelector('.jp-Notebook .jp-Cell', { timeout: TIMEOUT });
    await this.waitIdle();
  }

  // Run > Run All Cells, once the notebook has the focus and its kernel is up. Right after the first
  // page load the menu item can do nothing (seen: every cell still "[ ]:"), so it is tried again
  // until the first code cell is queued or run.
  async runAll() {
    this.phase = 'run';
    const started = () => this.page.evaluate(firstCellStarted);
    for (let attempt = 0; attempt < 5 && !(await started()); attempt++) {
      await this.page.locator('.jp-Notebook .jp-Cell').first().locator('.jp-InputPrompt').click();
      await this.page.locator('.lm-MenuBar-itemLabel', { hasText: /^Run$/ }).click();
      await this.page.locator('.lm-Menu-itemLabel', { hasText: /^Run All Cells$/ }).click();
      await this.page.waitForFunction(firstCellStarted, null, { timeout: 2000 * (attempt + 1), polling: 100 }).catch(() => {});
    }
    if (!(await started())) throw new Error('Run > Run All Cells ran no cell');
    await this.waitIdle();
  }

  // The kernel is idle and no cell waits to run (Run All marks every queued cell [*], and a failing
  // cell unmarks the rest); then plotly's drawing settles.
  async waitIdle() {
    await this.page.waitForFunction(
      () => {
        const prompts = [...document.querySelectorAll('.jp-Notebook .jp-CodeCell .jp-InputPrompt')];
        const idle = document.querySelector('.jp-Notebook-ExecutionIndicator[data-status="idle"]');
        return idle && !prompts.some((p) => p.textContent.trim() === '[*]:');
      },
      null,
      { timeout: TIMEOUT, polling: 250 },
    );
    await this.page.waitForTimeout(300);  // the last outputs reach the page; figures are waited for in snapshot()
  }

  // Focus a slider's handle and press a key: what a keyboard user does; the widget sends the new
  // value when the key is released (continuous_update=False).
  async pressOnSlider(cell, description, key) {
    const slider = cell.locator('.widget-slider', { has: this.page.locator('.widget-label', { hasText: new RegExp(`^${description}$`) }) });
    await slider.locator('.noUi-handle').focus();
    await this.page.keyboard.press(key);
  }

  // One interaction with the widget in `cell`: do it, wait until its figure whose title starts with
  // `watch` changed (at most TIMEOUT: an unchanged figure fails the test) and the kernel is idle
  // again, then measure and take a picture of the widget.
  async act(name, cell, watch, action) {
    this.phase = name;
    const before = await cell.evaluate(figureHash, watch);
    await action();
    const deadline = Date.now() + TIMEOUT;
    while (Date.now() < deadline && (await cell.evaluate(figureHash, watch)) === before) {
      await this.page.waitForTimeout(250);
    }
    await this.waitIdle();
    await this.snapshot(name);
    await this.screenshot(name, { locator: cell });
  }

  // A new cell at the end with `source`, run with Ctrl+Enter (Shift+Enter would add an empty one).
  async addCell(source, name) {
    this.phase = name;
    const last = this.page.locator('.jp-Notebook .jp-Cell').last();
    await last.locator('.jp-InputPrompt').click();
    await this.page.keyboard.press('Escape');
    await this.page.keyboard.press('b');
    await this.page.keyboard.press('Enter');
    await this.page.keyboard.insertText(source);  // typed keys would auto-close brackets and quotes
    await this.page.keyboard.press('Control+Enter');
    await this.page.waitForFunction(() => {
      const prompt = [...document.querySelectorAll('.jp-Notebook .jp-CodeCell .jp-InputPrompt')].pop();
      return prompt && /\[(\*|\d+)\]:/.test(prompt.textContent);
    }, null, { timeout: TIMEOUT, polling: 100 });
    await this.waitIdle();
    await this.snapshot(name);
    await this.screenshot(name, { locator: this.page.locator('.jp-Notebook .jp-CodeCell').last() });
  }

  // Save, then reload the page with the kernel still running, as a person pressing F5 would.
  async reload() {
    this.phase = 'save';
    await this.page.keyboard.press('Control+s');
    await this.page.waitForFunction(() => !document.querySelector('.jp-mod-dirty'), null, { timeout: 60000, polling: 100 });
    this.phase = 'reload';
    const kernelBefore = await sessionKernels();
    const cellsBefore = await this.page.locator('.jp-Notebook .jp-CodeCell').count();
    this.reloadedAt = Date.now();
    await this.page.reload();
    // JupyterLab attaches a long notebook's cells a few at a time after the first: measuring before
    // the last is there would miss the widgets below (seen on a slow machine: the widget shown again,
    // the last cell, was not yet on the page).
    await this.page.waitForFunction((n) => document.querySelectorAll('.jp-Notebook .jp-CodeCell').length >= n,
      cellsBefore, { timeout: TIMEOUT, polling: 250 });
    await this.waitIdle();
    // The widget manager asks the kernel for every widget's state (each figure's data is in its
    // Output's state) and says "Loading widget..." until it has them.
    await this.page.waitForFunction(() => !document.body.innerText.includes('Loading widget...'), null,
      { timeout: TIMEOUT, polling: 250 });
    this.entry.kernels = { beforeReload: kernelBefore, afterReload: await sessionKernels() };
    await this.snapshot('reload');
    await this.screenshot('reload', { full: true });
  }

  // Everything the test asserts on, cell by cell (each scrolled into view, as JupyterLab lays out
  // only the cells on screen).
  async snapshot(name) {
    this.entry.timeline.push([`measure ${name}`, (Date.now() - this.started) / 1000]);
    const cells = await this.page.locator('.jp-Notebook .jp-CodeCell').count();
    const shot = { cells: [], news: false, widgetErrors: 0, cutLabels: [] };
    for (let i = 0; i < cells; i++) {
      const cell = this.page.locator('.jp-Notebook .jp-CodeCell').nth(i);
      await cell.scrollIntoViewIfNeeded();
      await this.page.waitForTimeout(50);
      // A plotly output (a widget's figures too: they are outputs of plotly's mime type) can take a
      // moment to draw: wait until each holds its plot, at most 15 s. Once drawn, JupyterLab's plotly
      // renderer keeps a PNG of it in the output, and a second view of the output (a widget shown
      // again) shows that picture until the mouse comes over it: the pointer is moved there, as a
      // person would, to get the plot itself.
      await cell.evaluate((node) => new Promise((resolve) => {
        const deadline = Date.now() + 15000;
        const check = () => {
          const outputs = [...node.querySelectorAll('.jp-RenderedPlotly')];  // the renderer's node: the plot's own
          for (const o of outputs) {
            const picture = o.querySelector('img.plot-img');
            if (picture && !o.querySelector('.main-svg')) picture.dispatchEvent(new MouseEvent('mouseenter'));
          }
          const drawn = outputs.every((o) => o.querySelector('.main-svg'));
          if (drawn || Date.now() > deadline) resolve(drawn);
          else setTimeout(check, 100);
        };
        check();
      }));
      shot.cells.push(await cell.evaluate(measureCell, i));
    }
    Object.assign(shot, await this.page.evaluate(() => ({
      news: [...document.querySelectorAll('.Toastify__toast')].some((t) => /news/i.test(t.textContent)),
      widgetErrors: (document.body.innerText.match(/Error displaying widget/g) || []).length,
      cutLabels: [...document.querySelectorAll('.widget-label')]
        .filter((l) => l.offsetParent && l.scrollWidth > l.clientWidth + 1)
        .map((l) => l.textContent),
    })));
    this.entry.snapshots[name] = shot;
  }

  // The whole notebook (`full`) or one cell (`locator`), in a window made as tall as the notebook,
  // so that nothing is cut at the window's edge; then the window is as before.
  async screenshot(name, { full = false, locator = null } = {}) {
    const path = join(config.out, `${this.file.replace('.ipynb', '')}-${name}.png`);
    if (locator && ((await locator.boundingBox())?.height ?? Infinity) < VIEWPORT.height - 100) {
      await locator.screenshot({ path });
      this.entry.screenshots.push(path);
      return;
    }
    const content = () => this.page.evaluate((top) => {
      const outer = document.querySelector('.jp-NotebookPanel .jp-WindowedPanel-outer');
      if (!outer) return 1000;
      if (top) outer.scrollTop = 0;
      return outer.scrollHeight;
    }, full);
    for (let i = 0; i < 2; i++) {  // cells come into view and take their real height: measure again
      await this.page.setViewportSize({ width: VIEWPORT.width, height: Math.min((await content()) + 200, 14000) });
      await this.page.waitForTimeout(400);
    }
    if (locator) await locator.screenshot({ path });
    else await this.page.screenshot({ path });
    await this.page.setViewportSize(VIEWPORT);
    await this.page.waitForTimeout(200);
    this.entry.screenshots.push(path);
  }
}

// Runs in the page: whether the first code cell was queued or run ("[*]:" or "[1]:", not "[ ]:").
function firstCellStarted() {
  const prompt = document.querySelector('.jp-Notebook .jp-CodeCell .jp-InputPrompt');
  return !!prompt && prompt.textContent.trim() !== '[ ]:' && prompt.textContent.trim() !== '';
}

// Runs in the page: a short fingerprint of the data drawn in the figure of `cell` whose title starts
// with `prefix`.
function figureHash(cell, prefix) {
  const plot = [...cell.querySelectorAll('.js-plotly-plot')].find((p) =>
    (p.querySelector('.gtitle')?.textContent ?? '').startsWith(prefix));
  if (!plot) return null;
  const text = JSON.stringify((plot.data || []).map((t) => [t.name, t.x, t.y, t.text, t.z]));
  let h = 5381;
  for (let i = 0; i < text.length; i++) h = ((h * 33) ^ text.charCodeAt(i)) >>> 0;
  return `${text.length}:${h}`;
}

// Runs in the page, on one code cell: its outputs, every plotly figure in them, and widget views.
function measureCell(cell, index) {
  const box = (el) => {
    const r = el.getBoundingClientRect();
    return { left: r.left, top: r.top, right: r.right, bottom: r.bottom, width: r.width, height: r.height };
  };
  const colour = (el) => {
    const style = getComputedStyle(el);
    return style.fill && style.fill !== 'none' ? style.fill : style.stroke;
  };
  // Points in a trace's array: a list, a typed array, or plotly's base64 form {dtype, bdata, shape}.
  const size = (v) => {
    if (v == null) return 0;
    if (typeof v.length === 'number') return v.length;
    if (typeof v.bdata === 'string') return v.shape ? String(v.shape).split(',').reduce((a, b) => a * Number(b), 1) : v.bdata.length ? 1 : 0;
    return 0;
  };
  const plots = [...cell.querySelectorAll('.js-plotly-plot')].map((plot) => {
    const svg = plot.querySelector('.main-svg');
    const title = plot.querySelector('.gtitle');
    const labels = [...plot.querySelectorAll('.scatterlayer .textpoint text')].map((t) => ({
      text: t.textContent,
      html: t.innerHTML,
      box: box(t),
    }));
    const drawn = JSON.stringify((plot.data || []).map((t) => [t.name, t.x, t.y, t.text, t.z]));
    let hash = 5381;
    for (let i = 0; i < drawn.length; i++) hash = ((hash * 33) ^ drawn.charCodeAt(i)) >>> 0;
    return {
      hash: `${drawn.length}:${hash}`,
      box: box(plot),
      svg: svg ? box(svg) : null,
      title: title?.textContent ?? null,
      titleBox: title ? box(title) : null,
      inWidget: !!plot.closest('.widget-vbox'),
      markers: plot.querySelectorAll('.scatterlayer .points path.point').length,
      labels,
      legend: [...plot.querySelectorAll('.legend .traces')].map((entry) => {
        const swatch = [...entry.querySelectorAll('.legendpoints path, .legendpoints text')].find(
          (el) => colour(el) && colour(el) !== 'none' && getComputedStyle(el).fillOpacity !== '0',
        );
        return { name: entry.querySelector('.legendtext')?.textContent ?? '', colour: swatch ? colour(swatch) : null };
      }),
      data: (plot.data || []).map((t) => ({
        name: t.name ?? null,
        type: t.type ?? 'scatter',
        points: [t.x, t.y, t.z, t.values, t.cells?.values].map(size).find((n) => n > 0) ?? 0,
      })),
    };
  });
  const outputs = [...cell.querySelectorAll('.jp-OutputArea-output')];
  // Every control a widget shows, by its label (a button by its text, play's buttons as 'play'), and
  // whether it is disabled: what a student can still click.
  // (not plotly's own toolbar, which draws nothing of a step: zoom, pan, download)
  const controls = [...cell.querySelectorAll('.widget-vbox :is(input, select, textarea, button, .noUi-target)')]
    .filter((el) => el.offsetParent && !el.closest('.modebar'))
    .map((el) => {
      const around = el.closest('.widget-inline-hbox, .widget-checkbox, .widget-play, .widget-toggle-buttons');
      const named = (node) => node?.textContent.replace(/\u200b/g, '').trim();  // a checkbox's label is blank
      let label = named(around?.querySelector('.widget-label-basic')) || named(around?.querySelector('.widget-label'))
        || named(around) || '';
      if (el.closest('.widget-play')) label = 'play';
      else if (el.tagName === 'BUTTON') label = el.textContent.trim() || el.title || label;
      return { label, kind: el.tagName.toLowerCase(), disabled: el.disabled === true || el.hasAttribute('disabled') };
    });
  return {
    index,
    controls,
    // JupyterLab's plotly renderer nodes: each must hold a drawn plot (one without is a figure not drawn)
    plotlyOutputs: cell.querySelectorAll('.jp-RenderedPlotly').length,
    prompt: cell.querySelector('.jp-InputPrompt')?.textContent.trim() ?? '',
    source: cell.querySelector('.jp-InputArea-editor')?.textContent.slice(0, 200) ?? '',
    plots,
    widgetViews: outputs
      .filter((o) => o.dataset.mimeType === 'application/vnd.jupyter.widget-view+json' || o.querySelector('.jupyter-widgets'))
      .map((o) => box(o)),
    stderr: outputs
      .filter((o) => o.dataset.mimeType === 'application/vnd.jupyter.stderr')
      .map((o) => o.innerText.slice(0, 2000)),
    text: outputs.map((o) => o.innerText.slice(0, 500)).join('\n'),
  };
}

// A kernel message seen on the websocket, in short: JupyterLab's binary protocol
// (v1.kernel.websocket.jupyter.org: a count of offsets, the offsets, then channel, header, parent
// header, metadata, content and buffers) or the older JSON text frames.
function kernelMessage(payload) {
  let channel, header, parent, content;
  try {
    if (typeof payload === 'string') {
      ({ channel, header, parent_header: parent, content } = JSON.parse(payload));
    } else {
      const count = Number(payload.readBigUInt64LE(0));
      const offsets = Array.from({ length: count }, (_, i) => Number(payload.readBigUInt64LE(8 * (i + 1))));
      const part = (i) => payload.subarray(offsets[i], offsets[i + 1]).toString('utf8');
      channel = part(0);
      header = JSON.parse(part(1));
      parent = JSON.parse(part(2));
      content = JSON.parse(part(4));
    }
  } catch {
    return null;
  }
  return {
    channel,
    type: header?.msg_type,
    id: header?.msg_id?.slice(-8),
    parent: parent?.msg_id?.slice(-8),
    comm: content?.comm_id?.slice(0, 8),
    target: content?.target_name,
    method: content?.data?.method,
    state: content?.execution_state,
    comms: content?.comms ? Object.keys(content.comms).length : undefined,
    states: content?.data?.states ? Object.keys(content.data.states).length : undefined,
    bytes: payload.length,
  };
}

// Notebook path -> kernel id, from the server (the reload must find the same kernel).
async function sessionKernels() {
  const headers = { Authorization: `token ${config.token}` };
  const sessions = await (await fetch(`${config.url}/api/sessions`, { headers })).json();
  return Object.fromEntries(sessions.map((s) => [s.path, s.kernel?.id ?? null]));
}

async function shutDownKernels() {
  const headers = { Authorization: `token ${config.token}` };
  const sessions = await (await fetch(`${config.url}/api/sessions`, { headers })).json();
  for (const s of sessions) await fetch(`${config.url}/api/sessions/${s.id}`, { method: 'DELETE', headers });
}

main()
  .catch((error) => {
    report.error = String(error?.stack || error);
  })
  .finally(() => {
    save();
  });
