import type { TerminalRequest } from '../../domain/agent.js';
import type { SvcClient } from '../client/svc-client.js';

/**
 * svc sh NAME in a terminal (or -t), and svc x's command in one: the terminal in raw mode,
 * resizes on SIGWINCH, exits with the shell's (the command's) code.
 */
export async function interactiveShell(client: SvcClient, name: string, o: TerminalRequest = {}): Promise<number> {
  const out = process.stdout;
  const sh = await client.shell(name, { cols: out.columns || 80, rows: out.rows || 24, ...o });
  const input = process.stdin;
  const wasRaw = input.isTTY ? input.isRaw : false;
  if (input.isTTY) input.setRawMode(true);
  input.resume();
  let last = 0x0a;
  const onInput = (d: Buffer) => {
    if (d.length) last = d[d.length - 1];
    sh.write(d);
  };
  input.on('data', onInput);
  // Piped input given a terminal anyway (`svc sh -t`) ends: the terminal gets end-of-file (^D at
  // the start of a line, as a person would type it; a last line without its newline gets one
  // first), so the shell exits at EOF with its own status, as with ssh -tt.
  const onEnd = () => sh.write(Buffer.from(last === 0x0a ? [4] : [0x0a, 4]));
  if (!input.isTTY) input.once('end', onEnd);
  const onResize = () => sh.resize(out.columns || 80, out.rows || 24);
  process.on('SIGWINCH', onResize);
  sh.onData((d) => out.write(d));
  const code = await sh.exited;
  process.off('SIGWINCH', onResize);
  input.off('data', onInput);
  input.off('end', onEnd);
  if (input.isTTY) input.setRawMode(wasRaw);
  input.pause();
  return code ?? 1;
}
