/**
 * A second, disposable Docker Engine for a test file (scripts/engine2.sh): its own network
 * namespace (no link to the host: the host cannot dial its boxes, so their agents neither), data
 * root and socket, under a name of the file's, with dockerd arguments of its own (a remap, ...).
 * `up` is idempotent and copes with what a killed run left; `down` removes everything.
 */
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const SCRIPT = fileURLToPath(new URL('../../scripts/engine2.sh', import.meta.url));
const run = promisify(execFile);

export interface Engine2Options {
  /** SBX_ENGINE2_NAME: the netns, /run/<name>, /var/lib/<name>. */
  name: string;
  /** Copied from the main engine (default: the base image). */
  images: string[];
  /** More dockerd arguments (SBX_ENGINE2_DOCKERD_ARGS), e.g. `['--userns-remap=default']`. */
  dockerdArgs?: string[];
  /** Its daemon.json (SBX_ENGINE2_CONFIG; default `{}`), e.g. runtimes. */
  config?: string;
}

export class Engine2 {
  constructor(private readonly o: Engine2Options) {}

  /** Runs scripts/engine2.sh with this engine's settings; returns its report line and how long it took. */
  async run(...args: string[]): Promise<{ out: string; ms: number }> {
    const t = performance.now();
    const env = {
      ...process.env,
      SBX_ENGINE2_NAME: this.o.name,
      SBX_ENGINE2_IMAGES: this.o.images.join(' '),
      SBX_ENGINE2_DOCKERD_ARGS: (this.o.dockerdArgs ?? []).join(' '),
      SBX_ENGINE2_CONFIG: this.o.config ?? '{}',
    };
    try {
      const { stdout } = await run('bash', [SCRIPT, ...args], { timeout: 180_000, env });
      return { out: stdout.trim(), ms: Math.round(performance.now() - t) };
    } catch (err) {
      const e = err as { stderr?: string; message: string };
      throw new Error(`engine2.sh ${args.join(' ')} (${this.o.name}) failed: ${e.stderr || e.message}`);
    }
  }

  /** Starts it (or finds it running with these arguments and config); its address, `unix://…`. */
  async up(): Promise<{ addr: string; out: string; ms: number }> {
    const up = await this.run('up');
    const addr = /unix:\/\/\S+/.exec((await this.run('env')).out)?.[0];
    if (!addr) throw new Error(`engine2.sh env (${this.o.name}) printed no unix:// address`);
    return { addr, ...up };
  }

  async down(): Promise<void> {
    await this.run('down');
  }
}
