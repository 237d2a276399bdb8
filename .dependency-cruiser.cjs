/**
 * Layers point inward: domain <- ports <- app <- adapters <- composition roots (src/main.ts and
 * src/daemon-container.ts for svcd, src/agent-main.ts for svc-agent, src/bin/*). Folder rooms (docs/architecture.md):
 * `agent/` folders are svc-agent, the program in the guest; the daemon never imports them and they
 * import nothing of the daemon's but the shared logger, clock and queue. `*-kit` adapter folders are plumbing that several programs share
 * and import no other adapter folder. The two hypervisor adapters do not know each other.
 */
const adapterOnly =
  '^(node_modules/(express|ws|ssh2|prom-client|node-pty|pino|tar-stream|yaml)/|(node:)?(child_process|net|http|https|dgram|fs|fs/promises)$)';
module.exports = {
  forbidden: [
    {
      name: 'domain-is-pure',
      severity: 'error',
      from: { path: '^src/domain' },
      to: { pathNot: '^src/domain', dependencyTypesNot: ['core'] },
    },
    {
      name: 'domain-no-io',
      severity: 'error',
      from: { path: '^src/domain' },
      to: { dependencyTypes: ['core'], pathNot: '^(node:)?(util|buffer)$' },
    },
    {
      name: 'ports-see-only-domain',
      severity: 'error',
      from: { path: '^src/ports' },
      to: { path: '^src/(app|adapters|bin)' },
    },
    {
      name: 'app-does-not-know-adapters',
      severity: 'error',
      from: { path: '^src/app' },
      to: { path: '^src/(adapters|bin)' },
    },
    {
      name: 'no-io-packages-outside-adapters',
      severity: 'error',
      from: { path: '^src/(domain|ports|app)' },
      to: { path: adapterOnly },
    },
    {
      name: 'daemon-does-not-import-the-agent',
      severity: 'error',
      from: {
        path: '^src/',
        pathNot: '^src/((app|ports|adapters)/agent/|agent-main\\.ts$|bin/svc-agent\\.ts$|index\\.ts$)',
      },
      to: { path: '^src/((app|ports|adapters)/agent/|agent-main\\.ts$)' },
    },
    {
      name: 'agent-does-not-import-the-daemon',
      severity: 'error',
      from: { path: '^src/((app|ports|adapters)/agent/|agent-main\\.ts$)' },
      to: {
        path: '^src/',
        pathNot:
          '^src/(domain/|version\\.ts$|(app|ports|adapters)/agent/|adapters/[a-z-]+-kit/|ports/(logger|clock|terminal)\\.ts$|app/async-queue\\.ts$|adapters/log/)',
      },
    },
    {
      name: 'netd-is-its-own-program',
      severity: 'error',
      comment:
        'svc-netd (adapters/netd, bin/svc-netd.ts) imports the domain, the kits and the logger; the daemon sees only its protocol',
      from: { path: '^src/(adapters/netd/|bin/svc-netd\\.ts$)' },
      to: {
        path: '^src/',
        pathNot: '^src/(domain/|version\\.ts$|adapters/netd/|adapters/[a-z-]+-kit/|adapters/log/|ports/logger\\.ts$)',
      },
    },
    {
      name: 'the-daemon-sees-only-netd-protocol',
      severity: 'error',
      from: { path: '^src/', pathNot: '^src/(adapters/netd/|bin/svc-netd\\.ts$)' },
      to: { path: '^src/adapters/netd/', pathNot: '^src/adapters/netd/protocol\\.ts$' },
    },
    {
      name: 'kits-import-no-other-adapter',
      severity: 'error',
      from: { path: '^src/adapters/([a-z-]+-kit)/' },
      to: { path: '^src/adapters/', pathNot: '^src/adapters/$1/' },
    },
    {
      name: 'hypervisor-drivers-do-not-know-each-other',
      severity: 'error',
      comment:
        'a driver is one folder; what drivers share lives beside them (driver.ts, host-dirs.ts) or in adapters/images',
      from: { path: '^src/adapters/hypervisor/([a-z-]+)/' },
      to: { path: '^src/adapters/hypervisor/[a-z-]+/', pathNot: '^src/adapters/hypervisor/$1/' },
    },
    {
      name: 'adapter-folders-do-not-import-in-a-circle',
      severity: 'error',
      from: { path: '^src/adapters/http/' },
      to: { path: '^src/adapters/(agent|guest-link|hypervisor|store|ssh|cli|client)/' },
    },
    { name: 'no-circular', severity: 'error', from: {}, to: { circular: true } },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    exclude: { path: '^dist' },
  },
};
