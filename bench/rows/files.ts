import { randomBytes } from 'node:crypto';
import { defineRow } from '../core/row.js';
import type { AnyRow } from '../core/row.js';
import type { FileSubject } from '../files/subject.js';

const MIB = 1024 * 1024;

function writeRow(label: string, bytes: number, iterations: { quick: number; full: number }): AnyRow<FileSubject> {
  return defineRow<FileSubject, Buffer>({
    name: `WorkspaceWrite${label}`,
    group: 'workspace',
    note: `replace a ${label}iB file, fsynced`,
    iterations,
    bytesPerOp: bytes,
    collectGarbage: true,
    // Random bytes: nothing on the way can shortcut zeros.
    setup: async () => randomBytes(bytes),
    async op(s, data) {
      await s.writeFile(`write-${label}.bin`, data);
    },
  });
}

function readRow(label: string, bytes: number, iterations: { quick: number; full: number }): AnyRow<FileSubject> {
  const path = `read-${label}.bin`;
  return defineRow<FileSubject>({
    name: `WorkspaceRead${label}`,
    group: 'workspace',
    note: `read a ${label}iB file (page cache)`,
    iterations,
    bytesPerOp: bytes,
    collectGarbage: true,
    async setup(s) {
      await s.writeFile(path, randomBytes(bytes));
    },
    async op(s) {
      const got = await s.readFile(path);
      if (got.length !== bytes) throw new Error(`read ${got.length} bytes, expected ${bytes}`);
    },
  });
}

/** The seed's WorkspaceReadWrite, split by direction and size. */
export const fileRows: AnyRow<FileSubject>[] = [
  writeRow('1M', MIB, { quick: 15, full: 60 }),
  readRow('1M', MIB, { quick: 30, full: 100 }),
  writeRow('16M', 16 * MIB, { quick: 5, full: 20 }),
  readRow('16M', 16 * MIB, { quick: 8, full: 30 }),
];

/** Shown in place of the workspace rows while src/workspace is not there. */
export const WORKSPACE_ROW_NAME = 'WorkspaceReadWrite';
