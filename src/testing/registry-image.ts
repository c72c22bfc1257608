/**
 * An image that is in the test registry and not on the engine, under a name no other test uses:
 * the shared pull image re-tagged, pushed and untagged here. Tests of "pull when missing" need
 * one; removing the shared pull image instead races with every other test that pulls it.
 */
import Docker from 'dockerode';
import { testEnv } from './env.js';

let made = 0;

/** A fresh `<registry>/sbx/<prefix>-<pid>-<n>:latest`, pushed to the registry, absent from the engine. */
export async function registryOnlyImage(prefix: string): Promise<string> {
  const docker = new Docker();
  const repo = `${testEnv.registry}/sbx/${prefix}-${process.pid}-${++made}`;
  const source = docker.getImage(testEnv.pullImage);
  await source.inspect().catch(async () => {
    await new Promise<void>((resolve, reject) =>
      docker.pull(testEnv.pullImage, {}, (err: Error | null, stream?: NodeJS.ReadableStream) => {
        if (err || !stream) return reject(err ?? new Error('no pull stream'));
        docker.modem.followProgress(stream, (e: Error | null) => (e ? reject(e) : resolve()));
      }),
    );
  });
  await source.tag({ repo, tag: 'latest' });
  const image = docker.getImage(`${repo}:latest`);
  const pushed = (await image.push({ authconfig: { serveraddress: testEnv.registry } })) as NodeJS.ReadableStream;
  await new Promise<void>((resolve, reject) =>
    docker.modem.followProgress(pushed, (err: Error | null, events: Array<{ error?: string }>) => {
      const failed = err ?? (events.find((e) => e.error) ? new Error(events.find((e) => e.error)!.error) : null);
      return failed ? reject(failed) : resolve();
    }),
  );
  await image.remove();
  return `${repo}:latest`;
}

/** Removes the engine's copy of an image made by registryOnlyImage (the registry keeps its small manifest). */
export async function removeLocalImage(ref: string): Promise<void> {
  await new Docker()
    .getImage(ref)
    .remove({ force: true })
    .catch(() => undefined);
}
