import { expect } from 'chai';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ConfigError, buildConfig } from '../../../src/app/config.js';
import { configPath, loadConfig } from '../../../src/adapters/config/yaml-config-file.js';
import { tempDir } from '../../helpers/daemon.js';
import { DRIVER_SECTIONS } from '../../../src/adapters/hypervisor/drivers.js';
import { clusterSettings } from '../../../src/app/cluster-config.js';
import { CLUSTER_SECTION } from '../../../src/adapters/cluster/cluster-section.js';

const build = (raw: unknown, env: NodeJS.ProcessEnv = {}, home?: string) =>
  buildConfig(raw, env, home, [...DRIVER_SECTIONS, CLUSTER_SECTION]);

describe('app/config', () => {
  it('applies the documented defaults', () => {
    const c = build({}, {}, '/home/u');
    expect(c.data_dir).to.equal('/home/u/.svc');
    expect(c.socket).to.equal('/home/u/.svc/svc.sock');
    expect(c.api).to.equal('127.0.0.1:7474');
    expect(c.hypervisor).to.equal('qemu');
    expect(c.ready_timeout_ms).to.equal(120_000);
    expect(c.create_buffer_ms).to.equal(60_000);
    expect([c.cpus, c.memory_mb, c.disk_gb]).to.deep.equal([1, 512, 4]);
    expect(c.sandbox_metrics_enabled).to.equal(true);
    expect(c.sandbox_metrics_interval_ms).to.equal(15_000);
    expect(c.sandbox_metrics_points).to.equal(5760);
    expect(c.max_vms).to.equal(0);
    expect(c.warm_pool).to.deep.equal({ template: '', size: 0, running: false, refill_delay: 2000 });
    expect(build({ warm_pool: { template: 't', size: 1, refill_delay: '250ms' } }, {}).warm_pool.refill_delay).to.equal(
      250,
    );
    expect(build({}, { SVC_WARM_POOL_REFILL_DELAY: '0s' }).warm_pool.refill_delay).to.equal(0);
  });

  it('takes auth_token as an alias of api_token, but not both', () => {
    expect(build({ auth_token: 't' }, {}).api_token).to.equal('t');
    expect(() => build({ auth_token: 't', api_token: 'u' }, {})).to.throw(ConfigError, /given twice/);
  });

  it('takes the default egress policy as a mapping, from the environment too, in its normal form', () => {
    expect(build({}, {}).egress).to.deep.equal({ default: 'allow', allow: [], deny: [] });
    expect(build({ egress: { default: 'deny', allow: ['PyPI.org', 'host:5432'] } }, {}).egress).to.deep.equal({
      default: 'deny',
      allow: ['pypi.org', 'host:5432'],
      deny: [],
    });
    expect(
      build({}, { SVC_EGRESS_DEFAULT: 'deny', SVC_EGRESS_ALLOW: '*.github.com, 10.0.0.0/8:22' }).egress,
    ).to.deep.equal({ default: 'deny', allow: ['*.github.com', '10.0.0.0/8:22'], deny: [] });
    expect(build({ guest_dns: ['10.0.0.53', '127.0.0.1:5353', '[::1]:53'] }, {}).guest_dns).to.have.length(3);
    expect(build({}, {}).sections.qemu.net).to.equal('netd');
  });

  it("reads a driver's section from its mapping, its old flat keys and the environment, with its defaults", () => {
    expect(build({}, {}).sections.qemu).to.deep.equal({
      binary: 'qemu-system-x86_64',
      user: 'nobody',
      accel: 'auto',
      clone_spares: true,
      clone_spares_warm: true,
      mount_driver: '9p',
      agent_transport: 'auto',
      net: 'netd',
      ram_images: true,
      ram_image_staging: '/dev/shm',
      max_disk_layers: 8,
      max_vm_cpus: 0,
    });
    expect(build({ qemu: { binary: '/opt/qemu', accel: 'tcg' } }, {}).sections.qemu).to.include({
      binary: '/opt/qemu',
      accel: 'tcg',
    });
    expect(build({ qemu_binary: '/opt/q', clone_spares: false }, {}).sections.qemu, 'the old flat keys').to.include({
      binary: '/opt/q',
      clone_spares: false,
    });
    expect(build({}, { SVC_QEMU_RAM_IMAGES: 'false', SVC_ACCEL: 'kvm' }).sections.qemu).to.include({
      ram_images: false,
      accel: 'kvm',
    });
    expect(build({ hypervisor: 'fake', fake: { boot_delay: '5ms' } }, {}).sections.fake).to.deep.equal({
      boot_delay: 5,
      agent: false,
    });
  });

  it('lets SVC_<KEY> env override file values', () => {
    const c = build(
      { cpus: 2, api_token: 'file', hypervisor: 'fake', test_mode: true },
      { SVC_CPUS: '4', SVC_API_TOKEN: 'env', SVC_FAKE_AGENT: 'true' },
    );
    expect(c.cpus).to.equal(4);
    expect(c.api_token).to.equal('env');
    expect(c.sections.fake.agent).to.equal(true);
  });

  const bad: [string, Record<string, unknown>, RegExp][] = [
    ['unknown key', { cpu: 2 }, /config key "cpu": unknown key/],
    ['bad duration', { ready_timeout: 'soon' }, /config key "ready_timeout": must be a duration/],
    ['wrong type', { cpus: 'two' }, /config key "cpus"/],
    ['bad enum', { log_level: 'loud' }, /config key "log_level": must be one of debug\|info/],
    ['bad api', { api: 'localhost' }, /config key "api": must be HOST:PORT/],
    ['public api without token', { api: '0.0.0.0:7474' }, /not a loopback address; set api_token/],
    [
      'fake_agent outside test mode',
      { hypervisor: 'fake', fake_agent: true },
      /config key "fake.agent": runs every guest command on this host.*test_mode: true/,
    ],
    [
      'a disk chain of one layer',
      { qemu: { max_disk_layers: 1 } },
      /"qemu.max_disk_layers": 1 is out of range.*2 to 64/,
    ],
    ['a disk chain of 65 layers', { qemu: { max_disk_layers: 65 } }, /"qemu.max_disk_layers": 65 is out of range/],
    [
      '65 vCPUs for one VM',
      { qemu: { max_vm_cpus: 65 } },
      /"qemu.max_vm_cpus": 65 is out of range; 0 \(this host's CPUs\) to 64/,
    ],
    ['fake_agent with qemu', { hypervisor: 'qemu', fake_agent: true, test_mode: true }, /needs hypervisor: fake/],
    [
      'a mount_dirs that is not a list',
      { mount_dirs: '/srv' },
      /config key "mount_dirs": must be a list of non-empty strings/,
    ],
    ['/ in mount_dirs', { mount_dirs: ['/srv', '/'] }, /config key "mount_dirs": "\/" would share the whole host/],
    [
      'e2b_volumes_dir inside data_dir',
      { data_dir: '/srv/svc', e2b_volumes_dir: '/srv/svc/volumes' },
      /config key "e2b_volumes_dir": sandboxes mount the volumes in it.*outside data_dir/,
    ],
    ['e2b_volumes_dir holding data_dir', { data_dir: '/srv/svc', e2b_volumes_dir: '/' }, /"e2b_volumes_dir"/],
    [
      'an allowed_origins entry that is not an origin',
      { allowed_origins: ['evil.example'] },
      /config key "allowed_origins": "evil.example" is not an origin/,
    ],
    [
      'a bad egress rule',
      { egress: { allow: ['pypi.org', 'a b'] } },
      /config key "egress": egress.allow: egress rule "a b" is not a domain/,
    ],
    [
      'a bad egress default',
      { egress: { default: 'maybe' } },
      /config key "egress.default": must be one of allow\|deny/,
    ],
    ['an unknown egress key', { egress: { alow: [] } }, /config key "egress.alow": unknown key/],
    [
      'qemu-user networks outside test mode',
      { guest_net: 'qemu-user' },
      /config key "qemu.net": qemu-user .*reaches the host's loopback.*test_mode: true/,
    ],
    [
      'a key a driver section does not have',
      { qemu: { binry: 'x' } },
      /config key "qemu.binry": unknown key \(known: binary, user, accel/,
    ],
    [
      'a section key given twice, as itself and as its old flat key',
      { qemu_binary: 'a', qemu: { binary: 'b' } },
      /config key "qemu_binary": given twice \(it is qemu.binary\)/,
    ],
    ['a hypervisor no driver has', { hypervisor: 'xen' }, /config key "hypervisor": must be one of qemu\|fake/],
    [
      'a guest_dns entry that is not an address',
      { guest_dns: ['dns.example'] },
      /config key "guest_dns": "dns.example" is not an IP address/,
    ],
  ];
  for (const [what, raw, re] of bad) {
    it(`refuses ${what}, naming the key`, () => {
      expect(() => build(raw, {})).to.throw(ConfigError, re);
    });
  }

  it("puts E2B's volumes beside data_dir unless told where", () => {
    expect(build({}, {}, '/home/u').e2b_volumes_dir).to.equal('/home/u/.svc-e2b-volumes');
    expect(build({ e2b_volumes_dir: '~/vols' }, {}, '/home/u').e2b_volumes_dir).to.equal('/home/u/vols');
  });

  it('takes lists from YAML and comma-separated from the environment; mount_dirs defaults to the home', () => {
    expect(build({}, {}, '/home/u').mount_dirs).to.deep.equal(['/home/u']);
    expect(build({ mount_dirs: ['~/src', '/srv/x/../y'] }, {}, '/home/u').mount_dirs).to.deep.equal([
      '/home/u/src',
      '/srv/y',
    ]);
    const c = build(
      { allowed_hosts: ['a'] },
      { SVC_ALLOWED_HOSTS: 'svc.lan, box', SVC_ALLOWED_ORIGINS: 'http://localhost:3000' },
      '/home/u',
    );
    expect(c.allowed_hosts).to.deep.equal(['svc.lan', 'box']);
    expect(c.allowed_origins).to.deep.equal(['http://localhost:3000']);
  });

  it('allows a public api with a token and an empty api', () => {
    expect(build({ api: '0.0.0.0:7474', api_token: 'x' }, {}).api).to.equal('0.0.0.0:7474');
    expect(build({ api: '' }, {}).api).to.equal('');
  });

  it('finds the file by flag, then SVC_CONFIG, and reads YAML', () => {
    const dir = tempDir();
    const f = join(dir, 'c.yaml');
    writeFileSync(f, 'cpus: 3\nhypervisor: fake\n');
    expect(configPath(undefined, { SVC_CONFIG: f }, dir)).to.equal(f);
    expect(configPath('/x.yaml', { SVC_CONFIG: f }, dir)).to.equal('/x.yaml');
    expect(configPath(undefined, {}, dir)).to.equal(undefined);
    expect(loadConfig(f, {}).cpus).to.equal(3);
    writeFileSync(f, 'cpus: [\n');
    expect(() => loadConfig(f, {})).to.throw(ConfigError, /not valid YAML/);
    expect(() => loadConfig(join(dir, 'missing.yaml'), {})).to.throw(ConfigError, /cannot read/);
  });

  it('makes a node of a cluster only with etcd endpoints, an advertised URL and a token of its own', () => {
    const host = () => ({ hostname: 'Build.Host_1', cpus: 2, memory_mb: 4096, disk_gb: 50 });
    expect(clusterSettings(build({}), () => expect.fail('a daemon that is no node does not read the host'))).to.equal(
      undefined,
    );
    const token = 'a-cluster-token-1234';
    const ok = build({
      api_token: 'user',
      max_vms: 7,
      cluster: { etcd: ['http://127.0.0.1:2379'], advertise: 'http://10.0.0.5:7474/', token, tags: ['zone=a'] },
    });
    expect(clusterSettings(ok, host)).to.deep.include({
      node: 'build-host-1',
      advertise: 'http://10.0.0.5:7474',
      prefix: '/svc/',
      lease_ttl_ms: 10_000,
      tags: { zone: 'a' },
      capacity: { cpus: 8, memory_mb: 4096, disk_gb: 50, vm_slots: 7 },
    });
    const bad = (cluster: Record<string, unknown>, re: RegExp) =>
      expect(() =>
        build({
          api_token: 'user',
          cluster: { etcd: ['http://e:2379'], advertise: 'http://n:7474', token, ...cluster },
        }),
      ).to.throw(ConfigError, re);
    bad({ etcd: ['e:2379'] }, /cluster.etcd.*not an endpoint/);
    bad({ advertise: '' }, /cluster.advertise/);
    bad({ token: 'short' }, /cluster.token.*16 characters/);
    bad({ node: 'Bad Name' }, /cluster.node/);
    bad({ lease_ttl: '1s' }, /cluster.lease_ttl.*at least 2s/);
    bad({ tags: ['zone'] }, /cluster.tags.*KEY=VALUE/);
    bad({ etcd_cert: '/c.pem' }, /etcd_cert and etcd_key go together/);
    bad({ what: 1 }, /cluster.what.*unknown key/);
    expect(() =>
      build({ api_token: token, cluster: { etcd: ['http://e:2379'], advertise: 'http://n:7474', token } }),
    ).to.throw(ConfigError, /must differ from api_token/);
  });
});
