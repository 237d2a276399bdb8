import type { IncomingMessage, ServerResponse } from 'node:http';
import { Counter, Histogram, type Registry } from 'prom-client';

/**
 * Counts every request and times it, by the route it matched: express's routes, and what the
 * daemon answers before them (the cluster's hop to another node, docs/cluster.md). A module of its
 * own: the guest agent serves no metrics, and its bundle leaves prom-client out.
 */
export class RequestMetrics {
  private readonly requests: Counter<'method' | 'route' | 'status'>;
  private readonly latency: Histogram<'method' | 'route'>;

  constructor(registry: Registry) {
    this.requests = new Counter({
      name: 'svc_http_requests_total',
      help: 'HTTP requests by route, method and status',
      labelNames: ['method', 'route', 'status'],
      registers: [registry],
    });
    this.latency = new Histogram({
      name: 'svc_http_request_duration_seconds',
      help: 'HTTP request latency by route',
      labelNames: ['method', 'route'],
      buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5, 30, 120],
      registers: [registry],
    });
  }

  /** Counts `req` when its answer is finished, under the route `route()` names then. */
  time(req: IncomingMessage, res: ServerResponse, route: () => string): void {
    const t0 = process.hrtime.bigint();
    res.on('finish', () => {
      const r = route();
      this.requests.inc({ method: req.method, route: r, status: String(res.statusCode) });
      this.latency.observe({ method: req.method, route: r }, Number(process.hrtime.bigint() - t0) / 1e9);
    });
  }
}
