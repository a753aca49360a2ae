// Runs an exported model with ONNX Runtime (the npm package
// onnxruntime-node) on the inputs a JSON file gives, and writes its outputs
// as JSON, for onnx_export_test to compare with anneal's own predictions.
//
//   node ort_run.js NPM_DIR MODEL.onnx FEEDS.json OUT.json
//
// FEEDS.json: {input: {type: "float32" | "string", dims: [...], data: [...]}},
// null standing for NaN (a missing value) in float data.
'use strict';
const fs = require('fs');
const path = require('path');

async function main() {
  const [npmDir, model, feedsFile, outFile] = process.argv.slice(2);
  const ort = require(path.join(npmDir, 'node_modules', 'onnxruntime-node'));
  const feeds = JSON.parse(fs.readFileSync(feedsFile, 'utf8'));
  const inputs = {};
  for (const [name, f] of Object.entries(feeds)) {
    inputs[name] = f.type === 'string'
      ? new ort.Tensor('string', f.data, f.dims)
      : new ort.Tensor('float32', Float32Array.from(f.data, (v) => (v === null ? NaN : v)), f.dims);
  }
  // One thread: the machine runs many tests at once.
  const session = await ort.InferenceSession.create(model, { intraOpNumThreads: 1, interOpNumThreads: 1 });
  const results = await session.run(inputs);
  const out = {};
  for (const [name, t] of Object.entries(results)) {
    out[name] = { dims: Array.from(t.dims, Number), data: Array.from(t.data, (v) => (typeof v === 'bigint' ? Number(v) : v)) };
  }
  fs.writeFileSync(outFile, JSON.stringify(out));
}

main().catch((e) => {
  console.error('ort_run: ' + String((e && e.message) || e).split('\n')[0]);
  process.exit(1);
});
