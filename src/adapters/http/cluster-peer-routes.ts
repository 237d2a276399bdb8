import type { Request } from 'express';
import { InvalidArgumentError, NotFoundError } from '../../domain/errors.js';
import type { ImageFetchService } from '../../app/image-fetch-service.js';
import type { MoveService } from '../../app/move-service.js';
import { AsyncQueue } from '../../app/async-queue.js';
import type { GuestImages } from '../../ports/guest-images.js';
import { unpackVm } from '../cluster/vm-bundle.js';
import { toHttpError } from '../http-kit/error-status.js';
import { wantsNdjson, writeNdjson } from '../http-kit/ndjson.js';
import type { RouteDef } from '../http-kit/route.js';

/**
 * What only another node of the cluster calls (docs/cluster.md): a VM moved here, sent as a tar of
 * its offer and files; and an image this node has, for a node that fetches it (its bundle, its
 * files with ranges, and a fetch made here on another node's behalf). `peerOnly` refuses any
 * caller without the hop header and the cluster's token.
 */
export function clusterPeerRoutes(o: {
  moves: MoveService;
  fetches: ImageFetchService;
  images: GuestImages;
  peerOnly: (req: Request) => void;
}): RouteDef[] {
  return [
    {
      // Only a node sends this (the cluster's token): a VM moved here, as a tar of its offer and files.
      method: 'put',
      path: '/cluster/vms/:name',
      body: 'raw',
      handler: async (req, res) => {
        o.peerOnly(req);
        const name = String(req.params.name);
        res.setHeader('Connection', 'close'); // a refusal leaves the rest of the body unread
        const moved = await unpackVm(req, (offer, fill) => {
          if (offer.record.name !== name)
            throw new InvalidArgumentError(`the offer is for vm ${offer.record.name}, the path names ${name}`);
          return o.moves.receive(offer, fill);
        });
        res.json(moved);
      },
    },
    {
      // What this node offers of an image another node fetches (docs/cluster.md, "Images across nodes").
      method: 'get',
      path: '/cluster/images/:id',
      handler: async (req, res) => {
        o.peerOnly(req);
        const { paths: _p, ...bundle } = await o.images.bundle(String(req.params.id));
        res.json(bundle);
      },
    },
    {
      method: 'get',
      path: '/cluster/images/:id/files/:file',
      handler: async (req, res) => {
        o.peerOnly(req);
        const { paths } = await o.images.bundle(String(req.params.id));
        const path = paths[String(req.params.file)];
        if (!path) throw new NotFoundError(`image ${String(req.params.id)} has no file ${String(req.params.file)}`);
        // Ranges are honoured: a fetch cut off asks for the rest.
        await new Promise<void>((resolve, reject) =>
          res.sendFile(path, { dotfiles: 'allow', acceptRanges: true, cacheControl: false }, (err) =>
            err && !res.headersSent ? reject(err) : resolve(),
          ),
        );
      },
    },
    {
      method: 'post',
      path: '/cluster/images/:id/fetch',
      handler: async (req, res) => {
        o.peerOnly(req);
        const id = String(req.params.id);
        if (!wantsNdjson(req)) {
          await o.fetches.ensureHere(id);
          return void res.json({ id });
        }
        // Streamed: how far it is, then `{id}` or the error (status and code with it).
        const lines = new AsyncQueue<object>();
        void o.fetches
          .ensureHere(id, (p) => lines.push(p))
          .then(
            () => lines.push({ id }),
            (err: unknown) => {
              const { body, status } = toHttpError(err);
              lines.push({ ...body, status });
            },
          )
          .finally(() => lines.close());
        await writeNdjson(res, lines);
      },
    },
  ];
}
