import type { EngineClient } from '../engine/client.js';
import type { BoxRef, Subject } from '../subjects/subject.js';

interface Inspect {
  Config: { Image: string; Cmd: string[] | null; WorkingDir: string; User: string; Env: string[] | null; Labels: Record<string, string> | null };
  HostConfig: Record<string, unknown>;
}

const HOST_FIELDS = [
  'PidsLimit',
  'SecurityOpt',
  'CapDrop',
  'CapAdd',
  'NetworkMode',
  'Memory',
  'NanoCpus',
  'ReadonlyRootfs',
  'Binds',
  'Tmpfs',
  'PortBindings',
  'Runtime',
  'ShmSize',
  'MemorySwap',
  'RestartPolicy',
];

/**
 * Creates one box on each side and compares what the engine was told to build, so a change to
 * sbx's defaults (a new capability, a label) shows up as a warning instead of as a silently
 * unfair ratio. Values that differ per box (ids, timestamps, the token) are compared by key only.
 */
export async function checkParity(engine: EngineClient, a: Subject, b: Subject): Promise<string[]> {
  const [left, right] = [await describe(engine, a), await describe(engine, b)];
  const diffs: string[] = [];
  const same = (what: string, x: unknown, y: unknown) => {
    if (JSON.stringify(x) !== JSON.stringify(y)) diffs.push(`${what}: ${a.name}=${JSON.stringify(x)} ${b.name}=${JSON.stringify(y)}`);
  };
  same('Image', left.Config.Image, right.Config.Image);
  same('Cmd', left.Config.Cmd, right.Config.Cmd);
  same('WorkingDir', left.Config.WorkingDir, right.Config.WorkingDir);
  same('User', left.Config.User, right.Config.User);
  same('Env names', envNames(left), envNames(right));
  same('Label keys', labelKeys(left), labelKeys(right));
  for (const f of HOST_FIELDS) same(`HostConfig.${f}`, left.HostConfig[f] ?? null, right.HostConfig[f] ?? null);
  return diffs;
}

async function describe(engine: EngineClient, s: Subject): Promise<Inspect> {
  const box: BoxRef = await s.create();
  try {
    // Both sides label the container with its box id, so one lookup works for any subject.
    const filters = encodeURIComponent(JSON.stringify({ label: [`sbx.id=${box.id}`] }));
    const [found] = await engine.json<Array<{ Id: string }>>('GET', `/containers/json?all=1&filters=${filters}`);
    if (!found) throw new Error(`${s.name}: no container labelled sbx.id=${box.id}`);
    return await engine.json<Inspect>('GET', `/containers/${found.Id}/json`);
  } finally {
    await s.remove(box);
  }
}

const envNames = (c: Inspect) => (c.Config.Env ?? []).map((e) => e.split('=')[0]).sort();
const labelKeys = (c: Inspect) => Object.keys(c.Config.Labels ?? {}).sort();
