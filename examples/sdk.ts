import { Sbx } from '../src/client/index.js';

const sbx = new Sbx(); // SBX_URL and SBX_API_KEY: a running `sbx serve` and a key it made
const ws = await sbx.workspaces.create({ name: 'demo' });
const box = await sbx.create({ image: 'sbx-base:latest', workspaceId: ws.id });
await (await box.workspace()).writeFile('hello.txt', 'hi from the SDK\n');
const { exitCode, stdout } = await box.exec(['cat', `${box.mountPath}/hello.txt`]);
console.log(exitCode, stdout.trim()); // 0 hi from the SDK
await box.remove();
await sbx.workspaces.delete(ws.id);
