import 'reflect-metadata';
import { Container, ContainerModule } from 'inversify';
import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import type { Config } from './app/config.js';
import { InstanceService } from './app/instance-service.js';
import { LifecycleEvents } from './app/lifecycle-events.js';
import { SecretService } from './app/secret-service.js';
import { AppConfig, DaemonVersion } from './app/tokens.js';
import { InMemoryGuestAgent } from './adapters/agent/in-memory-guest-agent.js';
import { SystemClock } from './adapters/clock/system-clock.js';
import { InMemoryHypervisor } from './adapters/hypervisor/in-memory-hypervisor.js';
import { BearerAuth } from './adapters/http/auth.js';
import { createHttpApp } from './adapters/http/http-app.js';
import { HttpListeners } from './adapters/http/listeners.js';
import { openApiDocument } from './adapters/http/openapi.js';
import type { RouteDef } from './adapters/http/route.js';
import { secretRoutes } from './adapters/http/secret-routes.js';
import { systemRoutes } from './adapters/http/system-routes.js';
import { vmRoutes } from './adapters/http/vm-routes.js';
import { PinoLogger } from './adapters/log/pino-logger.js';
import { PromControlMetrics } from './adapters/metrics/prom-control-metrics.js';
import { FsSshKeys } from './adapters/ssh/fs-ssh-keys.js';
import { InMemorySshProbe } from './adapters/ssh/in-memory-ssh-probe.js';
import { FsActivityLog } from './adapters/store/fs-activity-log.js';
import { FsInstanceStore } from './adapters/store/fs-instance-store.js';
import { FsSecretStore } from './adapters/store/fs-secret-store.js';
import { Clock } from './ports/clock.js';
import { GuestAgent } from './ports/guest-agent.js';
import { Hypervisor } from './ports/hypervisor.js';
import { Logger } from './ports/logger.js';
import { ControlMetrics } from './ports/metrics.js';
import { ActivityLog, InstanceStore, SecretStore } from './ports/stores.js';
import { SshKeys, SshProbe } from './ports/tunnels.js';
import { VERSION } from './version.js';
import { mkdirSync } from 'node:fs';

/** Adapters an embedder may supply instead of the defaults the config selects. */
export interface DaemonOverrides {
  hypervisor?: Hypervisor;
  guestAgent?: GuestAgent;
  sshProbe?: SshProbe;
  logger?: Logger;
  clock?: Clock;
}

function coreModule(config: Config, o: DaemonOverrides, metrics: PromControlMetrics): ContainerModule {
  return new ContainerModule(({ bind }) => {
    bind(AppConfig).toConstantValue(config);
    bind(DaemonVersion).toConstantValue(VERSION);
    bind(Logger).toConstantValue(o.logger ?? PinoLogger.create(config.log_level));
    if (o.clock) bind(Clock).toConstantValue(o.clock);
    else bind(Clock).to(SystemClock).inSingletonScope();
    bind(ControlMetrics).toConstantValue(metrics);
  });
}

function storeModule(): ContainerModule {
  return new ContainerModule(({ bind }) => {
    bind(InstanceStore).to(FsInstanceStore).inSingletonScope();
    bind(ActivityLog).to(FsActivityLog).inSingletonScope();
    bind(SecretStore).to(FsSecretStore).inSingletonScope();
    bind(SshKeys).to(FsSshKeys).inSingletonScope();
  });
}

/** Picks the hypervisor adapter (and the guest-side adapters that go with it) from config. */
function hypervisorModule(config: Config, o: DaemonOverrides): ContainerModule {
  return new ContainerModule(({ bind }) => {
    if (o.hypervisor) {
      bind(Hypervisor).toConstantValue(o.hypervisor);
    } else if (config.hypervisor === 'fake') {
      bind(Hypervisor).toConstantValue(new InMemoryHypervisor({ bootDelayMs: config.fake_boot_delay_ms }));
    } else {
      throw new Error('hypervisor: qemu is not available in this build yet; use hypervisor: fake');
    }
    bind(GuestAgent).toDynamicValue((ctx) => {
      if (o.guestAgent) return o.guestAgent;
      const hv = ctx.get<Hypervisor>(Hypervisor);
      if (hv instanceof InMemoryHypervisor) return new InMemoryGuestAgent(hv);
      throw new Error('no guest agent adapter for this hypervisor');
    }).inSingletonScope();
    bind(SshProbe).toDynamicValue((ctx) => {
      if (o.sshProbe) return o.sshProbe;
      const hv = ctx.get<Hypervisor>(Hypervisor);
      if (hv instanceof InMemoryHypervisor) return new InMemorySshProbe(hv);
      throw new Error('no ssh probe for this hypervisor');
    }).inSingletonScope();
  });
}

function appModule(): ContainerModule {
  return new ContainerModule(({ bind }) => {
    bind(LifecycleEvents).toSelf().inSingletonScope();
    bind(InstanceService).toSelf().inSingletonScope();
    bind(SecretService).toSelf().inSingletonScope();
  });
}

export function buildContainer(config: Config, overrides: DaemonOverrides = {}): { container: Container; metrics: PromControlMetrics } {
  const metrics = new PromControlMetrics();
  const container = new Container();
  container.load(coreModule(config, overrides, metrics), storeModule(), hypervisorModule(config, overrides), appModule());
  return { container, metrics };
}

export interface RunningDaemon {
  config: Config;
  container: Container;
  /** The TCP port actually bound (useful with `api: 127.0.0.1:0`). */
  tcpPort?: number;
  /** Every route served, as `method path` in express syntax (WebSocket routes included). */
  routes: { method: string; path: string }[];
  stop(): Promise<void>;
}

/** Builds the daemon from config (and optional adapters), restores state, and starts listening. */
export async function startDaemon(config: Config, overrides: DaemonOverrides = {}): Promise<RunningDaemon> {
  mkdirSync(config.data_dir, { recursive: true, mode: 0o700 });
  const { container, metrics } = buildContainer(config, overrides);
  const log = container.get<Logger>(Logger);
  const instances = container.get(InstanceService);
  const secrets = container.get(SecretService);
  const hv = container.get<Hypervisor>(Hypervisor);
  await instances.init();

  const routes: RouteDef[] = [
    ...systemRoutes({
      version: VERSION, hypervisor: hv.kind, registry: metrics.registry, activity: container.get<ActivityLog>(ActivityLog),
      openapi: () => openApiDocument(VERSION),
    }),
    ...vmRoutes(instances),
    ...secretRoutes(secrets),
  ];
  const app = createHttpApp({ routes, auth: new BearerAuth(config.api_token), registry: metrics.registry, log });
  const upgrade = (_req: IncomingMessage, socket: Duplex) => {
    socket.end('HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n{"error":"no websocket route"}');
  };
  const listeners = new HttpListeners(app, upgrade);
  await listeners.start({ socket: config.socket, api: config.api });
  log.info({ socket: config.socket, api: config.api, tcp_port: listeners.tcpPort, hypervisor: hv.kind, version: VERSION }, 'svcd listening');

  let stopped: Promise<void> | undefined;
  return {
    config,
    container,
    tcpPort: listeners.tcpPort,
    routes: routes.map((r) => ({ method: r.method, path: r.path })),
    stop: () => (stopped ??= (async () => {
      await listeners.stop();
      await instances.close();
      if (hv instanceof InMemoryHypervisor) await hv.closeAll();
      log.info({}, 'svcd stopped');
      if (log instanceof PinoLogger) log.flush();
    })()),
  };
}
