import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { GuestUser, GuestUsers } from '../../ports/agent/kept-processes.js';

/**
 * The guest's users from `<root>/etc/passwd` and `<root>/etc/group` (no NSS: the guests svc
 * builds keep their users there). A number that names no user is taken as that uid with the same
 * gid and no home, as `setpriv` would.
 */
export class EtcGuestUsers implements GuestUsers {
  constructor(private readonly root = '/') {}

  async find(user: string): Promise<GuestUser | null> {
    const passwd = await this.lines('passwd');
    const numeric = /^\d+$/.test(user);
    const row = passwd.find((f) => (numeric ? f[2] === user : f[0] === user));
    if (!row)
      return numeric
        ? { uid: Number(user), gid: Number(user), groups: [], home: '/', name: user, shell: '/bin/sh' }
        : null;
    const [name, , uid, gid, , home, shell] = row;
    const groups = (await this.lines('group'))
      .filter((g) => g[3]?.split(',').includes(name))
      .map((g) => Number(g[2]))
      .filter((n) => Number.isInteger(n));
    return {
      name,
      uid: Number(uid),
      gid: Number(gid),
      groups: [...new Set([Number(gid), ...groups])],
      home: home || '/',
      shell: shell || '/bin/sh',
    };
  }

  private async lines(file: string): Promise<string[][]> {
    const text = await readFile(join(this.root, 'etc', file), 'utf8').catch(() => '');
    return text
      .split('\n')
      .filter((l) => l && !l.startsWith('#'))
      .map((l) => l.split(':'));
  }
}
