// The peer of `anneal serve` in bench/serve.sh: ONNX Runtime (the npm
// package onnxruntime-node) behind Node's http module, serving an exported
// anneal model as a developer would in an afternoon. It takes the same
// KServe V2 infer body anneal does (one tensor per ONNX input, by name) and
// answers with every output of the model as a KServe V2 tensor.
//
//   node ort_server.js NPM_DIR MODEL.onnx
//
// Listens on a free loopback port and prints "listening on PORT" first.
'use strict';
const http = require('http');
const path = require('path');

async function main() {
  const [npmDir, model] = process.argv.slice(2);
  const ort = require(path.join(npmDir, 'node_modules', 'onnxruntime-node'));
  const session = await ort.InferenceSession.create(model, { intraOpNumThreads: 1, interOpNumThreads: 1 });
  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', async () => {
      try {
        const body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
        const feeds = {};
        for (const input of body.inputs) {
          feeds[input.name] = input.datatype === 'BYTES'
            ? new ort.Tensor('string', input.data.map((v) => (v === null ? '' : String(v))), input.shape)
            : new ort.Tensor('float32', Float32Array.from(input.data, (v) => (v === null ? NaN : v)), input.shape);
        }
        const results = await session.run(feeds);
        const outputs = Object.entries(results).map(([name, t]) => ({
          name, datatype: 'FP32', shape: Array.from(t.dims, Number), data: Array.from(t.data, Number),
        }));
        res.writeHead(200, { 'Content-Type': 'application/json' });
        res.end(JSON.stringify({ model_name: 'ort', outputs }));
      } catch (e) {
        res.writeHead(400, { 'Content-Type': 'application/json' });
        res.end(JSON.stringify({ error: String((e && e.message) || e) }));
      }
    });
  });
  server.keepAliveTimeout = 60000;
  server.listen(0, '127.0.0.1', () => console.log('listening on ' + server.address().port));
}

main().catch((e) => {
  console.error('ort_server: ' + String((e && e.message) || e));
  process.exit(1);
});
