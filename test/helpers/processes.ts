import { expect } from 'chai';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { TestDaemon } from './daemon.js';
import { followNdjson, type Target } from './http.js';

export interface ReadBack {
  /** Each stream's bytes, in order, as read. */
  text: Record<string, string>;
  /** The end frame. */
  end: Record<string, unknown>;
  /** How many times the reader went away and came back. */
  reconnects: number;
}

/**
 * Reads a process's output through `base` (`/vms/NAME/processes/ID`) with a follower that goes
 * away at random moments `reconnects` times and comes back with the offsets it has seen, then
 * follows to the end. Fails when a frame does not start exactly where the last one of its stream
 * ended (a byte lost or shown twice), or a truncation shows up where none is allowed.
 */
export async function readWithReconnects(
  t: Target,
  base: string,
  o: { reconnects: number; maxMs: number; random?: () => number; allowTruncation?: boolean; timeoutMs?: number },
): Promise<ReadBack> {
  const random = o.random ?? Math.random;
  const pos: Record<string, number> = {};
  const text: Record<string, string> = {};
  let end: Record<string, unknown> | undefined;
  let reconnects = 0;
  const deadline = Date.now() + (o.timeoutMs ?? 120_000);
  while (!end) {
    if (Date.now() > deadline) throw new Error(`no end frame within ${o.timeoutMs ?? 120_000} ms`);
    const from = Object.entries(pos)
      .map(([s, n]) => `${s}:${n}`)
      .join(',');
    const f = followNdjson(t, `${base}/output?follow=1${from ? `&from=${from}` : ''}`);
    const leaving = reconnects < o.reconnects;
    try {
      // Past the planned reconnects a connection still gets 5 s at most: the daemon may have been
      // down when it was made (a restart), and then nothing comes on it.
      await f.until((l) => 'reason' in l, leaving ? Math.floor(random() * o.maxMs) : 5000);
    } catch {
      // time to go away
    }
    f.close();
    for (const l of f.lines) {
      if ('stream' in l) {
        const s = String(l.stream);
        const bytes = l.encoding === 'base64' ? Buffer.from(String(l.data), 'base64') : Buffer.from(String(l.data));
        expect(l.offset, `${s} frame offset`).to.equal(pos[s] ?? 0);
        pos[s] = (pos[s] ?? 0) + bytes.length;
        text[s] = (text[s] ?? '') + bytes.toString('utf8');
      } else if ('truncated' in l) {
        expect(o.allowTruncation, `truncated: ${JSON.stringify(l)}`).to.equal(true);
        const tr = l.truncated as { stream: string; before: number };
        pos[tr.stream] = tr.before;
      } else if ('reason' in l) {
        end = l;
      }
    }
    if (!end && leaving) reconnects++;
  }
  return { text, end, reconnects };
}

/** Lines `n 1` .. `n N` in order, each once: what a numbered printer printed. */
export function expectNumbered(out: string, count: number, end?: Record<string, unknown>): void {
  const lines = out.split('\n').filter(Boolean);
  expect(lines.length, `lines read${end ? ` (end: ${JSON.stringify(end)})` : ''}`).to.equal(count);
  lines.forEach((l, i) => expect(l, `line ${i + 1}`).to.equal(`n ${i + 1}`));
}

/** The local agent process of a fake VM (its stand-in guest runs it and starts it again when it dies). */
export function agentPid(d: Pick<TestDaemon, 'config'>, vm: string): number {
  const state = join(d.config.data_dir, 'vms', vm, 'guest', 'var', 'lib', 'svc');
  for (const p of readdirSync('/proc').filter((x) => /^\d+$/.test(x))) {
    try {
      const cmd = readFileSync(`/proc/${p}/cmdline`, 'utf8').split('\0');
      if (cmd.some((a) => /svc-agent\.c?js$/.test(a)) && cmd.includes(state)) return Number(p);
    } catch {
      // gone
    }
  }
  return 0;
}
