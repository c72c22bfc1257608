// In-box test services for attach/proxy tests:
//   :3000  WebSocket echo (every text or binary message comes back as it was sent);
//          a plain HTTP GET answers 200 so HTTP proxying can be tested on the same port.
//   :3001  Server-Sent Events: any GET gets `data: event-0` .. `data: event-4`, 100 ms apart, then the end;
//          except GET /rich: events with id, event, retry, multi-line data and a comment, CRLF line
//          ends, then the end; and GET /forever: `data: tick-<n>` every 200 ms until the client goes.
// Ports above 1024, so they run as uid 1000 with every capability dropped.
import http from 'node:http';
import { WebSocketServer } from 'ws';

const WS_PORT = 3000;
const SSE_PORT = 3001;
const SSE_EVENTS = 5;
const SSE_INTERVAL_MS = 100;

const wsHttp = http.createServer((req, res) => {
  res.writeHead(200, { 'content-type': 'text/plain' });
  res.end(`sbx-test websocket echo on :${WS_PORT}\n`);
});
new WebSocketServer({ server: wsHttp }).on('connection', (socket) => {
  socket.on('message', (data, isBinary) => socket.send(data, { binary: isBinary }));
  socket.on('error', () => socket.terminate());
});
wsHttp.listen(WS_PORT, '0.0.0.0');

http
  .createServer((req, res) => {
    res.writeHead(200, {
      'content-type': 'text/event-stream',
      'cache-control': 'no-cache',
      connection: 'keep-alive',
    });
    const path = (req.url ?? '/').split('?')[0];
    if (path === '/rich') {
      res.end(
        ': a comment\r\n' +
          'id: 1\r\nevent: greeting\r\ndata: hello\r\ndata:  two lines\r\nretry: 2500\r\n\r\n' +
          'data: carries id 1\r\n\r\n' +
          'id: 2\r\nevent: bye\r\ndata: {"done":true}\r\n\r\n',
      );
      return;
    }
    if (path === '/forever') {
      let n = 0;
      const tick = setInterval(() => res.write(`data: tick-${n++}\n\n`), 200);
      req.on('close', () => clearInterval(tick));
      res.write(`data: tick-${n++}\n\n`);
      return;
    }
    let sent = 0;
    let timer;
    const send = () => {
      res.write(`data: event-${sent}\n\n`);
      sent += 1;
      if (sent < SSE_EVENTS) timer = setTimeout(send, SSE_INTERVAL_MS);
      else res.end();
    };
    req.on('close', () => clearTimeout(timer));
    send();
  })
  .listen(SSE_PORT, '0.0.0.0');
