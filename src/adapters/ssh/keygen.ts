import ssh2 from 'ssh2';

/**
 * A fresh ed25519 key pair that ssh2 can parse back. Now and then (about 1 in 150 here) a key ssh2
 * generates fails its own parser ("Malformed OpenSSH private key"); such a key is thrown away.
 */
export function generateEd25519(comment?: string): { private: string; public: string } {
  for (let i = 0; ; i++) {
    const kp = ssh2.utils.generateKeyPairSync('ed25519', comment ? { comment } : undefined);
    if (!(ssh2.utils.parseKey(kp.private) instanceof Error) || i >= 20) return kp;
  }
}
