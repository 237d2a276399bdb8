import { randomBytes } from 'node:crypto';
import { expect } from 'chai';
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { join } from 'node:path';
import { freePort } from '../../src/adapters/hypervisor/free-port.js';
import { tempDir } from '../helpers/daemon.js';
import { CLUSTER_TEST_TOKEN, etcdTempDir, nodeConfig, startEtcd, type TestEtcd } from '../helpers/etcd.js';
import { call, ndjson, type Reply, type Target } from '../helpers/http.js';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { spawnSvcd, type SvcdProcess } from '../helpers/svcd-process.js';
import { openShell } from '../helpers/ws-shell.js';
import { launchBrowser, loggedIn } from '../helpers/browser.js';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { poll, waitUntil } from '../helpers/wait.js';

const TOKEN = 'user-token';
const SVC = fileURLToPath(new URL('../../src/bin/svc.js', import.meta.url));

interface Node {
  name: string;
  port: number;
  raw: Record<string, unknown>;
  dir: string;
  proc?: SvcdProcess;
  t: Target;
}

// A node not answering yet (starting, or restarted by the test) is waited for too: a check that
// throws is a "not yet" to waitUntil.
const until = (what: string, ms: number, ok: () => Promise<boolean>) => waitUntil(what, ok, { ms, every: 100 });

/**
 * Three svcd nodes (processes of their own, the fake hypervisor) on a real three-member etcd
 * (Debian's etcd-server, started here on loopback ports): docs/cluster.md. n3 runs real local
 * agents (its guests' commands run on this host, so only harmless ones are sent) and has room for
 * three VMs; n1 and n2 have stand-in guests and room for thirty each.
 */
describe('a cluster of svcd nodes on etcd (fake hypervisor, real etcd)', function () {
  this.timeout(120_000);
  let etcd: TestEtcd;
  const nodes: Node[] = [];
  const scratch = tempDir('svc-cluster-files-');

  const start = async (n: Node) => {
    n.proc = await spawnSvcd(n.dir, n.raw);
    expect(n.proc.proc.exitCode, n.proc.stderr()).to.equal(null);
  };
  const api = (n: Node, method: string, path: string, body?: unknown): Promise<Reply> => call(n.t, method, path, body);
  /** The CLI against n2. */
  const svc = (args: string[]) =>
    new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
      const p = spawn(process.execPath, [
        SVC,
        '--api',
        // host:port, as the daemon's own api key is written
        `127.0.0.1:${nodes[1].port}`,
        '--token',
        TOKEN,
        ...args,
      ]);
      let stdout = '';
      let stderr = '';
      p.stdout.on('data', (c) => (stdout += c));
      p.stderr.on('data', (c) => (stderr += c));
      p.on('close', (code) => resolve({ code: code ?? -1, stdout, stderr }));
    });

  before(async () => {
    etcd = await startEtcd(etcdTempDir('svc-etcd-'));
    for (const [i, name] of ['n1', 'n2', 'n3'].entries()) {
      const dir = tempDir(`svc-${name}-`);
      const port = await freePort('tcp');
      const raw = nodeConfig(
        { dir, port, node: name, etcd, token: TOKEN },
        {
          hypervisor: 'fake',
          test_mode: true,
          fake: { boot_delay: '20ms', agent: name === 'n3' },
          log_level: 'warn',
          build_default_image: false,
          // n2's MCP clients may drain nodes; the others' may not (the default).
          ...(name === 'n2' ? { mcp_nodes: true } : {}),
        },
        {
          lease_ttl: '2s',
          tags: [`zone=${i < 2 ? 'a' : 'b'}`],
          vm_slots: name === 'n3' ? 3 : 30,
          cpus: 64,
          memory_mb: 65536,
          disk_gb: 1000,
        },
      );
      nodes.push({ name, port, raw, dir, t: { host: '127.0.0.1', port, token: TOKEN } });
    }
    await Promise.all(nodes.map(start));
    await until('three ready nodes', 10_000, async () => {
      const r = await api(nodes[0], 'GET', '/nodes');
      return r.status === 200 && r.json.filter((n: { state: string }) => n.state === 'ready').length === 3;
    });
  });

  after(async () => {
    await Promise.all(nodes.map((n) => n.proc?.stop()));
    await etcd?.stop();
  });

  it('lists its nodes on every node, with capacity, tags and what is placed on each', async () => {
    for (const n of nodes) {
      const r = await api(n, 'GET', '/nodes');
      expect(r.status).to.equal(200);
      expect(r.json.map((x: { node: string }) => x.node)).to.deep.equal(['n1', 'n2', 'n3']);
    }
    const n3 = (await api(nodes[0], 'GET', '/nodes/n3')).json;
    expect(n3).to.include({
      node: 'n3',
      state: 'ready',
      hypervisor: 'fake',
      advertise: `http://127.0.0.1:${nodes[2].port}`,
    });
    expect(n3.capacity).to.include({ vm_slots: 3, cpus: 64 });
    expect(n3.tags).to.deep.equal({ zone: 'b' });
    expect((await api(nodes[0], 'GET', '/nodes/nope')).status).to.equal(404);
    const metrics = (await api(nodes[1], 'GET', '/metrics')).text;
    for (const n of ['n1', 'n2', 'n3']) expect(metrics).to.contain(`svc_cluster_node_up{node="${n}"} 1`);
    expect(metrics).to.contain('svc_cluster_node_vm_slots{node="n3"} 3');
    expect(metrics).to.contain('svc_cluster_stale 0');
    // Without the cluster's token or the user's, nothing.
    expect((await call({ ...nodes[0].t, token: 'wrong' }, 'GET', '/nodes')).status).to.equal(401);
  });

  it('places 70 concurrent creates on all three nodes without over-committing any: 63 fit, 7 are refused with 429', async () => {
    const answers = await Promise.all(
      Array.from({ length: 70 }, (_, i) => api(nodes[i % 3], 'POST', '/vms', { name: `c${i}`, memory_mb: 256 })),
    );
    const made = answers.filter((r) => r.status === 201);
    const refused = answers.filter((r) => r.status === 429);
    expect(
      made.length,
      answers
        .filter((r) => r.status !== 201 && r.status !== 429)
        .map((r) => r.text)
        .join('\n'),
    ).to.equal(63);
    expect(refused.length).to.equal(7);
    expect(refused[0].json.error).to.match(/no node has room|no room left/);
    const list = (await api(nodes[1], 'GET', '/vms')).json as { name: string; node: string; status: string }[];
    const by = (node: string) => list.filter((v) => v.node === node && /^c\d+$/.test(v.name)).length;
    expect([by('n1'), by('n2'), by('n3')]).to.deep.equal([30, 30, 3]);
    const view = (await api(nodes[2], 'GET', '/nodes')).json as { node: string; allocated: { vms: number } }[];
    expect(view.map((n) => n.allocated.vms)).to.deep.equal([30, 30, 3]);
    // Every node lists the same VMs, each once.
    for (const n of nodes) {
      const names = ((await api(n, 'GET', '/vms')).json as { name: string }[]).map((v) => v.name);
      expect(names.length).to.equal(new Set(names).size);
      expect(names.filter((x) => /^c\d+$/.test(x)).length).to.equal(63);
    }
    // Deletes through any node free the room: the 429s can be made now.
    const onN1 = list.filter((v) => v.node === 'n1').slice(0, 7);
    for (const v of onN1) expect((await api(nodes[2], 'DELETE', `/vms/${v.name}`)).status).to.equal(200);
    const again = await Promise.all(
      refused.map((_, i) => api(nodes[0], 'POST', '/vms', { name: `d${i}`, memory_mb: 256 })),
    );
    expect(again.map((r) => r.status)).to.deep.equal(Array(7).fill(201));
  });

  it('reserves room for forks and clones on the node of their source, all of them or none', async () => {
    const onN3 = ((await api(nodes[0], 'GET', '/vms')).json as { name: string; node: string }[]).filter(
      (v) => v.node === 'n3',
    );
    expect(onN3.length).to.equal(3);
    const [source, , gone] = onN3.map((v) => v.name);
    expect((await api(nodes[0], 'DELETE', `/vms/${gone}`)).status).to.equal(200);
    // nodes[1] answers from its watch of etcd, which follows a write made through another node
    // after a moment (docs/cluster.md): wait for it after each write.
    const allocated = async () =>
      ((await api(nodes[1], 'GET', '/nodes/n3')).json as { allocated: { vms: number } }).allocated.vms;
    const settles = (vms: number) => until(`n3 holds ${vms} VMs`, 5000, async () => (await allocated()) === vms);
    await settles(2);
    // Two forks need two slots; n3 has one: refused whole, through a node that does not own the source.
    const two = await api(nodes[0], 'POST', `/vms/${source}/fork`, { count: 2 });
    expect(two.status, two.text).to.equal(429);
    expect(two.json.error).to.match(/no room left for 2 forks of vm /);
    expect(await allocated()).to.equal(2);
    const names = ((await api(nodes[2], 'GET', '/vms')).json as { name: string }[]).map((v) => v.name);
    expect(names.filter((n) => n.startsWith(`${source}-fork-`))).to.deep.equal([]);
    const one = await api(nodes[1], 'POST', `/vms/${source}/fork`, {});
    expect(one.status, one.text).to.equal(201);
    expect((await api(nodes[0], 'GET', `/vms/${source}-fork-1`)).json).to.include({ node: 'n3' });
    await settles(3);
    // A clone is a create from its template, placed where the template is: n3 is full now.
    const clone = await api(nodes[0], 'POST', `/vms/${source}/clone`, { name: 'n3-clone' });
    expect(clone.status, clone.text).to.equal(429);
    expect((await api(nodes[0], 'GET', '/vms/n3-clone')).status).to.equal(404);
    expect(await allocated()).to.equal(3);
  });

  it('makes a name created on two nodes at once exactly once', async () => {
    // Room on n1 and n2 first (both are full).
    const list = (await api(nodes[0], 'GET', '/vms')).json as { name: string; node: string }[];
    for (const node of ['n1', 'n2'])
      for (const v of list.filter((x) => x.node === node).slice(0, 5))
        expect((await api(nodes[2], 'DELETE', `/vms/${v.name}`)).status).to.equal(200);
    for (let round = 0; round < 5; round++) {
      const [a, b] = await Promise.all([
        api(nodes[0], 'POST', '/vms', { name: `same${round}`, memory_mb: 256 }),
        api(nodes[1], 'POST', '/vms', { name: `same${round}`, memory_mb: 256 }),
      ]);
      expect([a.status, b.status].sort(), a.text + b.text).to.deep.equal([201, 409]);
      expect([a, b].find((r) => r.status === 409)!.json.error).to.contain(`same${round} already exists`);
    }
    // n3 lists from its watch of etcd, a moment behind the last create (docs/cluster.md).
    const same = async () =>
      ((await api(nodes[2], 'GET', '/vms')).json as { name: string }[]).filter((v) => v.name.startsWith('same'));
    await until('n3 lists the five', 5000, async () => (await same()).length >= 5);
    expect((await same()).length).to.equal(5);
  });

  it('places a create that binds egress secrets or shares host folders on the node called, where they are, over the least full', async () => {
    type View = { node: string; allocated: { vms: number } };
    const vmsOf = async () =>
      Object.fromEntries(((await api(nodes[0], 'GET', '/nodes')).json as View[]).map((n) => [n.node, n.allocated.vms]));
    // Room on both n1 and n2 (30 slots each), so the rule alone would pick the less full one.
    const list = (await api(nodes[0], 'GET', '/vms')).json as { name: string; node: string }[];
    for (const node of ['n1', 'n2'])
      if ((await vmsOf())[node] >= 30) {
        const filler = list.find((v) => v.node === node && /^[cd]\d+$/.test(v.name))!;
        expect((await api(nodes[2], 'DELETE', `/vms/${filler.name}`)).status).to.equal(200);
      }
    const had = await vmsOf();
    // The node the rule would not pick (more VMs, or the later name when even): called there.
    const called = had.n1 > had.n2 ? 0 : 1;
    const node = nodes[called];
    expect((await api(node, 'POST', '/secrets', { name: 'here-only', value: 'v' })).status).to.equal(200);
    const r = await api(node, 'POST', '/vms', {
      name: 'with-secrets',
      memory_mb: 256,
      egress_secrets: [{ secret: 'here-only', hosts: ['api.example.com'] }],
    });
    expect(r.status, r.text).to.equal(201);
    expect((await api(nodes[2], 'GET', '/vms/with-secrets')).json).to.include({ node: node.name });
    // So does a create whose SOCKS proxy takes its password from a host secret.
    const proxied = await api(node, 'POST', '/vms', {
      name: 'with-proxy',
      memory_mb: 256,
      egress: { default: 'allow', proxy: { address: 'socks.example.com:1080', username: 'u', secret: 'here-only' } },
    });
    expect(proxied.status, proxied.text).to.equal(201);
    expect((await api(nodes[2], 'GET', '/vms/with-proxy')).json).to.include({ node: node.name });
    expect((await api(nodes[2], 'DELETE', '/vms/with-proxy')).status).to.equal(200);
    // And a create that shares a host folder of the node called (E2B's volumes are such folders).
    const share = join(`${node.raw.data_dir as string}-e2b-volumes`, 'vol-00000000000a');
    mkdirSync(share, { recursive: true });
    const shared = await api(node, 'POST', '/vms', {
      name: 'with-share',
      memory_mb: 256,
      mounts: [{ host: share, guest: '/mnt/share' }],
    });
    expect(shared.status, shared.text).to.equal(201);
    expect((await api(nodes[2], 'GET', '/vms/with-share')).json).to.include({ node: node.name });
    expect((await api(nodes[2], 'DELETE', '/vms/with-share')).status).to.equal(200);
    // A clone is made where its template is: the folders of the node called are not there.
    const other = nodes[1 - called].name;
    const far = await api(node, 'POST', '/vms', { name: 'far-tpl', memory_mb: 256, persistent: true, node: other });
    expect(far.status, far.text).to.equal(201);
    expect((await api(nodes[2], 'POST', '/vms/far-tpl/shutdown')).status).to.equal(200);
    const cloned = await api(node, 'POST', '/vms', { from: 'far-tpl', mounts: [{ host: share, guest: '/mnt/share' }] });
    expect(cloned.status, cloned.text).to.equal(400);
    expect(cloned.json.error).to.equal(
      `a clone of far-tpl is made on node ${other}, where its template is, and the host folders it asks for are this node's (${node.name}): ask node ${other} for it, with folders of that node`,
    );
    expect((await api(nodes[2], 'DELETE', '/vms/far-tpl')).status).to.equal(200);
    const plain = await api(node, 'POST', '/vms', { name: 'without-secrets', memory_mb: 256 });
    expect(plain.status, plain.text).to.equal(201);
    expect((await api(nodes[2], 'GET', '/vms/without-secrets')).json.node, 'the rule alone').to.not.equal(node.name);
    for (const n of ['with-secrets', 'without-secrets'])
      expect((await api(nodes[2], 'DELETE', `/vms/${n}`)).status).to.equal(200);
  });

  it('serves exec, a streamed exec, cp and a shell of a VM through a node that does not own it', async () => {
    const all = (await api(nodes[0], 'GET', '/vms')).json as { name: string; node: string }[];
    for (const v of all.filter((x) => x.node === 'n3'))
      expect((await api(nodes[0], 'DELETE', `/vms/${v.name}`)).status).to.equal(200);
    const made = await api(nodes[0], 'POST', '/vms', { name: 'g', node: 'n3' });
    expect(made.status, made.text).to.equal(201);
    // The create's answer names its node, as every answer about a VM does.
    expect(made.json).to.include({ name: 'g', node: 'n3' });
    expect((await api(nodes[1], 'GET', '/vms/g')).json).to.include({ name: 'g', status: 'running' });

    const x = await api(nodes[0], 'POST', `/vms/g/exec?cmd=echo&args=${encodeURIComponent('through n1')}`);
    expect(x.status, x.text).to.equal(200);
    expect(x.json).to.include({ exit_code: 0, stdout: 'through n1\n' });
    // n1 sends the call on before its routes (docs/cluster.md, "The hop"), but checks the token
    // first: a wrong one is refused there, and nothing runs on n3.
    const marker = join(scratch, 'not-run');
    const refused = await call({ ...nodes[0].t, token: 'wrong' }, 'POST', `/vms/g/exec?cmd=touch&args=${marker}`);
    expect(refused.status).to.equal(401);
    expect(refused.headers['www-authenticate']).to.match(/^Bearer/);
    expect(refused.json.code).to.equal('unauthenticated');
    expect(existsSync(marker)).to.equal(false);
    const counted = (await api(nodes[0], 'GET', '/metrics')).text;
    expect(counted).to.match(
      /svc_http_requests_total\{method="POST",route="sent to another node",status="200"\} [1-9]/,
    );
    expect(counted).to.match(/svc_http_requests_total\{method="POST",route="sent to another node",status="401"\} 1\n/);

    const script = encodeURIComponent('echo one; echo two >&2');
    const streamed = await call(nodes[1].t, 'POST', `/vms/g/exec?cmd=sh&args=-c&args=${script}&buffered=0`);
    expect(streamed.status, streamed.text).to.equal(200);
    const frames = streamed.text
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { type: string; data?: string; exit_code?: number });
    expect(frames.map((f) => f.type)).to.include.members(['started', 'stdout', 'stderr', 'exit']);
    expect(frames.at(-1)).to.include({ type: 'exit', exit_code: 0 });

    // A file up and down through n2 (the local agent writes into a scratch folder of this test).
    const dir = join(scratch, 'cp');
    mkdirSync(dir, { recursive: true });
    const body = Buffer.from('copied across nodes\n'.repeat(1000));
    const up = await call(nodes[1].t, 'PUT', `/vms/g/cp?path=${encodeURIComponent(join(dir, 'f.txt'))}`, body, {
      'content-type': 'application/octet-stream',
    });
    expect(up.status, up.text).to.be.oneOf([200, 201, 204]);
    expect(readFileSync(join(dir, 'f.txt')).equals(body)).to.equal(true);
    // A large one: n2 moves its body to n3 socket to socket (the splice helper), n3 on to the agent.
    const large = randomBytes(9 << 20);
    const bigUp = await call(nodes[1].t, 'PUT', `/vms/g/cp?path=${encodeURIComponent(join(dir, 'large.bin'))}`, large, {
      'content-type': 'application/octet-stream',
    });
    expect(bigUp.status, bigUp.text).to.equal(204);
    expect(readFileSync(join(dir, 'large.bin')).equals(large)).to.equal(true);
    // And back: n3's answer moved to the caller's connection by n2's helper.
    const bigDown = await new Promise<{ status: number; body: Buffer }>((resolve, reject) => {
      const path = `/vms/g/cp?path=${encodeURIComponent(join(dir, 'large.bin'))}`;
      const headers = { authorization: `Bearer ${TOKEN}` };
      request({ host: '127.0.0.1', port: nodes[1].port, path, headers }, (res) => {
        const parts: Buffer[] = [];
        res.on('data', (c: Buffer) => parts.push(c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(parts) }));
        res.on('error', reject);
      })
        .on('error', reject)
        .end();
    });
    expect(bigDown.status).to.equal(200);
    expect(bigDown.body.equals(large)).to.equal(true);
    writeFileSync(join(dir, 'back.txt'), 'from the guest\n');
    const down = await call(nodes[1].t, 'GET', `/vms/g/cp?path=${encodeURIComponent(join(dir, 'back.txt'))}`);
    expect(down.status, down.text).to.equal(200);
    expect(down.text).to.equal('from the guest\n');

    const sh = await openShell(`ws://127.0.0.1:${nodes[0].port}/vms/g/shell`, { authorization: `Bearer ${TOKEN}` });
    sh.send('echo shell-through-$((6*7))\n');
    await sh.waitFor(/shell-through-42/);
    sh.send('exit\n');
    expect((await sh.exit).exit_code).to.equal(0);
  });

  it("streams the whole cluster's changes from any node's /events", async () => {
    const lines: { event: string; vm?: { name: string; node: string; status: string }; name?: string }[] = [];
    const req = request({
      host: '127.0.0.1',
      port: nodes[0].port,
      path: '/events',
      headers: { authorization: `Bearer ${TOKEN}` },
    });
    const opened = new Promise<void>((resolve, reject) => {
      req.on('response', (res) => {
        let buf = '';
        res.on('data', (c: Buffer) => {
          buf += c.toString();
          for (let i = buf.indexOf('\n'); i >= 0; i = buf.indexOf('\n')) {
            lines.push(JSON.parse(buf.slice(0, i)));
            buf = buf.slice(i + 1);
          }
        });
        resolve();
      });
      req.on('error', reject);
    });
    req.end();
    try {
      await opened;
      await until('the snapshot', 5000, async () => lines.length > 0);
      expect(lines[0].event).to.equal('snapshot');
      // A VM made and removed on n2, through n2 itself: n1's stream says so, naming the node.
      const room = ((await api(nodes[1], 'GET', '/vms')).json as { name: string; node: string }[]).find(
        (v) => v.node === 'n2',
      )!;
      expect((await api(nodes[1], 'DELETE', `/vms/${room.name}`)).status).to.equal(200);
      expect((await api(nodes[1], 'POST', '/vms', { name: 'ev', node: 'n2', memory_mb: 256 })).status).to.equal(201);
      expect((await api(nodes[1], 'DELETE', '/vms/ev')).status).to.equal(200);
      await until('ev made and removed on n1', 5000, async () =>
        lines.some((l) => l.event === 'removed' && l.name === 'ev'),
      );
      expect(lines.some((l) => l.event === 'removed' && l.name === room.name)).to.equal(true);
      const seen = lines.filter((l) => l.vm?.name === 'ev');
      expect(seen.every((l) => l.vm!.node === 'n2')).to.equal(true);
      expect(seen.map((l) => l.vm!.status)).to.include('running');
    } finally {
      req.destroy();
    }
  });

  it('works from the CLI against any node: svc nodes, svc new --node, svc ls with the node', async () => {
    const n = await svc(['nodes']);
    expect(n.code, n.stderr).to.equal(0);
    expect(n.stdout).to.match(/^NODE\s+STATE\s+VMS/);
    expect(n.stdout).to.match(/^n3\s+ready\s+\d+\/3\s/m);
    const one = await svc(['nodes', 'n1']);
    expect(one.stdout).to.match(/^state\s+ready$/m);
    expect(one.stdout).to.contain('zone=a');
    const made = await svc(['new', 'cli-made', '--node-selector', 'zone=b', '--memory', '256']);
    expect(made.code, made.stderr).to.equal(0);
    expect((await api(nodes[0], 'GET', '/vms/cli-made')).json).to.include({ node: 'n3', status: 'running' });
    const ls = await svc(['ls']);
    expect(ls.stdout).to.match(/^NAME\s+NODE\s+STATUS/);
    expect(ls.stdout).to.match(/^cli-made\s+n3\s+running/m);
    expect((await svc(['rm', 'cli-made'])).code).to.equal(0);
  });

  it("shows every node's VMs with their node in the dashboard of any node (a real browser)", async () => {
    const browser = await launchBrowser();
    try {
      const page = await loggedIn(browser, `http://127.0.0.1:${nodes[0].port}/ui/`, TOKEN);
      await page.waitForSelector('[data-test=vm-table] [data-test=node]');
      const rows = (await page.$$eval('[data-test=vm-table] tbody tr', (trs) =>
        trs.map((tr) => [tr.getAttribute('data-vm'), tr.querySelector('[data-test=node]')?.textContent]),
      )) as [string, string][];
      const listed = ((await api(nodes[0], 'GET', '/vms')).json as { name: string; node: string }[]).map((v) => [
        v.name,
        v.node,
      ]);
      expect(rows).to.deep.equal(listed);
      expect(new Set(rows.map(([, n]) => n))).to.deep.equal(new Set(['n1', 'n2', 'n3']));
      // A VM's own page names its node too: one on n3, opened from n1's dashboard.
      const [far] = rows.find(([, n]) => n === 'n3')!;
      await page.click(`tr[data-vm="${far}"] a`);
      await page.waitForSelector('[data-test=fields]');
      const fields = await page.$eval('[data-test=fields]', (el) => el.textContent ?? '');
      expect(fields).to.match(/noden3/);
      // Moved from its page: a running persistent VM on n3 goes to n2 (suspended for it, restored there).
      const made = await api(nodes[2], 'POST', '/vms', { name: 'ui-mv', node: 'n3', persistent: true, memory_mb: 256 });
      expect(made.status, made.text).to.equal(201);
      await page.evaluate(() => (location.hash = '#/vm/ui-mv'));
      await page.waitForSelector('[data-test=do-move]');
      await page.click('[data-test=do-move]');
      await page.waitForSelector('[data-test=move-node]');
      const offered = await page.$$eval('[data-test=move-node] option', (os) => os.map((o) => o.textContent));
      expect(offered).to.deep.equal(['n1', 'n2']);
      await page.select('[data-test=move-node]', 'n2');
      await page.click('[data-test=confirm-ok]');
      // The page follows the cluster's changes: on n2, then running there, and the move's answer in.
      await page.waitForFunction(
        () => {
          const text = document.querySelector('[data-test=fields]')?.textContent ?? '';
          const button = document.querySelector('[data-test=do-move]');
          return /noden2/.test(text) && /statusrunning/.test(text) && button?.textContent === 'move';
        },
        { timeout: 20_000 },
      );
      expect((await api(nodes[0], 'GET', '/vms/ui-mv')).json).to.include({ node: 'n2', status: 'running' });
      expect(await page.$('[data-test=warning]')).to.equal(null);
      expect((await api(nodes[0], 'DELETE', '/vms/ui-mv')).status).to.equal(200);
    } finally {
      await browser.close();
    }
  });

  it('moves a stopped and a suspended VM to another node through a third, refuses what cannot move, and drains a node', async () => {
    const [n1, n2, n3] = nodes;
    const vmDir = (n: Node, vm: string) => join(n.raw.data_dir as string, 'vms', vm);
    const allocated = async (node: string) =>
      ((await api(n3, 'GET', `/nodes/${node}`)).json as { allocated: { vms: number } }).allocated.vms;
    // Room on n1 and n2 first (the creates above filled them).
    const list = (await api(n1, 'GET', '/vms')).json as { name: string; node: string }[];
    for (const node of ['n1', 'n2'])
      for (const v of list.filter((x) => x.node === node).slice(0, 4))
        expect((await api(n3, 'DELETE', `/vms/${v.name}`)).status).to.equal(200);
    for (const name of ['mv-stopped', 'mv-susp', 'mv-run']) {
      const made = await api(n1, 'POST', '/vms', { name, node: 'n1', persistent: true, memory_mb: 256 });
      expect(made.status, made.text).to.equal(201);
    }
    expect((await api(n3, 'POST', '/vms/mv-stopped/shutdown')).status).to.equal(200);
    expect((await api(n3, 'POST', '/vms/mv-susp/suspend')).status).to.equal(200);
    // An edit through a node that does not own the VM: its body goes on, and n1's room follows it.
    const memory = async () =>
      ((await api(n3, 'GET', '/nodes/n1')).json as { allocated: { memory_mb: number } }).allocated.memory_mb;
    const memBefore = await memory();
    const edited = await api(n3, 'PATCH', '/vms/mv-stopped', { memory_mb: 320 });
    expect(edited.status, edited.text).to.equal(200);
    expect(edited.json).to.include({ name: 'mv-stopped', memory_mb: 320 });
    await poll(async () => (await memory()) === memBefore + 64, { every: 100 });
    expect(await memory()).to.equal(memBefore + 64);
    // An edit its node has no room for is refused before anything changes (n1 has 65536 MB).
    const tooBig = await api(n3, 'PATCH', '/vms/mv-stopped', { memory_mb: 70_000 });
    expect(tooBig.status, tooBig.text).to.equal(429);
    expect(tooBig.json.error).to.match(/node n1 has no room left for vm mv-stopped at 1 cpu\(s\), 70000 MB/);
    expect((await api(n1, 'GET', '/vms/mv-stopped')).json).to.include({ memory_mb: 320 });
    expect(await memory()).to.equal(memBefore + 64);
    expect((await api(n2, 'PATCH', '/vms/mv-susp', { memory_mb: 320 })).json.error).to.match(/is suspended/);
    const [on1, on2] = [await allocated('n1'), await allocated('n2')];
    // Snapshots go with their VM (docs/snapshots.md): one of the stopped VM, one of the suspended (its memory).
    for (const [vm, snap] of [
      ['mv-stopped', 'before'],
      ['mv-susp', 'held'],
    ]) {
      const taken = await api(n3, 'POST', `/vms/${vm}/snapshots`, { name: snap });
      expect(taken.status, taken.text).to.equal(201);
    }

    // A paused VM moves paused: suspended, restored paused on n2 (no pause there: its guest never
    // ran); and back, running.
    expect((await api(n3, 'POST', '/vms/mv-run/pause')).status).to.equal(200);
    const pausedMove = await api(n3, 'POST', '/vms/mv-run/move', { node: 'n2' });
    expect(pausedMove.status, pausedMove.text).to.equal(200);
    expect(pausedMove.json).to.include({ name: 'mv-run', node: 'n2', status: 'paused' });
    expect(pausedMove.json).not.to.have.property('warning');
    const onN2 = ((await api(n2, 'GET', '/activity?limit=100')).json.events as { action: string; target: string }[])
      .filter((e) => e.target === 'mv-run')
      .map((e) => e.action);
    expect(onN2.slice(-1)).to.deep.equal(['restore']);
    expect(onN2).not.to.include('pause');
    expect((await api(n1, 'GET', '/vms/mv-run')).json).to.include({ node: 'n2', status: 'paused' });
    expect(readFileSync(join(vmDir(n2, 'mv-run'), 'serial.log'), 'utf8')).to.match(/restored from snapshot\n$/);
    expect((await api(n3, 'POST', '/vms/mv-run/resume')).status).to.equal(200);
    const home = await api(n3, 'POST', '/vms/mv-run/move', { node: 'n1' });
    expect(home.json, home.text).to.include({ node: 'n1', status: 'running' });

    // Refused, each with its reason, and nothing changes.
    const refusals: [string, unknown, number, RegExp][] = [
      ['mv-stopped', { node: 'n1' }, 400, /is on node n1 already/],
      ['mv-stopped', { node: 'nowhere' }, 404, /no node nowhere/],
      ['mv-stopped', { node: 7 }, 400, /node must be a node name/],
      ['mv-stopped', { node: 'n2', now: true }, 400, /unknown move field/],
      ['ghost', { node: 'n2' }, 404, /ghost not found/],
    ];
    for (const [vm, body, status, msg] of refusals) {
      const r = await api(n3, 'POST', `/vms/${vm}/move`, body);
      expect(r.status, `${vm} ${JSON.stringify(body)}: ${r.text}`).to.equal(status);
      expect(r.json.error).to.match(msg);
    }

    // Through n3, which has neither: the stopped VM goes from n1 to n2 with its files.
    const log = readFileSync(join(vmDir(n1, 'mv-stopped'), 'serial.log'), 'utf8');
    const moved = await api(n3, 'POST', '/vms/mv-stopped/move', { node: 'n2' });
    expect(moved.status, moved.text).to.equal(200);
    expect(moved.json).to.include({ name: 'mv-stopped', node: 'n2', status: 'stopped', persistent: true });
    expect(readFileSync(join(vmDir(n2, 'mv-stopped'), 'serial.log'), 'utf8')).to.equal(log);
    expect(() => readFileSync(join(vmDir(n1, 'mv-stopped'), 'serial.log'))).to.throw(/ENOENT/);
    for (const n of nodes) expect((await api(n, 'GET', '/vms/mv-stopped')).json).to.include({ node: 'n2' });
    expect([await allocated('n1'), await allocated('n2')]).to.deep.equal([on1 - 1, on2 + 1]);
    // Its snapshot came along, files and all: listed through another node, reverted to on n2.
    const listed = await api(n1, 'GET', '/vms/mv-stopped/snapshots');
    expect(
      (listed.json as { name: string }[]).map((x) => x.name),
      listed.text,
    ).to.deep.equal(['before']);
    expect(readdirSync(join(vmDir(n2, 'mv-stopped'), 'snapshots'))).to.deep.equal(['before.json']);
    // Made smaller, it goes back to the snapshot's 320 MB only where n2 has room for that.
    const n2Memory = async () =>
      ((await api(n3, 'GET', '/nodes/n2')).json as { allocated: { memory_mb: number } }).allocated.memory_mb;
    const n2Before = await n2Memory();
    expect((await api(n3, 'PATCH', '/vms/mv-stopped', { memory_mb: 256 })).status).to.equal(200);
    await until('n2 holds the smaller shape', 10_000, async () => (await n2Memory()) === n2Before - 64);
    const free = 65_536 - (await n2Memory());
    const filler = await api(n3, 'POST', '/vms', { name: 'mv-filler', node: 'n2', memory_mb: free - 32 });
    expect(filler.status, filler.text).to.equal(201);
    const noRoom = await api(n3, 'POST', '/vms/mv-stopped/snapshots/before/revert');
    expect(noRoom.status, noRoom.text).to.equal(429);
    expect(noRoom.json.error).to.match(/node n2 has no room left for vm mv-stopped at 1 cpu\(s\), 320 MB/);
    expect((await api(n2, 'GET', '/vms/mv-stopped')).json).to.include({ status: 'stopped', memory_mb: 256 });
    expect((await api(n3, 'DELETE', '/vms/mv-filler')).status).to.equal(200);
    const reverted = await api(n3, 'POST', '/vms/mv-stopped/snapshots/before/revert');
    expect(reverted.status, reverted.text).to.equal(200);
    expect(reverted.json).to.include({ status: 'stopped', memory_mb: 320 });
    const started = await api(n1, 'POST', '/vms/mv-stopped/start');
    expect(started.status, started.text).to.equal(200);
    expect((await api(n1, 'GET', '/vms/mv-stopped')).json).to.include({ node: 'n2', status: 'running' });

    // The suspended one is restored from its saved state on n2.
    expect((await api(n2, 'POST', '/vms/mv-susp/move', { node: 'n2' })).json).to.include({
      node: 'n2',
      status: 'suspended',
    });
    const restored = await api(n3, 'POST', '/vms/mv-susp/restore');
    expect(restored.status, restored.text).to.equal(200);
    // A verb's answer names the node the VM is on now (moved: n2's record of it, not n1's).
    expect(restored.json).to.include({ name: 'mv-susp', node: 'n2', status: 'running' });
    expect(readFileSync(join(vmDir(n2, 'mv-susp'), 'serial.log'), 'utf8')).to.match(/restored from snapshot\n$/);
    // Its snapshot holds its memory on n2 as it did on n1: a revert resumes the guest.
    const held = await api(n1, 'POST', '/vms/mv-susp/snapshots/held/revert');
    expect(held.status, held.text).to.equal(200);
    expect(held.json).to.include({ status: 'running' });
    expect(held.json).not.to.have.property('warning');

    // Only a node sends a VM, and only plain files of it.
    const put = (token: string, hop: boolean) =>
      call({ ...n2.t, token }, 'PUT', '/cluster/vms/intruder', Buffer.from('not a tar'), {
        'content-type': 'application/x-tar',
        ...(hop ? { 'x-svc-node-hop': 'n1' } : {}),
      });
    expect((await put(TOKEN, true)).status).to.equal(403);
    expect((await put(CLUSTER_TEST_TOKEN, false)).status).to.equal(403);
    const bad = await put(CLUSTER_TEST_TOKEN, true);
    expect(bad.status, bad.text).to.equal(400);
    expect(existsSync(vmDir(n2, 'intruder'))).to.equal(false);

    // Drained, n1 sends what can move elsewhere (the running one suspended, and restored where it
    // went), keeps its ephemeral VMs (saying why) and takes no create.
    expect((await api(n3, 'POST', '/vms/mv-stopped/shutdown')).status).to.equal(200);
    const back = await svc(['move', 'mv-stopped', 'n1']);
    expect(back.code, back.stderr).to.equal(0);
    expect(back.stdout).to.equal('mv-stopped moved to node n1 (stopped)\n');
    const drained = await api(n3, 'POST', '/nodes/n1/drain');
    expect(drained.status, drained.text).to.equal(200);
    // Where the placement rule puts it: the least full of the others.
    const went = (drained.json.moved as { name: string; node: string }[]).find((m) => m.name === 'mv-stopped');
    expect(went?.node).to.be.oneOf(['n2', 'n3']);
    expect((await api(n1, 'GET', '/vms/mv-stopped')).json).to.include({ node: went!.node, status: 'stopped' });
    const ran = (drained.json.moved as { name: string; node: string }[]).find((m) => m.name === 'mv-run');
    expect(ran, drained.text).to.deep.equal({ name: 'mv-run', node: ran?.node });
    expect(ran?.node).to.be.oneOf(['n2', 'n3']);
    expect((await api(n1, 'GET', '/vms/mv-run')).json).to.include({ node: ran!.node, status: 'running' });
    expect(
      readFileSync(
        join(
          vmDir(
            nodes.find((x) => x.name === ran!.node)!,
            'mv-run',
          ),
          'serial.log',
        ),
        'utf8',
      ),
    ).to.match(/restored from snapshot\n$/);
    for (const r of drained.json.refused as { name: string; reason: string }[])
      expect(r.reason).to.equal(
        `vm ${r.name} is ephemeral: it cannot be suspended for a move, and is removed when stopped; it stays`,
      );
    await until(
      'n1 says it is drained',
      10_000,
      async () => (await api(n3, 'GET', '/nodes/n1')).json.draining === true,
    );
    const refused = await api(n3, 'POST', '/vms', { name: 'to-drained', node: 'n1' });
    expect(refused.status, refused.text).to.equal(429);
    expect(refused.json.error).to.match(/node n1 is drained/);
    const undo = await svc(['drain', 'n1', '--undo']);
    expect(undo.stdout, undo.stderr).to.equal('node n1 takes creates again\n');
    await until(
      'n1 takes creates again',
      10_000,
      async () => (await api(n3, 'GET', '/nodes/n1')).json.draining === undefined,
    );
    // Without a node, the VM goes where the placement rule puts it among the others (running, as it was).
    const anywhere = await svc(['move', 'mv-susp']);
    expect(anywhere.code, anywhere.stderr).to.equal(0);
    expect(anywhere.stdout).to.match(/^mv-susp moved to node n[13] \(running\)\n$/);
    for (const vm of ['mv-stopped', 'mv-susp', 'mv-run'])
      expect((await api(n3, 'DELETE', `/vms/${vm}`)).status).to.equal(200);
  });

  it('offers an AI agent the cluster through MCP on any node: its nodes, a create on one, a move, a drain only where allowed', async () => {
    const [n1, n2] = nodes;
    type ToolResult = { isError?: boolean; content: { text: string }[] };
    const textOf = (r: unknown) => (r as ToolResult).content.map((c) => c.text).join('');
    const mcp = async (n: Node) => {
      const c = new Client({ name: 'svc-test', version: '1.0.0' });
      await c.connect(
        new StreamableHTTPClientTransport(new URL(`http://127.0.0.1:${n.port}/mcp`), {
          requestInit: { headers: { Authorization: `Bearer ${TOKEN}` } },
        }),
      );
      return c;
    };
    // eslint-disable-next-line @typescript-eslint/no-explicit-any
    const ok = async (c: Client, name: string, args: Record<string, unknown> = {}): Promise<any> => {
      const r = await c.callTool({ name, arguments: args });
      expect((r as ToolResult).isError, textOf(r)).to.not.equal(true);
      return JSON.parse(textOf(r));
    };
    const on1 = await mcp(n1);
    const on2 = await mcp(n2);
    try {
      const names = (await on1.listTools()).tools.map((t) => t.name);
      expect(names).to.include.members(['list_nodes', 'move_vm', 'create_vm']);
      expect(names, 'drains are for mcp_nodes: true only').to.not.include.members(['drain_node', 'undrain_node']);
      expect((await on2.listTools()).tools.map((t) => t.name)).to.include.members(['drain_node', 'undrain_node']);
      const listed = (await ok(on1, 'list_nodes')) as { node: string; state: string }[];
      expect(listed.map((x) => [x.node, x.state])).to.deep.equal([
        ['n1', 'ready'],
        ['n2', 'ready'],
        ['n3', 'ready'],
      ]);

      // Made on the node it names, moved running to another through a third node's MCP.
      const made = await ok(on2, 'create_vm', { name: 'mcp-mv', node: 'n1', persistent: true, memory_mb: 256 });
      expect(made).to.include({ name: 'mcp-mv', node: 'n1', status: 'running' });
      const moved = await ok(on2, 'move_vm', { name: 'mcp-mv', node: 'n2' });
      expect(moved).to.include({ name: 'mcp-mv', node: 'n2', status: 'running' });
      expect((await api(n1, 'GET', '/vms/mcp-mv')).json).to.include({ node: 'n2', status: 'running' });
      const again = await on1.callTool({ name: 'move_vm', arguments: { name: 'mcp-mv', node: 'n2' } });
      expect((again as ToolResult).isError).to.equal(true);
      expect(textOf(again)).to.match(/is on node n2 already .*HTTP 400/);

      // A drain through n2's MCP: n1 sends its persistent VMs away and takes no create; undone, it does.
      const drained = await ok(on2, 'drain_node', { node: 'n1' });
      expect(drained.node).to.equal('n1');
      for (const m of drained.moved as { name: string; node: string }[]) {
        expect(m.node).to.be.oneOf(['n2', 'n3']);
        expect((await api(n1, 'GET', `/vms/${m.name}`)).json).to.include({ node: m.node });
      }
      await until('n1 is drained', 10_000, async () =>
        ((await ok(on1, 'list_nodes')) as { node: string; draining?: boolean }[]).some(
          (x) => x.node === 'n1' && x.draining === true,
        ),
      );
      expect(await ok(on2, 'undrain_node', { node: 'n1' })).to.include({ node: 'n1' });
      await until(
        'n1 takes creates again',
        10_000,
        async () => (await api(n1, 'GET', '/nodes/n1')).json.draining === undefined,
      );

      // `svc mcp` (stdio) finds out that its daemon is a node, and offers drains only when told.
      const stdio = new Client({ name: 'svc-test', version: '1.0.0' });
      await stdio.connect(
        new StdioClientTransport({
          command: process.execPath,
          args: [SVC, '--api', `127.0.0.1:${n1.port}`, '--token', TOKEN, 'mcp', '--allow-node-changes'],
          stderr: 'ignore',
        }),
      );
      try {
        const tools = (await stdio.listTools()).tools;
        expect(tools.map((t) => t.name)).to.include.members(['list_nodes', 'move_vm', 'drain_node']);
        expect(tools.find((t) => t.name === 'create_vm')!.inputSchema.properties).to.have.property('node_selector');
        expect((await ok(stdio, 'get_vm', { name: 'mcp-mv' })).node).to.equal('n2');
      } finally {
        await stdio.close();
      }
      expect((await ok(on1, 'delete_vm', { name: 'mcp-mv' })).name).to.equal('mcp-mv');
    } finally {
      await on1.close();
      await on2.close();
    }
  });

  it("drains a node and ends its drain from the dashboard's Nodes page (a real browser)", async () => {
    const [n1, n2] = nodes;
    for (const [name, persistent] of [
      ['ui-drain', true],
      ['ui-stay', false],
    ] as const) {
      const made = await api(n1, 'POST', '/vms', { name, node: 'n2', persistent, memory_mb: 256 });
      expect(made.status, made.text).to.equal(201);
    }
    const browser = await launchBrowser();
    try {
      const page = await loggedIn(browser, `http://127.0.0.1:${n1.port}/ui/#/nodes`, TOKEN);
      await page.waitForSelector('[data-test=nodes] tr[data-node=n3]');
      const rows = (await page.$$eval('[data-test=nodes] tbody tr', (trs) =>
        trs.map((tr) => [tr.getAttribute('data-node'), tr.querySelector('[data-test=state]')?.textContent]),
      )) as [string, string][];
      expect(rows).to.deep.equal([
        ['n1', 'ready'],
        ['n2', 'ready'],
        ['n3', 'ready'],
      ]);
      const navs = await page.$$eval('nav a', (as) => as.map((a) => a.textContent));
      expect(navs).to.include('Nodes');
      await page.click('tr[data-node=n2] [data-test=do-drain]');
      await page.waitForSelector('[data-test=confirm-ok]');
      await page.click('[data-test=confirm-ok]');
      await page.waitForSelector('[data-test=drain-result]', { timeout: 30_000 });
      const moved = await page.$$eval('[data-test=moved]', (lis) => lis.map((li) => li.textContent ?? ''));
      const stayed = await page.$$eval('[data-test=stayed]', (lis) => lis.map((li) => li.textContent ?? ''));
      const went = moved.find((m) => m.startsWith('ui-drain to '));
      expect(went, moved.join('; ')).to.match(/^ui-drain to n[13]$/);
      expect((await api(n2, 'GET', '/vms/ui-drain')).json).to.include({ node: went!.slice('ui-drain to '.length) });
      expect(stayed).to.include(
        'ui-stay stayed: vm ui-stay is ephemeral: it cannot be suspended for a move, and is removed when stopped; it stays',
      );
      // The table follows: n2 drained, with an undrain button that ends it.
      await page.waitForFunction(
        () => document.querySelector('tr[data-node=n2] [data-test=state]')?.textContent === 'ready, drained',
        { timeout: 10_000 },
      );
      expect((await api(n1, 'GET', '/nodes/n2')).json.draining).to.equal(true);
      await page.click('tr[data-node=n2] [data-test=do-undrain]');
      await page.waitForSelector('tr[data-node=n2] [data-test=do-drain]', { timeout: 10_000 });
      expect((await api(n1, 'GET', '/nodes/n2')).json.draining).to.equal(undefined);
    } finally {
      await browser.close();
    }
    for (const vm of ['ui-drain', 'ui-stay']) expect((await api(n1, 'DELETE', `/vms/${vm}`)).status).to.equal(200);
  });

  it('fetches an image baked on one node the first time another needs it: a create placed there, a VM moved there', async () => {
    const [n1, n2, n3] = nodes;
    const made = await api(n1, 'POST', '/vms', { name: 'bake-src', node: 'n1', persistent: true, memory_mb: 256 });
    expect(made.status, made.text).to.equal(201);
    expect((await api(n1, 'POST', '/vms/bake-src/shutdown')).status).to.equal(200);
    const baked = await api(n1, 'POST', '/images', { name: 'baked1', from_vm: 'bake-src' });
    expect(baked.status, baked.text).to.equal(201);
    await until('n1 lists baked1', 10_000, async () =>
      ((await api(n3, 'GET', '/nodes/n1')).json.images as string[]).includes('baked1'),
    );
    expect((await api(n2, 'GET', '/images/baked1')).status).to.equal(404);
    // Only nodes ask for an image's files.
    expect((await call(n1.t, 'GET', '/cluster/images/baked1', undefined, { 'x-svc-node-hop': 'n2' })).status).to.equal(
      403,
    );

    // A create asking for n2, which lacks it: n2 fetches it from n1 first, and the create's stream
    // (sent through n3) says so before n2's own lines.
    const body = { name: 'from-baked', image: 'baked1', node: 'n2', memory_mb: 256 };
    const there = await api(n3, 'POST', '/vms?stream=1', body);
    expect(there.status, there.text).to.equal(200);
    const lines = ndjson(there.text);
    const fetching = lines.filter((l) => l.phase === 'image' && /^fetching image baked1/.test(String(l.message)));
    expect(fetching, there.text).to.not.be.empty;
    expect(lines.indexOf(fetching[0]), 'the fetch comes first').to.equal(0);
    expect(fetching.at(-1)).to.include({ name: 'from-baked', percent: 100 });
    expect(fetching.at(-1)!.message).to.match(/^fetching image baked1 from node n1 to node n2: [\d.]+ of [\d.]+ MiB$/);
    expect(lines.map((l) => l.phase)).to.include('accepted');
    expect(lines.at(-1), there.text).to.include({ phase: 'ready', name: 'from-baked' });
    expect((await api(n3, 'GET', '/vms/from-baked')).json).to.include({ node: 'n2', image: 'baked1' });
    expect((await api(n2, 'GET', '/images/baked1')).status).to.equal(200);

    // A VM of it moved to n3, which lacks it too: fetched as the VM comes.
    const vm = await api(n1, 'POST', '/vms', { name: 'mv-baked', image: 'baked1', node: 'n1', persistent: true });
    expect(vm.status, vm.text).to.equal(201);
    expect((await api(n1, 'POST', '/vms/mv-baked/shutdown')).status).to.equal(200);
    const moved = await api(n2, 'POST', '/vms/mv-baked/move', { node: 'n3' });
    expect(moved.status, moved.text).to.equal(200);
    expect(moved.json).to.include({ node: 'n3', image: 'baked1' });
    expect((await api(n3, 'GET', '/images/baked1')).status).to.equal(200);
    for (const v of ['bake-src', 'from-baked', 'mv-baked'])
      expect((await api(n3, 'DELETE', `/vms/${v}`)).status).to.equal(200);
  });

  it('marks the VMs of a node that stops renewing node_unreachable within the lease, answers 503 naming it, and takes it back', async () => {
    const n2 = nodes[1];
    const on = async (node: string) =>
      ((await api(nodes[0], 'GET', '/vms')).json as { name: string; node: string; status: string }[]).filter(
        (v) => v.node === node,
      );
    const on2 = await on('n2');
    expect(on2.length).to.be.above(0);
    // Frozen: its process and its VMs are there, but it renews nothing and answers nothing.
    n2.proc!.proc.kill('SIGSTOP');
    try {
      const t0 = Date.now();
      await until(
        'n2 unreachable',
        2000 + 5000,
        async () => (await api(nodes[0], 'GET', '/nodes/n2')).json.state === 'unreachable',
      );
      expect(Date.now() - t0).to.be.below(7000);
      const list = (await api(nodes[2], 'GET', '/vms')).json as { name: string; node: string; status: string }[];
      expect(list.filter((v) => v.node === 'n2').map((v) => v.status)).to.deep.equal(on2.map(() => 'node_unreachable'));
      expect(list.filter((v) => v.node === 'n1').every((v) => v.status === 'running')).to.equal(true);
      expect((await api(nodes[2], 'GET', '/metrics')).text).to.contain('svc_cluster_node_up{node="n2"} 0');
      // Its record says so; what needs the node answers 503 naming it.
      expect((await api(nodes[0], 'GET', `/vms/${on2[0].name}`)).json).to.include({
        node: 'n2',
        status: 'node_unreachable',
      });
      const r = await api(nodes[0], 'POST', `/vms/${on2[0].name}/shutdown`);
      expect(r.status).to.equal(503);
      expect(r.json.error).to.contain('node n2');
      // A create asked of n2 is refused; one anywhere goes elsewhere.
      expect((await api(nodes[0], 'POST', '/vms', { name: 'to-n2', node: 'n2' })).status).to.equal(503);
    } finally {
      n2.proc!.proc.kill('SIGCONT');
    }
    await until('n2 ready again', 10_000, async () => (await api(nodes[0], 'GET', '/nodes/n2')).json.state === 'ready');
    expect((await on('n2')).map((v) => [v.name, v.status])).to.deep.equal(on2.map((v) => [v.name, 'running']));
    expect((await api(nodes[0], 'GET', `/vms/${on2[0].name}`)).json).to.include({ name: on2[0].name, node: 'n2' });
  });

  it('takes back a node killed with -9 and started again: it joins, and what it no longer has is gone from the cluster', async () => {
    const n2 = nodes[1];
    // Drained before (its running VMs stay), and drained after: its entry in etcd remembers.
    const drained = await api(nodes[0], 'POST', '/nodes/n2/drain');
    expect(drained.json.moved, drained.text).to.deep.equal([]);
    await until('n2 says it is drained', 10_000, async () => (await api(nodes[0], 'GET', '/nodes/n2')).json.draining);
    const onN2 = ((await api(nodes[0], 'GET', '/vms')).json as { name: string; node: string }[]).find(
      (v) => v.node === 'n2',
    );
    expect(onN2).to.not.equal(undefined);
    n2.proc!.proc.kill('SIGKILL');
    await n2.proc!.exited;
    // Its lease is still there for a moment: a call about its VM finds nothing listening, and says
    // so naming it (or that it is unreachable, once its lease is gone).
    const gone = await api(nodes[0], 'POST', `/vms/${onN2!.name}/exec?cmd=true`);
    expect(gone.status, gone.text).to.equal(503);
    expect(gone.json.error).to.match(/node n2 (did not answer|.*unreachable)/);
    await until(
      'n2 unreachable',
      2000 + 5000,
      async () => (await api(nodes[0], 'GET', '/nodes/n2')).json.state === 'unreachable',
    );
    await start(n2);
    await until('n2 ready again', 10_000, async () => (await api(nodes[0], 'GET', '/nodes/n2')).json.state === 'ready');
    // The fake hypervisor's VMs die with their daemon (QEMU's outlive it): its ephemeral VMs are removed, everywhere.
    const own = ((await api(n2, 'GET', '/vms')).json as { name: string; node: string }[]).filter(
      (v) => v.node === 'n2',
    );
    await until('the other nodes list what n2 lists', 5000, async () => {
      const seen = ((await api(nodes[0], 'GET', '/vms')).json as { name: string; node: string }[]).filter(
        (v) => v.node === 'n2',
      );
      return JSON.stringify(seen.map((v) => v.name)) === JSON.stringify(own.map((v) => v.name));
    });
    expect((await api(nodes[0], 'GET', '/nodes/n2')).json.allocated.vms).to.equal(own.length);
    expect((await api(nodes[0], 'GET', '/nodes/n2')).json.draining).to.equal(true);
    expect((await api(nodes[0], 'DELETE', '/nodes/n2/drain')).status).to.equal(200);
  });

  it('goes on when one etcd member dies, and refuses writes with 503 while reads go on when quorum is lost', async () => {
    await etcd.members[0].kill();
    const r = await api(nodes[2], 'POST', '/vms', { name: 'after-one', node: 'n3' });
    expect(r.status, r.text).to.equal(201);
    await etcd.members[1].kill();
    const w = await api(nodes[0], 'POST', '/vms', { name: 'no-quorum', memory_mb: 128 });
    expect(w.status, w.text).to.equal(503);
    expect(w.json.error).to.match(/etcd/);
    const list = await api(nodes[0], 'GET', '/vms');
    expect(list.status).to.equal(200);
    expect(list.json.map((v: { name: string }) => v.name)).to.include('after-one');
    await until(
      'the list marked stale',
      10_000,
      async () => (await api(nodes[0], 'GET', '/vms')).headers['x-svc-stale'] === '1',
    );
  });
});
