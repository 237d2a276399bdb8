import {
  EgressRules,
  HOST_NAME,
  type EgressDecision,
  type EgressEvent,
  type EgressPolicy,
} from '../../domain/egress.js';
import { parseIp, type IpAddr } from '../../domain/ip.js';
import { TYPE_A, answerWith, readAnswers, readQuestion, blocked } from './dns-message.js';
import type { DnsUpstream, HostAddresses } from './dns-upstream.js';
import { ipToString } from './packets.js';

/** How long an address stays tied to a name it was resolved from, at least (programs cache answers). */
const NAME_HOLD_MS = 60 * 60_000;
/** Names kept per address, and addresses tracked, per VM (a guest resolving without end forgets the oldest). */
const MAX_NAMES = 16;
const MAX_ADDRESSES = 20_000;
/** The same refusal (or the same name asked) more than FOLD_AFTER times within FOLD_MS is counted, not logged again. */
const FOLD_MS = 1000;
const FOLD_AFTER = 5;
/** Names a deny rule gives are resolved again this often, so their addresses stay refused. */
const DENIED_REFRESH_MS = 5 * 60_000;

export type EgressEntry = Omit<EgressEvent, 't' | 'vm'>;

/**
 * One VM's egress policy at work: which names it may resolve, which addresses it may reach and
 * why, and what it learned from its DNS answers to decide that (an address is reached "by name"
 * only if the network's resolver gave it for an allowed name). Every decision is logged through
 * `log`, refusals folded when they repeat.
 */
export class EgressGuard {
  private rules: EgressRules;
  /** address -> name -> until when it holds */
  private names = new Map<string, Map<string, number>>();
  /** Addresses the deny rules' names resolve to (looked up by the guard itself). */
  private denied = new Map<string, Set<string>>();
  private deniedTimer: NodeJS.Timeout | undefined;
  private folds = new Map<string, { at: number; seen: number; repeats: number }>();

  constructor(
    policy: EgressPolicy,
    private readonly upstream: DnsUpstream,
    private readonly hostAddresses: HostAddresses,
    private readonly log: (e: EgressEntry) => void,
  ) {
    this.rules = new EgressRules(policy);
    this.refreshDenied();
  }

  get policy(): EgressPolicy {
    return this.rules.policy;
  }

  setPolicy(policy: EgressPolicy): void {
    this.rules = new EgressRules(policy);
    this.denied.clear();
    this.refreshDenied();
  }

  close(): void {
    clearTimeout(this.deniedTimer);
  }

  private refreshDenied(): void {
    clearTimeout(this.deniedTimer);
    const names = this.rules.deniedNames();
    if (!names.length) return;
    for (const name of names) {
      void this.lookup(name).then((addrs) => {
        for (const a of addrs) {
          const set = this.denied.get(a) ?? new Set<string>();
          set.add(name);
          this.denied.set(a, set);
        }
      });
    }
    this.deniedTimer = setTimeout(() => this.refreshDenied(), DENIED_REFRESH_MS).unref();
  }

  /** The IPv4 addresses the host's resolvers give for `name` (none when they fail). */
  private async lookup(name: string): Promise<string[]> {
    const q = Buffer.alloc(12);
    q.writeUInt16BE(Math.floor(Math.random() * 0xffff), 0);
    q.writeUInt16BE(0x0100, 2);
    q.writeUInt16BE(1, 4);
    const labels = name.split('.').map((l) => Buffer.concat([Buffer.from([l.length]), Buffer.from(l, 'latin1')]));
    const msg = Buffer.concat([q, ...labels, Buffer.from([0, 0, TYPE_A, 0, 1])]);
    try {
      return readAnswers(await this.upstream.query(msg)).a;
    } catch {
      return [];
    }
  }

  /** Names the address was resolved from (for the guest, or for a deny rule), unexpired. */
  namesOf(addr: string): string[] {
    const out = new Set<string>(this.denied.get(addr) ?? []);
    const held = this.names.get(addr);
    if (held) {
      const now = Date.now();
      for (const [n, until] of held) if (until > now) out.add(n);
    }
    return [...out];
  }

  private learn(name: string, addrs: string[], ttlSec: number): void {
    const until = Date.now() + Math.max(NAME_HOLD_MS, ttlSec * 1000);
    for (const a of addrs) {
      let held = this.names.get(a);
      if (!held) {
        if (this.names.size >= MAX_ADDRESSES) this.names.delete(this.names.keys().next().value!);
        held = new Map();
        this.names.set(a, held);
      }
      held.delete(name);
      held.set(name, until);
      if (held.size > MAX_NAMES) held.delete(held.keys().next().value!);
    }
  }

  /**
   * Answers a guest's DNS query: the host's name here, a refused name with NXDOMAIN, an allowed one
   * from the host's resolvers (what it answered is remembered for the connections that follow).
   * Resolves undefined when there is nothing to answer (not a query, no resolver answered).
   */
  async dns(msg: Buffer, tcp: boolean, hostIp: number): Promise<Buffer | undefined> {
    let q;
    try {
      q = readQuestion(msg);
    } catch {
      return undefined;
    }
    const d = this.rules.resolve(q.name);
    if (d.rule === HOST_NAME) {
      this.fold({
        event: 'dns',
        proto: 'dns',
        name: q.name,
        decision: 'allow',
        rule: d.rule,
        answers: [ipToString(hostIp)],
      });
      return answerWith(q, q.type === TYPE_A ? [hostIp] : [], 60);
    }
    if (q.name.endsWith('.svc.internal') || q.name === 'svc.internal') {
      this.fold({ event: 'dns', proto: 'dns', name: q.name, decision: 'deny', rule: 'svc.internal' });
      return blocked(q, 'no such name in svc.internal');
    }
    if (!d.allow) {
      this.fold({ event: 'dns', proto: 'dns', name: q.name, decision: 'deny', rule: d.rule });
      return blocked(q, `refused by the VM's egress policy (${d.rule})`);
    }
    let answer: Buffer;
    try {
      answer = await this.upstream.query(msg, tcp);
    } catch (err) {
      this.fold({
        event: 'dns',
        proto: 'dns',
        name: q.name,
        decision: 'allow',
        rule: d.rule,
        error: (err as Error).message,
      });
      return undefined;
    }
    let answers: string[] = [];
    try {
      const a = readAnswers(answer);
      answers = a.a;
      this.learn(q.name, a.a, a.ttl);
    } catch {
      // an answer we cannot read teaches nothing; the guest gets it as it came
    }
    this.fold({
      event: 'dns',
      proto: 'dns',
      name: q.name,
      decision: 'allow',
      rule: d.rule,
      answers: answers.slice(0, 8),
    });
    return answer;
  }

  /** A connection or UDP flow to `ip:port` beyond the guest's network. */
  connect(ip: number, port: number, proto: 'tcp' | 'udp'): EgressDecision & { names: string[] } {
    const addr = ipToString(ip);
    const names = this.namesOf(addr);
    const d = this.rules.connect({ ip: parseIp(addr)!, port, proto, names }, (a: IpAddr) => this.hostAddresses.has(a));
    return { ...d, names };
  }

  hostPort(port: number): EgressDecision {
    return this.rules.hostPort(port);
  }

  /** The name a connection showed (SNI, Host), checked against the rules after the address let it through. */
  shown(name: string, port: number, earlier: EgressDecision): EgressDecision {
    return this.rules.shown(name, port, earlier);
  }

  /**
   * Logs `e`. A `deny` or `dns` entry seen more than FOLD_AFTER times within a second is counted
   * instead, and the count rides on the next one logged (a flood costs a line a second).
   */
  fold(e: EgressEntry): void {
    if (e.event === 'open' || e.event === 'close') {
      this.log(e);
      return;
    }
    const key = `${e.event}|${e.proto}|${e.addr}|${e.port}|${e.name}|${e.rule}|${e.decision}|${e.secret ?? ''}`;
    const now = Date.now();
    const f = this.folds.get(key);
    if (f && now - f.at < FOLD_MS) {
      if (++f.seen > FOLD_AFTER) {
        f.repeats++;
        return;
      }
      this.log(e);
      return;
    }
    if (this.folds.size > 1000) this.folds.clear();
    this.folds.set(key, { at: now, seen: 1, repeats: 0 });
    this.log(f?.repeats ? { ...e, repeats: f.repeats } : e);
  }
}
