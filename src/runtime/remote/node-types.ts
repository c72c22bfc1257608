/** The node's own answers besides the Runtime's types (both ends of the node wire use them). */

/** What a node is, as a Manager learns it on connect (`RemoteRuntime.facts`). */
export interface NodeFacts {
  /** The node's name (its containers' `sbx.node` label). */
  name: string;
  engine: string;
  engineVersion: string;
  os: string;
  arch: string;
  cpus: number;
  memoryBytes: number;
  /** The OCI runtimes its engine offers (runc, runsc, …). */
  ociRuntimes: string[];
  /** Free bytes of the file system of the node's data directory (workspaces live there). */
  freeDiskBytes: number;
  /**
   * The node's runtime enforces egress policies (`ContainerSpec.egress`, `setEgress`): its
   * `capabilities.egress`. Absent (a node from before egress policies): false.
   */
  egress?: boolean;
  /**
   * The node's runtime can checkpoint boxes to release their memory (`capabilities.checkpoint`:
   * a Docker engine with its checkpoint API on; each box's OCI runtime decides, gVisor's can).
   * Absent (a node from before): false.
   */
  checkpoint?: boolean;
}

/** A workspace volume a node holds: its name (the workspace's path on the Manager's machine) and labels. */
export interface NodeVolume {
  hostPath: string;
  labels: Record<string, string>;
  createdAt: string;
}
