/** Injection tokens for app-level values that are not ports. */
export const AppConfig = Symbol('AppConfig');
export const DaemonVersion = Symbol('DaemonVersion');
/** This node's cluster settings (ClusterSettings), bound only when the daemon is a node of a cluster. */
export const ClusterConfig = Symbol('ClusterConfig');
