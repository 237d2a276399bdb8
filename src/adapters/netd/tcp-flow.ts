import type { Duplex } from 'node:stream';
import {
  seqAdd,
  seqDiff,
  seqLe,
  seqLt,
  tcpFrame,
  TCP_ACK,
  TCP_FIN,
  TCP_PSH,
  TCP_RST,
  TCP_SYN,
  type Link,
  type Tcp,
} from './packets.js';
import { ByteQueue } from './byte-queue.js';

/** What a flow needs from the guest's network it lives in. */
export interface FlowHost {
  readonly link: Link;
  readonly guestIp: number;
  /** Queues a frame to the guest. */
  emit(frame: Buffer): void;
  /** The link to the guest is backed up: hold data until `pumpAll`. */
  congested(): boolean;
  /** The flow is over: forget it. */
  closed(flow: TcpFlow): void;
}

/** Bytes from the host a flow keeps for the guest (sent or not, unacknowledged) before it stops reading. */
const SEND_BUF = 1 << 20;
/** Bytes the guest may send before the host socket takes them (our receive window). */
const RECV_BUF = 512 << 10;
/** Our window scale: windows up to 8 MiB. */
const OUR_WSCALE = 7;
/** The segment size we accept (the guest's MTU bounds what it sends anyway). */
const OUR_MSS = 65000;
const RTO_MS = 200;
const RTO_MAX_MS = 4000;
/** Retransmissions of one segment before the connection is given up. */
const MAX_TRIES = 12;

export type FlowState = 'connecting' | 'syn-received' | 'syn-sent' | 'established' | 'closed';

export interface FlowEnds {
  /** The far end as the guest sees it (the address it connected to, or the host's for a forward). */
  remoteIp: number;
  remotePort: number;
  guestPort: number;
}

/**
 * One TCP connection between the guest and a host socket. The guest's side is real TCP (its
 * kernel's); ours is as little as a lossless local link needs: one segment size, the guest's
 * window for flow control (no congestion control), go-back-N retransmission on a timer, no SACK,
 * no timestamps, segments that arrive out of order dropped (the guest sends them again). Either
 * end may open it: the guest (a connection out, `fromGuest`) or the host (a forward, `toGuest`).
 */
export class TcpFlow {
  state: FlowState;
  socket: Duplex | undefined;
  /** Bytes each way, for the audit log. */
  bytesOut = 0;
  bytesIn = 0;
  readonly openedAt = Date.now();

  private iss = Math.floor(Math.random() * 0xffffffff) >>> 0;
  private sndUna = this.iss;
  private sndNxt = this.iss;
  private rcvNxt = 0;
  /** The guest's window, in bytes (scaled). */
  private sndWnd = 0;
  private sndShift = 0;
  private rcvShift = 0;
  private mss = 536;
  /** Host bytes from sndUna on. */
  private readonly sendBuf = new ByteQueue();
  private hostEnded = false;
  private finSent = false;
  private guestFin = false;
  private dupAcks = 0;
  private tries = 0;
  private rto = RTO_MS;
  private timer: NodeJS.Timeout | undefined;
  private paused = false;
  /** Guest bytes kept back until `release` (the egress check reads the first ones). */
  private held: Buffer[] | undefined;
  private heldLen = 0;
  private ackDue = false;
  /** Called when held bytes arrive (the egress check reads them). */
  onHeld: (() => void) | undefined;
  /** Reads what the guest sends before the host socket gets it; false resets the connection. */
  inspect: ((b: Buffer) => boolean) | undefined;
  private detach: (() => void) | undefined;

  private constructor(
    private readonly host: FlowHost,
    readonly ends: FlowEnds,
    state: FlowState,
  ) {
    this.state = state;
  }

  /** The guest's SYN to `ends`: the flow waits for the host socket (`connected`) before it answers. */
  static fromGuest(host: FlowHost, ends: FlowEnds, syn: Tcp): TcpFlow {
    const f = new TcpFlow(host, ends, 'connecting');
    f.rcvNxt = seqAdd(syn.seq, 1);
    f.mss = Math.max(536, Math.min(syn.mss ?? 536, OUR_MSS));
    if (syn.wscale !== undefined) {
      f.sndShift = syn.wscale;
      f.rcvShift = OUR_WSCALE;
    }
    f.sndWnd = syn.window; // a SYN's window is never scaled
    return f;
  }

  /** A host connection to the guest's `ends.guestPort`: sends the SYN. The socket is read once the guest accepts. */
  static toGuest(host: FlowHost, ends: FlowEnds, socket: Duplex): TcpFlow {
    const f = new TcpFlow(host, ends, 'syn-sent');
    f.attach(socket);
    f.pause();
    f.sndNxt = seqAdd(f.iss, 1);
    f.sendSyn();
    return f;
  }

  get key(): string {
    return flowKey(this.ends.remoteIp, this.ends.remotePort, this.ends.guestPort);
  }

  /** Holds what the guest sends until `release` (at most `limit` bytes are kept; past that they are released). */
  hold(): void {
    this.held = [];
  }

  /** The first bytes the guest sent while held (for the egress check). */
  heldBytes(): Buffer {
    return Buffer.concat(this.held ?? []);
  }

  /** Passes what was held on to the host socket and stops holding. */
  release(): void {
    const held = this.held;
    this.held = undefined;
    this.heldLen = 0;
    for (const b of held ?? []) if (!this.toHost(b)) return;
    if (this.guestFin) this.socket?.end();
    this.windowUpdate();
  }

  /** Guest bytes to the host socket, through `inspect`. False when it ended the connection. */
  private toHost(b: Buffer): boolean {
    if (this.inspect && !this.inspect(b)) {
      this.abort();
      return false;
    }
    this.socket?.write(b);
    return true;
  }

  /**
   * The flow goes on with another host socket (the egress path takes its connection over): the
   * old one is let go, not closed (whoever took it over owns it now).
   */
  rebind(socket: Duplex): void {
    this.detach?.();
    this.attach(socket);
  }

  /** The host socket for a flow the guest opened is connected: answer the guest's SYN. */
  connected(socket: Duplex): void {
    if (this.state !== 'connecting') {
      socket.destroy();
      return;
    }
    this.attach(socket);
    this.state = 'syn-received';
    this.sndNxt = seqAdd(this.iss, 1);
    this.sendSyn();
  }

  private attach(socket: Duplex): void {
    this.socket = socket;
    (socket as Partial<{ setNoDelay(on: boolean): void }>).setNoDelay?.(true);
    const on = {
      data: (d: Buffer) => this.fromHost(d),
      end: () => {
        this.hostEnded = true;
        this.pump();
      },
      drain: () => this.windowUpdate(),
      error: () => undefined,
      close: () => {
        // Closed before its end was read (reset, error): the guest is reset too.
        if (!this.hostEnded && this.state !== 'closed') this.abort();
      },
    };
    for (const [event, fn] of Object.entries(on)) socket.on(event, fn);
    this.detach = () => {
      for (const [event, fn] of Object.entries(on)) socket.off(event, fn);
    };
  }

  private sendSyn(): void {
    const synAck = this.state === 'syn-received';
    this.emit(this.iss, synAck ? TCP_SYN | TCP_ACK : TCP_SYN, undefined, 0, 0, {
      mss: OUR_MSS,
      wscale: synAck ? (this.rcvShift ? OUR_WSCALE : undefined) : OUR_WSCALE,
    });
    this.arm();
  }

  /** A segment from the guest for this flow. */
  input(t: Tcp): void {
    if (t.flags & TCP_RST) {
      this.finish(false);
      return;
    }
    if (this.state === 'connecting') return; // its SYN again: the answer comes once the host connects
    if (this.state === 'syn-sent') {
      if ((t.flags & (TCP_SYN | TCP_ACK)) !== (TCP_SYN | TCP_ACK) || t.ack !== this.sndNxt) {
        if (t.flags & TCP_ACK) this.reset(t.ack);
        return;
      }
      this.rcvNxt = seqAdd(t.seq, 1);
      this.mss = Math.max(536, Math.min(t.mss ?? 536, OUR_MSS));
      if (t.wscale !== undefined) {
        this.sndShift = t.wscale;
        this.rcvShift = OUR_WSCALE;
      }
      this.sndUna = t.ack;
      this.sndWnd = t.window;
      this.state = 'established';
      this.disarm();
      this.ackNow();
      this.resume();
      return;
    }
    if (t.flags & TCP_SYN) {
      // Its SYN again after our SYN-ACK went out: answer once more.
      if (this.state === 'syn-received' && seqAdd(t.seq, 1) === this.rcvNxt) this.sendSyn();
      return;
    }
    if (!(t.flags & TCP_ACK)) return;
    if (this.state === 'syn-received') {
      if (t.ack !== this.sndNxt) return;
      this.state = 'established';
      this.sndUna = t.ack;
      this.disarm();
      this.resume();
    }
    this.onAck(t);
    this.onData(t);
    if (this.state !== 'closed') this.pump();
  }

  private onAck(t: Tcp): void {
    this.sndWnd = t.window << this.sndShift;
    const acked = seqDiff(t.ack, this.sndUna);
    if (acked < 0 || seqLt(this.sndNxt, t.ack)) return; // old, or for what we never sent
    this.tries = 0; // it answers: only a silent guest is given up
    if (acked === 0) {
      if (this.sndUna !== this.sndNxt && t.payload.length === 0 && !(t.flags & TCP_FIN) && ++this.dupAcks === 3)
        this.retransmit(false);
      return;
    }
    this.dupAcks = 0;
    this.rto = RTO_MS;
    const data = Math.min(acked, this.sendBuf.length);
    this.sendBuf.drop(data);
    this.sndUna = t.ack;
    if (this.sndUna === this.sndNxt) this.disarm();
    else this.arm(true);
    if (this.finSent && this.sndUna === this.sndNxt && this.guestFin) this.finish(true);
    if (this.paused && this.sendBuf.length < SEND_BUF / 2 && this.state === 'established') this.resume();
  }

  private onData(t: Tcp): void {
    let payload = t.payload;
    let seq = t.seq;
    const fin = (t.flags & TCP_FIN) !== 0;
    if (payload.length === 0 && !fin) {
      // A keep-alive or window probe below what we expect: tell it where we are.
      if (seqLt(seq, this.rcvNxt)) this.ackNow();
      return;
    }
    // Already had (part of) it: keep what is new.
    const old = seqDiff(this.rcvNxt, seq);
    if (old > 0) {
      if (old >= payload.length + (fin ? 1 : 0)) {
        this.ackNow();
        return;
      }
      payload = payload.subarray(Math.min(old, payload.length));
      seq = this.rcvNxt;
    }
    if (seq !== this.rcvNxt || this.guestFin) {
      this.ackNow(); // out of order: it comes again
      return;
    }
    if (payload.length) {
      if (payload.length > this.window()) {
        this.ackNow(); // past the window we gave: it comes again when there is room
        return;
      }
      this.rcvNxt = seqAdd(this.rcvNxt, payload.length);
      this.bytesOut += payload.length;
      if (this.held) {
        this.held.push(Buffer.from(payload));
        this.heldLen += payload.length;
        this.onHeld?.();
      } else if (!this.toHost(Buffer.from(payload))) {
        return;
      }
    }
    if (fin) {
      this.rcvNxt = seqAdd(this.rcvNxt, 1);
      this.guestFin = true;
      if (!this.held) this.socket?.end();
      this.ackNow();
      if (this.finSent && this.sndUna === this.sndNxt) this.finish(true);
      return;
    }
    this.ackDue = true;
  }

  /** An ACK for what arrived in this read from the guest, unless a data segment carried it already. */
  flushAck(): void {
    if (this.ackDue && this.state !== 'closed') this.ackNow();
  }

  /** Free space in our receive window (bytes the host socket has not taken count against it). */
  private window(): number {
    const pending = (this.socket?.writableLength ?? 0) + this.heldLen;
    return Math.max(0, RECV_BUF - pending);
  }

  private windowField(): number {
    const w = this.window();
    return this.rcvShift ? w >> this.rcvShift : Math.min(w, 0xffff);
  }

  private ackNow(): void {
    this.ackDue = false;
    this.emit(this.sndNxt, TCP_ACK);
  }

  /** The host socket drained: the guest may send again. */
  private windowUpdate(): void {
    if (this.state === 'established') this.ackNow();
  }

  private emit(
    seq: number,
    flags: number,
    data?: Buffer,
    start = 0,
    end = 0,
    syn?: { mss: number; wscale?: number },
  ): void {
    this.host.emit(
      tcpFrame(
        this.host.link,
        this.ends.remoteIp,
        this.host.guestIp,
        {
          // A SYN's window is never scaled.
          srcPort: this.ends.remotePort,
          dstPort: this.ends.guestPort,
          seq,
          ack: flags & TCP_ACK ? this.rcvNxt : 0,
          flags,
          window: syn ? Math.min(this.window(), 0xffff) : this.windowField(),
          mss: syn?.mss,
          wscale: syn?.wscale,
        },
        data,
        start,
        end,
      ),
    );
  }

  private fromHost(d: Buffer): void {
    this.sendBuf.push(d);
    this.bytesIn += d.length;
    if (this.sendBuf.length >= SEND_BUF) this.pause();
    this.pump();
  }

  /** Sends what the guest's window allows, and our FIN once the host's data is all out. */
  pump(): void {
    if (this.state !== 'established') return;
    let sent = false;
    for (;;) {
      const off = seqDiff(this.sndNxt, this.sndUna);
      const unsent = this.sendBuf.length - off;
      if (unsent <= 0 || this.host.congested()) break;
      const room = this.sndWnd - off;
      if (room <= 0) {
        this.arm(); // a zero window: the timer probes it
        break;
      }
      const n = Math.min(unsent, room, this.mss);
      const data = this.sendBuf.slice(off, n);
      this.ackDue = false;
      this.emit(this.sndNxt, TCP_ACK | (n === unsent ? TCP_PSH : 0), data, 0, data.length);
      this.sndNxt = seqAdd(this.sndNxt, n);
      sent = true;
    }
    if (
      this.hostEnded &&
      !this.finSent &&
      seqDiff(this.sndNxt, this.sndUna) === this.sendBuf.length &&
      !this.host.congested()
    ) {
      this.finSent = true;
      this.emit(this.sndNxt, TCP_FIN | TCP_ACK);
      this.sndNxt = seqAdd(this.sndNxt, 1);
      sent = true;
    }
    if (sent) this.arm();
  }

  private arm(restart = false): void {
    if (this.timer && !restart) return;
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.onTimer(), this.rto);
    this.timer.unref();
  }

  private disarm(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
  }

  private onTimer(): void {
    this.timer = undefined;
    if (this.state === 'closed') return;
    if (++this.tries > MAX_TRIES) {
      this.abort();
      return;
    }
    this.rto = Math.min(this.rto * 2, RTO_MAX_MS);
    if (this.state === 'syn-sent' || this.state === 'syn-received') {
      this.sendSyn();
      return;
    }
    const inFlight = seqDiff(this.sndNxt, this.sndUna);
    if (inFlight === 0 && this.sendBuf.length > 0 && this.sndWnd === 0) {
      // A zero window: a probe below what it expects makes it tell us its window.
      this.emit(seqAdd(this.sndUna, -1), TCP_ACK);
      this.arm();
      return;
    }
    if (inFlight > 0) this.retransmit(true);
  }

  /** Sends again from the oldest unacknowledged byte: all of it (a timeout) or one segment (three duplicate ACKs). */
  private retransmit(all: boolean): void {
    if (all) {
      this.sndNxt = this.sndUna;
      if (this.finSent && this.sendBuf.length === 0) {
        this.emit(this.sndNxt, TCP_FIN | TCP_ACK);
        this.sndNxt = seqAdd(this.sndNxt, 1);
        this.arm(true);
        return;
      }
      this.finSent = false;
      this.pump();
      this.arm(true);
      return;
    }
    const n = Math.min(this.sendBuf.length, this.mss, seqDiff(this.sndNxt, this.sndUna));
    if (n > 0) {
      const data = this.sendBuf.slice(0, n);
      this.emit(this.sndUna, TCP_ACK, data, 0, n);
    }
  }

  private pause(): void {
    if (this.paused) return;
    this.paused = true;
    this.socket?.pause();
  }

  private resume(): void {
    if (!this.paused || this.sendBuf.length >= SEND_BUF / 2) return;
    this.paused = false;
    this.socket?.resume();
  }

  /** Answers a stray segment with a reset at `seq`. */
  private reset(seq: number): void {
    this.host.emit(
      tcpFrame(this.host.link, this.ends.remoteIp, this.host.guestIp, {
        srcPort: this.ends.remotePort,
        dstPort: this.ends.guestPort,
        seq,
        ack: 0,
        flags: TCP_RST,
        window: 0,
      }),
    );
  }

  /** Resets the guest's side and destroys the host socket (a refused connect, a policy change, a host error). */
  abort(): void {
    if (this.state === 'closed') return;
    if (this.state !== 'syn-sent') {
      this.host.emit(
        tcpFrame(this.host.link, this.ends.remoteIp, this.host.guestIp, {
          srcPort: this.ends.remotePort,
          dstPort: this.ends.guestPort,
          seq: this.sndNxt,
          ack: this.rcvNxt,
          flags: TCP_RST | TCP_ACK,
          window: 0,
        }),
      );
    }
    this.finish(false);
  }

  private finish(clean: boolean): void {
    if (this.state === 'closed') return;
    this.state = 'closed';
    this.disarm();
    if (clean) this.socket?.end();
    else this.socket?.destroy();
    this.host.closed(this);
  }

  /** The guest's side of the flow is still open (for a listing). */
  get open(): boolean {
    return this.state !== 'closed';
  }

  /** The guest acknowledged everything we sent (tests). */
  get idle(): boolean {
    return seqLe(this.sndNxt, this.sndUna) && this.sendBuf.length === 0;
  }
}

export const flowKey = (remoteIp: number, remotePort: number, guestPort: number) =>
  `${remoteIp}:${remotePort}:${guestPort}`;

/** A reset for a segment that belongs to no flow (RFC 793: seq from its ACK, else ack what it used). */
export function resetFor(host: Pick<FlowHost, 'link' | 'guestIp'>, remoteIp: number, t: Tcp): Buffer {
  const len = t.payload.length + (t.flags & TCP_SYN ? 1 : 0) + (t.flags & TCP_FIN ? 1 : 0);
  const withAck = !(t.flags & TCP_ACK);
  return tcpFrame(host.link, remoteIp, host.guestIp, {
    srcPort: t.dstPort,
    dstPort: t.srcPort,
    seq: withAck ? 0 : t.ack,
    ack: withAck ? seqAdd(t.seq, len) : 0,
    flags: TCP_RST | (withAck ? TCP_ACK : 0),
    window: 0,
  });
}
