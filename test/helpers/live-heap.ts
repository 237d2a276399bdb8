import WebSocket from 'ws';

/** Node's flags for a process `LiveHeap` reads: `gc()` and an inspector on a free loopback port. */
export const LIVE_HEAP_ARGS = ['--expose-gc', '--inspect=127.0.0.1:0'];

/**
 * A Node process's live heap, read through its inspector (started with LIVE_HEAP_ARGS): `gc()` run twice, then `process.memoryUsage().heapUsed`. What a leak check
 * compares, where RSS moves with when V8 collects and with what the allocator keeps.
 */
export class LiveHeap {
  private constructor(private readonly ws: WebSocket) {}
  private id = 0;

  /** Connects to the inspector a process says it listens on in `stderr` (what it wrote so far), within 10 s. */
  static async attach(stderr: () => string): Promise<LiveHeap> {
    let url: string | undefined;
    for (const until = Date.now() + 10_000; !url; await new Promise((r) => setTimeout(r, 50))) {
      url = /Debugger listening on (ws:\/\/\S+)/.exec(stderr())?.[1];
      if (!url && Date.now() > until) throw new Error(`no inspector within 10 s: ${stderr().slice(0, 300)}`);
    }
    const ws = new WebSocket(url);
    await new Promise<void>((resolve, reject) => {
      ws.once('open', () => resolve());
      ws.once('error', reject);
    });
    return new LiveHeap(ws);
  }

  /** The heap in use after two full collections, in MiB. */
  async mib(): Promise<number> {
    const id = ++this.id;
    const expression = 'gc(); gc(); process.memoryUsage().heapUsed';
    const value = await new Promise<unknown>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('the inspector did not answer within 30 s')), 30_000);
      const heard = (m: WebSocket.RawData) => {
        const d = JSON.parse(m.toString()) as { id?: number; result?: { result?: { value?: unknown } } };
        if (d.id !== id) return;
        clearTimeout(timer);
        this.ws.off('message', heard);
        resolve(d.result?.result?.value);
      };
      this.ws.on('message', heard);
      this.ws.send(JSON.stringify({ id, method: 'Runtime.evaluate', params: { expression, returnByValue: true } }));
    });
    if (typeof value !== 'number') throw new Error(`the inspector answered ${JSON.stringify(value)}`);
    return value / 1024 / 1024;
  }

  close(): void {
    this.ws.close();
  }
}
