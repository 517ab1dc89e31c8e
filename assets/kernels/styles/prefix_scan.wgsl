// A bare linear recurrence h_t = a_t h_{t-1} + b_t as a PARALLEL prefix scan.
// One workgroup of 256 invocations per state channel (d, n) and batch element; the
// sequence goes by in tiles of 256 steps. Within a tile, Hillis-Steele: 8 rounds of the
// associative operator (a1, b1) o (a2, b2) = (a1 a2, a2 b1 + b2). Between tiles, the
// carry (the last h of the tile before) enters as h = A_prefix * carry + B_prefix.
struct Params { batch: u32, seq_len: u32, d_inner: u32, d_state: u32, }
@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> a: array<f32>;        // A_bar (batch, seq_len, d_inner, d_state)
@group(0) @binding(2) var<storage, read> bu: array<f32>;       // B_bar u, the same shape
@group(0) @binding(3) var<storage, read_write> h: array<f32>;  // h, the same shape

const TILE: u32 = 256u;
var<workgroup> sa: array<f32, 256>;
var<workgroup> sb: array<f32, 256>;
var<workgroup> carry: f32;

@compute @workgroup_size(256)
fn prefix_scan(@builtin(workgroup_id) wid: vec3<u32>,
               @builtin(local_invocation_id) lid: vec3<u32>) {
  let k = wid.x;  // d * d_state + n
  let b = wid.y;
  let W = params.d_inner * params.d_state;
  let L = params.seq_len;
  let j = lid.x;
  if (j == 0u) { carry = 0.0; }
  let tiles = (L + TILE - 1u) / TILE;
  for (var tile = 0u; tile < tiles; tile = tile + 1u) {
    let t = tile * TILE + j;
    let i = (b * L + t) * W + k;
    var pa = 1.0;  // past the end: the identity pair (1, 0)
    var pb = 0.0;
    if (t < L) { pa = a[i]; pb = bu[i]; }
    sa[j] = pa;
    sb[j] = pb;
    workgroupBarrier();
    for (var s = 1u; s < TILE; s = s * 2u) {
      var na = sa[j];
      var nb = sb[j];
      if (j >= s) {  // combine with the pair s to the left: (left) o (mine)
        nb = na * sb[j - s] + nb;
        na = na * sa[j - s];
      }
      workgroupBarrier();
      sa[j] = na;
      sb[j] = nb;
      workgroupBarrier();
    }
    let state = sa[j] * carry + sb[j];
    if (t < L) { h[i] = state; }
    workgroupBarrier();
    if (j == TILE - 1u) { carry = state; }
    workgroupBarrier();
  }
}
