/** Layers point inward: domain <- ports <- app <- adapters <- composition root (src/bin, src/app/container.ts). */
const adapterOnly = '^(node_modules/(express|ws|ssh2|prom-client|node-pty|pino|tar-stream|yaml)/|(node:)?(child_process|net|http|https|dgram)$)';
module.exports = {
  forbidden: [
    { name: 'domain-is-pure', severity: 'error',
      from: { path: '^src/domain' },
      to: { pathNot: '^src/domain' , dependencyTypesNot: ['core'] } },
    { name: 'domain-no-io', severity: 'error',
      from: { path: '^src/domain' }, to: { dependencyTypes: ['core'], pathNot: '^(node:)?(util|buffer)$' } },
    { name: 'ports-see-only-domain', severity: 'error',
      from: { path: '^src/ports' }, to: { path: '^src/(app|adapters|bin)' } },
    { name: 'app-does-not-know-adapters', severity: 'error',
      from: { path: '^src/app', pathNot: '^src/main\\.ts$' }, to: { path: '^src/(adapters|bin)' } },
    { name: 'no-io-packages-outside-adapters', severity: 'error',
      from: { path: '^src/(domain|ports|app)', pathNot: '^src/main\\.ts$' },
      to: { path: adapterOnly } },
    { name: 'no-circular', severity: 'error', from: {}, to: { circular: true } },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    exclude: { path: '^dist' },
  },
};
