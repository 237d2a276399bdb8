/**
 * Bytes in the order they came, kept as the buffers they came in: read from any offset without
 * copying when the bytes lie in one buffer, and dropped from the front (a TCP flow's send buffer:
 * what the guest has not acknowledged yet).
 */
export class ByteQueue {
  private parts: Buffer[] = [];
  private bytes = 0;

  /** The bytes held. */
  get length(): number {
    return this.bytes;
  }

  push(b: Buffer): void {
    this.parts.push(b);
    this.bytes += b.length;
  }

  /** `n` bytes of the queue from offset `off` (one buffer when they lie in one). */
  slice(off: number, n: number): Buffer {
    let i = 0;
    while (off >= this.parts[i].length) off -= this.parts[i++].length;
    if (off + n <= this.parts[i].length) return this.parts[i].subarray(off, off + n);
    const parts: Buffer[] = [];
    let left = n;
    for (; left > 0; i++, off = 0) {
      const take = Math.min(left, this.parts[i].length - off);
      parts.push(this.parts[i].subarray(off, off + take));
      left -= take;
    }
    return Buffer.concat(parts, n);
  }

  /** Forgets `n` acknowledged bytes from the front of the queue. */
  drop(n: number): void {
    this.bytes -= n;
    while (n > 0) {
      const b = this.parts[0];
      if (b.length <= n) {
        n -= b.length;
        this.parts.shift();
      } else {
        this.parts[0] = b.subarray(n);
        n = 0;
      }
    }
  }
}
