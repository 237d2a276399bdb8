import { homedir } from 'node:os';
import { isAbsolute, join, resolve } from 'node:path';
import { parseEgressPolicy } from '../domain/egress.js';
import { ConfigError, type Config, type ConfigKind, type ConfigSection } from './config-shape.js';
import { coerce, readSection } from './config-sections.js';

export { ConfigError, type Config, type ConfigKind, type ConfigSection } from './config-shape.js';

/** Key in the file -> [field in Config, kind, default]. Durations are given as text and kept in ms. */
const KEYS: Record<string, [keyof Config, ConfigKind, unknown]> = {
  data_dir: ['data_dir', 'string', ''],
  images_dir: ['images_dir', 'string', ''],
  socket: ['socket', 'string', ''],
  api: ['api', 'string', '127.0.0.1:7474'],
  api_token: ['api_token', 'string', ''],
  header_timeout: ['header_timeout_ms', 'duration', '20s'],
  allowed_hosts: ['allowed_hosts', 'list', []],
  allowed_origins: ['allowed_origins', 'list', []],
  ui_session: ['ui_session_ms', 'duration', '12h'],
  mount_dirs: ['mount_dirs', 'list', ['~']],
  import_dirs: ['import_dirs', 'list', []],
  insecure_registries: ['insecure_registries', 'list', []],
  hypervisor: ['hypervisor', 'string', 'qemu'],
  ready_timeout: ['ready_timeout_ms', 'duration', '120s'],
  boot_stall_timeout: ['boot_stall_timeout_ms', 'duration', '30s'],
  boot_stall_retries: ['boot_stall_retries', 'int', 1],
  create_buffer: ['create_buffer_ms', 'duration', '60s'],
  shutdown_timeout: ['shutdown_timeout_ms', 'duration', '30s'],
  cpus: ['cpus', 'int', 1],
  memory_mb: ['memory_mb', 'int', 512],
  disk_gb: ['disk_gb', 'int', 4],
  image: ['image', 'string', 'default'],
  max_vms: ['max_vms', 'int', 0],
  max_cpus_total: ['max_cpus_total', 'int', 0],
  max_memory_mb_total: ['max_memory_mb_total', 'int', 0],
  max_execs_per_vm: ['max_execs_per_vm', 'int', 32],
  max_execs_total: ['max_execs_total', 'int', 256],
  guest_reply_budget_mb: ['guest_reply_budget_mb', 'int', 256],
  build_default_image: ['build_default_image', 'bool', true],
  create_from_snapshot: ['create_from_snapshot', 'bool', true],
  sandbox_metrics_enabled: ['sandbox_metrics_enabled', 'bool', true],
  sandbox_metrics_interval: ['sandbox_metrics_interval_ms', 'duration', '15s'],
  sandbox_metrics_points: ['sandbox_metrics_points', 'int', 5760],
  log_level: ['log_level', { oneOf: ['debug', 'info', 'warn', 'error', 'silent'] }, 'info'],
  network: ['network', { oneOf: ['user', 'overlay'] }, 'user'],
  guest_dns: ['guest_dns', 'list', []],
  egress_upstream_ca: ['egress_upstream_ca', 'string', ''],
  splice: ['splice', 'string', 'auto'],
  'egress.default': ['egress' as keyof Config, { oneOf: ['allow', 'deny'] }, 'allow'],
  'egress.allow': ['egress' as keyof Config, 'list', []],
  'egress.deny': ['egress' as keyof Config, 'list', []],
  overlay_mcast: ['overlay_mcast', 'string', '230.0.74.1:47475'],
  log_max_mb: ['log_max_mb', 'int', 16],
  logs_dir_max_mb: ['logs_dir_max_mb', 'int', 256],
  state_reserve_mb: ['state_reserve_mb', 'int', 4],
  test_mode: ['test_mode', 'bool', false],
  mcp_read_only: ['mcp_read_only', 'bool', false],
  mcp_images: ['mcp_images', 'list', []],
  mcp_max_vms: ['mcp_max_vms', 'int', 0],
  mcp_egress: ['mcp_egress', 'bool', false],
  mcp_nodes: ['mcp_nodes', 'bool', false],
  e2b_domain: ['e2b_domain', 'string', ''],
  e2b_volumes_dir: ['e2b_volumes_dir', 'string', ''],
  'warm_pool.template': ['warm_pool' as keyof Config, 'string', ''],
  'warm_pool.size': ['warm_pool' as keyof Config, 'int', 0],
  'warm_pool.running': ['warm_pool' as keyof Config, 'bool', false],
  'warm_pool.refill_delay': ['warm_pool' as keyof Config, 'duration', '2s'],
};

const ALIASES: Record<string, string> = { auth_token: 'api_token' };
/** Keys that are mappings in the file (and dotted keys here). */
const NESTED = ['warm_pool', 'egress'];

export const CONFIG_KEYS = Object.keys(KEYS);

function isLoopback(host: string): boolean {
  return host === 'localhost' || host === '::1' || host === '[::1]' || /^127\.\d+\.\d+\.\d+$/.test(host);
}

export function parseApiAddress(api: string): { host: string; port: number } {
  const m = /^(\[[^\]]+\]|[^:]+):(\d{1,5})$/.exec(api);
  if (!m || Number(m[2]) > 65535)
    throw new ConfigError(`config key "api": must be HOST:PORT or empty, got ${JSON.stringify(api)}`);
  return { host: m[1].replace(/^\[|\]$/g, ''), port: Number(m[2]) };
}

/**
 * Builds the config from a parsed YAML object and the environment (`SVC_<KEY>` overrides any key,
 * for example SVC_DATA_DIR, SVC_API_TOKEN), with the drivers' own sections (`sections`: each
 * driver's keys, docs/config.md). Throws ConfigError naming the bad key.
 */
export function buildConfig(
  raw: unknown,
  env: NodeJS.ProcessEnv = process.env,
  home = homedir(),
  sections: readonly ConfigSection[] = [],
): Config {
  if (raw === null || raw === undefined) raw = {};
  if (typeof raw !== 'object' || Array.isArray(raw)) throw new ConfigError('config file must be a YAML mapping');
  const rest = { ...(raw as Record<string, unknown>) };
  const parsedSections: Record<string, Record<string, unknown>> = {};
  for (const spec of sections) {
    parsedSections[spec.name] = readSection(spec, rest, rest, env);
    delete rest[spec.name];
  }
  const given: Record<string, unknown> = {};
  const flat: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(rest)) {
    // Nested mappings (warm_pool: {template, size}, egress: {default, allow}) become dotted keys.
    if (NESTED.includes(k) && v !== null && typeof v === 'object' && !Array.isArray(v)) {
      for (const [k2, v2] of Object.entries(v)) flat[`${k}.${k2}`] = v2;
    } else flat[k] = v;
  }
  for (const [k0, v] of Object.entries(flat)) {
    const k = ALIASES[k0] ?? k0;
    if (!(k in KEYS)) throw new ConfigError(`config key "${k0}": unknown key (known keys: ${CONFIG_KEYS.join(', ')})`);
    if (k in given) throw new ConfigError(`config key "${k0}": given twice (auth_token is an alias of api_token)`);
    given[k] = v;
  }
  const out: Record<string, unknown> = {};
  for (const [key, [field, kind, def]] of Object.entries(KEYS)) {
    const envKey = `SVC_${key.toUpperCase().replace('.', '_')}`;
    const envValue = env[envKey];
    let value: unknown;
    if (envValue !== undefined) value = coerce(envKey, kind, envValue, true);
    else if (key in given) value = coerce(key, kind, given[key], false);
    else value = coerce(key, kind, def, false);
    const nest = NESTED.find((n) => key.startsWith(`${n}.`));
    if (nest) {
      out[nest] = { ...(out[nest] as object), [key.slice(nest.length + 1)]: value };
    } else out[field] = value;
  }
  const cfg = out as unknown as Config;
  cfg.sections = parsedSections;
  if (sections.length && !sections.some((s) => s.driver === cfg.hypervisor)) {
    throw new ConfigError(
      `config key "hypervisor": must be one of ${[...new Set(sections.map((s) => s.driver))].join('|')}, got ${JSON.stringify(cfg.hypervisor)}`,
    );
  }
  cfg.data_dir = cfg.data_dir ? resolve(cfg.data_dir.replace(/^~(?=\/|$)/, home)) : join(home, '.svc');
  cfg.images_dir = cfg.images_dir ? resolve(cfg.images_dir.replace(/^~(?=\/|$)/, home)) : join(cfg.data_dir, 'images');
  cfg.socket = cfg.socket ? resolve(cfg.socket.replace(/^~(?=\/|$)/, home)) : join(cfg.data_dir, 'svc.sock');
  if (!isAbsolute(cfg.data_dir)) throw new ConfigError('config key "data_dir": must be a path');
  cfg.e2b_volumes_dir = cfg.e2b_volumes_dir
    ? resolve(cfg.e2b_volumes_dir.replace(/^~(?=\/|$)/, home))
    : `${cfg.data_dir}-e2b-volumes`;
  const holds = (dir: string, p: string) => p === dir || p.startsWith(dir.endsWith('/') ? dir : `${dir}/`);
  if (holds(cfg.e2b_volumes_dir, cfg.data_dir) || holds(cfg.data_dir, cfg.e2b_volumes_dir))
    throw new ConfigError(
      'config key "e2b_volumes_dir": sandboxes mount the volumes in it, so it must be a folder of its own, outside data_dir',
    );
  cfg.mount_dirs = cfg.mount_dirs.map((d) => resolve(d.replace(/^~(?=\/|$)/, home)));
  cfg.import_dirs = cfg.import_dirs.map((d) => resolve(d.replace(/^~(?=\/|$)/, home)));
  if (cfg.mount_dirs.includes('/'))
    throw new ConfigError('config key "mount_dirs": "/" would share the whole host; list the folders to share');
  for (const o of cfg.allowed_origins) {
    if (!/^https?:\/\/[^/\s]+$/.test(o))
      throw new ConfigError(
        `config key "allowed_origins": ${JSON.stringify(o)} is not an origin such as http://localhost:3000`,
      );
  }
  if (cfg.api !== '') {
    const { host } = parseApiAddress(cfg.api);
    if (!isLoopback(host) && cfg.api_token === '') {
      throw new ConfigError(`config key "api": ${cfg.api} is not a loopback address; set api_token to expose the API`);
    }
  }
  for (const k of ['cpus', 'memory_mb', 'disk_gb', 'sandbox_metrics_points', 'log_max_mb'] as const) {
    if (cfg[k] === 0) throw new ConfigError(`config key "${k}": must be at least 1`);
  }
  if (!/^2(2[4-9]|3\d)\.\d{1,3}\.\d{1,3}\.\d{1,3}:\d{1,5}$/.test(cfg.overlay_mcast)) {
    throw new ConfigError(
      `config key "overlay_mcast": must be a multicast GROUP:PORT (224.0.0.0-239.255.255.255), got ${JSON.stringify(cfg.overlay_mcast)}`,
    );
  }
  if (cfg.warm_pool.size > 0 && !cfg.warm_pool.template)
    throw new ConfigError('config key "warm_pool.template": required when warm_pool.size is set');
  if (cfg.warm_pool.template && !/^[a-z][a-z0-9-]{0,62}$/.test(cfg.warm_pool.template))
    throw new ConfigError('config key "warm_pool.template": must be a vm name');
  if (cfg.sandbox_metrics_interval_ms < 100)
    throw new ConfigError('config key "sandbox_metrics_interval": must be at least 100ms');
  try {
    cfg.egress = parseEgressPolicy(cfg.egress, 'egress');
  } catch (err) {
    throw new ConfigError(`config key "egress": ${(err as Error).message}`);
  }
  for (const r of cfg.guest_dns) {
    if (!/^(\d{1,3}(\.\d{1,3}){3}(:\d{1,5})?|[0-9a-fA-F:]+|\[[0-9a-fA-F:]+\](:\d{1,5})?)$/.test(r))
      throw new ConfigError(`config key "guest_dns": ${JSON.stringify(r)} is not an IP address with an optional :PORT`);
  }
  if (!['auto', 'off'].includes(cfg.splice) && !isAbsolute(cfg.splice))
    throw new ConfigError(
      `config key "splice": auto, off, or the absolute path of a helper, got ${JSON.stringify(cfg.splice)}`,
    );
  for (const spec of sections) spec.check?.(cfg.sections[spec.name], cfg);
  return cfg;
}
