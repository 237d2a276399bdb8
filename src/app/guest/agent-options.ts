export const AgentOptions = Symbol('AgentOptions');
/** The agent's settings (from its command line). */
export interface AgentOptions {
  listen: string;
  vsockPort: number;
  stateDir: string;
  runDir: string;
  version: string;
}
