import { ipFrom, macFrom } from './packets.js';

/** The guest's network, as QEMU's user-mode network lays it out (so images and saved guests need no change). */
export const LAN = {
  base: ipFrom('10.0.2.0'),
  gateway: ipFrom('10.0.2.2'),
  dns: ipFrom('10.0.2.3'),
  guest: ipFrom('10.0.2.15'),
};
export const MASK = 0xffffff00;
/** The gateway's and resolver's MACs, QEMU's user-mode network's own (a restored guest's ARP cache holds them). */
export const GW_MAC = macFrom('52:55:0a:00:02:02');
export const DNS_MAC = macFrom('52:55:0a:00:02:03');
/** QEMU's MAC for a VM's first NIC, until the guest's own frames say otherwise. */
export const GUEST_MAC = macFrom('52:54:00:12:34:56');
export const BROADCAST = 0xffffffff;
export const inLan = (ip: number) => (ip & MASK) >>> 0 === LAN.base;
