import { join } from 'node:path';
import type { SvcClient } from '../client/svc-client.js';
import type { AuthThrottle } from '../http-kit/auth.js';
import type { RouteDef } from '../http-kit/route.js';
import type { Logger } from '../../ports/logger.js';
import { CodeInterpreters } from './code-interpreter.js';
import { e2bControlRoutes } from './control-routes.js';
import { e2bEnvdRoutes } from './envd-routes.js';
import { RuleSecrets } from './rule-secrets.js';
import { defaultSandboxDomain, SandboxHosts } from './sandbox-hosts.js';
import { Sandboxes } from './sandboxes.js';
import { e2bSecretRoutes } from './secret-routes.js';
import { TeamSecrets } from './team-secrets.js';
import { e2bTemplateRoutes } from './template-routes.js';
import { TemplateBuilds } from './templates.js';
import { e2bVolumeRoutes } from './volume-routes.js';
import { Volumes } from './volumes.js';

/** What E2B's API needs of the daemon's config (docs/config.md). */
export interface E2bSettings {
  apiToken: string;
  dataDir: string;
  volumesDir: string;
  /** E2B's sandbox domain; empty: `localhost` and the API's port, once it is known. */
  domain: string;
  poolTemplate: string;
}

/**
 * E2B's API on svc (docs/e2b.md), put together: its sandboxes, template builds, volumes and
 * secrets over the daemon's own API (`client`), the routes that serve them, and the sandbox URLs
 * served by Host on the daemon's listeners. The daemon builds one and calls its hooks.
 */
export class E2bApi {
  readonly boxes: Sandboxes;
  /** Sandbox URLs (`getHost`), served on the daemon's listeners by Host. */
  readonly hosts: SandboxHosts;
  private readonly rules: RuleSecrets;
  private readonly templates: TemplateBuilds;
  private readonly volumes: Volumes;
  private readonly secrets: TeamSecrets;
  private readonly codeInterpreters: CodeInterpreters;
  private domain: string;

  constructor(
    private readonly client: SvcClient,
    private readonly o: E2bSettings,
    throttle: AuthThrottle,
    log?: Logger,
  ) {
    this.boxes = new Sandboxes(client, o.apiToken, throttle);
    // the values of header rules, removed once no VM binds them (a sandbox deleted any way)
    this.rules = new RuleSecrets(client);
    // uploads and templates' defaults and tags under <data_dir>/e2b
    this.templates = new TemplateBuilds(client, join(o.dataDir, 'e2b'));
    this.volumes = new Volumes(o.volumesDir);
    this.secrets = new TeamSecrets(client, join(o.dataDir, 'e2b', 'secrets.json'));
    this.hosts = new SandboxHosts(client, this.boxes, o.domain || 'localhost');
    this.codeInterpreters = new CodeInterpreters(client, log);
    this.domain = o.domain;
  }

  /** Reads what is kept (the volumes' names, which sandboxes' details show; the template builds). */
  async open(): Promise<void> {
    await this.volumes.list();
    await this.templates.open();
  }

  routes(): RouteDef[] {
    const { client, boxes } = this;
    return [
      ...e2bEnvdRoutes(client, boxes),
      // before the control routes: `/templates/tags` is not a template named `tags`
      ...e2bTemplateRoutes(client, boxes, this.templates),
      ...e2bVolumeRoutes(client, boxes, this.volumes),
      ...e2bSecretRoutes(client, boxes, this.secrets),
      ...e2bControlRoutes(client, boxes, {
        poolTemplate: this.o.poolTemplate,
        domain: () => this.domain,
        rules: this.rules,
        templates: this.templates,
        volumes: this.volumes,
        secrets: this.secrets,
        codeInterpreters: this.codeInterpreters,
      }),
    ];
  }

  /** The daemon listens: with no domain configured, sandbox URLs are `localhost` and this port. */
  listening(tcpPort: number | undefined): void {
    this.domain ||= defaultSandboxDomain(tcpPort);
  }

  /** A VM was removed: header rules' values no VM binds any more go. */
  vmRemoved(): void {
    void this.rules.sweep().catch(() => undefined);
  }

  /** At the daemon's start: what template builds a stop cut off left (TemplateBuilds.sweep). */
  sweep(o: { vms: boolean }): Promise<string[]> {
    return this.templates.sweep(o);
  }
}
