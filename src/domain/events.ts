import type { Instance } from './vm.js';

export const CREATE_PHASES = [
  // A fork's first line: its source's state captured (the source's name, `paused_ms`).
  'capture',
  'accepted',
  'image',
  'disk',
  'boot',
  // A create restored from its image's snapshot (in place of `boot`).
  'restore',
  'wait_ssh',
  'wait_agent',
  'userdata',
  'bootstrap',
  'ready',
  'error',
] as const;
export type CreatePhase = (typeof CREATE_PHASES)[number];

/** One line of the create progress stream. The last is `ready` (with instance) or `error`. */
export interface CreateProgressEvent {
  phase: CreatePhase;
  message: string;
  name: string;
  t: string;
  elapsed_ms: number;
  instance?: Instance;
  error?: string;
  /** How far an image build is (phase `image`), 0 to 100. */
  percent?: number;
  /** Stable domain error code on `error` events, so clients can tell a timeout from a crash. */
  code?: string;
  /** How long a fork's source was held while it was captured (phase `capture`). */
  paused_ms?: number;
}

export interface ActivityEvent {
  id: number;
  t: string;
  action: string;
  target: string;
  status: 'ok' | 'error';
  duration_ms: number;
  message?: string;
}

/** Host-side metadata of a secret. The value never appears in it. */
export interface SecretRecord {
  name: string;
  size: number;
  mode: string;
  created_at: string;
  updated_at: string;
}

/** One sample of the per-VM stats history (metrics.ring). */
export interface MetricsPoint {
  t_ms: number;
  uptime_sec: number;
  load1: number;
  mem_total_bytes: number;
  mem_available_bytes: number;
  disk_total_bytes?: number;
  disk_free_bytes?: number;
}

export const IMAGE_BUILD_PHASES = [
  'accepted',
  'import',
  'boot',
  'packages',
  'files',
  'env',
  'run',
  'bake',
  'ready',
  'error',
] as const;
export type ImageBuildPhase = (typeof IMAGE_BUILD_PHASES)[number];

/** One line of POST /images progress. The last is `ready` (with the image) or `error`. */
export interface ImageBuildEvent {
  phase: ImageBuildPhase;
  message: string;
  name: string;
  t: string;
  elapsed_ms: number;
  /** How far an import is (phase `import`). */
  percent?: number;
  /** The built image (GET /images/{id}'s shape). */
  image?: object;
  error?: string;
  code?: string;
}

/** A change to a VM as the API shows it: the VM now, or that it is gone. */
export type VmChange = { event: 'vm'; vm: Instance } | { event: 'removed'; name: string };

/**
 * A line of the change feed (GET /events): a snapshot of every VM first, then changes, a `ping`
 * now and then, and `overflow` (then the end) for a reader too far behind.
 */
export type VmEvent =
  { event: 'snapshot'; vms: Instance[] } | VmChange | { event: 'ping' } | { event: 'overflow'; message: string };
