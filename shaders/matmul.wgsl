// Tiled fp32 matmul c = a · b, row-major: a (m, k), b (k, n), c (m, n).
// A workgroup of 256 threads computes a 128 x 128 tile of c; each thread an 8 x 8 register block
// (rows ty*4 + {0..3} and 64 + ty*4 + {0..3}, columns likewise from tx), so that its workgroup
// reads are conflict-free vec4 loads. K advances in steps of 8 through two 4 KiB workgroup
// tiles. The grid is 1-D over tiles (row-major), folded into (x, y) by split_workgroups.

struct Params {
  m: u32, n: u32, k: u32, tiles_n: u32,
  total: u32, pad0: u32, pad1: u32, pad2: u32,
}

@group(0) @binding(0) var<uniform> prm: Params;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> c: array<f32>;

const TM: u32 = 128u;
const TK: u32 = 8u;

var<workgroup> As: array<vec4<f32>, 256>;  // [k][i / 4], 8 x 128 floats
var<workgroup> Bs: array<vec4<f32>, 256>;  // [k][j / 4], 8 x 128 floats

// Writes one thread row: columns col .. col+3 from v0 and col+64 .. col+67 from v1.
fn store_row(row: u32, col: u32, v0: vec4<f32>, v1: vec4<f32>) {
  if (row >= prm.m) { return; }
  for (var q = 0u; q < 4u; q++) {
    if (col + q < prm.n) { c[row * prm.n + col + q] = v0[q]; }
    if (col + 64u + q < prm.n) { c[row * prm.n + col + 64u + q] = v1[q]; }
  }
}

@compute @workgroup_size(256)
fn matmul(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) lid: u32) {
  let lw = wid.x + wid.y * nwg.x;
  let ok = lw < prm.total;
  let w = select(0u, lw, ok);
  let row0 = (w / prm.tiles_n) * TM;
  let col0 = (w % prm.tiles_n) * TM;
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
  for (var k0 = 0u; k0 < prm.k; k0 += TK) {
    for (var r = 0u; r < 4u; r++) {
      let e = lid + 256u * r;
      // a tile: 128 rows x 8, k fastest (contiguous in a)
      let ia = e >> 3u;
      let ka = e & 7u;
      var va = 0.0;
      if (row0 + ia < prm.m && k0 + ka < prm.k) { va = a[(row0 + ia) * prm.k + k0 + ka]; }
      As[ka * 32u + (ia >> 2u)][ia & 3u] = va;
      // b tile: 8 x 128 columns, column fastest (contiguous in b)
      let jb = e & 127u;
      let kb = e >> 7u;
      var vb = 0.0;
      if (col0 + jb < prm.n && k0 + kb < prm.k) { vb = b[(k0 + kb) * prm.n + col0 + jb]; }
      Bs[kb * 32u + (jb >> 2u)][jb & 3u] = vb;
    }
    workgroupBarrier();
    for (var kk = 0u; kk < TK; kk++) {
      let a0 = As[kk * 32u + ty];
      let a1 = As[kk * 32u + 16u + ty];
      let b0 = Bs[kk * 32u + tx];
      let b1 = Bs[kk * 32u + 16u + tx];
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
