import { request } from 'node:http';
import { InternalError } from '../../../domain/errors.js';

/** The most of an answer read (Cloud Hypervisor's are small JSON objects). */
const MAX_ANSWER = 1 << 20;

/**
 * Cloud Hypervisor's REST API on its `--api-socket`: `PUT /api/v1/<action>` with a JSON body for
 * the verbs (vm.create, vm.boot, vm.pause, vm.resume, vm.snapshot, vm.power-button, vmm.shutdown),
 * `GET` for vm.info and vmm.ping. A failure is InternalError with the VMM's words.
 */
export class ChApi {
  constructor(
    readonly socket: string,
    private readonly timeoutMs = 30_000,
  ) {}

  put(action: string, body?: unknown): Promise<unknown> {
    return this.call('PUT', action, body);
  }

  get(action: string): Promise<unknown> {
    return this.call('GET', action);
  }

  /** Resolves once the API answers, trying until `timeoutMs` (the VMM is starting). */
  async ready(timeoutMs: number): Promise<void> {
    const until = Date.now() + timeoutMs;
    for (;;) {
      try {
        await this.get('vmm.ping');
        return;
      } catch (err) {
        if (Date.now() > until)
          throw new InternalError(`cloud-hypervisor did not answer on ${this.socket}: ${(err as Error).message}`);
        await new Promise((r) => setTimeout(r, 25));
      }
    }
  }

  private call(method: 'GET' | 'PUT', action: string, body?: unknown): Promise<unknown> {
    const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
    return new Promise((resolve, reject) => {
      const req = request(
        {
          socketPath: this.socket,
          method,
          path: `/api/v1/${action}`,
          timeout: this.timeoutMs,
          headers: {
            accept: 'application/json',
            ...(payload ? { 'content-type': 'application/json', 'content-length': payload.length } : {}),
          },
        },
        (res) => {
          const parts: Buffer[] = [];
          let size = 0;
          res.on('data', (c: Buffer) => {
            size += c.length;
            if (size > MAX_ANSWER) return void res.destroy(new Error('answer too large'));
            parts.push(c);
          });
          res.on('error', reject);
          res.on('end', () => {
            const text = Buffer.concat(parts).toString('utf8');
            if ((res.statusCode ?? 500) >= 300)
              return reject(new InternalError(`cloud-hypervisor ${action}: ${res.statusCode} ${text.slice(0, 300)}`));
            try {
              resolve(text ? JSON.parse(text) : undefined);
            } catch {
              resolve(text);
            }
          });
        },
      );
      req.on('timeout', () => req.destroy(new Error(`no answer to ${action} within ${this.timeoutMs} ms`)));
      req.on('error', (err) =>
        reject(err instanceof InternalError ? err : new InternalError(`cloud-hypervisor ${action}: ${err.message}`)),
      );
      req.end(payload);
    });
  }
}
