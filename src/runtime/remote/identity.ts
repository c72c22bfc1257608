/**
 * A TLS identity of one end of a node connection (a Manager's, a node's): a private key and a
 * self-signed certificate, kept in a directory of its own. Each side pins the other's certificate
 * (exchanged at join, docs/nodes.md), so no CA is needed; the certificate is only a carrier for
 * the public key. node-forge builds the certificate (Node can parse X.509 but not issue it); the
 * key is Node's own.
 */
import { X509Certificate, generateKeyPairSync, randomBytes } from 'node:crypto';
import { mkdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { pki } from 'node-forge';
import { writeFileAtomic } from '../../util/atomic-file.js';

export interface TlsIdentity {
  /** PEM private key (PKCS#8). */
  key: string;
  /** PEM self-signed certificate. */
  cert: string;
  /** `sha256:<hex>` of the certificate (certificateFingerprint). */
  fingerprint: string;
}

/** The pin of a certificate: `sha256:` and the lowercase hex SHA-256 of its DER encoding. */
export function certificateFingerprint(certPem: string): string {
  return 'sha256:' + new X509Certificate(certPem).fingerprint256.replaceAll(':', '').toLowerCase();
}

/** Whether a string is a well-formed certificate pin. */
export function isFingerprint(value: string): boolean {
  return /^sha256:[0-9a-f]{64}$/.test(value);
}

/** A new identity: an RSA 2048 key and a certificate for `commonName`, valid ten years, for TLS server and client use. */
export async function createIdentity(commonName: string): Promise<TlsIdentity> {
  // Loaded here: only a Manager with nodes, or a node, ever makes an identity.
  const { default: forge } = await import('node-forge');
  const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const keyPem = privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
  const cert = forge.pki.createCertificate();
  cert.publicKey = forge.pki.publicKeyFromPem(publicKey.export({ type: 'spki', format: 'pem' }).toString());
  // A random positive serial: two identities for one name never look alike.
  cert.serialNumber = '01' + randomBytes(15).toString('hex');
  const now = new Date();
  cert.validity.notBefore = new Date(now.getTime() - 60_000);
  cert.validity.notAfter = new Date(now.getTime() + 10 * 365 * 24 * 3600_000);
  const subject = [{ name: 'commonName', value: commonName }];
  cert.setSubject(subject);
  cert.setIssuer(subject);
  cert.setExtensions([
    { name: 'basicConstraints', cA: false },
    { name: 'keyUsage', digitalSignature: true, keyEncipherment: true },
    { name: 'extKeyUsage', serverAuth: true, clientAuth: true },
  ]);
  cert.sign(forge.pki.privateKeyFromPem(keyPem) as pki.rsa.PrivateKey, forge.md.sha256.create());
  const certPem = forge.pki.certificateToPem(cert);
  return { key: keyPem, cert: certPem, fingerprint: certificateFingerprint(certPem) };
}

/**
 * The identity kept in `dir` (`tls.key`, `tls.crt`), made on first use. The key file is 0600 and
 * written before the certificate, so a crash in between leaves no certificate without its key.
 */
export async function loadOrCreateIdentity(dir: string, commonName: string): Promise<TlsIdentity> {
  const keyPath = join(dir, 'tls.key');
  const certPath = join(dir, 'tls.crt');
  try {
    const [key, cert] = await Promise.all([readFile(keyPath, 'utf8'), readFile(certPath, 'utf8')]);
    return { key, cert, fingerprint: certificateFingerprint(cert) };
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
  await mkdir(dir, { recursive: true, mode: 0o700 });
  const id = await createIdentity(commonName);
  await writeFileAtomic(keyPath, id.key, 0o600);
  await writeFileAtomic(certPath, id.cert, 0o644);
  return id;
}
