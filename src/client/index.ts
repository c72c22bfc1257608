/**
 * sbx-sdk (packages/sdk, built from here) — the TypeScript SDK of `sbx serve`, with the library's shape: swap
 * `new Manager()` for `new Sbx()` and the rest of the code stays. It loads no core module
 * (no Docker client, no server): only `fetch`, `ws`, and the shared error class and types.
 *
 * @example
 * import { Sbx } from 'sbx-sdk';
 * const sbx = new Sbx({ url: 'http://127.0.0.1:7070', apiKey: process.env.SBX_API_KEY });
 * await using box = await sbx.create({ image: 'sbx-base:latest' });
 * console.log((await box.exec(['echo', 'hello'])).stdout);
 */
export { Sbx, DEFAULT_URL } from './client.js';
export type { SbxOptions, PullOptions, WhoAmI } from './client.js';
export { RemoteBox } from './box.js';
export type { Box } from './box.js';
export { RemoteWorkspaces, RemoteWorkspaceFS } from './workspace.js';
export type { WorkspaceFS, RemoteCreateWorkspaceOptions } from './workspace.js';
// The library's class: `instanceof SbxError` holds across sbx-manager and sbx-sdk (errors.ts brands both copies).
export { SbxError, isSbxError, ERROR_CODES } from '../errors.js';
export type { ErrorCode, SbxErrorOptions } from '../errors.js';
export type { BoxInfo, BoxStats, BoxStatus, CreateOptions, HeartbeatInput, LifecyclePolicy, ListOptions, PoolInfo, SecurityProfile } from '../sandbox/types.js';
export type { PoolConfig } from '../sandbox/config.js';
export type { EgressPolicy, NetworkPolicy } from '../sandbox/egress-policy.js';
export type { SnapshotInfo, SnapshotOptions } from '../sandbox/snapshots.js';
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
export type { ExecOptions, ExecResult, ExecStream, ExecStreamOptions, ImageInfo, LogChunk, LogOptions, PullProgress, RegistryAuth } from '../runtime/types.js';
export type {
  DirEntry,
  FileContent,
  FileStat,
  ImportResult,
  ListWorkspacesOptions,
  ReadDirOptions,
  UpdateWorkspaceOptions,
  Workspace,
  WorkspaceUsage,
  WriteFileOptions,
} from '../workspace/types.js';
export type { ApiKeyInfo, Role } from '../server/keys.js';
export type { NodeInfo, NodeFacts, NodeState } from '../runtime/remote/hub.js';
