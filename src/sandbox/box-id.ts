/**
 * Box ids sbx makes (`sb-` and 12 hex digits) and the prefixes that may stand for one. Only a
 * generated id is ever matched by a prefix, as docker matches container ids but never names: an id
 * a caller chose (`agent-1`) is a name, and a removed `agent-1` must never resolve to `agent-10`.
 * All generated ids have one length, so a whole one is never the prefix of another.
 */
export const GENERATED_ID_BYTES = 6;
const GENERATED_ID = new RegExp(`^sb-[0-9a-f]{${GENERATED_ID_BYTES * 2}}$`);
const GENERATED_PREFIX = new RegExp(`^sb-[0-9a-f]{0,${GENERATED_ID_BYTES * 2 - 1}}$`);

/** Whether `prefix` may stand for a generated id (`sb-` and up to 11 hex digits) that `id` is. */
export function isGeneratedIdPrefix(prefix: string, id: string): boolean {
  return GENERATED_PREFIX.test(prefix) && GENERATED_ID.test(id) && id.startsWith(prefix);
}
