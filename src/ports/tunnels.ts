import type { Forward } from '../domain/vm.js';

export interface SshTarget {
  host: string;
  port: number;
  user: string;
}

export const Tunnels = Symbol('Tunnels');
/** Live host-to-guest TCP forwards over SSH. */
export interface Tunnels {
  /**
   * Listens on 127.0.0.1:hostPort (0 = a free high port) and carries each connection to the guest
   * port over SSH; resolves with the `live` forward (its pid the process that carries it). Throws
   * AlreadyExistsError when the host port is busy.
   */
  open(vm: string, target: SshTarget, hostPort: number, guestPort: number): Promise<Forward>;
  /** Idempotent: closing an unknown forward resolves. */
  close(vm: string, hostPort: number): Promise<void>;
  /** Closes every forward of the VM. Idempotent. */
  closeAll(vm: string): Promise<void>;
  list(vm: string): Forward[];
  /** Closes every forward of every VM (the daemon is stopping). Idempotent. */
  closeEverything(): Promise<void>;
}

export const SshProbe = Symbol('SshProbe');
/** Tells whether a guest's SSH server is up (its banner arrived), for `wait=ssh`. */
export interface SshProbe {
  /** Resolves true once `SSH-` was read within `timeoutMs`; false otherwise. Never throws. */
  ready(host: string, port: number, timeoutMs: number): Promise<boolean>;
}

export const SshHostKeys = Symbol('SshHostKeys');
/** The host key a guest's SSH server shows, for clients to pin (POST /vms/{name}/ssh/keys). */
export interface SshHostKeys {
  /**
   * Starts an SSH handshake over `stream` (a byte stream to the guest's port 22, through its
   * agent), takes the host key the server sends, and ends the connection before any login:
   * `TYPE BASE64`, ed25519 first when the server has one. AgentFailureError when no key came
   * within `timeoutMs` (default 15 s) or the peer is not an SSH server. The stream is destroyed.
   */
  read(stream: import('node:stream').Duplex, timeoutMs?: number): Promise<string>;
}

export const SshKeys = Symbol('SshKeys');
/** The daemon's own key pair, used to log into guests. */
export interface SshKeys {
  publicKey(): Promise<string>;
  privateKey(): Promise<Buffer>;
}

export interface RemoteResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** How far one remote command may go: what a guest sends back over SSH is bounded in size and time. */
export interface RemoteExecOptions {
  /** Streamed to the command's stdin with backpressure; without it stdin is closed at once. */
  stdin?: import('node:stream').Readable;
  /** The command is ended after this long (default REMOTE_EXEC_TIMEOUT_MS). */
  timeoutMs?: number;
  /** Most bytes of stdout and of stderr, each (default REMOTE_OUTPUT_MAX); beyond it the command is ended. */
  maxOutputBytes?: number;
  /** Ends the command when aborted (a DELETE of the VM, a create given up). */
  signal?: AbortSignal;
}

export const REMOTE_EXEC_TIMEOUT_MS = 60_000;
export const REMOTE_OUTPUT_MAX = 1024 * 1024;
/** The agent's upload (tens of MB with its own node) may take this long on a slow guest. */
export const INSTALL_TIMEOUT_MS = 10 * 60_000;

export const RemoteShell = Symbol('RemoteShell');
/** Runs commands in a guest over SSH (agent deploy, cloud-init's status). */
export interface RemoteShell {
  /**
   * Runs `command` and resolves with its exit code and output once the channel closes.
   * AgentUnavailableError when SSH cannot be reached or refuses the daemon's key (or the signal
   * aborted the command); DeadlineExceededError after `timeoutMs`; AgentFailureError when the guest
   * sends more than `maxOutputBytes` on a stream. In every failure the command's channel is closed.
   */
  exec(target: SshTarget, command: string, opts?: RemoteExecOptions): Promise<RemoteResult>;
}

export const AgentArtifact = Symbol('AgentArtifact');
/** The built agent (dist/agent) as a tar stream, and its version. */
export interface AgentArtifact {
  version(): Promise<string>;
  /**
   * The agent as a tar: the bundled script and its PTY addon, plus the single executable (node
   * inside) when `executable` is set, for guests without a node of their own. Throws
   * NotSupportedError when the artifact has not been built.
   */
  tar(opts?: { executable?: boolean }): Promise<import('node:stream').Readable>;
}

export const AgentInstaller = Symbol('AgentInstaller');
/** Puts the agent onto a guest that the daemon reaches over SSH (POST /vms/{name}/agent/deploy). */
export interface AgentInstaller {
  /** What the guest offers the agent: a node (20 or newer) to run the script with. AgentUnavailableError when SSH is unreachable. */
  probe(target: SshTarget, signal?: AbortSignal): Promise<{ node: boolean }>;
  /**
   * Unpacks the agent tar into the guest's `/opt/svc/agent`, swapped in whole (a failed upload
   * leaves the old agent), with a `run` launcher and, on a systemd guest, a service that starts it
   * at boot. As root, or through `sudo -n` for another user. Not idempotent. AgentUnavailableError when SSH is unreachable,
   * InternalError when the guest's install step fails. Every step is bounded as RemoteShell says
   * (the upload by INSTALL_TIMEOUT_MS); `signal` ends it.
   */
  install(target: SshTarget, agentTar: import('node:stream').Readable, signal?: AbortSignal): Promise<void>;
  /**
   * Starts the new agent: on a systemd guest the installed `svc-agent.service` is restarted (and
   * enabled, so it survives a reboot); elsewhere the running agent is stopped through its pidfile so
   * the guest's supervisor starts the new one. Idempotent.
   */
  restart(target: SshTarget, signal?: AbortSignal): Promise<void>;
}
