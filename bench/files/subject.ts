/** Whole-file I/O, the part of a workspace the WorkspaceReadWrite rows time. */
export interface FileSubject {
  readonly name: string;
  writeFile(path: string, data: Buffer): Promise<void>;
  readFile(path: string): Promise<Buffer>;
}
