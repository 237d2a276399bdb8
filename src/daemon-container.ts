import 'reflect-metadata';
import { Container, ContainerModule } from 'inversify';
import { ConfigError, type Config } from './app/config.js';
import { AgentDeployService } from './app/agent-deploy-service.js';
import { SshAccess } from './app/ssh-access.js';
import { ForwardService } from './app/forward-service.js';
import { GuestProxy } from './app/guest-proxy.js';
import { CreateService } from './app/create-service.js';
import { CreateOutcomes } from './app/create-outcome.js';
import { PoolClaims } from './app/pool-claims.js';
import { ForkService } from './app/fork-service.js';
import { VmCaptures } from './app/vm-captures.js';
import { KeptOutputs } from './app/kept-output.js';
import { VmSnapshots } from './app/vm-snapshots.js';
import { Activity } from './app/activity.js';
import { RecoveryService } from './app/recovery-service.js';
import { Vms } from './app/vms.js';
import { ImageService } from './app/image-service.js';
import { ImageBuilder } from './app/image-builder.js';
import { VmEdit } from './app/vm-edit.js';
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
import { GuestShares } from './app/guest-shares.js';
import { InMemoryGuestNetwork } from './adapters/guest-net/in-memory-guest-network.js';
import { EgressService } from './app/egress-service.js';
import { GuestNetwork } from './ports/guest-network.js';
import { DRIVERS } from './adapters/hypervisor/drivers.js';
import { PinoLogger } from './adapters/log/pino-logger.js';
import { PromControlMetrics } from './adapters/metrics/prom-control-metrics.js';
import { FsSshKeys } from './adapters/ssh/fs-ssh-keys.js';
import { Ssh2Connections } from './adapters/ssh/ssh2-connections.js';
import { Ssh2RemoteShell } from './adapters/ssh/ssh2-remote-shell.js';
import { Ssh2Tunnels } from './adapters/ssh/ssh2-tunnels.js';
import { SshAgentInstaller } from './adapters/ssh/ssh-agent-installer.js';
import { TcpSshProbe } from './adapters/ssh/tcp-ssh-probe.js';
import { Ssh2HostKeys } from './adapters/ssh/ssh2-host-keys.js';
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
import { HostLinks, Hypervisor, VmDisks } from './ports/hypervisor.js';
import type { HypervisorAdapter } from './ports/hypervisor-adapter.js';
import { GuestImages } from './ports/guest-images.js';
import { Logger } from './ports/logger.js';
import { ControlMetrics } from './ports/metrics.js';
import { ActivityLog, ConsoleLogs, VmStore, MetricsHistory, SecretStore, SnapshotStore } from './ports/stores.js';
import {
  AgentArtifact,
  AgentInstaller,
  RemoteShell,
  SshHostKeys,
  SshKeys,
  SshProbe,
  Tunnels,
} from './ports/tunnels.js';
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
import { cpus as hostCpus, hostname, totalmem } from 'node:os';
import { statfsSync } from 'node:fs';

/*
 * svcd's composition root: which adapter serves each port, one ContainerModule per group; the
 * hypervisor's from its driver (adapters/hypervisor/drivers.ts), an embedder's overrides before
 * them. main.ts starts the daemon on the container built here.
 */

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
    bind(SshHostKeys).to(Ssh2HostKeys).inSingletonScope();
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
    bind(GuestShares).toSelf().inSingletonScope();
    bind(VmLifecycle).toSelf().inSingletonScope();
    bind(VmEdit).toSelf().inSingletonScope();
    bind(CreateService).toSelf().inSingletonScope();
    bind(CreateDisks).toSelf().inSingletonScope();
    bind(CreateOutcomes).toSelf().inSingletonScope();
    bind(PoolClaims).toSelf().inSingletonScope();
    bind(ForkService).toSelf().inSingletonScope();
    bind(VmCaptures).toSelf().inSingletonScope();
    bind(KeptOutputs).toSelf().inSingletonScope();
    bind(VmSnapshots).toSelf().inSingletonScope();
    bind(SecretService).toSelf().inSingletonScope();
    bind(GuestProxy).toSelf().inSingletonScope();
    bind(ProcessProxy).toSelf().inSingletonScope();
    bind(ForwardService).toSelf().inSingletonScope();
    bind(MetricsSampler).toSelf().inSingletonScope();
    bind(AgentDeployService).toSelf().inSingletonScope();
    bind(SshAccess).toSelf().inSingletonScope();
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
