import { useEffect, useState } from 'preact/hooks';
import { ndjson, type Instance, type VmEvent } from './api.js';

/**
 * The VM list kept live from GET /events: a snapshot, then a line per change. When the stream
 * ends or fails it reconnects (with a growing pause) and starts again from a fresh snapshot.
 */
class VmFeed {
  vms = new Map<string, Instance>();
  connected = false;
  private readonly listeners = new Set<() => void>();
  private running = false;
  /** Each run has its own number, so a run stopped while it waited never carries on beside a newer one. */
  private generation = 0;
  private abort: AbortController | undefined;

  subscribe(l: () => void): () => void {
    this.listeners.add(l);
    if (!this.running) void this.run();
    return () => this.listeners.delete(l);
  }

  /** Stops following (log-out); the next subscriber starts again. */
  stop(): void {
    this.running = false;
    this.connected = false;
    this.abort?.abort();
  }

  private emit(): void {
    for (const l of this.listeners) l();
  }

  private async run(): Promise<void> {
    this.running = true;
    const mine = ++this.generation;
    const live = () => this.running && this.generation === mine;
    let pause = 500;
    while (live()) {
      this.abort = new AbortController();
      try {
        for await (const line of ndjson<VmEvent>('GET', '/events', { signal: this.abort.signal })) {
          if (line.event === 'snapshot') {
            this.vms = new Map(line.vms.map((v) => [v.name, v]));
            this.connected = true;
            pause = 500;
          } else if (line.event === 'vm') {
            this.vms.set(line.vm.name, line.vm);
          } else if (line.event === 'removed') {
            this.vms.delete(line.name);
          } else {
            continue;
          }
          this.emit();
        }
      } catch {
        // The stream failed; reconnect below.
      }
      if (!live()) break;
      this.connected = false;
      this.emit();
      await new Promise((r) => setTimeout(r, pause));
      pause = Math.min(pause * 2, 10_000);
    }
  }
}

export const feed = new VmFeed();

/** The live VM list (sorted by name) and whether the feed is connected. */
export function useVms(): { vms: Instance[]; connected: boolean } {
  const [, tick] = useState(0);
  useEffect(() => feed.subscribe(() => tick((n) => n + 1)), []);
  return { vms: [...feed.vms.values()].sort((a, b) => a.name.localeCompare(b.name)), connected: feed.connected };
}

/** One VM from the feed, or undefined while unknown. */
export function useVm(name: string): { vm: Instance | undefined; connected: boolean } {
  const { vms, connected } = useVms();
  return { vm: vms.find((v) => v.name === name), connected };
}
