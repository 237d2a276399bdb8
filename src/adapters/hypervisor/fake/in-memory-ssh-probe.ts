import type { SshProbe } from '../../../ports/tunnels.js';
import type { FakeGuests } from './fake-guests.js';

/** SSH readiness for fake VMs: "up" once the fake guest has booted. */
export class InMemorySshProbe implements SshProbe {
  constructor(private readonly hv: FakeGuests) {}

  async ready(_host: string, port: number): Promise<boolean> {
    const name = this.hv.vmByPort(port);
    return !!name && this.hv.guestUp(name);
  }
}
