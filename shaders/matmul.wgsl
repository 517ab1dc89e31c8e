// Tiled fp32 matmul c = a · b, row-major: a (m, k), b (k, n), c (m, n). a and b are bound as
// vec4 rows, zero-padded to whole vec4s: a (m, 4·k4) and b (4·k4, 4·n4) (the runner pads).
// A workgroup of 256 threads computes a 128 x 128 tile of c; each thread an 8 x 8 register block
// (rows ty*4 + {0..3} and 64 + ty*4 + {0..3}, columns likewise from tx), so that its workgroup
// reads are conflict-free vec4 loads. K advances in steps of 8 through two stages of workgroup
// tiles (16 KiB): each thread loads one vec4 of a and one of b for the next step into registers
// before the current step's FMAs and stores them into the other stage after them, so one
// barrier a step suffices and the loads' latency hides behind the arithmetic. Every output sums
// its k terms in order with one fma each. The grid is 1-D over tiles (row-major), folded into
// (x, y) by split_workgroups.

struct Params {
  m: u32, n: u32, k: u32, tiles_n: u32,
  total: u32, k4: u32, n4: u32, pad0: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> a: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> b: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> c: array<f32>;

const TILE: u32 = 128u;
const TILE_K: u32 = 8u;
const STAGE: u32 = 256u;  // vec4s of one stage of a tile: TILE_K x TILE floats

var<workgroup> a_tile: array<vec4<f32>, 512>;  // [stage][k][i / 4]
var<workgroup> b_tile: array<vec4<f32>, 512>;  // [stage][k][j / 4]

// The vec4 of a this thread stages for the step at k0: row lid / 2, k0 + 4 (lid % 2) ..+3.
fn load_a(row0: u32, k0: u32, lid: u32) -> vec4<f32> {
  let row = row0 + (lid >> 1u);
  let kq = k0 + (lid & 1u) * 4u;
  if (row < params.m && kq < 4u * params.k4) { return a[row * params.k4 + kq / 4u]; }
  return vec4<f32>(0.0);
}

// The vec4 of b this thread stages: row k0 + lid / 32, columns col0 + 4 (lid % 32) ..+3.
fn load_b(col0: u32, k0: u32, lid: u32) -> vec4<f32> {
  let kk = k0 + (lid >> 5u);
  let jq = col0 / 4u + (lid & 31u);
  if (kk < 4u * params.k4 && jq < params.n4) { return b[kk * params.n4 + jq]; }
  return vec4<f32>(0.0);
}

// a is stored transposed ([k][i]), so that the FMA loop reads 4 rows' values as one vec4.
fn store_a(stage: u32, lid: u32, v: vec4<f32>) {
  let i = lid >> 1u;
  let at = stage + (lid & 1u) * 128u + (i >> 2u);
  a_tile[at][i & 3u] = v.x;
  a_tile[at + 32u][i & 3u] = v.y;
  a_tile[at + 64u][i & 3u] = v.z;
  a_tile[at + 96u][i & 3u] = v.w;
}

fn store_b(stage: u32, lid: u32, v: vec4<f32>) {
  b_tile[stage + lid] = v;
}

// Writes one thread row: columns col .. col+3 from v0 and col+64 .. col+67 from v1.
fn store_row(row: u32, col: u32, v0: vec4<f32>, v1: vec4<f32>) {
  if (row >= params.m) { return; }
  for (var q = 0u; q < 4u; q++) {
    if (col + q < params.n) { c[row * params.n + col + q] = v0[q]; }
    if (col + 64u + q < params.n) { c[row * params.n + col + 64u + q] = v1[q]; }
  }
}

@compute @workgroup_size(256)
fn matmul(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) lid: u32) {
  let lw = wid.x + wid.y * nwg.x;
  let ok = lw < params.total;
  let w = select(0u, lw, ok);
  let row0 = (w / params.tiles_n) * TILE;
  let col0 = (w % params.tiles_n) * TILE;
  let tx = lid & 15u;
  let ty = lid >> 4u;
  // 16 named accumulators (not an array: dynamic indexing would push them to local memory)
  var c00 = vec4<f32>(0.0);
  var c01 = vec4<f32>(0.0);
  var c10 = vec4<f32>(0.0);
  var c11 = vec4<f32>(0.0);
  var c20 = vec4<f32>(0.0);
  var c21 = vec4<f32>(0.0);
  var c30 = vec4<f32>(0.0);
  var c31 = vec4<f32>(0.0);
  var c40 = vec4<f32>(0.0);
  var c41 = vec4<f32>(0.0);
  var c50 = vec4<f32>(0.0);
  var c51 = vec4<f32>(0.0);
  var c60 = vec4<f32>(0.0);
  var c61 = vec4<f32>(0.0);
  var c70 = vec4<f32>(0.0);
  var c71 = vec4<f32>(0.0);
  let steps = (4u * params.k4 + TILE_K - 1u) / TILE_K;
  store_a(0u, lid, load_a(row0, 0u, lid));
  store_b(0u, lid, load_b(col0, 0u, lid));
  workgroupBarrier();
  for (var s = 0u; s < steps; s++) {
    let cur = (s & 1u) * STAGE;
    let more = s + 1u < steps;
    var va = vec4<f32>(0.0);
    var vb = vec4<f32>(0.0);
    if (more) {
      va = load_a(row0, (s + 1u) * TILE_K, lid);
      vb = load_b(col0, (s + 1u) * TILE_K, lid);
    }
    for (var kk = 0u; kk < TILE_K; kk++) {
      let a0 = a_tile[cur + kk * 32u + ty];
      let a1 = a_tile[cur + kk * 32u + 16u + ty];
      let b0 = b_tile[cur + kk * 32u + tx];
      let b1 = b_tile[cur + kk * 32u + 16u + tx];
      c00 = fma(vec4<f32>(a0.x), b0, c00);
      c01 = fma(vec4<f32>(a0.x), b1, c01);
      c10 = fma(vec4<f32>(a0.y), b0, c10);
      c11 = fma(vec4<f32>(a0.y), b1, c11);
      c20 = fma(vec4<f32>(a0.z), b0, c20);
      c21 = fma(vec4<f32>(a0.z), b1, c21);
      c30 = fma(vec4<f32>(a0.w), b0, c30);
      c31 = fma(vec4<f32>(a0.w), b1, c31);
      c40 = fma(vec4<f32>(a1.x), b0, c40);
      c41 = fma(vec4<f32>(a1.x), b1, c41);
      c50 = fma(vec4<f32>(a1.y), b0, c50);
      c51 = fma(vec4<f32>(a1.y), b1, c51);
      c60 = fma(vec4<f32>(a1.z), b0, c60);
      c61 = fma(vec4<f32>(a1.z), b1, c61);
      c70 = fma(vec4<f32>(a1.w), b0, c70);
      c71 = fma(vec4<f32>(a1.w), b1, c71);
    }
    if (more) {
      store_a(STAGE - cur, lid, va);
      store_b(STAGE - cur, lid, vb);
    }
    workgroupBarrier();
  }
  if (ok) {
    store_row(row0 + ty * 4u + 0u, col0 + tx * 4u, c00, c01);
    store_row(row0 + ty * 4u + 1u, col0 + tx * 4u, c10, c11);
    store_row(row0 + ty * 4u + 2u, col0 + tx * 4u, c20, c21);
    store_row(row0 + ty * 4u + 3u, col0 + tx * 4u, c30, c31);
    store_row(row0 + 64u + ty * 4u + 0u, col0 + tx * 4u, c40, c41);
    store_row(row0 + 64u + ty * 4u + 1u, col0 + tx * 4u, c50, c51);
    store_row(row0 + 64u + ty * 4u + 2u, col0 + tx * 4u, c60, c61);
    store_row(row0 + 64u + ty * 4u + 3u, col0 + tx * 4u, c70, c71);
  }
}
