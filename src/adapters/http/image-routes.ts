import type { ImageBuilder } from '../../app/image-builder.js';
import type { ImageService } from '../../app/image-service.js';
import { wantsNdjson, writeNdjson } from '../http-kit/ndjson.js';
import type { RouteDef } from '../http-kit/route.js';

/** /images: the built guest images, and building new ones (recipes, baked VMs). */
export function imageRoutes(images: ImageService, builder: ImageBuilder): RouteDef[] {
  return [
    { method: 'get', path: '/images', handler: async (_req, res) => void res.json(await images.list()) },
    {
      method: 'post',
      path: '/images',
      handler: async (req, res) => {
        const stream = wantsNdjson(req);
        const job = await builder.build(req.body);
        if (stream) return writeNdjson(res, job.events);
        res.status(201).json(await job.done);
      },
    },
    {
      method: 'post',
      path: '/images/resolve',
      handler: async (req, res) => void res.json(await images.resolve(req.body)),
    },
    {
      method: 'get',
      path: '/images/:id',
      handler: async (req, res) => void res.json(await images.get(String(req.params.id))),
    },
    {
      method: 'delete',
      path: '/images/:id',
      handler: async (req, res) => void res.json(await images.remove(String(req.params.id))),
    },
  ];
}
