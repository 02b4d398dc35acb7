#!/usr/bin/env node
// Runs a single-input, single-output ONNX model in ONNX Runtime (onnxruntime-node) on a float32
// tensor, in batches along dim 0, for the C++ tests (tests/onnx/ort_runner.h).
//
//   node run_ort.js MODEL INPUT OUTPUT [all|disabled] [BATCH] [NODE_MODULES]
//
// INPUT and OUTPUT use one raw little-endian format:
//   int64 rank, int64 dims[rank], float32 data[prod(dims)]   (row-major)
// BATCH <= 0 (default) runs the whole input at once. onnxruntime-node is loaded from
// NODE_MODULES, else from $QAT_ORT_NODE_MODULES, else by node's usual lookup.
// Threads: intraOpNumThreads = $QAT_ORT_THREADS (default 1). Any error: message on stderr, exit 1.
'use strict';
const fs = require('fs');
const path = require('path');

function fail(msg) {
  process.stderr.write(`run_ort.js: ${msg}\n`);
  process.exit(1);
}

function readRaw(file) {
  const buf = fs.readFileSync(file);
  if (buf.length < 8) fail(`${file}: ${buf.length} bytes, too short for the rank`);
  const rank = Number(buf.readBigInt64LE(0));
  if (rank < 0 || rank > 16) fail(`${file}: bad rank ${rank}`);
  const header = 8 * (1 + rank);
  if (buf.length < header) fail(`${file}: ${buf.length} bytes, too short for ${rank} dims`);
  const dims = [];
  for (let i = 0; i < rank; ++i) {
    const d = Number(buf.readBigInt64LE(8 * (1 + i)));
    if (d < 0) fail(`${file}: negative dim ${d}`);
    dims.push(d);
  }
  const numel = dims.reduce((a, b) => a * b, 1);
  if (buf.length !== header + 4 * numel)
    fail(`${file}: shape [${dims}] needs ${header + 4 * numel} bytes, file has ${buf.length}`);
  // copy into a fresh (aligned) ArrayBuffer
  const data = new Float32Array(numel);
  Buffer.from(data.buffer).set(buf.subarray(header));
  return {dims, data};
}

function writeRaw(file, dims, chunks) {
  const header = Buffer.alloc(8 * (1 + dims.length));
  header.writeBigInt64LE(BigInt(dims.length), 0);
  dims.forEach((d, i) => header.writeBigInt64LE(BigInt(d), 8 * (1 + i)));
  const parts = [header];
  for (const c of chunks) parts.push(Buffer.from(c.buffer, c.byteOffset, c.byteLength));
  fs.writeFileSync(file, Buffer.concat(parts));
}

async function main() {
  const args = process.argv.slice(2);
  if (args.length < 3 || args.length > 6)
    fail('usage: run_ort.js MODEL INPUT OUTPUT [all|disabled] [BATCH] [NODE_MODULES]');
  const [model, input, output] = args;
  const level = args[3] ?? 'all';
  if (level !== 'all' && level !== 'disabled')
    fail(`optimization level must be 'all' or 'disabled', got '${level}'`);
  const batch = Number(args[4] ?? 0);
  if (!Number.isInteger(batch)) fail(`batch must be an integer, got '${args[4]}'`);
  const threads = Number(process.env.QAT_ORT_THREADS ?? 1);
  if (!Number.isInteger(threads) || threads < 0)
    fail(`QAT_ORT_THREADS must be a non-negative integer, got '${process.env.QAT_ORT_THREADS}'`);
  const modules = args[5] || process.env.QAT_ORT_NODE_MODULES;

  let ort;
  try {
    ort = require(modules ? path.resolve(modules, 'onnxruntime-node') : 'onnxruntime-node');
  } catch (e) {
    fail(`cannot load onnxruntime-node${modules ? ' from ' + modules : ''}: ${e.message}`);
  }

  const x = readRaw(input);
  const session = await ort.InferenceSession.create(model, {
    graphOptimizationLevel: level,
    intraOpNumThreads: threads,
    interOpNumThreads: 1,
    executionMode: 'sequential',
    logSeverityLevel: 3,
  });
  if (session.inputNames.length !== 1 || session.outputNames.length !== 1)
    fail(`${model}: expected 1 input and 1 output, model has inputs [${session.inputNames}] ` +
         `and outputs [${session.outputNames}]`);
  const [inName] = session.inputNames, [outName] = session.outputNames;

  const n = x.dims.length > 0 ? x.dims[0] : 1;
  if (batch > 0 && x.dims.length === 0) fail('batching needs an input of rank >= 1');
  const step = batch > 0 && batch < n ? batch : n;
  const row = x.dims.length > 0 ? x.dims.slice(1).reduce((a, b) => a * b, 1) : 1;
  const ranges = [];
  for (let begin = 0; begin < n; begin += step) ranges.push([begin, Math.min(begin + step, n)]);
  if (ranges.length === 0) ranges.push([0, 0]);  // empty batch: one run, ORT decides
  const chunks = [];
  let outDims = null;
  for (const [begin, end] of ranges) {
    const dims = x.dims.length > 0 ? [end - begin, ...x.dims.slice(1)] : [];
    const t = new ort.Tensor('float32', x.data.slice(begin * row, end * row), dims);
    const y = (await session.run({[inName]: t}))[outName];
    if (y.type !== 'float32') fail(`${model}: output '${outName}' has type ${y.type}, not float32`);
    if (outDims === null) {
      outDims = y.dims.slice();
    } else {
      if (y.dims.length === 0 || y.dims.slice(1).join() !== outDims.slice(1).join())
        fail(`${model}: batch outputs of shapes [${outDims}] and [${y.dims}] cannot be concatenated`);
      outDims[0] += y.dims[0];
    }
    chunks.push(y.data);
  }
  writeRaw(output, outDims, chunks);
}

main().catch((e) => fail(e && e.message ? e.message : String(e)));
