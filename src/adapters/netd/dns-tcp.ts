import { Duplex } from 'node:stream';

/** Queries in flight on one connection, at most. */
const MAX_PENDING = 32;

/**
 * The far end of a guest's DNS-over-TCP connection to the network's resolver: length-prefixed
 * queries in, answers out (RFC 1035 4.2.2), each answered by `answer` (the same policy as UDP).
 */
export class DnsOverTcp extends Duplex {
  private buf = Buffer.alloc(0);
  private pending = 0;
  private ending: (() => void) | undefined;

  constructor(private readonly answer: (msg: Buffer) => Promise<Buffer | undefined>) {
    super({ allowHalfOpen: true });
  }

  override _write(chunk: Buffer, _enc: BufferEncoding, cb: (err?: Error | null) => void): void {
    this.buf = Buffer.concat([this.buf, chunk]);
    while (this.buf.length >= 2 && this.buf.length >= 2 + this.buf.readUInt16BE(0)) {
      const msg = this.buf.subarray(2, 2 + this.buf.readUInt16BE(0));
      this.buf = this.buf.subarray(2 + msg.length);
      if (this.pending >= MAX_PENDING) continue;
      this.pending++;
      void this.answer(Buffer.from(msg))
        .then(
          (a) => {
            if (a && !this.destroyed) {
              const len = Buffer.alloc(2);
              len.writeUInt16BE(a.length);
              this.push(Buffer.concat([len, a]));
            }
          },
          () => undefined,
        )
        .finally(() => {
          this.pending--;
          if (!this.pending) this.ending?.();
        });
    }
    if (this.buf.length > 65537) {
      cb(new Error('dns message too long'));
      return;
    }
    cb();
  }

  override _final(cb: (err?: Error | null) => void): void {
    // The guest is done asking: end once the last answer went out.
    this.ending = () => {
      this.push(null);
      cb();
    };
    if (!this.pending) this.ending();
  }

  override _read(): void {
    // answers are pushed as they come
  }
}
