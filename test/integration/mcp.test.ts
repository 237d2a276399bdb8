import { expect } from 'chai';
import { readFileSync } from 'node:fs';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { fileURLToPath } from 'node:url';
import { call } from '../helpers/http.js';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';

const SVC_BIN = fileURLToPath(new URL('../../src/bin/svc.js', import.meta.url));

type ToolResult = { isError?: boolean; content: { type: string; text: string }[] };
const textOf = (r: unknown) => (r as ToolResult).content.map((c) => c.text).join('');
/** Calls a tool that must succeed, and reads its JSON answer (any shape: the tests check it). */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
async function callOk(c: Client, name: string, args: Record<string, unknown>): Promise<any> {
  const r = (await c.callTool({ name, arguments: args })) as ToolResult;
  expect(r.isError, textOf(r)).to.not.equal(true);
  return JSON.parse(textOf(r));
}
const resourceText = (r: { contents: unknown[] }) => (r.contents[0] as { text: string }).text;

/** The MCP server on both transports, driven by the SDK's own Client, on the fake hypervisor with real local agents. */
describe('MCP: Streamable HTTP at /mcp and stdio (svc mcp)', function () {
  this.timeout(60_000);
  let d: TestDaemon;
  before(async () => {
    d = await startTestDaemon({ fake_agent: true, sandbox_metrics_enabled: false });
  });
  after(async () => d.stop());

  const httpClient = async (token = 'test-token') => {
    const c = new Client({ name: 'svc-test', version: '1.0.0' });
    await c.connect(
      new StreamableHTTPClientTransport(new URL(`http://127.0.0.1:${d.tcp.port}/mcp`), {
        requestInit: { headers: { Authorization: `Bearer ${token}` } },
      }),
    );
    return c;
  };
  const stdioClient = async (...flags: string[]) => {
    const c = new Client({ name: 'svc-test', version: '1.0.0' });
    await c.connect(
      new StdioClientTransport({
        command: process.execPath,
        args: [SVC_BIN, '--socket', d.config.socket, '--token', 'test-token', 'mcp', ...flags],
        stderr: 'ignore',
      }),
    );
    return c;
  };

  it('lists tools with schemas, creates a VM with progress notifications, and runs a command in it (HTTP)', async () => {
    const c = await httpClient();
    try {
      const tools = (await c.listTools()).tools;
      const names = tools.map((t) => t.name);
      expect(names).to.include.members([
        'list_vms',
        'get_vm',
        'create_vm',
        'delete_vm',
        'start_vm',
        'stop_vm',
        'pause_vm',
        'resume_vm',
        'suspend_vm',
        'restore_vm',
        'clone_vm',
        'fork_vm',
        'snapshot_vm',
        'list_snapshots',
        'revert_vm',
        'delete_snapshot',
        'exec',
        'read_file',
        'write_file',
        'list_dir',
        'stat',
        'mkdir',
        'remove',
        'add_forward',
        'remove_forward',
        'list_images',
        'inject_secret',
        'stats',
        'egress',
        'start_process',
        'process_output',
        'list_processes',
        'signal_process',
      ]);
      // One host, not a node of a cluster: no node tools, and a create takes no node.
      expect(names).to.not.include.members(['list_nodes', 'move_vm', 'drain_node']);
      expect(tools.find((t) => t.name === 'create_vm')!.inputSchema.properties).to.not.have.property('node');
      const exec = tools.find((t) => t.name === 'exec')!;
      expect(exec.description).to.match(/stdout, stderr and the exit code/);
      expect(exec.inputSchema.required).to.include.members(['name', 'cmd']);
      const progress: string[] = [];
      const made = await c.callTool(
        { name: 'create_vm', arguments: { name: 'm1', persistent: true, ttl: '2h', on_expire: 'suspend' } },
        undefined,
        { onprogress: (p) => void progress.push(String(p.message)) },
      );
      expect((made as ToolResult).isError, textOf(made)).to.not.equal(true);
      const m1 = JSON.parse(textOf(made));
      expect(m1).to.include({ name: 'm1', status: 'running', on_expire: 'suspend' });
      expect(Date.parse(m1.expires_at) - Date.now(), 'an agent’s VM that cleans itself up').to.be.within(
        7_000_000,
        7_200_000,
      );
      expect(progress[0]).to.match(/^accepted/);
      expect(progress.at(-1)).to.match(/^ready/);
      const out = await c.callTool({
        name: 'exec',
        arguments: {
          name: 'm1',
          cmd: 'sh',
          args: ['-c', 'echo "$GREETING from $(pwd)"; echo oops >&2; exit 3'],
          cwd: '/tmp',
          env: { GREETING: 'hi' },
        },
      });
      expect(JSON.parse(textOf(out))).to.deep.equal({ exit_code: 3, stdout: 'hi from /tmp\n', stderr: 'oops\n' });
      // as a user by name: its ids and its home (root's, on this host's local agent)
      const home = readFileSync('/etc/passwd', 'utf8')
        .split('\n')
        .find((l) => l.startsWith('root:'))!
        .split(':')[5];
      const as = await c.callTool({
        name: 'exec',
        arguments: { name: 'm1', cmd: 'sh', args: ['-c', 'id -u; pwd'], user: 'root' },
      });
      expect(JSON.parse(textOf(as))).to.deep.equal({ exit_code: 0, stdout: `0\n${home}\n`, stderr: '' });
      const big = await c.callTool({
        name: 'exec',
        arguments: { name: 'm1', cmd: 'sh', args: ['-c', "head -c 100000 /dev/zero | tr '\\0' a"] },
      });
      expect(JSON.parse(textOf(big)).stdout).to.match(/\[stdout truncated: 34464 more bytes/);
    } finally {
      await c.close();
    }
  });

  it('starts a process that outlives the call and reads its output from offsets, each byte once (HTTP)', async () => {
    const c = await httpClient();
    try {
      const call = (name: string, args: Record<string, unknown>) => callOk(c, name, args);
      const p = await call('start_process', {
        name: 'm1',
        cmd: 'sh',
        args: ['-c', 'echo first; read x < /dev/null; sleep 0.5; echo second; sleep 30'],
        tag: 'mcp-job',
      });
      expect(p.id).to.match(/^p\d+$/);
      const a = await call('process_output', { name: 'm1', id: 'mcp-job', wait_ms: 5000 });
      expect(a.output.stdout).to.equal('first\n');
      expect(a.next_from).to.match(/stdout:6/);
      const b = await call('process_output', { name: 'm1', id: p.id, from: a.next_from, wait_ms: 5000 });
      expect(b.output.stdout).to.equal('second\n');
      expect(b.ended).to.equal(null);
      const listed = await call('list_processes', { name: 'm1' });
      expect(listed.map((x: { id: string }) => x.id)).to.include(p.id);
      const killed = await call('signal_process', { name: 'm1', id: p.id, signal: 'KILL' });
      expect(killed.id).to.equal(p.id);
      let end = { ended: null as null | Record<string, unknown> };
      for (let i = 0; i < 50 && !end.ended; i++)
        end = await call('process_output', { name: 'm1', id: p.id, from: b.next_from, wait_ms: 200 });
      expect(end.ended).to.include({ reason: 'signal', signal: 'SIGKILL' });
      // With a restart policy: started again once, both runs' output in one journal.
      const r = await call('start_process', {
        name: 'm1',
        cmd: 'sh',
        args: ['-c', 'echo run; exit 2'],
        restart: 'on-failure',
        max_restarts: 1,
      });
      expect(r).to.include({ restart: 'on-failure', max_restarts: 1 });
      let out = { ended: null as null | Record<string, unknown>, output: { stdout: '' } };
      for (let i = 0; i < 50 && !out.ended; i++)
        out = await call('process_output', { name: 'm1', id: r.id, wait_ms: 200 });
      expect(out.output.stdout).to.equal('run\nrun\n');
      expect(out.ended).to.include({ reason: 'exit', exit_code: 2 });
      // What it printed lately: the last line of each stream, and where to read on from.
      const last = await call('process_output', { name: 'm1', id: r.id, tail_lines: 1 });
      expect(last).to.deep.include({ output: { stdout: 'run\n' }, next_from: 'stdout:8,stderr:0' });
      const both = await c.callTool({
        name: 'process_output',
        arguments: { name: 'm1', id: r.id, from: '0', tail_lines: 1 },
      });
      expect(both.isError).to.equal(true);
    } finally {
      await c.close();
    }
  });

  it('writes then reads a file, lists and stats, and reads resources', async () => {
    const c = await httpClient();
    try {
      const guestTmp = JSON.parse(
        textOf(await c.callTool({ name: 'exec', arguments: { name: 'm1', cmd: 'sh', args: ['-c', 'mktemp -d'] } })),
      ).stdout.trim();
      const path = `${guestTmp}/note.txt`;
      expect(
        textOf(
          await c.callTool({
            name: 'write_file',
            arguments: { name: 'm1', path, content: 'hello from MCP\n', mode: '0600' },
          }),
        ),
      ).to.equal(`wrote 15 bytes to ${path}`);
      expect(textOf(await c.callTool({ name: 'read_file', arguments: { name: 'm1', path } }))).to.equal(
        'hello from MCP\n',
      );
      const listing = JSON.parse(
        textOf(await c.callTool({ name: 'list_dir', arguments: { name: 'm1', path: guestTmp } })),
      ) as { name: string }[];
      expect(listing.map((e) => e.name)).to.deep.equal(['note.txt']);
      expect(JSON.parse(textOf(await c.callTool({ name: 'stat', arguments: { name: 'm1', path } })))).to.include({
        size: 15,
        mode: '0600',
      });
      const vms = await c.readResource({ uri: 'svc://vms' });
      expect(JSON.parse(resourceText(vms)).map((v: { name: string }) => v.name)).to.include('m1');
      const one = await c.readResource({ uri: 'svc://vms/m1' });
      expect(JSON.parse(resourceText(one))).to.include({ name: 'm1' });
      const templates = (await c.listResourceTemplates()).resourceTemplates.map((t) => t.uriTemplate);
      expect(templates).to.include.members(['svc://vms/{name}', 'svc://vms/{name}/console']);
      expect((await c.listResources()).resources.map((r) => r.uri)).to.include.members([
        'svc://vms',
        'svc://activity',
        'svc://vms/m1',
      ]);
      const activity = JSON.parse(resourceText(await c.readResource({ uri: 'svc://activity' }))) as {
        action: string;
      }[];
      expect(activity.some((a) => a.action === 'create')).to.equal(true);
      // The stand-in guest is this host: its temp folder goes, by name, without a recursive remove.
      await c.callTool({ name: 'exec', arguments: { name: 'm1', cmd: 'rm', args: ['-f', path] } });
      await c.callTool({ name: 'exec', arguments: { name: 'm1', cmd: 'rmdir', args: [guestTmp] } });
    } finally {
      await c.close();
    }
  });

  it("answers a missing VM with a tool error carrying the daemon's message, and injects a secret without its value", async () => {
    const c = await httpClient();
    try {
      const missing = (await c.callTool({ name: 'get_vm', arguments: { name: 'nope' } })) as ToolResult;
      expect(missing.isError).to.equal(true);
      expect(textOf(missing)).to.match(/nope.*not found|not found.*nope/i);
      expect(textOf(missing)).to.match(/not_found, HTTP 404/);
      expect((await d.call('POST', '/secrets', { name: 'API_KEY', value: 'sk-very-secret' })).status).to.equal(200);
      const injected = await c.callTool({ name: 'inject_secret', arguments: { name: 'm1', secret: 'API_KEY' } });
      expect(textOf(injected)).to.not.contain('sk-very-secret');
      const path = JSON.parse(textOf(injected)).path as string;
      expect(textOf(await c.callTool({ name: 'read_file', arguments: { name: 'm1', path } }))).to.equal(
        'sk-very-secret',
      );
    } finally {
      await c.close();
    }
  });

  it('snapshots a VM, lists its snapshots, reverts it to one and deletes it (HTTP)', async () => {
    expect((await d.call('POST', '/vms', { name: 'ms', persistent: true })).status).to.equal(201);
    const c = await httpClient();
    try {
      const call = (name: string, args: Record<string, unknown>) => callOk(c, name, args);
      const taken = await call('snapshot_vm', { name: 'ms', snapshot: 'before', description: 'risky step next' });
      expect(taken).to.include({ name: 'before', memory: true, taken_from: 'running', description: 'risky step next' });
      expect((await call('list_snapshots', { name: 'ms' })).map((s: { name: string }) => s.name)).to.deep.equal([
        'before',
      ]);
      expect(await call('revert_vm', { name: 'ms', snapshot: 'before' })).to.include({ name: 'ms', status: 'running' });
      const bad = (await c.callTool({ name: 'revert_vm', arguments: { name: 'ms', snapshot: 'gone' } })) as ToolResult;
      expect(bad.isError).to.equal(true);
      expect(textOf(bad)).to.match(/vm ms has no snapshot gone/);
      expect(await call('delete_snapshot', { name: 'ms', snapshot: 'before' })).to.include({ snapshot: 'before' });
      expect(await call('list_snapshots', { name: 'ms' })).to.deep.equal([]);
    } finally {
      await c.close();
      await d.call('DELETE', '/vms/ms');
    }
  });

  it('refuses /mcp without the token (401) and from a foreign Origin (403)', async () => {
    const body = { jsonrpc: '2.0', id: 1, method: 'tools/list', params: {} };
    const headers = { accept: 'application/json, text/event-stream' };
    expect((await call({ port: d.tcp.port }, 'POST', '/mcp', body, headers)).status).to.equal(401);
    expect(
      (
        await call({ port: d.tcp.port, token: 'test-token' }, 'POST', '/mcp', body, {
          ...headers,
          origin: 'http://evil.example',
        })
      ).status,
    ).to.equal(403);
    expect((await call({ port: d.tcp.port, token: 'test-token' }, 'GET', '/mcp')).status).to.equal(405);
    const bad = await httpClient('wrong').catch((e: Error) => e);
    expect(bad).to.be.instanceOf(Error);
  });

  it('serves read-only mode over stdio: only tools that read, and a create is refused', async () => {
    const c = await stdioClient('--read-only');
    try {
      const names = (await c.listTools()).tools.map((t) => t.name).sort();
      expect(names).to.deep.equal([
        'egress',
        'get_vm',
        'list_dir',
        'list_images',
        'list_processes',
        'list_snapshots',
        'list_vms',
        'process_output',
        'read_file',
        'stat',
        'stats',
      ]);
      const eg = JSON.parse(textOf(await c.callTool({ name: 'egress', arguments: { name: 'm1' } })));
      expect(eg).to.deep.equal({ policy: { default: 'allow', allow: [], deny: [] }, secrets: [], log: [] });
      const refused = await c.callTool({ name: 'create_vm', arguments: { name: 'ro' } }).then(
        (r) => r as ToolResult,
        (e: Error) => ({ isError: true, content: [{ type: 'text', text: e.message }] }),
      );
      expect(refused.isError).to.equal(true);
      expect(
        JSON.parse(textOf(await c.callTool({ name: 'list_vms', arguments: {} }))).map((v: { name: string }) => v.name),
      ).to.include('m1');
      expect((await d.call('GET', '/vms/ro')).status).to.equal(404);
    } finally {
      await c.close();
    }
  });

  it("changes a VM's egress policy only when the operator lets MCP clients (stdio)", async () => {
    const plain = await stdioClient();
    try {
      expect((await plain.listTools()).tools.map((t) => t.name)).to.not.include.members([
        'set_egress',
        'bind_egress_secret',
      ]);
    } finally {
      await plain.close();
    }
    const c = await stdioClient('--allow-egress-changes');
    try {
      const set = await c.callTool({
        name: 'set_egress',
        arguments: { name: 'm1', default: 'deny', allow: ['pypi.org', 'host:8080'] },
      });
      expect(JSON.parse(textOf(set))).to.deep.equal({ default: 'deny', allow: ['pypi.org', 'host:8080'], deny: [] });
      expect((await d.call('GET', '/vms/m1/egress')).json.default).to.equal('deny');
      const bad = (await c.callTool({
        name: 'set_egress',
        arguments: { name: 'm1', default: 'deny', allow: ['not a rule'] },
      })) as ToolResult;
      expect(bad.isError).to.equal(true);
      expect(textOf(bad)).to.match(/not a domain, an IP or CIDR, or host:PORT \(invalid_argument, HTTP 400\)/);
      await c.callTool({ name: 'set_egress', arguments: { name: 'm1', default: 'allow' } });
      // An egress secret is bound by its name; the value is never in what the tools answer.
      const bound = await c.callTool({
        name: 'bind_egress_secret',
        arguments: { name: 'm1', secret: 'API_KEY', hosts: ['api.example.com'], env: 'API_KEY' },
      });
      const [b] = JSON.parse(textOf(bound)) as { secret: string; hosts: string[]; placeholder: string }[];
      expect(b).to.include({ secret: 'API_KEY', env: 'API_KEY' });
      expect(b.placeholder).to.match(/^svc-egress-/);
      const shown = await c.callTool({ name: 'egress', arguments: { name: 'm1' } });
      expect(JSON.parse(textOf(shown)).secrets).to.deep.equal([b]);
      expect(textOf(bound) + textOf(shown)).not.to.include('sk-very-secret');
      // A fork's binding carries the placeholder it inherited; binding another secret to the fork
      // gives that binding back as it is (the PUT refuses `inherited` as an unknown field).
      expect((await d.call('POST', '/vms/m1/fork', { names: ['m1f'] })).status).to.equal(201);
      expect((await d.call('POST', '/secrets', { name: 'OTHER_KEY', value: 'sk-other' })).status).to.equal(200);
      const onFork = (await c.callTool({
        name: 'bind_egress_secret',
        arguments: { name: 'm1f', secret: 'OTHER_KEY', hosts: ['other.example.com'], header: 'X-Key' },
      })) as ToolResult;
      expect(onFork.isError, textOf(onFork)).to.not.equal(true);
      const forkBindings = JSON.parse(textOf(onFork)) as { secret: string; inherited?: string[] }[];
      expect(forkBindings.map((x) => x.secret)).to.deep.equal(['API_KEY', 'OTHER_KEY']);
      expect(forkBindings[0].inherited).to.deep.equal([b.placeholder]);
      expect((await d.call('DELETE', '/vms/m1f')).status).to.equal(200);
      expect((await d.call('DELETE', '/secrets/OTHER_KEY')).status).to.equal(200);
      const unbound = await c.callTool({
        name: 'bind_egress_secret',
        arguments: { name: 'm1', secret: 'API_KEY', hosts: [] },
      });
      expect(JSON.parse(textOf(unbound))).to.deep.equal([]);
    } finally {
      await c.close();
    }
  });

  it('keeps to the image allowlist and the cap on VMs created through MCP (stdio)', async () => {
    // m1, made through MCP above, counts: a cap of 2 leaves room for one more
    const c = await stdioClient('--allow-image', 'minimal', '--max-vms', '2');
    try {
      const wrongImage = (await c.callTool({
        name: 'create_vm',
        arguments: { name: 'deb', image: 'debian' },
      })) as ToolResult;
      expect(wrongImage.isError).to.equal(true);
      expect(textOf(wrongImage)).to.match(/image debian is not allowed through MCP here \(allowed: minimal\)/);
      expect(
        ((await c.callTool({ name: 'create_vm', arguments: { name: 'first', image: 'minimal' } })) as ToolResult)
          .isError,
      ).to.not.equal(true);
      const second = (await c.callTool({
        name: 'create_vm',
        arguments: { name: 'second', image: 'minimal' },
      })) as ToolResult;
      expect(second.isError).to.equal(true);
      expect(textOf(second)).to.match(/at most 2 VMs may be created through MCP here; 2 exist/);
      expect(textOf(await c.callTool({ name: 'delete_vm', arguments: { name: 'first' } }))).to.match(/deleted/);
      expect(
        ((await c.callTool({ name: 'create_vm', arguments: { name: 'second', image: 'minimal' } })) as ToolResult)
          .isError,
      ).to.not.equal(true);
      await c.callTool({ name: 'delete_vm', arguments: { name: 'second' } });
    } finally {
      await c.close();
    }
  });

  it('applies the image allowlist to clones (create_vm from, clone_vm): a template of another image is refused', async () => {
    expect((await d.call('POST', '/vms', { name: 'tpl-other', persistent: true })).status).to.equal(201);
    expect((await d.call('POST', '/vms/tpl-other/shutdown')).status).to.equal(200);
    const image = (await d.call('GET', '/vms/tpl-other')).json.image as string;
    const c = await stdioClient('--allow-image', 'minimal');
    try {
      for (const [tool, args] of [
        ['create_vm', { name: 'via-from', from: 'tpl-other' }],
        ['clone_vm', { name: 'via-clone', template: 'tpl-other' }],
      ] as const) {
        const r = (await c.callTool({ name: tool, arguments: args })) as ToolResult;
        expect(r.isError, tool).to.equal(true);
        expect(textOf(r)).to.include(`tpl-other is a VM of image ${image}, which is not allowed through MCP here`);
      }
      expect((await d.call('GET', '/vms/via-from')).status).to.equal(404);
      expect((await d.call('GET', '/vms/via-clone')).status).to.equal(404);
    } finally {
      await c.close();
      await d.call('DELETE', '/vms/tpl-other');
    }
  });

  it('does not read injected secrets in read-only mode, however the path is spelled (nothing is read)', async () => {
    const c = await stdioClient('--read-only');
    try {
      for (const path of [
        '/run/svc/secrets/key',
        '/var/run/svc/secrets/key',
        '/run/svc/x/../secrets//key',
        '/run/svc/secrets',
      ]) {
        const r = (await c.callTool({ name: 'read_file', arguments: { name: 'm1', path } })) as ToolResult;
        expect(r.isError, path).to.equal(true);
        expect(textOf(r), path).to.match(
          /is where svc puts injected secrets; a read-only MCP server does not read them/,
        );
      }
    } finally {
      await c.close();
    }
  });
});

describe('MCP with mcp_read_only in the daemon config', function () {
  this.timeout(30_000);
  it('lists only the tools that read at /mcp', async () => {
    const d = await startTestDaemon({ mcp_read_only: true });
    try {
      const c = new Client({ name: 'svc-test', version: '1.0.0' });
      await c.connect(
        new StreamableHTTPClientTransport(new URL(`http://127.0.0.1:${d.tcp.port}/mcp`), {
          requestInit: { headers: { Authorization: 'Bearer test-token' } },
        }),
      );
      const names = (await c.listTools()).tools.map((t) => t.name);
      expect(names).to.not.include('create_vm');
      expect(names).to.include('list_vms');
      await c.close();
    } finally {
      await d.stop();
    }
  });
});
