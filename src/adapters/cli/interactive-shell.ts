import type { SvcClient } from '../client/svc-client.js';

/** svc sh NAME: the terminal in raw mode, resizes on SIGWINCH, exits with the shell's code. */
export async function interactiveShell(client: SvcClient, name: string, shell?: string): Promise<number> {
  const out = process.stdout;
  const sh = await client.shell(name, { cols: out.columns || 80, rows: out.rows || 24, shell });
  const input = process.stdin;
  const wasRaw = input.isTTY ? input.isRaw : false;
  if (input.isTTY) input.setRawMode(true);
  input.resume();
  const onInput = (d: Buffer) => sh.write(d);
  input.on('data', onInput);
  const onResize = () => sh.resize(out.columns || 80, out.rows || 24);
  process.on('SIGWINCH', onResize);
  sh.onData((d) => out.write(d));
  const code = await sh.exited;
  process.off('SIGWINCH', onResize);
  input.off('data', onInput);
  if (input.isTTY) input.setRawMode(wasRaw);
  input.pause();
  return code ?? 1;
}
