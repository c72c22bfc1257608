import { invalidArgument } from '../errors.js';

/** An image reference split into its parts, per the distribution reference grammar. */
export interface ImageRef {
  /** Registry host[:port], absent for the engine's default registry. */
  registry?: string;
  /** Path below the registry, e.g. `library/node` or `sbx-base`. */
  repository: string;
  tag?: string;
  /** `algorithm:hex`. */
  digest?: string;
}

// The grammar of github.com/distribution/reference, written out once for the whole project.
const ALNUM = '[a-z0-9]+';
const SEPARATOR = '(?:[._]|__|-+)';
const PATH_COMPONENT = `${ALNUM}(?:${SEPARATOR}${ALNUM})*`;
const DOMAIN_COMPONENT = '(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])';
const DOMAIN = `(?:${DOMAIN_COMPONENT}(?:\\.${DOMAIN_COMPONENT})*|\\[[0-9a-fA-F:.]+\\])(?::[0-9]+)?`;
const TAG = '[\\w][\\w.-]{0,127}';
const DIGEST = '[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}';
const REPOSITORY_RE = new RegExp(`^${PATH_COMPONENT}(?:/${PATH_COMPONENT})*$`);
const DOMAIN_RE = new RegExp(`^${DOMAIN}$`);
const TAG_RE = new RegExp(`^${TAG}$`);
const DIGEST_RE = new RegExp(`^${DIGEST}$`);
const MAX_NAME = 255;

/**
 * Parses an image reference (`[registry/]path[:tag][@digest]`) or throws invalid_argument
 * naming `field`. As in Docker Engine 20.10, the first path component is a registry when it
 * has a `.` or a `:` or is `localhost`; everything else is repository, which is lowercase
 * (newer grammars also take an uppercase first component as a host: `UPPER/x` is refused here).
 *
 * @example
 * parseImageRef('127.0.0.1:5000/sbx/pulltest:latest') // { registry: '127.0.0.1:5000', repository: 'sbx/pulltest', tag: 'latest' }
 * parseImageRef('Ubuntu')                             // throws: repository must be lowercase
 */
export function parseImageRef(ref: unknown, field = 'image'): ImageRef {
  if (typeof ref !== 'string' || ref === '') throw invalidArgument(field, 'is required: an image reference like sbx-base:latest');
  const bad = (why: string) => invalidArgument(field, `'${printable(ref)}' is not a valid image reference: ${why}`);
  if (/[^\x21-\x7e]/.test(ref)) throw bad('spaces and control characters are not allowed');
  let rest = ref;
  let digest: string | undefined;
  const at = rest.indexOf('@');
  if (at >= 0) {
    digest = rest.slice(at + 1);
    rest = rest.slice(0, at);
    if (!DIGEST_RE.test(digest)) throw bad('the digest must be algorithm:hex (at least 32 hex digits)');
  }
  let tag: string | undefined;
  const lastColon = rest.lastIndexOf(':');
  if (lastColon > rest.lastIndexOf('/')) {
    tag = rest.slice(lastColon + 1);
    rest = rest.slice(0, lastColon);
    if (!TAG_RE.test(tag)) throw bad('a tag is 1-128 of [A-Za-z0-9_.-], not starting with . or -');
  }
  if (rest.length > MAX_NAME) throw bad(`the name is longer than ${MAX_NAME} characters`);
  let registry: string | undefined;
  let repository = rest;
  const slash = rest.indexOf('/');
  if (slash > 0) {
    const first = rest.slice(0, slash);
    if (/[.:]/.test(first) || first === 'localhost') {
      registry = first;
      repository = rest.slice(slash + 1);
      if (!DOMAIN_RE.test(registry)) throw bad(`'${registry}' is not a registry host[:port]`);
    }
  }
  if (!REPOSITORY_RE.test(repository)) {
    throw bad(
      repository !== repository.toLowerCase()
        ? 'repository names must be lowercase'
        : "a repository is lowercase path components of [a-z0-9] joined by '/', with '.', '_', '__' or '-' between letters",
    );
  }
  return { ...(registry ? { registry } : {}), repository, ...(tag ? { tag } : {}), ...(digest ? { digest } : {}) };
}

/** The reference written back, for the engine and for messages. */
export function formatImageRef(r: ImageRef): string {
  return `${r.registry ? `${r.registry}/` : ''}${r.repository}${r.tag ? `:${r.tag}` : ''}${r.digest ? `@${r.digest}` : ''}`;
}

function printable(s: string): string {
  return JSON.stringify(s).slice(1, -1);
}
