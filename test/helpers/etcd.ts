import { spawn, type ChildProcess } from 'node:child_process';
import { accessSync, constants, mkdirSync, statSync } from 'node:fs';
import { request } from 'node:http';
import { join } from 'node:path';
import { freePorts } from '../../src/adapters/hypervisor/free-port.js';
import { tempDir } from './temp-dirs.js';

/** A member of a test's etcd: Debian's etcd-server, on loopback ports of its own. */
export interface EtcdMember {
  name: string;
  client: string;
  proc: ChildProcess;
  kill(): Promise<void>;
}

export interface TestEtcd {
  members: EtcdMember[];
  /** Every member's client URL (what `cluster.etcd` lists). */
  endpoints: string[];
  stop(): Promise<void>;
}

function healthy(url: string): Promise<boolean> {
  return new Promise((resolve) => {
    const req = request(`${url}/health`, { timeout: 1000 }, (res) => {
      let s = '';
      res.on('data', (c) => (s += c));
      res.on('end', () => resolve(res.statusCode === 200 && s.includes('"true"')));
    });
    req.on('error', () => resolve(false));
    req.on('timeout', () => req.destroy());
    req.end();
  });
}

const SHM = '/dev/shm';

function writableFolder(path: string): boolean {
  try {
    accessSync(path, constants.W_OK);
    return statSync(path).isDirectory();
  } catch {
    return false;
  }
}

/**
 * A folder for a test's etcd data on tmpfs (`/dev/shm`) where there is one: etcd fsyncs its log at
 * every write and vote, and beside the image builds of a CI run an fsync took seconds, so a leader
 * election outlasted a call's 5 s deadline (a CI run failed so). The tests are about svc, not about
 * the disk under etcd; the benchmarks keep theirs on disk.
 */
export function etcdTempDir(prefix: string): string {
  return tempDir(prefix, writableFolder(SHM) ? SHM : undefined);
}

/**
 * Starts an etcd of `size` members (`/usr/bin/etcd`, installed by scripts/ensure-host-deps.sh) in
 * `dir`, with short heartbeats so a lost member or quorum shows quickly; resolves once every
 * member says it is healthy.
 */
export async function startEtcd(dir: string, size = 3): Promise<TestEtcd> {
  // All different: a port just let go can be the next one the kernel hands out, and a member whose
  // two ports were one (or another member's) exits at once (a CI run failed so).
  const free = await freePorts(Array.from({ length: 2 * size }, () => 'tcp' as const));
  const ports = Array.from({ length: size }, (_, i) => ({ client: free[2 * i], peer: free[2 * i + 1] }));
  const names = ports.map((_, i) => `e${i + 1}`);
  const initial = ports.map((p, i) => `${names[i]}=http://127.0.0.1:${p.peer}`).join(',');
  const members: EtcdMember[] = ports.map((p, i) => {
    const data = join(dir, names[i]);
    mkdirSync(data, { recursive: true });
    const client = `http://127.0.0.1:${p.client}`;
    const proc = spawn(
      'etcd',
      [
        '--name',
        names[i],
        '--data-dir',
        data,
        '--listen-client-urls',
        client,
        '--advertise-client-urls',
        client,
        '--listen-peer-urls',
        `http://127.0.0.1:${p.peer}`,
        '--initial-advertise-peer-urls',
        `http://127.0.0.1:${p.peer}`,
        '--initial-cluster',
        initial,
        '--initial-cluster-state',
        'new',
        '--initial-cluster-token',
        `svc-test-${process.pid}`,
        '--heartbeat-interval',
        '100',
        '--election-timeout',
        '1000',
        '--log-level',
        'error',
      ],
      { stdio: 'ignore' },
    );
    const exited = new Promise<void>((r) => proc.once('exit', () => r()));
    return {
      name: names[i],
      client,
      proc,
      kill: async () => {
        if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL');
        await exited;
      },
    };
  });
  const until = Date.now() + 30_000;
  for (const m of members) {
    while (!(await healthy(m.client))) {
      if (Date.now() > until || m.proc.exitCode !== null) {
        await Promise.all(members.map((x) => x.kill()));
        throw new Error(`etcd member ${m.name} did not become healthy (is etcd-server installed?)`);
      }
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  return {
    members,
    endpoints: members.map((m) => m.client),
    stop: async () => void (await Promise.all(members.map((m) => m.kill()))),
  };
}

/** The token the tests' and benchmarks' nodes share. */
export const CLUSTER_TEST_TOKEN = 'cluster-token-for-the-tests';

/**
 * A node's config on loopback: its data and socket in `dir`, its API on `port` (what it
 * advertises) with `token`, and a `cluster` section on `etcd` with `cluster` on top; `extra` on
 * top of the rest (the hypervisor and its keys).
 */
export function nodeConfig(
  o: { dir: string; port: number; node: string; etcd: TestEtcd; token: string },
  extra: Record<string, unknown>,
  cluster: Record<string, unknown> = {},
): Record<string, unknown> {
  return {
    data_dir: join(o.dir, 'data'),
    socket: join(o.dir, 'svc.sock'),
    api: `127.0.0.1:${o.port}`,
    api_token: o.token,
    sandbox_metrics_enabled: false,
    create_from_snapshot: false,
    ...extra,
    cluster: {
      etcd: o.etcd.endpoints,
      node: o.node,
      advertise: `http://127.0.0.1:${o.port}`,
      token: CLUSTER_TEST_TOKEN,
      ...cluster,
    },
  };
}
