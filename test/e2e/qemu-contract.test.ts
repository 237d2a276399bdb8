import { HttpGuestAgent } from '../../src/adapters/guest-link/http-guest-agent.js';
import { ImageCatalog } from '../../src/adapters/images/image-catalog.js';
import { QemuHypervisor } from '../../src/adapters/hypervisor/qemu/qemu-hypervisor.js';
import { SilentLogger } from '../fakes/fakes.js';
import { hypervisorContract } from '../contract/hypervisor-contract.js';
import { ensureImage } from './image.js';
import { waitUntil } from '../helpers/wait.js';

const agent = new HttpGuestAgent();
let hv: QemuHypervisor;

const make = () =>
  new QemuHypervisor({
    qemuBinary: 'qemu-system-x86_64',
    accel: 'auto',
    images: new ImageCatalog(ensureImage()),
    log: new SilentLogger(),
    vsock: false,
    mountDriver: '9p',
    qemuUser: 'nobody',
  });

hypervisorContract(
  'QemuHypervisor (real guests)',
  async () => {
    hv = make();
    return {
      hv,
      image: 'minimal',
      bootMs: 90_000,
      waitUp: (_name, h, ms) =>
        waitUntil(
          'the guest answers',
          async () => (await agent.health({ host: '127.0.0.1', port: h.agent_port }, 500), true),
          { ms, every: 200 },
        ),
      answers: (_name, h) =>
        agent.health({ host: '127.0.0.1', port: h.agent_port }, 1500).then(
          () => true,
          () => false,
        ),
      crash: async (_name, h) => void process.kill(h.pid!, 'SIGKILL'),
      live: () => Object.keys(hv.pids()),
      restart: async () => {
        await hv.release();
        hv = make();
        return hv;
      },
    };
  },
  async () => agent.close(),
);
