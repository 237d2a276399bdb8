import { randomBytes } from 'node:crypto';
import type { Request, Response } from 'express';
import { AlreadyExistsError, InvalidArgumentError, NotFoundError, NotSupportedError } from '../../domain/errors.js';
import { specOf } from '../../domain/egress-secrets.js';
import type { EgressPolicy } from '../../domain/egress.js';
import type { Instance } from '../../domain/vm.js';
import type { RouteDef } from '../http-kit/route.js';
import type { SvcClient } from '../client/svc-client.js';
import { CODE_INTERPRETER_TEMPLATE, type CodeInterpreters, type CodeInterpreterSource } from './code-interpreter.js';
import { e2bRouter, page } from './e2b-route.js';
import { buildsOf, parseRef } from './template-tags.js';
import type { TeamSecrets } from './team-secrets.js';
import type { Volumes } from './volumes.js';
import { TPL, type RunBase, type TemplateBuilds } from './templates.js';
import { e2bNetworkOf, egressFromE2b, proxyFromE2b, publicTraffic, type E2bNetwork } from './network.js';
import {
  e2bRulesOf,
  headerRulesFromE2b,
  isRuleBinding,
  ruleSpecs,
  ruleValues,
  type RuleSecrets,
} from './rule-secrets.js';
import {
  DEFAULT_TIMEOUT_S,
  ENVD_VERSION,
  isSandbox,
  metaOf,
  onExpireOf,
  snapshotOf,
  snapshotTags,
  tagsFor,
  timeoutSeconds,
  type Sandboxes,
} from './sandboxes.js';

/**
 * E2B's control API (api.e2b.dev's shapes, the ones its SDK calls) under `/e2b`, translated onto
 * svc's VMs through the daemon's own API (docs/e2b.md). A sandbox is a VM named `e2b-<hex>`, its
 * E2B state in the VM's tags.
 */
export function e2bControlRoutes(
  client: SvcClient,
  boxes: Sandboxes,
  o: {
    poolTemplate: string;
    domain: () => string;
    rules: RuleSecrets;
    templates: TemplateBuilds;
    volumes: Volumes;
    secrets: TeamSecrets;
    codeInterpreters: CodeInterpreters;
  },
): RouteDef[] {
  const id = (req: Request) => String(req.params.id);
  const route = e2bRouter(boxes);
  const teamSecret = (name: string) => o.secrets.hostSecret(name);

  const sandbox = (vm: Instance) => ({
    sandboxID: vm.name,
    templateID: metaOf(vm).template,
    clientID: 'svc',
    envdVersion: ENVD_VERSION,
    envdAccessToken: boxes.accessToken(vm.name),
    trafficAccessToken: metaOf(vm).privateTraffic ? boxes.trafficToken(vm.name) : null,
    // The SDK's getHost(port) is `PORT-ID.` + this (sandbox-hosts.ts).
    domain: o.domain(),
  });
  const detail = (vm: Instance) => {
    const m = metaOf(vm);
    return {
      ...sandbox(vm),
      alias: m.template,
      startedAt: vm.created_at,
      endAt: boxes.endOf(vm).toISOString(),
      state: vm.status === 'running' ? 'running' : 'paused',
      cpuCount: vm.cpus,
      memoryMB: vm.memory_mb,
      diskSizeMB: vm.disk_gb * 1024,
      metadata: m.metadata,
      volumeMounts: o.volumes.mountedIn(vm),
      lifecycle: { onTimeout: m.onTimeout, autoResume: !!m.autoResume },
      ...e2bNetworkOf(vm.egress, m.privateTraffic, e2bRulesOf(vm.egress_secrets)),
    };
  };
  const sandboxes = async () => (await client.list()).filter(isSandbox);
  const snapshots = async () =>
    (await client.list()).map(snapshotOf).filter((x): x is NonNullable<typeof x> => x !== undefined);

  /**
   * A template id as svc's create: `base` the default image; a built template or a snapshot to
   * clone (a template's environment and working folder go with it); a VM to clone; the code
   * interpreter's template; else an image (whose entrypoint E2B does not run: a sandbox runs what
   * its template's start command started).
   */
  const source = async (template: string): Promise<RunBase & { codeInterpreter?: CodeInterpreterSource }> => {
    if (!template || template === 'base') return { create: {} };
    if (template === o.poolTemplate) return { create: { from_pool: true } };
    const all = await client.list();
    const clone = await o.templates.cloneOf(all, template);
    if (clone) return clone;
    if (all.some((vm) => vm.name === template)) return { create: { from: template } };
    // the code interpreter SDK's default: svc's server on the default image (code-interpreter.ts)
    if (template === CODE_INTERPRETER_TEMPLATE) {
      const ci = await o.codeInterpreters.source(all);
      return { create: ci.create, codeInterpreter: ci };
    }
    return { create: { image: template, entrypoint: false } };
  };

  const list = async (req: Request, res: Response, v2: boolean) => {
    const q = req.query as Record<string, string | string[] | undefined>;
    const states = ([] as string[])
      .concat(q.state ?? (v2 ? ['running', 'paused'] : ['running']))
      .flatMap((s) => s.split(','));
    const want = new URLSearchParams(typeof q.metadata === 'string' ? q.metadata : '');
    const all = (await sandboxes())
      .map(detail)
      .filter((s) => states.includes(s.state))
      .filter((s) => [...want].every(([k, v]) => s.metadata[k] === v))
      .sort((a, b) => a.startedAt.localeCompare(b.startedAt) || a.sandboxID.localeCompare(b.sandboxID));
    page(req, res, all);
  };

  const connect = async (req: Request, res: Response) => {
    const body = (req.body ?? {}) as { timeout?: unknown };
    const timeout = body.timeout === undefined ? undefined : timeoutSeconds(body.timeout);
    const { vm, woken } = await boxes.wake(await boxes.get(id(req)), timeout);
    res.status(woken ? 201 : 200).json(sandbox(vm));
  };

  return [
    route('post', '/v2/sandboxes', async (req, res) => {
      const b = (req.body ?? {}) as Record<string, unknown>;
      const template = b.templateID === undefined ? 'base' : String(b.templateID);
      const timeout = timeoutSeconds(b.timeout);
      if (b.mcp) throw new NotSupportedError('the MCP gateway in a sandbox is not supported by svc');
      const onTimeout = b.autoPause === true ? 'pause' : 'kill';
      const autoResume = (b.autoResume as { enabled?: unknown } | undefined)?.enabled === true;
      if (autoResume && onTimeout !== 'pause')
        throw new InvalidArgumentError('autoResume needs a sandbox that pauses at its timeout (autoPause)');
      if (autoResume && b.autoPauseMemory === false)
        throw new InvalidArgumentError('autoResume needs a pause that keeps the memory (autoPauseMemory)');
      const from = await source(template);
      // A clone of a suspended template (a built template, the pool's) is given them as it wakes.
      const mounts = await o.volumes.mountsOf(b.volumeMounts);
      const tags = tagsFor({
        autoResume,
        template,
        workdir: from.defaults?.workdir,
        endAt: new Date(Date.now() + timeout * 1000),
        onTimeout,
        metadata: (b.metadata ?? {}) as Record<string, string>,
        envs: { ...from.defaults?.envs, ...((b.envVars ?? {}) as Record<string, string>) },
        privateTraffic: !publicTraffic(b.network),
      });
      const name = `e2b-${randomBytes(6).toString('hex')}`;
      const network = b.network as E2bNetwork | undefined;
      const policy = egressFromE2b(network, b.allow_internet_access);
      const { rules, values } = ruleValues(headerRulesFromE2b(network?.rules), name);
      const proxy = proxyFromE2b(network?.egressProxy);
      // Its end is svc's lifetime of the VM, set with the create (a timeout of 0 ends it at once).
      const life = { ttl: Math.max(1, timeout), on_expire: onExpireOf({ onTimeout }) };
      const vm = await o.rules.bound(name, valuesOf(values, proxy), async (made) => {
        const specs = await ruleSpecs(rules, made, teamSecret);
        const secrets = specs.length ? { egress_secrets: specs } : {};
        const egress = policy ? { egress: withProxy(policy, proxy, made[values.length]) } : {};
        return client.create(
          {
            name,
            tags,
            persistent: true,
            ...from.create,
            ...(mounts.length ? { mounts } : {}),
            ...egress,
            ...secrets,
            ...life,
          } as never,
          {
            wait: 'agent',
          },
        );
      });
      // Values left by a daemon that stopped before it could remove them go too.
      if (rules.length || proxy?.password !== undefined) void o.rules.sweep().catch(() => undefined);
      if (from.codeInterpreter)
        await o.codeInterpreters.start(vm, from.codeInterpreter.cloned).catch(async (err: unknown) => {
          // a create that failed leaves nothing behind
          await client.delete(vm.name).catch(() => undefined);
          throw err;
        });
      res.status(201).json(sandbox(vm));
    }),
    route('get', '/v2/sandboxes', (req, res) => list(req, res, true)),
    route('get', '/sandboxes', (req, res) => list(req, res, false)),
    route('get', '/sandboxes/:id', async (req, res) => void res.json(detail(await boxes.get(id(req))))),
    route('delete', '/sandboxes/:id', async (req, res) => {
      await boxes.get(id(req));
      // Its rules' values go with it: main.ts sweeps them on every VM's removal.
      await client.delete(id(req));
      res.status(204).end();
    }),
    route('put', '/sandboxes/:id/network', async (req, res) => {
      // E2B replaces the whole configuration: what is left out is cleared (everything allowed).
      const vm = await boxes.get(id(req));
      const b = (req.body ?? {}) as E2bNetwork & { allow_internet_access?: unknown };
      const { allow_internet_access, ...network } = b;
      const policy = egressFromE2b(network, allow_internet_access)!;
      const { rules, values } = ruleValues(headerRulesFromE2b(network.rules), vm.name);
      const proxy = proxyFromE2b(network.egressProxy);
      const had = (vm.egress_secrets ?? []).filter((s) => !isRuleBinding(s));
      await o.rules.bound(vm.name, valuesOf(values, proxy), async (made) => {
        const specs = await ruleSpecs(rules, made, teamSecret);
        await client.setEgress(vm.name, withProxy(policy, proxy, made[values.length]));
        // The rules replace the sandbox's rules; egress secrets bound by svc's own API stay.
        if (specs.length || had.length !== (vm.egress_secrets ?? []).length)
          await client.setEgressSecrets(vm.name, [...had.map(specOf), ...specs]);
      });
      // The replaced rules' values (and proxy password) go.
      void o.rules.sweep().catch(() => undefined);
      res.status(204).end();
    }),
    route('post', '/sandboxes/:id/timeout', async (req, res) => {
      const vm = await boxes.get(id(req));
      await boxes.arm(vm, new Date(Date.now() + timeoutSeconds((req.body as { timeout?: unknown })?.timeout) * 1000));
      res.status(204).end();
    }),
    route('post', '/sandboxes/:id/refreshes', async (req, res) => {
      const vm = await boxes.get(id(req));
      const d = (req.body as { duration?: unknown })?.duration;
      await boxes.arm(vm, new Date(Date.now() + timeoutSeconds(d ?? 60) * 1000));
      res.status(204).end();
    }),
    route('post', '/sandboxes/:id/pause', async (req, res) => {
      const vm = await boxes.get(id(req));
      if (vm.status !== 'running') {
        res.status(409).json({ code: 409, message: `sandbox ${vm.name} is already paused` });
        return;
      }
      await client.suspend(vm.name);
      res.status(204).end();
    }),
    route('post', '/v2/sandboxes/:id/connect', connect),
    route('post', '/sandboxes/:id/resume', connect),
    route('post', '/sandboxes/:id/connect', connect),
    route('get', '/sandboxes/:id/metrics', async (req, res) => {
      const vm = await boxes.get(id(req));
      if (vm.status !== 'running') return void res.json([]);
      const s = await client.stats(vm.name);
      const memUsed = s.mem_total_bytes - s.mem_available_bytes;
      res.json([
        {
          timestamp: new Date().toISOString(),
          timestampUnix: Math.floor(Date.now() / 1000),
          cpuCount: s.cpus,
          cpuUsedPct: Math.min(100, Math.round((s.load1 / Math.max(1, s.cpus)) * 10000) / 100),
          memUsed,
          memTotal: s.mem_total_bytes,
          memCache: 0,
          diskUsed: (s.disk_total_bytes ?? 0) - (s.disk_free_bytes ?? 0),
          diskTotal: s.disk_total_bytes ?? 0,
        },
      ]);
    }),
    route('post', '/sandboxes/:id/fork', async (req, res) => {
      // svc's fork of a running VM, or clones of a paused (suspended) one; all of them or none.
      const vm = await boxes.get(id(req));
      const b = (req.body ?? {}) as { timeout?: unknown; count?: unknown };
      const count = b.count === undefined ? 1 : b.count;
      if (typeof count !== 'number' || !Number.isInteger(count) || count < 1 || count > 100)
        throw new InvalidArgumentError(`count must be an integer from 1 to 100, got ${JSON.stringify(b.count)}`);
      const timeout = b.timeout === undefined ? DEFAULT_TIMEOUT_S : timeoutSeconds(b.timeout);
      const names = Array.from({ length: count }, () => `e2b-${randomBytes(6).toString('hex')}`);
      const tags = tagsFor({ ...metaOf(vm), endAt: new Date(Date.now() + timeout * 1000) });
      const made =
        vm.status === 'suspended'
          ? await Promise.all(names.map((name) => client.clone(vm.name, { name, tags, persistent: true })))
          : (await client.fork(vm.name, { names, tags, persistent: true }, { wait: 'agent' })).vms;
      for (const f of made) await boxes.arm(f, new Date(Date.now() + timeout * 1000));
      res.status(201).json(made.map((f) => ({ sandbox: sandbox(f) })));
    }),
    route('post', '/sandboxes/:id/snapshots', async (req, res) => {
      // A fork of the sandbox (a clone when it is paused), suspended: a template its creates clone.
      const vm = await boxes.get(id(req));
      const raw = (req.body as { name?: unknown } | undefined)?.name;
      const name = raw === undefined || raw === null || raw === '' ? undefined : String(raw);
      if (name !== undefined && !/^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/.test(name))
        throw new InvalidArgumentError(`snapshot name ${JSON.stringify(name)}: letters, digits, . _ - (1 to 128)`);
      if (name !== undefined && (await snapshots()).some((x) => x.names.includes(name)))
        throw new AlreadyExistsError(`a snapshot named ${name} exists`);
      const snap = `e2b-snap-${randomBytes(6).toString('hex')}`;
      const tags = snapshotTags(vm.name, name);
      if (vm.status === 'suspended') await client.clone(vm.name, { name: snap, tags, persistent: true });
      else await client.fork(vm.name, { names: [snap], tags, persistent: true }, { wait: 'agent' });
      await client.suspend(snap).catch(async (err: unknown) => {
        await client.delete(snap).catch(() => undefined);
        throw err;
      });
      res.status(201).json({ snapshotID: snap, names: name ? [name] : [] });
    }),
    route('get', '/snapshots', async (req, res) => {
      const q = req.query as Record<string, string | undefined>;
      const all = (await snapshots())
        .filter((x) => !q.sandboxID || x.sandboxID === q.sandboxID)
        .filter((x) => !q.name || x.names.includes(q.name))
        .sort((a, b) => a.snapshotID.localeCompare(b.snapshotID));
      page(
        req,
        res,
        all.map((x) => ({ snapshotID: x.snapshotID, names: x.names })),
      );
    }),
    route('delete', '/templates/:id', async (req, res) => {
      // Snapshots and built templates (every build kept of the name); svc's own images and VMs are
      // not deleted this way.
      const all = await client.list();
      const built = buildsOf(all, parseRef(id(req)).name)[0]?.tags[TPL.id];
      const doomed = built
        ? all.filter((vm) => vm.tags[TPL.id] === built).map((vm) => vm.name)
        : all
            .map(snapshotOf)
            .filter((x) => x && (x.snapshotID === id(req) || x.names.includes(id(req))))
            .map((x) => x!.snapshotID);
      if (!doomed.length)
        throw new NotFoundError(`template ${id(req)} not found (only snapshots and built templates are deleted here)`);
      for (const vm of doomed) {
        await client.delete(vm);
        await o.templates.forget(vm);
      }
      if (built) await o.templates.tags.forget(built);
      res.status(204).end();
    }),
  ];
}

type E2bProxy = ReturnType<typeof proxyFromE2b>;

/** The values a create or network update keeps as secrets: its rules' plain headers, then the proxy's password. */
const valuesOf = (values: string[], proxy: E2bProxy): string[] => [
  ...values,
  ...(proxy?.password !== undefined ? [proxy.password] : []),
];

/** The policy with E2B's proxy in it, its password in the secret made for it (none: no password). */
const withProxy = (policy: EgressPolicy, proxy: E2bProxy, secret: string | undefined): EgressPolicy =>
  proxy ? { ...policy, proxy: { ...proxy.proxy, ...(secret ? { secret } : {}) } } : policy;
