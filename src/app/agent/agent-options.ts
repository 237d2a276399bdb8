export const AgentOptions = Symbol('AgentOptions');
/** The agent's settings (from its command line). */
export interface AgentOptions {
  listen: string;
  vsockPort: number;
  stateDir: string;
  runDir: string;
  version: string;
  /**
   * Apply identities to the system (hostname, /etc/machine-id, clock). Off for stand-in guests
   * that run on a developer's host (fake_agent, tests): they only record it.
   */
  systemIdentity: boolean;
  /** Bytes of a durable process's output kept per stream (`--journal-mb`, 16 MiB). */
  journalBytes: number;
  /** Where svc-keep and svc-watch are (`--helpers-dir`); absent: beside the agent. */
  helpersDir?: string;
  /** Where the guest's `sh`, `date`, `mkdir` and `ip` are when its PATH has none (`--tools-dir`); absent: PATH. */
  toolsDir?: string;
  /** A POST /processes body the first agent of a boot starts, tagged `entrypoint` (`--entrypoint`). */
  entrypoint?: string;
}
