// BENCH_ONLY=e2b: E2B's SDK against svc, beside svc's own API in the same run (docs/e2b.md).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Sandbox, Template } from 'e2b';
import { Sandbox as CodeInterpreter } from '@e2b/code-interpreter';
import { ensureImage } from '../test/e2e/image.js';
import { fmt, minimalQemu, startSvcd, stats, type Daemon, type Row } from './lib.js';

const N = Number(process.env.BENCH_E2B_N ?? 4);

/**
 * `Sandbox.create` to its first `commands.run` result through the official SDK, cold (the default
 * image booted) and from the warm pool (a claim of a running member), each beside the same two
 * steps through svc's own client (create, exec), alternating, on one minimal guest image; then
 * from a template built with `Template.build` (a clone of its suspended VM).
 */
export async function e2bBenchmarks(row: Row, results: Record<string, unknown>): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'svc-bench-e2b-'));
  let d: Daemon | undefined;
  try {
    d = await startSvcd(dir, minimalQemu({ warm_pool: { template: 'tpl', size: 1, running: true } }));
    const c = d.client;
    const opts = {
      apiUrl: `http://127.0.0.1:${d.port}/e2b`,
      sandboxUrl: `http://127.0.0.1:${d.port}/e2b/envd`,
      apiKey: 'any',
    };
    const viaSdk = async (template?: string) => {
      const t0 = performance.now();
      const s = template ? await Sandbox.create(template, opts) : await Sandbox.create(opts);
      await s.commands.run('true');
      const ms = performance.now() - t0;
      await s.kill();
      return ms;
    };
    let n = 0;
    const viaSvc = async (fromPool: boolean) => {
      const t0 = performance.now();
      const name = `own-${n++}`;
      await c.create({ name, ...(fromPool ? { from_pool: true } : {}) }, { wait: 'agent' });
      await c.exec(name, { cmd: 'true', args: [] });
      const ms = performance.now() - t0;
      await c.delete(name);
      return ms;
    };
    const settle = async () => {
      for (let i = 0; i < 600; i++) {
        const p = await c.pool();
        if (p.ready >= p.size) return;
        await new Promise((r) => setTimeout(r, 500));
      }
    };
    const cold = { sdk: [] as number[], svc: [] as number[] };
    for (let i = 0; i < N; i++) {
      if (i % 2) (cold.svc.push(await viaSvc(false)), cold.sdk.push(await viaSdk()));
      else (cold.sdk.push(await viaSdk()), cold.svc.push(await viaSvc(false)));
    }
    await c.create({ name: 'tpl', persistent: true }, { wait: 'agent' });
    await c.suspend('tpl');
    const pool = { sdk: [] as number[], svc: [] as number[] };
    for (let i = 0; i < N; i++) {
      await settle();
      pool.sdk.push(await viaSdk('tpl'));
      await settle();
      pool.svc.push(await viaSvc(true));
    }
    // A template built with Template.build: its sandboxes are clones of its suspended VM, server running.
    const web = () =>
      Template()
        .fromBaseImage()
        .runCmd('mkdir -p /srv && echo hi > /srv/index.html')
        .setStartCmd('httpd -f -p 8081 -h /srv', 'wget -qO- http://127.0.0.1:8081/index.html');
    const b0 = performance.now();
    await Template.build(web(), 'bench-tpl', opts);
    const buildMs = performance.now() - b0;
    // the same build again, under another tag: answered by the build just made (the build cache)
    const c0 = performance.now();
    await Template.build(web(), 'bench-tpl:again', opts);
    const cachedMs = performance.now() - c0;
    row(
      'Template.build of a template, then the same build again (answered from the build cache), TCG minimal',
      `${fmt(buildMs, 0)} / ${fmt(cachedMs, 0)} ms`,
      `${fmt(cachedMs / buildMs, 3)}x the build`,
    );
    const built: number[] = [];
    for (let i = 0; i < N; i++) {
      await settle();
      built.push(await viaSdk('bench-tpl'));
    }
    const [coldSdk, fromTpl] = [stats(cold.sdk), stats(built)];
    row(
      'Sandbox.create to the first commands.run result, from a Template.build template (a clone of its suspended VM, its start command running), TCG minimal',
      `p50 ${fmt(fromTpl.p50, 0)} ms, p95 ${fmt(fromTpl.p95, 0)} ms (n=${N}); the build ${fmt(buildMs, 0)} ms`,
      `${fmt(fromTpl.p50 / coldSdk.p50, 2)}x the SDK's cold boot at p50`,
    );
    for (const [what, r] of [
      ['cold boot', cold],
      ['warm pool (running member)', pool],
    ] as const) {
      const [a, b] = [stats(r.sdk), stats(r.svc)];
      row(
        `Sandbox.create to the first commands.run result, ${what}, TCG minimal: E2B SDK / svc's client`,
        `p50 ${fmt(a.p50, 0)} / ${fmt(b.p50, 0)} ms, p95 ${fmt(a.p95, 0)} / ${fmt(b.p95, 0)} ms (n=${N})`,
        `SDK ${fmt(a.p50 - b.p50, 0)} ms over svc's own at p50`,
      );
    }
    results.e2b = { n: N, cold, pool, template: { build_ms: buildMs, cached_build_ms: cachedMs, create: built } };
  } finally {
    if (d) {
      for (const vm of await d.client.list().catch(() => [])) await d.client.delete(vm.name).catch(() => undefined);
      await d.stop();
    }
    rmSync(dir, { recursive: true, force: true });
  }
}

/** A first data cell as E2B's examples write it: pandas, a plot of a DataFrame, its length. */
const DATA_CELL =
  'import pandas as pd, matplotlib.pyplot as plt\n' +
  'df = pd.DataFrame({"x": range(10), "y": [v * v for v in range(10)]})\ndf.plot(x="x", y="y")\nplt.show()\nlen(df)';

/**
 * BENCH_ONLY=code-interpreter: `@e2b/code-interpreter`'s create to its first `runCode` result on
 * the default debian image (restored from the image's snapshot), in one run: the first create,
 * which starts svc's server in its VM, against the creates after it, which clone the VM prepared
 * with the server and its kernel running (docs/e2b.md, "Code interpreter"); and each sandbox's
 * DATA_CELL after its first result, which the clones' kernels have pandas and pyplot loaded for.
 */
export async function codeInterpreterBenchmarks(row: Row, results: Record<string, unknown>): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'svc-bench-ci-'));
  let d: Daemon | undefined;
  try {
    d = await startSvcd(dir, {
      hypervisor: 'qemu',
      images_dir: ensureImage('debian'),
      image: 'debian',
      memory_mb: 768,
      sandbox_metrics_enabled: false,
      ready_timeout: '240s',
    });
    const opts = {
      apiUrl: `http://127.0.0.1:${d.port}/e2b`,
      sandboxUrl: `http://127.0.0.1:${d.port}/e2b/envd`,
      apiKey: 'any',
    };
    const once = async () => {
      const t0 = performance.now();
      const s = await CodeInterpreter.create(opts);
      const created = performance.now() - t0;
      const r = await s.runCode('6 * 7');
      if (r.text !== '42') throw new Error(`runCode answered ${JSON.stringify(r.text)}`);
      const total = performance.now() - t0;
      // then a data cell: the prepared VM's kernel imported pandas and pyplot before it was suspended
      const t1 = performance.now();
      const plot = await s.runCode(DATA_CELL);
      if (plot.text !== '10' || !plot.results.some((x) => x.png))
        throw new Error(`the data cell answered ${JSON.stringify(plot.error ?? plot.text)}`);
      const data = performance.now() - t1;
      await s.kill();
      return { created, total, data };
    };
    // the image's snapshot is captured after its first create: the creates measured restore it
    await d.client.create({ name: 'warm-up' }, { wait: 'agent' });
    await d.client.delete('warm-up');
    for (let i = 0; i < 600 && !(await d.client.getImage('debian')).snapshots?.length; i++)
      await new Promise((r) => setTimeout(r, 500));
    const first = await once();
    const prepared = async () =>
      (await d!.client.list()).some((v) => v.name.startsWith('e2b-code-interpreter-') && v.status === 'suspended');
    for (let i = 0; i < 600 && !(await prepared()); i++) await new Promise((r) => setTimeout(r, 500));
    const clones: { created: number; total: number; data: number }[] = [];
    for (let i = 0; i < N; i++) clones.push(await once());
    const c = stats(clones.map((x) => x.total));
    row(
      "CodeInterpreter.create to the first runCode result, debian under TCG: the first create (starts svc's server) / creates cloning the prepared VM",
      `${fmt(first.total, 0)} ms (create ${fmt(first.created, 0)}) / p50 ${fmt(c.p50, 0)} ms, p95 ${fmt(c.p95, 0)} ms (create p50 ${fmt(stats(clones.map((x) => x.created)).p50, 0)}, n=${N})`,
      `${fmt(first.total / c.p50, 1)}x faster from the prepared VM`,
    );
    const p = stats(clones.map((x) => x.data)).p50;
    row(
      'a cell that imports pandas and pyplot and plots a DataFrame: in the first sandbox / in clones of the prepared VM (its kernel imported them)',
      `${fmt(first.data, 0)} ms / p50 ${fmt(p, 0)} ms`,
      `${fmt(first.data / p, 1)}x faster in a clone`,
    );
    results.code_interpreter = { first, clones };
  } finally {
    if (d) {
      for (const vm of await d.client.list().catch(() => [])) await d.client.delete(vm.name).catch(() => undefined);
      await d.stop();
    }
    rmSync(dir, { recursive: true, force: true });
  }
}
