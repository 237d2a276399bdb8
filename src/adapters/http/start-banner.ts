import type { Config } from '../../app/config.js';

/**
 * What svcd tells a person who started it in a terminal (the log lines are for machines): where
 * it listens, the dashboard's address, whether a token guards it, and the next command to try.
 */
export function startBanner(o: { config: Config; tcpPort?: number; version: string }): string {
  const { config } = o;
  const host = config.api.slice(0, config.api.lastIndexOf(':')) || '127.0.0.1';
  const url = o.tcpPort ? `http://${host.includes(':') ? `[${host}]` : host}:${o.tcpPort}` : undefined;
  const lines = [
    `svcd ${o.version} is running (${config.hypervisor}${config.test_mode ? ', test mode' : ''})`,
    `  socket     ${config.socket}`,
    ...(url ? [`  api        ${url}`, `  dashboard  ${url}/ui/`] : []),
    `  token      ${config.api_token ? 'required (api_token in the config; the CLI reads it from there)' : 'none: only this machine can reach the API'}`,
    `  data       ${config.data_dir}`,
    '',
    'next, in another terminal:',
    '  svc new box            # a VM, ready in seconds (the first create builds its image first)',
    '  svc x box -- uname -a  # run a command in it',
    '  svc sh box             # a shell',
    `  svc --help${config.socket.endsWith('/.svc/svc.sock') ? '' : `             # point the CLI here with --config or SVC_SOCKET=${config.socket}`}`,
    '',
    'Stop with Ctrl-C; VMs keep running and this daemon finds them again when it starts.',
  ];
  return lines.join('\n') + '\n';
}
