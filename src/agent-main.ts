import 'reflect-metadata';
import { Container, ContainerModule } from 'inversify';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import { createServer, type Server } from 'node:http';
import { AgentOptions } from './app/agent/agent-options.js';
import { AgentService } from './app/agent/agent-service.js';
import { ExecService } from './app/agent/exec-service.js';
import { FileService } from './app/agent/file-service.js';
import { ShellService } from './app/agent/shell-service.js';
import { ProcessService } from './app/agent/process-service.js';
import { WatchService } from './app/agent/watch-service.js';
import { EtcGuestUsers } from './adapters/agent/etc-guest-users.js';
import { findHelpers, FsKeptProcesses } from './adapters/agent/fs-kept-processes.js';
import { processRoutes } from './adapters/agent/process-routes.js';
import { startBootEntrypoint } from './adapters/agent/boot-entrypoint.js';
import { GuestUsers, KeptProcesses } from './ports/agent/kept-processes.js';
import { join } from 'node:path';
import { agentRoutes } from './adapters/agent/agent-routes.js';
import { identityFirst } from './adapters/agent/identity-request.js';
import { NodeGuestFiles } from './adapters/agent/node-guest-files.js';
import { NodeProcessRunner } from './adapters/agent/node-process-runner.js';
import { NodePtyFactory } from './adapters/agent/node-pty-factory.js';
import { findRunAs } from './adapters/agent/run-as.js';
import { ProcStatsSource } from './adapters/agent/proc-stats-source.js';
import { ExecChannelSocket } from './adapters/agent/exec-channel-socket.js';
import { ShellSocket } from './adapters/agent/shell-socket.js';
import { answeringUpgrade, rejectUpgrade, requestUrl } from './adapters/http-kit/terminal-socket.js';
import { startVsockRelay } from './adapters/agent/vsock-relay.js';
import { BearerAuth } from './adapters/http-kit/auth.js';
import { browserGuard, guardRequests, guardUpgrades } from './adapters/http-kit/browser-guard.js';
import { createHttpApp } from './adapters/http-kit/http-app.js';
import { answerClientError } from './adapters/http-kit/error-status.js';
import { PinoLogger } from './adapters/log/pino-logger.js';
import { EXEC_CHANNEL_PATH, PORT_PATH } from './domain/agent.js';
import { upgradeToPort } from './adapters/agent/port-socket.js';
import { NotFoundError } from './domain/errors.js';
import { GuestFiles, StatsSource } from './ports/agent/guest-files.js';
import { ProcessRunner } from './ports/agent/process-runner.js';
import { SystemIdentity } from './ports/agent/system-identity.js';
import { LinuxSystemIdentity } from './adapters/agent/linux-system-identity.js';
import { RecordedIdentity } from './adapters/agent/recorded-identity.js';
import { PtyFactory } from './ports/agent/pty.js';
import type { Logger } from './ports/logger.js';

/** Guest-side adapters a test or embedder may replace. */
export interface AgentOverrides {
  runner?: ProcessRunner;
  pty?: PtyFactory;
  files?: GuestFiles;
  stats?: StatsSource;
  identity?: SystemIdentity;
  kept?: KeptProcesses;
  logger?: Logger;
}

export function buildAgentContainer(opts: AgentOptions, o: AgentOverrides = {}): Container {
  const c = new Container();
  c.load(
    new ContainerModule(({ bind }) => {
      bind(AgentOptions).toConstantValue(opts);
      // a user's supplementary groups are set through native/svc-as (run-as.ts)
      const runAs = findRunAs(opts.helpersDir);
      bind(ProcessRunner).toConstantValue(o.runner ?? new NodeProcessRunner(runAs));
      bind(PtyFactory).toConstantValue(o.pty ?? new NodePtyFactory(runAs));
      if (o.files) bind(GuestFiles).toConstantValue(o.files);
      else bind(GuestFiles).to(NodeGuestFiles).inSingletonScope();
      bind(StatsSource).toConstantValue(o.stats ?? new ProcStatsSource());
      bind(KeptProcesses).toConstantValue(
        o.kept ?? new FsKeptProcesses(join(opts.stateDir, 'processes'), findHelpers(opts.helpersDir)),
      );
      bind(GuestUsers).toConstantValue(new EtcGuestUsers());
      bind(SystemIdentity).toConstantValue(
        o.identity ?? (opts.systemIdentity ? new LinuxSystemIdentity(opts.toolsDir) : new RecordedIdentity()),
      );
    }),
    new ContainerModule(({ bind }) => {
      bind(AgentService).toSelf().inSingletonScope();
      bind(ExecService).toSelf().inSingletonScope();
      bind(FileService).toSelf().inSingletonScope();
      bind(ShellService).toSelf().inSingletonScope();
      bind(ProcessService).toSelf().inSingletonScope();
      bind(WatchService).toSelf().inSingletonScope();
    }),
  );
  return c;
}

export interface RunningAgent {
  host: string;
  port: number;
  stop(): Promise<void>;
}

export async function startAgent(opts: AgentOptions, o: AgentOverrides = {}): Promise<RunningAgent> {
  const c = buildAgentContainer(opts, o);
  const log = o.logger ?? PinoLogger.create(process.env.SVC_AGENT_LOG_LEVEL ?? 'info', 'svc-agent');
  const agent = c.get(AgentService);
  await agent.resumeEgress().catch((err: Error) => log.warn({ err: err.message }, 'egress secrets not set again'));
  const app = createHttpApp({
    routes: [
      ...agentRoutes(agent, c.get(ExecService), c.get(FileService)),
      ...processRoutes(c.get(ProcessService), c.get(WatchService)),
    ],
    auth: new BearerAuth(''),
    log,
  });
  const shell = new ShellSocket(c.get(ShellService));
  const execChannel = new ExecChannelSocket(c.get(ExecService));
  // The agent's port is forwarded to the host's loopback, where web pages can send to it too.
  const refuse = browserGuard({ bindHost: '', allowedHosts: [], allowedOrigins: [], anyIpHost: true });
  // Headers within 20 s (slowloris); bodies and answers unbounded (long execs, shells, big copies).
  const server: Server = createServer(
    { keepAliveTimeout: 65_000, headersTimeout: 20_000, requestTimeout: 0, connectionsCheckingInterval: 5_000 },
    guardRequests(
      identityFirst((body) => agent.setIdentity(body), app),
      refuse,
    ),
  );
  server.on('clientError', answerClientError);
  // Sockets taken over by a WebSocket (shells, the exec channel, ports) still hold the server
  // open, and closeAllConnections does not know them: stop ends them, or a stop (the guest's
  // shutdown) waits until their far end lets go.
  const upgraded = new Set<Duplex>();
  server.on('upgrade', (_req, socket: Duplex) => {
    upgraded.add(socket);
    socket.once('close', () => upgraded.delete(socket));
  });
  server.on(
    'upgrade',
    guardUpgrades(
      answeringUpgrade((req, socket, head) => {
        const path = requestUrl(req).pathname;
        if (path === '/shell') shell.handleUpgrade(req, socket, head);
        else if (path === EXEC_CHANNEL_PATH) execChannel.handleUpgrade(req, socket, head);
        else if (path === PORT_PATH) upgradeToPort(req, socket, head);
        else rejectUpgrade(socket, new NotFoundError(`no websocket route ${req.url}`));
      }),
      refuse,
    ),
  );
  const m = /^(.*):(\d+)$/.exec(opts.listen);
  if (!m) throw new Error(`--listen must be HOST:PORT, got ${opts.listen}`);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(Number(m[2]), m[1].replace(/^\[|\]$/g, ''), () => resolve());
  });
  const port = (server.address() as AddressInfo).port;
  const relay =
    opts.vsockPort > 0 ? startVsockRelay(opts.vsockPort, port, undefined, (msg) => log.info({}, msg)) : undefined;
  log.info({ listen: `${m[1]}:${port}`, version: opts.version }, 'svc-agent listening');
  if (opts.entrypoint)
    void startBootEntrypoint(opts.entrypoint, opts.runDir, (req) => c.get(ProcessService).start(req), log);
  return {
    host: m[1],
    port,
    stop: async () => {
      relay?.stop();
      server.closeAllConnections();
      for (const socket of upgraded) socket.destroy();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}
