import type { OutputFrame, ProcessInfo, ProcessStream } from '../../domain/processes.js';
import { InvalidArgumentError } from '../../domain/errors.js';
import type { SvcClient } from '../client/svc-client.js';
import { RpcError, type RpcCall, type RpcService } from './connect-rpc.js';
import { abs, keepaliveMs, nextOrTick, userOf, type EnvdCalls } from './envd-common.js';
import { metaOf } from './sandboxes.js';

/** Where a guest's commands start and what runs them (envd-routes.ts asks the guest once per VM). */
export interface CommandPlaces {
  /** E2B runs every command as `/bin/bash -l -c CMD`; a guest without bash gets its `sh`. */
  commandIn(vm: string, cmd: string): Promise<string>;
  /** Root's home, where E2B's default user's commands start; undefined in a guest without one. */
  homeIn(vm: string): Promise<string | undefined>;
}

/**
 * envd's `process.Process` service on svc's durable processes (docs/e2b.md): an E2B pid is the
 * process's pid in the guest, its output its journal, replayed whole on a connect.
 */
export function processService(client: SvcClient, calls: EnvdCalls, places: CommandPlaces): RpcService {
  const { runningVm, vmOf } = calls;
  const { commandIn, homeIn } = places;
  /** The svc process an E2B selector names: `{pid}` (the guest's pid of a running one) or `{tag}`. */
  const findProcess = async (vm: string, selector: unknown): Promise<ProcessInfo> => {
    const s = (selector ?? {}) as { pid?: unknown; tag?: unknown };
    const list = await client.processes(vm);
    const found =
      s.pid !== undefined
        ? (list.find((p) => p.pid === Number(s.pid) && p.state === 'running') ??
          list.findLast((p) => p.pid === Number(s.pid)))
        : typeof s.tag === 'string'
          ? list.find((p) => p.tag === s.tag && p.state === 'running')
          : undefined;
    if (!found) throw new RpcError('not_found', `process ${JSON.stringify(s.pid ?? s.tag)} not found`);
    return found;
  };

  /** A process's events as E2B's: start, data (bytes in base64), end; keepalives between. */
  async function* events(vm: string, p: ProcessInfo, call: RpcCall): AsyncIterable<unknown> {
    yield { event: { start: { pid: p.pid } } };
    const it = client.processOutput(vm, p.id, { signal: call.signal })[Symbol.asyncIterator]();
    const pending: { p?: Promise<IteratorResult<OutputFrame>> } = {};
    const every = keepaliveMs(call.req);
    try {
      for (;;) {
        const r = await nextOrTick(it, pending, every);
        if (r === 'tick') {
          yield { event: { keepalive: {} } };
          continue;
        }
        if (r.done) return;
        const f = r.value;
        if ('stream' in f) {
          const b64 = f.encoding === 'base64' ? f.data : Buffer.from(f.data).toString('base64');
          yield { event: { data: { [f.stream as ProcessStream]: b64 } } };
        } else if ('reason' in f) {
          const code = f.exit_code ?? (f.reason === 'exit' ? 0 : -1);
          const status = f.signal ? `signal: ${f.signal.replace(/^SIG/, '').toLowerCase()}` : `exit status ${code}`;
          yield {
            event: {
              end: {
                exitCode: code,
                exited: f.reason === 'exit',
                status,
                ...(f.reason === 'reboot' || f.reason === 'lost'
                  ? { error: `the process was ${f.reason === 'reboot' ? 'ended by a reboot' : 'lost'}` }
                  : {}),
              },
            },
          };
          return;
        }
      }
    } finally {
      await it.return?.();
    }
  }

  return {
    stream: {
      Start: async function* (msg, call) {
        const sandbox = await runningVm(call.req);
        const vm = sandbox.name;
        const cfg = (msg.process ?? {}) as { cmd?: unknown; args?: unknown; envs?: unknown; cwd?: unknown };
        if (typeof cfg.cmd !== 'string' || !cfg.cmd) throw new InvalidArgumentError('process.cmd is required');
        const pty = msg.pty as { size?: { cols?: number; rows?: number } } | undefined;
        const p = await client.startProcess(vm, {
          cmd: await commandIn(vm, cfg.cmd),
          args: Array.isArray(cfg.args) ? cfg.args.map(String) : [],
          env: { ...metaOf(sandbox).envs, ...((cfg.envs ?? {}) as Record<string, string>) },
          // E2B starts a command in its user's home: another user's is the agent's default.
          cwd:
            typeof cfg.cwd === 'string' && cfg.cwd
              ? abs(cfg.cwd)
              : (metaOf(sandbox).workdir ?? (userOf(call.req) ? undefined : await homeIn(vm))),
          user: userOf(call.req),
          tag: typeof msg.tag === 'string' && msg.tag ? msg.tag : undefined,
          pty: pty ? { cols: pty.size?.cols ?? 80, rows: pty.size?.rows ?? 24 } : undefined,
          stdin: msg.stdin === true || !!pty,
        });
        yield* events(vm, p, call);
      },
      Connect: async function* (msg, call) {
        const vm = await vmOf(call.req);
        const p = await findProcess(vm, (msg.process as { selector?: unknown })?.selector ?? msg.process);
        yield* events(vm, p, call);
      },
    },
    unary: {
      List: async (_msg, call) => {
        const vm = await vmOf(call.req);
        const running = (await client.processes(vm)).filter((p) => p.state === 'running');
        return {
          processes: running.map((p) => ({
            pid: p.pid,
            ...(p.tag ? { tag: p.tag } : {}),
            config: { cmd: p.cmd, args: p.args, envs: {} },
          })),
        };
      },
      SendInput: async (msg, call) => {
        const vm = await vmOf(call.req);
        const p = await findProcess(vm, selectorOf(msg));
        const input = (msg.input ?? {}) as { stdin?: string; pty?: string };
        const data = Buffer.from(input.stdin ?? input.pty ?? '', 'base64');
        await client.sendStdin(vm, p.id, data);
        return {};
      },
      CloseStdin: async (msg, call) => {
        const vm = await vmOf(call.req);
        const p = await findProcess(vm, selectorOf(msg));
        await client.sendStdin(vm, p.id, Buffer.alloc(0), { eof: true });
        return {};
      },
      SendSignal: async (msg, call) => {
        const vm = await vmOf(call.req);
        const p = await findProcess(vm, selectorOf(msg));
        if (p.state !== 'running') throw new RpcError('not_found', `process ${p.pid} has ended`);
        const sig = msg.signal === 'SIGNAL_SIGTERM' || msg.signal === 15 ? 'SIGTERM' : 'SIGKILL';
        await client.signalProcess(vm, p.id, sig);
        return {};
      },
      Update: async (msg, call) => {
        const vm = await vmOf(call.req);
        const p = await findProcess(vm, selectorOf(msg));
        const size = (msg.pty as { size?: { cols?: number; rows?: number } } | undefined)?.size;
        if (size) await client.resizeProcess(vm, p.id, size.cols ?? 80, size.rows ?? 24);
        return {};
      },
    },
  };
}

function selectorOf(msg: Record<string, unknown>): unknown {
  const p = msg.process as { selector?: unknown; pid?: unknown; tag?: unknown } | undefined;
  return p?.selector ?? p;
}
