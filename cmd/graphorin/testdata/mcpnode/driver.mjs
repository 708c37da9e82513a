// driver.mjs drives the official MCP TypeScript SDK client for the Go
// tests: it connects to an MCP server, then reads one JSON command a line
// on stdin and writes one JSON answer a line on stdout (logs go to
// stderr). Commands run concurrently; answers carry the command's id.
//
//   node driver.mjs <revision> http <url>     (env MCP_TOKEN: a static bearer token;
//                                              env MCP_CLIENT_ID, MCP_CLIENT_SECRET, MCP_ISSUER:
//                                              OAuth client credentials instead)
//   node driver.mjs <revision> stdio <command> [args…]
//
// <revision> is "2026-07-28" (the client is pinned to it: server/discover,
// no initialize, no session) or an older revision, the only one the
// client offers in initialize.
//
// Commands: {"id", "op": "list"}; {"id", "op": "call", "name", "arguments",
// "meta", "progress": true}; {"id", "op": "read", "uri"}; {"id", "op":
// "abort", "target": <id of a call>}.
import readline from 'node:readline';
import { Client, StreamableHTTPClientTransport, ClientCredentialsProvider } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';

const [revision, kind, target, ...rest] = process.argv.slice(2);
const out = (o) => process.stdout.write(JSON.stringify(o) + '\n');
const options = revision >= '2026-07-28'
  ? { versionNegotiation: { mode: { pin: revision } } }
  : { supportedProtocolVersions: [revision] };
const client = new Client({ name: 'graphorin-ts-driver', version: '1.0.0' }, options);

let transport;
if (kind === 'http') {
  const opts = {};
  if (process.env.MCP_TOKEN) {
    opts.requestInit = { headers: { Authorization: 'Bearer ' + process.env.MCP_TOKEN } };
  }
  if (process.env.MCP_CLIENT_ID) {
    opts.authProvider = new ClientCredentialsProvider({
      clientId: process.env.MCP_CLIENT_ID,
      clientSecret: process.env.MCP_CLIENT_SECRET,
      expectedIssuer: process.env.MCP_ISSUER,
    });
  }
  transport = new StreamableHTTPClientTransport(new URL(target), opts);
} else {
  transport = new StdioClientTransport({ command: target, args: rest, env: process.env, stderr: 'inherit' });
}

try {
  await client.connect(transport);
} catch (e) {
  out({ connected: false, error: String(e?.message ?? e), code: e?.code });
  process.exit(0);
}
out({ connected: true, protocolVersion: client.getNegotiatedProtocolVersion(), sessionId: transport.sessionId ?? null });

const aborts = new Map();
async function handle(cmd) {
  const progress = [];
  try {
    let result;
    switch (cmd.op) {
      case 'list':
        result = await client.listTools();
        break;
      case 'call': {
        const ac = new AbortController();
        aborts.set(cmd.id, ac);
        const params = { name: cmd.name, arguments: cmd.arguments ?? {} };
        if (cmd.meta) params._meta = cmd.meta;
        const opts = { signal: ac.signal, timeout: 120000 };
        if (cmd.progress) opts.onprogress = (p) => progress.push(p);
        result = await client.callTool(params, opts);
        break;
      }
      case 'read':
        result = await client.readResource({ uri: cmd.uri });
        break;
      case 'abort':
        aborts.get(cmd.target)?.abort(new Error('aborted by the test'));
        result = {};
        break;
      default:
        throw new Error('unknown op ' + cmd.op);
    }
    out({ id: cmd.id, result, progress });
  } catch (e) {
    out({ id: cmd.id, error: String(e?.message ?? e), code: e?.code ?? null, progress });
  } finally {
    aborts.delete(cmd.id);
  }
}

const rl = readline.createInterface({ input: process.stdin });
rl.on('line', (line) => {
  if (line.trim() !== '') handle(JSON.parse(line));
});
rl.on('close', async () => {
  await client.close().catch(() => {});
  process.exit(0);
});
