/**
 * e2b sandboxes' ports through sbx's host-based proxy, with the e2b SDK 2.51 and 2.31 against a
 * real server and engine: `getHost(port)`'s `https://<port>-<id>.<domain>` end to end over sbx's
 * own TLS (a self-signed certificate made here, the wildcard name resolved to 127.0.0.1), the
 * traffic access token (`e2b-traffic-access-token`) that every sandbox gets unless the operator
 * made ports public, public ports where it did, and the MCP gateway: served from a template
 * `mcp-gateway` the operator maps, else e2b's 404 for an unknown template.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { tmpdir } from 'node:os';
import tls from 'node:tls';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import * as e2b from 'e2b';
import * as e2bV231 from 'e2b-v231';
import { Agent, buildConnector, setGlobalDispatcher } from 'undici';
import { DockerRuntime } from '../../../runtime/docker/runtime.js';
import { testEnv } from '../../../testing/env.js';
import { selfSignedCert } from '../../../testing/tls.js';
import { startTestServer } from '../../../testing/server.js';
import type { TestServer } from '../../../testing/server.js';
import { waitFor } from '../../../testing/wait.js';
import { TRAFFIC_TOKEN_HEADER } from './traffic.js';

const SDKS = [
  { name: 'e2b 2.51', mod: e2b as unknown as typeof e2b },
  { name: 'e2b 2.31', mod: e2bV231 as unknown as typeof e2b },
];
const DOMAIN = 'e2b.sbx.test';
const MCP_IMAGE = `sbx-test-mcp-gateway:${process.pid}`;
/** A stand-in for e2b's gateway: keeps its token where e2b's does and serves its config as /mcp on 50005. */
const FAKE_GATEWAY = `#!/bin/bash
set -e
[ "$1" = --config ] || { echo "usage: mcp-gateway --config <json>" >&2; exit 2; }
mkdir -p /etc/mcp-gateway /srv/mcp
printf %s "$GATEWAY_ACCESS_TOKEN" > /etc/mcp-gateway/.token
printf %s "$2" > /srv/mcp/mcp
nohup python3 -m http.server 50005 --directory /srv/mcp >/dev/null 2>&1 &
# Returns once it serves, as the real gateway's start does.
until (exec 3<>/dev/tcp/127.0.0.1/50005) 2>/dev/null; do kill -0 $! || exit 1; sleep 0.05; done
`;

const dir = mkdtempSync(join(tmpdir(), 'sbx-e2b-traffic-'));
const engine = new DockerRuntime(testEnv.engineAddr);
/** sbx serve with TLS and a proxy domain, e2b ports not public (the default). */
let secure: TestServer;
/** sbx serve over http with `e2b.publicTraffic: true` and no mcp-gateway template. */
let open: TestServer;
let alice: string;
let bob: string;
let openKey: string;

before(async () => {
  // The SAN: the wildcard the SDK's getHost names, and 127.0.0.1 for the API and envd URLs.
  const { certFile: cert, keyFile: key } = selfSignedCert(dir, 'sbx-test', `DNS:*.${DOMAIN},IP:127.0.0.1`);
  const ca = readFileSync(cert);
  // Trust the test CA in every TLS connection of this process, as NODE_EXTRA_CA_CERTS would at
  // startup: the 2.51 SDK makes its own undici Agent (the default CAs only), and Node 20 has no
  // call that adds a CA at run time.
  const connectTls = tls.connect.bind(tls) as (...args: unknown[]) => tls.TLSSocket;
  (tls as { connect: unknown }).connect = (...args: unknown[]) => {
    const o = args.find((a): a is tls.ConnectionOptions => typeof a === 'object' && a !== null);
    if (o && o.ca === undefined) o.ca = ca;
    return connectTls(...args);
  };
  secure = await startTestServer('e2b-traffic', {
    serve: { tls: { certFile: cert, keyFile: key }, proxyDomain: DOMAIN, e2b: { templates: { base: testEnv.e2bImage, 'mcp-gateway': MCP_IMAGE } } },
  });
  // For this process's fetch, a name under DOMAIN is this server (on its port: the SDK's URLs
  // name none, i.e. 443, where a deployment listens), its certificate checked for that name.
  const port = Number(new URL(secure.url).port);
  const connect = buildConnector({ ca });
  setGlobalDispatcher(
    new Agent({
      connect: (opts, cb) =>
        connect(opts.hostname.endsWith(`.${DOMAIN}`) ? { ...opts, port: String(port), servername: opts.hostname, hostname: '127.0.0.1' } : opts, cb),
    }),
  );
  alice = (await secure.server.keys.create({ name: 'alice', role: 'user' })).e2bKey;
  bob = (await secure.server.keys.create({ name: 'bob', role: 'user' })).e2bKey;
  // The mcp-gateway template's image: the e2b image with the stand-in gateway, alice's (a commit keeps its owner).
  const maker = await secure.manager.create({ image: testEnv.e2bImage, owner: 'alice' });
  try {
    const w = await maker.exec(['sh', '-c', 'cat > /bin/mcp-gateway && chmod 755 /bin/mcp-gateway'], { stdin: FAKE_GATEWAY, user: 'root' });
    assert.equal(w.exitCode, 0, w.stderr);
    await engine.commit(maker.containerId, MCP_IMAGE);
  } finally {
    await maker.remove();
  }
  open = await startTestServer('e2b-open', { serve: { proxyDomain: DOMAIN, e2b: { templates: { base: testEnv.e2bImage }, publicTraffic: true } } });
  openKey = (await open.server.keys.create({ name: 'carol', role: 'user' })).e2bKey;
});

after(async () => {
  await secure?.dispose();
  await open?.dispose();
  await engine.images.remove(MCP_IMAGE, { force: true }).catch(() => undefined);
  await engine.close();
  rmSync(dir, { recursive: true, force: true });
});

function opts(srv: TestServer, apiKey: string) {
  return { apiUrl: `${srv.url}/e2b/api`, sandboxUrl: `${srv.url}/e2b/envd`, apiKey, requestTimeoutMs: 60_000 };
}

/** An HTTP service on port 8080 of the sandbox: /hello.txt, and /headers (the request's headers as the box got them). */
const SERVER_PY = `import http.server, os
class Handler(http.server.SimpleHTTPRequestHandler):
    def do_GET(self):
        if self.path != "/headers":
            return super().do_GET()
        body = str(self.headers).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
os.chdir(os.path.expanduser("~/www"))
http.server.ThreadingHTTPServer(("", 8080), Handler).serve_forever()
`;
async function serve(sbx: e2b.Sandbox): Promise<void> {
  await sbx.files.write('/home/user/www/hello.txt', 'hello');
  await sbx.files.write('/home/user/server.py', SERVER_PY);
  await sbx.commands.run('exec python3 ~/server.py', { background: true });
}

/** GET on the plain-http server's host-based proxy (fetch cannot set Host). */
function viaHost(srv: TestServer, host: string, path: string, headers: Record<string, string> = {}): Promise<{ status: number; body: string }> {
  const u = new URL(srv.url);
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: u.hostname, port: u.port, path, headers: { host, ...headers } }, (res) => {
      let body = '';
      res.on('data', (c: Buffer) => (body += c.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

async function authFailures(srv: TestServer): Promise<number> {
  return Number(/^sbx_auth_failures_total (\d+)/m.exec((await srv.call('GET', '/metrics', { key: null })).text)?.[1] ?? 0);
}

for (const { name, mod } of SDKS) {
  const { Sandbox, SandboxError } = mod;

  describe(`${name}: ports through the proxy`, () => {
    test("getHost's https URL works over sbx's TLS with the sandbox's traffic token, and only with it", async () => {
      const [sbx, other] = await Promise.all([
        Sandbox.create('base', opts(secure, alice)),
        Sandbox.create('base', { ...opts(secure, alice), network: { allowPublicTraffic: false } }),
      ]);
      try {
        assert.equal(
          typeof sbx.trafficAccessToken,
          'string',
          'a token although the sandbox did not refuse public traffic: sbx ports are not public by default',
        );
        assert.equal(typeof other.trafficAccessToken, 'string');
        assert.notEqual(sbx.trafficAccessToken, other.trafficAccessToken);
        await serve(sbx);
        const url = `https://${sbx.getHost(8080)}`;
        assert.equal(url, `https://8080-${sbx.sandboxId}.${DOMAIN}`);
        const withToken = await waitFor(
          async () => {
            const r = await fetch(`${url}/hello.txt`, { headers: { [TRAFFIC_TOKEN_HEADER]: sbx.trafficAccessToken! } });
            return r.status === 200 ? r : undefined;
          },
          { what: 'the sandbox’s HTTP server through the proxy' },
        );
        assert.equal(await withToken.text(), 'hello');
        // The box never sees the token (it is the proxy's credential, as Authorization is).
        const headers = await (await fetch(`${url}/headers`, { headers: { [TRAFFIC_TOKEN_HEADER]: sbx.trafficAccessToken! } })).text();
        assert.match(headers, /^host: 8080-/im);
        assert.doesNotMatch(headers, /traffic/i);
        const failures = await authFailures(secure);
        assert.equal((await fetch(`${url}/hello.txt`)).status, 403, "no credential: e2b's 403");
        assert.equal(
          (await fetch(`${url}/hello.txt`, { headers: { [TRAFFIC_TOKEN_HEADER]: other.trafficAccessToken! } })).status,
          401,
          "another sandbox's token",
        );
        assert.equal((await fetch(`${url}/hello.txt`, { headers: { [TRAFFIC_TOKEN_HEADER]: 'x'.repeat(43) } })).status, 401);
        assert.equal(await authFailures(secure), failures + 3, 'each refusal counted by the auth limiter');
        // sbx's own credential keeps working: the owner's key.
        const byKey = await fetch(`${url}/hello.txt`, { headers: { authorization: `Bearer ${alice}` } });
        assert.equal(byKey.status, 200);
        // Reconnecting gives the same token (it is the sandbox's), and connect answers it too.
        const again = await Sandbox.connect(sbx.sandboxId, opts(secure, alice));
        assert.equal(again.trafficAccessToken, sbx.trafficAccessToken);
        const byBob = await fetch(`${url}/hello.txt`, { headers: { authorization: `Bearer ${bob}` } });
        assert.equal(byBob.status, 404, "another owner's key: as a missing box");
      } finally {
        await Promise.all([sbx.kill(), other.kill()]);
      }
      // Bound to the box's life: gone with it.
      assert.notEqual((await fetch(`https://${sbx.getHost(8080)}/hello.txt`, { headers: { [TRAFFIC_TOKEN_HEADER]: sbx.trafficAccessToken! } })).status, 200);
    });

    test('with e2b.publicTraffic, ports are public unless the sandbox sets allowPublicTraffic: false', async () => {
      const [pub, priv] = await Promise.all([
        Sandbox.create('base', opts(open, openKey)),
        Sandbox.create('base', { ...opts(open, openKey), network: { allowPublicTraffic: false } }),
      ]);
      try {
        assert.equal(pub.trafficAccessToken, undefined, 'a public sandbox has no token (null on the wire)');
        assert.equal(typeof priv.trafficAccessToken, 'string');
        await Promise.all([serve(pub), serve(priv)]);
        const pubHost = pub.getHost(8080);
        await waitFor(async () => (await viaHost(open, pubHost, '/hello.txt')).status === 200, { what: 'the public port, with no credential' });
        assert.equal((await viaHost(open, pubHost, '/hello.txt')).body, 'hello');
        const privHost = priv.getHost(8080);
        assert.equal((await viaHost(open, privHost, '/hello.txt')).status, 403);
        await waitFor(async () => (await viaHost(open, privHost, '/hello.txt', { [TRAFFIC_TOKEN_HEADER]: priv.trafficAccessToken! })).status === 200, {
          what: 'the private port with its token',
        });
        // A box made through sbx's own API is no e2b sandbox: sbx's credentials as ever.
        const own = await open.manager.create({ image: testEnv.e2bImage, owner: 'carol', proxyAllPorts: true });
        try {
          assert.equal((await viaHost(open, `8080-${own.id}.${DOMAIN}`, '/')).status, 401);
        } finally {
          await own.remove();
        }
      } finally {
        await Promise.all([pub.kill(), priv.kill()]);
      }
    });

    test('mcp without an mcp-gateway template: e2b’s 404 for an unknown template, naming it', async () => {
      await assert.rejects(Sandbox.create({ ...opts(open, openKey), mcp: { exa: { apiKey: 'k' } } } as never), (e: Error) => {
        assert.ok(e instanceof SandboxError, String(e));
        assert.match(e.message, /^404: template 'mcp-gateway' not found/);
        return true;
      });
    });

    test('mcp with an mcp-gateway template: the SDK starts the gateway and reaches it at getMcpUrl', async () => {
      const mcp = { exa: { apiKey: 'k' } };
      const sbx = await Sandbox.create({ ...opts(secure, alice), mcp } as never);
      try {
        const info = await sbx.getInfo();
        assert.equal(info.templateId, 'mcp-gateway');
        const mcpUrl = sbx.getMcpUrl();
        assert.equal(mcpUrl, `https://50005-${sbx.sandboxId}.${DOMAIN}/mcp`);
        const token = await sbx.getMcpToken();
        assert.equal(await sbx.files.read('/etc/mcp-gateway/.token', { user: 'root' }), token, 'the gateway got the SDK’s token');
        const res = await fetch(mcpUrl, { headers: { [TRAFFIC_TOKEN_HEADER]: sbx.trafficAccessToken! } });
        assert.equal(res.status, 200);
        assert.deepEqual(JSON.parse(await res.text()), mcp);
      } finally {
        await sbx.kill();
      }
    });
  });
}

test('a label claiming public traffic opens nothing where the operator did not allow it', async () => {
  // A box whose labels say e2b sandbox and public, set through sbx's own API (labels are the caller's).
  const box = await secure.manager.create({
    image: testEnv.e2bImage,
    owner: 'alice',
    proxyAllPorts: true,
    labels: { 'e2b.template': 'base', 'e2b.traffic': 'public' },
  });
  try {
    assert.equal((await fetch(`https://8080-${box.id}.${DOMAIN}/`)).status, 403);
    const connected = await e2b.Sandbox.connect(box.id, opts(secure, alice));
    assert.equal(typeof connected.trafficAccessToken, 'string', 'connect answers a token: its ports are not public');
  } finally {
    await box.remove();
  }
});
