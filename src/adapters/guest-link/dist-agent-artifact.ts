import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { Readable } from 'node:stream';
import { NotSupportedError } from '../../domain/errors.js';
import type { AgentArtifact } from '../../ports/tunnels.js';
import { packTree } from '../fs-kit/tar-tree.js';
import { VERSION } from '../../version.js';

/** The `dist/agent/` directory (the single executable only when asked) that `npm run build:agent` makes, as a tar of its contents. */
export class DistAgentArtifact implements AgentArtifact {
  constructor(readonly dir = fileURLToPath(new URL('../../../agent/', import.meta.url))) {}

  async version(): Promise<string> {
    try {
      const pkg = readFileSync(new URL('../../../../package.json', import.meta.url), 'utf8');
      return (JSON.parse(pkg) as { version: string }).version;
    } catch {
      return VERSION;
    }
  }

  async tar(opts: { executable?: boolean } = {}): Promise<Readable> {
    if (!existsSync(`${this.dir}/svc-agent.cjs`))
      throw new NotSupportedError(`the agent artifact is not built (${this.dir}); run npm run build:agent`);
    // Guests get the bundled script and the PTY addon; the single executable (node itself, 88 MB) only when they have no node.
    if (opts.executable && !existsSync(`${this.dir}/svc-agent`))
      throw new NotSupportedError(
        `the agent's single executable is not built (${this.dir}/svc-agent); run npm run build:agent`,
      );
    return packTree(this.dir, (name) => opts.executable || name !== 'svc-agent');
  }
}
