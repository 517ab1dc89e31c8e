// ssmviz's own Mamba-2 SSD kernels: the chunked algorithm (Dao & Gu 2024) as parallel passes.
//
// Sizes: batch, seq_len (L), n_heads (H), d_head (P), n_groups (G), d_state (N), chunk_len (Q),
// n_chunks (NC = ceil(L / Q); the last chunk may be shorter). Head h reads group
// g = h / (H / G). Layouts (row-major f32):
//   x, y, dy, dx (batch, L, H, P); dt, ddt (batch, L, H); B, C, dB, dC (batch, L, G, N);
//   A_log, D, dt_bias and their grads (H,); chunk_states (batch, NC + 1, H, P, N), slot c =
//   state entering chunk c (slot 0 zeros, slot NC the final state; written only when
//   params.store_states); final_state (batch, H, P, N).
// Scratch: cumsum_scale (3, batch, H, L) = in-chunk cumsum of log Ā as hi + lo (two-sum, so that
//   segment sums cum_t - cum_s stay exact to fp32 even when cum is large) and the input scale
//   s_t; cb (batch, NC, G, Q, Q) = C Bᵀ per chunk; chunk_local (batch, NC, H, P, N);
//   dstates (batch, NC, H, P, N) = adjoint of the state leaving chunk c;
//   dcb (batch, NC, G, Q, Q) = gradient of cb (summed over the group's heads);
//   step_dots (3, batch, H, L) = v, e, ds (see ssd_dt_elem); boundary_da (batch, H, NC) = decay
//   gradient across each chunk boundary; param_partials (3, batch, NC, H) = per-chunk partial
//   sums of dA_log, ddt_bias, dD; tile_states (batch, NC, ceil(Q / 64) - 1, H, P, ceil(N / 4)
//   vec4s) = the chunk's own part of the state entering each of its 64-row tiles but the first;
//   states_in (batch, NC, H, P, ceil(N / 4) vec4s) = the state entering chunk c (what the
//   passes read: whole vec4s for ssd_chunk_out's loads).
// decay[t, s] = exp(a_{s+1} + ... + a_t) (s <= t, same chunk; a_t = log Ā_t) is the causal
// decay mask (the paper's L; here L is seq_len).
//
// Forward passes: ssd_prep -> ssd_cb -> ssd_chunk_state -> ssd_state_pass -> ssd_chunk_out.
// Backward passes: ssd_dchunk_state -> ssd_dstate_pass -> ssd_dx -> ssd_mh -> ssd_dc -> ssd_db
//   -> ssd_dt_elem -> ssd_dt_boundary -> ssd_dt_final -> ssd_param_reduce.
// Every pass reads only what earlier passes wrote (no cross-workgroup communication inside a
// pass), so results are bitwise deterministic. params.reverse = 1 reverses the workgroup order
// of every pass (a race probe: the bits must not change).
// Matmul-shaped passes: 64 x 64 output tile per 256-thread workgroup, 4 x 4 register block per
// thread, K step 16 (in ssd_cb 8, through two stages), two 4.25 KiB workgroup tiles (rows
// padded against bank conflicts); ssd_chunk_state and ssd_dchunk_state instead compute
// 64 x 128 (4 x 8 per thread) in two stages of K step 8 (see "64 x 128 two-stage core"), and
// ssd_mh runs its (head, K step) steps through two stages of K step 16 (see ssd_mh); factors that depend on a tile row alone
// are computed once per tile (or head) into row_f (in ssd_dx, into the registers of the
// invocations that stage that row, which saves a barrier and the table), those of a K column
// once per K step, with the same operations as per element (so the same bits); ssd_chunk_out
// splits its decays at the tile's first row instead (see there). Hot loads are unconditional
// at a clamped index, masked by select: no divergent branch around a load.

struct Params {
  batch: u32, seq_len: u32, n_heads: u32, d_head: u32,
  n_groups: u32, d_state: u32, chunk_len: u32, n_chunks: u32,
  convention: u32, reverse: u32, store_states: u32, total: u32,
  n_ptiles: u32, n_ntiles: u32, n_qtiles: u32, pad0: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> dt: array<f32>;
@group(0) @binding(3) var<storage, read> A_log: array<f32>;
@group(0) @binding(4) var<storage, read> B: array<f32>;
@group(0) @binding(5) var<storage, read> C: array<f32>;
@group(0) @binding(6) var<storage, read> D: array<f32>;
@group(0) @binding(7) var<storage, read> dt_bias: array<f32>;
@group(0) @binding(8) var<storage, read> dy: array<f32>;
@group(0) @binding(9) var<storage, read_write> y: array<f32>;
@group(0) @binding(10) var<storage, read_write> final_state: array<f32>;
@group(0) @binding(11) var<storage, read_write> chunk_states: array<f32>;
@group(0) @binding(12) var<storage, read_write> dx: array<f32>;
@group(0) @binding(13) var<storage, read_write> ddt: array<f32>;
@group(0) @binding(14) var<storage, read_write> dA_log: array<f32>;
@group(0) @binding(15) var<storage, read_write> dB: array<f32>;
@group(0) @binding(16) var<storage, read_write> dC: array<f32>;
@group(0) @binding(17) var<storage, read_write> dD: array<f32>;
@group(0) @binding(18) var<storage, read_write> ddt_bias: array<f32>;
@group(0) @binding(19) var<storage, read_write> cumsum_scale: array<f32>;
@group(0) @binding(20) var<storage, read_write> cb: array<f32>;
@group(0) @binding(21) var<storage, read_write> chunk_local: array<f32>;
@group(0) @binding(22) var<storage, read_write> dstates: array<f32>;
@group(0) @binding(23) var<storage, read_write> dcb: array<f32>;
@group(0) @binding(24) var<storage, read_write> step_dots: array<f32>;
@group(0) @binding(25) var<storage, read_write> boundary_da: array<f32>;
@group(0) @binding(26) var<storage, read_write> param_partials: array<f32>;
@group(0) @binding(27) var<storage, read_write> tile_states: array<vec4<f32>>;
@group(0) @binding(28) var<storage, read_write> states_in: array<vec4<f32>>;

// params.convention (the order of reference._common.CONVENTIONS); 1 = builderforce.
const CONV_MAMBA: u32 = 0u;

const TILE: u32 = 64u;
const TILE_K: u32 = 16u;
const WORKGROUP: u32 = 256u;
const WORKGROUP_1D: u32 = 64u;

// ---------------------------------------------------------------- tile matmul core
// Rows of 64 floats padded to 68 (TILE_ROW vec4s), so that the staging stores of a K-fast
// operand (8 k x 4 i per warp, see m_fastk) fall in 32 distinct banks.
const TILE_ROW: u32 = 17u;
var<workgroup> a_tile: array<vec4<f32>, 272>;  // [k][i / 4], 16 x 64 (+4 pad) floats
var<workgroup> b_tile: array<vec4<f32>, 272>;  // [k][j / 4], 16 x 64 (+4 pad) floats
// Per-row factors of a tile's operands, computed once per tile or head (row_f), and
// ssd_dt_final's second table (col_f).
var<workgroup> row_f: array<vec4<f32>, 64>;
var<workgroup> col_f: array<vec4<f32>, 64>;
// Accumulator rows ty*4 + r, columns tx*4 + c. Four named vectors, not an array: a
// dynamically indexed private array is placed in slow local memory by some drivers.
var<private> acc0: vec4<f32>;
var<private> acc1: vec4<f32>;
var<private> acc2: vec4<f32>;
var<private> acc3: vec4<f32>;

// The invocation's 4 x 4 block of a tile: a warp (32 invocations) covers 4 ty x 8 tx, a
// 16 x 32 block, so that one K step's workgroup reads are 4 distinct vec4s of a_tile and 8 of
// b_tile per warp (a 2 x 16 layout reads 2 + 16).
fn lane_tx(lid: u32) -> u32 { return (lid & 7u) | (((lid >> 5u) & 1u) << 3u); }
fn lane_ty(lid: u32) -> u32 { return ((lid >> 3u) & 3u) | ((lid >> 6u) << 2u); }

fn put_a(k: u32, i: u32, v: f32) { a_tile[k * TILE_ROW + (i >> 2u)][i & 3u] = v; }
fn put_b(k: u32, j: u32, v: f32) { b_tile[k * TILE_ROW + (j >> 2u)][j & 3u] = v; }

fn acc_zero() {
  acc0 = vec4<f32>(0.0);
  acc1 = vec4<f32>(0.0);
  acc2 = vec4<f32>(0.0);
  acc3 = vec4<f32>(0.0);
}

fn acc_row(r: u32) -> vec4<f32> {
  switch r {
    case 0u: { return acc0; }
    case 1u: { return acc1; }
    case 2u: { return acc2; }
    default: { return acc3; }
  }
}

// One K step of 16 on the staged tiles.
fn mm_step(lid: u32) {
  let tx = lane_tx(lid);
  let ty = lane_ty(lid);
  for (var k = 0u; k < TILE_K; k++) {
    let a = a_tile[k * TILE_ROW + ty];
    let b = b_tile[k * TILE_ROW + tx];
    acc0 = fma(vec4<f32>(a.x), b, acc0);
    acc1 = fma(vec4<f32>(a.y), b, acc1);
    acc2 = fma(vec4<f32>(a.z), b, acc2);
    acc3 = fma(vec4<f32>(a.w), b, acc3);
  }
}

// The K step of ssd_cb (and of the two-stage cores), whose operands are both K-fast: 8 of
// the 16 rows of the staged tiles (a K step of 8 made ssd_cb faster on the H200 and the other
// passes slower: ssd/NOTES.md, "SSD round 3"). ssd_cb's staging: element e (0..512) of a
// 64 x 8 operand tile is row e >> 3, k e & 7 (a warp: 8 k of 4 rows, one 32-byte segment a
// row, 32 banks).
const TILE_K8: u32 = 8u;

// Element e (0..1024) of a 64 x 16 tile, with the 64-long side fastest (coalesced when that
// side is contiguous in memory) or the 16-long K side fastest. K-fast: a warp's 32 lanes take
// k = 0..7 (one 32-byte segment of a row) of 4 rows, bit 5 of e picks k 8..15, so that k does
// not depend on e's bits above 7 (an invocation's 4 elements share their k).
fn m_fast64(e: u32) -> u32 { return e & 63u; }
// A K-fast operand staged as one vec4 of k per invocation: row g_row, k g_quad*4 ..+3; a
// warp takes 16 rows x 2 vec4s (32-byte segments), and its transposed stores fall in 32 banks.
fn g_row(lid: u32) -> u32 { return ((lid >> 1u) & 15u) | (((lid >> 5u) & 3u) << 4u); }
fn g_quad(lid: u32) -> u32 { return (lid & 1u) | ((lid >> 7u) << 1u); }
fn k_fast64(e: u32) -> u32 { return e >> 6u; }
fn m_fastk(e: u32) -> u32 { return ((e >> 3u) & 3u) | ((e >> 6u) << 2u); }
fn k_fastk(e: u32) -> u32 { return (e & 7u) | (((e >> 5u) & 1u) << 3u); }

// ---------------------------------------------------------------- helpers
// Linear workgroup id over a split (x, y) grid; reversed when the race probe is on.
fn wg_linear(wid: vec3<u32>, nwg: vec3<u32>) -> u32 {
  let l = wid.x + wid.y * nwg.x;
  if (params.reverse == 1u && l < params.total) { return params.total - 1u - l; }
  return l;
}

// log1p(z) for z in [0, 1] to fp32 accuracy: 2 atanh(z / (2 + z)), |w| <= 1/3.
fn log1p_small(z: f32) -> f32 {
  let w = z / (2.0 + z);
  let w2 = w * w;
  var s = 1.0 / 19.0;
  s = fma(s, w2, 1.0 / 17.0);
  s = fma(s, w2, 1.0 / 15.0);
  s = fma(s, w2, 1.0 / 13.0);
  s = fma(s, w2, 1.0 / 11.0);
  s = fma(s, w2, 1.0 / 9.0);
  s = fma(s, w2, 1.0 / 7.0);
  s = fma(s, w2, 1.0 / 5.0);
  s = fma(s, w2, 1.0 / 3.0);
  s = fma(s, w2, 1.0);
  return 2.0 * w * s;
}

// Stable softplus: x above 20 (as the mamba CUDA kernels), max(x, 0) + log1p(exp(-|x|)) below.
fn softplus(v: f32) -> f32 {
  if (v > 20.0) { return v; }
  return max(v, 0.0) + log1p_small(exp(-abs(v)));
}

fn sigmoid(v: f32) -> f32 {
  let e = exp(-abs(v));
  if (v >= 0.0) { return 1.0 / (1.0 + e); }
  return e / (1.0 + e);
}

fn softplus_grad(v: f32) -> f32 {
  if (v > 20.0) { return 1.0; }
  return sigmoid(v);
}

fn n_bht() -> u32 { return params.batch * params.n_heads * params.seq_len; }
fn bht_idx(b: u32, h: u32, t: u32) -> u32 { return (b * params.n_heads + h) * params.seq_len + t; }
fn x_idx(b: u32, t: u32, h: u32, p: u32) -> u32 {
  return ((b * params.seq_len + t) * params.n_heads + h) * params.d_head + p;
}
fn bc_idx(b: u32, t: u32, g: u32, n: u32) -> u32 {
  return ((b * params.seq_len + t) * params.n_groups + g) * params.d_state + n;
}
// (batch, slots, H, P, N) state arrays.
fn state_idx(b: u32, slots: u32, c: u32, h: u32, p: u32, n: u32) -> u32 {
  return (((b * slots + c) * params.n_heads + h) * params.d_head + p) * params.d_state + n;
}
// (slots, H, P, ceil(N / 4)) vec4 state arrays: the vec4 holding n of slot `slot`.
fn state4_idx(slot: u32, h: u32, p: u32, n: u32) -> u32 {
  return ((slot * params.n_heads + h) * params.d_head + p) * ((params.d_state + 3u) / 4u) + n / 4u;
}
// tile_states (batch, NC, n_qtiles - 1, H, P, ceil(N / 4)) vec4s: slot j = the chunk's own
// part of the state entering its tile j + 1 (see ssd_chunk_state).
fn tile_state_idx(b: u32, c: u32, j: u32, h: u32, p: u32, n: u32) -> u32 {
  return state4_idx((b * params.n_chunks + c) * (params.n_qtiles - 1u) + j, h, p, n);
}
// states_in (batch, NC, H, P, ceil(N / 4)) vec4s: chunk_states' slot c (the state entering
// chunk c) as whole vec4s, for ssd_chunk_out's vec4 loads.
fn state_in_idx(b: u32, c: u32, h: u32, p: u32, n: u32) -> u32 {
  return state4_idx(b * params.n_chunks + c, h, p, n);
}
fn cb_idx(b: u32, c: u32, g: u32, i: u32, j: u32) -> u32 {
  let row = ((b * params.n_chunks + c) * params.n_groups + g) * params.chunk_len + i;
  return row * params.chunk_len + j;
}

// cum_t (in-chunk inclusive sum of log Ā) as hi + lo, and s_t.
fn cum_hi(b: u32, h: u32, t: u32) -> f32 { return cumsum_scale[bht_idx(b, h, t)]; }
fn cum_lo(b: u32, h: u32, t: u32) -> f32 { return cumsum_scale[n_bht() + bht_idx(b, h, t)]; }
fn in_scale(b: u32, h: u32, t: u32) -> f32 { return cumsum_scale[2u * n_bht() + bht_idx(b, h, t)]; }
fn cum(b: u32, h: u32, t: u32) -> f32 { return cum_hi(b, h, t) + cum_lo(b, h, t); }
// Segment sum a_{s+1} + ... + a_t (t >= s, same chunk), exact up to one rounding.
fn seg(b: u32, h: u32, t: u32, s: u32) -> f32 {
  return (cum_hi(b, h, t) - cum_hi(b, h, s)) + (cum_lo(b, h, t) - cum_lo(b, h, s));
}

fn chunk_len_of(c: u32) -> u32 {
  return min(params.chunk_len, params.seq_len - c * params.chunk_len);
}

// ================================================================ forward
// Pass 1: per (b, h, chunk), one workgroup: in-chunk cumsum of a_t = log Ā_t and s_t. Each
// block of 64 steps: a_t and s_t in parallel, then the sequential two-sum by one invocation,
// then the stores in parallel (the sums in the same order as one thread walking the chunk).
@compute @workgroup_size(64)
fn ssd_prep(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
  let lw = wg_linear(wid, nwg);
  let ok = lw < params.total;
  let w = select(0u, lw, ok);
  let c = w % params.n_chunks;
  let bh = w / params.n_chunks;
  let h = bh % params.n_heads;
  let b = bh / params.n_heads;
  let t0 = c * params.chunk_len;
  let len = chunk_len_of(c);
  let a_log = A_log[h];
  let bias = dt_bias[h];
  var hi = 0.0;
  var lo = 0.0;
  for (var i0 = 0u; i0 < len; i0 += WORKGROUP_1D) {
    let i = i0 + lid;
    var a = 0.0;
    if (i < len) {
      let t = t0 + i;
      let dt_eff = softplus(dt[(b * params.seq_len + t) * params.n_heads + h] + bias);
      var s: f32;
      if (params.convention == CONV_MAMBA) {
        a = -exp(a_log) * dt_eff;
        s = dt_eff;
      } else {
        a = -softplus(a_log) * dt_eff;
        s = 1.0;
      }
      if (ok) { cumsum_scale[2u * n_bht() + bht_idx(b, h, t)] = s; }
    }
    row_f[lid].x = a;
    workgroupBarrier();
    if (lid == 0u) {
      for (var q = 0u; q < min(WORKGROUP_1D, len - i0); q++) {
        let aq = row_f[q].x;
        // two-sum: hi + lo carries the running sum to ~2x fp32 precision
        let sum = hi + aq;
        let bp = sum - hi;
        lo = lo + ((hi - (sum - bp)) + (aq - bp));
        hi = sum;
        row_f[q].y = hi;
        row_f[q].z = lo;
      }
    }
    workgroupBarrier();
    if (ok && i < len) {
      let k = bht_idx(b, h, t0 + i);
      cumsum_scale[k] = row_f[lid].y;
      cumsum_scale[n_bht() + k] = row_f[lid].z;
    }
    workgroupBarrier();
  }
}

// Pass 2: cb[b, c, g] = C Bᵀ over the chunk (Q x Q, lower tiles only), K = d_state, in
// K steps of 8 through two stages (rows 0..7 and 8..15 of a_tile / b_tile): each invocation
// loads its next step's elements into registers before the current step's FMAs and stores
// them into the other stage after them, one barrier a step (matmul.wgsl's recipe).
// An invocation's elements of the K step at k0: rows e / 8 of A (C) and B for e = lid and
// lid + 256, k = k0 + e % 8 (zero past the chunk or d_state).
fn cb_load(b: u32, g: u32, t0: u32, len: u32, ti: u32, tj: u32, k0: u32, lid: u32)
    -> vec4<f32> {
  let k = k0 + (lid & 7u);
  let kc = min(k, params.d_state - 1u);
  let m0 = lid >> 3u;
  let last = len - 1u;
  let i0 = ti * TILE + m0;
  let j0 = tj * TILE + m0;
  let a0 = C[bc_idx(b, t0 + min(i0, last), g, kc)];
  let b0 = B[bc_idx(b, t0 + min(j0, last), g, kc)];
  let a1 = C[bc_idx(b, t0 + min(i0 + 32u, last), g, kc)];
  let b1 = B[bc_idx(b, t0 + min(j0 + 32u, last), g, kc)];
  let kin = k < params.d_state;
  return vec4<f32>(select(0.0, a0, kin && i0 < len), select(0.0, b0, kin && j0 < len),
                   select(0.0, a1, kin && i0 + 32u < len), select(0.0, b1, kin && j0 + 32u < len));
}

fn cb_put(st: u32, lid: u32, v: vec4<f32>) {
  let kk = st * TILE_K8 + (lid & 7u);
  let m0 = lid >> 3u;
  put_a(kk, m0, v.x);
  put_b(kk, m0, v.y);
  put_a(kk, m0 + 32u, v.z);
  put_b(kk, m0 + 32u, v.w);
}

// The FMAs of one K step of 8 from stage st (0 or 1, a constant at each call).
fn cb_step(st: u32, lid: u32) {
  let tx = lane_tx(lid);
  let ty = lane_ty(lid);
  for (var k = st * TILE_K8; k < st * TILE_K8 + TILE_K8; k++) {
    let a = a_tile[k * TILE_ROW + ty];
    let b = b_tile[k * TILE_ROW + tx];
    acc0 = fma(vec4<f32>(a.x), b, acc0);
    acc1 = fma(vec4<f32>(a.y), b, acc1);
    acc2 = fma(vec4<f32>(a.z), b, acc2);
    acc3 = fma(vec4<f32>(a.w), b, acc3);
  }
}

@compute @workgroup_size(256)
fn ssd_cb(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) lid: u32) {
  let lw = wg_linear(wid, nwg);
  let ok = lw < params.total;
  let w = select(0u, lw, ok);
  let nq = params.n_qtiles;
  let tj = w % nq;
  let ti = (w / nq) % nq;
  let z = w / (nq * nq);
  let g = z % params.n_groups;
  let c = (z / params.n_groups) % params.n_chunks;
  let b = z / (params.n_groups * params.n_chunks);
  let t0 = c * params.chunk_len;
  let len = chunk_len_of(c);
  let need = tj <= ti && ti * TILE < len;
  let steps = select(0u, (params.d_state + TILE_K8 - 1u) / TILE_K8, need);
  acc_zero();
  if (need) {
    cb_put(0u, lid, cb_load(b, g, t0, len, ti, tj, 0u, lid));
    workgroupBarrier();
  }
  for (var s = 0u; s < steps; s += 2u) {
    let v1 = cb_load(b, g, t0, len, ti, tj, (s + 1u) * TILE_K8, lid);
    cb_step(0u, lid);
    cb_put(1u, lid, v1);
    workgroupBarrier();
    if (s + 1u < steps) {
      let v2 = cb_load(b, g, t0, len, ti, tj, (s + 2u) * TILE_K8, lid);
      cb_step(1u, lid);
      cb_put(0u, lid, v2);
      workgroupBarrier();
    }
  }
  if (ok && need) {
    let tx = lane_tx(lid);
    let ty = lane_ty(lid);
    for (var r = 0u; r < 4u; r++) {
      let i = ti * TILE + ty * 4u + r;
      for (var q = 0u; q < 4u; q++) {
        let j = tj * TILE + tx * 4u + q;
        if (i < len && j < len) { cb[cb_idx(b, c, g, i, j)] = acc_row(r)[q]; }
      }
    }
  }
}

// ---------------------------------------------------------------- 64 x 128 two-stage core
// ssd_chunk_state and ssd_dchunk_state (P x N outputs, K = the chunk's steps, both operands
// 64-fast in memory): one workgroup computes a 64 (p) x 128 (n) tile, 4 x 8 outputs per
// invocation (rows ty*4 ..+3, columns tx*4 ..+3 and 64 + tx*4 ..+3), so that each staged A
// element (an exp and its cumsum loads) serves 128 columns instead of 64. K advances in steps
// of 8 through two stages (matmul.wgsl's recipe): each invocation loads its next step's
// elements into registers before the current step's FMAs and stores them into the other
// stage after them, one barrier a step; loads and stores are unconditional (out of range they
// give zeros, and the last step's stores are never read), and the step loop is unrolled by two
// so that the stage offsets are constants. Per step and invocation: 2 elements of A (8 x 64)
// and 4 of B (8 x 128; C in ssd_dchunk_state), all at p or n = lid % 64 (coalesced),
// k = lid / 64 and 4 + lid / 64.
// Stages: A in a_tile and B's columns 0..63 in b_tile (8 rows of TILE_ROW vec4s each), B's
// columns 64..127 in row_dots (8 rows of 16 vec4s, unpadded: its stores are 32 consecutive
// floats a warp, its reads are broadcasts), so the module's workgroup storage stays as it is.
// Every output sums its k in order with one fma each, as mm_step does (a zero k past the
// chunk's end adds an exact +0: an accumulator is never -0).
const K8_STAGE: u32 = 136u;  // vec4s of one stage of a_tile / b_tile: 8 x TILE_ROW
const K8_STAGE_HI: u32 = 128u;  // vec4s of one stage of row_dots: 8 x 16

// cR0 / cR1: row R of the invocation's block, columns tx*4 ..+3 / 64 + tx*4 ..+3. Named
// fields, not an array: a dynamically indexed array would be placed in local memory.
struct Acc48 {
  c00: vec4<f32>, c01: vec4<f32>, c10: vec4<f32>, c11: vec4<f32>,
  c20: vec4<f32>, c21: vec4<f32>, c30: vec4<f32>, c31: vec4<f32>,
}

// The K row at vec4 offset `at` of a_tile / b_tile and `hi` of row_dots.
fn mac48(acc: ptr<function, Acc48>, at: u32, hi: u32, ty: u32, tx: u32) {
  let a = a_tile[at + ty];
  let b0 = b_tile[at + tx];
  let b1 = row_dots[hi + tx];
  (*acc).c00 = fma(vec4<f32>(a.x), b0, (*acc).c00);
  (*acc).c01 = fma(vec4<f32>(a.x), b1, (*acc).c01);
  (*acc).c10 = fma(vec4<f32>(a.y), b0, (*acc).c10);
  (*acc).c11 = fma(vec4<f32>(a.y), b1, (*acc).c11);
  (*acc).c20 = fma(vec4<f32>(a.z), b0, (*acc).c20);
  (*acc).c21 = fma(vec4<f32>(a.z), b1, (*acc).c21);
  (*acc).c30 = fma(vec4<f32>(a.w), b0, (*acc).c30);
  (*acc).c31 = fma(vec4<f32>(a.w), b1, (*acc).c31);
}

// The FMAs of one K step from stage st (0 or 1, a constant at each call), k in order.
fn k_step48(acc: ptr<function, Acc48>, st: u32, lid: u32) {
  let ty = lane_ty(lid);
  let tx = lane_tx(lid);
  let at = st * K8_STAGE;
  let hi = st * K8_STAGE_HI;
  mac48(acc, at, hi, ty, tx);
  mac48(acc, at + TILE_ROW, hi + 16u, ty, tx);
  mac48(acc, at + 2u * TILE_ROW, hi + 32u, ty, tx);
  mac48(acc, at + 3u * TILE_ROW, hi + 48u, ty, tx);
  mac48(acc, at + 4u * TILE_ROW, hi + 64u, ty, tx);
  mac48(acc, at + 5u * TILE_ROW, hi + 80u, ty, tx);
  mac48(acc, at + 6u * TILE_ROW, hi + 96u, ty, tx);
  mac48(acc, at + 7u * TILE_ROW, hi + 112u, ty, tx);
}

// Stores an invocation's A elements (k = lid / 64 and 4 + lid / 64, row lid % 64) and B
// elements (the same k, columns lid % 64 and 64 + lid % 64) into stage st.
fn put48(st: u32, lid: u32, a0: f32, a1: f32, b00: f32, b01: f32, b10: f32, b11: f32) {
  let m = lid & 63u;
  let at = st * K8_STAGE + (lid >> 6u) * TILE_ROW + (m >> 2u);
  let hi = st * K8_STAGE_HI + (lid >> 6u) * 16u + (m >> 2u);
  a_tile[at][m & 3u] = a0;
  a_tile[at + 4u * TILE_ROW][m & 3u] = a1;
  b_tile[at][m & 3u] = b00;
  b_tile[at + 4u * TILE_ROW][m & 3u] = b10;
  row_dots[hi][m & 3u] = b01;
  row_dots[hi + 64u][m & 3u] = b11;
}

// A workgroup's (b, c, h, group g, first step t0, steps len) and its tile's first row p0 and
// column n0. Workgroup-uniform only (the uniformity analysis treats a struct as one value, and
// the step loop's bound comes from it): an invocation's staging row is p0 + lid % 64, its
// columns n0 + lid % 64 and that + 64.
struct Tile48 {
  b: u32, c: u32, h: u32, g: u32, t0: u32, len: u32, p0: u32, n0: u32,
}

fn tile48(w: u32) -> Tile48 {
  let n_wide = (params.n_ntiles + 1u) / 2u;  // 128-column tiles
  let nt = w % n_wide;
  let pt = (w / n_wide) % params.n_ptiles;
  let z = w / (n_wide * params.n_ptiles);
  let h = z % params.n_heads;
  let c = (z / params.n_heads) % params.n_chunks;
  let b = z / (params.n_heads * params.n_chunks);
  let t0 = c * params.chunk_len;
  let len = chunk_len_of(c);
  let p0 = pt * TILE;
  let n0 = nt * 2u * TILE;
  return Tile48(b, c, h, h / (params.n_heads / params.n_groups), t0, len, p0, n0);
}

fn acc48_zero() -> Acc48 {
  let z = vec4<f32>(0.0);
  return Acc48(z, z, z, z, z, z, z, z);
}

// Writes one row of the invocation's block: columns n0 .. n0+3 from v0, n0+64 .. from v1,
// into chunk_local (store_state_row) or tile_states' slot `tile` (store_tile_row): two
// functions, so that ssd_dchunk_state does not name tile_states (a pass binds what it names).
fn store_state_row(q: Tile48, p: u32, n0: u32, v0: vec4<f32>, v1: vec4<f32>) {
  if (p >= params.d_head) { return; }
  for (var j = 0u; j < 4u; j++) {
    if (n0 + j < params.d_state) {
      chunk_local[state_idx(q.b, params.n_chunks, q.c, q.h, p, n0 + j)] = v0[j];
    }
    if (n0 + TILE + j < params.d_state) {
      chunk_local[state_idx(q.b, params.n_chunks, q.c, q.h, p, n0 + TILE + j)] = v1[j];
    }
  }
}
// (tile_states holds whole vec4s: one store each, past d_state the exact zeros of B's zero
// columns.)
fn store_tile_row(q: Tile48, tile: u32, p: u32, n0: u32, v0: vec4<f32>, v1: vec4<f32>) {
  if (p >= params.d_head) { return; }
  if (n0 < params.d_state) { tile_states[tile_state_idx(q.b, q.c, tile, q.h, p, n0)] = v0; }
  if (n0 + TILE < params.d_state) {
    tile_states[tile_state_idx(q.b, q.c, tile, q.h, p, n0 + TILE)] = v1;
  }
}

// Writes the invocation's 4 x 8 block of the workgroup's tile into chunk_local.
fn store_state_block(acc: Acc48, q: Tile48, lid: u32) {
  let p = q.p0 + lane_ty(lid) * 4u;
  let n = q.n0 + lane_tx(lid) * 4u;
  store_state_row(q, p, n, acc.c00, acc.c01);
  store_state_row(q, p + 1u, n, acc.c10, acc.c11);
  store_state_row(q, p + 2u, n, acc.c20, acc.c21);
  store_state_row(q, p + 3u, n, acc.c30, acc.c31);
}

// ... into tile_states' slot `tile`.
fn store_tile_block(acc: Acc48, q: Tile48, tile: u32, lid: u32) {
  let p = q.p0 + lane_ty(lid) * 4u;
  let n = q.n0 + lane_tx(lid) * 4u;
  store_tile_row(q, tile, p, n, acc.c00, acc.c01);
  store_tile_row(q, tile, p + 1u, n, acc.c10, acc.c11);
  store_tile_row(q, tile, p + 2u, n, acc.c20, acc.c21);
  store_tile_row(q, tile, p + 3u, n, acc.c30, acc.c31);
}

fn acc48_scale(acc: ptr<function, Acc48>, f: f32) {
  (*acc).c00 *= f;
  (*acc).c01 *= f;
  (*acc).c10 *= f;
  (*acc).c11 *= f;
  (*acc).c20 *= f;
  (*acc).c21 *= f;
  (*acc).c30 *= f;
  (*acc).c31 *= f;
}

// Pass 3: chunk_local[b, c, h] = Σ_s exp(cum_end - cum_s) s_s x_s ⊗ B_s  (P x N, K = chunk),
// 64 x 128 per workgroup (the two-stage core above), and on the way the chunk's own part of
// the state entering each of its 64-row tiles T0 = 64 (j + 1) < len:
// tile_states[b, c, j, h] = Σ_{s < T0} exp(cum_T0 - cum_s) s_s x_s ⊗ B_s, so that
// ssd_chunk_out needs no causal product left of a tile's own columns. The steps go in 64-step
// blocks, each against its reference step (the next block's first, or the chunk's last):
// at a block's end the sum is stored and scaled by exp(cum_ref' - cum_ref) <= 1.
// A's element of step s at row p: x_s, cum_s (hi, lo), s_s; past the chunk or d_head
// (0, cum_end, 0), whose value below is an exact 0. end = the reference's cum as (hi, lo).
fn chunk_state_a(q: Tile48, end: vec2<f32>, s: u32, p: u32) -> vec4<f32> {
  if (s >= q.len || p >= params.d_head) { return vec4<f32>(0.0, end.x, end.y, 0.0); }
  let t = q.t0 + s;
  return vec4<f32>(x[x_idx(q.b, t, q.h, p)], cum_hi(q.b, q.h, t), cum_lo(q.b, q.h, t),
                   in_scale(q.b, q.h, t));
}

// x_s exp(seg(end, s)) s_s, with seg's operations.
fn chunk_state_a_val(end: vec2<f32>, v: vec4<f32>) -> f32 {
  return v.x * exp((end.x - v.y) + (end.y - v.z)) * v.w;
}

fn b_elem(q: Tile48, s: u32, n: u32) -> f32 {
  if (s >= q.len || n >= params.d_state) { return 0.0; }
  return B[bc_idx(q.b, q.t0 + s, q.g, n)];
}

// An invocation's prefetched elements of one K step: A's two and B's four. ssd_chunk_state
// computes A's values at the load (in a0.x, a1.x), ssd_dchunk_state keeps A's raw loads and
// computes after the FMAs: on the H200 each was faster that way (ssd/NOTES.md, "SSD round 5").
struct Pre48 {
  a0: vec4<f32>, a1: vec4<f32>, b00: f32, b01: f32, b10: f32, b11: f32,
}

// Loads the invocation's elements of the K step whose first k is k0, A's values computed.
fn chunk_state_load(q: Tile48, end: vec2<f32>, k0: u32, lid: u32) -> Pre48 {
  let k = k0 + (lid >> 6u);
  let p = q.p0 + (lid & 63u);
  let n = q.n0 + (lid & 63u);
  let a0 = chunk_state_a_val(end, chunk_state_a(q, end, k, p));
  let a1 = chunk_state_a_val(end, chunk_state_a(q, end, k + 4u, p));
  return Pre48(vec4<f32>(a0), vec4<f32>(a1), b_elem(q, k, n),
               b_elem(q, k, n + TILE), b_elem(q, k + 4u, n), b_elem(q, k + 4u, n + TILE));
}

// Stores loaded elements into stage st.
fn chunk_state_put(st: u32, lid: u32, v: Pre48) {
  put48(st, lid, v.a0.x, v.a1.x, v.b00, v.b01, v.b10, v.b11);
}

const BLOCK_STEPS: u32 = 8u;  // K steps of TILE_K8 in a 64-step block

// The cum (hi, lo) of K step s's reference step: the first step of the next 64-step block,
// or the chunk's last step.
fn block_ref(q: Tile48, s: u32) -> vec2<f32> {
  let t = q.t0 + min((s / BLOCK_STEPS + 1u) * TILE, q.len - 1u);
  return vec2<f32>(cum_hi(q.b, q.h, t), cum_lo(q.b, q.h, t));
}

// K step s from stage cur: when s begins a block after the first, the tile state out and the
// sum moved to the new reference (before the prefetch, so that little else is live); the
// next step's elements into registers (against the next block's reference when step s + 1
// begins one), the FMAs, the elements into the other stage, the barrier.
fn chunk_state_step(acc: ptr<function, Acc48>, q: Tile48, ok: bool,
                    end: ptr<function, vec2<f32>>, s: u32, cur: u32, lid: u32) {
  if (s % BLOCK_STEPS == 0u && s > 0u) {
    if (ok) { store_tile_block(*acc, q, s / BLOCK_STEPS - 1u, lid); }
    let d = block_ref(q, s - 1u);
    acc48_scale(acc, exp(((*end).x - d.x) + ((*end).y - d.y)));
  }
  if ((s + 1u) % BLOCK_STEPS == 0u) { *end = block_ref(q, s + 1u); }
  let v = chunk_state_load(q, *end, (s + 1u) * TILE_K8, lid);
  k_step48(acc, cur, lid);
  chunk_state_put(1u - cur, lid, v);
  workgroupBarrier();
}

@compute @workgroup_size(256)
fn ssd_chunk_state(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                   @builtin(local_invocation_index) lid: u32) {
  let lw = wg_linear(wid, nwg);
  let ok = lw < params.total;
  let q = tile48(select(0u, lw, ok));
  var acc = acc48_zero();
  var end = block_ref(q, 0u);
  chunk_state_put(0u, lid, chunk_state_load(q, end, 0u, lid));
  workgroupBarrier();
  let steps = (q.len + TILE_K8 - 1u) / TILE_K8;
  for (var s = 0u; s < steps; s += 2u) {
    chunk_state_step(&acc, q, ok, &end, s, 0u, lid);
    if (s + 1u < steps) { chunk_state_step(&acc, q, ok, &end, s + 1u, 1u, lid); }
  }
  if (ok) { store_state_block(acc, q, lid); }
}

// Pass 4: the recurrence between chunks, one thread per state element (b, h, p, n):
// S[c + 1] = exp(cum_end_c) S[c] + chunk_local[c]; S[0] = 0. S[c] goes to states_in, which
// the later passes read; chunk_states (S[0 .. NC]) is written only when it is returned.
@compute @workgroup_size(64)
fn ssd_state_pass(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                  @builtin(local_invocation_index) lid: u32) {
  let item = wg_linear(wid, nwg) * WORKGROUP_1D + lid;
  let pn = params.d_head * params.d_state;
  if (item >= params.batch * params.n_heads * pn) { return; }
  let e = item % pn;
  let p = e / params.d_state;
  let n = e % params.d_state;
  let bh = item / pn;
  let h = bh % params.n_heads;
  let b = bh / params.n_heads;
  let slots = params.n_chunks + 1u;
  let keep = params.store_states != 0u;
  var s = 0.0;
  if (keep) { chunk_states[state_idx(b, slots, 0u, h, p, n)] = 0.0; }
  for (var c = 0u; c < params.n_chunks; c++) {
    states_in[state_in_idx(b, c, h, p, n)][n & 3u] = s;
    let tend = c * params.chunk_len + chunk_len_of(c) - 1u;
    s = fma(exp(cum(b, h, tend)), s, chunk_local[state_idx(b, params.n_chunks, c, h, p, n)]);
    if (keep) { chunk_states[state_idx(b, slots, c + 1u, h, p, n)] = s; }
  }
  final_state[item] = s;
}

// The accumulators' rows 32 hf .. 32 hf + 31 of the tile staged row-major (64 floats a row;
// rows 0..15 in a_tile, 16..31 in b_tile), so that the tile's stores to global memory are
// coalesced (consecutive invocations, consecutive floats).
fn stage_half(hf: u32, lid: u32) {
  let ty = lane_ty(lid);
  let tx = lane_tx(lid);
  if ((ty >> 3u) == hf) {
    for (var r = 0u; r < 4u; r++) {
      let row = (ty & 7u) * 4u + r;
      if (row < 16u) {
        a_tile[row * 16u + tx] = acc_row(r);
      } else {
        b_tile[(row - 16u) * 16u + tx] = acc_row(r);
      }
    }
  }
}

// Float f (0 .. 2047, row-major) of the staged half.
fn staged(f: u32) -> f32 {
  let v = f >> 2u;
  if (v < 256u) { return a_tile[v][f & 3u]; }
  return b_tile[v - 256u][f & 3u];
}

// Pass 5: y = (C Bᵀ ∘ decay ∘ s) x + diag(exp(cum)) C S_inᵀ + D x  per (b, c, h), tile (t, p).
// With T0 the tile's first row, decay[t, s] = decay[t, T0] decay[T0, s] for s < T0 <= t and
// exp(cum_t) = decay[t, T0] exp(cum_T0), all factors <= 1 (no overflow; one that underflows
// bounds a term below fp32's range). So everything left of the tile's own columns is
// decay[t, T0] C_t G, G = S_in exp(cum_T0) + tile_states[T0] the state entering T0 (A = C,
// B = G): the row factor decay[t, T0] scales the accumulators once, and no causal product
// runs over the columns s < T0 (ssd/NOTES.md, "SSD round 10"). Only the tile's own columns
// (s >= T0) take a decay per element, from a table of the tile's rows. A and B rows past len
// or d_head are clamped, not masked: they only feed accumulators that are never stored.
@compute @workgroup_size(256)
fn ssd_chunk_out(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_index) lid: u32) {
  let lw = wg_linear(wid, nwg);
  let ok = lw < params.total;
  let w = select(0u, lw, ok);
  let pt = w % params.n_ptiles;
  let ti = (w / params.n_ptiles) % params.n_qtiles;
  let z = w / (params.n_ptiles * params.n_qtiles);
  let h = z % params.n_heads;
  let c = (z / params.n_heads) % params.n_chunks;
  let b = z / (params.n_heads * params.n_chunks);
  let g = h / (params.n_heads / params.n_groups);
  let t0 = c * params.chunk_len;
  let len = chunk_len_of(c);
  let tr = ti * TILE;
  let live = tr < len;
  let last = len - 1u;
  let ref_h = cum_hi(b, h, t0 + min(tr, last));
  let ref_l = cum_lo(b, h, t0 + min(tr, last));
  let kend_state = select(0u, params.d_state, live && (c > 0u || ti > 0u));
  let kend_diag = select(0u, min(len, tr + TILE), live);
  acc_zero();
  let mrow = m_fastk(lid);
  let kcol = k_fastk(lid);
  let ir0 = tr + mrow;
  let pm = params.d_head - 1u;
  let px = min(pt * TILE + m_fast64(lid), pm);
  // the state entering T0: A = C, B = S_in exp(cum_T0) + tile_states[T0] (none at T0 = 0),
  // B as one vec4 of n per invocation (g_row, g_quad)
  let eref = exp(ref_h + ref_l);
  let gq = 4u * g_quad(lid);
  let pg = min(pt * TILE + g_row(lid), pm);
  for (var k0 = 0u; k0 < kend_state; k0 += TILE_K) {
    let nc = min(k0 + kcol, params.d_state - 1u);
    let nok = k0 + kcol < params.d_state;
    for (var r = 0u; r < 4u; r++) {
      let va = C[bc_idx(b, t0 + min(ir0 + 16u * r, last), g, nc)];
      put_a(kcol, mrow + 16u * r, select(0.0, va, nok));
    }
    let ng = k0 + gq;
    let ngc = min(ng, params.d_state - 1u);
    var own = vec4<f32>(0.0);
    if (ti > 0u) { own = tile_states[tile_state_idx(b, c, ti - 1u, h, pg, ngc)]; }
    let gv = fma(states_in[state_in_idx(b, c, h, pg, ngc)], vec4<f32>(eref), own);
    for (var j = 0u; j < 4u; j++) {
      put_b(gq + j, g_row(lid), select(0.0, gv[j], ng + j < params.d_state));
    }
    workgroupBarrier();
    mm_step(lid);
    workgroupBarrier();
  }
  // the row factor decay[t, T0] of the invocation's accumulator rows
  let ty = lane_ty(lid);
  for (var r = 0u; r < 4u; r++) {
    let tt = t0 + min(tr + ty * 4u + r, last);
    let f = exp((cum_hi(b, h, tt) - ref_h) + (cum_lo(b, h, tt) - ref_l));
    switch r {
      case 0u: { acc0 *= f; }
      case 1u: { acc1 *= f; }
      case 2u: { acc2 *= f; }
      default: { acc3 *= f; }
    }
  }
  // the tile's own columns: A = cb decay s (causal), B = x; the rows' cumsums (hi, lo) in a
  // table, not in registers (the pass's register count sets its residency)
  if (lid < TILE) {
    let tt = t0 + min(tr + lid, last);
    row_f[lid] = vec4<f32>(cum_hi(b, h, tt), cum_lo(b, h, tt), in_scale(b, h, tt), 0.0);
  }
  workgroupBarrier();
  for (var k0 = tr; k0 < kend_diag; k0 += TILE_K) {
    let sa = k0 + kcol;
    let qs = row_f[sa - tr];  // column s: (hi, lo, s_s)
    let cr = cb_idx(b, c, g, 0u, min(sa, last));
    // written out, not a loop over the 4 rows: the loop was 1.3 % slower on the H200
    let q0 = row_f[mrow];
    let q1 = row_f[mrow + 16u];
    let q2 = row_f[mrow + 32u];
    let q3 = row_f[mrow + 48u];
    let v0 = cb[cr + min(ir0, last) * params.chunk_len] * exp((q0.x - qs.x) + (q0.y - qs.y)) * qs.z;
    let v1 = cb[cr + min(ir0 + 16u, last) * params.chunk_len] * exp((q1.x - qs.x) + (q1.y - qs.y)) * qs.z;
    let v2 = cb[cr + min(ir0 + 32u, last) * params.chunk_len] * exp((q2.x - qs.x) + (q2.y - qs.y)) * qs.z;
    let v3 = cb[cr + min(ir0 + 48u, last) * params.chunk_len] * exp((q3.x - qs.x) + (q3.y - qs.y)) * qs.z;
    put_a(kcol, mrow, select(0.0, v0, sa <= ir0));
    put_a(kcol, mrow + 16u, select(0.0, v1, sa <= ir0 + 16u));
    put_a(kcol, mrow + 32u, select(0.0, v2, sa <= ir0 + 32u));
    put_a(kcol, mrow + 48u, select(0.0, v3, sa <= ir0 + 48u));
    for (var r = 0u; r < 4u; r++) {
      let sb = (lid >> 6u) + 4u * r;
      put_b(sb, m_fast64(lid), x[x_idx(b, t0 + min(k0 + sb, last), h, px)]);
    }
    workgroupBarrier();
    // a warp holds 16 consecutive rows: its terms past its last row are zero, skipped
    if (k0 < tr + (lid >> 6u) * 16u + 16u) { mm_step(lid); }
    workgroupBarrier();
  }
  // y through the staging tiles, half a tile at a time: coalesced stores (and loads of x)
  let d_skip = D[h];
  for (var hf = 0u; hf < 2u; hf++) {
    stage_half(hf, lid);
    workgroupBarrier();
    if (ok && live) {
      for (var k = 0u; k < 8u; k++) {
        let f = lid + WORKGROUP * k;
        let i = ti * TILE + 32u * hf + (f >> 6u);
        let p = pt * TILE + (f & 63u);
        if (i < len && p < params.d_head) {
          let kk = x_idx(b, t0 + i, h, p);
          y[kk] = fma(d_skip, x[kk], staged(f));
        }
      }
    }
    workgroupBarrier();
  }
}

// ================================================================ backward
// Pass B1: chunk_local[b, c, h] = Σ_t exp(cum_t) dy_t ⊗ C_t (P x N): the adjoint of the state
// entering chunk c from the chunk's own outputs; 64 x 128 per workgroup (the two-stage core,
// as ssd_chunk_state).
// A's element of step s at row p: dy_s, cum_s (hi, lo); past the chunk or d_head zeros,
// whose value below is an exact 0.
fn dchunk_state_a(q: Tile48, s: u32, p: u32) -> vec3<f32> {
  let t = q.t0 + min(s, q.len - 1u);
  let v = vec3<f32>(dy[x_idx(q.b, t, q.h, min(p, params.d_head - 1u))], cum_hi(q.b, q.h, t),
                    cum_lo(q.b, q.h, t));
  return select(vec3<f32>(0.0), v, s < q.len && p < params.d_head);
}

// dy_s exp(cum_s), with cum's operations.
fn dchunk_state_a_val(v: vec3<f32>) -> f32 { return v.x * exp(v.y + v.z); }

fn c_elem(q: Tile48, s: u32, n: u32) -> f32 {
  let v = C[bc_idx(q.b, q.t0 + min(s, q.len - 1u), q.g, min(n, params.d_state - 1u))];
  return select(0.0, v, s < q.len && n < params.d_state);
}

// Loads the invocation's elements of the K step whose first k is k0, A's as raw loads (in
// a0.xyz, a1.xyz: its value is computed at the store, after the FMAs).
fn dchunk_state_load(q: Tile48, k0: u32, lid: u32) -> Pre48 {
  let k = k0 + (lid >> 6u);
  let p = q.p0 + (lid & 63u);
  let n = q.n0 + (lid & 63u);
  return Pre48(vec4<f32>(dchunk_state_a(q, k, p), 0.0),
               vec4<f32>(dchunk_state_a(q, k + 4u, p), 0.0), c_elem(q, k, n),
               c_elem(q, k, n + TILE), c_elem(q, k + 4u, n), c_elem(q, k + 4u, n + TILE));
}

fn dchunk_state_put(st: u32, lid: u32, v: Pre48) {
  put48(st, lid, dchunk_state_a_val(v.a0.xyz), dchunk_state_a_val(v.a1.xyz), v.b00, v.b01,
        v.b10, v.b11);
}

// K step s from stage cur, as chunk_state_step.
fn dchunk_state_step(acc: ptr<function, Acc48>, q: Tile48, s: u32, cur: u32, lid: u32) {
  let v = dchunk_state_load(q, (s + 1u) * TILE_K8, lid);
  k_step48(acc, cur, lid);
  dchunk_state_put(1u - cur, lid, v);
  workgroupBarrier();
}

@compute @workgroup_size(256)
fn ssd_dchunk_state(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                    @builtin(local_invocation_index) lid: u32) {
  let lw = wg_linear(wid, nwg);
  let ok = lw < params.total;
  let q = tile48(select(0u, lw, ok));
  var acc = acc48_zero();
  dchunk_state_put(0u, lid, dchunk_state_load(q, 0u, lid));
  workgroupBarrier();
  // chunk 0's entering state is zero: its adjoint is never used
  let kend = select(q.len, 0u, q.c == 0u);
  let steps = (kend + TILE_K8 - 1u) / TILE_K8;
  for (var s = 0u; s < steps; s += 2u) {
    dchunk_state_step(&acc, q, s, 0u, lid);
    if (s + 1u < steps) { dchunk_state_step(&acc, q, s + 1u, 1u, lid); }
  }
  if (ok) { store_state_block(acc, q, lid); }
}

// Pass B2: reverse recurrence between chunks, one thread per (b, h, p, n):
// dstates[NC - 1] = 0; dstates[c - 1] = chunk_local[c] + exp(cum_end_c) dstates[c].
@compute @workgroup_size(64)
fn ssd_dstate_pass(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                   @builtin(local_invocation_index) lid: u32) {
  let item = wg_linear(wid, nwg) * WORKGROUP_1D + lid;
  let pn = params.d_head * params.d_state;
  if (item >= params.batch * params.n_heads * pn) { return; }
  let e = item % pn;
  let p = e / params.d_state;
  let n = e % params.d_state;
  let bh = item / pn;
  let h = bh % params.n_heads;
  let b = bh / params.n_heads;
  let nc = params.n_chunks;
  var s = 0.0;
  dstates[state_idx(b, nc, nc - 1u, h, p, n)] = 0.0;
  for (var c = nc - 1u; c > 0u; c--) {
    let tend = c * params.chunk_len + chunk_len_of(c) - 1u;
    s = fma(exp(cum(b, h, tend)), s, chunk_local[state_idx(b, nc, c, h, p, n)]);
    dstates[state_idx(b, nc, c - 1u, h, p, n)] = s;
  }
}

// Pass B3: dx̃[s, p] = Σ_{t>=s} CB[t, s] decay[t, s] dy[t, p]
//                     + exp(cum_end - cum_s) Σ_n B[s, n] dstates[c][p, n],
// written unscaled into dx, finished by ssd_dt_elem.
@compute @workgroup_size(256)
fn ssd_dx(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) lid: u32) {
  let lw = wg_linear(wid, nwg);
  let ok = lw < params.total;
  let w = select(0u, lw, ok);
  let pt = w % params.n_ptiles;
  let si = (w / params.n_ptiles) % params.n_qtiles;
  let z = w / (params.n_ptiles * params.n_qtiles);
  let h = z % params.n_heads;
  let c = (z / params.n_heads) % params.n_chunks;
  let b = z / (params.n_heads * params.n_chunks);
  let g = h / (params.n_heads / params.n_groups);
  let t0 = c * params.chunk_len;
  let len = chunk_len_of(c);
  let tend = t0 + len - 1u;
  let live = si * TILE < len;
  // anti-causal: rows s of this tile see t >= si*64 only
  let kbeg1 = select(len, si * TILE, live);
  let kend2 = select(0u, params.d_state, live && c + 1u < params.n_chunks);
  let last = len - 1u;
  // this invocation's row s of the a_tile in the first product (the same for its 4
  // elements), and the exp(cum_end - cum_s) of its 4 staging rows in the second
  let sa = si * TILE + m_fast64(lid);
  let sac = t0 + min(sa, last);
  let hs = cum_hi(b, h, sac);
  let ls = cum_lo(b, h, sac);
  let mrow = m_fastk(lid);
  let kcol = k_fastk(lid);
  let sr0 = si * TILE + mrow;
  let re = vec4<f32>(exp(seg(b, h, tend, t0 + min(sr0, last))),
                     exp(seg(b, h, tend, t0 + min(sr0 + 16u, last))),
                     exp(seg(b, h, tend, t0 + min(sr0 + 32u, last))),
                     exp(seg(b, h, tend, t0 + min(sr0 + 48u, last))));
  let pcol = pt * TILE + m_fast64(lid);
  let pc = min(pcol, params.d_head - 1u);
  acc_zero();
  for (var k0 = kbeg1; k0 < len; k0 += TILE_K) {
    for (var r = 0u; r < 4u; r++) {
      // a_tile[s, t] = CB[t, s] decay[t, s]: contiguous in s (= rows)
      let ta = k0 + (lid >> 6u) + 4u * r;
      let tc = min(ta, last);
      let ht = cum_hi(b, h, t0 + tc);
      let lt = cum_lo(b, h, t0 + tc);
      let va = cb[cb_idx(b, c, g, tc, min(sa, last))] * exp((ht - hs) + (lt - ls));
      let kr = (lid >> 6u) + 4u * r;
      put_a(kr, m_fast64(lid), select(0.0, va, ta < len && sa <= ta));
      let vb = dy[x_idx(b, t0 + tc, h, pc)];
      put_b(kr, m_fast64(lid), select(0.0, vb, ta < len && pcol < params.d_head));
    }
    workgroupBarrier();
    // a warp's terms before its first row are zero, skipped
    if (k0 + TILE_K > si * TILE + (lid >> 6u) * 16u) { mm_step(lid); }
    workgroupBarrier();
  }
  let p0 = pt * TILE + mrow;
  for (var k0 = 0u; k0 < kend2; k0 += TILE_K) {
    let n = k0 + kcol;
    let nc = min(n, params.d_state - 1u);
    let nok = n < params.d_state;
    put_a(kcol, mrow, select(0.0, B[bc_idx(b, t0 + min(sr0, last), g, nc)] * re.x,
                             sr0 < len && nok));
    put_a(kcol, mrow + 16u, select(0.0, B[bc_idx(b, t0 + min(sr0 + 16u, last), g, nc)] * re.y,
                                   sr0 + 16u < len && nok));
    put_a(kcol, mrow + 32u, select(0.0, B[bc_idx(b, t0 + min(sr0 + 32u, last), g, nc)] * re.z,
                                   sr0 + 32u < len && nok));
    put_a(kcol, mrow + 48u, select(0.0, B[bc_idx(b, t0 + min(sr0 + 48u, last), g, nc)] * re.w,
                                   sr0 + 48u < len && nok));
    for (var r = 0u; r < 4u; r++) {
      let p = p0 + 16u * r;
      let vb = dstates[state_idx(b, params.n_chunks, c, h, min(p, params.d_head - 1u), nc)];
      put_b(kcol, mrow + 16u * r, select(0.0, vb, p < params.d_head && nok));
    }
    workgroupBarrier();
    mm_step(lid);
    workgroupBarrier();
  }
  if (ok && live) {
    let tx = lane_tx(lid);
    let ty = lane_ty(lid);
    for (var r = 0u; r < 4u; r++) {
      let s = si * TILE + ty * 4u + r;
      for (var q = 0u; q < 4u; q++) {
        let p = pt * TILE + tx * 4u + q;
        if (s < len && p < params.d_head) { dx[x_idx(b, t0 + s, h, p)] = acc_row(r)[q]; }
      }
    }
  }
}

// Pass B4: dcb[b, c, g][t, s] = Σ_{h in g} (dy_{h,t} · s_{h,s} x_{h,s}) decay_h[t, s] for
// s <= t (0 above), the gradient of cb: per head a K = d_head tile product, scaled by that
// head's decay and summed in head order. dC and dB then need it once per group instead of
// once per head.
// The (head, K step of 16) steps run as one two-stage sequence (matmul.wgsl's recipe: the next
// step's elements loaded into registers before the FMAs, stored into the other stage after
// them, one barrier a step). mh_a / mh_b hold dy and s·x as [stage][k][row / 4] vec4s whose
// column is XOR-swizzled by k & 7, so that the transposed stores (8 k x 4 rows a warp) and the
// vec4 reads both fall in distinct banks without padding (16 KiB in all, the pass's only
// workgroup storage). The decay factors come from the cumsums, loaded into registers each step
// (no per-head table, no per-head barrier); x·s is computed at the store.
var<workgroup> mh_a: array<vec4<f32>, 512>;
var<workgroup> mh_b: array<vec4<f32>, 512>;
const MH_K: u32 = 16u;      // k (of d_head) a step
const MH_STAGE: u32 = 256u;  // vec4s of one stage: MH_K x 64 floats
// vec4 of (k, tile row m) in a stage.
fn mh_at(k: u32, m: u32) -> u32 { return k * 16u + ((m >> 2u) ^ (k & 7u)); }

// exp(seg(t, s)) of row i (its cumsum hi, lo) for columns j0 .. j0+3 (theirs in ch, cl), with
// seg's operations; 0 where s > t or past the chunk.
fn mh_decay4(i: u32, len: u32, rh: f32, rl: f32, j0: u32, ch: vec4<f32>, cl: vec4<f32>)
    -> vec4<f32> {
  var d = vec4<f32>(0.0);
  if (i < len) {
    for (var q = 0u; q < 4u; q++) {
      if (j0 + q <= i) { d[q] = exp((rh - ch[q]) + (rl - cl[q])); }
    }
  }
  return d;
}

// One step's staged elements of an invocation: k = 8 r + lid % 8 (r < MH_K / 8, component r) of
// rows lid / 8 (a0 of dy, b0 of x) and 32 + lid / 8 (a1, b1); sc = the input scale of those two
// rows of x. Out of range (past the chunk or d_head) they are exact zeros.
struct MhPre { a0: vec2<f32>, a1: vec2<f32>, b0: vec2<f32>, b1: vec2<f32>, sc: vec2<f32> }

// A workgroup's (b, g, first step t0, steps len, row and column tiles ti, tj, K steps a head kb):
// workgroup-uniform only, as the step loop's bound comes from it (see Tile48).
struct MhTile { b: u32, g: u32, t0: u32, len: u32, ti: u32, tj: u32, kb: u32 }

// dy (mh_ld) and x (mh_lx) of chunk step i, head h, p at clamped indices; 0 out of range.
fn mh_ld(tl: MhTile, i: u32, h: u32, p: u32) -> f32 {
  let ok = i < tl.len && p < params.d_head;
  let v = dy[x_idx(tl.b, tl.t0 + min(i, tl.len - 1u), h, min(p, params.d_head - 1u))];
  return select(0.0, v, ok);
}
fn mh_lx(tl: MhTile, j: u32, h: u32, p: u32) -> f32 {
  let ok = j < tl.len && p < params.d_head;
  let v = x[x_idx(tl.b, tl.t0 + min(j, tl.len - 1u), h, min(p, params.d_head - 1u))];
  return select(0.0, v, ok);
}

// Step s's elements (head s / kb, k from (s % kb) · MH_K); the loads are unconditional.
fn mh_load(tl: MhTile, s: u32, lid: u32) -> MhPre {
  let hpg = params.n_heads / params.n_groups;
  let h = tl.g * hpg + s / tl.kb;
  let p = (s % tl.kb) * MH_K + (lid & 7u);
  let ia = tl.ti * TILE + (lid >> 3u);
  let jb = tl.tj * TILE + (lid >> 3u);
  var r: MhPre;
  for (var q = 0u; q < MH_K / 8u; q++) {
    r.a0[q] = mh_ld(tl, ia, h, p + 8u * q);
    r.a1[q] = mh_ld(tl, ia + 32u, h, p + 8u * q);
    r.b0[q] = mh_lx(tl, jb, h, p + 8u * q);
    r.b1[q] = mh_lx(tl, jb + 32u, h, p + 8u * q);
  }
  r.sc = vec2<f32>(in_scale(tl.b, h, tl.t0 + min(jb, tl.len - 1u)),
                   in_scale(tl.b, h, tl.t0 + min(jb + 32u, tl.len - 1u)));
  return r;
}

// Stores an invocation's staged elements into the stage at st (x times its row's scale).
fn mh_put(st: u32, pre: MhPre, lid: u32) {
  let m = lid >> 3u;
  let k = lid & 7u;
  let c = m & 3u;
  for (var r = 0u; r < MH_K / 8u; r++) {
    let kk = k + 8u * r;
    let at = st + mh_at(kk, m);
    let at1 = st + mh_at(kk, m + 32u);
    mh_a[at][c] = pre.a0[r];
    mh_a[at1][c] = pre.a1[r];
    mh_b[at][c] = pre.b0[r] * pre.sc.x;
    mh_b[at1][c] = pre.b1[r] * pre.sc.y;
  }
}

// The FMAs of one step from the stage at st, k in order (the invocation's 4 x 4 block).
fn mh_fma(st: u32, ty: u32, tx: u32) {
  for (var k = 0u; k < MH_K; k++) {
    let a = mh_a[st + k * 16u + (ty ^ (k & 7u))];
    let bb = mh_b[st + k * 16u + (tx ^ (k & 7u))];
    acc0 = fma(vec4<f32>(a.x), bb, acc0);
    acc1 = fma(vec4<f32>(a.y), bb, acc1);
    acc2 = fma(vec4<f32>(a.z), bb, acc2);
    acc3 = fma(vec4<f32>(a.w), bb, acc3);
  }
}

// The invocation's decay-weighted sums over the heads (rows i0 .. i0+3).
struct MhOut { m0: vec4<f32>, m1: vec4<f32>, m2: vec4<f32>, m3: vec4<f32> }

// Step s from stage cur: the next step's elements into registers, the FMAs, the elements into
// the other stage, the barrier, and at a head's last step its decay-weighted sum. The head's
// cumsums are loaded every step although only its last step uses them: a load under an `if`
// put its latency on the step in S6 (families/s6/NOTES.md, 'Fifth round'; not timed here).
fn mh_step(o: ptr<function, MhOut>, tl: MhTile, s: u32, steps: u32, cur: u32, lid: u32) {
  let tx = lane_tx(lid);
  let ty = lane_ty(lid);
  let kk = s % tl.kb;
  let nxt = mh_load(tl, min(s + 1u, steps - 1u), lid);
  let h = tl.g * (params.n_heads / params.n_groups) + s / tl.kb;
  let i0 = tl.ti * TILE + ty * 4u;
  let j0 = tl.tj * TILE + tx * 4u;
  var rh = vec4<f32>(0.0);
  var rl = vec4<f32>(0.0);
  var ch = vec4<f32>(0.0);
  var cl = vec4<f32>(0.0);
  for (var r = 0u; r < 4u; r++) {
    let ir = tl.t0 + min(i0 + r, tl.len - 1u);
    rh[r] = cum_hi(tl.b, h, ir);
    rl[r] = cum_lo(tl.b, h, ir);
    let jr = tl.t0 + min(j0 + r, tl.len - 1u);
    ch[r] = cum_hi(tl.b, h, jr);
    cl[r] = cum_lo(tl.b, h, jr);
  }
  if (kk == 0u) { acc_zero(); }
  mh_fma(cur, ty, tx);
  mh_put(MH_STAGE - cur, nxt, lid);
  workgroupBarrier();
  if (kk + 1u == tl.kb) {
    (*o).m0 = fma(acc0, mh_decay4(i0, tl.len, rh.x, rl.x, j0, ch, cl), (*o).m0);
    (*o).m1 = fma(acc1, mh_decay4(i0 + 1u, tl.len, rh.y, rl.y, j0, ch, cl), (*o).m1);
    (*o).m2 = fma(acc2, mh_decay4(i0 + 2u, tl.len, rh.z, rl.z, j0, ch, cl), (*o).m2);
    (*o).m3 = fma(acc3, mh_decay4(i0 + 3u, tl.len, rh.w, rl.w, j0, ch, cl), (*o).m3);
  }
}

@compute @workgroup_size(256)
fn ssd_mh(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) lid: u32) {
  let lw = wg_linear(wid, nwg);
  let ok = lw < params.total;
  let w = select(0u, lw, ok);
  let nq = params.n_qtiles;
  var tl: MhTile;
  tl.tj = w % nq;
  tl.ti = (w / nq) % nq;
  let z = w / (nq * nq);
  tl.g = z % params.n_groups;
  let c = (z / params.n_groups) % params.n_chunks;
  tl.b = z / (params.n_groups * params.n_chunks);
  tl.t0 = c * params.chunk_len;
  tl.len = chunk_len_of(c);
  tl.kb = (params.d_head + MH_K - 1u) / MH_K;
  let need = tl.tj <= tl.ti && tl.ti * TILE < tl.len;
  let steps = select(0u, (params.n_heads / params.n_groups) * tl.kb, need);
  let zero = vec4<f32>(0.0);
  var o = MhOut(zero, zero, zero, zero);
  mh_put(0u, mh_load(tl, 0u, lid), lid);
  workgroupBarrier();
  for (var s = 0u; s < steps; s += 2u) {
    mh_step(&o, tl, s, steps, 0u, lid);
    if (s + 1u < steps) { mh_step(&o, tl, s + 1u, steps, MH_STAGE, lid); }
  }
  if (ok && need) {
    let i0 = tl.ti * TILE + lane_ty(lid) * 4u;
    let j0 = tl.tj * TILE + lane_tx(lid) * 4u;
    for (var r = 0u; r < 4u; r++) {
      var v = o.m3;
      if (r == 0u) { v = o.m0; } else if (r == 1u) { v = o.m1; } else if (r == 2u) { v = o.m2; }
      let i = i0 + r;
      for (var q = 0u; q < 4u; q++) {
        let j = j0 + q;
        if (i < tl.len && j < tl.len) { dcb[cb_idx(tl.b, c, tl.g, i, j)] = v[q]; }
      }
    }
  }
}

// Pass B5: dC[t, n] = Σ_{s<=t} dcb[t, s] B[s, n]
//                     + Σ_{h in g} exp(cum_{h,t}) Σ_p dy_h[t, p] S_in_h[p, n]
// (heads summed in order inside the workgroup: no cross-workgroup reduction).
@compute @workgroup_size(256)
fn ssd_dc(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) lid: u32) {
  let lw = wg_linear(wid, nwg);
  let ok = lw < params.total;
  let w = select(0u, lw, ok);
  let nt = w % params.n_ntiles;
  let ti = (w / params.n_ntiles) % params.n_qtiles;
  let z = w / (params.n_ntiles * params.n_qtiles);
  let g = z % params.n_groups;
  let c = (z / params.n_groups) % params.n_chunks;
  let b = z / (params.n_groups * params.n_chunks);
  let hpg = params.n_heads / params.n_groups;
  let t0 = c * params.chunk_len;
  let len = chunk_len_of(c);
  let live = ti * TILE < len;
  let kend1 = select(0u, min(len, ti * TILE + TILE), live);
  let kend2 = select(0u, params.d_head, live && c > 0u);
  acc_zero();
  for (var k0 = 0u; k0 < kend1; k0 += TILE_K) {
    for (var r = 0u; r < 4u; r++) {
      let e = lid + WORKGROUP * r;
      let i = ti * TILE + m_fastk(e);
      let sa = k0 + k_fastk(e);
      var va = 0.0;
      if (i < len && sa <= i) { va = dcb[cb_idx(b, c, g, i, sa)]; }
      put_a(k_fastk(e), m_fastk(e), va);
      let sb = k0 + k_fast64(e);
      let n = nt * TILE + m_fast64(e);
      var vb = 0.0;
      if (sb < len && n < params.d_state) { vb = B[bc_idx(b, t0 + sb, g, n)]; }
      put_b(k_fast64(e), m_fast64(e), vb);
    }
    workgroupBarrier();
    mm_step(lid);
    workgroupBarrier();
  }
  for (var hh = 0u; hh < hpg; hh++) {
    let h = g * hpg + hh;
    if (kend2 > 0u) {
      // the head's exp(cum_t) of the tile's rows (the previous head's K steps, which read
      // them, ended with a barrier)
      if (lid < TILE) {
        let ir = ti * TILE + lid;
        var rf = vec4<f32>(0.0);
        if (ir < len) { rf.x = exp(cum(b, h, t0 + ir)); }
        row_f[lid] = rf;
      }
      workgroupBarrier();
    }
    for (var k0 = 0u; k0 < kend2; k0 += TILE_K) {
      for (var r = 0u; r < 4u; r++) {
        let e = lid + WORKGROUP * r;
        let i = ti * TILE + m_fastk(e);
        let pa = k0 + k_fastk(e);
        var va = 0.0;
        if (i < len && pa < params.d_head) {
          va = dy[x_idx(b, t0 + i, h, pa)] * row_f[m_fastk(e)].x;
        }
        put_a(k_fastk(e), m_fastk(e), va);
        let pb = k0 + k_fast64(e);
        let n = nt * TILE + m_fast64(e);
        var vb = 0.0;
        if (pb < params.d_head && n < params.d_state) {
          vb = states_in[state_in_idx(b, c, h, pb, n)][n & 3u];
        }
        put_b(k_fast64(e), m_fast64(e), vb);
      }
      workgroupBarrier();
      mm_step(lid);
      workgroupBarrier();
    }
  }
  if (ok && live) {
    let tx = lane_tx(lid);
    let ty = lane_ty(lid);
    for (var r = 0u; r < 4u; r++) {
      let i = ti * TILE + ty * 4u + r;
      for (var q = 0u; q < 4u; q++) {
        let n = nt * TILE + tx * 4u + q;
        if (i < len && n < params.d_state) { dC[bc_idx(b, t0 + i, g, n)] = acc_row(r)[q]; }
      }
    }
  }
}

// Pass B6: dB[s, n] = Σ_{t>=s} dcb[t, s] C[t, n]
//                   + Σ_{h in g} exp(cum_end - cum_{h,s}) Σ_p s_{h,s} x_h[s, p] dstates_h[c][p, n]
@compute @workgroup_size(256)
fn ssd_db(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) lid: u32) {
  let lw = wg_linear(wid, nwg);
  let ok = lw < params.total;
  let w = select(0u, lw, ok);
  let nt = w % params.n_ntiles;
  let si = (w / params.n_ntiles) % params.n_qtiles;
  let z = w / (params.n_ntiles * params.n_qtiles);
  let g = z % params.n_groups;
  let c = (z / params.n_groups) % params.n_chunks;
  let b = z / (params.n_groups * params.n_chunks);
  let hpg = params.n_heads / params.n_groups;
  let t0 = c * params.chunk_len;
  let len = chunk_len_of(c);
  let tend = t0 + len - 1u;
  let live = si * TILE < len;
  let kbeg1 = select(len, si * TILE, live);
  let kend2 = select(0u, params.d_head, live && c + 1u < params.n_chunks);
  acc_zero();
  for (var k0 = kbeg1; k0 < len; k0 += TILE_K) {
    for (var r = 0u; r < 4u; r++) {
      let e = lid + WORKGROUP * r;
      // a_tile[s, t] = dcb[t, s]: contiguous in s (= rows)
      let sa = si * TILE + m_fast64(e);
      let ta = k0 + k_fast64(e);
      var va = 0.0;
      if (ta < len && sa <= ta) { va = dcb[cb_idx(b, c, g, ta, sa)]; }
      put_a(k_fast64(e), m_fast64(e), va);
      let n = nt * TILE + m_fast64(e);
      var vb = 0.0;
      if (ta < len && n < params.d_state) { vb = C[bc_idx(b, t0 + ta, g, n)]; }
      put_b(k_fast64(e), m_fast64(e), vb);
    }
    workgroupBarrier();
    mm_step(lid);
    workgroupBarrier();
  }
  for (var hh = 0u; hh < hpg; hh++) {
    let h = g * hpg + hh;
    if (kend2 > 0u) {
      // the head's s_s and exp(cum_end - cum_s) of the tile's rows
      if (lid < TILE) {
        let sr = si * TILE + lid;
        var rf = vec4<f32>(0.0);
        if (sr < len) {
          rf = vec4<f32>(in_scale(b, h, t0 + sr), exp(seg(b, h, tend, t0 + sr)), 0.0, 0.0);
        }
        row_f[lid] = rf;
      }
      workgroupBarrier();
    }
    for (var k0 = 0u; k0 < kend2; k0 += TILE_K) {
      for (var r = 0u; r < 4u; r++) {
        let e = lid + WORKGROUP * r;
        let s = si * TILE + m_fastk(e);
        let pa = k0 + k_fastk(e);
        var va = 0.0;
        if (s < len && pa < params.d_head) {
          let f = row_f[m_fastk(e)];
          va = x[x_idx(b, t0 + s, h, pa)] * f.x * f.y;
        }
        put_a(k_fastk(e), m_fastk(e), va);
        let pb = k0 + k_fast64(e);
        let n = nt * TILE + m_fast64(e);
        var vb = 0.0;
        if (pb < params.d_head && n < params.d_state) {
          vb = dstates[state_idx(b, params.n_chunks, c, h, pb, n)];
        }
        put_b(k_fast64(e), m_fast64(e), vb);
      }
      workgroupBarrier();
      mm_step(lid);
      workgroupBarrier();
    }
  }
  if (ok && live) {
    let tx = lane_tx(lid);
    let ty = lane_ty(lid);
    for (var r = 0u; r < 4u; r++) {
      let s = si * TILE + ty * 4u + r;
      for (var q = 0u; q < 4u; q++) {
        let n = nt * TILE + tx * 4u + q;
        if (s < len && n < params.d_state) { dB[bc_idx(b, t0 + s, g, n)] = acc_row(r)[q]; }
      }
    }
  }
}

// Pass B7: 64 invocations per (b, t, h) row, DT_ROWS rows (contiguous in memory) per workgroup
// (faster than a workgroup per row: ssd/NOTES.md, "SSD round 3"): finish dx = s_t dx̃ + D dy
// and the per-step scalars v_t = dy_t·(y_t - D x_t) - s_t (dx̃_t·x_t) (its in-chunk prefix
// sums give the decay gradient), e_t = dy_t·x_t (for dD), ds_t = dx̃_t·x_t (for d dt_eff
// through s_t); fixed-order tree sums. (ssd_chunk_state and ssd_dchunk_state stage B's or C's
// columns 64..127 in row_dots.)
var<workgroup> row_dots: array<vec4<f32>, 256>;

// Rows per workgroup of ssd_dt_elem: WORKGROUP / WORKGROUP_1D (abi.DT_ROWS).
const DT_ROWS: u32 = 4u;

@compute @workgroup_size(256)
fn ssd_dt_elem(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
  let lw = wg_linear(wid, nwg);
  let row = lw * DT_ROWS + (lid >> 6u);
  let ok = lw < params.total && row < n_bht();
  let w = select(0u, row, ok);
  let l = lid & 63u;
  let base = lid & ~63u;
  let h = w % params.n_heads;
  let t = (w / params.n_heads) % params.seq_len;
  let b = w / (params.n_heads * params.seq_len);
  let d_skip = D[h];
  let scale = in_scale(b, h, t);
  var acc = vec4<f32>(0.0);
  for (var p = l; p < params.d_head; p += WORKGROUP_1D) {
    let k = x_idx(b, t, h, p);
    let x_v = x[k];
    let dy_v = dy[k];
    let dx_tilde = dx[k];
    acc = fma(vec4<f32>(dy_v, dy_v, dx_tilde, 0.0),
              vec4<f32>(y[k] - d_skip * x_v, x_v, x_v, 0.0), acc);
    if (ok) { dx[k] = fma(scale, dx_tilde, d_skip * dy_v); }
  }
  row_dots[lid] = acc;
  workgroupBarrier();
  // each row's tree sum of its 64 partials (st = 32, 16, ..., 1: the pairs (l, l + st)),
  // its levels two at a time: the same sums, 3 barriers instead of 6
  if (l < 16u) {
    let i = base + l;
    row_dots[i] = (row_dots[i] + row_dots[i + 32u]) + (row_dots[i + 16u] + row_dots[i + 48u]);
  }
  workgroupBarrier();
  if (l < 4u) {
    let i = base + l;
    row_dots[i] = (row_dots[i] + row_dots[i + 8u]) + (row_dots[i + 4u] + row_dots[i + 12u]);
  }
  workgroupBarrier();
  if (ok && l == 0u) {
    let r = (row_dots[base] + row_dots[base + 2u]) + (row_dots[base + 1u] + row_dots[base + 3u]);
    let item = bht_idx(b, h, t);
    step_dots[item] = r.x - scale * r.z;
    step_dots[n_bht() + item] = r.y;
    step_dots[2u * n_bht() + item] = r.z;
  }
}

// Pass B8: per (b, h, chunk c), one workgroup: the decay gradient carried across the boundary
// after chunk c, <dstates[c], S[c + 1]> = Σ of all pairs (s <= end_c < t), summed
// directly (no cancellation), in a fixed order (strided partials, then a tree).
var<workgroup> pair_sums: array<f32, 64>;

@compute @workgroup_size(64)
fn ssd_dt_boundary(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                   @builtin(local_invocation_index) lid: u32) {
  let lw = wg_linear(wid, nwg);
  let ok = lw < params.total;
  let w = select(0u, lw, ok);
  let c = w % params.n_chunks;
  let bh = w / params.n_chunks;
  let h = bh % params.n_heads;
  let b = bh / params.n_heads;
  let pn = params.d_head * params.d_state;
  // the last chunk's outgoing adjoint is zero
  let count = select(0u, pn, c + 1u < params.n_chunks);
  var s = 0.0;
  for (var e = lid; e < count; e += WORKGROUP_1D) {
    let p = e / params.d_state;
    let n = e % params.d_state;
    s = fma(dstates[state_idx(b, params.n_chunks, c, h, p, n)],
            states_in[state_in_idx(b, c + 1u, h, p, n)][n & 3u], s);
  }
  pair_sums[lid] = s;
  workgroupBarrier();
  for (var st = 32u; st > 0u; st = st >> 1u) {
    if (lid < st) { pair_sums[lid] = pair_sums[lid] + pair_sums[lid + st]; }
    workgroupBarrier();
  }
  if (ok && lid == 0u) { boundary_da[w] = pair_sums[0]; }
}

// Neumaier-compensated running sum: value = s + c, each add exact up to the rounding of c.
fn comp_add(sc: vec2<f32>, v: f32) -> vec2<f32> {
  let t = sc.x + v;
  var e: f32;
  if (abs(sc.x) >= abs(v)) { e = (sc.x - t) + v; } else { e = (v - t) + sc.x; }
  return vec2<f32>(t, sc.y + e);
}

// Per-step finish of one (b, h, t) given its decay gradient da: writes ddt, returns
// (dA_log term, ddt_bias term, dD term).
fn dt_step(b: u32, h: u32, t: u32, da: f32, a_log: f32, bias: f32) -> vec3<f32> {
  let n_steps = n_bht();
  let k = bht_idx(b, h, t);
  let raw = dt[(b * params.seq_len + t) * params.n_heads + h] + bias;
  let dt_eff = softplus(raw);
  var ddt_eff: f32;
  var da_log: f32;
  if (params.convention == CONV_MAMBA) {
    let a = -exp(a_log);
    ddt_eff = fma(da, a, step_dots[2u * n_steps + k]);
    da_log = da * a * dt_eff;
  } else {
    ddt_eff = -da * softplus(a_log);
    da_log = -da * dt_eff * sigmoid(a_log);
  }
  let ddt_t = ddt_eff * softplus_grad(raw);
  ddt[(b * params.seq_len + t) * params.n_heads + h] = ddt_t;
  return vec3<f32>(da_log, ddt_t, step_dots[n_steps + k]);
}

// Pass B9: per (b, h, chunk): the decay gradient da_r = Σ over pairs s < r <= t of the output
// weights, then ddt and this chunk's partial sums of dA_log, ddt_bias and dD. da_r is anchored
// at the nearer chunk boundary: the first half as boundary[c - 1] + Σ_{t0 <= t < r} (-v_t), the
// second half as boundary[c] + Σ_{r <= t <= end} v_t (v_t is a difference of two matmul
// outputs, so each v error enters every da on the far side of it: the nearer anchor halves
// that reach, which is what dA_log and ddt_bias, sums with heavy cancellation, feel). Running
// sums and partials are compensated; da at t = 0 is exactly 0.
// One workgroup per (b, h, chunk), blocks of 64 steps in the order one thread would walk them
// (the first half forwards, the second backwards): one invocation runs the compensated sums
// of the block, in order, around the per-step work done by all 64 (the same bits).
@compute @workgroup_size(64)
fn ssd_dt_final(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
  let lw = wg_linear(wid, nwg);
  let ok = lw < params.total;
  let item = select(0u, lw, ok);
  let c = item % params.n_chunks;
  let bh = item / params.n_chunks;
  let h = bh % params.n_heads;
  let b = bh / params.n_heads;
  let t0 = c * params.chunk_len;
  let len = chunk_len_of(c);
  // the first half takes the odd middle step, so a one-step chunk (and t = 0) uses the prefix
  let half = (len + 1u) / 2u;
  let a_log = A_log[h];
  let bias = dt_bias[h];
  var run = vec2<f32>(0.0);
  if (c > 0u) { run.x = boundary_da[item - 1u]; }
  var part_a_log = vec2<f32>(0.0);
  var part_dt_bias = vec2<f32>(0.0);
  var part_d = vec2<f32>(0.0);
  // Block q of the walk: steps i0 + lid (first half) or i0 - lid (second half), n of them.
  let n_first = (half + WORKGROUP_1D - 1u) / WORKGROUP_1D;
  let n_blocks = n_first + (len - half + WORKGROUP_1D - 1u) / WORKGROUP_1D;
  for (var blk = 0u; blk < n_blocks; blk++) {
    let first = blk < n_first;
    var i0: u32;
    var n: u32;
    if (first) {
      i0 = blk * WORKGROUP_1D;
      n = min(WORKGROUP_1D, half - i0);
    } else {
      i0 = len - 1u - (blk - n_first) * WORKGROUP_1D;  // walking down from here
      n = min(WORKGROUP_1D, i0 + 1u - half);
      if (blk == n_first) { run = vec2<f32>(boundary_da[item], 0.0); }
    }
    let i = select(i0 - lid, i0 + lid, first);
    if (lid < n) { row_f[lid].x = step_dots[bht_idx(b, h, t0 + i)]; }
    workgroupBarrier();
    // the block's da, in walk order
    if (lid == 0u) {
      for (var q = 0u; q < n; q++) {
        if (first) {
          row_f[q].y = run.x + run.y;
          run = comp_add(run, -row_f[q].x);
        } else {
          run = comp_add(run, row_f[q].x);
          row_f[q].y = run.x + run.y;
        }
      }
    }
    workgroupBarrier();
    if (lid < n && ok) {
      col_f[lid] = vec4<f32>(dt_step(b, h, t0 + i, row_f[lid].y, a_log, bias), 0.0);
    }
    workgroupBarrier();
    if (lid == 0u) {
      for (var q = 0u; q < n; q++) {
        let r = col_f[q];
        part_a_log = comp_add(part_a_log, r.x);
        part_dt_bias = comp_add(part_dt_bias, r.y);
        part_d = comp_add(part_d, r.z);
      }
    }
    workgroupBarrier();
  }
  if (ok && lid == 0u) {
    let slot = (b * params.n_chunks + c) * params.n_heads + h;
    let n_part = params.batch * params.n_chunks * params.n_heads;
    param_partials[slot] = part_a_log.x + part_a_log.y;
    param_partials[n_part + slot] = part_dt_bias.x + part_dt_bias.y;
    param_partials[2u * n_part + slot] = part_d.x + part_d.y;
  }
}

// Pass B10: per head: fixed-order compensated sums over (batch, chunk) of the partials.
@compute @workgroup_size(64)
fn ssd_param_reduce(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                    @builtin(local_invocation_index) lid: u32) {
  let h = wg_linear(wid, nwg) * WORKGROUP_1D + lid;
  if (h >= params.n_heads) { return; }
  let n_part = params.batch * params.n_chunks * params.n_heads;
  var sum_a_log = vec2<f32>(0.0);
  var sum_dt_bias = vec2<f32>(0.0);
  var sum_d = vec2<f32>(0.0);
  for (var k = 0u; k < params.batch * params.n_chunks; k++) {
    let slot = k * params.n_heads + h;
    sum_a_log = comp_add(sum_a_log, param_partials[slot]);
    sum_dt_bias = comp_add(sum_dt_bias, param_partials[n_part + slot]);
    sum_d = comp_add(sum_d, param_partials[2u * n_part + slot]);
  }
  dA_log[h] = sum_a_log.x + sum_a_log.y;
  ddt_bias[h] = sum_dt_bias.x + sum_dt_bias.y;
  dD[h] = sum_d.x + sum_d.y;
}
