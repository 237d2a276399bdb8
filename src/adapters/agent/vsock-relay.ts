import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';

/**
 * Node's `net` has no AF_VSOCK, so the agent serves vsock through socat: `VSOCK-LISTEN` on the
 * guest side, relayed to the agent's TCP listener on loopback. socat is a well-kept tool with
 * vsock support since 1.7.4 (Debian 12). This is the documented choice (docs/agent.md).
 */
export interface VsockEnv {
  exists(path: string): boolean;
  which(cmd: string): string | undefined;
}

export const realVsockEnv: VsockEnv = {
  exists: (p) => existsSync(p),
  which: (cmd) =>
    ['/usr/bin', '/bin', '/usr/local/bin', '/usr/sbin', '/sbin'].map((d) => `${d}/${cmd}`).find((p) => existsSync(p)),
};

/** Why vsock cannot be served here, or undefined when it can. */
export function vsockUnavailable(env: VsockEnv): string | undefined {
  if (!env.exists('/dev/vsock')) return 'the kernel offers no AF_VSOCK (/dev/vsock missing)';
  if (!env.which('socat')) return 'socat is not installed';
  return undefined;
}

export function socatArgs(vsockPort: number, tcpPort: number): string[] {
  return ['-d', `VSOCK-LISTEN:${vsockPort},reuseaddr,fork`, `TCP:127.0.0.1:${tcpPort}`];
}

/** Starts the relay; restarts it if it dies, until `stop()`. */
export function startVsockRelay(
  vsockPort: number,
  tcpPort: number,
  env: VsockEnv = realVsockEnv,
  log: (m: string) => void = () => undefined,
): { stop(): void } | undefined {
  const why = vsockUnavailable(env);
  if (why) {
    log(`vsock disabled: ${why}`);
    return undefined;
  }
  let child: ChildProcess | undefined;
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  const run = () => {
    const c = spawn(env.which('socat')!, socatArgs(vsockPort, tcpPort), { stdio: 'ignore' });
    child = c;
    // A socat that exits, or that could not be started at all (an `error` event and no exit:
    // unheard, it would stop the agent), is started again a second later, once.
    let again = false;
    const restart = () => {
      if (again || stopped) return;
      again = true;
      timer = setTimeout(run, 1000);
    };
    c.on('exit', restart);
    c.on('error', restart);
  };
  run();
  log(`vsock relay on port ${vsockPort}`);
  return {
    stop: () => {
      stopped = true;
      // a restart due would start a socat nobody stops
      clearTimeout(timer);
      child?.kill();
    },
  };
}
