import { closeSync, fstatSync, openSync, readSync } from 'node:fs';

/** More than this of /etc/environment is not read (it is a few lines on any system). */
const READ_MAX = 64 * 1024;
const NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/**
 * The guest's system-wide environment, `/etc/environment`, as PAM's pam_env gives it to every
 * login and to `ssh HOST CMD`: what the agent's commands (exec, durable processes, shells) start
 * with, under their request's own env. An image recipe's `env` is written there (docs/image.md).
 * Lines are `NAME=VALUE` (an `export ` before is taken, as shells write it); a value in double or
 * single quotes loses them, and inside double quotes a backslash before `"`, `\`, `$` or a
 * backquote is dropped (the escapes svc's recipes write). Comments, blank lines and lines of any
 * other shape are skipped.
 */
export function parseEtcEnvironment(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const raw of text.split('\n')) {
    const line = raw.trim().replace(/^export\s+/, '');
    if (!line || line.startsWith('#')) continue;
    const eq = line.indexOf('=');
    if (eq <= 0) continue;
    const name = line.slice(0, eq);
    if (!NAME.test(name)) continue;
    let value = line.slice(eq + 1);
    if (value.length >= 2 && value.startsWith('"') && value.endsWith('"'))
      value = value.slice(1, -1).replace(/\\(["\\$`])/g, '$1');
    else if (value.length >= 2 && value.startsWith("'") && value.endsWith("'")) value = value.slice(1, -1);
    out[name] = value;
  }
  return out;
}

let cached: { path: string; mtimeMs: number; size: number; env: Record<string, string> } | undefined;

/** `/etc/environment` parsed (parseEtcEnvironment), read again when it changed; none when it is missing or unreadable. */
export function etcEnvironment(path = '/etc/environment'): Record<string, string> {
  let fd: number;
  try {
    fd = openSync(path, 'r');
  } catch {
    return {};
  }
  try {
    const st = fstatSync(fd);
    if (!st.isFile()) return {};
    if (cached?.path === path && cached.mtimeMs === st.mtimeMs && cached.size === st.size) return cached.env;
    const buf = Buffer.alloc(Math.min(st.size, READ_MAX));
    const n = buf.length ? readSync(fd, buf, 0, buf.length, 0) : 0;
    const env = parseEtcEnvironment(buf.subarray(0, n).toString('utf8'));
    cached = { path, mtimeMs: st.mtimeMs, size: st.size, env };
    return env;
  } catch {
    return {};
  } finally {
    closeSync(fd);
  }
}
