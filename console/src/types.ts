/**
 * What the API answers, as the console reads it (docs/api.md; the server's zod schemas in
 * src/server/schemas.ts are the source of truth). Only the fields the console shows.
 */
export type BoxStatus = 'creating' | 'running' | 'paused' | 'restarting' | 'stopped' | 'archived';

export interface BoxInfo {
  id: string;
  pool: string;
  owner: string;
  status: BoxStatus;
  policy: string;
  labels: Record<string, string>;
  image: string;
  createdAt: string;
  lastActive: string;
  processCount: number;
  vnc: boolean;
  workspaceId: string | null;
  mountPath: string;
  idleTimeoutMs: number;
  maxLifetimeMs: number;
  ports: Array<{ containerPort: number; hostIp: string; hostPort: number; protocol: 'tcp' | 'udp' }>;
  execPath: 'agent' | 'engine';
  exitCode: number | null;
  oomKilled: boolean;
  networkPolicy: { egress: 'all' | 'none' | { allow?: string[]; deny?: string[] } };
}

export interface BoxList {
  boxes: BoxInfo[];
}
