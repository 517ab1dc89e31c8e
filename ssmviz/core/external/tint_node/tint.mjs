// Tint (Chrome's WGSL compiler, inside dawn.node) over WGSL sources, for ssmviz.
//
// stdin: {"sources": [{"name": str, "code": str,
//                      "pipelines": [{"entry": str, "constants": {NAME: number}}]}]}
// stdout: one JSON object: {"adapter": str, "features": [str],
//   "results": [{"name": str, "missing": [feature], "messages": [{type, lineNum, linePos,
//                offset, length, message}], "pipelines": [{"entry": str, "message": str}]}]}
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

async function compile(device, src) {
  const missing = enables(src.code)
    .map((e) => FEATURE_OF[e])
    .filter((f) => f && !device.features.has(f));
  const result = { name: src.name, missing: [...new Set(missing)], messages: [], pipelines: [] };
  if (result.missing.length) return result; // Tint would only report the absent feature
  device.pushErrorScope('validation');
  const module = device.createShaderModule({ code: src.code, label: src.name });
  const info = await module.getCompilationInfo();
  await device.popErrorScope(); // the same errors as the messages below
  for (const m of info.messages) {
    result.messages.push({
      type: m.type, lineNum: m.lineNum, linePos: m.linePos, offset: m.offset,
      length: m.length, message: m.message,
    });
  }
  if (result.messages.some((m) => m.type === 'error')) return result;
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
