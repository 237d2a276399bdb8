/** What the in-memory guest agent and SSH probe need to know of the fake's VMs. */
export interface FakeGuests {
  /** True when the VM's guest would answer now. */
  guestUp(name: string): boolean;
  /** Which VM a fake host port (ssh or agent) belongs to. */
  vmByPort(port: number): string | undefined;
}
