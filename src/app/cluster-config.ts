import type { NodeCapacity } from '../domain/cluster.js';
import type { Config } from './config.js';

/** A node's cluster settings, with what the host has filled in for what the config left at 0. */
export interface ClusterSettings {
  etcd: string[];
  node: string;
  advertise: string;
  token: string;
  auth?: { username: string; password: string };
  tls?: { ca: string; cert?: string; key?: string };
  prefix: string;
  lease_ttl_ms: number;
  tags: Record<string, string>;
  capacity: NodeCapacity;
}

/** What the host has, for the capacity keys left at 0. */
export interface HostFacts {
  hostname: string;
  cpus: number;
  memory_mb: number;
  disk_gb: number;
}

/**
 * The cluster settings of `config`, or undefined when it is no node of a cluster. `facts` are
 * asked for only then (they read the host: its disk's free space among them).
 */
export function clusterSettings(config: Config, facts: () => HostFacts): ClusterSettings | undefined {
  const s = config.sections.cluster;
  if (!s || !(s.etcd as string[]).length) return undefined;
  const host = facts();
  const str = (k: string) => String(s[k]);
  const int = (k: string) => s[k] as number;
  const hostname =
    host.hostname
      .toLowerCase()
      .replace(/[^a-z0-9-]/g, '-')
      .replace(/^-+|-+$/g, '')
      .slice(0, 63) || 'node';
  return {
    etcd: s.etcd as string[],
    node: str('node') || hostname,
    advertise: str('advertise').replace(/\/$/, ''),
    token: str('token'),
    auth: str('etcd_user') ? { username: str('etcd_user'), password: str('etcd_password') } : undefined,
    tls: str('etcd_ca')
      ? { ca: str('etcd_ca'), cert: str('etcd_cert') || undefined, key: str('etcd_key') || undefined }
      : undefined,
    prefix: str('prefix'),
    lease_ttl_ms: int('lease_ttl'),
    tags: Object.fromEntries(
      (s.tags as string[]).map((t) => [t.slice(0, t.indexOf('=')), t.slice(t.indexOf('=') + 1)]),
    ),
    capacity: {
      // What the daemon's own caps allow, else what the host has (cpus may be shared 4 to 1).
      cpus: int('cpus') || config.max_cpus_total || host.cpus * 4,
      memory_mb: int('memory_mb') || config.max_memory_mb_total || host.memory_mb,
      disk_gb: int('disk_gb') || host.disk_gb,
      vm_slots: int('vm_slots') || config.max_vms || 1000,
    },
  };
}
