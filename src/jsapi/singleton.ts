/**
 * The seed's process-wide Manager, which only the JS facade has (the library needs no globals:
 * `new Manager()`). `sandbox.Init` installs it; every facade call reads it.
 */
import { SbxError } from '../errors.js';
import type { Manager } from '../sandbox/index.js';

let instance: Manager | undefined;

/** Makes `manager` (or none) the one the facade's calls use. */
export function install(manager: Manager | undefined): void {
  instance = manager;
}

/** The installed Manager, or undefined before a successful Init. */
export function installed(): Manager | undefined {
  return instance;
}

/** The installed Manager; not_available before a successful `sandbox.Init`. */
export function M(): Manager {
  if (!instance) throw new SbxError('not_available', 'sandbox manager not initialised; call sandbox.Init(config) first');
  return instance;
}
