/**
 * Module hooks (node:module `register`) that append every URL a child process resolves to the file
 * named in `data.file`: the run-time half of the tests that prove what a module graph loads (the
 * SDK's, the CLI's start-up). Register them with
 * `register('data:text/javascript,' + encodeURIComponent(RESOLVE_RECORDER_HOOKS), { data: { file } })`.
 */
export const RESOLVE_RECORDER_HOOKS = `
import { appendFileSync } from 'node:fs';
let file;
export function initialize(data) { file = data.file; }
export async function resolve(specifier, context, next) {
  const r = await next(specifier, context);
  appendFileSync(file, r.url + '\\n');
  return r;
}`;
