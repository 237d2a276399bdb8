import type { VmSnapshots } from '../../app/vm-snapshots.js';
import { parseSnapshotRequest } from '../../domain/snapshots.js';
import type { RouteDef } from '../http-kit/route.js';

/** A VM's named snapshots: /vms/{name}/snapshots (docs/snapshots.md). */
export function snapshotRoutes(snapshots: VmSnapshots): RouteDef[] {
  const vm = (p: Record<string, unknown>) => String(p.name);
  const snap = (p: Record<string, unknown>) => String(p.snapshot);
  return [
    {
      method: 'get',
      path: '/vms/:name/snapshots',
      handler: (req, res) => void res.json(snapshots.list(vm(req.params))),
    },
    {
      method: 'post',
      path: '/vms/:name/snapshots',
      handler: async (req, res) =>
        void res.status(201).json(await snapshots.take(vm(req.params), parseSnapshotRequest(req.body))),
    },
    {
      method: 'get',
      path: '/vms/:name/snapshots/:snapshot',
      handler: (req, res) => void res.json(snapshots.get(vm(req.params), snap(req.params))),
    },
    {
      method: 'delete',
      path: '/vms/:name/snapshots/:snapshot',
      handler: async (req, res) => void res.json(await snapshots.remove(vm(req.params), snap(req.params))),
    },
    {
      method: 'post',
      path: '/vms/:name/snapshots/:snapshot/revert',
      handler: async (req, res) => void res.json(await snapshots.revert(vm(req.params), snap(req.params))),
    },
  ];
}
