import { randomBytes } from 'node:crypto';
import type { V1Pod } from '@kubernetes/client-node';
import type { ContainerSpec } from '../../src/runtime/types.js';
import { DEFAULT_WORKDIR, GRACEFUL_CMD } from '../../src/sandbox/box-spec.js';
import { DEFAULT_BOX_CPUS, DEFAULT_BOX_MEMORY } from '../../src/sandbox/config.js';
import { securityFor } from '../../src/sandbox/security.js';
import { BASE_IMAGE } from '../core/identity.js';

/**
 * The box both Kubernetes sides make: sbx-base with sbx's graceful CMD (sleeps, exits at once on
 * SIGTERM), working directory /workspace, the default memory and CPU and the `standard` profile's
 * hardening, as a Manager's standard box asks the runtime for it.
 */
export function sbxBoxSpec(labels: Record<string, string>): ContainerSpec {
  return {
    image: BASE_IMAGE,
    cmd: GRACEFUL_CMD,
    workDir: DEFAULT_WORKDIR,
    labels,
    memory: DEFAULT_BOX_MEMORY,
    cpus: DEFAULT_BOX_CPUS,
    security: securityFor('standard').security,
  };
}

/** The container both sides' pods run the box in (sbx names it `main`; exec names it). */
export const RAW_CONTAINER = 'main';

/**
 * The pod the raw side creates, written out by hand so that it pays no spec validation or mapping
 * per call: what src/runtime/kubernetes/manifest.ts makes of `sbxBoxSpec`, without sbx's
 * `sbx.dev/labels` annotation. The constants come from sbx so the hardening cannot drift;
 * kubernetes/parity.ts compares the two pods the API server stored at start-up.
 */
export function rawPod(labels: Record<string, string>): V1Pod {
  const { security } = securityFor('standard');
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name: `raw-${randomBytes(6).toString('hex')}`, labels },
    spec: {
      containers: [
        {
          name: RAW_CONTAINER,
          image: BASE_IMAGE,
          imagePullPolicy: 'IfNotPresent',
          args: GRACEFUL_CMD,
          workingDir: DEFAULT_WORKDIR,
          // Limits as asked; the scheduler's reservation is a tenth of the CPU limit (sbx's manifest does the same).
          resources: {
            limits: { memory: String(DEFAULT_BOX_MEMORY), cpu: `${DEFAULT_BOX_CPUS * 1000}m` },
            requests: { memory: String(DEFAULT_BOX_MEMORY), cpu: `${DEFAULT_BOX_CPUS * 100}m` },
          },
          securityContext: {
            allowPrivilegeEscalation: false,
            capabilities: { drop: ['ALL'], add: security.capAdd ?? [] },
            seccompProfile: { type: 'RuntimeDefault' },
            readOnlyRootFilesystem: false,
          },
          stdin: false,
          tty: false,
        },
      ],
      restartPolicy: 'Never',
      automountServiceAccountToken: false,
      enableServiceLinks: false,
      securityContext: { seccompProfile: { type: 'RuntimeDefault' } },
    },
  };
}
