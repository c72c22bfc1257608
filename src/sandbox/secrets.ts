/**
 * The Manager's secrets and the tokens signed with them: box tokens (a box's heartbeat
 * credential), port access tokens (the proxy's), and keys derived per feature (e2b envd access
 * tokens). One secret (config `tokenSecret`, else generated once into the data dir), loaded at
 * first use; every other key is an HMAC of it under its own label, so no two kinds of token can
 * stand for each other. A token is bound to one box's life through the box's nonce.
 */
import { createHmac } from 'node:crypto';
import { SbxError } from '../errors.js';
import { portTokenKey, signPortToken, verifyPortToken } from './port-tokens.js';
import type { PortGrant } from './port-tokens.js';
import { loadTokenSecret } from './token-secret.js';
import { BoxTokenService } from './tokens.js';

export interface SecretsOptions {
  /** The configured secret; absent, one generated once and kept in `dataDir`. */
  tokenSecret: string | undefined;
  dataDir: string;
  tokenTtlMs: number;
  now: () => number;
  /** The token nonce of the live box `boxId`, or undefined when there is none. */
  nonceOf(boxId: string): string | undefined;
}

export class BoxSecrets {
  private secret: Promise<Buffer> | undefined;
  private service: Promise<BoxTokenService> | undefined;
  private portKey: Promise<Buffer> | undefined;

  constructor(private readonly opts: SecretsOptions) {}

  private tokenSecret(): Promise<Buffer> {
    this.secret ??= this.opts.tokenSecret ? Promise.resolve(Buffer.from(this.opts.tokenSecret)) : loadTokenSecret(this.opts.dataDir);
    return this.secret;
  }

  private tokens(): Promise<BoxTokenService> {
    this.service ??= this.tokenSecret().then((secret) => new BoxTokenService(secret, this.opts.now));
    return this.service;
  }

  private nonce(boxId: string): string {
    const nonce = this.opts.nonceOf(boxId);
    if (nonce === undefined) throw new SbxError('not_found', `box '${boxId}' not found`, { details: { id: boxId } });
    return nonce;
  }

  /** A box token for box `boxId` of nonce `nonce` (handed to the box as SBX_TOKEN). */
  async issueBoxToken(boxId: string, nonce: string): Promise<string> {
    return (await this.tokens()).issue(boxId, nonce, this.opts.tokenTtlMs);
  }

  /** The box a token speaks for; unauthorized if forged, expired, or its box is gone. */
  async verifyBoxToken(token: string): Promise<string> {
    const grant = (await this.tokens()).verify(token);
    if (this.opts.nonceOf(grant.boxId) !== grant.nonce) throw new SbxError('unauthorized', 'box token does not belong to a live box');
    return grant.boxId;
  }

  /** A fresh token for the same box, given a valid one. */
  async refreshBoxToken(token: string): Promise<string> {
    const id = await this.verifyBoxToken(token);
    return this.issueBoxToken(id, this.nonce(id));
  }

  /** The key of port access tokens (the proxy's): derived from the secret under its own label. */
  portTokenKey(): Promise<Buffer> {
    this.portKey ??= this.tokenSecret().then(portTokenKey);
    return this.portKey;
  }

  async signPortToken(grant: PortGrant): Promise<string> {
    return signPortToken(await this.portTokenKey(), grant);
  }

  /**
   * What a live port access token for this box and port grants (on the Manager's clock): throws
   * unauthorized or forbidden otherwise, unauthorized too when the box it was signed for is gone
   * (a later box under the same id has another nonce). Whether its key is still live is the server's.
   */
  async verifyPortToken(token: string, want: { boxId: string; port: number }): Promise<PortGrant> {
    const grant = verifyPortToken(await this.portTokenKey(), token, { ...want, now: this.opts.now() });
    if (this.opts.nonceOf(grant.boxId) !== grant.nonce)
      throw new SbxError('unauthorized', 'this port access token is for a box that was removed; ask for a new URL');
    return grant;
  }

  /**
   * A key of its own for a feature that signs its own tokens (e.g. the e2b surface's envd access
   * tokens): HMAC(secret, label), so no two labels' tokens can stand for each other or for a box token.
   */
  async derivedKey(label: string): Promise<Buffer> {
    return createHmac('sha256', await this.tokenSecret())
      .update(`sbx derived key: ${label}`)
      .digest();
  }

  /**
   * A secret bound to one live box under `label` (the e2b envd access token): HMAC of the box id
   * and the box's own random nonce under derivedKey(label), so it dies with the box and a later
   * box under the same id gets another. not_found for a box this Manager does not know.
   */
  async boxSecret(label: string, boxId: string): Promise<Buffer> {
    const nonce = this.nonce(boxId);
    return createHmac('sha256', await this.derivedKey(label))
      .update(`${boxId}.${nonce}`)
      .digest();
  }
}
