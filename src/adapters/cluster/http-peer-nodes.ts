import { createWriteStream } from 'node:fs';
import { stat, truncate, writeFile } from 'node:fs/promises';
import { request, type IncomingMessage } from 'node:http';
import { join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import type { Readable } from 'node:stream';
import type { NodeView } from '../../domain/cluster.js';
import { ALL_DOMAIN_ERRORS, InternalError, UnavailableError, type DomainError } from '../../domain/errors.js';
import type { ImageBundle, ImageFetchProgress } from '../../domain/image-fetch.js';
import type { MoveOffer } from '../../domain/move.js';
import type { Instance } from '../../domain/vm.js';
import type { PeerNodes } from '../../ports/cluster.js';
import type { VmFile } from '../../ports/stores.js';
import { boundedLines } from '../guest-link/agent-http.js';
import { packVm } from './vm-bundle.js';

/** Set on a call one node sends another: it is served where it lands, never sent on again. */
export const HOP_HEADER = 'x-svc-node-hop';
/** The most bytes of a JSON answer a node reads from another. */
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

/** The lines of an NDJSON answer as objects, each line bounded. */
async function* ndjsonLines(node: string, res: IncomingMessage): AsyncIterable<unknown> {
  const tooLong = (max: number) => new InternalError(`node ${node} sent a line of more than ${max} bytes`);
  for await (const raw of boundedLines(res, MAX_ANSWER_BYTES, tooLong)) {
    const line = raw.trim();
    if (!line) continue;
    try {
      yield JSON.parse(line) as unknown;
    } catch {
      throw new InternalError(`node ${node} answered a line that is not JSON`);
    }
  }
}

/** Reads a JSON answer (bounded); an error status is the node's domain error. */
function readJson<T>(node: string, res: IncomingMessage): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const chunks: Buffer[] = [];
    let n = 0;
    res.on('data', (c: Buffer) => {
      n += c.length;
      if (n <= MAX_ANSWER_BYTES) chunks.push(c);
      else res.destroy(new Error(`node ${node} answered more than ${MAX_ANSWER_BYTES} bytes`));
    });
    res.on('error', (err) => reject(new UnavailableError(`node ${node}: ${err.message}`)));
    res.on('end', () => {
      const text = Buffer.concat(chunks).toString('utf8');
      if ((res.statusCode ?? 500) >= 400) return reject(errorOf(node, res.statusCode ?? 500, text));
      try {
        resolve(JSON.parse(text) as T);
      } catch {
        reject(new InternalError(`node ${node} answered with something not JSON`));
      }
    });
  });
}

/** Node-to-node calls over HTTP, with the cluster's token (docs/cluster.md). */
export class HttpPeerNodes implements PeerNodes {
  constructor(private readonly o: { self: string; token: string }) {}

  /** One call to `node`; `body` a stream (sent chunked) or JSON. Resolves with the answer, not yet read. */
  private open(
    node: NodeView,
    method: string,
    path: string,
    o: { body?: Readable; json?: unknown; headers?: Record<string, string> } = {},
  ): Promise<IncomingMessage> {
    const json = o.json === undefined ? undefined : Buffer.from(JSON.stringify(o.json));
    return new Promise((resolve, reject) => {
      const req = request(new URL(path, node.advertise), {
        method,
        headers: {
          authorization: `Bearer ${this.o.token}`,
          [HOP_HEADER]: this.o.self,
          ...(json ? { 'content-type': 'application/json', 'content-length': String(json.length) } : {}),
          ...(o.body ? { 'content-type': 'application/x-tar', 'transfer-encoding': 'chunked' } : {}),
          ...o.headers,
        },
      });
      req.on('response', resolve);
      req.on('error', (err) => {
        o.body?.destroy();
        reject(new UnavailableError(`node ${node.node} did not answer ${method} ${path}: ${err.message}`));
      });
      if (o.body) {
        o.body.on('error', (err) => req.destroy(err));
        req.flushHeaders();
        o.body.pipe(req);
      } else req.end(json);
    });
  }

  async sendVm(node: NodeView, offer: MoveOffer, files: VmFile[]): Promise<Instance> {
    const body = packVm(offer, files) as unknown as Readable;
    const res = await this.open(node, 'PUT', `/cluster/vms/${encodeURIComponent(offer.record.name)}`, { body });
    // A refusal may come before every file was sent: the rest is not read.
    res.on('end', () => body.destroy());
    return readJson<Instance>(node.node, res);
  }

  async restoreVm(node: NodeView, name: string, options: { paused?: boolean } = {}): Promise<Instance> {
    const query = options.paused ? '?paused=true' : '';
    return readJson<Instance>(
      node.node,
      await this.open(node, 'POST', `/vms/${encodeURIComponent(name)}/restore${query}`, { json: {} }),
    );
  }

  async pauseVm(node: NodeView, name: string): Promise<void> {
    await readJson(node.node, await this.open(node, 'POST', `/vms/${encodeURIComponent(name)}/pause`, { json: {} }));
  }

  async imageBundle(node: NodeView, image: string): Promise<unknown> {
    return readJson(node.node, await this.open(node, 'GET', `/cluster/images/${encodeURIComponent(image)}`));
  }

  async fetchImageOn(node: NodeView, image: string, progress?: (p: ImageFetchProgress) => void): Promise<void> {
    const path = `/cluster/images/${encodeURIComponent(image)}/fetch`;
    if (!progress) return void (await readJson(node.node, await this.open(node, 'POST', path, { json: {} })));
    // Streamed: a line per step of the fetch, then its end (`{id}`) or its error.
    const res = await this.open(node, 'POST', `${path}?stream=1`, { json: {} });
    if ((res.statusCode ?? 500) >= 400) return void (await readJson(node.node, res));
    let ended = false;
    for await (const line of ndjsonLines(node.node, res)) {
      const ev = line as Partial<ImageFetchProgress> & { error?: unknown; status?: unknown; id?: unknown };
      if (typeof ev.error === 'string')
        throw errorOf(node.node, typeof ev.status === 'number' ? ev.status : 500, JSON.stringify(ev));
      if (typeof ev.bytes === 'number' && typeof ev.total === 'number' && typeof ev.from === 'string')
        progress({ image, from: ev.from, bytes: ev.bytes, total: ev.total });
      else if (ev.id === image) ended = true;
    }
    if (!ended) throw new UnavailableError(`node ${node.node} stopped answering while it fetched image ${image}`);
  }

  /**
   * Each file of the bundle into `dir`: what is there already (a fetch cut off) is kept and the
   * rest asked for from where it ends (`Range`); a file longer than offered is fetched again whole.
   */
  async fetchImageFiles(
    node: NodeView,
    bundle: ImageBundle,
    dir: string,
    onBytes?: (bytes: number) => void,
  ): Promise<void> {
    let before = 0; // the bytes of the files done
    for (const f of bundle.files) {
      const path = join(dir, f.name);
      const there = await stat(path).then(
        (s) => s.size,
        () => undefined,
      );
      if (there === f.size) {
        before += f.size;
        continue;
      }
      let have = there ?? 0;
      if (have > f.size) {
        await truncate(path, 0);
        have = 0;
      }
      if (f.size === 0) {
        await writeFile(path, '');
        continue;
      }
      const res = await this.open(
        node,
        'GET',
        `/cluster/images/${encodeURIComponent(bundle.id)}/files/${encodeURIComponent(f.name)}`,
        { headers: have ? { range: `bytes=${have}-` } : {} },
      );
      if (res.statusCode !== 200 && res.statusCode !== 206) {
        await readJson(node.node, res);
        throw new InternalError(`node ${node.node} answered ${res.statusCode} for ${f.name} of image ${bundle.id}`);
      }
      // 200 is the whole file (the node did not take the range): it replaces what was there.
      const append = res.statusCode === 206;
      let got = append ? have : 0;
      if (onBytes) res.on('data', (c: Buffer) => onBytes(before + (got += c.length)));
      await pipeline(res, createWriteStream(path, { flags: append ? 'a' : 'w' }));
      const size = (await stat(path)).size;
      if (size !== f.size)
        throw new UnavailableError(
          `node ${node.node} sent ${size} of the ${f.size} bytes of ${f.name} of image ${bundle.id}`,
        );
      before += f.size;
    }
  }
}
