export { Manager } from './manager.js';
export { GRACEFUL_CMD, DEFAULT_WORKDIR } from './box-spec.js';
export type { Box, LocalBox, PortUrlIssuer, ProxyUrlOptions, VncUrlOptions } from './box.js';
export { CreateOptionsSchema } from './create-options.js';
export { SnapshotOptionsSchema, SNAPSHOT_ID_PATTERN, DEFAULT_MAX_SNAPSHOTS_PER_OWNER } from './snapshots.js';
export type { SnapshotInfo, SnapshotOptions, Snapshots } from './snapshots.js';
export { AttachOptionsSchema } from './attach-options.js';
export type {
  AttachOptions,
  AttachProtocol,
  ServiceConn,
  SseAttachOptions,
  SseEvent,
  SseServiceConn,
  WsAttachOptions,
  WsCloseInfo,
  WsMessage,
  WsServiceConn,
} from '../attach/types.js';
export { PoolConfigSchema } from './config.js';
export { loadConfig, resolveConfig, EMBEDDED_DEFAULT_POOL, DEFAULT_BOX_MEMORY, DEFAULT_BOX_CPUS } from './config.js';
export type { ManagerConfig, PoolConfig, ResolvedConfig, ResolvedPool } from './config.js';
export { decideCleanup, normalizePolicy } from './policy.js';
export type { BoxActivity, CleanupAction } from './policy.js';
export { BoxTokenService } from './tokens.js';
export type { BoxTokenGrant } from './tokens.js';
export * from './types.js';
export {
  NetworkPolicySchema,
  DEFAULT_NETWORK_POLICY,
  MAX_EGRESS_ENTRIES,
  MAX_EGRESS_ENTRY_LENGTH,
  normalizeNetworkPolicy,
  parseEgressEntry,
  formatEgressTarget,
  compileEgress,
  describeEgress,
  fromE2bNetwork,
  toE2bNetwork,
} from './egress-policy.js';
export type { EgressPolicy, NetworkPolicy, E2bNetwork } from './egress-policy.js';
