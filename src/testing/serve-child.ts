/**
 * Test support: `sbx serve` in a process of its own (the restart test kills it with SIGKILL).
 * Arguments are the serve command's flags; configuration comes from SBX_* variables.
 */
import { serveCommand } from '../cli/serve.js';

await serveCommand().parseAsync(process.argv.slice(2), { from: 'user' });
