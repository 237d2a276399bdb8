import { assertNodeName } from '../../domain/cluster.js';
import { ConfigError, type ConfigSection } from '../../app/config.js';

/**
 * The `cluster:` section (docs/cluster.md, docs/config.md). With `etcd` endpoints the daemon is a
 * node of a cluster; without them nothing of the cluster exists.
 */
export const CLUSTER_SECTION: ConfigSection = {
  name: 'cluster',
  keys: {
    etcd: ['list', []],
    node: ['string', ''],
    advertise: ['string', ''],
    token: ['string', ''],
    etcd_user: ['string', ''],
    etcd_password: ['string', ''],
    etcd_ca: ['string', ''],
    etcd_cert: ['string', ''],
    etcd_key: ['string', ''],
    prefix: ['string', '/svc/'],
    lease_ttl: ['duration', '10s'],
    tags: ['list', []],
    cpus: ['int', 0],
    memory_mb: ['int', 0],
    disk_gb: ['int', 0],
    vm_slots: ['int', 0],
  },
  check(s, config) {
    const etcd = s.etcd as string[];
    if (!etcd.length) return;
    const bad = (key: string, what: string) => new ConfigError(`config key "cluster.${key}": ${what}`);
    for (const e of etcd)
      if (!/^https?:\/\/[^/\s]+$/.test(e))
        throw bad('etcd', `${JSON.stringify(e)} is not an endpoint such as http://10.0.0.1:2379`);
    if (!/^https?:\/\/[^/\s]+\/?$/.test(String(s.advertise)))
      throw bad(
        'advertise',
        `the URL other nodes reach this one at (such as http://10.0.0.5:7474), got ${JSON.stringify(s.advertise)}`,
      );
    if (String(s.token).length < 16) throw bad('token', 'the token nodes present to each other, 16 characters or more');
    if (s.token === config.api_token) throw bad('token', 'must differ from api_token');
    if (s.node !== '') {
      try {
        assertNodeName(s.node, 'cluster.node');
      } catch (err) {
        throw new ConfigError(`config key "cluster.node": ${(err as Error).message}`);
      }
    }
    if (!String(s.prefix).startsWith('/') || !String(s.prefix).endsWith('/'))
      throw bad('prefix', `must start and end with "/", got ${JSON.stringify(s.prefix)}`);
    if ((s.lease_ttl as number) < 2000) throw bad('lease_ttl', 'must be at least 2s');
    for (const t of s.tags as string[])
      if (!/^[\w.-]+=[\w.-]*$/.test(t)) throw bad('tags', `${JSON.stringify(t)} is not KEY=VALUE`);
    if ((s.etcd_cert === '') !== (s.etcd_key === '')) throw bad('etcd_cert', 'etcd_cert and etcd_key go together');
  },
};
