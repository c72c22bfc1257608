// localAddresses() must know the address of a bridge with nothing on it yet: the first box's
// heartbeats go there (Docker's sbx-boxes0, the Kubernetes test cluster's sbxkube0 before its
// first pod), and node's networkInterfaces() leaves out interfaces without a carrier.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { networkInterfaces } from 'node:os';
import { test } from 'node:test';
import { fibLocalAddresses, hostEndpoints, localAddresses } from './host-endpoints.js';

test('the kernel’s local addresses are read from /proc/net/fib_trie, loopback’s left out', () => {
  const trie = [
    'Main:',
    '  +-- 0.0.0.0/0 3 0 4',
    '        +-- 10.244.0.0/24 2 0 2',
    '              |-- 10.244.0.0',
    '                 /24 link UNICAST',
    '              |-- 10.244.0.1',
    '                 /32 host LOCAL',
    '           |-- 10.244.0.255',
    '              /32 link BROADCAST',
    '           |-- 127.0.0.1',
    '              /32 host LOCAL',
    '        |-- 169.254.169.254',
    '           /32 link UNICAST',
    'Local:',
    '              |-- 10.244.0.1',
    '                 /32 host LOCAL',
    '              |-- 192.0.2.2',
    '                 /32 host LOCAL',
  ].join('\n');
  assert.deepEqual(fibLocalAddresses(trie), ['10.244.0.1', '192.0.2.2']);
  assert.deepEqual(fibLocalAddresses(''), []);
});

test(
  'a bridge without a carrier (no container on it yet) is one of this machine’s addresses',
  { skip: process.getuid?.() !== 0 ? 'needs root (ip link add)' : false },
  async () => {
    const dev = `sbxt-le${process.pid % 10000}`;
    const address = `10.255.${(process.pid >> 8) % 250}.${(process.pid % 250) + 1}`;
    execFileSync('ip', ['link', 'add', dev, 'type', 'bridge']);
    try {
      execFileSync('ip', ['addr', 'add', `${address}/32`, 'dev', dev]);
      execFileSync('ip', ['link', 'set', dev, 'up']);
      // Its one port is down, as a bridge whose containers all ended: no carrier.
      execFileSync('ip', ['link', 'add', `${dev}a`, 'type', 'veth', 'peer', 'name', `${dev}b`]);
      execFileSync('ip', ['link', 'set', `${dev}a`, 'master', dev]);
      // The kernel reports the lost carrier a moment later (linkwatch): wait for it.
      while (readFileSync(`/sys/class/net/${dev}/operstate`, 'latin1').trim() !== 'down') await sleep(20);
      const listed = Object.values(networkInterfaces())
        .flat()
        .some((i) => i?.address === address);
      assert.equal(listed, false, 'node does not list it (no carrier): what this test is about');
      assert.ok(localAddresses().has(address));
    } finally {
      // The veth first: deleting the bridge leaves its ports.
      try {
        execFileSync('ip', ['link', 'del', `${dev}a`], { stdio: 'ignore' });
      } catch {
        // Never made.
      }
      execFileSync('ip', ['link', 'del', dev]);
    }
  },
);

test('the machine’s addresses are read only when there is an endpoint to check (every create asks)', async () => {
  let reads = 0;
  const local = () => {
    reads++;
    return new Set(['10.0.0.1']);
  };
  const lookup = async () => [];
  assert.deepEqual(await hostEndpoints(undefined, undefined, { local, lookup }), []);
  assert.equal(reads, 0, 'no SBX_API_URL, no gRPC address: nothing to read');
  assert.deepEqual(await hostEndpoints('http://10.0.0.1:7070', '10.0.0.1:7071', { local, lookup }), [
    { address: '10.0.0.1', port: 7070 },
    { address: '10.0.0.1', port: 7071 },
  ]);
  assert.equal(reads, 1, 'read once for all the addresses of one call');
});
