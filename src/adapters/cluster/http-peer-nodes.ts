import { request } from 'node:http';
import type { NodeView } from '../../domain/cluster.js';
import { ALL_DOMAIN_ERRORS, InternalError, UnavailableError, type DomainError } from '../../domain/errors.js';
import type { MoveOffer } from '../../domain/move.js';
import type { Instance } from '../../domain/vm.js';
import type { PeerNodes } from '../../ports/cluster.js';
import type { VmFile } from '../../ports/stores.js';
import { packVm } from './vm-bundle.js';

/** Set on a call one node sends another: it is served where it lands, never sent on again. */
export const HOP_HEADER = 'x-svc-node-hop';
/** The most bytes of an answer a node reads from another. */
const MAX_ANSWER_BYTES = 1024 * 1024;

const BY_CODE = new Map<string, new (message: string) => DomainError>(
  ALL_DOMAIN_ERRORS.map((C) => [new C('').code, C as new (message: string) => DomainError]),
);

/** A node's error answer as the domain error it was on that node. */
function errorOf(node: string, status: number, text: string): Error {
  let body: { error?: unknown; code?: unknown } = {};
  try {
    body = JSON.parse(text) as typeof body;
  } catch {
    /* not JSON: said as it came */
  }
  const C = typeof body.code === 'string' ? BY_CODE.get(body.code) : undefined;
  const message =
    typeof body.error === 'string' ? body.error : `node ${node} answered ${status}: ${text.slice(0, 200)}`;
  return C ? new C(message) : new InternalError(message);
}

/** Node-to-node calls over HTTP, with the cluster's token (docs/cluster.md). */
export class HttpPeerNodes implements PeerNodes {
  constructor(private readonly o: { self: string; token: string }) {}

  sendVm(node: NodeView, offer: MoveOffer, files: VmFile[]): Promise<Instance> {
    const url = new URL(`/cluster/vms/${encodeURIComponent(offer.record.name)}`, node.advertise);
    const body = packVm(offer, files);
    return new Promise<Instance>((resolve, reject) => {
      const req = request(
        url,
        {
          method: 'PUT',
          headers: {
            authorization: `Bearer ${this.o.token}`,
            [HOP_HEADER]: this.o.self,
            'content-type': 'application/x-tar',
            'transfer-encoding': 'chunked',
          },
        },
        (res) => {
          const chunks: Buffer[] = [];
          let n = 0;
          res.on('data', (c: Buffer) => {
            n += c.length;
            if (n <= MAX_ANSWER_BYTES) chunks.push(c);
            else res.destroy(new Error(`node ${node.node} answered more than ${MAX_ANSWER_BYTES} bytes`));
          });
          res.on('error', (err) => reject(new UnavailableError(`node ${node.node}: ${err.message}`)));
          res.on('end', () => {
            // A refusal may come before every file was sent: the rest is not read.
            body.destroy();
            const text = Buffer.concat(chunks).toString('utf8');
            if ((res.statusCode ?? 500) >= 400) return reject(errorOf(node.node, res.statusCode ?? 500, text));
            try {
              resolve(JSON.parse(text) as Instance);
            } catch {
              reject(new InternalError(`node ${node.node} answered a move with something not JSON`));
            }
          });
        },
      );
      req.on('error', (err) => {
        body.destroy();
        reject(new UnavailableError(`node ${node.node} did not take vm ${offer.record.name}: ${err.message}`));
      });
      body.on('error', (err) => req.destroy(err));
      body.pipe(req);
    });
  }
}
