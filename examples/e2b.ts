import { Sandbox } from 'e2b';

// Unchanged e2b code: E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY point it at `sbx serve`.
const sandbox = await Sandbox.create(); // template `base`: the sbx-e2b image
const result = await sandbox.commands.run('echo "hello from $(whoami)"');
console.log(result.stdout.trim()); // hello from user
await sandbox.files.write('/home/user/app.sh', 'echo 42\n');
console.log((await sandbox.commands.run('bash app.sh')).stdout.trim()); // 42
const server = await sandbox.commands.run('sleep 60', { background: true });
console.log((await sandbox.commands.list()).some((p) => p.pid === server.pid)); // true
await sandbox.kill();
