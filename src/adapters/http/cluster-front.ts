import type { IncomingMessage, RequestListener, ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import type { NextFunction, Request, RequestHandler, Response } from 'express';
import type { ClusterService } from '../../app/cluster-service.js';
import type { NodeView } from '../../domain/cluster.js';
import type { ClusterPlacement } from '../../app/cluster-placement.js';
import { errorMessage, isDomainError, PermissionDeniedError, UnavailableError } from '../../domain/errors.js';
import type { MoveService } from '../../app/move-service.js';
import type { ImageFetchService } from '../../app/image-fetch-service.js';
import type { GuestImages } from '../../ports/guest-images.js';
import type { BearerAuth } from '../http-kit/auth.js';
import type { UpgradeHandler } from '../http-kit/browser-guard.js';
import { answerError, unauthenticated } from '../http-kit/http-app.js';
import type { RequestMetrics } from '../http-kit/request-metrics.js';
import type { Logger } from '../../ports/logger.js';
import { proxyRequest, proxyUpgrade, type BodySplice, type ProxyTarget } from '../http-kit/node-proxy.js';
import { splice, spliceHelper, SPLICE_MIN_BYTES } from '../process-kit/splice.js';
import type { RouteDef } from '../http-kit/route.js';
import { answeringUpgrade, decodedSegment, requestUrl } from '../http-kit/terminal-socket.js';
import { HOP_HEADER } from '../cluster/http-peer-nodes.js';
import { clusterPeerRoutes } from './cluster-peer-routes.js';
import { ClusterCreates } from './cluster-creates.js';

export { HOP_HEADER };

const VM_PATH = /^\/vms\/([^/]+)(\/.*)?$/;
const DOWNLOAD_PATH = /^\/vms\/[^/?]+\/cp(\?|$)/;

/**
 * The cluster's front (docs/cluster.md, "One API on every node"): every node answers for the
 * whole cluster. `GET /vms` lists every node's VMs; a create is placed by the rule and sent to its
 * node (this one included, over its own socket, so the local create runs unchanged); a call about
 * a VM another node owns is sent there, streams and WebSocket upgrades included. What a node
 * sends another carries the cluster's token and the hop header.
 */
export class ClusterFront {
  constructor(
    private readonly cluster: ClusterService,
    private readonly o: {
      socket: string;
      token: string;
      auth: BearerAuth;
      moves: MoveService;
      placement: ClusterPlacement;
      fetches: ImageFetchService;
      images: GuestImages;
      /** Config `splice`: large bodies sent to another node move socket to socket (process-kit/splice.ts). */
      splice: string;
      /** Where the calls sent on before express are counted (`request`). */
      metrics?: RequestMetrics;
      log: Logger;
    },
  ) {
    const helper = spliceHelper(o.splice);
    // Copied through the helper's buffer, not spliced: the other node's helper then reads compact
    // segments, not page fragments (1 GiB through another node: 102-103% of direct copied, 83-86% spliced).
    const move: BodySplice['move'] = (source, dest, length) => splice(helper!, source, dest, length, { mode: 'copy' });
    // Downloads (GET cp) go on a connection of their own, so that a large answer can be moved too.
    const largeAnswers = (req: IncomingMessage) => req.method === 'GET' && DOWNLOAD_PATH.test(req.url ?? '');
    this.bodySplice = helper ? { minBytes: SPLICE_MIN_BYTES, move, largeAnswers } : undefined;
    this.creates = new ClusterCreates({
      placement: o.placement,
      fetches: o.fetches,
      target: (placed) => (placed.here ? this.own() : this.target(placed.node.advertise)),
    });
  }

  private readonly bodySplice?: BodySplice;
  private readonly creates: ClusterCreates;

  /**
   * Wraps the daemon's request listener: a call about a VM that another node owns, and that this
   * node knows of, is sent there before express sees it. The token is checked and the call counted
   * as express's middleware would; what a call costs this node is then little more than what any
   * Node process relaying it costs (docs/cluster.md, "The hop"). Every other call goes to `own`,
   * and so does one that needs more: a VM to look up in etcd, a node that is unreachable, a fork.
   */
  request(own: RequestListener): RequestListener {
    return (req, res) => {
      const node = this.owner(req);
      if (!node) return void own(req, res);
      this.o.metrics?.time(req, res, () => SENT_ON);
      this.o.auth
        .verify(req)
        .then((ok) => (ok ? this.sendTo(req, res, node) : unauthenticated(res)))
        .catch((err: unknown) => answerError(err, req, res, this.o.log));
    };
  }

  /** Sends a call on to `node` and streams its answer back; UnavailableError when it cannot be reached. */
  private async sendTo(req: IncomingMessage, res: ServerResponse, node: NodeView, body?: Buffer): Promise<void> {
    await proxyRequest(req, res, this.target(node.advertise), body).catch((err: Error) => {
      throw new UnavailableError(`node ${node.node} did not answer: ${err.message}`);
    });
  }

  /** The node a call is sent on to by `request`: one about a VM of another node, known here and ready. */
  private owner(req: IncomingMessage): NodeView | undefined {
    if (req.headers[HOP_HEADER] !== undefined) return undefined;
    const url = req.url ?? '';
    const q = url.indexOf('?');
    const m = VM_PATH.exec(q < 0 ? url : url.slice(0, q));
    // A VM's record, a fork and a clone are answered or placed by `serve`.
    if (!m || !m[2] || (req.method === 'POST' && (m[2] === '/fork' || m[2] === '/clone'))) return undefined;
    try {
      const route = this.cluster.route(decodeURIComponent(m[1]));
      return route.at === 'node' ? route.node : undefined;
    } catch {
      return undefined; // said by `serve`, with the rest of the API's errors
    }
  }

  /** The express middleware, after auth and before the routes. */
  readonly http: RequestHandler = (req, res, next) => {
    if (req.headers[HOP_HEADER] !== undefined) {
      // A VM's record names its node, whoever asks.
      const m = req.method === 'GET' ? VM_PATH.exec(req.path) : null;
      const local = m && !m[2] && this.cluster.local(decodedSegment(m[1]));
      return local ? void res.json(local) : next();
    }
    this.serve(req, res, next).catch((err: unknown) => next(err));
  };

  /** Wraps the daemon's own upgrade handler: an upgrade about another node's VM goes there. */
  upgrade(own: UpgradeHandler): UpgradeHandler {
    return answeringUpgrade(async (req: IncomingMessage, socket: Duplex, head: Buffer) => {
      const m = VM_PATH.exec(requestUrl(req).pathname);
      if (!m || req.headers[HOP_HEADER] !== undefined) return own(req, socket, head);
      const name = decodedSegment(m[1]);
      let route;
      try {
        await this.cluster.lookUp(name);
        route = this.cluster.route(name);
      } catch (err) {
        throw isDomainError(err) ? err : new UnavailableError(errorMessage(err));
      }
      // Not verified here, the upgrade goes to the daemon's own handler, which refuses it.
      if (route.at === 'here' || !(await this.o.auth.verify(req).catch(() => false))) return own(req, socket, head);
      proxyUpgrade(req, socket, head, this.target(route.node.advertise));
    });
  }

  /** GET /nodes, GET /nodes/{node}, moves and drains, and what one node sends another (cluster-peer-routes.ts). */
  routes(): RouteDef[] {
    return [
      {
        method: 'post',
        path: '/vms/:name/move',
        handler: async (req, res) => void res.json(await this.o.moves.move(String(req.params.name), req.body)),
      },
      {
        method: 'post',
        path: '/nodes/:node/drain',
        handler: (req, res) =>
          this.atNode(req, res, async () => {
            await this.cluster.setDraining(true);
            return this.o.moves.drain();
          }),
      },
      {
        method: 'delete',
        path: '/nodes/:node/drain',
        handler: (req, res) =>
          this.atNode(req, res, async () => {
            await this.cluster.setDraining(false);
            const { draining: _d, ...node } = this.cluster.node(this.cluster.self);
            return node;
          }),
      },
      ...clusterPeerRoutes({ ...this.o, peerOnly: (req) => this.peerOnly(req) }),
      {
        method: 'get',
        path: '/nodes',
        handler: (_req, res) => {
          if (this.cluster.stale) res.setHeader('X-Svc-Stale', '1');
          res.json(this.cluster.nodes());
        },
      },
      {
        method: 'get',
        path: '/nodes/:node',
        handler: (req, res) => void res.json(this.cluster.node(String(req.params.node))),
      },
    ];
  }

  /** Only a node of the cluster calls this: the hop header and the cluster's token. */
  private peerOnly(req: Request): void {
    if (req.headers[HOP_HEADER] === undefined || !this.o.auth.isPeer(req))
      throw new PermissionDeniedError('only a node of the cluster calls this (with the cluster token)');
  }

  /** A call about node `:node`: served here when it is this one, else sent to it. */
  private async atNode(req: Request, res: Response, here: () => Promise<unknown>): Promise<void> {
    const node = this.cluster.node(String(req.params.node));
    if (node.node === this.cluster.self || req.headers[HOP_HEADER] !== undefined) return void res.json(await here());
    if (node.state !== 'ready') throw new UnavailableError(`node ${node.node} is unreachable: its lease is gone`);
    await this.sendTo(req, res, node, Buffer.from(JSON.stringify(req.body ?? {})));
  }

  private async serve(req: Request, res: Response, next: NextFunction): Promise<void> {
    if (req.path === '/vms') {
      if (req.method === 'GET') {
        // What nodes said last is still listed while etcd cannot be reached: marked stale.
        if (this.cluster.stale) res.setHeader('X-Svc-Stale', '1');
        return void res.json(this.cluster.list());
      }
      if (req.method === 'POST') return this.creates.create(req, res);
      return next();
    }
    const m = VM_PATH.exec(req.path);
    if (!m) return next();
    const name = decodedSegment(m[1]);
    await this.cluster.lookUp(name);
    if (req.method === 'GET' && !m[2]) {
      // A VM's record names its node: from here, from its node, or as it was last published when
      // its node is unreachable.
      const local = this.cluster.local(name);
      if (local) return void res.json(local);
      const seen = this.cluster.get(name);
      if (seen.status === 'node_unreachable') return void res.json(seen);
    }
    // Forks and clones take room too: reserved where their state is, as creates are.
    if (req.method === 'POST' && m[2] === '/fork') return this.creates.fork(req, res, name);
    if (req.method === 'POST' && m[2] === '/clone') return this.creates.clone(req, res, name);
    const route = this.cluster.route(name);
    if (route.at === 'here') return next();
    await this.sendTo(req, res, route.node);
  }

  private own(): ProxyTarget {
    return { socketPath: this.o.socket, headers: this.hop() };
  }

  private target(advertise: string): ProxyTarget {
    return { url: advertise, headers: this.hop(), splice: this.bodySplice };
  }

  private hop(): Record<string, string> {
    return { authorization: `Bearer ${this.o.token}`, [HOP_HEADER]: this.cluster.self };
  }
}

/** The route calls sent on by `ClusterFront.request` are counted under. */
const SENT_ON = 'sent to another node';
