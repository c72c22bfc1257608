import assert from 'node:assert/strict';
import { test } from 'node:test';
import { isSbxError } from '../../errors.js';
import { isKubeAddress, parseKubeAddress } from './address.js';

test('k8s:// takes kubeconfig, context and namespace as query options', () => {
  assert.deepEqual(parseKubeAddress('k8s://'), { raw: 'k8s://' });
  assert.deepEqual(parseKubeAddress('k8s://?kubeconfig=/var/lib/k/kc&context=ci&namespace=sbx-test'), {
    raw: 'k8s://?kubeconfig=/var/lib/k/kc&context=ci&namespace=sbx-test',
    kubeconfig: '/var/lib/k/kc',
    context: 'ci',
    namespace: 'sbx-test',
  });
  assert.equal(parseKubeAddress('kubernetes:///?namespace=a').namespace, 'a');
  assert.equal(isKubeAddress('k8s://'), true);
  assert.equal(isKubeAddress('tcp://h:2375'), false);
});

test('bad Kubernetes addresses are invalid_argument naming addr', () => {
  for (const bad of [
    'k8s://cluster.example',
    'k8s://?foo=1',
    'k8s://?kubeconfig=rel/path',
    'k8s://?namespace=Bad_NS',
    'k8s://?context=',
    'k8s://?context=a&context=b',
    'k8s:/x',
  ]) {
    assert.throws(
      () => parseKubeAddress(bad),
      (e) => isSbxError(e, 'invalid_argument') && e.details?.['field'] === 'addr',
      bad,
    );
  }
});

test('openRuntime opens k8s:// addresses as a KubernetesRuntime, without touching the cluster', async () => {
  const { openRuntime } = await import('../index.js');
  const rt = openRuntime('k8s://?kubeconfig=/nonexistent/kubeconfig&namespace=sbx');
  assert.equal(rt.constructor.name, 'KubernetesRuntime');
  assert.equal(rt.address, 'k8s://?kubeconfig=/nonexistent/kubeconfig&namespace=sbx');
  assert.equal(rt.capabilities.stopStart, false);
  // The kubeconfig is read at the first call, which says what is wrong with it.
  await assert.rejects(rt.ping(), (e) => isSbxError(e, 'invalid_argument') && e.details?.['field'] === 'addr');
});
