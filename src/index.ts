/**
 * svc as a library: the typed client, and what an embedder needs to run the daemon in-process
 * with adapters of its own (docs/embedding.md).
 */
export { SvcClient, SvcError, DaemonUnreachableError } from './adapters/client/svc-client.js';
export { CLIENT_ROUTES } from './adapters/client/client-routes.js';
export type {
  SvcClientOptions,
  CreateInput,
  CreateOptions,
  ShellConnection,
  MetricsHistoryResponse,
} from './adapters/client/svc-client.js';
export { startDaemon, buildContainer } from './main.js';
export type { DaemonOverrides, RunningDaemon } from './main.js';
export { buildConfig, ConfigError } from './app/config.js';
export type { Config } from './app/config.js';
export { loadConfig } from './adapters/config/yaml-config-file.js';
export { Hypervisor } from './ports/hypervisor.js';
export type { VmSpec, VmHandle, VmRef, LaunchOptions, ExitListener } from './ports/hypervisor.js';
export type { ImageInfo } from './ports/guest-images.js';
export { GuestAgent } from './ports/guest-agent.js';
export type { AgentEndpoint, UploadOptions, FsOp } from './ports/guest-agent.js';
export type { Terminal } from './ports/terminal.js';
export { Tunnels, SshProbe } from './ports/tunnels.js';
export { InMemoryHypervisor } from './adapters/hypervisor/fake/in-memory-hypervisor.js';
export { QemuHypervisor } from './adapters/hypervisor/qemu/qemu-hypervisor.js';
export { HttpGuestAgent } from './adapters/guest-link/http-guest-agent.js';
export { tcpConnector, socatVsockConnector, pickConnector } from './adapters/guest-link/transport.js';
export type { Connector } from './adapters/guest-link/transport.js';
export { startAgent } from './agent-main.js';
export * from './domain/errors.js';
export type { Instance, VmRecord, Forward, Mount, VmStatus } from './domain/vm.js';
export type { CreateProgressEvent, ActivityEvent, SecretRecord, MetricsPoint } from './domain/events.js';
export type { ExecFrame, ExecResult, ExecRequest, FsInfo, GuestStats, AgentHealth } from './domain/agent.js';
