/**
 * sbx — isolated execution environments ("boxes") on pools of container runtimes.
 *
 * @example
 * import { Manager } from 'sbx-manager';
 * const manager = new Manager();
 * await manager.start();
 * await using box = await manager.create({ image: 'sbx-base:latest' });
 * console.log((await box.exec(['echo', 'hello'])).stdout);
 */
export * from './errors.js';
export * from './sandbox/index.js';
export * from './runtime/index.js';
export { parseDuration } from './util/duration.js';
export * from './workspace/index.js';
