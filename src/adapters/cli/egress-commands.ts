import { readFileSync } from 'node:fs';
import { Option, type Command } from 'commander';
import type { EgressEvent, EgressPolicy } from '../../domain/egress.js';
import type { EgressSecretBinding, EgressSecretSpec } from '../../domain/egress-secrets.js';
import type { SvcClient } from '../client/svc-client.js';
import { collect, print, whole } from './cli-kit.js';
import { bytes, table } from './format.js';

/** The policy `--egress-default`, `--allow` and `--deny` give (undefined when none is given). */
export function policyFromFlags(o: {
  egressDefault?: string;
  allow?: string[];
  deny?: string[];
  egressProxy?: string;
  egressProxyUser?: string;
  egressProxySecret?: string;
}): Partial<EgressPolicy> | undefined {
  if ((o.egressProxyUser || o.egressProxySecret) && !o.egressProxy)
    throw new Error('--egress-proxy-user and --egress-proxy-secret go with --egress-proxy HOST:PORT');
  if (!o.egressDefault && !o.allow?.length && !o.deny?.length && !o.egressProxy) return undefined;
  const proxy = o.egressProxy
    ? {
        proxy: {
          address: o.egressProxy,
          ...(o.egressProxyUser ? { username: o.egressProxyUser } : {}),
          ...(o.egressProxySecret ? { secret: o.egressProxySecret } : {}),
        },
      }
    : {};
  return {
    default: (o.egressDefault ?? 'allow') as EgressPolicy['default'],
    allow: o.allow ?? [],
    deny: o.deny ?? [],
    ...proxy,
  };
}

/** Adds `--egress-default`, `--allow` and `--deny` to a command that sets a policy. */
export function egressFlags(cmd: Command): Command {
  return cmd
    .addOption(new Option('--egress-default <mode>', 'what no rule names: allow or deny').choices(['allow', 'deny']))
    .option(
      '--allow <rule>',
      'egress rule to allow: a domain (*.github.com), an IP or CIDR[:port], host:PORT (repeatable)',
      collect,
      [],
    )
    .option('--deny <rule>', 'egress rule to deny, same forms (repeatable)', collect, [])
    .option('--egress-proxy <host:port>', 'tunnel allowed outbound TCP through this SOCKS5 proxy')
    .option('--egress-proxy-user <user>', "the proxy's username")
    .option('--egress-proxy-secret <secret>', "the host secret holding the proxy's password (svc secret set)");
}

/**
 * `--egress-secret SECRET=HOST[,HOST...][:ENV]` and `--egress-header SECRET=HOST[,HOST...]:HEADER`:
 * the bindings they give (docs/egress-secrets.md); a header one is `always`.
 */
export function secretsFromFlags(o: { egressSecret?: string[]; egressHeader?: string[] }): EgressSecretSpec[] {
  const placeholders = (o.egressSecret ?? []).map((v): EgressSecretSpec => {
    const m = /^([^=]+)=([^:]+)(?::([A-Za-z_][A-Za-z0-9_]*))?$/.exec(v);
    if (!m)
      throw new Error(
        `--egress-secret ${v}: use SECRET=HOST[,HOST...][:ENV], such as openai=api.openai.com:OPENAI_API_KEY`,
      );
    return { secret: m[1], hosts: m[2].split(','), ...(m[3] ? { env: m[3] } : {}) };
  });
  const headers = (o.egressHeader ?? []).map((v): EgressSecretSpec => {
    const m = /^([^=]+)=([^:]+):([^:]+)$/.exec(v);
    if (!m)
      throw new Error(
        `--egress-header ${v}: use SECRET=HOST[,HOST...]:HEADER, such as gh=api.github.com:Authorization`,
      );
    return { secret: m[1], hosts: m[2].split(','), header: m[3], always: true };
  });
  return [...placeholders, ...headers];
}

/** Adds `--egress-secret` and `--egress-header` to a command that binds egress secrets. */
export function egressSecretFlag(cmd: Command): Command {
  return cmd
    .option(
      '--egress-secret <secret=host[,host][:ENV]>',
      'put a host secret into requests to these hosts only; the guest sees a placeholder in $ENV (repeatable)',
      collect,
      [],
    )
    .option(
      '--egress-header <secret=host[,host]:HEADER>',
      'set HEADER to a host secret on every request to these hosts; the guest sees nothing (repeatable)',
      collect,
      [],
    );
}

function showSecrets(list: EgressSecretBinding[]): string {
  if (!list.length) return 'no egress secrets';
  return table(
    list.map((b) => [
      b.secret,
      b.hosts.join(','),
      b.always ? '-' : (b.env ?? b.secret.toUpperCase().replace(/[^A-Z0-9_]/g, '_')),
      b.always ? `${b.header} (always)` : (b.header ?? 'any'),
      b.placeholder,
    ]),
    ['SECRET', 'HOSTS', 'ENV', 'HEADER', 'PLACEHOLDER'],
  );
}

function showPolicy(p: EgressPolicy): string {
  const proxy = p.proxy
    ? [
        `proxy   socks5://${p.proxy.username ? `${p.proxy.username}@` : ''}${p.proxy.address}${p.proxy.secret ? ` (password: secret ${p.proxy.secret})` : ''}`,
      ]
    : [];
  return [
    `default ${p.default}`,
    ...p.allow.map((r) => `allow   ${r}`),
    ...p.deny.map((r) => `deny    ${r}`),
    ...proxy,
  ].join('\n');
}

function where(e: EgressEvent): string {
  const target = e.addr === 'host' ? 'host.svc.internal' : e.addr;
  const at = target ? `${target}${e.port ? `:${e.port}` : ''}` : '';
  if (!at) return e.name ?? '';
  return e.name && e.name !== target ? `${e.name} (${at})` : at;
}

function logLine(e: EgressEvent): string[] {
  const traffic =
    e.event === 'close' ? `${bytes(e.bytes_out ?? 0)} out, ${bytes(e.bytes_in ?? 0)} in` : (e.answers?.join(',') ?? '');
  return [e.t, e.event, e.decision, e.proto, where(e), e.rule, `${traffic}${e.repeats ? ` (+${e.repeats} more)` : ''}`];
}

/** `svc egress show|set|log`: a VM's egress policy and what it decided (docs/network.md). */
export function egressCommands(program: Command, client: () => SvcClient): void {
  const eg = program.command('egress').description('what a VM may reach: its egress policy and log');
  eg.command('show')
    .alias('get')
    .argument('<name>')
    .option('--json')
    .description("a VM's egress policy: its mode, what it allows and denies, its proxy")
    .action(async (name: string, o) => {
      const p = await client().egress(name);
      print(o.json, p, () => showPolicy(p));
    });
  egressFlags(
    eg
      .command('set')
      .argument('<name>')
      .option('--file <policy.json>', 'the whole policy as JSON {default, allow, deny}')
      .option('--json'),
  )
    .description("replace a VM's egress policy, live (open connections it forbids are closed)")
    .action(async (name: string, o) => {
      const policy = o.file ? (JSON.parse(readFileSync(o.file, 'utf8')) as Partial<EgressPolicy>) : policyFromFlags(o);
      if (!policy) throw new Error('egress set: give --file, or --egress-default, --allow, --deny and --egress-proxy');
      const p = await client().setEgress(name, policy);
      print(o.json, p, () => showPolicy(p));
    });
  egressSecretFlag(
    eg
      .command('secrets')
      .argument('<name>')
      .option(
        '--set',
        'replace the bindings with the --egress-secret and --egress-header flags (none: remove them all)',
      )
      .option('--json'),
  )
    .description("a VM's egress secrets: which host secrets go to which hosts, and the placeholders its guest holds")
    .action(async (name: string, o) => {
      const list = o.set
        ? await client().setEgressSecrets(name, secretsFromFlags(o))
        : await client().egressSecrets(name);
      print(o.json, list, () => showSecrets(list));
    });
  eg.command('log')
    .argument('<name>')
    .option('-f, --follow', 'keep printing decisions as they happen')
    .option('--limit <n>', 'last N entries', whole('a whole number of entries'), 50)
    .option('--json', 'one JSON entry a line')
    .description("the VM's egress decisions: names asked, connections let out or refused, bytes each way")
    .action(async (name: string, o) => {
      const c = client();
      const out = (e: EgressEvent) => process.stdout.write(`${o.json ? JSON.stringify(e) : logLine(e).join('  ')}\n`);
      if (!o.follow) {
        const list = await c.egressLog(name, { limit: o.limit });
        if (o.json) list.forEach(out);
        else
          process.stdout.write(
            (list.length
              ? table(list.map(logLine), ['TIME', 'EVENT', 'DECISION', 'PROTO', 'WHAT', 'RULE', 'TRAFFIC'])
              : 'nothing logged yet') + '\n',
          );
        return;
      }
      const ac = new AbortController();
      process.once('SIGINT', () => ac.abort());
      for await (const e of c.followEgress(name, { limit: o.limit, signal: ac.signal })) out(e);
    });
}
