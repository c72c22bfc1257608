/**
 * sbx's file tool in a Docker box: the agent binary, whose `fs` subcommand (agent/fs.go) the box
 * filesystem runs through exec. A box created with the agent has it bind-mounted at AGENT_BIN;
 * any other box (pool `agent: false`, a tcp/ssh engine) gets a copy put there through the
 * engine's archive API on first use. The copy is root's, mode 0755, and stays in the container's
 * filesystem (it survives restarts, not a re-create). A read-only root filesystem (the strict
 * profile) cannot take it: such a box has no tool (docs/box-files.md).
 */
import { readFile } from 'node:fs/promises';
import type Docker from 'dockerode';
import * as tar from 'tar-stream';
import { AGENT_BIN, agentBinaryFor } from './agent-inject.js';

/** Where the tool is for a container, from its inspect: the agent's bind mount, when it has one. */
export function mountedTool(c: Docker.ContainerInspectInfo): string | null {
  return (c.Mounts ?? []).some((m) => m.Destination === AGENT_BIN) ? AGENT_BIN : null;
}

/** Whether a copy can go in: the root filesystem must be writable. */
export function canCopyTool(c: Docker.ContainerInspectInfo): boolean {
  return !c.HostConfig?.ReadonlyRootfs;
}

/** The binary's bytes, read once per path: a 5 MB file, put into many boxes. */
const binaries = new Map<string, Promise<Buffer>>();

/**
 * Copies the binary for `architecture` to AGENT_BIN in the container; false when there is no
 * binary for that architecture.
 */
export async function copyTool(container: Docker.Container, agentDir: string, architecture: string): Promise<boolean> {
  const binary = agentBinaryFor(agentDir, architecture);
  if (!binary) return false;
  let bytes = binaries.get(binary);
  if (!bytes) {
    bytes = readFile(binary);
    binaries.set(binary, bytes);
    bytes.catch(() => binaries.delete(binary));
  }
  const content = await bytes;
  const [dir, name] = [AGENT_BIN.slice(1, AGENT_BIN.lastIndexOf('/')), AGENT_BIN.slice(AGENT_BIN.lastIndexOf('/') + 1)];
  const pack = tar.pack();
  pack.entry({ name: `${dir}/`, type: 'directory', mode: 0o755, uid: 0, gid: 0 });
  pack.entry({ name: `${dir}/${name}`, type: 'file', mode: 0o755, uid: 0, gid: 0, size: content.length }, content);
  pack.finalize();
  await container.putArchive(pack as unknown as NodeJS.ReadableStream, { path: '/' });
  return true;
}
