import { statfs } from 'node:fs/promises';
import { formatBytes } from '../../domain/bytes.js';

/** What a job that holds its input `copies` times over may take in `dir`, and why that much. */
export interface Room {
  bytes: number;
  why: string;
}

/**
 * The room a job may take in `dir`: `cap` where the folder has room for it `copies` times over,
 * otherwise that share of what is free there (said in `why`, for the refusal).
 */
export async function roomIn(dir: string, copies: number, cap: Room, what: string): Promise<Room> {
  const fs = await statfs(dir);
  const free = fs.bavail * fs.bsize;
  const share = Math.floor(free / copies);
  return share >= cap.bytes ? cap : { bytes: share, why: `1/${copies} of the ${formatBytes(free)} free: ${what}` };
}
