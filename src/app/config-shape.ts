import type { EgressPolicy } from '../domain/egress.js';

/** The daemon's configuration after defaults, aliases and env overrides (decisions.md, "Config"). */
export interface Config {
  data_dir: string;
  images_dir: string;
  socket: string;
  api: string;
  api_token: string;
  /** Request headers must arrive within this (slow clients are cut off; bodies and streams are not). */
  header_timeout_ms: number;
  /** Host names the TCP listener answers to besides its bind address and the loopback names. */
  allowed_hosts: string[];
  /** Origins besides the daemon's own that may change things over TCP (docs/security.md). */
  allowed_origins: string[];
  /** How long a dashboard log-in lasts (docs/dashboard.md). */
  ui_session_ms: number;
  /** Host folders (and what is under them) that `mounts` may share; default the user's home. */
  mount_dirs: string[];
  /** Host folders POST /images may import files from (`oci-archive:`, `docker-archive:`, `disk:`); default none. */
  import_dirs: string[];
  /** Registries (`HOST[:PORT]`) POST /images pulls from over plain HTTP or without checking TLS; default none. */
  insecure_registries: string[];
  /** The hypervisor driver (docs/architecture.md, "Drivers"); its own keys are in `sections`. */
  hypervisor: string;
  ready_timeout_ms: number;
  /** A cold-booting guest whose console is silent and CPU idle this long hangs (0: never said). */
  boot_stall_timeout_ms: number;
  /** How many times a cold boot that hangs is killed and booted again before it fails (0: never). */
  boot_stall_retries: number;
  create_buffer_ms: number;
  shutdown_timeout_ms: number;
  cpus: number;
  memory_mb: number;
  disk_gb: number;
  image: string;
  max_vms: number;
  max_cpus_total: number;
  max_memory_mb_total: number;
  /** Concurrent execs and shells per VM and in all (0 = no cap); past one, 429 with Retry-After. */
  max_execs_per_vm: number;
  max_execs_total: number;
  /**
   * The most MiB of guest answers the daemon holds while reading them whole (execs, fs, stats),
   * all VMs together; past it a call fails 503 with Retry-After (0 = no budget).
   */
  guest_reply_budget_mb: number;
  /** Build the default image in the background when the daemon starts and it is not built yet. */
  build_default_image: boolean;
  /**
   * Creates restore a suspended booted guest of their image and shape (its snapshot, made after the
   * first cold boot of that shape) instead of booting (docs/snapshot-creates.md).
   */
  create_from_snapshot: boolean;
  sandbox_metrics_enabled: boolean;
  sandbox_metrics_interval_ms: number;
  sandbox_metrics_points: number;
  log_level: 'debug' | 'info' | 'warn' | 'error' | 'silent';
  network: 'user' | 'overlay';
  /** The egress policy of VMs whose create gives none (docs/network.md). */
  egress: EgressPolicy;
  /** Resolvers guests' allowed DNS queries go to (HOST or HOST:PORT); empty: the host's /etc/resolv.conf. */
  guest_dns: string[];
  /** A PEM file of certificates the upstreams of egress secrets may lead to besides the host's trust store (docs/egress-secrets.md). */
  egress_upstream_ca: string;
  /** Large copies through the daemon: `auto` (the svc-splice helper built beside it), `off`, or another helper's path. */
  splice: string;
  /** Multicast group:port of the overlay segment (QEMU socket netdev; no root needed). */
  overlay_mcast: string;
  /** Each VM log (serial, QEMU, virtiofsd) is capped at this, plus one older copy. */
  log_max_mb: number;
  /** `data_dir/logs` (logs kept from deleted VMs) is pruned, oldest first, to this. */
  logs_dir_max_mb: number;
  /** Room kept under the data dir (`.reserve`) for the records of VMs that exist, given up when the disk is full; 0: none. */
  state_reserve_mb: number;
  /** Allows what only tests may do (the fake hypervisor's local agents run guests' commands on this host). */
  test_mode: boolean;
  /** MCP at /mcp (and the defaults of `svc mcp`): read-only tools only, allowed images, a cap on VMs made through it. */
  mcp_read_only: boolean;
  mcp_images: string[];
  mcp_max_vms: number;
  /** MCP clients may change VMs' egress policies (set_egress); off by default. */
  mcp_egress: boolean;
  /** On a node of a cluster: MCP clients may drain nodes (docs/mcp.md). */
  mcp_nodes: boolean;
  /** The domain E2B's SDK puts after `PORT-ID.` in a sandbox's URLs (docs/e2b.md); empty: `localhost` and the API's port. */
  e2b_domain: string;
  /**
   * The folder E2B's volumes live in (docs/e2b.md, "Volumes"): sandboxes mount them, so it is
   * outside data_dir; `<data_dir>-e2b-volumes` when empty.
   */
  e2b_volumes_dir: string;
  /**
   * Warm pool: keep `size` suspended clones of `template` ready for `from_pool` creates; refill
   * once claims have stopped coming for `refill_delay` (milliseconds).
   */
  warm_pool: { template: string; size: number; running: boolean; refill_delay: number };
  /** Each driver's own section (`qemu: {...}`, `fake: {...}`), parsed by the spec the driver gave (ConfigSection). */
  sections: Record<string, Record<string, unknown>>;
}

/**
 * A driver's config section: its keys with their kinds and defaults, read from its mapping in the
 * file (`qemu: {binary: ...}`), `SVC_<SECTION>_<KEY>` in the environment, or an old flat key
 * (`qemu_binary`, still read) that stands for one of them.
 */
export interface ConfigSection {
  /** The mapping's key in the file, and the SVC_ prefix of its keys in the environment. */
  name: string;
  /** The `hypervisor` value whose section this is (none for the daemon's own, such as `cluster`). */
  driver?: string;
  keys: Record<string, [ConfigKind, unknown]>;
  /** Old top-level keys, and the key of this section each stands for. */
  aliases?: Record<string, string>;
  /** Checks across keys, with the rest of the config; throws ConfigError naming the key. */
  check?(section: Record<string, unknown>, config: Config): void;
}

export class ConfigError extends Error {}

export type ConfigKind = 'string' | 'bool' | 'int' | 'duration' | 'list' | { oneOf: readonly string[] };
