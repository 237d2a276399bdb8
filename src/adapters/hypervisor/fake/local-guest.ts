import { spawn, type ChildProcess } from 'node:child_process';
import { timingSafeEqual } from 'node:crypto';
import { closeSync, existsSync, mkdirSync, openSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { connect, type AddressInfo } from 'node:net';
import { join } from 'node:path';
import ssh2 from 'ssh2';
import type { VmSpec } from '../../../ports/hypervisor.js';
import type { Sidecar } from './in-memory-hypervisor.js';
import { generateEd25519 } from '../../ssh/keygen.js';
import { agentScript, spawnAgent, standInHome } from './local-agent-process.js';
import { childEnv } from '../../process-kit/child-env.js';

let hostKey: string | undefined;

/**
 * A stand-in guest for the fake hypervisor's `fake_agent` mode: a directory tree laid out like a
 * guest (`<dir>/guest/{var/lib/svc,run/svc,opt/svc,root}`, the last the HOME of all it runs), the
 * real svc-agent supervised on a fixed loopback port (restarted when it exits, from
 * `opt/svc/agent/` once a deploy put one there), a real SSH server (ssh2) that accepts only the
 * daemon's key and runs exec and direct-tcpip on this host, and the userdata run with
 * `userdata-ran` written when it finishes.
 */
export async function startLocalGuest(spec: VmSpec): Promise<Sidecar> {
  let root = join(spec.dir, 'guest');
  let stateDir = join(root, 'var', 'lib', 'svc');
  let runDir = join(root, 'run', 'svc');
  for (const d of [stateDir, runDir, join(root, 'opt', 'svc')]) mkdirSync(d, { recursive: true });
  let log = openSync(join(spec.dir, 'agent.log'), 'a');
  /** Once: a second close could hit a descriptor the process has reused since. */
  const closeLog = () => {
    if (log >= 0) closeSync(log);
    log = -1;
  };

  let stopping = false;
  let relocating = false;
  let child: ChildProcess | undefined;
  let port = 0;
  const startAgentOnce = async (): Promise<number> => {
    const deployed = join(root, 'opt', 'svc', 'agent', 'svc-agent.cjs');
    const script = existsSync(deployed) ? deployed : agentScript();
    const { child: c, port: bound } = await spawnAgent({
      script,
      listen: `127.0.0.1:${port}`,
      stateDir,
      runDir,
      log,
      home: standInHome(root),
    });
    child = c;
    c.once('exit', () => {
      if (!stopping && !relocating) setTimeout(() => void startAgentOnce().catch(() => undefined), 100);
    });
    return bound;
  };
  port = await startAgentOnce();

  const userdataDone = join(stateDir, 'userdata-ran');
  if (spec.userdata) {
    const file = join(stateDir, 'userdata');
    writeFileSync(file, spec.userdata, { mode: 0o700 });
    const u = spawn('/bin/sh', [file], {
      cwd: root,
      stdio: ['ignore', log, log],
      env: childEnv({ HOME: standInHome(root) }),
    });
    u.once('exit', () => {
      if (!stopping) writeFileSync(join(stateDir, 'userdata-ran'), '');
    });
    // not started at all: the guest's userdata never ran (unheard, the event would stop the daemon)
    u.on('error', () => undefined);
  } else {
    writeFileSync(userdataDone, '');
  }

  const sshd = await startSshServer(spec.ssh_authorized_key ?? '', () => root);
  return {
    port,
    get pid() {
      return child?.pid ?? 0;
    },
    sshPort: sshd.port,
    /** The VM directory moved (a claimed running pool member): restart the agent there, same port. */
    relocate: async (dir: string) => {
      relocating = true;
      root = join(dir, 'guest');
      stateDir = join(root, 'var', 'lib', 'svc');
      runDir = join(root, 'run', 'svc');
      closeLog();
      log = openSync(join(dir, 'agent.log'), 'a');
      const c = child;
      if (c && c.exitCode === null && c.signalCode === null) {
        const gone = new Promise((r) => c.once('exit', r));
        c.kill('SIGKILL');
        await gone;
      }
      await startAgentOnce();
      relocating = false;
    },
    stop: async () => {
      stopping = true;
      sshd.stop();
      const c = child;
      if (c && c.exitCode === null && c.signalCode === null) {
        const gone = new Promise((r) => c.once('exit', r));
        c.kill('SIGKILL');
        await gone;
      }
      killKept(join(stateDir, 'processes'));
      closeLog(); // the children have their own copies; the daemon's is let go with the VM
    },
  };
}

/**
 * Kills what the stand-in's agent kept (durable processes and watches, docs/processes.md): in a
 * real guest they die with the VM; here they are this host's processes and would outlive it.
 */
function killKept(root: string): void {
  for (const id of readdirSafe(root)) {
    try {
      const meta = JSON.parse(readFileSync(join(root, id, 'meta.json'), 'utf8')) as {
        pid?: number;
        keeper_pid?: number;
      };
      // A process with a restart policy: its current run's pid, killed before its keeper can start another.
      const run = Number((/"pid":(\d+)/.exec(readFileSafe(join(root, id, 'run.json'))) ?? [])[1]) || 0;
      for (const target of [run ? -run : 0, meta.pid ? -meta.pid : 0, meta.keeper_pid ?? 0]) {
        if (!target) continue;
        const pid = Math.abs(target);
        // only what is still this guest's: the keeper names its folder, the process is its child
        if (
          target > 0
            ? readFileSafe(`/proc/${pid}/cmdline`).includes(`${join(root, id)}\0`)
            : keptChild(pid, meta.keeper_pid)
        )
          try {
            process.kill(target, 'SIGKILL');
          } catch {
            // gone meanwhile
          }
      }
    } catch {
      // gone, or never started
    }
  }
}

function readFileSafe(file: string): string {
  try {
    return readFileSync(file, 'utf8');
  } catch {
    return '';
  }
}

function keptChild(pid: number, keeper?: number): boolean {
  try {
    return Number(/\) \S (\d+)/.exec(readFileSync(`/proc/${pid}/stat`, 'utf8'))?.[1]) === keeper;
  } catch {
    return false;
  }
}

function readdirSafe(dir: string): string[] {
  try {
    return readdirSync(dir);
  } catch {
    return [];
  }
}

async function startSshServer(authorizedKey: string, cwd: () => string): Promise<{ port: number; stop(): void }> {
  hostKey ??= generateEd25519().private;
  const allowed = ssh2.utils.parseKey(authorizedKey);
  const allowedPub = allowed instanceof Error ? undefined : Array.isArray(allowed) ? allowed[0] : allowed;
  const clients = new Set<ssh2.Connection>();
  const server = new ssh2.Server({ hostKeys: [hostKey] }, (client) => {
    clients.add(client);
    client.on('close', () => clients.delete(client));
    client.on('error', () => client.end());
    client.on('authentication', (ctx) => {
      if (ctx.method !== 'publickey' || !allowedPub) return ctx.reject(['publickey']);
      const want = allowedPub.getPublicSSH();
      const same =
        ctx.key.algo === allowedPub.type && ctx.key.data.length === want.length && timingSafeEqual(ctx.key.data, want);
      if (!same) return ctx.reject(['publickey']);
      if (ctx.signature && !allowedPub.verify(ctx.blob!, ctx.signature, ctx.hashAlgo)) return ctx.reject(['publickey']);
      ctx.accept();
    });
    client.on('ready', () => {
      client.on('session', (accept) => {
        const session = accept();
        session.on('exec', (acceptExec, _reject, info) => {
          const ch = acceptExec();
          // SVC_GUEST_ROOT tells scripts (agent deploy) where this stand-in guest's root is; real guests have none.
          const p = spawn('/bin/sh', ['-c', info.command], {
            cwd: cwd(),
            stdio: 'pipe',
            env: childEnv({ SVC_GUEST_ROOT: cwd(), HOME: standInHome(cwd()) }),
          });
          ch.pipe(p.stdin);
          p.stdin.on('error', () => undefined);
          p.stdout.pipe(ch, { end: false });
          p.stderr.pipe(ch.stderr, { end: false });
          p.on('close', (code) => {
            // a negative code is an errno: the command never started
            ch.exit(code !== null && code >= 0 ? code : 255);
            ch.end();
          });
          // not started at all ('close' still follows): the command's status is 255
          p.on('error', () => undefined);
        });
      });
      client.on('tcpip', (accept, reject, info) => {
        const sock = connect({ port: info.destPort, host: '127.0.0.1', allowHalfOpen: true });
        sock.once('connect', () => {
          const ch = accept();
          sock.pipe(ch).pipe(sock);
          ch.on('error', () => sock.destroy());
          sock.on('error', () => ch.destroy());
        });
        sock.once('error', () => reject());
      });
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  return {
    port: (server.address() as AddressInfo).port,
    stop: () => {
      for (const c of clients) c.end();
      server.close();
    },
  };
}
