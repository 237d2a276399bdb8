import { PLACEHOLDER_PREFIX } from '../../domain/egress-secrets.js';

const PREFIX = Buffer.from(PLACEHOLDER_PREFIX, 'latin1');
/** A placeholder: the prefix and 40 hex digits. */
const LENGTH = PLACEHOLDER_PREFIX.length + 40;

/**
 * Finds a VM's egress secret placeholders in a byte stream as it passes, across chunk borders:
 * the egress path reads what a guest sends on a connection it does not open up (plain text to a
 * host no secret is for), and a placeholder there ends it. Keeps the last few bytes only.
 */
export class LeakScanner {
  private tail = Buffer.alloc(0);

  /** `placeholders`: each placeholder and what to answer when it is seen (the secret's name). */
  constructor(private readonly placeholders: () => ReadonlyMap<string, string>) {}

  /** The secret whose placeholder `chunk` (with what came before) holds, if any. */
  scan(chunk: Buffer): string | undefined {
    const b = this.tail.length ? Buffer.concat([this.tail, chunk]) : chunk;
    const known = this.placeholders();
    for (let i = b.indexOf(PREFIX); i >= 0; i = b.indexOf(PREFIX, i + 1)) {
      if (i + LENGTH > b.length) break;
      const hit = known.get(b.toString('latin1', i, i + LENGTH));
      if (hit) return hit;
    }
    this.tail = Buffer.from(b.subarray(Math.max(0, b.length - (LENGTH - 1))));
    return undefined;
  }
}
