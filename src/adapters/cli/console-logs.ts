import type { SvcClient } from '../client/svc-client.js';

/** The most of the console log `-n` reads back to find its lines (the daemon's own bound on a tail). */
const MAX_WINDOW = 64 * 1024 * 1024;

/**
 * Where the last `n` lines of `buf` start, as `tail -n` counts them (a last line without its
 * newline is one); undefined when `buf` holds fewer than `n` whole lines after its first newline,
 * so a read that began mid-log may have cut the first of them.
 */
export function lastLinesStart(buf: Buffer, n: number): number | undefined {
  if (n === 0) return buf.length;
  let i = buf.length - (buf.at(-1) === 0x0a ? 1 : 0);
  for (let seen = 0; ;) {
    // (i - 1 below 0 would search from the end)
    const nl = i > 0 ? buf.lastIndexOf(0x0a, i - 1) : -1;
    if (nl < 0) return undefined;
    if (++seen === n) return nl + 1;
    i = nl;
  }
}

/**
 * The console log's last `n` lines: read back from the end in growing windows until they hold
 * them, or the whole log (or the daemon's most) does. `end` is the byte of the log after them.
 */
async function lastLines(client: SvcClient, name: string, n: number): Promise<{ lines: Buffer; end: number }> {
  for (let window = 64 * 1024; ; window *= 4) {
    const parts: Buffer[] = [];
    const read = await client.logsAt(name, { tail: window });
    for await (const c of read.chunks) parts.push(c);
    const buf = Buffer.concat(parts);
    const start = lastLinesStart(buf, n);
    if (start !== undefined || buf.length < window || window >= MAX_WINDOW)
      return { lines: buf.subarray(start ?? 0), end: read.offset + buf.length };
  }
}

/**
 * svc logs NAME: the guest's serial console log; `tail` its last bytes, `lines` its last lines
 * (lastLines), `from` from a byte of it, then with `follow` what comes next. Says on stderr when
 * there is nothing to print.
 */
export async function printConsole(
  client: SvcClient,
  name: string,
  o: { follow?: boolean; tail?: number; lines?: number; from?: number },
  signal: AbortSignal,
): Promise<void> {
  let bytes = 0;
  const print = (c: Buffer) => {
    bytes += c.length;
    process.stdout.write(c);
  };
  let from = o.from;
  if (o.lines !== undefined) {
    const last = await lastLines(client, name, o.lines);
    print(last.lines);
    // the follow goes on from the byte after them: a line written since is neither cut nor shown twice
    from = last.end;
  }
  if (o.lines === undefined || o.follow)
    for await (const c of client.logs(name, { follow: !!o.follow, tail: o.tail, from, signal })) print(c);
  // an empty answer reads as a broken command without a word on why (stderr: a pipe gets nothing)
  if (bytes === 0 && !o.follow && o.tail !== 0 && o.lines !== 0 && o.from === undefined)
    process.stderr.write(
      `svc: vm ${name}'s console log is empty (a VM made from a snapshot starts with none: its boot was the snapshot's)\n`,
    );
}
