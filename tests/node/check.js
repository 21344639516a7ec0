// A business system and a downstream consumer in Node.js, as docs/clients.md tells one to write them:
// Thrift code generated from shared/client/delayq.thrift (`thrift --gen js:node`), npm `thrift` (framed
// transport, binary protocol, callback style) and `amqplib`. Prints one JSON object of what it saw.
//
//   node check.js GEN_DIR HOST PORT TOPIC AMQP_URL
//
// Secured nodes: TLS verified against DELAYQ_TLS_CA_FILE, then `authenticate` with DELAYQ_TOKEN.
'use strict';

const fs = require('fs');
const path = require('path');
const thrift = require('thrift');
const amqp = require('amqplib');

const [genDir, host, port, topic, amqpUrl] = process.argv.slice(2);
const DelayScheduler = require(path.resolve(genDir, 'DelayScheduler'));
const types = require(path.resolve(genDir, 'delayq_types'));

async function connect() {
  const options = { transport: thrift.TFramedTransport, protocol: thrift.TBinaryProtocol, connect_timeout: 5000 };
  const ca = process.env.DELAYQ_TLS_CA_FILE;
  const connection = ca
    ? thrift.createSSLConnection(host, Number(port), { ...options, ca: fs.readFileSync(ca), secureProtocol: 'TLS_method' })
    : thrift.createConnection(host, Number(port), options);
  connection.on('error', () => {});       // a closed connection shows in the calls' callbacks
  const client = await new Promise((resolve, reject) => {
    connection.once('connect', () => resolve(thrift.createClient(DelayScheduler, connection)));
    connection.once('error', reject);
  });
  if (process.env.DELAYQ_TOKEN) {
    await call(client, 'authenticate', process.env.DELAYQ_TOKEN);
  }
  return { connection, client };
}

// Callback style: the code thrift-compiler 0.17 generates for promises needs thrift.Q, which npm
// thrift 0.24 no longer has.
function call(client, method, ...args) {
  return new Promise((resolve, reject) => client[method](...args, (err, result) => (err ? reject(err) : resolve(result))));
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function main() {
  const out = {};
  const amqpConn = await amqp.connect(amqpUrl);
  const channel = await amqpConn.createChannel();
  await channel.assertExchange('delayq', 'topic', { durable: true });
  const { queue } = await channel.assertQueue('', { exclusive: true });
  await channel.bindQueue(queue, 'delayq', topic);
  const received = [];
  await channel.consume(queue, (msg) => {
    received.push(msg);
    channel.ack(msg);
  });

  let { connection, client } = await connect();
  const payload = Buffer.from([0, 1, 2, 250, 251, 252, 10, 13]);
  const one = await call(client, 'submit', new types.TaskSpec({ topic, delayMs: 300, payload }));
  const batch = await call(client, 'submitBatch', [1, 2, 3, 4, 5].map((i) => new types.TaskSpec({
    topic, taskId: `node-${topic}-${i}`, delayMs: 400 + i * 10, payload: Buffer.from(`task ${i}`) })));
  out.submitted = { taskId: one.taskId, created: one.created, batch: batch.map((r) => r.taskId) };

  // Twenty calls in flight on one connection at once (what concurrent calls do in this client).
  const ids = [one.taskId, ...batch.map((r) => r.taskId)];
  const pipelined = await Promise.all(Array.from({ length: 20 }, (_, i) => call(client, 'get', ids[i % ids.length])));
  out.pipelined = pipelined.map((t) => t.taskId);

  const cancelled = await call(client, 'cancel', batch[4].taskId);
  out.cancel = Object.keys(types.CancelResult).find((k) => types.CancelResult[k] === cancelled);
  try {
    await call(client, 'submit', new types.TaskSpec({ topic, delayMs: 100, payload: Buffer.alloc(70 * 1024) }));
    out.oversized = 'accepted';
  } catch (e) {
    out.oversized = { name: e.name, field: e.field };
  }

  const want = ids.length - 1;    // the cancelled one never fires
  const deadline = Date.now() + 15000;
  while (received.length < want && Date.now() < deadline) await sleep(20);
  out.messages = received.map((m) => ({
    routingKey: m.fields.routingKey,
    messageId: m.properties.messageId,
    persistent: m.properties.deliveryMode === 2,
    payloadHex: m.content.toString('hex'),
    headers: Object.fromEntries(Object.entries(m.properties.headers).map(([k, v]) => [k, { value: v, type: typeof v }])),
  }));

  for (const m of received) {
    const h = m.properties.headers;
    await call(client, 'reportResult', h['x-delayq-task-id'], h['x-delayq-attempt'], types.ResultStatus.SUCCESS, 'done in node');
  }
  const finished = await Promise.all(received.map((m) => call(client, 'get', m.properties.headers['x-delayq-task-id'])));
  out.statuses = finished.map((t) => Object.keys(types.TaskStatus).find((k) => types.TaskStatus[k] === t.status));

  // Left idle past the node's idle timeout, the connection is closed by the node: connect again.
  let closed = false;
  connection.on('close', () => { closed = true; });
  const idleUntil = Date.now() + Number(process.env.IDLE_WAIT_MS || 3000);
  while (!closed && Date.now() < idleUntil) await sleep(50);
  out.closedWhenIdle = closed;
  ({ connection, client } = await connect());
  out.afterReconnect = (await call(client, 'get', one.taskId)).taskId;

  connection.end();
  await amqpConn.close();
  process.stdout.write(JSON.stringify(out) + '\n');
}

main().catch((e) => {
  process.stdout.write(JSON.stringify({ error: String(e && e.stack || e) }) + '\n');
  process.exit(1);
});
