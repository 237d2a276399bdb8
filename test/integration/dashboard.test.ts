/// <reference lib="dom" />
import { expect } from 'chai';
import { randomBytes, createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import type { Browser, Page } from 'puppeteer-core';
import { launchBrowser, screenshot, until } from '../helpers/browser.js';
import { startTestDaemon, tempDir, type TestDaemon } from '../helpers/daemon.js';
import { agentPid } from '../helpers/processes.js';
import { GuestNetwork } from '../../src/ports/guest-network.js';
import { Hypervisor } from '../../src/ports/hypervisor.js';
import type { InMemoryHypervisor } from '../../src/adapters/hypervisor/fake/in-memory-hypervisor.js';
import type { InMemoryGuestNetwork } from '../../src/adapters/guest-net/in-memory-guest-network.js';
import { poll } from '../helpers/wait.js';

const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');

/**
 * The dashboard in Debian's chromium against a daemon on the fake hypervisor whose VMs run real
 * local agents (commands, files and shells are real; the "guest" is this host, under a temp dir).
 * The tests run in order, as a user would click through, and write the screenshots in docs/dashboard/.
 */
describe('dashboard in a real browser (chromium)', function () {
  this.timeout(120_000);
  let d: TestDaemon;
  let browser: Browser;
  let page: Page;
  let base: string;
  const vm = 'web1';
  const work = tempDir('svc-ui-files-');

  before(async () => {
    d = await startTestDaemon({ fake_agent: true, sandbox_metrics_interval: '300ms', sandbox_metrics_points: 200 });
    base = `http://127.0.0.1:${d.tcp.port}`;
    browser = await launchBrowser();
    page = await browser.newPage();
  });

  after(async () => {
    await browser?.close();
    await d?.stop();
  });

  const text = (sel: string) => page.$eval(sel, (e) => (e as HTMLElement).innerText);
  const rowStatus = (name: string) => `document.querySelector('tr[data-vm="${name}"] [data-test=status]')?.textContent`;

  it('asks for the token once, refuses a wrong one, and keeps the session where no other port of the host can see it', async () => {
    await page.goto(`${base}/ui/`);
    await page.waitForSelector('[data-test=login]');
    await screenshot(page, 'login');
    await page.type('[data-test=token]', 'not-the-token');
    await page.click('[data-test=login-submit]');
    await until(page, `document.querySelector('[role=alert]')?.textContent.includes('401')`);
    await page.click('[data-test=token]', { clickCount: 3 });
    await page.type('[data-test=token]', d.config.api_token);
    await page.click('[data-test=login-submit]');
    await page.waitForSelector('[data-test=create-form]');
    const id = await page.evaluate(() => localStorage.getItem('svc.session'));
    expect(id).to.match(/^[A-Za-z0-9_-]{43}$/);
    expect(await browser.cookies(), 'no cookie at all').to.deep.equal([]);
    // A reload keeps the log-in.
    await page.reload();
    await page.waitForSelector('[data-test=create-form]');
    // A guest's app forwarded to another loopback port, opened in the same browser, gets nothing:
    // cookies would reach it (they are not isolated by port), an origin's storage does not.
    const seen: string[] = [];
    const app = createServer((req, res) => {
      seen.push(JSON.stringify(req.headers));
      res.setHeader('content-type', 'text/html');
      res.end('<p>an app in the guest</p>');
    });
    await new Promise<void>((r) => app.listen(0, '127.0.0.1', r));
    try {
      const other = await browser.newPage();
      await other.goto(`http://127.0.0.1:${(app.address() as AddressInfo).port}/`);
      expect(await other.evaluate(() => localStorage.getItem('svc.session'))).to.equal(null);
      await other.close();
      expect(seen.length).to.be.greaterThan(0);
      for (const h of seen) expect(h).to.not.include(id!);
    } finally {
      app.close();
    }
  });

  it('creates a VM from the form and shows its progress, then running', async () => {
    await page.type('form[data-test=create-form] input[name=name]', vm);
    await page.click('form[data-test=create-form] input[name=persistent]');
    await page.click('[data-test=create-submit]');
    await until(page, `document.querySelector('[data-test=create-progress] .phase-ready')`);
    const progress = await text('[data-test=create-progress]');
    expect(progress)
      .to.match(/accepted/)
      .and.to.match(/boot/)
      .and.to.match(/ready/);
    await until(page, `${rowStatus(vm)} === 'running'`);
    expect((await d.call('GET', `/vms/${vm}`)).json.status).to.equal('running');
    await screenshot(page, 'vms');
  });

  it('shows a change made through the API without a reload', async () => {
    await page.evaluate(() => {
      (window as unknown as { marker: number }).marker = 42;
    });
    expect((await d.call('POST', `/vms/${vm}/pause`)).status).to.equal(200);
    await until(page, `${rowStatus(vm)} === 'paused'`);
    expect((await d.call('POST', `/vms/${vm}/resume`)).status).to.equal(200);
    await until(page, `${rowStatus(vm)} === 'running'`);
    // Same document all along: the marker set before the changes is still there.
    expect(await page.evaluate(() => (window as unknown as { marker?: number }).marker)).to.equal(42);
    // A VM made elsewhere appears too.
    expect((await d.call('POST', '/vms', { name: 'other' })).status).to.equal(201);
    await until(page, `${rowStatus('other')} === 'running'`);
  });

  it('runs an action from the list (pause, then resume) and the row follows', async () => {
    await page.click(`tr[data-vm="${vm}"] [data-test=do-pause]`);
    await until(page, `${rowStatus(vm)} === 'paused'`);
    expect((await d.call('GET', `/vms/${vm}`)).json.status).to.equal('paused');
    await page.click(`tr[data-vm="${vm}"] [data-test=do-resume]`);
    await until(page, `${rowStatus(vm)} === 'running'`);
  });

  it('forks a running VM from the list, as many as asked in a dialog, or under the names given there', async () => {
    await page.click(`tr[data-vm="${vm}"] [data-test=do-fork]`);
    await page.waitForSelector('dialog[data-test=confirm][open] [data-test=fork-count]');
    await page.click('dialog[data-test=confirm] [data-test=fork-count]', { clickCount: 3 });
    await page.type('dialog[data-test=confirm] [data-test=fork-count]', '2');
    await page.click('[data-test=confirm-ok]');
    for (const f of [`${vm}-fork-1`, `${vm}-fork-2`]) {
      await until(page, `${rowStatus(f)} === 'running'`);
      expect((await d.call('GET', `/vms/${f}`)).json).to.include({ from: vm, persistent: false });
      expect((await d.call('DELETE', `/vms/${f}`)).status).to.equal(200);
    }
    // Names (their number is the count) and persistence.
    await page.click(`tr[data-vm="${vm}"] [data-test=do-fork]`);
    await page.waitForSelector('dialog[data-test=confirm][open] [data-test=fork-names]');
    await page.type('dialog[data-test=confirm] [data-test=fork-names]', 'try-a, try-b');
    // A tag that is not key=value is refused in the page, and nothing is forked.
    await page.type('dialog[data-test=confirm] [data-test=fork-tags]', 'task=t42 oops');
    await page.click('[data-test=confirm-ok]');
    await until(
      page,
      `document.querySelector('[data-test=actions-${vm}] [role=alert]')?.textContent.includes('tag oops')`,
    );
    expect((await d.call('GET', '/vms/try-a')).status).to.equal(404);
    // The dialog keeps what was typed: the tags mended, persistence ticked.
    await page.click(`tr[data-vm="${vm}"] [data-test=do-fork]`);
    await page.waitForSelector('dialog[data-test=confirm][open] [data-test=fork-tags]');
    await page.click('dialog[data-test=confirm] [data-test=fork-tags]', { clickCount: 3 });
    await page.type('dialog[data-test=confirm] [data-test=fork-tags]', 'task=t42, try=1');
    await page.click('dialog[data-test=confirm] [data-test=fork-persistent]');
    await page.click('[data-test=confirm-ok]');
    for (const f of ['try-a', 'try-b']) {
      await until(page, `${rowStatus(f)} === 'running'`);
      const made = (await d.call('GET', `/vms/${f}`)).json;
      expect(made).to.include({ from: vm, persistent: true });
      expect(made.tags).to.deep.equal({ task: 't42', try: '1' });
      expect((await d.call('DELETE', `/vms/${f}`)).status).to.equal(200);
    }
    expect((await d.call('GET', `/vms/${vm}`)).json.status).to.equal('running');
  });

  it('suspends, clones under a name asked in a dialog, and restores from the list', async () => {
    await page.click(`tr[data-vm="${vm}"] [data-test=do-suspend]`);
    await until(page, `${rowStatus(vm)} === 'suspended'`);
    // its saved state does not load, for the clone and then for the restore: each is made
    // cold-booted, and the page says so
    const hv = d.daemon.container.get<InMemoryHypervisor>(Hypervisor);
    hv.failNext('restore');
    await page.click(`tr[data-vm="${vm}"] [data-test=do-clone]`);
    await page.waitForSelector('dialog[data-test=confirm][open] input');
    await page.type('dialog[data-test=confirm] input', 'web1-copy');
    await page.click('[data-test=confirm-ok]');
    await until(page, `${rowStatus('web1-copy')} === 'running'`);
    expect((await d.call('GET', '/vms/web1-copy')).json.status).to.equal('running');
    await page.waitForSelector(`tr[data-vm="${vm}"] [data-test=warning]`);
    expect(await text(`tr[data-vm="${vm}"] [data-test=warning]`)).to.match(/^cold-booted, the template's processes/);
    hv.failNext('restore');
    await page.click(`tr[data-vm="${vm}"] [data-test=do-restore]`);
    await until(page, `${rowStatus(vm)} === 'running'`);
    await page.waitForSelector(`tr[data-vm="${vm}"] [data-test=warning]`);
    expect(await text(`tr[data-vm="${vm}"] [data-test=warning]`)).to.match(/^cold-booted, its processes ended/);
  });

  it('shows the VM page: fields, forwards, a stats chart from the history, the console', async () => {
    await page.click(`tr[data-vm="${vm}"] a`);
    await page.waitForSelector('[data-test=fields]');
    expect(await text('[data-test=vm-title]')).to.include(vm);
    expect(await text('[data-test=fields]'))
      .to.include('persistent')
      .and.to.include('512 MB');
    await page.type('[data-test=forwards] input[name=guest_port]', '8080');
    await page.click('[data-test=forwards] button[type=submit]');
    await until(page, `document.querySelector('[data-test=forwards] tbody')?.innerText.includes('8080')`);
    const fwd = (await d.call('GET', `/vms/${vm}`)).json.forwards as { guest_port: number; kind: string }[];
    expect(fwd.map((f) => `${f.guest_port}/${f.kind}`)).to.include('8080/live');
    await until(page, `document.querySelector('[data-test=stats-chart] canvas')`, 20_000);
    await page.waitForSelector('[data-test=console]');
    await screenshot(page, 'vm');
    await page.click('[data-test=forwards] tbody button');
    await until(page, `!document.querySelector('[data-test=forwards] tbody')`);
    expect((await d.call('GET', `/vms/${vm}`)).json.forwards).to.deep.equal([]);
  });

  it("changes a stopped VM's machine from its page, and shows the daemon's words when it refuses", async () => {
    expect((await d.call('POST', '/vms', { name: 'shaped', persistent: true, cpus: 1, disk_gb: 2 })).status).to.equal(
      201,
    );
    await page.goto(`${base}/ui/#/vm/shaped/overview`);
    await page.waitForSelector('[data-test=fields]');
    expect(await page.$('[data-test=shape]'), 'no editor while it runs').to.equal(null);
    expect((await d.call('POST', '/vms/shaped/shutdown')).status).to.equal(200);
    await page.waitForSelector('[data-test=shape] input[name=cpus]');
    const set = async (name: string, value: string) => {
      await page.$eval(`[data-test=shape] input[name=${name}]`, (e) => ((e as HTMLInputElement).value = ''));
      await page.type(`[data-test=shape] input[name=${name}]`, value);
    };
    await set('cpus', '3');
    await set('disk_gb', '4');
    await page.click('[data-test=shape-save]');
    await page.waitForSelector('[data-test=shape-saved]');
    expect((await d.call('GET', '/vms/shaped')).json).to.include({ cpus: 3, disk_gb: 4 });
    await until(page, `document.querySelector('[data-test=fields]')?.innerText.includes('4 GB')`);
    await set('memory_mb', '65');
    await page.click('[data-test=shape-save]');
    await until(page, `document.querySelector('[data-test=shape] [role=alert]')?.textContent.includes('too little')`);
    expect((await d.call('DELETE', '/vms/shaped')).status).to.equal(200);
    // Back on the page the next steps click through.
    await page.goto(`${base}/ui/#/vm/${vm}/overview`);
    await page.waitForSelector('[data-test=fields]');
  });

  it("takes a VM's snapshot from its page, reverts to it after asking, and shows the daemon's words when it refuses", async () => {
    expect((await d.call('POST', '/vms', { name: 'snappy', persistent: true })).status).to.equal(201);
    await page.goto(`${base}/ui/#/vm/snappy/overview`);
    await page.waitForSelector('[data-test=snapshots]');
    await page.type('[data-test=snapshots] input[name=snapshot]', 'before');
    await page.click('[data-test=snapshot-take]');
    await page.waitForSelector('[data-test=snapshot-before]');
    expect(await page.$eval('[data-test=snapshot-before]', (e) => (e as HTMLElement).innerText)).to.contain(
      'disk and memory',
    );
    expect((await d.call('GET', '/vms/snappy/snapshots')).json.map((x: { name: string }) => x.name)).to.deep.equal([
      'before',
    ]);
    // The same name again: the daemon's refusal, as it says it.
    await page.type('[data-test=snapshots] input[name=snapshot]', 'before');
    await page.click('[data-test=snapshot-take]');
    await until(
      page,
      `document.querySelector('[data-test=snapshots] [role=alert]')?.textContent.includes('has a snapshot before already')`,
    );
    await page.click('[data-test=revert-before]');
    await page.waitForSelector('[data-test=confirm]');
    await page.click('[data-test=confirm-ok]');
    const reverted = async () =>
      (
        (await d.call('GET', '/activity?limit=20')).json.events as { action: string; target: string; status: string }[]
      ).some((e) => e.action === 'revert' && e.target === 'snappy' && e.status === 'ok');
    await poll(reverted, { ms: 10_000, every: 100 });
    expect(await reverted()).to.equal(true);
    expect((await d.call('GET', '/vms/snappy')).json.status).to.equal('running');
    expect((await d.call('DELETE', '/vms/snappy')).status).to.equal(200);
    await page.goto(`${base}/ui/#/vm/${vm}/overview`);
    await page.waitForSelector('[data-test=fields]');
  });

  it('opens a terminal that runs what is typed and follows the window size', async () => {
    await page.click('[data-test=tab-terminal]');
    await until(page, `document.querySelector('[data-test=terminal-state]')?.textContent === 'connected'`);
    const screen = () => page.$eval('[data-test=terminal] .xterm-rows', (e) => (e as HTMLElement).innerText);
    await page.keyboard.type('echo dash-$((6*7)); stty size\n');
    await until(page, `document.querySelector('[data-test=terminal] .xterm-rows')?.innerText.includes('dash-42')`);
    const size = async () => {
      const m = [...(await screen()).matchAll(/^(\d+) (\d+)\s*$/gm)];
      return m.length > 0 ? m[m.length - 1].slice(1).map(Number) : [];
    };
    await until(
      page,
      `/^\\d+ \\d+\\s*$/m.test(document.querySelector('[data-test=terminal] .xterm-rows')?.innerText ?? '')`,
    );
    const [rows1, cols1] = await size();
    expect(cols1).to.be.greaterThan(40);
    await screenshot(page, 'terminal');
    await page.setViewport({ width: 900, height: 700 });
    await new Promise((r) => setTimeout(r, 300));
    await page.keyboard.type('clear; stty size\n');
    await until(
      page,
      `(() => { const m = [...(document.querySelector('[data-test=terminal] .xterm-rows')?.innerText ?? '').matchAll(/^(\\d+) (\\d+)\\s*$/gm)]; return m.length > 0 && Number(m[m.length - 1][2]) < ${cols1}; })()`,
    );
    const [rows2, cols2] = await size();
    expect(cols2).to.be.lessThan(cols1);
    expect(rows2).to.be.lessThan(rows1);
    await page.setViewport({ width: 1366, height: 900 });
  });

  it('browses files: upload, download back byte-exact, make a directory, remove with confirmation', async () => {
    const dir = join(work, 'box');
    mkdirSync(dir);
    const data = randomBytes(300_000);
    // The source lives where the page never lists, so a row named blob.bin can only be the upload.
    mkdirSync(join(work, 'from'));
    const src = join(work, 'from', 'blob.bin');
    writeFileSync(src, data);
    await page.click('[data-test=tab-files]');
    await page.waitForSelector('[data-test=files-path]');
    // Select what the field holds and type over it, as a person would (clearing .value by script
    // races the page's own render of the field, which puts /root back).
    await page.click('[data-test=files-path]', { clickCount: 3 });
    await page.type('[data-test=files-path]', `${dir}\n`);
    // The upload goes to the directory the page shows: wait until it shows the one typed.
    await page.waitForSelector(`[data-test=files][data-dir="${dir}"]`);
    const input = await page.waitForSelector('[data-test=upload]');
    await (input as unknown as { uploadFile(p: string): Promise<void> }).uploadFile(src);
    await page.waitForSelector('tr[data-file="blob.bin"]', { timeout: 20_000 });
    const up = join(dir, 'blob.bin');
    await poll(() => existsSync(up) && statSync(up).size === data.length, { ms: 30_000, every: 100 });
    expect(sha(readFileSync(up))).to.equal(sha(data));

    const downloads = join(work, 'downloads');
    mkdirSync(downloads);
    const cdp = await page.createCDPSession();
    await cdp.send('Browser.setDownloadBehavior', { behavior: 'allow', downloadPath: downloads });
    await page.click('tr[data-file="blob.bin"] [data-test=download]');
    const got = join(downloads, 'blob.bin');
    for (
      let i = 0;
      i < 300 && !(existsSync(got) && statSync(got).size === data.length && readdirSync(downloads).length === 1);
      i++
    )
      await new Promise((r) => setTimeout(r, 100));
    expect(sha(readFileSync(got))).to.equal(sha(data));

    await page.type('[data-test=mkdir-name]', 'made-here');
    await page.click('[data-test=mkdir]');
    await page.waitForSelector('tr[data-file="made-here"]');
    expect(statSync(join(dir, 'made-here')).isDirectory()).to.equal(true);
    await screenshot(page, 'files');

    await page.click('tr[data-file="blob.bin"] [data-test=remove]');
    await page.waitForSelector('dialog[data-test=confirm][open]');
    await page.click('[data-test=confirm-ok]');
    await until(page, `!document.querySelector('tr[data-file="blob.bin"]')`);
    expect(existsSync(join(dir, 'blob.bin'))).to.equal(false);
  });

  it('starts a durable process, follows its output live, and stops it', async () => {
    await page.goto(`${base}/ui/#/vm/${vm}/processes`);
    await page.waitForSelector('[data-test=processes] input[name=process_cmd]');
    await page.type(
      '[data-test=processes] input[name=process_cmd]',
      'echo started-from-the-page; sleep 0.5; echo second-line; sleep 300',
    );
    await page.click('[data-test=process-start]');
    await until(page, `document.querySelector('[data-test=process-output] pre')?.textContent.includes('second-line')`);
    const listed = (await d.call('GET', `/vms/${vm}/processes`)).json as {
      id: string;
      state: string;
      args: string[];
    }[];
    const p = listed.find((x) => x.args.join(' ').includes('started-from-the-page'))!;
    expect(p.state).to.equal('running');
    expect(await text(`[data-test=process-${p.id}]`)).to.match(/running/);
    await screenshot(page, 'processes');
    await page.click(`[data-test=process-${p.id}] button`);
    await until(page, `document.querySelector('[data-test=process-end]')?.textContent.includes('SIGTERM')`);
    expect((await d.call('GET', `/vms/${vm}/processes/${p.id}`)).json).to.include({
      state: 'ended',
      signal: 'SIGTERM',
    });
    // One started with a restart policy: its row counts the restarts, and Stop ends them.
    await page.select('[data-test=processes] select[name=process_restart]', 'on-failure');
    await page.type('[data-test=processes] input[name=process_cmd]', 'echo crash-loop; sleep 0.2; exit 3');
    await page.click('[data-test=process-start]');
    let id = '';
    await poll(
      async () => {
        const all = (await d.call('GET', `/vms/${vm}/processes`)).json as { id: string; args: string[] }[];
        id = all.find((x) => x.args.join(' ').includes('crash-loop'))?.id ?? '';
        return !!id;
      },
      { ms: 10_000, every: 100 },
    );
    expect((await d.call('GET', `/vms/${vm}/processes/${id}`)).json).to.include({ restart: 'on-failure' });
    await until(page, `/restarts [1-9]/.test(document.querySelector('[data-test=process-${id}]')?.textContent ?? '')`);
    await page.click(`[data-test=process-${id}] button`);
    let ended: { state?: string; restarts?: number } = {};
    await poll(async () => (ended = (await d.call('GET', `/vms/${vm}/processes/${id}`)).json).state === 'ended', {
      ms: 10_000,
      every: 100,
    });
    expect(ended).to.include({ state: 'ended' });
    expect(ended.restarts).to.be.above(0);
    // One that printed 2,500 lines before the page looked: it shows the last 2,000 (a tail read).
    const rows = await d.call('POST', `/vms/${vm}/processes`, {
      cmd: 'sh',
      args: ['-c', 'i=0; while [ $i -lt 2500 ]; do i=$((i+1)); echo "row $i"; done'],
    });
    for (
      let i = 0;
      i < 100 && (await d.call('GET', `/vms/${vm}/processes/${rows.json.id}`)).json.state !== 'ended';
      i++
    )
      await new Promise((r) => setTimeout(r, 100));
    await page.waitForSelector(`[data-test=process-${rows.json.id}] a`, { timeout: 10_000 });
    await page.click(`[data-test=process-${rows.json.id}] a`);
    await until(page, `document.querySelector('[data-test=process-end]')?.textContent.includes('exited 0')`);
    const shown = await text('[data-test=process-output] pre');
    expect(shown.startsWith('row 501\n'), shown.slice(0, 40)).to.equal(true);
    expect(shown.endsWith('row 2500\n')).to.equal(true);
  });

  it('follows a process on when its read breaks off (the agent killed and started again): each line once', async () => {
    const made = await d.call('POST', `/vms/${vm}/processes`, {
      cmd: 'sh',
      args: ['-c', 'i=0; while [ $i -lt 3000 ]; do i=$((i+1)); echo "tick $i"; sleep 0.02; done'],
    });
    expect(made.status, made.text).to.equal(201);
    const id = String(made.json.id);
    await page.goto(`${base}/ui/#/vm/${vm}/processes`);
    await page.waitForSelector(`[data-test=process-${id}] a`, { timeout: 10_000 });
    await page.click(`[data-test=process-${id}] a`);
    const ticks = async () => (await text('[data-test=process-output] pre')).split('\n').filter(Boolean);
    await until(page, `/tick 20\\n/.test(document.querySelector('[data-test=process-output] pre')?.textContent ?? '')`);
    const agent = agentPid(d, vm);
    expect(agent).to.be.above(0);
    process.kill(agent, 'SIGKILL');
    const atKill = (await ticks()).length;
    // Its stand-in guest starts the agent again; the page reads on from where it was.
    await poll(async () => (await ticks()).length >= atKill + 100, { ms: 20_000, every: 100 });
    const shown = await ticks();
    expect(shown.length).to.be.at.least(atKill + 100);
    shown.forEach((l, i) => expect(l, `line ${i + 1}`).to.equal(`tick ${i + 1}`));
    expect(await page.$('[data-test=process-end]'), 'still running').to.equal(null);
    await d.call('DELETE', `/vms/${vm}/processes/${id}`);
  });

  it("edits a VM's egress policy (a bad rule is refused with the daemon's words) and lists its decisions", async () => {
    const net = d.daemon.container.get<InMemoryGuestNetwork>(GuestNetwork);
    net.emit({
      t: new Date().toISOString(),
      vm,
      event: 'deny',
      proto: 'tcp',
      decision: 'deny',
      rule: 'host-closed',
      addr: 'host',
      port: 7474,
      name: 'host.svc.internal',
    });
    expect((await d.call('POST', '/secrets', { name: 'ui-key', value: 'sk-ui-never-shown' })).status).to.equal(200);
    const bound = await d.call('PUT', `/vms/${vm}/egress/secrets`, [
      { secret: 'ui-key', hosts: ['api.example.com'], header: 'Authorization', format: 'Bearer {value}' },
    ]);
    expect(bound.status, bound.text).to.equal(200);
    await page.goto(`${base}/ui/#/vm/${vm}/egress`);
    await page.waitForSelector('[data-test=egress] select[name=egress_default]');
    await page.waitForSelector('[data-test=egress-secrets] tbody tr');
    const secretsTable = await text('[data-test=egress-secrets]');
    expect(secretsTable).to.include('ui-key').and.include('api.example.com').and.include('UI_KEY');
    expect(secretsTable).to.include('Authorization: Bearer {value}').and.include(bound.json[0].placeholder);
    expect(secretsTable).not.to.include('sk-ui-never-shown');
    await page.waitForSelector('[data-test=egress-log] tbody tr');
    expect(await text('[data-test=egress-log]')).to.match(/host\.svc\.internal.*7474[\s\S]*host-closed/);
    await page.select('[data-test=egress] select[name=egress_default]', 'deny');
    await page.type('[data-test=egress] textarea[name=egress_allow]', 'pypi.org\nnot a rule');
    await page.click('[data-test=egress-save]');
    await until(
      page,
      `document.querySelector('[data-test=egress] [role=alert]')?.textContent.includes('not a domain')`,
    );
    expect((await d.call('GET', `/vms/${vm}/egress`)).json.default, 'a refused policy changed nothing').to.equal(
      'allow',
    );
    await page.click('[data-test=egress] textarea[name=egress_allow]', { clickCount: 3 });
    await page.keyboard.press('Backspace');
    await page.type('[data-test=egress] textarea[name=egress_allow]', 'pypi.org\nhost:8080');
    await page.click('[data-test=egress-save]');
    await page.waitForSelector('[data-test=egress-saved]');
    expect((await d.call('GET', `/vms/${vm}/egress`)).json).to.deep.equal({
      default: 'deny',
      allow: ['pypi.org', 'host:8080'],
      deny: [],
    });
    expect(net.policies.get(vm), 'in force on the running VM').to.deep.equal({
      default: 'deny',
      allow: ['pypi.org', 'host:8080'],
      deny: [],
    });
    await screenshot(page, 'egress');
  });

  it('shows images, host secrets by name only, and the activity log', async () => {
    const value = 'sup3r-s3cret-value-that-must-not-show';
    expect((await d.call('POST', '/secrets', { name: 'DB_PASSWORD', value })).status).to.equal(200);
    await page.goto(`${base}/ui/#/images`);
    await page.waitForSelector('[data-test=images] tbody tr');
    await screenshot(page, 'images');
    await page.goto(`${base}/ui/#/secrets`);
    await until(page, `document.querySelector('[data-test=secrets]')?.innerText.includes('DB_PASSWORD')`);
    expect(await page.content()).to.not.include(value);
    await screenshot(page, 'secrets');
    await page.goto(`${base}/ui/#/activity`);
    await until(page, `document.querySelector('[data-test=activity]')?.innerText.includes('${vm}')`);
    await screenshot(page, 'activity');
  });

  it('deletes a VM only after the confirmation', async () => {
    await page.goto(`${base}/ui/#/`);
    await until(page, `${rowStatus(vm)} === 'running'`);
    await page.click(`tr[data-vm="${vm}"] [data-test=do-delete]`);
    await page.waitForSelector('dialog[data-test=confirm][open]');
    await screenshot(page, 'delete-confirm');
    await page.keyboard.press('Escape');
    await until(page, `!document.querySelector('dialog[data-test=confirm]')`);
    expect((await d.call('GET', `/vms/${vm}`)).status).to.equal(200);
    await page.click(`tr[data-vm="${vm}"] [data-test=do-delete]`);
    await page.waitForSelector('dialog[data-test=confirm][open]');
    await page.click('[data-test=confirm-ok]');
    await until(page, `!document.querySelector('tr[data-vm="${vm}"]')`);
    expect((await d.call('GET', `/vms/${vm}`)).status).to.equal(404);
  });

  it('a page of another origin cannot change anything, even on the same site', async () => {
    const evil: Server = createServer((_req, res) => {
      res.setHeader('content-type', 'text/html');
      res.end(`<form id=f method=POST action="${base}/vms" enctype="text/plain"><input name='{"name":"pwned","x":"' value='"}'></form>
        <script>fetch(${JSON.stringify(`${base}/vms`)}, { method: 'POST', mode: 'no-cors', credentials: 'include', body: '{"name":"pwned2"}' }).finally(() => document.getElementById('f').submit());</script>`);
    });
    await new Promise<void>((r) => evil.listen(0, '127.0.0.1', r));
    try {
      const port = (evil.address() as { port: number }).port;
      const other = await browser.newPage();
      const answers: number[] = [];
      other.on('response', (res) => {
        if (res.url().startsWith(`${base}/vms`)) answers.push(res.status());
      });
      await other.goto(`http://127.0.0.1:${port}/`);
      await poll(() => answers.length >= 1, { ms: 15_000, every: 100 });
      await new Promise((r) => setTimeout(r, 500));
      await other.close();
      expect(answers.length).to.be.greaterThan(0);
      for (const s of answers) expect(s).to.equal(403);
      const names = (await d.call('GET', '/vms')).json.map((v: { name: string }) => v.name);
      expect(names).to.not.include('pwned').and.to.not.include('pwned2');
    } finally {
      evil.close();
    }
  });

  it('logs out: the session ends and the page asks for the token again', async () => {
    await page.goto(`${base}/ui/#/`);
    await page.waitForSelector('[data-test=logout]');
    const before = await page.evaluate(() => localStorage.getItem('svc.session'));
    expect(before).to.be.a('string');
    await page.click('[data-test=logout]');
    await page.waitForSelector('[data-test=login]');
    expect(await page.evaluate(() => localStorage.getItem('svc.session'))).to.equal(null);
    // The old id is dead on the server too, not only forgotten by the browser.
    const r = await d.call('GET', '/vms', undefined, { authorization: '', 'x-svc-session': before! });
    expect(r.status).to.equal(401);
  });
});
