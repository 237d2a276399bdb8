import { formatBytes } from '../../domain/bytes.js';

/** Output helpers for the CLI: aligned tables, sizes, durations, a sparkline. */

export function table(rows: (string | number | undefined)[][], header: string[]): string {
  const all = [header, ...rows.map((r) => r.map((c) => (c === undefined ? '' : String(c))))];
  const widths = header.map((_, i) => Math.max(...all.map((r) => (r[i] ?? '').length)));
  return all
    .map((r) =>
      r
        .map((c, i) => (i === r.length - 1 ? c : (c ?? '').padEnd(widths[i])))
        .join('  ')
        .trimEnd(),
    )
    .join('\n');
}

export function bytes(n: number | undefined): string {
  return n === undefined || Number.isNaN(n) ? '-' : formatBytes(n);
}

/** An image's snapshots as `1 cpu/256 MB (40 MiB), ...`, or `-`. */
export function snapshotList(list: { cpus: number; memory_mb: number; size_bytes: number }[] | undefined): string {
  if (!list?.length) return '-';
  return list.map((s) => `${s.cpus} cpu/${s.memory_mb} MB (${bytes(s.size_bytes)})`).join(', ');
}

/** A duration as people read one: `850 ms`, `4.2 s`, then `21m14s`, `2h03m`, `3d04h`. */
export function ms(n: number): string {
  if (n < 1000) return `${n} ms`;
  if (n < 60_000) return `${(n / 1000).toFixed(1)} s`;
  const s = Math.floor(n / 1000);
  const two = (v: number) => String(v).padStart(2, '0');
  if (s < 3600) return `${Math.floor(s / 60)}m${two(s % 60)}s`;
  if (s < 86_400) return `${Math.floor(s / 3600)}h${two(Math.floor(s / 60) % 60)}m`;
  return `${Math.floor(s / 86_400)}d${two(Math.floor(s / 3600) % 24)}h`;
}

const BLOCKS = '▁▂▃▄▅▆▇█';

/** A one-line chart of a series, scaled to its own range. */
export function sparkline(values: number[], width = 60): string {
  if (values.length === 0) return '';
  const v = values.length > width ? values.slice(-width) : values;
  const lo = Math.min(...v);
  const hi = Math.max(...v);
  return v.map((x) => BLOCKS[hi === lo ? 0 : Math.round(((x - lo) / (hi - lo)) * (BLOCKS.length - 1))]).join('');
}

/** `[#####.....] 45% 1.2 GiB 85 MiB/s` for long copies on a terminal. */
export function progressBar(done: number, total: number | undefined, startedMs: number): string {
  const secs = Math.max(0.001, (Date.now() - startedMs) / 1000);
  const rate = `${bytes(done / secs)}/s`;
  if (!total) return `${bytes(done)} ${rate}`;
  const frac = Math.min(1, done / total);
  const w = 30;
  const fill = Math.round(frac * w);
  return `[${'#'.repeat(fill)}${'.'.repeat(w - fill)}] ${Math.round(frac * 100)}% ${bytes(done)}/${bytes(total)} ${rate}`;
}
