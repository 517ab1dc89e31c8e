// Tint (Chrome's WGSL compiler, inside dawn.node) over WGSL sources, for ssmviz.
//
// stdin: {"sources": [{"name": str, "code": str,
//                      "pipelines": [{"entry": str, "constants": {NAME: number}}]}]}
// stdout: one JSON object: {"adapter": str, "features": [str],
//   "results": [{"name": str, "missing": [feature], "messages": [{type, lineNum, linePos,
//                offset, length, message}], "pipelines": [{"entry": str, "message": str}],
//                "more": [[message, ...]]}]}
// "more": Tint stops at a module's first uniformity error; each further group is the next
// one (an error and its notes), found by blanking the barrier call before it and compiling
// again in this same process (lines and columns stay).
// Every source goes through one adapter and device: Node and Dawn start once per call.
// The null backend runs Tint's front end (and pipeline validation) without a GPU.

import { create, globals } from 'webgpu';

Object.assign(globalThis, globals);

// WGSL `enable` names -> the device features they need.
const FEATURE_OF = {
  f16: 'shader-f16',
  subgroups: 'subgroups',
  clip_distances: 'clip-distances',
  dual_source_blending: 'dual-source-blending',
  primitive_index: 'primitive-index',
};

function enables(code) {
  // Comments first: an `enable` in a comment enables nothing.
  const bare = code.replace(/\/\*[\s\S]*?\*\//g, ' ').replace(/\/\/[^\n]*/g, '');
  const out = [];
  for (const m of bare.matchAll(/(?:^|;|\n)\s*enable\s+([\w\s,]+?)\s*;/g)) {
    out.push(...m[1].split(',').map((s) => s.trim()).filter(Boolean));
  }
  return out;
}

async function readStdin() {
  const chunks = [];
  for await (const c of process.stdin) chunks.push(c);
  return JSON.parse(Buffer.concat(chunks).toString('utf8'));
}

const NONUNIFORM = 'must only be called from uniform control flow';
const MAX_MORE = 8;

function plain(m) {
  return {
    type: m.type, lineNum: m.lineNum, linePos: m.linePos, offset: m.offset,
    length: m.length, message: m.message,
  };
}

async function messagesOf(device, code, label) {
  device.pushErrorScope('validation');
  const module = device.createShaderModule({ code, label });
  const info = await module.getCompilationInfo();
  await device.popErrorScope(); // the same errors as the messages
  return { module, messages: info.messages.map(plain) };
}

// The call statement `NAME(...);` whose NAME starts at `off`: [start, end) without the
// `;` (blanked, an empty statement stays), or null when it is not a whole statement.
function callStatement(code, off, len) {
  const before = code.slice(0, off).replace(/\s+$/, '');
  if (before.length && !';{}'.includes(before[before.length - 1])) return null;
  let i = off + len;
  while (/\s/.test(code[i] || '')) i++;
  if (code[i] !== '(') return null;
  let depth = 0;
  for (; i < code.length; i++) {
    if (code[i] === '(') depth++;
    else if (code[i] === ')' && --depth === 0) break;
  }
  let j = i + 1;
  while (/\s/.test(code[j] || '')) j++;
  return code[j] === ';' ? [off, i + 1] : null;
}

async function moreUniformityErrors(device, code, messages, label) {
  const groups = [];
  for (let round = 0; round < MAX_MORE; round++) {
    const at = messages.findIndex((m) => m.type === 'error' && m.message.includes(NONUNIFORM));
    if (at < 0) break;
    const span = callStatement(code, messages[at].offset, messages[at].length);
    if (!span) break;
    code = code.slice(0, span[0]) + code.slice(span[0], span[1]).replace(/[^\n]/g, ' ') +
      code.slice(span[1]);
    ({ messages } = await messagesOf(device, code, label));
    const next = messages.findIndex((m) => m.type === 'error' && m.message.includes(NONUNIFORM));
    if (next < 0) break;
    let end = next + 1;
    while (end < messages.length && messages[end].type === 'info') end++;
    groups.push(messages.slice(next, end));
    messages = messages.slice(next);
  }
  return groups;
}

async function compile(device, src) {
  const missing = enables(src.code)
    .map((e) => FEATURE_OF[e])
    .filter((f) => f && !device.features.has(f));
  const result = {
    name: src.name, missing: [...new Set(missing)], messages: [], pipelines: [], more: [],
  };
  if (result.missing.length) return result; // Tint would only report the absent feature
  const { module, messages } = await messagesOf(device, src.code, src.name);
  result.messages = messages;
  if (messages.some((m) => m.type === 'error')) {
    result.more = await moreUniformityErrors(device, src.code, messages, src.name);
    return result;
  }
  for (const p of src.pipelines || []) {
    device.pushErrorScope('validation');
    device.createComputePipeline({
      layout: 'auto',
      compute: { module, entryPoint: p.entry, constants: p.constants || {} },
    });
    const err = await device.popErrorScope();
    if (err) result.pipelines.push({ entry: p.entry, message: err.message });
  }
  return result;
}

async function main() {
  const request = await readStdin();
  const gpu = create(['backend=null']);
  const adapter = await gpu.requestAdapter();
  if (!adapter) throw new Error('dawn.node gave no null-backend adapter');
  const wanted = Object.values(FEATURE_OF).filter((f) => adapter.features.has(f));
  const device = await adapter.requestDevice({ requiredFeatures: wanted });
  const results = [];
  for (const src of request.sources) results.push(await compile(device, src));
  const info = adapter.info || {};
  const answer = {
    adapter: info.description || info.device || 'null-backend',
    features: [...device.features].sort(),
    results,
  };
  device.destroy();
  // Exit once stdout is flushed: Dawn's threads must not keep the process alive.
  process.stdout.write(JSON.stringify(answer) + '\n', () => process.exit(0));
}

main().catch((e) => {
  process.stderr.write(`tint.mjs: ${e && e.stack ? e.stack : e}\n`);
  process.exit(1);
});
