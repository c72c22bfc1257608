import { SbxError } from '../../errors.js';

/** Where a runtime lives, parsed from a pool's `addr`. */
export type RuntimeAddress =
  | { engine: 'docker'; transport: 'unix'; socketPath: string; raw: string }
  | { engine: 'docker'; transport: 'tcp'; host: string; port: number; tls: boolean; raw: string }
  | { engine: 'docker'; transport: 'ssh'; host: string; port: number; username: string | undefined; raw: string };

const DEFAULT_SOCKET = '/var/run/docker.sock';

/**
 * Parses a runtime address: `local` (the platform default engine: DOCKER_HOST when set, else
 * /var/run/docker.sock), `unix:///path`, `tcp://host:port` (`https://` or port 2376 means TLS)
 * and `ssh://user@host`. An empty address is an error, as in the seed: say `local`.
 *
 * @example
 * parseRuntimeAddress('unix:///var/run/docker.sock') // { transport: 'unix', socketPath: ... }
 */
export function parseRuntimeAddress(addr: string, env: NodeJS.ProcessEnv = process.env): RuntimeAddress {
  const raw = addr.trim();
  if (raw === '') {
    throw new SbxError('invalid_argument', "addr: empty runtime address; use 'local' for the local Docker Engine", {
      details: { field: 'addr' },
    });
  }
  if (raw === 'local' || raw === '127.0.0.1' || raw === 'docker') {
    const fromEnv = env['DOCKER_HOST']?.trim();
    if (fromEnv) return { ...parseRuntimeAddress(fromEnv, {}), raw };
    return { engine: 'docker', transport: 'unix', socketPath: DEFAULT_SOCKET, raw };
  }
  let url: URL;
  try {
    url = new URL(raw);
  } catch (cause) {
    throw invalidAddress(raw, 'not a URL', cause);
  }
  switch (url.protocol) {
    case 'unix:':
    case 'docker:': {
      const socketPath = decodeURIComponent(url.pathname) || DEFAULT_SOCKET;
      return { engine: 'docker', transport: 'unix', socketPath, raw };
    }
    case 'tcp:':
    case 'http:':
    case 'https:': {
      if (!url.hostname) throw invalidAddress(raw, 'missing host');
      const port = url.port ? Number(url.port) : url.protocol === 'https:' ? 2376 : 2375;
      const tls = url.protocol === 'https:' || port === 2376 || env['DOCKER_TLS_VERIFY'] === '1';
      return { engine: 'docker', transport: 'tcp', host: url.hostname, port, tls, raw };
    }
    case 'ssh:': {
      if (!url.hostname) throw invalidAddress(raw, 'missing host');
      return {
        engine: 'docker',
        transport: 'ssh',
        host: url.hostname,
        port: url.port ? Number(url.port) : 22,
        username: url.username || undefined,
        raw,
      };
    }
    default:
      throw invalidAddress(raw, `unknown scheme '${url.protocol.replace(/:$/, '')}' (use local, unix://, tcp://, ssh://)`);
  }
}

function invalidAddress(raw: string, why: string, cause?: unknown): SbxError {
  return new SbxError('invalid_argument', `addr: invalid runtime address '${raw}': ${why}`, {
    cause,
    details: { field: 'addr' },
  });
}
