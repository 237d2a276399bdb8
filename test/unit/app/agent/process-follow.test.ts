import { expect } from 'chai';
import { EventEmitter } from 'node:events';
import { ProcessService } from '../../../../src/app/agent/process-service.js';
import type { AgentService } from '../../../../src/app/agent/agent-service.js';
import type { AgentOptions } from '../../../../src/app/agent/agent-options.js';
import type { GuestFiles } from '../../../../src/ports/agent/guest-files.js';
import type {
  GuestUsers,
  JournalReader,
  KeptEnd,
  KeptProcesses,
  KeptRecord,
} from '../../../../src/ports/agent/kept-processes.js';
import type { OutputPiece, ProcessStream } from '../../../../src/domain/processes.js';

/**
 * One kept process in memory: its stdout journal grows with `write`, `finish` ends it, and the
 * port's waits and looks at its end are counted. `readMax` cuts every read short, as a reader that
 * finds a segment's end or a keeper's write in progress does.
 */
class OneProcess extends EventEmitter implements Partial<KeptProcesses> {
  stdout = Buffer.alloc(0);
  ended: KeptEnd | null = null;
  endLooks = 0;
  waits = 0;
  readonly rec: KeptRecord = {
    id: 'p1',
    kind: 'process',
    pid: 42,
    keeper_pid: 41,
    cmd: 'printer',
    args: [],
    pty: false,
    stdin: false,
    started_at: new Date(0).toISOString(),
    boot_id: 'b',
    host: 'h',
  };

  constructor(private readonly readMax = Infinity) {
    super();
  }

  write(bytes: Buffer | string): void {
    this.stdout = Buffer.concat([this.stdout, Buffer.from(bytes)]);
    this.emit('changed');
  }

  finish(): void {
    this.ended = { code: 0, ended_at_ms: 1000 };
    this.emit('changed');
  }

  unavailable = () => null;
  get = async (id: string) => (id === 'p1' ? this.rec : null);
  list = async () => [this.rec];
  end = async () => {
    this.endLooks++;
    return this.ended;
  };
  range = async (_id: string, s: ProcessStream) => ({ first: 0, end: s === 'stdout' ? this.stdout.length : 0 });
  reader = (_id: string, s: ProcessStream): JournalReader => ({
    read: async (from: number, max: number) => {
      await new Promise((r) => setImmediate(r)); // a file read is I/O: the event loop turns
      const all = s === 'stdout' ? this.stdout : Buffer.alloc(0);
      return { offset: from, data: all.subarray(from, from + Math.min(max, this.readMax)) };
    },
    close: async () => undefined,
  });
  changed = (_id: string, ms: number, signal?: AbortSignal, moved?: () => Promise<boolean>) =>
    new Promise<void>((resolve) => {
      this.waits++;
      const done = () => {
        clearTimeout(timer);
        this.off('changed', done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.once('changed', done);
      signal?.addEventListener('abort', done, { once: true });
      void moved?.().then((yes) => yes && done());
    });
}

function serviceOf(p: OneProcess): ProcessService {
  return new ProcessService(
    p as unknown as KeptProcesses,
    {} as GuestUsers,
    {} as GuestFiles,
    {} as AgentService,
    {} as AgentOptions,
  );
}

/** Reads the output to its end; the text of stdout's pieces and the pieces that are no bytes. */
async function readAll(pieces: AsyncIterable<OutputPiece>): Promise<{ text: string; others: OutputPiece[] }> {
  let text = '';
  const others: OutputPiece[] = [];
  for await (const p of pieces) {
    if ('bytes' in p) text += Buffer.from(p.bytes).toString();
    else others.push(p);
  }
  return { text, others };
}

describe('app/agent/process-service: a follower of a running process', () => {
  it('does not look for the end while its reads find bytes, only once they find none', async () => {
    const p = new OneProcess(1000); // 100 reads for 100,000 bytes
    p.write('x'.repeat(100_000));
    const reading = readAll(await serviceOf(p).output('p1', { from: {} }, true));
    await new Promise((r) => setTimeout(r, 20));
    p.finish();
    const { text, others } = await reading;
    expect(text).to.have.length(100_000);
    expect(others).to.deep.equal([{ exit_code: 0, reason: 'exit', ended_at: new Date(1000).toISOString() }]);
    // one look as it begins, one when caught up, one after the wake its end brought
    expect(p.endLooks, 'looks at the end').to.be.at.most(5);
  });

  it('reads an ended process with no wait, and says its end after the last byte', async () => {
    const p = new OneProcess(1000);
    p.write('y'.repeat(5000));
    p.finish();
    const { text, others } = await readAll(await serviceOf(p).output('p1', { from: {} }, true));
    expect(text).to.equal('y'.repeat(5000));
    expect(others).to.have.length(1);
    expect(p.waits).to.equal(0);
  });

  it('waits for the rest of a cut character without waking again and again, then sends it whole', async () => {
    const p = new OneProcess();
    const euro = Buffer.from('€'); // 3 bytes
    p.write(Buffer.concat([Buffer.from('a'), euro.subarray(0, 2)]));
    const reading = readAll(await serviceOf(p).output('p1', { from: {} }, true));
    await new Promise((r) => setTimeout(r, 200));
    const waitsWhileCut = p.waits;
    p.write(euro.subarray(2));
    await new Promise((r) => setTimeout(r, 20));
    p.finish();
    const { text } = await reading;
    expect(text).to.equal('a€');
    expect(waitsWhileCut, 'waits while only part of the character was there').to.be.at.most(2);
  });
});
