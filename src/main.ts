import 'reflect-metadata';
import { Container } from 'inversify';
import { mkdirSync } from 'node:fs';
import { type Config } from './app/config.js';
import { SshAccess } from './app/ssh-access.js';
import { AgentDeployService } from './app/agent-deploy-service.js';
import { ForwardService } from './app/forward-service.js';
import { GuestProxy } from './app/guest-proxy.js';
import { CreateService } from './app/create-service.js';
import { ForkService } from './app/fork-service.js';
import { Activity } from './app/activity.js';
import { RecoveryService } from './app/recovery-service.js';
import { Vms } from './app/vms.js';
import { ImageService } from './app/image-service.js';
import { ImageBuilder } from './app/image-builder.js';
import { imageRoutes } from './adapters/http/image-routes.js';
import { VmEdit } from './app/vm-edit.js';
import { VmLifecycle } from './app/vm-lifecycle.js';
import { MetricsSampler } from './app/metrics-sampler.js';
import { PoolService } from './app/pool-service.js';
import { LifetimeService } from './app/lifetime-service.js';
import { SecretService } from './app/secret-service.js';
import { CrashWatch } from './app/crash-watch.js';
import { GuestWarmUp } from './app/guest-warm-up.js';
import { egressRoutes } from './adapters/http/egress-routes.js';
import { EgressService } from './app/egress-service.js';
import { guestRoutes } from './adapters/http/guest-routes.js';
import { GuestUpgrades } from './adapters/http/guest-upgrades.js';
import { BearerAuth } from './adapters/http-kit/auth.js';
import { BrowserSessions } from './adapters/http-kit/sessions.js';
import { eventRoutes } from './adapters/http/event-routes.js';
import { uiRoutes } from './adapters/http/ui-routes.js';
import { createHttpApp } from './adapters/http-kit/http-app.js';
import { RequestMetrics } from './adapters/http-kit/request-metrics.js';
import { HttpListeners } from './adapters/http/listeners.js';
import { mcpRoutes } from './adapters/mcp/mcp-http.js';
import { SvcClient } from './adapters/client/svc-client.js';
import { openApiDocument } from './adapters/http/openapi.js';
import type { RouteDef } from './adapters/http-kit/route.js';
import { secretRoutes } from './adapters/http/secret-routes.js';
import { systemRoutes } from './adapters/http/system-routes.js';
import { vmRoutes } from './adapters/http/vm-routes.js';
import { snapshotRoutes } from './adapters/http/snapshot-routes.js';
import { VmSnapshots } from './app/vm-snapshots.js';
import { PinoLogger } from './adapters/log/pino-logger.js';
import { Ssh2Connections } from './adapters/ssh/ssh2-connections.js';
import { ImageSnapshots } from './app/image-snapshots.js';
import { GuestAgent } from './ports/guest-agent.js';
import { ProcessProxy } from './app/process-proxy.js';
import { processRoutes } from './adapters/http/process-routes.js';
import { errorMessage } from './domain/errors.js';
import { E2bApi } from './adapters/e2b/e2b-api.js';
import { Hypervisor } from './ports/hypervisor.js';
import { GuestImages } from './ports/guest-images.js';
import { Logger } from './ports/logger.js';
import { ActivityLog, ConsoleLogs, SecretStore } from './ports/stores.js';
import { Tunnels } from './ports/tunnels.js';
import { VERSION } from './version.js';
import { ClusterService } from './app/cluster-service.js';
import { ClusterPlacement } from './app/cluster-placement.js';
import { MoveService } from './app/move-service.js';
import { ImageFetchService } from './app/image-fetch-service.js';
import { ClusterFront } from './adapters/http/cluster-front.js';
import { buildContainer, type DaemonOverrides } from './daemon-container.js';

export { appModule, buildContainer, type DaemonOverrides } from './daemon-container.js';

export interface RunningDaemon {
  config: Config;
  container: Container;
  /** The TCP port actually bound (useful with `api: 127.0.0.1:0`). */
  tcpPort?: number;
  /** Every route served, as `method path` in express syntax (WebSocket routes included). */
  routes: { method: string; path: string }[];
  /** Waits until the warm pool has finished its current refill round. */
  poolSettled(): Promise<void>;
  stop(): Promise<void>;
}

/** Builds the daemon from config (and optional adapters), restores state, and starts listening. */
export async function startDaemon(config: Config, overrides: DaemonOverrides = {}): Promise<RunningDaemon> {
  mkdirSync(config.data_dir, { recursive: true, mode: 0o700 });
  await HttpListeners.claim(config.socket);
  const { container, metrics } = buildContainer(config, overrides);
  const log = container.get<Logger>(Logger);
  const lifecycle = container.get(VmLifecycle);
  const vms = container.get(Vms);
  metrics.setRunningSource(() => vms.count((r) => r.status === 'running'));
  const secrets = container.get(SecretService);
  const hv = container.get<Hypervisor>(Hypervisor);
  const forwards = container.get(ForwardService);
  const sampler = container.get(MetricsSampler);
  const pool = container.get(PoolService);
  const egress = container.get(EgressService);
  // Who listens to what, once: the hypervisor's exits, the warm-up calls offered, egress decisions.
  container.get(CrashWatch).start();
  container.get(GuestWarmUp).start();
  const stopEgress = egress.start();
  await container.get<SecretStore>(SecretStore).verify();
  await container.get(RecoveryService).init();
  const snapshots = container.get(ImageSnapshots);
  await snapshots.init();
  const lifetimes = container.get(LifetimeService);
  lifetimes.start();

  const sessions = new BrowserSessions(config.ui_session_ms);
  const cluster = container.isBound(ClusterService) ? container.get(ClusterService) : undefined;
  const auth = new BearerAuth(config.api_token, sessions, undefined, cluster?.settings.token);
  const moves = cluster ? container.get(MoveService) : undefined;
  const requestMetrics = new RequestMetrics(metrics.registry);
  const front =
    cluster &&
    moves &&
    new ClusterFront(cluster, {
      socket: config.socket,
      token: cluster.settings.token,
      auth,
      moves,
      placement: container.get(ClusterPlacement),
      fetches: container.get(ImageFetchService),
      images: container.get<GuestImages>(GuestImages),
      splice: config.splice,
      metrics: requestMetrics,
      log,
    });
  if (cluster)
    metrics.setClusterSource(
      () => cluster.nodes(),
      () => cluster.stale,
    );
  const closing = new AbortController();
  const self = new SvcClient({ socket: config.socket, token: config.api_token, env: {} });
  // E2B's API, translated onto the daemon's own (docs/e2b.md).
  const e2b = new E2bApi(
    self,
    {
      apiToken: config.api_token,
      dataDir: config.data_dir,
      volumesDir: config.e2b_volumes_dir,
      domain: config.e2b_domain,
      poolTemplate: config.warm_pool.template,
    },
    auth.throttle,
    log.child({ part: 'e2b' }),
  );
  await e2b.open();
  const unwatchRules = vms.watch((c) => void (c.event === 'removed' && e2b.vmRemoved()));
  const routes: RouteDef[] = [
    // The agent proxy first: its routes are the ones called in loops (exec, cp, fs), and express
    // tries routes in order. No other route matches a request one of them matches (each ends in its
    // own word after /vms/:name), so their place changes speed only.
    ...guestRoutes({
      guest: container.get(GuestProxy),
      logs: container.get<ConsoleLogs>(ConsoleLogs),
      vms,
      forwards,
      secrets,
      sampler,
      deploy: container.get(AgentDeployService),
      ssh: container.get(SshAccess),
    }),
    ...systemRoutes({
      version: VERSION,
      hypervisor: hv.kind,
      registry: metrics.registry,
      activity: container.get<ActivityLog>(ActivityLog),
      openapi: () => openApiDocument(VERSION),
    }),
    ...vmRoutes({
      vms,
      lifecycle,
      creates: container.get(CreateService),
      forks: container.get(ForkService),
      lifetimes,
      edits: container.get(VmEdit),
    }),
    ...egressRoutes(egress),
    ...snapshotRoutes(container.get(VmSnapshots)),
    ...processRoutes(container.get(ProcessProxy)),
    // A node of a cluster streams the whole cluster's changes.
    ...eventRoutes(cluster ?? vms, closing.signal),
    { method: 'get', path: '/pool', handler: (_req, res) => void res.json(pool.status()) },
    ...secretRoutes(secrets),
    ...imageRoutes(container.get(ImageService), container.get(ImageBuilder)),
    // E2B's API, translated onto the daemon's own (docs/e2b.md).
    ...e2b.routes(),
    // MCP tools call the daemon's own API over its socket, as `svc mcp` does from outside.
    ...mcpRoutes(
      new SvcClient({ socket: config.socket, token: config.api_token, env: {} }),
      {
        readOnly: config.mcp_read_only,
        images: config.mcp_images,
        maxVms: config.mcp_max_vms,
        egress: config.mcp_egress,
        nodes: config.mcp_nodes,
      },
      { cluster: !!front },
    ),
    ...uiRoutes(auth, sessions),
    ...(front ? front.routes() : []),
  ];
  const app = createHttpApp({ routes, auth, metrics: requestMetrics, log, front: front?.http });
  const upgrades = new GuestUpgrades(container.get(GuestProxy), auth);
  const listeners = new HttpListeners(
    front ? front.request(app) : app,
    front ? front.upgrade(upgrades.handleUpgrade) : upgrades.handleUpgrade,
    config.header_timeout_ms,
    e2b.hosts,
  );
  await listeners.start({
    socket: config.socket,
    api: config.api,
    // Other nodes call this one by the name it advertises.
    allowedHosts: [...config.allowed_hosts, ...(cluster ? [new URL(cluster.settings.advertise).hostname] : [])],
    allowedOrigins: config.allowed_origins,
  });
  e2b.listening(listeners.tcpPort);
  await cluster?.start();
  // A move a stop cut off is finished by what etcd says (docs/cluster.md, "Moving a VM").
  await moves?.settle();
  // A template build a stop cut off leaves a VM that is no template (docs/e2b.md, "Templates").
  void e2b
    .sweep({ vms: !cluster })
    .then(
      (gone) =>
        gone.length &&
        log.info({ vms: gone }, 'removed the VMs of E2B template builds a stop left (cut off, or no tag names them)'),
    )
    .catch((err: unknown) => log.warn({ err: errorMessage(err) }, 'could not sweep cut-off E2B template builds'));
  log.info(
    { socket: config.socket, api: config.api, tcp_port: listeners.tcpPort, hypervisor: hv.kind, version: VERSION },
    'svcd listening',
  );
  if (config.api && !/^(127\.|localhost:|\[::1\]:)/.test(config.api)) {
    log.warn(
      { api: config.api },
      'the API listens beyond loopback over plain HTTP: the token and everything else cross the network unencrypted; put it behind TLS (a reverse proxy or an SSH tunnel)',
    );
  }
  pool.refill();
  // A first start builds the default image now, so the first create does not wait for it; a start
  // after an upgrade builds again the built-in images the svc before it built.
  const imageService = container.get(ImageService);
  imageService
    .prebuildDefault()
    .catch((err: Error) => log.warn({ err: err.message }, 'could not start building the default image'));
  imageService
    .refreshOutdated()
    .catch((err: Error) => log.warn({ err: err.message }, 'could not look for images built by an older svc'));
  const stopForgetting = imageService.forgetOlderBuildsWhenFreed();

  let stopped: Promise<void> | undefined;
  return {
    config,
    container,
    tcpPort: listeners.tcpPort,
    routes: routes.map((r) => ({ method: r.method, path: r.path })),
    poolSettled: () => pool.settled(),
    stop: () =>
      (stopped ??= (async () => {
        closing.abort();
        unwatchRules();
        await cluster?.stop().catch((err: Error) => log.warn({ err: err.message }, 'cluster: could not leave'));
        lifetimes.stop();
        stopForgetting();
        // Captures are called off first: one that ends while the listeners close (they wait for
        // open requests) would leave a snapshot the stop did not mean to make.
        await snapshots.stop();
        await listeners.stop();
        pool.stop();
        await pool.settled();
        await sampler.stopAll();
        stopEgress();
        await container.get<Tunnels>(Tunnels).closeEverything();
        container.get(Ssh2Connections).end();
        container.get<GuestAgent>(GuestAgent).close();
        await container.get(Activity).flush();
        // The daemon's own hypervisor lets go of its VMs (QEMU's keep running; in-memory ones stop);
        // an embedder's outlives the daemon.
        if (!overrides.hypervisor) await hv.release();
        log.info({}, 'svcd stopped');
        if (log instanceof PinoLogger) log.flush();
      })()),
  };
}
