import 'reflect-metadata';
import { Container, ContainerModule } from 'inversify';
import { mkdirSync } from 'node:fs';
import { ConfigError, type Config } from './app/config.js';
import { AgentDeployService } from './app/agent-deploy-service.js';
import { ForwardService } from './app/forward-service.js';
import { GuestProxy } from './app/guest-proxy.js';
import { CreateService } from './app/create-service.js';
import { CreateOutcomes } from './app/create-outcome.js';
import { PoolClaims } from './app/pool-claims.js';
import { ForkService } from './app/fork-service.js';
import { Activity } from './app/activity.js';
import { RecoveryService } from './app/recovery-service.js';
import { Vms } from './app/vms.js';
import { ImageService } from './app/image-service.js';
import { ImageBuilder } from './app/image-builder.js';
import { imageRoutes } from './adapters/http/image-routes.js';
import { VmLifecycle } from './app/vm-lifecycle.js';
import { VmKeeper } from './app/vm-keeper.js';
import { MetricsSampler } from './app/metrics-sampler.js';
import { PoolService } from './app/pool-service.js';
import { LifecycleContribution, LifecycleContributions, LifecycleEvents } from './app/lifecycle-events.js';
import { LifetimeService } from './app/lifetime-service.js';
import { SecretService } from './app/secret-service.js';
import { AppConfig, DaemonVersion } from './app/tokens.js';
import { DistAgentArtifact } from './adapters/guest-link/dist-agent-artifact.js';
import { agentOptions, HttpGuestAgent } from './adapters/guest-link/http-guest-agent.js';
import { pickConnector } from './adapters/guest-link/transport.js';
import { SystemClock } from './adapters/clock/system-clock.js';
import { networkOf, speedUpsOf, standInsOf, type HypervisorDriver } from './adapters/hypervisor/driver.js';
import { CloneSpeedUps } from './ports/clone-speed-ups.js';
import { CrashWatch } from './app/crash-watch.js';
import { GuestReadiness } from './app/guest-readiness.js';
import { GuestWarmUp } from './app/guest-warm-up.js';
import { InMemoryGuestNetwork } from './adapters/guest-net/in-memory-guest-network.js';
import { egressRoutes } from './adapters/http/egress-routes.js';
import { EgressService } from './app/egress-service.js';
import { GuestNetwork } from './ports/guest-network.js';
import { DRIVERS } from './adapters/hypervisor/drivers.js';
import { guestRoutes } from './adapters/http/guest-routes.js';
import { GuestUpgrades } from './adapters/http/guest-upgrades.js';
import { BearerAuth } from './adapters/http-kit/auth.js';
import { BrowserSessions } from './adapters/http-kit/sessions.js';
import { eventRoutes } from './adapters/http/event-routes.js';
import { uiRoutes } from './adapters/http/ui-routes.js';
import { createHttpApp } from './adapters/http-kit/http-app.js';
import { HttpListeners } from './adapters/http/listeners.js';
import { mcpRoutes } from './adapters/mcp/mcp-http.js';
import { SvcClient } from './adapters/client/svc-client.js';
import { openApiDocument } from './adapters/http/openapi.js';
import type { RouteDef } from './adapters/http-kit/route.js';
import { secretRoutes } from './adapters/http/secret-routes.js';
import { systemRoutes } from './adapters/http/system-routes.js';
import { vmRoutes } from './adapters/http/vm-routes.js';
import { PinoLogger } from './adapters/log/pino-logger.js';
import { PromControlMetrics } from './adapters/metrics/prom-control-metrics.js';
import { FsSshKeys } from './adapters/ssh/fs-ssh-keys.js';
import { Ssh2Connections } from './adapters/ssh/ssh2-connections.js';
import { Ssh2RemoteShell } from './adapters/ssh/ssh2-remote-shell.js';
import { Ssh2Tunnels } from './adapters/ssh/ssh2-tunnels.js';
import { SshAgentInstaller } from './adapters/ssh/ssh-agent-installer.js';
import { TcpSshProbe } from './adapters/ssh/tcp-ssh-probe.js';
import { FsMetricsHistory } from './adapters/store/fs-metrics-history.js';
import { FsConsoleLogs } from './adapters/store/fs-console-logs.js';
import { ProcMeter } from './adapters/process-kit/proc-meter.js';
import { ProcessMeter } from './ports/process-meter.js';
import { FsSnapshotStore } from './adapters/store/fs-snapshot-store.js';
import { ImageSnapshots } from './app/image-snapshots.js';
import { CreateDisks } from './app/create-disks.js';
import { FsActivityLog } from './adapters/store/fs-activity-log.js';
import { FsVmStore } from './adapters/store/fs-vm-store.js';
import { FsSecretStore } from './adapters/store/fs-secret-store.js';
import { Clock } from './ports/clock.js';
import { GuestAgent } from './ports/guest-agent.js';
import { GuestProcesses } from './ports/guest-processes.js';
import { guestProcessesOf } from './adapters/guest-link/http-guest-processes.js';
import { ProcessProxy } from './app/process-proxy.js';
import { processRoutes } from './adapters/http/process-routes.js';
import { errorMessage } from './domain/errors.js';
import { E2bApi } from './adapters/e2b/e2b-api.js';
import { GuestImages, HostLinks, Hypervisor, VmDisks, type HypervisorAdapter } from './ports/hypervisor.js';
import { Logger } from './ports/logger.js';
import { ControlMetrics } from './ports/metrics.js';
import { ActivityLog, ConsoleLogs, VmStore, MetricsHistory, SecretStore, SnapshotStore } from './ports/stores.js';
import { AgentArtifact, AgentInstaller, RemoteShell, SshKeys, SshProbe, Tunnels } from './ports/tunnels.js';
import { VERSION } from './version.js';
import { FAILPOINTS, Failpoints, NO_FAILPOINTS } from './ports/failpoints.js';
import { KillFailpoints } from './adapters/process-kit/kill-failpoints.js';
import { clusterSettings, type ClusterSettings } from './app/cluster-config.js';
import { ClusterService } from './app/cluster-service.js';
import { ClusterPlacement } from './app/cluster-placement.js';
import { ClusterConfig } from './app/tokens.js';
import { ClusterStore, PeerNodes } from './ports/cluster.js';
import { MoveService } from './app/move-service.js';
import { ImageFetchService } from './app/image-fetch-service.js';
import { HttpPeerNodes } from './adapters/cluster/http-peer-nodes.js';
import { EtcdClusterStore } from './adapters/cluster/etcd-cluster-store.js';
import { ClusterFront } from './adapters/http/cluster-front.js';
import { cpus as hostCpus, hostname, totalmem } from 'node:os';
import { statfsSync } from 'node:fs';

/** Adapters an embedder may supply instead of the defaults the config selects. */
export interface DaemonOverrides {
  hypervisor?: HypervisorAdapter;
  guestAgent?: GuestAgent;
  /** Durable processes in guests; default: over the guest agent's HTTP when it has it. */
  guestProcesses?: GuestProcesses;
  sshProbe?: SshProbe;
  tunnels?: Tunnels;
  logger?: Logger;
  clock?: Clock;
  /** The guests' networks (default: the hypervisor's own, e.g. QEMU's in svc-netd; none for the fake). */
  guestNetwork?: GuestNetwork;
}

function coreModule(config: Config, o: DaemonOverrides, metrics: PromControlMetrics): ContainerModule {
  return new ContainerModule(({ bind }) => {
    bind(AppConfig).toConstantValue(config);
    // A test can arm one failpoint (test_mode only): the daemon dies there, as in a crash.
    const point = process.env.SVC_FAILPOINT;
    bind(Failpoints).toConstantValue(
      config.test_mode && point && (FAILPOINTS as readonly string[]).includes(point)
        ? new KillFailpoints(point)
        : NO_FAILPOINTS,
    );
    bind(DaemonVersion).toConstantValue(VERSION);
    bind(Logger).toConstantValue(o.logger ?? PinoLogger.create(config.log_level));
    if (o.clock) bind(Clock).toConstantValue(o.clock);
    else bind(Clock).to(SystemClock).inSingletonScope();
    bind(ProcessMeter).to(ProcMeter).inSingletonScope();
    bind(ControlMetrics).toConstantValue(metrics);
  });
}

function storeModule(): ContainerModule {
  return new ContainerModule(({ bind }) => {
    bind(VmStore).to(FsVmStore).inSingletonScope();
    bind(ActivityLog).to(FsActivityLog).inSingletonScope();
    bind(SecretStore).to(FsSecretStore).inSingletonScope();
    bind(MetricsHistory).to(FsMetricsHistory).inSingletonScope();
    bind(ConsoleLogs).to(FsConsoleLogs).inSingletonScope();
    bind(SnapshotStore).to(FsSnapshotStore).inSingletonScope();
  });
}

/** The daemon's SSH side: its key pair, one connection per guest, tunnels and remote exec. */
function sshModule(o: DaemonOverrides): ContainerModule {
  return new ContainerModule(({ bind }) => {
    bind(SshKeys).to(FsSshKeys).inSingletonScope();
    bind(Ssh2Connections)
      .toDynamicValue((ctx) => new Ssh2Connections(ctx.get<SshKeys>(SshKeys)))
      .inSingletonScope();
    if (o.tunnels) bind(Tunnels).toConstantValue(o.tunnels);
    else
      bind(Tunnels)
        .toDynamicValue((ctx) => new Ssh2Tunnels(ctx.get(Ssh2Connections)))
        .inSingletonScope();
    bind(RemoteShell)
      .toDynamicValue((ctx) => new Ssh2RemoteShell(ctx.get(Ssh2Connections)))
      .inSingletonScope();
    bind(AgentInstaller)
      .toDynamicValue((ctx) => new SshAgentInstaller(ctx.get<RemoteShell>(RemoteShell)))
      .inSingletonScope();
    bind(AgentArtifact).toConstantValue(new DistAgentArtifact());
  });
}

/**
 * The hypervisor: the config's driver module (its ports, its agent transport, its networks), or an
 * embedder's own adapter with what it offers; then the embedder's other adapters in place of the
 * driver's.
 */
function hypervisorModules(config: Config, o: DaemonOverrides): ContainerModule[] {
  const driver = o.hypervisor ? embedded(o.hypervisor, config) : DRIVERS[config.hypervisor];
  if (!driver)
    throw new ConfigError(
      `config key "hypervisor": no driver ${JSON.stringify(config.hypervisor)} (have: ${Object.keys(DRIVERS).join(', ')})`,
    );
  return [
    driver.module(config),
    new ContainerModule(({ rebind }) => {
      if (o.guestAgent) rebind(GuestAgent).toConstantValue(o.guestAgent);
      if (o.sshProbe) rebind(SshProbe).toConstantValue(o.sshProbe);
      if (o.guestNetwork) rebind(GuestNetwork).toConstantValue(o.guestNetwork);
    }),
    new ContainerModule(({ bind }) => {
      bind(GuestProcesses)
        .toDynamicValue((ctx) => o.guestProcesses ?? guestProcessesOf(ctx.get<GuestAgent>(GuestAgent)))
        .inSingletonScope();
    }),
  ];
}

/** A driver for an adapter an embedder hands in: its ports, and its stand-ins, networks and speed-ups when it offers them. */
function embedded(hv: HypervisorAdapter, config: Config): Pick<HypervisorDriver, 'module'> {
  return {
    module: () =>
      new ContainerModule(({ bind }) => {
        for (const port of [Hypervisor, VmDisks, GuestImages, HostLinks]) bind(port).toConstantValue(hv);
        bind(GuestAgent)
          .toDynamicValue(
            () => standInsOf(hv)?.guestAgent ?? new HttpGuestAgent(pickConnector('auto'), agentOptions(config)),
          )
          .inSingletonScope();
        bind(SshProbe)
          .toDynamicValue(() => standInsOf(hv)?.sshProbe ?? new TcpSshProbe())
          .inSingletonScope();
        bind(GuestNetwork).toConstantValue(networkOf(hv) ?? new InMemoryGuestNetwork());
        const speedUps = speedUpsOf(hv);
        if (speedUps) bind(CloneSpeedUps).toConstantValue(speedUps);
      }),
  };
}

/** The use cases; every port they need is bound by the other modules (or a test's fakes). */
export function appModule(): ContainerModule {
  return new ContainerModule(({ bind }) => {
    bind(LifecycleEvents).toSelf().inSingletonScope();
    bind(Vms).toSelf().inSingletonScope();
    bind(Activity).toSelf().inSingletonScope();
    bind(RecoveryService).toSelf().inSingletonScope();
    bind(VmKeeper).toSelf().inSingletonScope();
    bind(CrashWatch).toSelf().inSingletonScope();
    bind(GuestReadiness).toSelf().inSingletonScope();
    bind(GuestWarmUp).toSelf().inSingletonScope();
    bind(VmLifecycle).toSelf().inSingletonScope();
    bind(CreateService).toSelf().inSingletonScope();
    bind(CreateDisks).toSelf().inSingletonScope();
    bind(CreateOutcomes).toSelf().inSingletonScope();
    bind(PoolClaims).toSelf().inSingletonScope();
    bind(ForkService).toSelf().inSingletonScope();
    bind(SecretService).toSelf().inSingletonScope();
    bind(GuestProxy).toSelf().inSingletonScope();
    bind(ProcessProxy).toSelf().inSingletonScope();
    bind(ForwardService).toSelf().inSingletonScope();
    bind(MetricsSampler).toSelf().inSingletonScope();
    bind(AgentDeployService).toSelf().inSingletonScope();
    bind(PoolService).toSelf().inSingletonScope();
    bind(ImageService).toSelf().inSingletonScope();
    bind(ImageSnapshots).toSelf().inSingletonScope();
    bind(ImageBuilder).toSelf().inSingletonScope();
    bind(EgressService).toSelf().inSingletonScope();
    bind(LifetimeService).toSelf().inSingletonScope();
    // Who follows VMs' lifecycle, in the order they hear of it.
    bind(LifecycleContributions).toDynamicValue(
      (ctx) => () => ctx.getAll<LifecycleContribution>(LifecycleContribution),
    );
    for (const follower of [ForwardService, MetricsSampler, EgressService, PoolService, LifetimeService])
      bind(LifecycleContribution).toService(follower);
  });
}

/** With a `cluster` section: the node's settings, its etcd store and the cluster service (docs/cluster.md). */
function clusterModule(settings: ClusterSettings): ContainerModule {
  return new ContainerModule(({ bind }) => {
    bind(ClusterConfig).toConstantValue(settings);
    bind(ClusterStore)
      .toDynamicValue((ctx) => new EtcdClusterStore(settings, ctx.get<Logger>(Logger)))
      .inSingletonScope();
    bind(ClusterService).toSelf().inSingletonScope();
    bind(ClusterPlacement).toSelf().inSingletonScope();
    bind(LifecycleContribution).toService(ClusterService);
    bind(PeerNodes).toConstantValue(new HttpPeerNodes({ self: settings.node, token: settings.token }));
    bind(MoveService).toSelf().inSingletonScope();
    bind(ImageFetchService).toSelf().inSingletonScope();
  });
}

/** The cluster settings of `config` with the host's cpus, memory and disk for what it leaves at 0. */
export function nodeSettings(config: Config): ClusterSettings | undefined {
  return clusterSettings(config, () => {
    let disk_gb = 0;
    try {
      const st = statfsSync(config.data_dir);
      disk_gb = Math.floor((st.bavail * st.bsize) / 2 ** 30);
    } catch {
      // no data dir yet: made before this is read
    }
    return { hostname: hostname(), cpus: hostCpus().length, memory_mb: Math.floor(totalmem() / 2 ** 20), disk_gb };
  });
}

export function buildContainer(
  config: Config,
  overrides: DaemonOverrides = {},
): { container: Container; metrics: PromControlMetrics } {
  const metrics = new PromControlMetrics();
  const container = new Container();
  const cluster = nodeSettings(config);
  container.load(
    coreModule(config, overrides, metrics),
    storeModule(),
    sshModule(overrides),
    ...hypervisorModules(config, overrides),
    appModule(),
    ...(cluster ? [clusterModule(cluster)] : []),
  );
  return { container, metrics };
}

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
    }),
    ...systemRoutes({
      version: VERSION,
      hypervisor: hv.kind,
      registry: metrics.registry,
      activity: container.get<ActivityLog>(ActivityLog),
      openapi: () => openApiDocument(VERSION),
    }),
    ...vmRoutes(vms, lifecycle, container.get(CreateService), container.get(ForkService), lifetimes),
    ...egressRoutes(egress),
    ...processRoutes(container.get(ProcessProxy)),
    // A node of a cluster streams the whole cluster's changes.
    ...eventRoutes(cluster ?? vms, closing.signal),
    { method: 'get', path: '/pool', handler: (_req, res) => void res.json(pool.status()) },
    ...secretRoutes(secrets),
    ...imageRoutes(container.get(ImageService), container.get(ImageBuilder)),
    // E2B's API, translated onto the daemon's own (docs/e2b.md).
    ...e2b.routes(),
    // MCP tools call the daemon's own API over its socket, as `svc mcp` does from outside.
    ...mcpRoutes(new SvcClient({ socket: config.socket, token: config.api_token, env: {} }), {
      readOnly: config.mcp_read_only,
      images: config.mcp_images,
      maxVms: config.mcp_max_vms,
      egress: config.mcp_egress,
    }),
    ...uiRoutes(auth, sessions),
    ...(front ? front.routes() : []),
  ];
  const app = createHttpApp({ routes, auth, registry: metrics.registry, log, front: front?.http });
  const upgrades = new GuestUpgrades(container.get(GuestProxy), auth);
  const listeners = new HttpListeners(
    app,
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
  // A first start builds the default image now, so the first create does not wait for it.
  container
    .get(ImageService)
    .prebuildDefault()
    .catch((err: Error) => log.warn({ err: err.message }, 'could not start building the default image'));

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
        // Captures are called off first: one that ends while the listeners close (they wait for
        // open requests) would leave a snapshot the stop did not mean to make.
        await snapshots.stop();
        await listeners.stop();
        pool.stop();
        await pool.settled();
        sampler.stopAll();
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
