/**
 * `sbx node join`: spends a one-time join token at the Manager's API, sending this node's
 * certificate (the Manager pins it) and getting back its credential and the Manager's
 * certificate (this node pins it). The answer is kept in the node's data directory.
 */
import { SbxError, invalidArgument } from '../errors.js';
import { loadOrCreateIdentity } from '../runtime/remote/identity.js';
import { splitHostPort } from '../runtime/remote/hub.js';
import { NODE_NAME } from '../runtime/remote/trust-store.js';
import { identityDir, writeNodeState } from './state.js';
import type { NodeState } from './state.js';

export interface JoinOptions {
  /** The Manager's API, e.g. http://10.0.0.1:8080. */
  managerUrl: string;
  token: string;
  name: string;
  dataDir: string;
  /** Direct: the host:port the node listens on and the Manager dials. */
  listen?: string;
  /** Direct: the host:port the Manager dials when it differs from `listen` (NAT, 0.0.0.0). */
  advertise?: string;
  /** Reverse: dial the Manager instead of listening. */
  reverse?: boolean;
  /** Reverse: the Manager's node listener, when not the API's host with the port the Manager names. */
  managerNodeAddress?: string;
  /** Expect this Manager certificate (`sha256:…`): a join over plain HTTP can then not be redirected. */
  managerFingerprint?: string;
  maxBoxes?: number;
}

interface JoinAnswer {
  name: string;
  credential: string;
  managerCert: string;
  managerFingerprint: string;
  listenPort?: number;
}

export async function joinManager(o: JoinOptions): Promise<NodeState> {
  if (!NODE_NAME.test(o.name)) throw invalidArgument('name', 'a node name is 1-40 of a-z, 0-9 and -, starting and ending with a letter or digit');
  let base: URL;
  try {
    base = new URL(o.managerUrl);
  } catch {
    throw invalidArgument('managerUrl', `'${o.managerUrl}' is not a URL`);
  }
  if (!o.reverse) {
    if (!o.listen) throw invalidArgument('listen', 'a direct node says where it listens (--listen host:port), or joins with --reverse');
    splitHostPort(o.listen);
  }
  const advertise = o.advertise ?? o.listen;
  if (!o.reverse && o.advertise) splitHostPort(o.advertise);
  if (!o.reverse && advertise && /^(0\.0\.0\.0|\[?::\]?):/.test(advertise))
    throw invalidArgument('advertise', 'listening on all addresses: say the address the Manager dials with --advertise host:port');
  const identity = await loadOrCreateIdentity(identityDir(o.dataDir), `sbx-node-${o.name}`);
  const res = await fetch(new URL('/v1/nodes/join', base), {
    method: 'POST',
    // The token goes to this origin and no other.
    redirect: 'error',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      token: o.token,
      name: o.name,
      mode: o.reverse ? 'reverse' : 'direct',
      cert: identity.cert,
      ...(o.reverse ? {} : { address: advertise }),
      ...(o.maxBoxes ? { maxBoxes: o.maxBoxes } : {}),
    }),
  }).catch((err: Error) => {
    throw new SbxError('runtime_unavailable', `cannot reach the Manager at ${base.origin}: ${err.message}`);
  });
  const body = (await res.json().catch(() => ({}))) as Partial<JoinAnswer> & { error?: { code?: string; message?: string } };
  if (!res.ok) {
    const e = body.error;
    throw new SbxError(
      e?.code === 'conflict' || e?.code === 'unauthorized' || e?.code === 'invalid_argument' ? e.code : 'internal',
      e?.message ?? `join refused (HTTP ${res.status})`,
    );
  }
  if (typeof body.credential !== 'string' || typeof body.managerCert !== 'string' || typeof body.managerFingerprint !== 'string')
    throw new SbxError('internal', 'the Manager answered the join without a credential');
  if (o.managerFingerprint && o.managerFingerprint !== body.managerFingerprint)
    throw new SbxError('forbidden', `the Manager's certificate is ${body.managerFingerprint}, not the expected ${o.managerFingerprint}`);
  let managerNodeAddress: string | undefined;
  if (o.reverse) {
    if (o.managerNodeAddress) managerNodeAddress = o.managerNodeAddress;
    else if (body.listenPort) managerNodeAddress = `${base.hostname}:${body.listenPort}`;
    else throw new SbxError('not_available', 'the Manager has no node listener (nodes.listen): reverse nodes cannot reach it');
  }
  const state: NodeState = {
    name: o.name,
    mode: o.reverse ? 'reverse' : 'direct',
    managerUrl: base.origin,
    ...(o.reverse ? { managerNodeAddress } : { listen: o.listen }),
    credential: body.credential,
    managerCert: body.managerCert,
    managerFingerprint: body.managerFingerprint,
    joinedAt: new Date().toISOString(),
  };
  await writeNodeState(o.dataDir, state);
  return state;
}
