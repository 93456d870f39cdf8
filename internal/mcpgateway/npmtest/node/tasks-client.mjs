// A client of the TypeScript SDK's own task API (client.experimental.tasks,
// the 2025-11-25 revision's tasks) over streamable HTTP, driven one command
// a line on stdin, answering one JSON line each on stdout:
//
//   {"id":1,"op":"connect","url":"http://…/mcp"}  the server's capabilities
//   {"id":2,"op":"tools"}                          tools/list's tools
//   {"id":3,"op":"call","name":"…","arguments":{…}}
//       callToolStream with a task: a line for each message it yields
//       (taskCreated, taskStatus, result, error), the last with "end": true
//   {"id":4,"op":"get","taskId":"…"}               tasks/get
//   {"id":5,"op":"result","taskId":"…"}            tasks/result
//   {"id":6,"op":"list","cursor":"…"}              tasks/list
//   {"id":7,"op":"cancel","taskId":"…"}            tasks/cancel
//   {"id":8,"op":"checks"}                          every check below
//
// An answer that failed is {"id":…,"error":{"code":…,"message":…}}.
// Every message the server sends about tasks (initialize's capabilities,
// the tools' execution, a task-augmented tools/call's answer, tasks/*'s
// answers, notifications/tasks/status) is checked as it arrives against
// the published schema of the 2025-11-25 tasks (tasks-schemas.mjs); the
// checks, with what each found wrong, are what "checks" answers.
import { createInterface } from 'node:readline';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CallToolResultSchema } from '@modelcontextprotocol/sdk/types.js';
import { problems } from './tasks-schemas.mjs';

const out = (msg) => process.stdout.write(JSON.stringify(msg) + '\n');
const failure = (e) => ({ code: e?.code ?? null, message: String(e?.message ?? e) });

const checks = [];
const check = (what, schema, value) => checks.push({ what, schema, problems: problems(schema, value) });

// watch checks the messages transport receives, knowing each response's
// request by the messages it sent.
function watch(transport) {
  const sent = new Map();
  const send = transport.send.bind(transport);
  transport.send = (msg, opts) => {
    if (msg.method && msg.id !== undefined) sent.set(msg.id, msg);
    return send(msg, opts);
  };
  // The SDK reads onmessage before it sets its own, and calls what it
  // read: so it reads what it set, the checks around it.
  let inner;
  const checked = (msg, extra) => {
    inspect(sent, msg);
    inner(msg, extra);
  };
  Object.defineProperty(transport, 'onmessage', {
    get: () => inner && checked,
    set: (f) => { inner = f; },
  });
}

function inspect(sent, msg) {
  if (msg.method === 'notifications/tasks/status') {
    check(msg.method, 'TaskStatusNotificationV1Schema', msg);
    return;
  }
  const req = msg.id !== undefined && sent.get(msg.id);
  if (!req || !msg.result) return;
  const r = msg.result;
  switch (req.method) {
    case 'initialize':
      check(req.method, 'ServerCapabilitiesV1Schema', r.capabilities);
      break;
    case 'tools/list':
      for (const tool of r.tools) check(`${req.method} ${tool.name}`, 'ToolV1Schema', tool);
      break;
    case 'tools/call':
      if (req.params?.task) check(req.method, 'CreateTaskResultV1Schema', r);
      break;
    case 'tasks/get':
      check(req.method, 'GetTaskResultV1Schema', r);
      break;
    case 'tasks/result':
      check(req.method, 'CallToolResultV1Schema', r);
      if (r._meta?.['io.modelcontextprotocol/related-task']?.taskId !== req.params.taskId) {
        checks.push({ what: req.method, schema: 'related-task', problems: [`_meta does not name task ${req.params.taskId}: ${JSON.stringify(r._meta)}`] });
      }
      break;
    case 'tasks/list':
      check(req.method, 'ListTasksResultV1Schema', r);
      break;
    case 'tasks/cancel':
      check(req.method, 'CancelTaskResultV1Schema', r);
      break;
  }
}

let client;
const ops = {
  async connect({ url }) {
    client = new Client({ name: 'sdk-tasks', version: '1.0.0' });
    const transport = new StreamableHTTPClientTransport(new URL(url));
    watch(transport);
    await client.connect(transport);
    return { capabilities: client.getServerCapabilities() };
  },
  async tools() {
    return { tools: (await client.listTools()).tools };
  },
  async get({ taskId }) {
    return { task: await client.experimental.tasks.getTask(taskId) };
  },
  async result({ taskId }) {
    return { result: await client.experimental.tasks.getTaskResult(taskId, CallToolResultSchema) };
  },
  async list({ cursor }) {
    return await client.experimental.tasks.listTasks(cursor);
  },
  async cancel({ taskId }) {
    return { task: await client.experimental.tasks.cancelTask(taskId) };
  },
  async checks() {
    return { checks };
  },
};

// call streams one tools/call made a task, its messages as they come.
async function call({ id, name, arguments: args }) {
  try {
    const stream = client.experimental.tasks.callToolStream({ name, arguments: args }, undefined, { task: {} });
    for await (const m of stream) {
      const line = { id, type: m.type, task: m.task, result: m.result };
      if (m.type === 'error') line.error = failure(m.error);
      out(line);
    }
  } catch (e) {
    out({ id, type: 'error', error: failure(e) });
  }
  out({ id, end: true });
}

for await (const line of createInterface({ input: process.stdin })) {
  if (!line.trim()) continue;
  const cmd = JSON.parse(line);
  if (cmd.op === 'call') {
    call(cmd); // runs on while other commands are served
    continue;
  }
  try {
    out({ id: cmd.id, ...(await ops[cmd.op](cmd)) });
  } catch (e) {
    out({ id: cmd.id, error: failure(e) });
  }
}
await client?.close();
