// BENCH_ONLY=net: the network boundary's cost, measured beside QEMU's own user-mode network in one run.
import { randomBytes } from 'node:crypto';
import { createReadStream, mkdirSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createServer, Agent } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fetchAll, fmt, minimalQemu, post, rounds, startSvcd, stats, type Daemon, type Row } from './lib.js';

/** The file guests download from the host, in MiB (BENCH_NET_MIB). */
const MIB = Number(process.env.BENCH_NET_MIB ?? 256);
const ROUNDS = Number(process.env.BENCH_NET_ROUNDS ?? 5);

/**
 * A guest's download of one file from a web server on the host's loopback, through svc-netd
 * (allowed by `host:PORT`, reached as host.svc.internal) and through QEMU's user-mode network
 * (10.0.2.2, what svc used before), in alternating rounds; then exec `true` and a copy out of the
 * guest through the daemon (the agent's forward is svc-netd's too) on both.
 */
export async function netBenchmarks(row: Row, results: Record<string, unknown>): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'svc-bench-net-'));
  const file = join(dir, 'big.bin');
  writeFileSync(file, randomBytes(MIB << 20));
  const web = createServer((req, res) => {
    res.writeHead(200, { 'content-length': statSync(file).size });
    createReadStream(file).pipe(res);
  });
  await new Promise<void>((r) => web.listen(0, '127.0.0.1', () => r()));
  const port = (web.address() as AddressInfo).port;
  const daemons: Record<'netd' | 'qemu', Daemon> = {} as Record<'netd' | 'qemu', Daemon>;
  try {
    const common = minimalQemu();
    for (const sub of ['netd', 'qemu']) mkdirSync(join(dir, sub));
    daemons.netd = await startSvcd(join(dir, 'netd'), {
      ...common,
      egress: { default: 'deny', allow: [`host:${port}`] },
    });
    daemons.qemu = await startSvcd(join(dir, 'qemu'), { ...common, guest_net: 'qemu-user', test_mode: true });
    await Promise.all([daemons.netd.client.create({ name: 'g' }), daemons.qemu.client.create({ name: 'g' })]);
    const url = { netd: `http://host.svc.internal:${port}/big.bin`, qemu: `http://10.0.2.2:${port}/big.bin` };
    const download = async (which: 'netd' | 'qemu') => {
      const r = await daemons[which].client.exec('g', {
        cmd: 'sh',
        args: ['-c', `wget -q -O /dev/null ${url[which]} && echo ok`],
        timeoutMs: 600_000,
      });
      if (r.stdout.trim() !== 'ok') throw new Error(`download through ${which} failed: ${r.stderr}`);
    };
    await download('netd');
    await download('qemu');
    const t: Record<'netd' | 'qemu', number[]> = { netd: [], qemu: [] };
    for (let i = 0; i < ROUNDS; i++) {
      for (const which of i % 2 === 0 ? (['netd', 'qemu'] as const) : (['qemu', 'netd'] as const)) {
        const t0 = performance.now();
        await download(which);
        t[which].push(performance.now() - t0);
      }
    }
    const mbs = (ms: number) => MIB / (ms / 1000);
    const [n, q] = [stats(t.netd).p50, stats(t.qemu).p50];
    const ratio = q / n;
    row(
      `guest download of ${MIB} MiB from a host loopback server (busybox wget, TCG): QEMU's user-mode network (median of ${ROUNDS})`,
      `${fmt(mbs(q), 1)} MiB/s`,
      '',
    );
    row(
      `the same through svc-netd (host:PORT, deny by default)`,
      `${fmt(mbs(n), 1)} MiB/s`,
      `${fmt(ratio * 100, 0)}% of QEMU's (target >= 80%: ${ratio >= 0.8 ? 'met' : 'missed'})`,
    );

    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    const exec = (which: 'netd' | 'qemu') => () =>
      post(agent, { socketPath: daemons[which].socket }, '/vms/g/exec?cmd=true');
    for (let i = 0; i < 10; i++) {
      await exec('netd')();
      await exec('qemu')();
    }
    const ex = await rounds({ qemu: exec('qemu'), netd: exec('netd') }, 200, 'qemu');
    const [en, eq] = [stats(ex.samples.netd), stats(ex.samples.qemu)];
    const paired = stats(ex.paired.netd).p50;
    row(
      "exec `true` through the daemon, TCG guest: QEMU's network / svc-netd",
      `p50 ${fmt(eq.p50, 2)} / ${fmt(en.p50, 2)} ms (n=200)`,
      `${paired >= 0 ? '+' : ''}${fmt(paired, 2)} ms paired p50`,
    );
    agent.destroy();

    const cpMib = 64;
    for (const which of ['netd', 'qemu'] as const) {
      await daemons[which].client.exec('g', {
        cmd: 'sh',
        args: ['-c', `head -c ${cpMib << 20} /dev/urandom > /tmp/out.bin`],
      });
    }
    const cp: Record<'netd' | 'qemu', number[]> = { netd: [], qemu: [] };
    for (let i = 0; i < 3; i++) {
      for (const which of i % 2 === 0 ? (['netd', 'qemu'] as const) : (['qemu', 'netd'] as const)) {
        const t0 = performance.now();
        await fetchAll({ socketPath: daemons[which].socket, path: '/vms/g/cp?path=/tmp/out.bin' });
        cp[which].push(performance.now() - t0);
      }
    }
    const [cn, cq] = [stats(cp.netd).p50, stats(cp.qemu).p50];
    row(
      `cp ${cpMib} MiB out of a TCG guest through the daemon (its agent's forward): QEMU's network / svc-netd (median of 3)`,
      `${fmt(cpMib / (cq / 1000), 1)} / ${fmt(cpMib / (cn / 1000), 1)} MiB/s`,
      `${fmt((cq / cn) * 100, 0)}%`,
    );
    results.net = {
      file_mib: MIB,
      rounds: ROUNDS,
      download_ms: t,
      download_mib_per_s: { qemu_user: mbs(q), netd: mbs(n) },
      netd_vs_qemu: ratio,
      exec_true_ms: { qemu_user: eq, netd: en, paired_p50: paired },
      cp_out_ms: cp,
    };
  } finally {
    for (const d of Object.values(daemons)) {
      await d.client.delete('g').catch(() => undefined);
      await d.stop();
    }
    web.close();
    rmSync(dir, { recursive: true, force: true });
  }
}
