// Runs an exported model.onnx in ONNX Runtime (onnxruntime-node, CPU) over
// input batches and prints the outputs (tests/test_onnx_export.sh, docs/export.md).
//
//   node tests/onnx/run.js MODEL.onnx INPUTS.jsonl [RUNTIME_DIR]
//
// Each line of INPUTS.jsonl is one batch: {"input_ids": [[...], ...], ...},
// int64 arrays of the model's input shapes. Only the inputs the model
// declares are fed (a missing one is an error). One JSON line per batch:
// {"<output>": {"type": "float32", "dims": [...], "data": [...]}, ...}. RUNTIME_DIR is the
// folder whose node_modules holds onnxruntime-node (default: the working
// folder's). Exit status 1 on any error.
'use strict';
const fs = require('fs');
const path = require('path');

async function main() {
  const [modelPath, inputsPath, runtimeDir] = process.argv.slice(2);
  if (!modelPath || !inputsPath) throw new Error('usage: node run.js MODEL.onnx INPUTS.jsonl [RUNTIME_DIR]');
  const ort = require(require.resolve('onnxruntime-node', {paths: [path.resolve(runtimeDir || '.')]}));
  const session = await ort.InferenceSession.create(modelPath, {executionProviders: ['cpu']});
  const lines = fs.readFileSync(inputsPath, 'utf8').split('\n').filter((l) => l.trim());
  for (const line of lines) {
    const batch = JSON.parse(line);
    const feeds = {};
    for (const name of session.inputNames) {
      if (!(name in batch)) throw new Error(`the model needs input ${name}, which ${inputsPath} does not give`);
      const dims = [];
      for (let a = batch[name]; Array.isArray(a); a = a[0]) dims.push(a.length);
      const flat = batch[name].flat(Infinity).map((v) => BigInt(v));
      feeds[name] = new ort.Tensor('int64', BigInt64Array.from(flat), dims);
    }
    const results = await session.run(feeds);
    const out = {};
    for (const name of session.outputNames)
      out[name] = {type: results[name].type, dims: results[name].dims, data: Array.from(results[name].data, Number)};
    process.stdout.write(JSON.stringify(out) + '\n');
  }
  process.stdout.write(JSON.stringify({runtime: ort.env.versions}) + '\n');
}

main().catch((e) => {
  process.stderr.write(`run.js: ${e.message}\n`);
  process.exit(1);
});
