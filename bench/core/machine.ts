import { statfs } from 'node:fs/promises';
import os from 'node:os';
import type { EngineClient } from '../engine/client.js';

export interface Machine {
  cpus: number;
  cpuModel: string;
  memGiB: number;
  node: string;
  platform: string;
  kernel: string;
  engineVersion: string;
  apiVersion: string;
  storageDriver: string;
  cgroupVersion: string;
  cgroupDriver: string;
  /** File system of the directory the workspace rows write to. */
  tmpFs: string;
}

// statfs(2) f_type magic numbers of the file systems a bench machine is likely to have.
const FS_NAMES: Record<number, string> = {
  0xef53: 'ext4',
  0x01021994: 'tmpfs',
  0x58465342: 'xfs',
  0x9123683e: 'btrfs',
  0x794c7630: 'overlay',
  0x2fc12fc1: 'zfs',
};

export async function describeMachine(engine: EngineClient, tmpDir: string): Promise<Machine> {
  const [version, info, fs] = await Promise.all([
    engine.json<{ Version: string; ApiVersion: string }>('GET', '/version'),
    engine.json<{ Driver: string; CgroupVersion?: string; CgroupDriver?: string }>('GET', '/info'),
    statfs(tmpDir).catch(() => undefined),
  ]);
  return {
    cpus: os.cpus().length,
    cpuModel: os.cpus()[0]?.model.trim() ?? 'unknown',
    memGiB: Math.round((os.totalmem() / 2 ** 30) * 10) / 10,
    node: process.version,
    platform: `${os.platform()}/${os.arch()}`,
    kernel: os.release(),
    engineVersion: version.Version,
    apiVersion: version.ApiVersion,
    storageDriver: info.Driver,
    cgroupVersion: info.CgroupVersion ?? 'unknown',
    cgroupDriver: info.CgroupDriver ?? 'unknown',
    tmpFs: fs ? (FS_NAMES[fs.type] ?? `0x${fs.type.toString(16)}`) : 'unknown',
  };
}
