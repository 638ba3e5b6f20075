// ONNX Runtime (onnxruntime-node, CPU) inference speed on pre-tokenized rows
// (benchmarks/onnx/onnx_vs_predict.sh):
//   node rows_per_s.js MODEL.onnx IDS.jsonl BATCH THREADS RUNTIME_DIR
// IDS.jsonl: `shardtrain tokenize` output. Rows go in batches of BATCH in file
// order, each padded to its longest row (predict pads so too); one untimed
// warm-up pass, then the median of 3 timed passes. Prints one JSON line.
'use strict';
const fs = require('fs');
const path = require('path');
(async () => {
  const [model, idsPath, batchText, threadsText, runtimeDir] = process.argv.slice(2);
  const ort = require(require.resolve('onnxruntime-node', {paths: [path.resolve(runtimeDir)]}));
  const threads = Number(threadsText), batch = Number(batchText);
  const session = await ort.InferenceSession.create(model, {intraOpNumThreads: threads, interOpNumThreads: 1});
  const rows = fs.readFileSync(idsPath, 'utf8').split('\n').filter((l) => l.trim()).map((l) => JSON.parse(l));
  const feeds = [];
  for (let i = 0; i < rows.length; i += batch) {
    const group = rows.slice(i, i + batch), L = Math.max(...group.map((r) => r.input_ids.length));
    const tensor = (f) => new ort.Tensor('int64', BigInt64Array.from(group.flatMap((r) => {
      const v = f(r); return [...v, ...Array(L - v.length).fill(0)].map(BigInt); })), [group.length, L]);
    const feed = {input_ids: tensor((r) => r.input_ids), attention_mask: tensor((r) => r.input_ids.map(() => 1))};
    if (session.inputNames.includes('token_type_ids')) feed.token_type_ids = tensor((r) => r.token_type_ids);
    feeds.push(feed);
  }
  const pass = async () => { const t = process.hrtime.bigint(); for (const f of feeds) await session.run(f); return Number(process.hrtime.bigint() - t) / 1e9; };
  await pass();
  const times = [await pass(), await pass(), await pass()].sort((a, b) => a - b);
  console.log(JSON.stringify({rows: rows.length, batch, threads, seconds: times[1], rows_per_s: rows.length / times[1],
                              runtime: ort.env.versions.common}));
})().catch((e) => { console.error(e.message); process.exit(1); });
