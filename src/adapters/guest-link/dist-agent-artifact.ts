import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { Readable } from 'node:stream';
import { NotSupportedError } from '../../domain/errors.js';
import type { AgentArtifact } from '../../ports/tunnels.js';
import { packTree } from '../fs-kit/tar-tree.js';
import { VERSION } from '../../version.js';

/** The `dist/agent/` directory (less the single executable) that `npm run build:agent` makes, as a tar of its contents. */
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

  async tar(): Promise<Readable> {
    if (!existsSync(`${this.dir}/svc-agent.cjs`)) throw new NotSupportedError(`the agent artifact is not built (${this.dir}); run npm run build:agent`);
    // Guests get the bundled script and the PTY addon; the 100 MB single executable stays home.
    return packTree(this.dir, (name) => name !== 'svc-agent');
  }
}
