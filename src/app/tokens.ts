/** Injection tokens for app-level values that are not ports. */
export const AppConfig = Symbol('AppConfig');
export const DaemonVersion = Symbol('DaemonVersion');
