import type { ImageService } from '../../app/image-service.js';
import type { RouteDef } from '../http-kit/route.js';

/** /images: the built guest images. */
export function imageRoutes(images: ImageService): RouteDef[] {
  return [
    { method: 'get', path: '/images', handler: async (_req, res) => void res.json(await images.list()) },
    { method: 'get', path: '/images/:id', handler: async (req, res) => void res.json(await images.get(String(req.params.id))) },
    { method: 'delete', path: '/images/:id', handler: async (req, res) => void res.json(await images.remove(String(req.params.id))) },
  ];
}
