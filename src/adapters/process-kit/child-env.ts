/** What a child process may inherit from the daemon: how to find programs and reach the network, never its tokens. */
const PASSED = [
  'PATH',
  'HOME',
  'LANG',
  'LC_ALL',
  'TZ',
  'TMPDIR',
  'http_proxy',
  'https_proxy',
  'no_proxy',
  'HTTP_PROXY',
  'HTTPS_PROXY',
  'NO_PROXY',
];

/**
 * The environment for processes the daemon starts (QEMU, virtiofsd, socat, image builds, local
 * agents): the few variables they need from the daemon's own, plus `extra`. `SVC_*` (the API token
 * among them) and everything else stays behind.
 */
export function childEnv(
  extra: Record<string, string> = {},
  from: NodeJS.ProcessEnv = process.env,
): Record<string, string> {
  const env: Record<string, string> = {};
  for (const k of PASSED) if (from[k] !== undefined) env[k] = from[k];
  env.PATH ??= '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';
  return { ...env, ...extra };
}
