/**
 * The tools a user reaches for first in a box work in the images sbx builds (images/, built by
 * scripts/images.sh): wget against a real HTTP server, nslookup against a real resolver, a tar
 * round trip, a shell pipeline's output and exit statuses. sbx-base and the images built on it,
 * as sbx's `standard` box with the in-box agent, on a real engine. (sbx-e2b is Debian, not busybox:
 * its tools are src/server/e2b/base-template.test.ts's.)
 *
 * The servers are this test's own, on the host's address on Docker's default bridge (the box's
 * gateway): boxes on sbx's isolated network may not reach the host (docs/network.md), boxes on
 * `bridge` may. Debian's busybox-static crashed on `wget -T` (SIGSEGV, exit 139, before it even
 * connected), which scripts/busybox.sh's build fixes.
 */
import assert from 'node:assert/strict';
import { createSocket } from 'node:dgram';
import type { Socket } from 'node:dgram';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { assertNoContainersLeft } from '../../testing/cleanup.js';
import { TEST_LABEL, testEnv, testRunId } from '../../testing/env.js';
import type { ExecResult } from '../types.js';
import { DockerRuntime } from './runtime.js';

const runId = testRunId('base-image-tools');
const rt = new DockerRuntime(testEnv.engineAddr);
/** The name the test's resolver knows, and the address it gives (TEST-NET-2: nothing is dialled there). */
const DNS_NAME = 'tools.sbx.test';
const DNS_ADDRESS = '198.51.100.23';

after(async () => {
  await assertNoContainersLeft(rt, runId);
  await rt.close();
});

/** Runs `script` with /bin/sh in the box; `out` names the command in a failing assertion's message. */
async function sh(box: string, script: string): Promise<ExecResult & { out: string }> {
  const r = await rt.exec(box, ['sh', '-c', script], { timeoutMs: 60_000 });
  return { ...r, out: `${script}\nexit ${r.exitCode}\nstdout: ${r.stdout}\nstderr: ${r.stderr}` };
}

/**
 * A DNS server on UDP that answers A queries for DNS_NAME with DNS_ADDRESS and nothing else
 * (no records for other types, NXDOMAIN for other names), counting the queries it gets.
 */
function startResolver(host: string): Promise<{ socket: Socket; port: number; queries: string[] }> {
  const socket = createSocket('udp4');
  const queries: string[] = [];
  socket.on('message', (msg, from) => {
    if (msg.length < 17) return;
    // The question: length-prefixed labels from offset 12, then QTYPE and QCLASS.
    const labels: string[] = [];
    let at = 12;
    while (at < msg.length && msg[at]! > 0) {
      labels.push(msg.subarray(at + 1, at + 1 + msg[at]!).toString('latin1'));
      at += 1 + msg[at]!;
    }
    const questionEnd = at + 5;
    if (questionEnd > msg.length) return;
    const name = labels.join('.').toLowerCase();
    const type = msg.readUInt16BE(at + 1);
    queries.push(`${name}/${type}`);
    const known = name === DNS_NAME;
    const answer = known && type === 1 ? Buffer.from([0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, ...DNS_ADDRESS.split('.').map(Number)]) : Buffer.alloc(0);
    const header = Buffer.alloc(12);
    msg.copy(header, 0, 0, 2);
    // QR, the query's RD, RA; NXDOMAIN for a name it does not know.
    header.writeUInt16BE(0x8080 | (msg.readUInt16BE(2) & 0x0100) | (known ? 0 : 3), 2);
    header.writeUInt16BE(1, 4);
    header.writeUInt16BE(answer.length ? 1 : 0, 6);
    socket.send(Buffer.concat([header, msg.subarray(12, questionEnd), answer]), from.port, from.address);
  });
  return new Promise((resolve, reject) => {
    socket.once('error', reject);
    socket.bind(0, host, () => resolve({ socket, port: socket.address().port, queries }));
  });
}

for (const [label, image] of [['sbx-base', testEnv.baseImage]] as const) {
  describe(`${label}'s tools (${image}, ${runId})`, () => {
    let box: string;
    /** The host's address on the box's network: where the test's servers listen. */
    let gateway: string;

    before(async () => {
      box = await rt.create({
        image,
        network: 'bridge',
        // sbx's 'standard' box (src/sandbox/security.ts).
        security: {
          noNewPrivileges: true,
          capDrop: ['ALL'],
          capAdd: ['CHOWN', 'DAC_OVERRIDE', 'FOWNER', 'FSETID', 'KILL', 'SETGID', 'SETUID', 'NET_BIND_SERVICE'],
        },
        labels: { [TEST_LABEL]: runId },
      });
      await rt.start(box);
      const route = await sh(box, 'ip route show default');
      gateway = /^default via (\d+\.\d+\.\d+\.\d+)/m.exec(route.stdout)?.[1] ?? '';
      assert.ok(gateway, `no default route in the box: ${route.out}`);
    });

    after(async () => {
      if (box) await rt.remove(box, { force: true });
    });

    test('wget fetches from a real HTTP server, with and without -T, and reports a refused connection', async () => {
      const paths: string[] = [];
      const server = http.createServer((req, res) => {
        paths.push(req.url ?? '');
        res.writeHead(200, { 'content-type': 'text/plain' }).end(`hello from the host: ${req.url}\n`);
      });
      await new Promise<void>((resolve, reject) => server.once('error', reject).listen(0, gateway, resolve));
      const url = `http://${gateway}:${(server.address() as AddressInfo).port}`;
      try {
        // Debian's busybox-static died here of SIGSEGV (exit 139) before connecting.
        const timed = await sh(box, `wget -q -T 10 -O - ${url}/timed`);
        assert.equal(timed.exitCode, 0, timed.out);
        assert.equal(timed.stdout, 'hello from the host: /timed\n', timed.out);

        const plain = await sh(box, `wget -O - ${url}/plain`);
        assert.equal(plain.exitCode, 0, plain.out);
        assert.equal(plain.stdout, 'hello from the host: /plain\n', plain.out);

        const saved = await sh(box, `cd /tmp && wget -q -T 10 ${url}/saved.txt && cat saved.txt`);
        assert.equal(saved.exitCode, 0, saved.out);
        assert.equal(saved.stdout, 'hello from the host: /saved.txt\n', saved.out);
        assert.deepEqual(paths, ['/timed', '/plain', '/saved.txt']);
      } finally {
        await new Promise<void>((resolve) => server.close(() => resolve()));
      }
      // The port is closed now: an error and exit 1, not a crash.
      const refused = await sh(box, `wget -q -T 10 -O - ${url}/gone`);
      assert.equal(refused.exitCode, 1, refused.out);
      assert.match(refused.stderr, /can't connect|refused/i, refused.out);
    });

    test("wget resolves a name through the box's /etc/hosts", async () => {
      // busybox httpd in the box on loopback, reached by name: the resolver of the static binary.
      const r = await sh(
        box,
        'mkdir -p /tmp/www && echo by-name > /tmp/www/index.html && httpd -p 127.0.0.1:18080 -h /tmp/www && ' +
          'wget -q -T 10 -O - http://localhost:18080/; s=$?; kill $(pidof httpd); exit $s',
      );
      assert.equal(r.exitCode, 0, r.out);
      assert.equal(r.stdout, 'by-name\n', r.out);
    });

    test('nslookup asks a real resolver and prints its answer', async () => {
      const resolver = await startResolver(gateway);
      try {
        const found = await sh(box, `nslookup -type=a -port=${resolver.port} ${DNS_NAME} ${gateway}`);
        assert.equal(found.exitCode, 0, found.out);
        assert.match(found.stdout, new RegExp(`Address: ${DNS_ADDRESS.replaceAll('.', '\\.')}\\b`), found.out);
        assert.ok(resolver.queries.includes(`${DNS_NAME}/1`), `the resolver got ${JSON.stringify(resolver.queries)}`);

        const missing = await sh(box, `nslookup -type=a -port=${resolver.port} nowhere.sbx.test ${gateway}`);
        assert.equal(missing.exitCode, 1, missing.out);
        assert.match(missing.stdout + missing.stderr, /NXDOMAIN/, missing.out);
      } finally {
        resolver.socket.close();
      }
    });

    test('tar: a gzipped archive of a tree extracts to the same tree', async () => {
      const r = await sh(
        box,
        [
          'set -e',
          'rm -rf /tmp/tar && mkdir -p /tmp/tar/src/dir/sub /tmp/tar/out && cd /tmp/tar/src',
          "printf 'one\\n' > dir/a.txt && printf 'two\\n' > dir/sub/b.txt && head -c 100000 /dev/urandom > dir/sub/blob",
          'ln -s a.txt dir/link && chmod 750 dir/sub',
          'tar -czf ../t.tgz dir',
          'tar -tzf ../t.tgz | sort',
          'tar -xzf ../t.tgz -C ../out',
          'diff -r dir ../out/dir',
          'readlink ../out/dir/link && stat -c %a ../out/dir/sub',
        ].join('\n'),
      );
      assert.equal(r.exitCode, 0, r.out);
      assert.equal(r.stdout, ['dir/', 'dir/a.txt', 'dir/link', 'dir/sub/', 'dir/sub/b.txt', 'dir/sub/blob', 'a.txt', '750', ''].join('\n'), r.out);
    });

    test('sh: a pipeline, its exit status, pipefail and a subshell exit code', async () => {
      const r = await sh(
        box,
        [
          "printf 'pear\\napple\\nfig\\napple\\n' | sort | uniq -c | awk '{ print $2 \"=\" $1 }' | tr '\\n' ' '; echo",
          'false | true; echo "last=$?"',
          'set -o pipefail; false | true; echo "pipefail=$?"; set +o pipefail',
          '(exit 7); echo "subshell=$?"',
          'x=$(echo inner | wc -c); echo "captured=$x"',
          'exit 3',
        ].join('\n'),
      );
      assert.equal(r.exitCode, 3, r.out);
      assert.equal(r.stdout, 'apple=2 fig=1 pear=1 \nlast=0\npipefail=1\nsubshell=7\ncaptured=6\n', r.out);
    });
  });
}
