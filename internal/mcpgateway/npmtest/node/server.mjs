// The MCP server the conformance suite's server scenarios are run against,
// directly and through the gateway: it offers the tools, resources and
// prompts those scenarios call, and answers them as the scenarios expect,
// with the official TypeScript SDK.
//
//   node server.mjs --port 0   serve streamable HTTP at /mcp (prints "listening <url>")
//   node server.mjs --stdio    serve one session on stdio
import http from 'node:http';
import { randomUUID } from 'node:crypto';
import { McpServer, ResourceTemplate } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import {
  CallToolRequestSchema, CompleteRequestSchema, ElicitResultSchema, ErrorCode, ListToolsRequestSchema, McpError, SetLevelRequestSchema, SubscribeRequestSchema, UnsubscribeRequestSchema,
} from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';

const PNG = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==';
const WAV = 'UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA=';
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const text = (t) => ({ content: [{ type: 'text', text: t }] });

// transports holds the HTTP sessions' transports, by session id: the
// reconnection tool closes its own request's stream through it.
const transports = new Map();

function newServer() {
  const server = new McpServer(
    { name: 'toolgate-conformance-server', version: '1.0.0' },
    { capabilities: { tools: { listChanged: true }, resources: { subscribe: true, listChanged: true }, prompts: { listChanged: true }, logging: {}, completions: {} } },
  );
  const log = (data) => server.server.notification({ method: 'notifications/message', params: { level: 'info', logger: 'conformance', data } }).catch(() => {});

  // The tools are listed with their input schemas as written (JSON Schema
  // 2020-12's $schema, $defs and all), and answered by name.
  const empty = { type: 'object', properties: {} };
  // An elicitation's answer is passed back as the client gave it, checked
  // against nothing: the scenarios' answers need not fit the form.
  const elicit = async (params) => {
    const r = await server.server.request({ method: 'elicitation/create', params: { mode: 'form', ...params } }, ElicitResultSchema);
    return text(`Elicitation completed: action=${r.action}, content=${JSON.stringify(r.content ?? {})}`);
  };
  const tools = {
    test_simple_text: { description: 'Answers with text', run: async () => text('This is a simple text response for testing.') },
    test_image_content: { description: 'Answers with an image', run: async () => ({ content: [{ type: 'image', data: PNG, mimeType: 'image/png' }] }) },
    test_audio_content: { description: 'Answers with audio', run: async () => ({ content: [{ type: 'audio', data: WAV, mimeType: 'audio/wav' }] }) },
    test_embedded_resource: {
      description: 'Answers with an embedded resource',
      run: async () => ({ content: [{ type: 'resource', resource: { uri: 'test://embedded-resource', mimeType: 'text/plain', text: 'This is an embedded resource content.' } }] }),
    },
    test_multiple_content_types: {
      description: 'Answers with text, an image and a resource',
      run: async () => ({
        content: [
          { type: 'text', text: 'Multiple content types test:' },
          { type: 'image', data: PNG, mimeType: 'image/png' },
          { type: 'resource', resource: { uri: 'test://mixed-content-resource', mimeType: 'application/json', text: '{"test":"data","value":123}' } },
        ],
      }),
    },
    test_tool_with_logging: {
      description: 'Logs three messages as it runs',
      run: async (_args, { sendNotification }) => {
        for (const data of ['Tool execution started', 'Tool processing data', 'Tool execution completed']) {
          await sendNotification({ method: 'notifications/message', params: { level: 'info', data } });
          await sleep(50);
        }
        return text('Tool with logging executed successfully');
      },
    },
    test_tool_with_progress: {
      description: 'Reports its progress',
      run: async (_args, { sendNotification }, meta) => {
        const progressToken = meta?.progressToken ?? 0;
        for (const progress of [0, 50, 100]) {
          await sendNotification({ method: 'notifications/progress', params: { progressToken, progress, total: 100, message: `Completed step ${progress} of 100` } });
          await sleep(50);
        }
        return text(String(progressToken));
      },
    },
    test_error_handling: {
      description: 'Fails',
      run: async () => ({ isError: true, content: [{ type: 'text', text: 'This tool intentionally returns an error for testing' }] }),
    },
    test_reconnection: {
      description: 'Closes its request stream, then answers',
      run: async (_args, { sessionId, requestId }) => {
        transports.get(sessionId)?.closeSSEStream(requestId);
        await sleep(100);
        return text('Reconnection test completed successfully.');
      },
    },
    test_sampling: {
      description: 'Asks the client to sample',
      inputSchema: { type: 'object', properties: { prompt: { type: 'string' } }, required: ['prompt'] },
      run: async ({ prompt }) => {
        const r = await server.server.createMessage({ messages: [{ role: 'user', content: { type: 'text', text: prompt } }], maxTokens: 100 });
        return text(`LLM response: ${r.content?.text ?? 'No response'}`);
      },
    },
    test_elicitation: {
      description: 'Asks the user',
      inputSchema: { type: 'object', properties: { message: { type: 'string' } }, required: ['message'] },
      run: async ({ message }) =>
        elicit({ message, requestedSchema: { type: 'object', properties: { response: { type: 'string', description: "User's response" } }, required: ['response'] } }),
    },
    test_elicitation_sep1034_defaults: {
      description: 'Asks the user, with defaults',
      run: async () =>
        elicit({
          message: 'Please review and update the form fields with defaults',
          requestedSchema: {
            type: 'object',
            properties: {
              name: { type: 'string', description: 'User name', default: 'John Doe' },
              age: { type: 'integer', description: 'User age', default: 30 },
              score: { type: 'number', description: 'User score', default: 95.5 },
              status: { type: 'string', description: 'User status', enum: ['active', 'inactive', 'pending'], default: 'active' },
              verified: { type: 'boolean', description: 'Verification status', default: true },
            },
            required: [],
          },
        }),
    },
    test_elicitation_sep1330_enums: {
      description: 'Asks the user to choose',
      run: async () =>
        elicit({
          message: 'Please select options from the enum fields',
          requestedSchema: {
            type: 'object',
            properties: {
              untitledSingle: { type: 'string', description: 'Select one option', enum: ['option1', 'option2', 'option3'] },
              titledSingle: { type: 'string', description: 'Select one option with titles', oneOf: [{ const: 'value1', title: 'First Option' }, { const: 'value2', title: 'Second Option' }, { const: 'value3', title: 'Third Option' }] },
              legacyEnum: { type: 'string', description: 'Select one option (legacy)', enum: ['opt1', 'opt2', 'opt3'], enumNames: ['Option One', 'Option Two', 'Option Three'] },
              untitledMulti: { type: 'array', description: 'Select multiple options', minItems: 1, maxItems: 3, items: { type: 'string', enum: ['option1', 'option2', 'option3'] } },
              titledMulti: { type: 'array', description: 'Select multiple options with titles', minItems: 1, maxItems: 3, items: { anyOf: [{ const: 'value1', title: 'First Choice' }, { const: 'value2', title: 'Second Choice' }, { const: 'value3', title: 'Third Choice' }] } },
            },
            required: [],
          },
        }),
    },
    json_schema_2020_12_tool: {
      description: 'Has a JSON Schema 2020-12 input schema',
      inputSchema: {
        $schema: 'https://json-schema.org/draft/2020-12/schema',
        type: 'object',
        $defs: { address: { type: 'object', properties: { street: { type: 'string' }, city: { type: 'string' } } } },
        properties: { name: { type: 'string' }, address: { $ref: '#/$defs/address' } },
        additionalProperties: false,
      },
      run: async (args) => text(`called with ${JSON.stringify(args)}`),
    },
  };
  server.server.setRequestHandler(ListToolsRequestSchema, async () => ({
    tools: Object.entries(tools).map(([name, t]) => ({ name, description: t.description, inputSchema: t.inputSchema ?? empty })),
  }));
  server.server.setRequestHandler(CallToolRequestSchema, async ({ params }, extra) => {
    const t = tools[params.name];
    if (!t) throw new McpError(ErrorCode.InvalidParams, `unknown tool ${params.name}`);
    return t.run(params.arguments ?? {}, extra, params._meta);
  });

  server.registerResource('static-text', 'test://static-text', { mimeType: 'text/plain', description: 'A text resource' }, async () => ({
    contents: [{ uri: 'test://static-text', mimeType: 'text/plain', text: 'This is the content of the static text resource.' }],
  }));
  server.registerResource('static-binary', 'test://static-binary', { mimeType: 'image/png', description: 'A binary resource' }, async () => ({
    contents: [{ uri: 'test://static-binary', mimeType: 'image/png', blob: PNG }],
  }));
  server.registerResource('template', new ResourceTemplate('test://template/{id}/data', { list: undefined }), { mimeType: 'application/json', description: 'A resource template' }, async (uri, { id }) => ({
    contents: [{ uri: uri.toString(), mimeType: 'application/json', text: JSON.stringify({ id, templateTest: true, data: `Data for ID: ${id}` }) }],
  }));
  server.registerResource('watched-resource', 'test://watched-resource', { mimeType: 'text/plain', description: 'A resource to subscribe to' }, async () => ({
    contents: [{ uri: 'test://watched-resource', mimeType: 'text/plain', text: 'Watched resource content' }],
  }));
  // A subscription is told at once that its resource changed.
  server.server.setRequestHandler(SubscribeRequestSchema, async ({ params }) => {
    setTimeout(() => server.server.sendResourceUpdated({ uri: params.uri }).catch(() => {}), 10);
    return {};
  });
  server.server.setRequestHandler(UnsubscribeRequestSchema, async () => ({}));

  server.registerPrompt('test_simple_prompt', { description: 'A prompt without arguments' }, async () => ({
    messages: [{ role: 'user', content: { type: 'text', text: 'This is a simple prompt for testing.' } }],
  }));
  server.registerPrompt('test_prompt_with_arguments', { description: 'A prompt with arguments', argsSchema: { arg1: z.string(), arg2: z.string() } }, async ({ arg1, arg2 }) => ({
    messages: [{ role: 'user', content: { type: 'text', text: `Prompt with arguments: arg1='${arg1}', arg2='${arg2}'` } }],
  }));
  server.registerPrompt('test_prompt_with_embedded_resource', { description: 'A prompt with a resource', argsSchema: { resourceUri: z.string() } }, async ({ resourceUri }) => ({
    messages: [
      { role: 'user', content: { type: 'resource', resource: { uri: resourceUri, mimeType: 'text/plain', text: 'Embedded resource content for testing.' } } },
      { role: 'user', content: { type: 'text', text: 'Please process the embedded resource above.' } },
    ],
  }));
  server.registerPrompt('test_prompt_with_image', { description: 'A prompt with an image' }, async () => ({
    messages: [
      { role: 'user', content: { type: 'image', data: PNG, mimeType: 'image/png' } },
      { role: 'user', content: { type: 'text', text: 'Please analyze the image above.' } },
    ],
  }));
  server.server.setRequestHandler(SetLevelRequestSchema, async ({ params }) => {
    log(`Log level set to: ${params.level}`);
    return {};
  });
  server.server.setRequestHandler(CompleteRequestSchema, async () => ({ completion: { values: [], total: 0, hasMore: false } }));
  return server;
}

// eventStore keeps a session's events for a client that resumes its
// stream (Last-Event-ID).
function eventStore() {
  const events = [];
  return {
    async storeEvent(streamId, message) {
      const eventId = `${streamId}::${String(events.length).padStart(8, '0')}`;
      events.push({ eventId, streamId, message });
      return eventId;
    },
    async replayEventsAfter(lastEventId, { send }) {
      const streamId = lastEventId.split('::')[0];
      for (const e of events) {
        if (e.streamId === streamId && e.eventId > lastEventId) await send(e.eventId, e.message);
      }
      return streamId;
    },
  };
}

async function serveHTTP(port) {
  const httpServer = http.createServer(async (req, res) => {
    // DNS rebinding: only a loopback Host is served.
    const host = (req.headers.host ?? '').replace(/:\d+$/, '');
    if (!['localhost', '127.0.0.1', '[::1]'].includes(host)) {
      res.writeHead(403).end('forbidden host');
      return;
    }
    let body;
    if (req.method === 'POST') {
      const chunks = [];
      for await (const c of req) chunks.push(c);
      try {
        body = JSON.parse(Buffer.concat(chunks).toString());
      } catch {
        res.writeHead(400).end('not JSON');
        return;
      }
    }
    const id = req.headers['mcp-session-id'];
    let transport = id && transports.get(id);
    if (!transport) {
      if (id || req.method !== 'POST' || body?.method !== 'initialize') {
        res.writeHead(id ? 404 : 400, { 'Content-Type': 'application/json' }).end(JSON.stringify({ jsonrpc: '2.0', error: { code: -32000, message: 'no such session' }, id: null }));
        return;
      }
      transport = new StreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        eventStore: eventStore(),
        retryInterval: 500,
        onsessioninitialized: (sid) => transports.set(sid, transport),
      });
      transport.onclose = () => transports.delete(transport.sessionId);
      await newServer().connect(transport);
    }
    await transport.handleRequest(req, res, body);
  });
  httpServer.listen(port, '127.0.0.1', () => console.log(`listening http://localhost:${httpServer.address().port}/mcp`));
}

if (process.argv.includes('--stdio')) {
  await newServer().connect(new StdioServerTransport());
} else {
  await serveHTTP(Number(process.argv[process.argv.indexOf('--port') + 1] ?? 0));
}
