/** What terminal.ts loads when the first terminal opens: xterm, its fit addon and its CSS, a chunk of their own. */
import '@xterm/xterm/css/xterm.css';

export { Terminal } from '@xterm/xterm';
export { FitAddon } from '@xterm/addon-fit';
