import { entrypointWord, type EntrypointChoice } from '../domain/restart-policy.js';
import type { ImageInfo } from '../ports/guest-images.js';

/*
 * The shapes image snapshots are made for (image-snapshots.ts): what makes two creates of one
 * image the same guest, and how a shape reads in a create's progress.
 */

/** A machine shape: what a snapshot is made for besides its image. */
export interface Shape {
  cpus: number;
  memory_mb: number;
  /**
   * Its guest runs no image entrypoint, or runs it with a restart policy (CreateRequest.entrypoint):
   * a snapshot apart.
   */
  entrypoint?: EntrypointChoice;
}

/**
 * Only the shape of `s` (a VM's record, say, has more), for `image`: a create that asks for no
 * entrypoint of an image that has none is the same guest as any other.
 */
export const shapeFor = (image: ImageInfo, s: Shape): Shape => ({
  cpus: s.cpus,
  memory_mb: s.memory_mb,
  ...(s.entrypoint !== undefined && image.entrypoint ? { entrypoint: s.entrypoint } : {}),
});

/** How a shape's entrypoint reads after "image X with N cpu(s) and M MB". */
export function entrypointSaid(e?: EntrypointChoice): string {
  if (e === false) return ', its entrypoint not run';
  return e ? `, its entrypoint restarted ${e.restart}` : '';
}

export const sameShape = (a: Shape, b: Shape) =>
  a.cpus === b.cpus && a.memory_mb === b.memory_mb && entrypointWord(a.entrypoint) === entrypointWord(b.entrypoint);
