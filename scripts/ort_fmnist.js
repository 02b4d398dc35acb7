#!/usr/bin/env node
// Runs an exported model (quant::export_onnx, --export-onnx) on the Fashion-MNIST test set in
// ONNX Runtime and prints its accuracy: the file works outside this library.
//
//   node scripts/ort_fmnist.js MODEL.onnx [--flat] [--limit N] [--no-optimize]
//
// --flat feeds [N, 784] rows (the MLP), otherwise [N, 1, 28, 28] images; pixels are byte / 255
// as in our data loader. ONNX Runtime comes from onnxruntime-node (scripts/install-deps.sh puts
// it in .deps/; QAT_ORT_NODE_MODULES points elsewhere).
'use strict';
const fs = require('fs');
const path = require('path');
const zlib = require('zlib');

const args = process.argv.slice(2);
const flag = (name) => args.includes(name);
const value = (name, otherwise) => {
  const i = args.indexOf(name);
  return i >= 0 && i + 1 < args.length ? args[i + 1] : otherwise;
};
const model = args.find((a, i) => !a.startsWith('--') && !(i > 0 && args[i - 1] === '--limit'));
if (!model) {
  console.error('usage: ort_fmnist.js MODEL.onnx [--flat] [--limit N] [--no-optimize] [--data DIR]');
  process.exit(2);
}
const modules = process.env.QAT_ORT_NODE_MODULES || path.join(__dirname, '..', '.deps', 'node_modules');
const ort = require(path.join(modules, 'onnxruntime-node'));
const dataDir = value('--data', '/usr/share/datasets/fashion-mnist');

// IDX files: big-endian magic, dimensions, then bytes.
function readIdx(file) {
  const b = zlib.gunzipSync(fs.readFileSync(path.join(dataDir, file)));
  const rank = b[3];
  const dims = [];
  for (let d = 0; d < rank; ++d) dims.push(b.readUInt32BE(4 + 4 * d));
  return { dims, data: b.subarray(4 + 4 * rank) };
}

async function main() {
  const images = readIdx('t10k-images-idx3-ubyte.gz');
  const labels = readIdx('t10k-labels-idx1-ubyte.gz');
  const n = Math.min(images.dims[0], Number(value('--limit', images.dims[0])));
  const session = await ort.InferenceSession.create(model, {
    graphOptimizationLevel: flag('--no-optimize') ? 'disabled' : 'all',
    intraOpNumThreads: Number(process.env.QAT_ORT_THREADS || 1),
  });
  const pixels = 28 * 28, batch = 500;
  let correct = 0;
  const t0 = process.hrtime.bigint();
  for (let at = 0; at < n; at += batch) {
    const b = Math.min(batch, n - at);
    const x = new Float32Array(b * pixels);
    for (let i = 0; i < b * pixels; ++i) x[i] = images.data[at * pixels + i] / 255;
    const dims = flag('--flat') ? [b, pixels] : [b, 1, 28, 28];
    const out = await session.run({ [session.inputNames[0]]: new ort.Tensor('float32', x, dims) });
    const y = out[session.outputNames[0]];
    const classes = y.dims[1];
    for (let i = 0; i < b; ++i) {
      let best = 0;
      for (let c = 1; c < classes; ++c) if (y.data[i * classes + c] > y.data[i * classes + best]) best = c;
      correct += best === labels.data[at + i];
    }
  }
  const secs = Number(process.hrtime.bigint() - t0) / 1e9;
  console.log(JSON.stringify({ model, images: n, accuracy: correct / n, seconds: secs }));
}

main().catch((e) => {
  console.error(`ort_fmnist.js: ${e.message}`);
  process.exit(1);
});
