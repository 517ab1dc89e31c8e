// Tiled fp32 matmul c = a · b, row-major: a (m, k), b (k, n), c (m, n). a and b are bound as
// vec4 rows, zero-padded to whole vec4s: a (m, 4·k4) and b (4·k4, 4·n4) (the runner pads).
// A workgroup of 256 threads computes a 128 x 128 tile of c; each thread an 8 x 8 register block
// (rows ty*4 + {0..3} and 64 + ty*4 + {0..3}, columns likewise from tx), so that its workgroup
// reads are conflict-free vec4 loads. K advances in steps of 8 through two stages of workgroup
// tiles (16 KiB): each thread loads one vec4 of a and one of b for the next step into registers
// before the current step's FMAs and stores them into the other stage after them, so one
// barrier a step suffices and the loads' latency hides behind the arithmetic. The loads and
// stores are unconditional (past the end of k the loads give zeros, and the last step's stores
// are never read), the 8 k of a step are written out (k_step) and the step loop is unrolled by
// two so that both stages' offsets are constants; each of the three made the H200 faster (why,
// in NVIDIA's compiler, not profiled; figures: ssd/NOTES.md, "matmul round"). Every output sums
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

// 16 named accumulators (a struct, not an array: dynamic indexing would push an array to local
// memory): cRQ holds row R of the thread's block, columns tx*4 .. +3 (Q 0) or 64 + tx*4 .. (Q 1).
struct Acc {
  c00: vec4<f32>, c01: vec4<f32>, c10: vec4<f32>, c11: vec4<f32>,
  c20: vec4<f32>, c21: vec4<f32>, c30: vec4<f32>, c31: vec4<f32>,
  c40: vec4<f32>, c41: vec4<f32>, c50: vec4<f32>, c51: vec4<f32>,
  c60: vec4<f32>, c61: vec4<f32>, c70: vec4<f32>, c71: vec4<f32>,
}

// One k: a0, a1 = a's values of the thread's rows 0..3 and 4..7, b0, b1 = b's of its columns.
fn mac(acc: ptr<function, Acc>, a0: vec4<f32>, a1: vec4<f32>, b0: vec4<f32>, b1: vec4<f32>) {
  (*acc).c00 = fma(vec4<f32>(a0.x), b0, (*acc).c00);
  (*acc).c01 = fma(vec4<f32>(a0.x), b1, (*acc).c01);
  (*acc).c10 = fma(vec4<f32>(a0.y), b0, (*acc).c10);
  (*acc).c11 = fma(vec4<f32>(a0.y), b1, (*acc).c11);
  (*acc).c20 = fma(vec4<f32>(a0.z), b0, (*acc).c20);
  (*acc).c21 = fma(vec4<f32>(a0.z), b1, (*acc).c21);
  (*acc).c30 = fma(vec4<f32>(a0.w), b0, (*acc).c30);
  (*acc).c31 = fma(vec4<f32>(a0.w), b1, (*acc).c31);
  (*acc).c40 = fma(vec4<f32>(a1.x), b0, (*acc).c40);
  (*acc).c41 = fma(vec4<f32>(a1.x), b1, (*acc).c41);
  (*acc).c50 = fma(vec4<f32>(a1.y), b0, (*acc).c50);
  (*acc).c51 = fma(vec4<f32>(a1.y), b1, (*acc).c51);
  (*acc).c60 = fma(vec4<f32>(a1.z), b0, (*acc).c60);
  (*acc).c61 = fma(vec4<f32>(a1.z), b1, (*acc).c61);
  (*acc).c70 = fma(vec4<f32>(a1.w), b0, (*acc).c70);
  (*acc).c71 = fma(vec4<f32>(a1.w), b1, (*acc).c71);
}

// The FMAs of one K step from the stage at st (a constant at each call), k in order.
fn k_step(acc: ptr<function, Acc>, st: u32, ty: u32, tx: u32) {
  mac(acc, a_tile[st + ty], a_tile[st + 16u + ty], b_tile[st + tx], b_tile[st + 16u + tx]);
  mac(acc, a_tile[st + 32u + ty], a_tile[st + 48u + ty], b_tile[st + 32u + tx],
      b_tile[st + 48u + tx]);
  mac(acc, a_tile[st + 64u + ty], a_tile[st + 80u + ty], b_tile[st + 64u + tx],
      b_tile[st + 80u + tx]);
  mac(acc, a_tile[st + 96u + ty], a_tile[st + 112u + ty], b_tile[st + 96u + tx],
      b_tile[st + 112u + tx]);
  mac(acc, a_tile[st + 128u + ty], a_tile[st + 144u + ty], b_tile[st + 128u + tx],
      b_tile[st + 144u + tx]);
  mac(acc, a_tile[st + 160u + ty], a_tile[st + 176u + ty], b_tile[st + 160u + tx],
      b_tile[st + 176u + tx]);
  mac(acc, a_tile[st + 192u + ty], a_tile[st + 208u + ty], b_tile[st + 192u + tx],
      b_tile[st + 208u + tx]);
  mac(acc, a_tile[st + 224u + ty], a_tile[st + 240u + ty], b_tile[st + 224u + tx],
      b_tile[st + 240u + tx]);
}

// K step s from stage cur: the next step's vec4s into registers, the FMAs, the vec4s into the
// other stage, the barrier.
fn step(acc: ptr<function, Acc>, s: u32, cur: u32, row0: u32, col0: u32, lid: u32) {
  let va = load_a(row0, (s + 1u) * TILE_K, lid);
  let vb = load_b(col0, (s + 1u) * TILE_K, lid);
  k_step(acc, cur, lid >> 4u, lid & 15u);
  store_a(STAGE - cur, lid, va);
  store_b(STAGE - cur, lid, vb);
  workgroupBarrier();
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
  let z = vec4<f32>(0.0);
  var acc = Acc(z, z, z, z, z, z, z, z, z, z, z, z, z, z, z, z);
  let steps = (4u * params.k4 + TILE_K - 1u) / TILE_K;
  store_a(0u, lid, load_a(row0, 0u, lid));
  store_b(0u, lid, load_b(col0, 0u, lid));
  workgroupBarrier();
  for (var s = 0u; s < steps; s += 2u) {
    step(&acc, s, 0u, row0, col0, lid);
    if (s + 1u < steps) { step(&acc, s + 1u, STAGE, row0, col0, lid); }
  }
  if (ok) {
    store_row(row0 + ty * 4u + 0u, col0 + tx * 4u, acc.c00, acc.c01);
    store_row(row0 + ty * 4u + 1u, col0 + tx * 4u, acc.c10, acc.c11);
    store_row(row0 + ty * 4u + 2u, col0 + tx * 4u, acc.c20, acc.c21);
    store_row(row0 + ty * 4u + 3u, col0 + tx * 4u, acc.c30, acc.c31);
    store_row(row0 + 64u + ty * 4u + 0u, col0 + tx * 4u, acc.c40, acc.c41);
    store_row(row0 + 64u + ty * 4u + 1u, col0 + tx * 4u, acc.c50, acc.c51);
    store_row(row0 + 64u + ty * 4u + 2u, col0 + tx * 4u, acc.c60, acc.c61);
    store_row(row0 + 64u + ty * 4u + 3u, col0 + tx * 4u, acc.c70, acc.c71);
  }
}
