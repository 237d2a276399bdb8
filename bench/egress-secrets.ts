// BENCH_ONLY=egress-secrets: HTTPS through the injection of egress secrets against the same requests
// made directly, from one TCG guest to one upstream, in one run (docs/egress-secrets.md).
import { hostIp } from '../test/helpers/host-ip.js';
import http2 from 'node:http2';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { EgressCa } from '../src/adapters/netd/egress-ca.js';
import { TestDns } from '../test/helpers/dns-server.js';
import { fmt, minimalQemu, startSvcd, stats, type Daemon, type Row } from './lib.js';

const SECONDS = Number(process.env.BENCH_EGRESS_SECONDS ?? 10);
const ROUNDS = Number(process.env.BENCH_EGRESS_ROUNDS ?? 3);
const TOKEN = 'bench-token-0123456789';

/** Requests one after another on one kept-alive connection for `seconds`; prints how many a second. */
const LOOP = `
const https = require('https');
const [url, seconds, insecure] = process.argv.slice(2);
const agent = new https.Agent({ keepAlive: true, maxSockets: 1 });
const until = Date.now() + seconds * 1000;
let n = 0;
const t0 = Date.now();
const one = () => https.get(url, { agent, rejectUnauthorized: insecure !== '1', headers: { authorization: 'Bearer ' + process.env.TOKEN } }, (r) => {
  r.resume();
  r.on('end', () => { if (r.statusCode !== 200) { console.log(JSON.stringify({ error: r.statusCode })); process.exit(0); }
    n++; if (Date.now() < until) one(); else { console.log(JSON.stringify({ rps: n / ((Date.now() - t0) / 1000), n })); process.exit(0); } });
}).on('error', (e) => { console.log(JSON.stringify({ error: e.code || e.message })); process.exit(0); });
one();
`;

export async function egressSecretBenchmarks(row: Row, results: Record<string, unknown>): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'svc-bench-egress-'));
  const HOST = hostIp();
  const ca = new EgressCa(join(dir, 'upstream-ca'), 'upstream');
  let injected = 0;
  const upstream = http2.createSecureServer(
    { allowHTTP1: true, SNICallback: (name, cb) => ca.contextFor(name).then((c) => cb(null, c), cb) },
    (req, res) => {
      if (req.headers.authorization === `Bearer ${TOKEN}`) injected++;
      res.end('ok');
    },
  );
  await new Promise<void>((r) => upstream.listen(0, '0.0.0.0', () => r()));
  const port = (upstream.address() as AddressInfo).port;
  const dns = await new TestDns({ 'direct.test': [HOST] }).start();
  let d: Daemon | undefined;
  try {
    await ca.contextFor('host.svc.internal');
    mkdirSync(join(dir, 'd'));
    d = await startSvcd(
      join(dir, 'd'),
      minimalQemu({
        guest_dns: [`127.0.0.1:${dns.port}`],
        egress_upstream_ca: join(dir, 'upstream-ca.crt'),
        egress: { default: 'deny', allow: [`host:${port}`, `${HOST}:${port}`, 'direct.test'] },
      }),
    );
    await d.client.setSecret({ name: 'bench', value: TOKEN });
    await d.client.create({
      name: 'g',
      egress_secrets: [{ secret: 'bench', hosts: ['host.svc.internal'], env: 'TOKEN' }],
    });
    const script = Buffer.from(LOOP);
    await d.client.upload('g', { path: '/tmp/loop.js' }, script, script.length);
    const run = async (which: 'injected' | 'direct', seconds: number) => {
      const url = which === 'injected' ? `https://host.svc.internal:${port}/` : `https://direct.test:${port}/`;
      const r = await d!.client.exec('g', {
        cmd: 'node',
        args: ['/tmp/loop.js', url, String(seconds), which === 'direct' ? '1' : '0'],
        timeoutMs: (seconds + 60) * 1000,
      });
      let out: { rps?: number; error?: string } = {};
      try {
        out = JSON.parse(r.stdout) as typeof out;
      } catch {
        // said below
      }
      if (!out.rps) throw new Error(`${which}: ${r.stdout} ${r.stderr}`);
      return out.rps;
    };
    await run('injected', 2);
    await run('direct', 2);
    const rps: Record<'injected' | 'direct', number[]> = { injected: [], direct: [] };
    for (let i = 0; i < ROUNDS; i++)
      for (const which of i % 2 === 0 ? (['injected', 'direct'] as const) : (['direct', 'injected'] as const))
        rps[which].push(await run(which, SECONDS));
    const [inj, dir_] = [stats(rps.injected).p50, stats(rps.direct).p50];
    const ratio = inj / dir_;
    row(
      `HTTPS requests from a TCG guest (node, one kept-alive connection, ${SECONDS} s, median of ${ROUNDS}): direct to the upstream`,
      `${fmt(dir_, 0)} req/s`,
      '',
    );
    row(
      'the same through the egress secret injection (TLS terminated, header rewritten, TLS again)',
      `${fmt(inj, 0)} req/s`,
      `${fmt(ratio * 100, 0)}% of direct (target >= 80%: ${ratio >= 0.8 ? 'met' : 'missed'})`,
    );
    results.egress_secrets = { seconds: SECONDS, rounds: ROUNDS, rps, ratio, injected_requests: injected };
  } finally {
    await d?.stop();
    dns.stop();
    upstream.close();
    rmSync(dir, { recursive: true, force: true });
  }
}
