import ssh2 from 'ssh2';

/**
 * A fresh ed25519 key pair that ssh2 can parse back, both halves. Now and then (about 1 in 150 here:
 * a public key with a leading zero byte, which ssh2's keygen strips; mscdex/ssh2#1390) a key ssh2
 * generates fails its own parser ("Malformed OpenSSH private key"); such a pair is thrown away.
 * (Tests that make keys for stand-in SSH peers use this too: one made with ssh2 directly failed CI.)
 */
export function generateEd25519(comment?: string): { private: string; public: string } {
  for (let i = 0; ; i++) {
    const kp = ssh2.utils.generateKeyPairSync('ed25519', comment ? { comment } : undefined);
    const parses =
      !(ssh2.utils.parseKey(kp.private) instanceof Error) && !(ssh2.utils.parseKey(kp.public) instanceof Error);
    if (parses || i >= 20) return kp;
  }
}
