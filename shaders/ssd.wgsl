// ssmviz's own Mamba-2 SSD kernels: the chunked algorithm (Dao & Gu 2024) as parallel passes.
//
// Sizes: batch, seq_len (T), n_heads (H), d_head (P), n_groups (G), d_state (N), chunk_len (Q),
// n_chunks (NC = ceil(T / Q); the last chunk may be shorter). Head h reads group
// g = h / (H / G). Layouts (row-major f32):
//   x, y, dy, dx (batch, T, H, P); dt, ddt (batch, T, H); B, C, dB, dC (batch, T, G, N);
//   A_log, D, dt_bias and their grads (H,); chunk_states (batch, NC + 1, H, P, N), slot c =
//   state entering chunk c (slot 0 zeros, slot NC the final state); final_state (batch, H, P, N).
// Scratch: tvec (3, batch, H, T) = in-chunk cumsum of log Ā as hi + lo (two-sum, so that segment
//   sums cum_t - cum_s stay exact to fp32 even when cum is large) and the input scale s_t;
//   cb (batch, NC, G, Q, Q) = C Bᵀ per chunk; chunk_local (batch, NC, H, P, N);
//   dstates (batch, NC, H, P, N) = adjoint of the state leaving chunk c; mh (batch, NC, G, Q, Q);
//   bt (3, batch, H, T) = v, e, ds (see ssd_dt_elem); tot (batch, H, NC); part (3, batch, NC, H).
//
// Forward passes: ssd_prep -> ssd_cb -> ssd_chunk_state -> ssd_state_pass -> ssd_chunk_out.
// Backward passes: ssd_dchunk_state -> ssd_dstate_pass -> ssd_dx -> ssd_mh -> ssd_dc -> ssd_db
//   -> ssd_dt_elem -> ssd_dt_boundary -> ssd_dt_final -> ssd_param_reduce.
// Every pass reads only what earlier passes wrote (no cross-workgroup communication inside a
// pass), so results are bitwise deterministic. prm.reverse = 1 reverses the workgroup order of
// every pass (a race probe: the bits must not change).
// Matmul-shaped passes: 64 x 64 output tile per 256-thread workgroup, 4 x 4 register block per
// thread, K step 16, two 4 KiB workgroup tiles (8 KiB in all).

struct Params {
  batch: u32, seq_len: u32, n_heads: u32, d_head: u32,
  n_groups: u32, d_state: u32, chunk_len: u32, n_chunks: u32,
  convention: u32, reverse: u32, store_states: u32, total: u32,
  n_ptiles: u32, n_ntiles: u32, n_qtiles: u32, pad0: u32,
}

@group(0) @binding(0) var<uniform> prm: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> dt: array<f32>;
@group(0) @binding(3) var<storage, read> A_log: array<f32>;
@group(0) @binding(4) var<storage, read> Bm: array<f32>;
@group(0) @binding(5) var<storage, read> Cm: array<f32>;
@group(0) @binding(6) var<storage, read> Dv: array<f32>;
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
@group(0) @binding(19) var<storage, read_write> tvec: array<f32>;
@group(0) @binding(20) var<storage, read_write> cb: array<f32>;
@group(0) @binding(21) var<storage, read_write> chunk_local: array<f32>;
@group(0) @binding(22) var<storage, read_write> dstates: array<f32>;
@group(0) @binding(23) var<storage, read_write> mh: array<f32>;
@group(0) @binding(24) var<storage, read_write> bt: array<f32>;
@group(0) @binding(25) var<storage, read_write> tot: array<f32>;
@group(0) @binding(26) var<storage, read_write> part: array<f32>;

const TILE: u32 = 64u;
const TK: u32 = 16u;
const WG: u32 = 256u;
const WG1: u32 = 64u;

// ---------------------------------------------------------------- tile matmul core
var<workgroup> As: array<vec4<f32>, 256>;  // [k][i / 4], 16 x 64 floats
var<workgroup> Bs: array<vec4<f32>, 256>;  // [k][j / 4], 16 x 64 floats
// Accumulator rows ty*4 + r, columns tx*4 + c. Four named vectors, not an array: a
// dynamically indexed private array is placed in slow local memory by some drivers.
var<private> acc0: vec4<f32>;
var<private> acc1: vec4<f32>;
var<private> acc2: vec4<f32>;
var<private> acc3: vec4<f32>;

fn put_a(k: u32, i: u32, v: f32) { As[k * 16u + (i >> 2u)][i & 3u] = v; }
fn put_b(k: u32, j: u32, v: f32) { Bs[k * 16u + (j >> 2u)][j & 3u] = v; }

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
  let tx = lid & 15u;
  let ty = lid >> 4u;
  for (var k = 0u; k < TK; k++) {
    let a = As[k * 16u + ty];
    let b = Bs[k * 16u + tx];
    acc0 = fma(vec4<f32>(a.x), b, acc0);
    acc1 = fma(vec4<f32>(a.y), b, acc1);
    acc2 = fma(vec4<f32>(a.z), b, acc2);
    acc3 = fma(vec4<f32>(a.w), b, acc3);
  }
}

// Element e (0..1024) of a 64 x 16 tile, with the 64-long side fastest (coalesced when that
// side is contiguous in memory) or the 16-long K side fastest.
fn m_fast64(e: u32) -> u32 { return e & 63u; }
fn k_fast64(e: u32) -> u32 { return e >> 6u; }
fn m_fastk(e: u32) -> u32 { return e >> 4u; }
fn k_fastk(e: u32) -> u32 { return e & 15u; }

// ---------------------------------------------------------------- helpers
// Linear workgroup id over a split (x, y) grid; reversed when the race probe is on.
fn wg_linear(wid: vec3<u32>, nwg: vec3<u32>) -> u32 {
  let l = wid.x + wid.y * nwg.x;
  if (prm.reverse == 1u && l < prm.total) { return prm.total - 1u - l; }
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

fn bht() -> u32 { return prm.batch * prm.n_heads * prm.seq_len; }
fn ti_(b: u32, h: u32, t: u32) -> u32 { return (b * prm.n_heads + h) * prm.seq_len + t; }
fn xi(b: u32, t: u32, h: u32, p: u32) -> u32 {
  return ((b * prm.seq_len + t) * prm.n_heads + h) * prm.d_head + p;
}
fn bi(b: u32, t: u32, g: u32, n: u32) -> u32 {
  return ((b * prm.seq_len + t) * prm.n_groups + g) * prm.d_state + n;
}
// (batch, slots, H, P, N) state arrays.
fn si(b: u32, slots: u32, c: u32, h: u32, p: u32, n: u32) -> u32 {
  return (((b * slots + c) * prm.n_heads + h) * prm.d_head + p) * prm.d_state + n;
}
fn cbi(b: u32, c: u32, g: u32, i: u32, j: u32) -> u32 {
  return (((b * prm.n_chunks + c) * prm.n_groups + g) * prm.chunk_len + i) * prm.chunk_len + j;
}

// cum_t (in-chunk inclusive sum of log Ā) as hi + lo, and s_t.
fn cum_hi(b: u32, h: u32, t: u32) -> f32 { return tvec[ti_(b, h, t)]; }
fn cum_lo(b: u32, h: u32, t: u32) -> f32 { return tvec[bht() + ti_(b, h, t)]; }
fn in_scale(b: u32, h: u32, t: u32) -> f32 { return tvec[2u * bht() + ti_(b, h, t)]; }
fn cum(b: u32, h: u32, t: u32) -> f32 { return cum_hi(b, h, t) + cum_lo(b, h, t); }
// Segment sum a_{s+1} + ... + a_t (t >= s, same chunk), exact up to one rounding.
fn seg(b: u32, h: u32, t: u32, s: u32) -> f32 {
  return (cum_hi(b, h, t) - cum_hi(b, h, s)) + (cum_lo(b, h, t) - cum_lo(b, h, s));
}

fn chunk_len_of(c: u32) -> u32 { return min(prm.chunk_len, prm.seq_len - c * prm.chunk_len); }

// ================================================================ forward
// Pass 1: per (b, h, chunk), one thread: in-chunk cumsum of a_t = log Ā_t and s_t.
@compute @workgroup_size(64)
fn ssd_prep(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
  let item = wg_linear(wid, nwg) * WG1 + lid;
  let n_items = prm.batch * prm.n_heads * prm.n_chunks;
  if (item >= n_items) { return; }
  let c = item % prm.n_chunks;
  let bh = item / prm.n_chunks;
  let h = bh % prm.n_heads;
  let b = bh / prm.n_heads;
  let t0 = c * prm.chunk_len;
  let len = chunk_len_of(c);
  let alog = A_log[h];
  let bias = dt_bias[h];
  var hi = 0.0;
  var lo = 0.0;
  for (var i = 0u; i < len; i++) {
    let t = t0 + i;
    let dte = softplus(dt[(b * prm.seq_len + t) * prm.n_heads + h] + bias);
    var a: f32;
    var s: f32;
    if (prm.convention == 0u) {
      a = -exp(alog) * dte;
      s = dte;
    } else {
      a = -softplus(alog) * dte;
      s = 1.0;
    }
    // two-sum: hi + lo carries the running sum to ~2x fp32 precision
    let sum = hi + a;
    let bp = sum - hi;
    lo = lo + ((hi - (sum - bp)) + (a - bp));
    hi = sum;
    let k = ti_(b, h, t);
    tvec[k] = hi;
    tvec[bht() + k] = lo;
    tvec[2u * bht() + k] = s;
  }
}

// Pass 2: cb[b, c, g] = C Bᵀ over the chunk (Q x Q, lower tiles only), K = d_state.
@compute @workgroup_size(256)
fn ssd_cb(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) lid: u32) {
  let lw = wg_linear(wid, nwg);
  let ok = lw < prm.total;
  let w = select(0u, lw, ok);
  let nq = prm.n_qtiles;
  let tj = w % nq;
  let ti = (w / nq) % nq;
  let z = w / (nq * nq);
  let g = z % prm.n_groups;
  let c = (z / prm.n_groups) % prm.n_chunks;
  let b = z / (prm.n_groups * prm.n_chunks);
  let t0 = c * prm.chunk_len;
  let len = chunk_len_of(c);
  let need = tj <= ti && ti * TILE < len;
  let kend = select(0u, prm.d_state, need);
  acc_zero();
  for (var k0 = 0u; k0 < kend; k0 += TK) {
    for (var r = 0u; r < 4u; r++) {
      let e = lid + WG * r;
      let m = m_fastk(e);
      let kk = k_fastk(e);
      let k = k0 + kk;
      let i = ti * TILE + m;
      let j = tj * TILE + m;
      var va = 0.0;
      var vb = 0.0;
      if (k < prm.d_state) {
        if (i < len) { va = Cm[bi(b, t0 + i, g, k)]; }
        if (j < len) { vb = Bm[bi(b, t0 + j, g, k)]; }
      }
      put_a(kk, m, va);
      put_b(kk, m, vb);
    }
    workgroupBarrier();
    mm_step(lid);
    workgroupBarrier();
  }
  if (ok && need) {
    let tx = lid & 15u;
    let ty = lid >> 4u;
    for (var r = 0u; r < 4u; r++) {
      let i = ti * TILE + ty * 4u + r;
      for (var q = 0u; q < 4u; q++) {
        let j = tj * TILE + tx * 4u + q;
        if (i < len && j < len) { cb[cbi(b, c, g, i, j)] = acc_row(r)[q]; }
      }
    }
  }
}

// Pass 3: chunk_local[b, c, h] = Σ_s exp(cum_end - cum_s) s_s x_s ⊗ B_s  (P x N, K = chunk).
@compute @workgroup_size(256)
fn ssd_chunk_state(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                   @builtin(local_invocation_index) lid: u32) {
  let lw = wg_linear(wid, nwg);
  let ok = lw < prm.total;
  let w = select(0u, lw, ok);
  let nt = w % prm.n_ntiles;
  let pt = (w / prm.n_ntiles) % prm.n_ptiles;
  let z = w / (prm.n_ntiles * prm.n_ptiles);
  let h = z % prm.n_heads;
  let c = (z / prm.n_heads) % prm.n_chunks;
  let b = z / (prm.n_heads * prm.n_chunks);
  let g = h / (prm.n_heads / prm.n_groups);
  let t0 = c * prm.chunk_len;
  let len = chunk_len_of(c);
  let tend = t0 + len - 1u;
  acc_zero();
  for (var k0 = 0u; k0 < len; k0 += TK) {
    for (var r = 0u; r < 4u; r++) {
      let e = lid + WG * r;
      let m = m_fast64(e);
      let kk = k_fast64(e);
      let s = k0 + kk;
      let p = pt * TILE + m;
      let n = nt * TILE + m;
      var va = 0.0;
      var vb = 0.0;
      if (s < len) {
        if (p < prm.d_head) {
          let t = t0 + s;
          va = x[xi(b, t, h, p)] * exp(seg(b, h, tend, t)) * in_scale(b, h, t);
        }
        if (n < prm.d_state) { vb = Bm[bi(b, t0 + s, g, n)]; }
      }
      put_a(kk, m, va);
      put_b(kk, m, vb);
    }
    workgroupBarrier();
    mm_step(lid);
    workgroupBarrier();
  }
  if (ok) {
    let tx = lid & 15u;
    let ty = lid >> 4u;
    for (var r = 0u; r < 4u; r++) {
      let p = pt * TILE + ty * 4u + r;
      for (var q = 0u; q < 4u; q++) {
        let n = nt * TILE + tx * 4u + q;
        if (p < prm.d_head && n < prm.d_state) {
          chunk_local[si(b, prm.n_chunks, c, h, p, n)] = acc_row(r)[q];
        }
      }
    }
  }
}

// Pass 4: the recurrence between chunks, one thread per state element (b, h, p, n):
// S[c + 1] = exp(cum_end_c) S[c] + chunk_local[c]; S[0] = 0.
@compute @workgroup_size(64)
fn ssd_state_pass(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                  @builtin(local_invocation_index) lid: u32) {
  let item = wg_linear(wid, nwg) * WG1 + lid;
  let pn = prm.d_head * prm.d_state;
  if (item >= prm.batch * prm.n_heads * pn) { return; }
  let e = item % pn;
  let p = e / prm.d_state;
  let n = e % prm.d_state;
  let bh = item / pn;
  let h = bh % prm.n_heads;
  let b = bh / prm.n_heads;
  let slots = prm.n_chunks + 1u;
  var s = 0.0;
  chunk_states[si(b, slots, 0u, h, p, n)] = 0.0;
  for (var c = 0u; c < prm.n_chunks; c++) {
    let tend = c * prm.chunk_len + chunk_len_of(c) - 1u;
    s = fma(exp(cum(b, h, tend)), s, chunk_local[si(b, prm.n_chunks, c, h, p, n)]);
    chunk_states[si(b, slots, c + 1u, h, p, n)] = s;
  }
  final_state[item] = s;
}

// Pass 5: y = (C Bᵀ ∘ L ∘ s) x  +  diag(exp(cum)) C S_inᵀ  +  D x   per (b, c, h), tile (t, p).
@compute @workgroup_size(256)
fn ssd_chunk_out(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_index) lid: u32) {
  let lw = wg_linear(wid, nwg);
  let ok = lw < prm.total;
  let w = select(0u, lw, ok);
  let pt = w % prm.n_ptiles;
  let ti = (w / prm.n_ptiles) % prm.n_qtiles;
  let z = w / (prm.n_ptiles * prm.n_qtiles);
  let h = z % prm.n_heads;
  let c = (z / prm.n_heads) % prm.n_chunks;
  let b = z / (prm.n_heads * prm.n_chunks);
  let g = h / (prm.n_heads / prm.n_groups);
  let t0 = c * prm.chunk_len;
  let len = chunk_len_of(c);
  let live = ti * TILE < len;
  // causal: rows of this tile see columns s < ti*64 + 64 only
  let kend1 = select(0u, min(len, ti * TILE + TILE), live);
  let kend2 = select(0u, prm.d_state, live && c > 0u);
  let slots = prm.n_chunks + 1u;
  acc_zero();
  for (var k0 = 0u; k0 < kend1; k0 += TK) {
    for (var r = 0u; r < 4u; r++) {
      let e = lid + WG * r;
      // A: CB[i, s] L[i, s] s_s, row-contiguous in s
      let ia = ti * TILE + m_fastk(e);
      let sa = k0 + k_fastk(e);
      var va = 0.0;
      if (ia < len && sa <= ia) {
        va = cb[cbi(b, c, g, ia, sa)] * exp(seg(b, h, t0 + ia, t0 + sa)) * in_scale(b, h, t0 + sa);
      }
      put_a(k_fastk(e), m_fastk(e), va);
      // B: x[s, p], contiguous in p
      let sb = k0 + k_fast64(e);
      let p = pt * TILE + m_fast64(e);
      var vb = 0.0;
      if (sb < len && p < prm.d_head) { vb = x[xi(b, t0 + sb, h, p)]; }
      put_b(k_fast64(e), m_fast64(e), vb);
    }
    workgroupBarrier();
    mm_step(lid);
    workgroupBarrier();
  }
  for (var k0 = 0u; k0 < kend2; k0 += TK) {
    for (var r = 0u; r < 4u; r++) {
      let e = lid + WG * r;
      let i = ti * TILE + m_fastk(e);
      let n = k0 + k_fastk(e);
      var va = 0.0;
      if (i < len && n < prm.d_state) { va = Cm[bi(b, t0 + i, g, n)] * exp(cum(b, h, t0 + i)); }
      put_a(k_fastk(e), m_fastk(e), va);
      // B: S_in[p, n], contiguous in n (= k)
      let p = pt * TILE + m_fastk(e);
      var vb = 0.0;
      if (p < prm.d_head && n < prm.d_state) { vb = chunk_states[si(b, slots, c, h, p, n)]; }
      put_b(k_fastk(e), m_fastk(e), vb);
    }
    workgroupBarrier();
    mm_step(lid);
    workgroupBarrier();
  }
  if (ok && live) {
    let tx = lid & 15u;
    let ty = lid >> 4u;
    let dh = Dv[h];
    for (var r = 0u; r < 4u; r++) {
      let i = ti * TILE + ty * 4u + r;
      for (var q = 0u; q < 4u; q++) {
        let p = pt * TILE + tx * 4u + q;
        if (i < len && p < prm.d_head) {
          let k = xi(b, t0 + i, h, p);
          y[k] = fma(dh, x[k], acc_row(r)[q]);
        }
      }
    }
  }
}

// ================================================================ backward
// Pass B1: chunk_local[b, c, h] = Σ_t exp(cum_t) dy_t ⊗ C_t (P x N): the adjoint of the state
// entering chunk c from the chunk's own outputs.
@compute @workgroup_size(256)
fn ssd_dchunk_state(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                    @builtin(local_invocation_index) lid: u32) {
  let lw = wg_linear(wid, nwg);
  let ok = lw < prm.total;
  let w = select(0u, lw, ok);
  let nt = w % prm.n_ntiles;
  let pt = (w / prm.n_ntiles) % prm.n_ptiles;
  let z = w / (prm.n_ntiles * prm.n_ptiles);
  let h = z % prm.n_heads;
  let c = (z / prm.n_heads) % prm.n_chunks;
  let b = z / (prm.n_heads * prm.n_chunks);
  let g = h / (prm.n_heads / prm.n_groups);
  let t0 = c * prm.chunk_len;
  let len = chunk_len_of(c);
  // chunk 0's entering state is zero: its adjoint is never used
  let kend = select(len, 0u, c == 0u);
  acc_zero();
  for (var k0 = 0u; k0 < kend; k0 += TK) {
    for (var r = 0u; r < 4u; r++) {
      let e = lid + WG * r;
      let m = m_fast64(e);
      let kk = k_fast64(e);
      let s = k0 + kk;
      let p = pt * TILE + m;
      let n = nt * TILE + m;
      var va = 0.0;
      var vb = 0.0;
      if (s < len) {
        if (p < prm.d_head) { va = dy[xi(b, t0 + s, h, p)] * exp(cum(b, h, t0 + s)); }
        if (n < prm.d_state) { vb = Cm[bi(b, t0 + s, g, n)]; }
      }
      put_a(kk, m, va);
      put_b(kk, m, vb);
    }
    workgroupBarrier();
    mm_step(lid);
    workgroupBarrier();
  }
  if (ok) {
    let tx = lid & 15u;
    let ty = lid >> 4u;
    for (var r = 0u; r < 4u; r++) {
      let p = pt * TILE + ty * 4u + r;
      for (var q = 0u; q < 4u; q++) {
        let n = nt * TILE + tx * 4u + q;
        if (p < prm.d_head && n < prm.d_state) {
          chunk_local[si(b, prm.n_chunks, c, h, p, n)] = acc_row(r)[q];
        }
      }
    }
  }
}

// Pass B2: reverse recurrence between chunks, one thread per (b, h, p, n):
// dstates[NC - 1] = 0; dstates[c - 1] = chunk_local[c] + exp(cum_end_c) dstates[c].
@compute @workgroup_size(64)
fn ssd_dstate_pass(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                   @builtin(local_invocation_index) lid: u32) {
  let item = wg_linear(wid, nwg) * WG1 + lid;
  let pn = prm.d_head * prm.d_state;
  if (item >= prm.batch * prm.n_heads * pn) { return; }
  let e = item % pn;
  let p = e / prm.d_state;
  let n = e % prm.d_state;
  let bh = item / pn;
  let h = bh % prm.n_heads;
  let b = bh / prm.n_heads;
  let nc = prm.n_chunks;
  var s = 0.0;
  dstates[si(b, nc, nc - 1u, h, p, n)] = 0.0;
  for (var c = nc - 1u; c > 0u; c--) {
    let tend = c * prm.chunk_len + chunk_len_of(c) - 1u;
    s = fma(exp(cum(b, h, tend)), s, chunk_local[si(b, nc, c, h, p, n)]);
    dstates[si(b, nc, c - 1u, h, p, n)] = s;
  }
}

// Pass B3: dx̃[s, p] = Σ_{t>=s} CB[t, s] L[t, s] dy[t, p] + exp(cum_end - cum_s) Σ_n B[s, n] G[p, n]
// (G = dstates[c]); written unscaled into dx, finished by ssd_dt_elem.
@compute @workgroup_size(256)
fn ssd_dx(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) lid: u32) {
  let lw = wg_linear(wid, nwg);
  let ok = lw < prm.total;
  let w = select(0u, lw, ok);
  let pt = w % prm.n_ptiles;
  let si_ = (w / prm.n_ptiles) % prm.n_qtiles;
  let z = w / (prm.n_ptiles * prm.n_qtiles);
  let h = z % prm.n_heads;
  let c = (z / prm.n_heads) % prm.n_chunks;
  let b = z / (prm.n_heads * prm.n_chunks);
  let g = h / (prm.n_heads / prm.n_groups);
  let t0 = c * prm.chunk_len;
  let len = chunk_len_of(c);
  let tend = t0 + len - 1u;
  let live = si_ * TILE < len;
  // anti-causal: rows s of this tile see t >= si*64 only
  let kbeg1 = select(len, si_ * TILE, live);
  let kend2 = select(0u, prm.d_state, live && c + 1u < prm.n_chunks);
  acc_zero();
  for (var k0 = kbeg1; k0 < len; k0 += TK) {
    for (var r = 0u; r < 4u; r++) {
      let e = lid + WG * r;
      // A[s, t] = CB[t, s] L[t, s]: contiguous in s (= rows)
      let sa = si_ * TILE + m_fast64(e);
      let ta = k0 + k_fast64(e);
      var va = 0.0;
      if (ta < len && sa <= ta) {
        va = cb[cbi(b, c, g, ta, sa)] * exp(seg(b, h, t0 + ta, t0 + sa));
      }
      put_a(k_fast64(e), m_fast64(e), va);
      let p = pt * TILE + m_fast64(e);
      var vb = 0.0;
      if (ta < len && p < prm.d_head) { vb = dy[xi(b, t0 + ta, h, p)]; }
      put_b(k_fast64(e), m_fast64(e), vb);
    }
    workgroupBarrier();
    mm_step(lid);
    workgroupBarrier();
  }
  for (var k0 = 0u; k0 < kend2; k0 += TK) {
    for (var r = 0u; r < 4u; r++) {
      let e = lid + WG * r;
      let s = si_ * TILE + m_fastk(e);
      let n = k0 + k_fastk(e);
      var va = 0.0;
      if (s < len && n < prm.d_state) {
        va = Bm[bi(b, t0 + s, g, n)] * exp(seg(b, h, tend, t0 + s));
      }
      put_a(k_fastk(e), m_fastk(e), va);
      let p = pt * TILE + m_fastk(e);
      var vb = 0.0;
      if (p < prm.d_head && n < prm.d_state) { vb = dstates[si(b, prm.n_chunks, c, h, p, n)]; }
      put_b(k_fastk(e), m_fastk(e), vb);
    }
    workgroupBarrier();
    mm_step(lid);
    workgroupBarrier();
  }
  if (ok && live) {
    let tx = lid & 15u;
    let ty = lid >> 4u;
    for (var r = 0u; r < 4u; r++) {
      let s = si_ * TILE + ty * 4u + r;
      for (var q = 0u; q < 4u; q++) {
        let p = pt * TILE + tx * 4u + q;
        if (s < len && p < prm.d_head) { dx[xi(b, t0 + s, h, p)] = acc_row(r)[q]; }
      }
    }
  }
}

// Decay weights exp(seg(t, s)) of row i for columns j0 .. j0+3 (0 where s > t or out of chunk).
fn decay4(b: u32, h: u32, t0: u32, len: u32, i: u32, j0: u32) -> vec4<f32> {
  var d = vec4<f32>(0.0);
  if (i < len) {
    let hi = cum_hi(b, h, t0 + i);
    let lo = cum_lo(b, h, t0 + i);
    for (var q = 0u; q < 4u; q++) {
      let j = j0 + q;
      if (j <= i) {
        d[q] = exp((hi - cum_hi(b, h, t0 + j)) + (lo - cum_lo(b, h, t0 + j)));
      }
    }
  }
  return d;
}

// Pass B4: mh[b, c, g][t, s] = Σ_{h in g} (dy_{h,t} · s_{h,s} x_{h,s}) L_h[t, s] for s <= t (0
// above): per head a K = d_head tile product, scaled by that head's decay and summed in head
// order. dC and dB then need it once per group instead of once per head.
@compute @workgroup_size(256)
fn ssd_mh(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) lid: u32) {
  let lw = wg_linear(wid, nwg);
  let ok = lw < prm.total;
  let w = select(0u, lw, ok);
  let nq = prm.n_qtiles;
  let tj = w % nq;
  let ti = (w / nq) % nq;
  let z = w / (nq * nq);
  let g = z % prm.n_groups;
  let c = (z / prm.n_groups) % prm.n_chunks;
  let b = z / (prm.n_groups * prm.n_chunks);
  let hpg = prm.n_heads / prm.n_groups;
  let t0 = c * prm.chunk_len;
  let len = chunk_len_of(c);
  let need = tj <= ti && ti * TILE < len;
  let kend = select(0u, prm.d_head, need);
  let tx = lid & 15u;
  let ty = lid >> 4u;
  let i0 = ti * TILE + ty * 4u;
  let j0 = tj * TILE + tx * 4u;
  var m0 = vec4<f32>(0.0);
  var m1 = vec4<f32>(0.0);
  var m2 = vec4<f32>(0.0);
  var m3 = vec4<f32>(0.0);
  for (var hh = 0u; hh < hpg; hh++) {
    let h = g * hpg + hh;
    acc_zero();
    for (var k0 = 0u; k0 < kend; k0 += TK) {
      for (var r = 0u; r < 4u; r++) {
        let e = lid + WG * r;
        let m = m_fastk(e);
        let kk = k_fastk(e);
        let p = k0 + kk;
        let i = ti * TILE + m;
        let j = tj * TILE + m;
        var va = 0.0;
        var vb = 0.0;
        if (p < prm.d_head) {
          if (i < len) { va = dy[xi(b, t0 + i, h, p)]; }
          if (j < len) { vb = x[xi(b, t0 + j, h, p)] * in_scale(b, h, t0 + j); }
        }
        put_a(kk, m, va);
        put_b(kk, m, vb);
      }
      workgroupBarrier();
      mm_step(lid);
      workgroupBarrier();
    }
    if (need) {
      m0 = fma(acc0, decay4(b, h, t0, len, i0, j0), m0);
      m1 = fma(acc1, decay4(b, h, t0, len, i0 + 1u, j0), m1);
      m2 = fma(acc2, decay4(b, h, t0, len, i0 + 2u, j0), m2);
      m3 = fma(acc3, decay4(b, h, t0, len, i0 + 3u, j0), m3);
    }
  }
  if (ok && need) {
    for (var r = 0u; r < 4u; r++) {
      var v = m3;
      if (r == 0u) { v = m0; } else if (r == 1u) { v = m1; } else if (r == 2u) { v = m2; }
      let i = i0 + r;
      for (var q = 0u; q < 4u; q++) {
        let j = j0 + q;
        if (i < len && j < len) { mh[cbi(b, c, g, i, j)] = v[q]; }
      }
    }
  }
}

// Pass B5: dC[t, n] = Σ_{s<=t} mh[t, s] B[s, n] + Σ_{h in g} exp(cum_{h,t}) Σ_p dy_h[t, p] S_in_h[p, n]
// (heads summed in order inside the workgroup: no cross-workgroup reduction).
@compute @workgroup_size(256)
fn ssd_dc(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) lid: u32) {
  let lw = wg_linear(wid, nwg);
  let ok = lw < prm.total;
  let w = select(0u, lw, ok);
  let nt = w % prm.n_ntiles;
  let ti = (w / prm.n_ntiles) % prm.n_qtiles;
  let z = w / (prm.n_ntiles * prm.n_qtiles);
  let g = z % prm.n_groups;
  let c = (z / prm.n_groups) % prm.n_chunks;
  let b = z / (prm.n_groups * prm.n_chunks);
  let hpg = prm.n_heads / prm.n_groups;
  let t0 = c * prm.chunk_len;
  let len = chunk_len_of(c);
  let live = ti * TILE < len;
  let kend1 = select(0u, min(len, ti * TILE + TILE), live);
  let kend2 = select(0u, prm.d_head, live && c > 0u);
  let slots = prm.n_chunks + 1u;
  acc_zero();
  for (var k0 = 0u; k0 < kend1; k0 += TK) {
    for (var r = 0u; r < 4u; r++) {
      let e = lid + WG * r;
      let i = ti * TILE + m_fastk(e);
      let sa = k0 + k_fastk(e);
      var va = 0.0;
      if (i < len && sa <= i) { va = mh[cbi(b, c, g, i, sa)]; }
      put_a(k_fastk(e), m_fastk(e), va);
      let sb = k0 + k_fast64(e);
      let n = nt * TILE + m_fast64(e);
      var vb = 0.0;
      if (sb < len && n < prm.d_state) { vb = Bm[bi(b, t0 + sb, g, n)]; }
      put_b(k_fast64(e), m_fast64(e), vb);
    }
    workgroupBarrier();
    mm_step(lid);
    workgroupBarrier();
  }
  for (var hh = 0u; hh < hpg; hh++) {
    let h = g * hpg + hh;
    for (var k0 = 0u; k0 < kend2; k0 += TK) {
      for (var r = 0u; r < 4u; r++) {
        let e = lid + WG * r;
        let i = ti * TILE + m_fastk(e);
        let pa = k0 + k_fastk(e);
        var va = 0.0;
        if (i < len && pa < prm.d_head) { va = dy[xi(b, t0 + i, h, pa)] * exp(cum(b, h, t0 + i)); }
        put_a(k_fastk(e), m_fastk(e), va);
        let pb = k0 + k_fast64(e);
        let n = nt * TILE + m_fast64(e);
        var vb = 0.0;
        if (pb < prm.d_head && n < prm.d_state) { vb = chunk_states[si(b, slots, c, h, pb, n)]; }
        put_b(k_fast64(e), m_fast64(e), vb);
      }
      workgroupBarrier();
      mm_step(lid);
      workgroupBarrier();
    }
  }
  if (ok && live) {
    let tx = lid & 15u;
    let ty = lid >> 4u;
    for (var r = 0u; r < 4u; r++) {
      let i = ti * TILE + ty * 4u + r;
      for (var q = 0u; q < 4u; q++) {
        let n = nt * TILE + tx * 4u + q;
        if (i < len && n < prm.d_state) { dC[bi(b, t0 + i, g, n)] = acc_row(r)[q]; }
      }
    }
  }
}

// Pass B6: dB[s, n] = Σ_{t>=s} mh[t, s] C[t, n]
//                     + Σ_{h in g} exp(cum_end - cum_{h,s}) Σ_p s_{h,s} x_h[s, p] G_h[p, n].
@compute @workgroup_size(256)
fn ssd_db(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) lid: u32) {
  let lw = wg_linear(wid, nwg);
  let ok = lw < prm.total;
  let w = select(0u, lw, ok);
  let nt = w % prm.n_ntiles;
  let si_ = (w / prm.n_ntiles) % prm.n_qtiles;
  let z = w / (prm.n_ntiles * prm.n_qtiles);
  let g = z % prm.n_groups;
  let c = (z / prm.n_groups) % prm.n_chunks;
  let b = z / (prm.n_groups * prm.n_chunks);
  let hpg = prm.n_heads / prm.n_groups;
  let t0 = c * prm.chunk_len;
  let len = chunk_len_of(c);
  let tend = t0 + len - 1u;
  let live = si_ * TILE < len;
  let kbeg1 = select(len, si_ * TILE, live);
  let kend2 = select(0u, prm.d_head, live && c + 1u < prm.n_chunks);
  acc_zero();
  for (var k0 = kbeg1; k0 < len; k0 += TK) {
    for (var r = 0u; r < 4u; r++) {
      let e = lid + WG * r;
      // A[s, t] = mh[t, s]: contiguous in s (= rows)
      let sa = si_ * TILE + m_fast64(e);
      let ta = k0 + k_fast64(e);
      var va = 0.0;
      if (ta < len && sa <= ta) { va = mh[cbi(b, c, g, ta, sa)]; }
      put_a(k_fast64(e), m_fast64(e), va);
      let n = nt * TILE + m_fast64(e);
      var vb = 0.0;
      if (ta < len && n < prm.d_state) { vb = Cm[bi(b, t0 + ta, g, n)]; }
      put_b(k_fast64(e), m_fast64(e), vb);
    }
    workgroupBarrier();
    mm_step(lid);
    workgroupBarrier();
  }
  for (var hh = 0u; hh < hpg; hh++) {
    let h = g * hpg + hh;
    for (var k0 = 0u; k0 < kend2; k0 += TK) {
      for (var r = 0u; r < 4u; r++) {
        let e = lid + WG * r;
        let s = si_ * TILE + m_fastk(e);
        let pa = k0 + k_fastk(e);
        var va = 0.0;
        if (s < len && pa < prm.d_head) {
          let t = t0 + s;
          va = x[xi(b, t, h, pa)] * in_scale(b, h, t) * exp(seg(b, h, tend, t));
        }
        put_a(k_fastk(e), m_fastk(e), va);
        let pb = k0 + k_fast64(e);
        let n = nt * TILE + m_fast64(e);
        var vb = 0.0;
        if (pb < prm.d_head && n < prm.d_state) {
          vb = dstates[si(b, prm.n_chunks, c, h, pb, n)];
        }
        put_b(k_fast64(e), m_fast64(e), vb);
      }
      workgroupBarrier();
      mm_step(lid);
      workgroupBarrier();
    }
  }
  if (ok && live) {
    let tx = lid & 15u;
    let ty = lid >> 4u;
    for (var r = 0u; r < 4u; r++) {
      let s = si_ * TILE + ty * 4u + r;
      for (var q = 0u; q < 4u; q++) {
        let n = nt * TILE + tx * 4u + q;
        if (s < len && n < prm.d_state) { dB[bi(b, t0 + s, g, n)] = acc_row(r)[q]; }
      }
    }
  }
}

// Pass B7: one workgroup per (b, t, h) row: finish dx = s_t dx̃ + D dy and the per-step scalars
// v_t = dy_t·(y_t - D x_t) - s_t (dx̃_t·x_t)  (its in-chunk prefix sums give the decay gradient),
// e_t = dy_t·x_t (for dD), ds_t = dx̃_t·x_t (for d dt_eff through s_t); fixed-order tree sums.
var<workgroup> red4: array<vec4<f32>, 64>;

@compute @workgroup_size(64)
fn ssd_dt_elem(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
  let lw = wg_linear(wid, nwg);
  let ok = lw < prm.total;
  let w = select(0u, lw, ok);
  let h = w % prm.n_heads;
  let t = (w / prm.n_heads) % prm.seq_len;
  let b = w / (prm.n_heads * prm.seq_len);
  let dh = Dv[h];
  let sc = in_scale(b, h, t);
  var acc = vec4<f32>(0.0);
  for (var p = lid; p < prm.d_head; p += WG1) {
    let k = xi(b, t, h, p);
    let xv = x[k];
    let g = dy[k];
    let dxt = dx[k];
    acc = fma(vec4<f32>(g, g, dxt, 0.0), vec4<f32>(y[k] - dh * xv, xv, xv, 0.0), acc);
    if (ok) { dx[k] = fma(sc, dxt, dh * g); }
  }
  red4[lid] = acc;
  workgroupBarrier();
  for (var st = 32u; st > 0u; st = st >> 1u) {
    if (lid < st) { red4[lid] = red4[lid] + red4[lid + st]; }
    workgroupBarrier();
  }
  if (ok && lid == 0u) {
    let r = red4[0];
    let item = ti_(b, h, t);
    bt[item] = r.x - sc * r.z;
    bt[bht() + item] = r.y;
    bt[2u * bht() + item] = r.z;
  }
}

// Pass B8: per (b, h, chunk c), one workgroup: the decay gradient carried across the boundary
// after chunk c, <dstates[c], chunk_states[c + 1]> = Σ of all pairs (s <= end_c < t), summed
// directly (no cancellation), in a fixed order (strided partials, then a tree).
var<workgroup> red: array<f32, 64>;

@compute @workgroup_size(64)
fn ssd_dt_boundary(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                   @builtin(local_invocation_index) lid: u32) {
  let lw = wg_linear(wid, nwg);
  let ok = lw < prm.total;
  let w = select(0u, lw, ok);
  let c = w % prm.n_chunks;
  let bh = w / prm.n_chunks;
  let h = bh % prm.n_heads;
  let b = bh / prm.n_heads;
  let pn = prm.d_head * prm.d_state;
  // the last chunk's outgoing adjoint is zero
  let count = select(0u, pn, c + 1u < prm.n_chunks);
  var s = 0.0;
  for (var e = lid; e < count; e += WG1) {
    let p = e / prm.d_state;
    let n = e % prm.d_state;
    s = fma(dstates[si(b, prm.n_chunks, c, h, p, n)],
            chunk_states[si(b, prm.n_chunks + 1u, c + 1u, h, p, n)], s);
  }
  red[lid] = s;
  workgroupBarrier();
  for (var st = 32u; st > 0u; st = st >> 1u) {
    if (lid < st) { red[lid] = red[lid] + red[lid + st]; }
    workgroupBarrier();
  }
  if (ok && lid == 0u) { tot[w] = red[0]; }
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
fn dt_step(b: u32, h: u32, t: u32, da: f32, alog: f32, bias: f32) -> vec3<f32> {
  let n = bht();
  let k = ti_(b, h, t);
  let raw = dt[(b * prm.seq_len + t) * prm.n_heads + h] + bias;
  let dte = softplus(raw);
  var ddte: f32;
  var dal: f32;
  if (prm.convention == 0u) {
    let a = -exp(alog);
    ddte = fma(da, a, bt[2u * n + k]);
    dal = da * a * dte;
  } else {
    ddte = -da * softplus(alog);
    dal = -da * dte * sigmoid(alog);
  }
  let g = ddte * softplus_grad(raw);
  ddt[(b * prm.seq_len + t) * prm.n_heads + h] = g;
  return vec3<f32>(dal, g, bt[n + k]);
}

// Pass B9: per (b, h, chunk): the decay gradient da_r = Σ over pairs s < r <= t of the output
// weights, then ddt and this chunk's partial sums of dA_log, ddt_bias and dD. da_r is anchored
// at the nearer chunk boundary: the first half as boundary[c - 1] + Σ_{t0 <= t < r} (-v_t), the
// second half as boundary[c] + Σ_{r <= t <= end} v_t (v_t is a difference of two matmul
// outputs, so each v error enters every da on the far side of it: the nearer anchor halves
// that reach, which is what dA_log and ddt_bias, sums with heavy cancellation, feel). Running
// sums and partials are compensated; da at t = 0 is exactly 0.
@compute @workgroup_size(64)
fn ssd_dt_final(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
  let item = wg_linear(wid, nwg) * WG1 + lid;
  let nbh = prm.batch * prm.n_heads;
  if (item >= nbh * prm.n_chunks) { return; }
  let c = item % prm.n_chunks;
  let bh = item / prm.n_chunks;
  let h = bh % prm.n_heads;
  let b = bh / prm.n_heads;
  let t0 = c * prm.chunk_len;
  let len = chunk_len_of(c);
  // the first half takes the odd middle step, so a one-step chunk (and t = 0) uses the prefix
  let half = (len + 1u) / 2u;
  let alog = A_log[h];
  let bias = dt_bias[h];
  var run = vec2<f32>(0.0);
  if (c > 0u) { run.x = tot[item - 1u]; }
  var pa = vec2<f32>(0.0);
  var pb = vec2<f32>(0.0);
  var pd = vec2<f32>(0.0);
  for (var i = 0u; i < half; i++) {
    let t = t0 + i;
    let r = dt_step(b, h, t, run.x + run.y, alog, bias);
    pa = comp_add(pa, r.x);
    pb = comp_add(pb, r.y);
    pd = comp_add(pd, r.z);
    run = comp_add(run, -bt[ti_(b, h, t)]);
  }
  // boundary[c] (zero after the last chunk: nothing follows it)
  run = vec2<f32>(tot[item], 0.0);
  for (var i = len; i > half; i--) {
    let t = t0 + i - 1u;
    run = comp_add(run, bt[ti_(b, h, t)]);
    let r = dt_step(b, h, t, run.x + run.y, alog, bias);
    pa = comp_add(pa, r.x);
    pb = comp_add(pb, r.y);
    pd = comp_add(pd, r.z);
  }
  let o = (b * prm.n_chunks + c) * prm.n_heads + h;
  let np = prm.batch * prm.n_chunks * prm.n_heads;
  part[o] = pa.x + pa.y;
  part[np + o] = pb.x + pb.y;
  part[2u * np + o] = pd.x + pd.y;
}

// Pass B10: per head: fixed-order compensated sums over (batch, chunk) of the partials.
@compute @workgroup_size(64)
fn ssd_param_reduce(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                    @builtin(local_invocation_index) lid: u32) {
  let h = wg_linear(wid, nwg) * WG1 + lid;
  if (h >= prm.n_heads) { return; }
  let np = prm.batch * prm.n_chunks * prm.n_heads;
  var sa = vec2<f32>(0.0);
  var sb = vec2<f32>(0.0);
  var sd = vec2<f32>(0.0);
  for (var k = 0u; k < prm.batch * prm.n_chunks; k++) {
    let o = k * prm.n_heads + h;
    sa = comp_add(sa, part[o]);
    sb = comp_add(sb, part[np + o]);
    sd = comp_add(sd, part[2u * np + o]);
  }
  dA_log[h] = sa.x + sa.y;
  ddt_bias[h] = sb.x + sb.y;
  dD[h] = sd.x + sd.y;
}
