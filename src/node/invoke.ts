/**
 * The unary calls of the node wire (`Invoke{method, args_json}`, see node.proto's header for why
 * one generic RPC): each method's arguments are checked here with zod before the service sees
 * them (a spec by the engine-neutral ContainerSpec schema in NodeService.create, so a bad field
 * is named as on any runtime), and its result is plain JSON.
 */
import { z } from 'zod';
import { SbxError } from '../errors.js';
import { absolutePath, durationMs, envMap, plainText } from '../runtime/bounds.js';
import { parseOrThrow } from '../util/validation.js';
import type { NodeService } from './service.js';

/** A container id or name as callers give it. */
const containerId = z.string().min(1).max(256);
const labels = z.record(z.string().min(1).max(256), plainText(1024));
/** A checkpoint's name, as the engine takes one (its own pattern, bounded). */
const checkpointName = z
  .string()
  .max(128)
  .regex(/^[A-Za-z0-9][A-Za-z0-9_.-]*$/, 'a checkpoint name is letters, digits, _ . - (not first)');
/** An absent option: the client's JSON writes `undefined` as null. */
const opt = <T extends z.ZodType>(s: T) => s.nullish().transform((v) => v ?? undefined);
const none = z.tuple([]);

interface Method {
  args: z.ZodType<unknown[]>;
  run(svc: NodeService, args: never[]): Promise<unknown>;
}

function method<S extends z.ZodType<unknown[]>>(args: S, run: (svc: NodeService, args: z.output<S>) => Promise<unknown>): Method {
  return { args, run: run as Method['run'] };
}

export const METHODS: Record<string, Method> = {
  ping: method(none, (s) => s.ping()),
  version: method(none, (s) => s.version()),
  resources: method(none, (s) => s.resources()),
  facts: method(none, (s) => s.facts()),
  // The spec is checked by validateSpec in create (ContainerSpecSchema), then by the node policy.
  create: method(z.tuple([z.unknown()]), (s, [spec]) => s.create(spec as never)),
  start: method(z.tuple([containerId]), (s, [id]) => s.start(id)),
  stop: method(z.tuple([containerId, opt(z.object({ timeoutMs: durationMs.optional() }).strict())]), (s, [id, o]) => s.stop(id, o)),
  pause: method(z.tuple([containerId]), (s, [id]) => s.pause(id)),
  unpause: method(z.tuple([containerId]), (s, [id]) => s.unpause(id)),
  commit: method(z.tuple([containerId, z.string().min(1).max(1024), opt(z.object({ labels: labels.optional() }).strict())]), (s, [id, ref, o]) =>
    s.commit(id, ref, o),
  ),
  remove: method(z.tuple([containerId, opt(z.object({ force: z.boolean().optional() }).strict())]), (s, [id, o]) => s.remove(id, o)),
  inspect: method(z.tuple([containerId]), (s, [id]) => s.inspect(id)),
  list: method(z.tuple([opt(z.object({ labels: labels.optional(), all: z.boolean().optional() }).strict())]), (s, [o]) => s.list(o)),
  processes: method(z.tuple([containerId]), (s, [id]) => s.processes(id)),
  stats: method(z.tuple([containerId]), (s, [id]) => s.stats(id)),
  execCancel: method(z.tuple([z.string().min(1).max(64)]), (s, [handle]) => s.execCancel(handle)),
  execSignal: method(z.tuple([z.string().min(1).max(64), z.string().min(1).max(16)]), (s, [handle, name]) => s.execSignal(handle, name)),
  setBoxEnv: method(z.tuple([containerId, envMap]), (s, [id, env]) => s.setBoxEnv(id, env)),
  boxTool: method(z.tuple([containerId]), (s, [id]) => s.boxTool(id)),
  checkpoint: method(z.tuple([containerId, checkpointName]), (s, [id, name]) => s.checkpoint(id, name)),
  restoreCheckpoint: method(z.tuple([containerId, checkpointName]), (s, [id, name]) => s.restoreCheckpoint(id, name)),
  checkpoints: method(z.tuple([containerId]), (s, [id]) => s.listCheckpoints(id)),
  removeCheckpoint: method(z.tuple([containerId, checkpointName]), (s, [id, name]) => s.removeCheckpoint(id, name)),
  // The policy is checked by validateEgressGrammar in setEgress (every entry, bounded), so its fields are named `egress.…`.
  setEgress: method(z.tuple([containerId, z.unknown()]), (s, [id, egress]) => s.setEgress(id, egress)),
  getEgress: method(z.tuple([containerId]), (s, [id]) => s.getEgress(id)),
  imageExists: method(z.tuple([z.string().min(1).max(1024)]), (s, [ref]) => s.imageExists(ref)),
  imageList: method(none, (s) => s.imageList()),
  imageRemove: method(z.tuple([z.string().min(1).max(1024), opt(z.object({ force: z.boolean().optional() }).strict())]), (s, [ref, o]) =>
    s.imageRemove(ref, o),
  ),
  createWorkspaceVolume: method(
    z.tuple([
      absolutePath('hostPath'),
      opt(z.object({ sizeBytes: z.number().int().min(0).optional(), labels: labels.optional(), exclusive: z.boolean().optional() }).strict()),
    ]),
    (s, [p, o]) => s.createWorkspaceVolume(p, o),
  ),
  removeWorkspaceVolume: method(z.tuple([absolutePath('hostPath')]), (s, [p]) => s.removeWorkspaceVolume(p)),
  startWorkspaceHelper: method(
    z.tuple([
      absolutePath('hostPath'),
      z
        .object({
          labels,
          uid: z
            .number()
            .int()
            .min(0)
            .max(2 ** 31),
          gid: z
            .number()
            .int()
            .min(0)
            .max(2 ** 31),
        })
        .strict(),
    ]),
    (s, [p, o]) => s.startWorkspaceHelper(p, o),
  ),
  listVolumes: method(none, (s) => s.listVolumes()),
};

/** Runs one unary call: the method's arguments checked, its result as JSON ('' for none). */
export async function invoke(svc: NodeService, name: string, argsJson: string): Promise<string> {
  const m = Object.hasOwn(METHODS, name) ? METHODS[name] : undefined;
  if (!m) throw new SbxError('invalid_argument', `method: the node has no method '${name}'`, { details: { field: 'method' } });
  let raw: unknown;
  try {
    raw = JSON.parse(argsJson || '[]');
  } catch {
    throw new SbxError('invalid_argument', `${name}: the arguments are not JSON`, { details: { field: 'args' } });
  }
  const args = parseOrThrow(m.args, raw, 'args', name === 'create' ? undefined : 'args');
  const result = await m.run(svc, args as never[]);
  return result === undefined ? '' : JSON.stringify(result);
}
