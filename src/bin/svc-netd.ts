#!/usr/bin/env node
import { PinoLogger } from '../adapters/log/pino-logger.js';
import { NetdServer } from '../adapters/netd/netd-server.js';
import { hostTrust } from '../adapters/netd/secret-proxy.js';
import { SealedSecretReader } from '../adapters/fs-kit/sealed-secret.js';

const USAGE = `usage: svc-netd --control SOCKET --state FILE [--build ID] [--idle-exit SECONDS] [--dns HOST[:PORT],...]

The networks of svc's VMs (docs/network.md): each VM's QEMU hands its guest's Ethernet frames to
this process, which answers them as the guest's gateway, resolver and DHCP server and carries
what the VM's egress policy allows out through host sockets. svcd starts it and drives it over
the control socket; it outlives svcd, so a daemon restart does not cut a guest's connections.
With --secrets it reads egress secrets' values from the daemon's secret store in DATA_DIR at each
request; their upstreams' certificates must lead to the host's trust store or --upstream-ca.`;

async function main(argv: string[]): Promise<void> {
  let control = '';
  let state = '';
  let build = 'dev';
  let idle = 60;
  let dns: string[] = [];
  let secrets = '';
  let upstreamCa = '';
  for (let i = 0; i < argv.length; i++) {
    const [flag, inline] = argv[i].split(/=(.*)/s, 2);
    const value = () => inline ?? argv[++i];
    switch (flag) {
      case '--control':
        control = value();
        break;
      case '--state':
        state = value();
        break;
      case '--build':
        build = value();
        break;
      case '--idle-exit':
        idle = Number(value());
        break;
      case '--dns':
        dns = value().split(',').filter(Boolean);
        break;
      case '--secrets':
        secrets = value();
        break;
      case '--upstream-ca':
        upstreamCa = value();
        break;
      case '--help':
      case '-h':
        console.log(USAGE);
        return;
      default:
        console.error(`svc-netd: unknown argument ${argv[i]}\n${USAGE}`);
        process.exit(2);
    }
  }
  if (!control || !state || !Number.isFinite(idle) || idle < 0) {
    console.error(`svc-netd: --control and --state are required\n${USAGE}`);
    process.exit(2);
  }
  const log = PinoLogger.create(process.env.SVC_LOG_LEVEL === 'debug' ? 'debug' : 'info', 'svc-netd');
  const exit = () => void server.stop().finally(() => process.exit(0));
  const server: NetdServer = new NetdServer({
    control,
    state,
    build,
    log,
    idleExitMs: idle * 1000,
    exit,
    dns,
    values: secrets ? new SealedSecretReader(secrets) : undefined,
    trust: hostTrust(upstreamCa || undefined),
  });
  await server.start();
  log.info({ control, pid: process.pid, build }, 'svc-netd listening');
  process.on('SIGTERM', exit);
  process.on('SIGINT', exit);
  // A bug in one guest's frames must not take every VM's network down.
  process.on('uncaughtException', (err) => log.error({ err: err.message, stack: err.stack }, 'uncaught exception'));
}

main(process.argv.slice(2)).catch((err: unknown) => {
  console.error(`svc-netd: ${(err as Error).message}`);
  process.exit(1);
});
