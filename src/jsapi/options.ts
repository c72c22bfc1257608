/**
 * The seed's snake_case options onto the library's camelCase ones, and the library's errors
 * back: a JS caller who wrote `idle_timeout` must be told about `idle_timeout`, not about
 * `idleTimeoutMs`, a name it never used.
 */
import { SbxError, invalidArgument } from '../errors.js';

/** Seed name → library name, for one options object. */
export type FieldMap = Readonly<Record<string, string>>;

export const CREATE_FIELDS: FieldMap = {
  id: 'id',
  owner: 'owner',
  pool: 'pool',
  image: 'image',
  workdir: 'workDir',
  user: 'user',
  env: 'env',
  memory: 'memory',
  cpus: 'cpus',
  vnc: 'vnc',
  ports: 'ports',
  policy: 'policy',
  idle_timeout: 'idleTimeoutMs',
  stop_timeout: 'stopTimeoutMs',
  workspace_id: 'workspaceId',
  mount_mode: 'mountMode',
  mount_path: 'mountPath',
  labels: 'labels',
};

export const PORT_FIELDS: FieldMap = { container: 'containerPort', host: 'hostPort', host_ip: 'hostIp', protocol: 'protocol' };
export const LIST_FIELDS: FieldMap = { owner: 'owner', pool: 'pool', labels: 'labels' };
export const EXEC_FIELDS: FieldMap = { workdir: 'workDir', env: 'env', timeout: 'timeoutMs' };
export const ATTACH_FIELDS: FieldMap = { protocol: 'protocol', path: 'path', headers: 'headers' };
export const WORKSPACE_CREATE_FIELDS: FieldMap = { id: 'id', name: 'name', owner: 'owner', node: 'node', labels: 'labels' };
export const WORKSPACE_LIST_FIELDS: FieldMap = { owner: 'owner', node: 'node' };

/** Library name → seed name, over every map (the names never clash). */
const SEED_NAME: ReadonlyMap<string, string> = new Map(
  [CREATE_FIELDS, PORT_FIELDS, EXEC_FIELDS].flatMap((m) => Object.entries(m).map(([seed, lib]) => [lib, seed] as const)),
);

/**
 * Renames the keys of `input` by `fields`. Unknown keys are refused rather than dropped: a
 * camelCase `workDir` silently ignored would run the box somewhere the caller did not ask for.
 * Undefined values are left out, as if not given.
 */
export function mapOptions(input: unknown, fields: FieldMap, what: string, prefix = ''): Record<string, unknown> {
  if (input === undefined || input === null) return {};
  if (typeof input !== 'object' || Array.isArray(input)) throw invalidArgument(prefix ? prefix.slice(0, -1) : what, 'must be an object');
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(input)) {
    const target = fields[key];
    if (target === undefined) {
      const seed = SEED_NAME.get(key);
      const hint = seed !== undefined && fields[seed] !== undefined ? `; the seed's name is ${seed}` : `; known: ${Object.keys(fields).join(', ')}`;
      throw invalidArgument(`${prefix}${key}`, `unknown ${what} option${hint}`);
    }
    if (value !== undefined) out[target] = value;
  }
  return out;
}

/** The seed's `ports` array onto PortSpec[]; anything but an array is left for the library to refuse. */
export function mapPorts(ports: unknown): unknown {
  if (!Array.isArray(ports)) return ports;
  return ports.map((p, i) => mapOptions(p, PORT_FIELDS, 'port', `ports.${i}.`));
}

/** An empty filter field means "all" in the seed; in the library it is a value to match. */
export function dropEmpty(filter: Record<string, unknown>): Record<string, unknown> {
  return Object.fromEntries(Object.entries(filter).filter(([, v]) => v !== ''));
}

/** The WorkspaceFS methods take the seed's `perm` where the library takes `mode`. */
export const PERM_NAME: ReadonlyMap<string, string> = new Map([['mode', 'perm']]);

/** Runs a library call and renames the field of an invalid_argument to the seed's name. */
export async function seedNames<T>(call: () => Promise<T>, names: ReadonlyMap<string, string> = SEED_NAME): Promise<T> {
  try {
    return await call();
  } catch (err) {
    throw renameField(err, names);
  }
}

function renameField(err: unknown, names: ReadonlyMap<string, string>): unknown {
  if (!(err instanceof SbxError) || err.code !== 'invalid_argument' || typeof err.details?.['field'] !== 'string') return err;
  const field = err.details['field'];
  const renamed = field
    .split('.')
    .map((part) => names.get(part) ?? part)
    .join('.');
  if (renamed === field) return err;
  let message = err.message.startsWith(`${field}:`) ? `${renamed}${err.message.slice(field.length)}` : err.message;
  // Schema messages name the field again ("workDir must be an absolute path").
  for (const [lib, seed] of names) if (lib !== seed) message = message.replace(new RegExp(`\\b${lib}\\b`, 'g'), seed);
  return new SbxError('invalid_argument', message, { cause: err, details: { ...err.details, field: renamed } });
}
