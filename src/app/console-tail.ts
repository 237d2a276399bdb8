import type { DomainError } from '../domain/errors.js';
import type { VmRecord } from '../domain/vm.js';
import type { ConsoleLogs } from '../ports/stores.js';

const CONSOLE_TAIL_BYTES = 4096;
const CONSOLE_LINES = 12;
const NOT_A_BOOT = new Set([
  'invalid_argument',
  'not_found',
  'already_exists',
  'resource_exhausted',
  'invalid_state',
  // a fork whose capture QEMU could not load, an unreachable node: no guest was asked to boot
  'unavailable',
]);

/**
 * A boot that failed says what the guest's console said last, or that it said nothing at all:
 * then the kernel never started, which is what too little memory for the kernel looks like.
 * `whole` says where the whole log is (a failed create's VM is gone and its log kept in
 * data_dir/logs; a failed start's VM is still there for `svc logs`). `err` as it was when the VM
 * never ran or its console cannot be read.
 */
export async function withConsoleTail(
  consoles: ConsoleLogs | undefined,
  rec: VmRecord,
  err: DomainError,
  whole: string,
): Promise<DomainError> {
  // A create refused for what it asked (a bad binding the guest refused, a name taken) is not a
  // boot that failed: its console has nothing to say about it.
  if (!consoles || !rec.runtime || NOT_A_BOOT.has(err.code)) return err;
  const parts: Buffer[] = [];
  try {
    for await (const b of consoles.read(rec.name, { tail: CONSOLE_TAIL_BYTES })) parts.push(b);
  } catch {
    return err;
  }
  const lines = consoleLines(Buffer.concat(parts).toString('utf8'));
  const said = lines.length
    ? `the console's last lines:\n${lines.map((l) => `  | ${l}`).join('\n')}`
    : 'the console printed nothing: the kernel did not start (too little memory for it, or a broken image)';
  const message = `${err.message}\n${said}\n(${whole})`;
  try {
    return Object.assign(new (err.constructor as new (m: string) => DomainError)(message), { cause: err });
  } catch {
    return err;
  }
}

/**
 * A kernel's stack dump and register lines: the panic above them is what a person needs. The
 * `RIP:` line stays: one line that names the function the kernel faulted in.
 */
const TRACE_LINE =
  /^(\[\s*[\d.]+\]\s*)?(Call Trace:|<\/?TASK>|(\? )?[\w.]+\+0x[\da-f]+\/0x[\da-f]+|CPU: \d+ PID:|Hardware name:|RSP:|RAX:|RDX:|RBP:|R\d+:|FS:|CS:|CR2:|Code:|Kernel Offset:)/;

/**
 * The console's last lines as a person reads them: escapes and control characters gone, blank
 * lines and a kernel's stack dump dropped (so a panic's reason is among them), at most 12.
 */
export function consoleLines(text: string): string[] {
  return text
    .replace(/\x1b\[[0-9;?]*[A-Za-z]/g, '')
    .split(/\r?\n|\r/)
    .map((l) => l.replace(/[\x00-\x08\x0b-\x1f\x7f]/g, '').trimEnd())
    .filter((l) => l.trim() && !TRACE_LINE.test(l.trim()))
    .slice(-CONSOLE_LINES)
    .map((l) => (l.length > 200 ? `${l.slice(0, 197)}...` : l));
}
