/** Self-signed certificates for tests that serve or trust TLS, made with the host's openssl. */
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';

/**
 * A fresh RSA key and a self-signed certificate for `/CN=<name>`, valid one day, written as
 * `<name>.key` and `<name>.crt` under `dir`; `subjectAltName` as openssl takes it
 * (`DNS:*.example.test,IP:127.0.0.1`), none when not given.
 */
export function selfSignedCert(dir: string, name: string, subjectAltName?: string): { keyFile: string; certFile: string } {
  const keyFile = join(dir, `${name}.key`);
  const certFile = join(dir, `${name}.crt`);
  const san = subjectAltName ? ['-addext', `subjectAltName=${subjectAltName}`] : [];
  execFileSync(
    'openssl',
    ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', keyFile, '-out', certFile, '-days', '1', '-subj', `/CN=${name}`, ...san],
    {
      stdio: 'ignore',
    },
  );
  return { keyFile, certFile };
}
