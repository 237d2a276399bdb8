import { NoGuestProcesses } from '../../src/adapters/guest-link/http-guest-processes.js';
import { GuestProcesses } from '../../src/ports/guest-processes.js';
import 'reflect-metadata';
import { FsSecretStore } from '../../src/adapters/store/fs-secret-store.js';
import { Container, ContainerModule } from 'inversify';
import { buildConfig, type Config } from '../../src/app/config.js';
import { CreateService } from '../../src/app/create-service.js';
import { ForwardService } from '../../src/app/forward-service.js';
import { VmLifecycle } from '../../src/app/vm-lifecycle.js';
import { LifecycleContribution, LifecycleEvents, type LifecycleEvent } from '../../src/app/lifecycle-events.js';
import { CrashWatch } from '../../src/app/crash-watch.js';
import { GuestWarmUp } from '../../src/app/guest-warm-up.js';
import { CloneSpeedUps } from '../../src/ports/clone-speed-ups.js';
import { speedUpsOf } from '../../src/adapters/hypervisor/driver.js';
import { DRIVER_SECTIONS } from '../../src/adapters/hypervisor/drivers.js';
import type { VmRecord } from '../../src/domain/vm.js';
import { PoolService } from '../../src/app/pool-service.js';
import { RecoveryService } from '../../src/app/recovery-service.js';
import { AppConfig } from '../../src/app/tokens.js';
import { VmKeeper } from '../../src/app/vm-keeper.js';
import { Vms } from '../../src/app/vms.js';
import { SystemClock } from '../../src/adapters/clock/system-clock.js';
import { InMemoryGuestAgent } from '../../src/adapters/hypervisor/fake/in-memory-guest-agent.js';
import { InMemoryHypervisor } from '../../src/adapters/hypervisor/fake/in-memory-hypervisor.js';
import { InMemorySshProbe } from '../../src/adapters/hypervisor/fake/in-memory-ssh-probe.js';
import { appModule } from '../../src/main.js';
import { Clock } from '../../src/ports/clock.js';
import { ProcessMeter } from '../../src/ports/process-meter.js';
import { GuestAgent } from '../../src/ports/guest-agent.js';
import { HostLinks, Hypervisor, VmDisks } from '../../src/ports/hypervisor.js';
import { GuestImages } from '../../src/ports/guest-images.js';
import { Logger } from '../../src/ports/logger.js';
import { ControlMetrics } from '../../src/ports/metrics.js';
import {
  ActivityLog,
  ConsoleLogs,
  VmStore,
  MetricsHistory,
  SecretStore,
  SnapshotStore,
  type ImageSnapshotRecord,
} from '../../src/ports/stores.js';
import { AgentArtifact, AgentInstaller, RemoteShell, SshKeys, SshProbe, Tunnels } from '../../src/ports/tunnels.js';
import {
  CountingMetrics,
  MemoryActivityLog,
  MemoryInstanceStore,
  MemoryMetricsHistory,
  MemoryTunnels,
  SilentLogger,
  StaticKeys,
} from './fakes.js';
import { Failpoints, NO_FAILPOINTS } from '../../src/ports/failpoints.js';
import { GuestNetwork } from '../../src/ports/guest-network.js';
import { InMemoryGuestNetwork } from '../../src/adapters/guest-net/in-memory-guest-network.js';
import { EgressService } from '../../src/app/egress-service.js';

/** The daemon's use cases wired as in production, on in-memory fakes of every port. */
export interface World {
  container: Container;
  config: Config;
  hv: InMemoryHypervisor;
  store: MemoryInstanceStore;
  activity: MemoryActivityLog;
  metrics: CountingMetrics;
  tunnels: MemoryTunnels;
  events: LifecycleEvents;
  vms: Vms;
  keeper: VmKeeper;
  svc: VmLifecycle;
  creates: CreateService;
  recovery: RecoveryService;
  forwards: ForwardService;
  pool: PoolService;
  network: InMemoryGuestNetwork;
  egress: EgressService;
  /** Hears a lifecycle event, after the daemon's own followers. */
  listen(event: LifecycleEvent, fn: (rec: VmRecord) => void): void;
}

export function world(
  raw: Record<string, unknown> = {},
  store = new MemoryInstanceStore(),
  hv = new InMemoryHypervisor({ bootDelayMs: 5 }),
  /** What the guests' consoles said (a failed boot tells its last lines); none by default. */
  consoles?: ConsoleLogs,
  /** How busy the guests' processes are (a cold boot that hangs is told by it); none by default. */
  meter?: ProcessMeter,
): World {
  // Snapshot creates have their own tests (test/integration/snapshot-creates.test.ts).
  const config = buildConfig(
    { data_dir: '/nonexistent', create_from_snapshot: false, ...raw },
    {},
    undefined,
    DRIVER_SECTIONS,
  );
  const activity = new MemoryActivityLog();
  const metrics = new CountingMetrics();
  const tunnels = new MemoryTunnels();
  const network = new InMemoryGuestNetwork();
  const heard: [LifecycleEvent, (rec: VmRecord) => void][] = [];
  const on = (event: LifecycleEvent) => (rec: VmRecord) =>
    heard.filter(([e]) => e === event).forEach(([, fn]) => fn(rec));
  const testFollower: LifecycleContribution = {
    onUp: on('up'),
    onDown: on('down'),
    onRemoved: on('removed'),
    onClaimed: on('claimed'),
  };
  const container = new Container();
  container.load(
    new ContainerModule(({ bind }) => {
      bind(AppConfig).toConstantValue(config);
      bind(Clock).toConstantValue(new SystemClock());
      bind(Logger).toConstantValue(new SilentLogger());
      bind(ControlMetrics).toConstantValue(metrics);
      bind(VmStore).toConstantValue(store);
      bind(ActivityLog).toConstantValue(activity);
      bind(MetricsHistory).toConstantValue(new MemoryMetricsHistory());
      bind(SnapshotStore).toConstantValue(new MemorySnapshotStore());
      bind(SecretStore).to(FsSecretStore).inSingletonScope();
      bind(SshKeys).toConstantValue(new StaticKeys());
      bind(Failpoints).toConstantValue(NO_FAILPOINTS);
      for (const port of [Hypervisor, VmDisks, GuestImages, HostLinks]) bind(port).toConstantValue(hv);
      bind(GuestAgent).toConstantValue(new InMemoryGuestAgent(hv));
      // The in-memory agent keeps no processes, as the daemon's own binding says of it.
      bind(GuestProcesses).toConstantValue(new NoGuestProcesses());
      bind(SshProbe).toConstantValue(new InMemorySshProbe(hv));
      bind(Tunnels).toConstantValue(tunnels);
      bind(GuestNetwork).toConstantValue(network);
      bind(CloneSpeedUps).toConstantValue(speedUpsOf(hv) as CloneSpeedUps);
      bind(LifecycleContribution).toConstantValue(testFollower);
      if (consoles) bind(ConsoleLogs).toConstantValue(consoles);
      if (meter) bind(ProcessMeter).toConstantValue(meter);
      bind(RemoteShell).toConstantValue({ exec: async () => ({ code: 0, stdout: 'status: done\n', stderr: '' }) });
      bind(AgentInstaller).toConstantValue({
        probe: async () => ({ node: true }),
        install: async () => undefined,
        restart: async () => undefined,
      });
      bind(AgentArtifact).toConstantValue({
        version: async () => 'test',
        tar: async () => {
          throw new Error('no artifact in unit tests');
        },
      });
    }),
    appModule(),
  );
  const vms = container.get(Vms);
  container.get(CrashWatch).start();
  container.get(GuestWarmUp).start();
  metrics.setRunningSource(() => vms.count((r) => r.status === 'running'));
  return {
    container,
    config,
    hv,
    store,
    activity,
    metrics,
    tunnels,
    vms,
    events: container.get(LifecycleEvents),
    keeper: container.get(VmKeeper),
    svc: container.get(VmLifecycle),
    creates: container.get(CreateService),
    recovery: container.get(RecoveryService),
    forwards: container.get(ForwardService),
    pool: container.get(PoolService),
    network,
    egress: container.get(EgressService),
    listen: (event, fn) => void heard.push([event, fn]),
  };
}

/** Image snapshots' records in memory; their directories are names only (the fake hypervisor writes no files). */
class MemorySnapshotStore implements SnapshotStore {
  private readonly records = new Map<string, ImageSnapshotRecord>();
  private readonly begun = new Set<string>();

  async list(): Promise<ImageSnapshotRecord[]> {
    return [...this.records.values()];
  }

  async unfinished(): Promise<string[]> {
    return [...this.begun].filter((k) => !this.records.has(k));
  }

  dir(key: string): string {
    return `/nonexistent/snapshots/${key}`;
  }

  async begin(key: string): Promise<string> {
    this.records.delete(key);
    this.begun.add(key);
    return this.dir(key);
  }

  async commit(rec: Omit<ImageSnapshotRecord, 'size_bytes'>): Promise<ImageSnapshotRecord> {
    const full = { ...rec, size_bytes: 0 };
    this.records.set(rec.key, full);
    return full;
  }

  async remove(key: string): Promise<void> {
    this.records.delete(key);
    this.begun.delete(key);
  }
}
