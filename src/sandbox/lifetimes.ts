import { JsonMap } from '../util/json-map.js';

/**
 * Max lifetimes changed after create (`box.renewLifetime`), kept in the data directory because
 * a container's labels cannot change: recovery reads the label, then this. Keyed by container
 * id, not box id, so a later box that reuses an id never inherits an old box's deadline. `get`
 * is the max lifetime (ms from the box's creation) set after create, if any.
 */
export class LifetimeStore extends JsonMap<number> {
  constructor(file: string) {
    super(file, (ms) => (typeof ms === 'number' && Number.isInteger(ms) && ms >= 0 ? ms : undefined));
  }
}
