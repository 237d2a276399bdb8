import { AsyncQueue } from '../../app/async-queue.js';
import type { VmChange, VmEvent } from '../../domain/events.js';
import type { Instance } from '../../domain/vm.js';
import { writeNdjson } from '../http-kit/ndjson.js';
import type { RouteDef } from '../http-kit/route.js';

/** A reader this far behind is dropped (it reconnects and gets a fresh snapshot) rather than held in memory. */
export const EVENT_BACKLOG_LIMIT = 1000;

/** Where the feed comes from: the daemon's VMs (Vms), or a cluster's (ClusterService, docs/cluster.md). */
export interface VmFeed {
  watch(fn: (change: VmChange) => void): () => void;
  list(): Instance[] | readonly object[];
}

/**
 * GET /events: the VM change feed as NDJSON (docs/api.md "Events"). The first line is a snapshot of
 * every VM; then a line per change (`vm` with the VM as GET /vms/{name} shows it, `removed` with
 * its name) and a `ping` every `pingMs`, so clients and proxies can tell a quiet stream from a
 * dead one. Subscribing happens before the snapshot is taken, so no change falls between them.
 * `closing` ends every stream (daemon stop), so the listeners need not wait for them.
 */
export function eventRoutes(vms: VmFeed, closing: AbortSignal, pingMs = 15_000): RouteDef[] {
  return [
    {
      method: 'get',
      path: '/events',
      handler: async (_req, res) => {
        const queue = new AsyncQueue<VmEvent>();
        let backlog = 0;
        const push = (line: VmEvent) => {
          if (++backlog > EVENT_BACKLOG_LIMIT) {
            queue.push({
              event: 'overflow',
              message: `more than ${EVENT_BACKLOG_LIMIT} events unread; reconnect for a fresh snapshot`,
            });
            return stop();
          }
          queue.push(line);
        };
        const unwatch = vms.watch(push);
        const ping = setInterval(() => push({ event: 'ping' }), pingMs);
        ping.unref();
        const stop = () => {
          unwatch();
          clearInterval(ping);
          queue.close();
          closing.removeEventListener('abort', stop);
        };
        if (closing.aborted) return void res.status(503).json({ error: 'the daemon is stopping', code: 'internal' });
        closing.addEventListener('abort', stop);
        push({ event: 'snapshot', vms: vms.list() as Instance[] });
        await writeNdjson(
          res,
          (async function* () {
            for await (const line of queue) {
              backlog--;
              yield line;
            }
          })(),
          stop,
        ).finally(stop);
      },
    },
  ];
}
