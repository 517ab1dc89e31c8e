// ssmviz's own Mamba-3 SISO kernels (Lahoti et al., ICLR 2026): the chunked algorithm as
// parallel passes, forward and backward, every gradient (the trapezoidal term included).
//
// Sizes: batch, seq_len (L), n_heads (H), d_head (P), n_groups (G), d_state (N, even),
// n_angles (J <= N / 2), chunk_len (Q, clamped to L), n_chunks (NC = ceil(L / Q); the last
// chunk may be shorter). Head h reads group g = h / (H / G). Layouts (row-major f32):
//   x, y, dy, dx (batch, L, H, P); dt, adt, trap and their grads (batch, L, H);
//   angles, dangles (batch, L, H, J); B, C, dB, dC (batch, L, G, N);
//   B_bias, C_bias, dB_bias, dC_bias (H, N); D, dD (H,); final_state (batch, H, P, N);
//   chunk_states (batch, NC + 1, H, P, N): slot 0 zeros, slot c + 1 the state h at the last
//   step of chunk c (written only when params.store_states).
// Per step (λ = sigmoid(trap), α = exp(adt), k = B + B_bias, q = C + C_bias per head):
//   φ_t = Σ_{r<=t} π·tanh(angles_r)·dt_r; k̂, q̂ = k, q with pair j = (2j, 2j+1) rotated by φ[j]
//   h_t = α_t h_{t-1} + (1 - λ_t) dt_t α_t x_{t-1} ⊗ k̂_{t-1} + λ_t dt_t x_t ⊗ k̂_t,
//   y_t = h_t q̂_t + D x_t.
// The passes carry S_t = h_t + σ'_t x_t ⊗ k̂_t (σ'_t = (1 - λ_{t+1}) dt_{t+1}, 0 at t = L - 1):
//   S_t = α_t S_{t-1} + s_t x_t ⊗ k̂_t (s_t = γ_t + σ'_t, γ_t = λ_t dt_t), and with
//   S'_t = S_t - s_t x_t ⊗ k̂_t (the state before step t's own input),
//   y_t = S'_t q̂_t + (D + γ_t q_t·k_t) x_t: step t's own term is rotation-free (q̂_t·k̂_t =
//   q_t·k_t), so the angle gradients hold no terms that cancel only up to rounding.
// Scratch: step_terms (6, batch, L, H) = cum (in-chunk inclusive sum of adt), to_end (sum of
//   adt after t to the chunk's end), s, σ', q·k, γ; phase (batch, L, H, J) = in-chunk angle sum;
//   angle_off (batch, NC, H, J) = angle entering chunk c (mod 2π); qk_rot (2, batch, L, H, N)
//   = q̂, k̂; cb (batch, NC, H, Q, Q) = q̂_t·k̂_s·exp(adt_{s+1} + ... + adt_t) for s < t, else 0;
//   chunk_local, states_in (batch, NC, H, P, N) = the chunk's own end state, the S entering it;
//   y_ssm (batch, L, H, P) = S'_t q̂_t.
// Backward scratch: dyx (batch, NC, H, Q, Q) = dy_t·x_s·decay (s < t); dlocal, dstates
//   (batch, NC, H, P, N) = this chunk's adjoint of its entering S, the adjoint of S at the
//   chunk's end from later chunks; v (batch, L, H, P) = G_t k̂_t (G = adjoint of S, step t's
//   own output left out);
//   dqk (2, batch, L, H, N) = dq̂, dk̂, then dq, dk (per head, not rotated); step_grads
//   (3, batch, L, H) = ds (through s), dγ (through the diagonal), dcum; dphase (batch, L, H, J); dangle_sums (batch, NC, H, J) =
//   the angle adjoint of later chunks; boundary (batch, NC, H) = <dstates, S at chunk end>;
//   partials (batch, NC, H, 2N + 1) = per-chunk sums of dk, dq and dy·x.
//
// Forward: m3_prep -> m3_angle_carry -> m3_rotate -> m3_cb -> m3_chunk_state -> m3_state_pass
//   -> m3_chunk_out. Backward: m3_dyx -> m3_dchunk_state -> m3_dstate_pass -> m3_boundary
//   -> m3_dx -> m3_dqk -> m3_step -> m3_dangle_chunk -> m3_dangle_carry -> m3_dt_chunk
//   -> m3_dbc -> m3_partials -> m3_param_reduce.
// Every pass reads only what earlier passes wrote and every sum runs in a fixed order (no
// atomics), so results are bitwise deterministic; params.reverse = 1 reverses the workgroup
// order of every pass (the race probe). One invocation per output element, 64 a workgroup;
// every loop runs at most Q, N, P, J, NC or H / G times, so lavapipe's per-invocation loop
// budget holds for the test sizes.

struct Params {
  batch: u32, seq_len: u32, n_heads: u32, d_head: u32,
  n_groups: u32, d_state: u32, n_angles: u32, chunk_len: u32,
  n_chunks: u32, reverse: u32, store_states: u32, total: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> dt: array<f32>;
@group(0) @binding(3) var<storage, read> adt: array<f32>;
@group(0) @binding(4) var<storage, read> trap: array<f32>;
@group(0) @binding(5) var<storage, read> angles: array<f32>;
@group(0) @binding(6) var<storage, read> B: array<f32>;
@group(0) @binding(7) var<storage, read> C: array<f32>;
@group(0) @binding(8) var<storage, read> B_bias: array<f32>;
@group(0) @binding(9) var<storage, read> C_bias: array<f32>;
@group(0) @binding(10) var<storage, read> D: array<f32>;
@group(0) @binding(11) var<storage, read> dy: array<f32>;
@group(0) @binding(12) var<storage, read_write> y: array<f32>;
@group(0) @binding(13) var<storage, read_write> final_state: array<f32>;
@group(0) @binding(14) var<storage, read_write> chunk_states: array<f32>;
@group(0) @binding(15) var<storage, read_write> dx: array<f32>;
@group(0) @binding(16) var<storage, read_write> ddt: array<f32>;
@group(0) @binding(17) var<storage, read_write> dadt: array<f32>;
@group(0) @binding(18) var<storage, read_write> dtrap: array<f32>;
@group(0) @binding(19) var<storage, read_write> dangles: array<f32>;
@group(0) @binding(20) var<storage, read_write> dB: array<f32>;
@group(0) @binding(21) var<storage, read_write> dC: array<f32>;
@group(0) @binding(22) var<storage, read_write> dB_bias: array<f32>;
@group(0) @binding(23) var<storage, read_write> dC_bias: array<f32>;
@group(0) @binding(24) var<storage, read_write> dD: array<f32>;
@group(0) @binding(25) var<storage, read_write> step_terms: array<f32>;
@group(0) @binding(26) var<storage, read_write> phase: array<f32>;
@group(0) @binding(27) var<storage, read_write> angle_off: array<f32>;
@group(0) @binding(28) var<storage, read_write> qk_rot: array<f32>;
@group(0) @binding(29) var<storage, read_write> cb: array<f32>;
@group(0) @binding(30) var<storage, read_write> chunk_local: array<f32>;
@group(0) @binding(31) var<storage, read_write> states_in: array<f32>;
@group(0) @binding(32) var<storage, read_write> y_ssm: array<f32>;
@group(0) @binding(33) var<storage, read_write> dyx: array<f32>;
@group(0) @binding(34) var<storage, read_write> dlocal: array<f32>;
@group(0) @binding(35) var<storage, read_write> dstates: array<f32>;
@group(0) @binding(36) var<storage, read_write> v: array<f32>;
@group(0) @binding(37) var<storage, read_write> dqk: array<f32>;
@group(0) @binding(38) var<storage, read_write> step_grads: array<f32>;
@group(0) @binding(39) var<storage, read_write> dphase: array<f32>;
@group(0) @binding(40) var<storage, read_write> dangle_sums: array<f32>;
@group(0) @binding(41) var<storage, read_write> boundary: array<f32>;
@group(0) @binding(42) var<storage, read_write> partials: array<f32>;

const PI: f32 = 3.14159265358979;
const TWO_PI: f32 = 6.28318530717959;
// step_terms / step_grads planes
const CUM: u32 = 0u;
const TO_END: u32 = 1u;
const SCALE: u32 = 2u;
const SHIFTED: u32 = 3u;
const QK: u32 = 4u;
const GAMMA: u32 = 5u;
const DSCALE: u32 = 0u;
const DGAMMA: u32 = 1u;
const DCUM: u32 = 2u;

// The invocation's linear index: workgroup id over a split (x, y) grid, reversed when the race
// probe is on, times 64 plus the local index.
fn item(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
  var w = wid.x + wid.y * nwg.x;
  if (params.reverse == 1u && w < params.total) { w = params.total - 1u - w; }
  return w * 64u + lid;
}

fn sigmoid(z: f32) -> f32 { return 1.0 / (1.0 + exp(-z)); }
fn chunk_start(c: u32) -> u32 { return c * params.chunk_len; }
fn chunk_end(c: u32) -> u32 { return min((c + 1u) * params.chunk_len, params.seq_len); }
// (b, t, h) of a per-step scalar; x-like (b, t, h, p); per-head (b, t, h, n) vectors.
fn bth(b: u32, t: u32, h: u32) -> u32 { return (b * params.seq_len + t) * params.n_heads + h; }
fn plane() -> u32 { return params.batch * params.seq_len * params.n_heads; }
fn xi(b: u32, t: u32, h: u32, p: u32) -> u32 { return bth(b, t, h) * params.d_head + p; }
fn hn(b: u32, t: u32, h: u32, n: u32) -> u32 { return bth(b, t, h) * params.d_state + n; }
fn group_of(h: u32) -> u32 { return h / (params.n_heads / params.n_groups); }
fn bc(b: u32, t: u32, g: u32, n: u32) -> u32 {
  return ((b * params.seq_len + t) * params.n_groups + g) * params.d_state + n;
}
fn aj(b: u32, t: u32, h: u32, j: u32) -> u32 { return bth(b, t, h) * params.n_angles + j; }
fn cj(b: u32, c: u32, h: u32, j: u32) -> u32 {
  return ((b * params.n_chunks + c) * params.n_heads + h) * params.n_angles + j;
}
// (b, c, h, p, n) of a per-chunk state; (b, c, h, t, s) of a chunk's Q x Q matrix.
fn st(b: u32, c: u32, h: u32, p: u32, n: u32) -> u32 {
  return (((b * params.n_chunks + c) * params.n_heads + h) * params.d_head + p) * params.d_state + n;
}
fn qq(b: u32, c: u32, h: u32, t: u32, s: u32) -> u32 {
  let q = params.chunk_len;
  return (((b * params.n_chunks + c) * params.n_heads + h) * q + t) * q + s;
}
fn term(k: u32, i: u32) -> u32 { return k * plane() + i; }
fn k_of(b: u32, t: u32, h: u32, n: u32) -> f32 { return B[bc(b, t, group_of(h), n)] + B_bias[h * params.d_state + n]; }
fn q_of(b: u32, t: u32, h: u32, n: u32) -> f32 { return C[bc(b, t, group_of(h), n)] + C_bias[h * params.d_state + n]; }
fn q_rot(b: u32, t: u32, h: u32, n: u32) -> f32 { return qk_rot[hn(b, t, h, n)]; }
fn k_rot(b: u32, t: u32, h: u32, n: u32) -> f32 { return qk_rot[plane() * params.d_state + hn(b, t, h, n)]; }
// The accumulated angle φ_t[j] (mod 2π from the chunk's entering angle on).
fn phi(b: u32, t: u32, h: u32, j: u32) -> f32 {
  return angle_off[cj(b, t / params.chunk_len, h, j)] + phase[aj(b, t, h, j)];
}
// Σ adt_r for s < r <= t (s <= t, one chunk), as a running sum of the terms themselves.
fn seg(b: u32, h: u32, s: u32, t: u32) -> f32 {
  var acc = 0.0;
  for (var r = s + 1u; r <= t; r++) { acc += adt[bth(b, r, h)]; }
  return acc;
}

// ---------------------------------------------------------------------------------- forward

// F1, one invocation per (b, c, h): the in-chunk sums of adt (cum, to_end), s, σ', q·k and the
// in-chunk angle sums.
@compute @workgroup_size(64)
fn m3_prep(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_index) lid: u32) {
  let i = item(wid, nwg, lid);
  let H = params.n_heads;
  if (i >= params.batch * params.n_chunks * H) { return; }
  let h = i % H;
  let c = (i / H) % params.n_chunks;
  let b = i / (H * params.n_chunks);
  let t0 = chunk_start(c);
  let t1 = chunk_end(c);
  var cum = 0.0;
  for (var t = t0; t < t1; t++) {
    let k = bth(b, t, h);
    cum += adt[k];
    step_terms[term(CUM, k)] = cum;
    var shifted = 0.0;
    if (t + 1u < params.seq_len) {
      let k1 = bth(b, t + 1u, h);
      shifted = (1.0 - sigmoid(trap[k1])) * dt[k1];
    }
    step_terms[term(SHIFTED, k)] = shifted;
    let gamma = sigmoid(trap[k]) * dt[k];
    step_terms[term(GAMMA, k)] = gamma;
    step_terms[term(SCALE, k)] = gamma + shifted;
    var dot = 0.0;
    for (var n = 0u; n < params.d_state; n++) { dot += q_of(b, t, h, n) * k_of(b, t, h, n); }
    step_terms[term(QK, k)] = dot;
  }
  var to_end = 0.0;
  for (var r = t1; r > t0; r--) {
    let k = bth(b, r - 1u, h);
    step_terms[term(TO_END, k)] = to_end;
    to_end += adt[k];
  }
  for (var j = 0u; j < params.n_angles; j++) {
    var acc = 0.0;
    for (var t = t0; t < t1; t++) {
      acc += PI * tanh(angles[aj(b, t, h, j)]) * dt[bth(b, t, h)];
      phase[aj(b, t, h, j)] = acc;
    }
  }
}

// F2, one invocation per (b, h, j): the angle entering each chunk, mod 2π.
@compute @workgroup_size(64)
fn m3_angle_carry(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                  @builtin(local_invocation_index) lid: u32) {
  let i = item(wid, nwg, lid);
  let J = params.n_angles;
  if (i >= params.batch * params.n_heads * J) { return; }
  let j = i % J;
  let h = (i / J) % params.n_heads;
  let b = i / (J * params.n_heads);
  var carry = 0.0;
  for (var c = 0u; c < params.n_chunks; c++) {
    angle_off[cj(b, c, h, j)] = carry;
    carry += phase[aj(b, chunk_end(c) - 1u, h, j)];
    carry -= TWO_PI * floor(carry / TWO_PI);
  }
}

// F3, one invocation per (b, t, h, pair): q̂ and k̂ of one pair (rotated when pair < J).
@compute @workgroup_size(64)
fn m3_rotate(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) lid: u32) {
  let i = item(wid, nwg, lid);
  let pairs = params.d_state / 2u;
  if (i >= plane() * pairs) { return; }
  let j = i % pairs;
  let bt = i / pairs;  // bth(b, t, h)
  let h = bt % params.n_heads;
  let t = (bt / params.n_heads) % params.seq_len;
  let b = bt / (params.n_heads * params.seq_len);
  var cs = 1.0;
  var sn = 0.0;
  if (j < params.n_angles) {
    let a = phi(b, t, h, j);
    cs = cos(a);
    sn = sin(a);
  }
  let n = 2u * j;
  let qa = q_of(b, t, h, n);
  let qb = q_of(b, t, h, n + 1u);
  let ka = k_of(b, t, h, n);
  let kb = k_of(b, t, h, n + 1u);
  let o = plane() * params.d_state;
  qk_rot[hn(b, t, h, n)] = qa * cs - qb * sn;
  qk_rot[hn(b, t, h, n + 1u)] = qa * sn + qb * cs;
  qk_rot[o + hn(b, t, h, n)] = ka * cs - kb * sn;
  qk_rot[o + hn(b, t, h, n + 1u)] = ka * sn + kb * cs;
}

// F4, one invocation per (b, c, h, t, s) of the chunk's Q x Q matrix: q̂_t·k̂_s·decay (s < t).
@compute @workgroup_size(64)
fn m3_cb(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
         @builtin(local_invocation_index) lid: u32) {
  let i = item(wid, nwg, lid);
  let Q = params.chunk_len;
  let H = params.n_heads;
  if (i >= params.batch * params.n_chunks * H * Q * Q) { return; }
  let sl = i % Q;
  let tl = (i / Q) % Q;
  let h = (i / (Q * Q)) % H;
  let c = (i / (Q * Q * H)) % params.n_chunks;
  let b = i / (Q * Q * H * params.n_chunks);
  let t = chunk_start(c) + tl;
  let s = chunk_start(c) + sl;
  var out = 0.0;
  if (sl < tl && t < params.seq_len) {
    var dot = 0.0;
    for (var n = 0u; n < params.d_state; n++) { dot += q_rot(b, t, h, n) * k_rot(b, s, h, n); }
    out = dot * exp(seg(b, h, s, t));
  }
  cb[qq(b, c, h, tl, sl)] = out;
}

// F5, one invocation per (b, c, h, p, n): the chunk's own part of S at its end.
@compute @workgroup_size(64)
fn m3_chunk_state(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                  @builtin(local_invocation_index) lid: u32) {
  let i = item(wid, nwg, lid);
  let P = params.d_head;
  let N = params.d_state;
  let H = params.n_heads;
  if (i >= params.batch * params.n_chunks * H * P * N) { return; }
  let n = i % N;
  let p = (i / N) % P;
  let h = (i / (N * P)) % H;
  let c = (i / (N * P * H)) % params.n_chunks;
  let b = i / (N * P * H * params.n_chunks);
  var acc = 0.0;
  for (var s = chunk_start(c); s < chunk_end(c); s++) {
    let k = bth(b, s, h);
    acc += exp(step_terms[term(TO_END, k)]) * step_terms[term(SCALE, k)] * x[xi(b, s, h, p)]
           * k_rot(b, s, h, n);
  }
  chunk_local[st(b, c, h, p, n)] = acc;
}

// F6, one invocation per (b, h, p, n): S from chunk to chunk; the states h at chunk ends.
@compute @workgroup_size(64)
fn m3_state_pass(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_index) lid: u32) {
  let i = item(wid, nwg, lid);
  let P = params.d_head;
  let N = params.d_state;
  let H = params.n_heads;
  if (i >= params.batch * H * P * N) { return; }
  let n = i % N;
  let p = (i / N) % P;
  let h = (i / (N * P)) % H;
  let b = i / (N * P * H);
  let NC = params.n_chunks;
  let slot = (P * N) * H;
  let own = (h * P + p) * N + n;
  if (params.store_states == 1u) { chunk_states[b * (NC + 1u) * slot + own] = 0.0; }
  var s_state = 0.0;
  for (var c = 0u; c < NC; c++) {
    states_in[st(b, c, h, p, n)] = s_state;
    let last = chunk_end(c) - 1u;
    s_state = exp(step_terms[term(CUM, bth(b, last, h))]) * s_state + chunk_local[st(b, c, h, p, n)];
    if (params.store_states == 1u) {
      let h_end = s_state - step_terms[term(SHIFTED, bth(b, last, h))] * x[xi(b, last, h, p)]
                  * k_rot(b, last, h, n);
      chunk_states[(b * (NC + 1u) + c + 1u) * slot + own] = h_end;
    }
  }
  final_state[b * slot + own] = s_state;  // σ' = 0 at the last step: h = S there
}

// F7, one invocation per (b, t, h, p): y_t = S'_t q̂_t + (D + γ_t q_t·k_t) x_t.
@compute @workgroup_size(64)
fn m3_chunk_out(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
  let i = item(wid, nwg, lid);
  let P = params.d_head;
  if (i >= plane() * P) { return; }
  let p = i % P;
  let bt = i / P;
  let h = bt % params.n_heads;
  let t = (bt / params.n_heads) % params.seq_len;
  let b = bt / (params.n_heads * params.seq_len);
  let c = t / params.chunk_len;
  let t0 = chunk_start(c);
  var acc = 0.0;
  for (var s = t0; s < t; s++) {
    acc += cb[qq(b, c, h, t - t0, s - t0)] * step_terms[term(SCALE, bth(b, s, h))] * x[xi(b, s, h, p)];
  }
  var off = 0.0;
  for (var n = 0u; n < params.d_state; n++) { off += states_in[st(b, c, h, p, n)] * q_rot(b, t, h, n); }
  acc += exp(step_terms[term(CUM, bt)]) * off;
  y_ssm[i] = acc;
  let skip = D[h] + step_terms[term(GAMMA, bt)] * step_terms[term(QK, bt)];
  y[i] = acc + skip * x[i];
}

// ---------------------------------------------------------------------------------- backward

// B1, one invocation per (b, c, h, t, s): dy_t·x_s·decay (s < t), else 0.
@compute @workgroup_size(64)
fn m3_dyx(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) lid: u32) {
  let i = item(wid, nwg, lid);
  let Q = params.chunk_len;
  let H = params.n_heads;
  if (i >= params.batch * params.n_chunks * H * Q * Q) { return; }
  let sl = i % Q;
  let tl = (i / Q) % Q;
  let h = (i / (Q * Q)) % H;
  let c = (i / (Q * Q * H)) % params.n_chunks;
  let b = i / (Q * Q * H * params.n_chunks);
  let t = chunk_start(c) + tl;
  let s = chunk_start(c) + sl;
  var out = 0.0;
  if (sl < tl && t < params.seq_len) {
    var dot = 0.0;
    for (var p = 0u; p < params.d_head; p++) { dot += dy[xi(b, t, h, p)] * x[xi(b, s, h, p)]; }
    out = dot * exp(seg(b, h, s, t));
  }
  dyx[qq(b, c, h, tl, sl)] = out;
}

// B2, one invocation per (b, c, h, p, n): Σ_t exp(cum_t) dy_t[p] q̂_t[n], the chunk's own
// adjoint of the S entering it.
@compute @workgroup_size(64)
fn m3_dchunk_state(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                   @builtin(local_invocation_index) lid: u32) {
  let i = item(wid, nwg, lid);
  let P = params.d_head;
  let N = params.d_state;
  let H = params.n_heads;
  if (i >= params.batch * params.n_chunks * H * P * N) { return; }
  let n = i % N;
  let p = (i / N) % P;
  let h = (i / (N * P)) % H;
  let c = (i / (N * P * H)) % params.n_chunks;
  let b = i / (N * P * H * params.n_chunks);
  var acc = 0.0;
  for (var t = chunk_start(c); t < chunk_end(c); t++) {
    acc += exp(step_terms[term(CUM, bth(b, t, h))]) * dy[xi(b, t, h, p)] * q_rot(b, t, h, n);
  }
  dlocal[st(b, c, h, p, n)] = acc;
}

// B3, one invocation per (b, h, p, n): the adjoint of S at each chunk's end, from later chunks.
@compute @workgroup_size(64)
fn m3_dstate_pass(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                  @builtin(local_invocation_index) lid: u32) {
  let i = item(wid, nwg, lid);
  let P = params.d_head;
  let N = params.d_state;
  let H = params.n_heads;
  if (i >= params.batch * H * P * N) { return; }
  let n = i % N;
  let p = (i / N) % P;
  let h = (i / (N * P)) % H;
  let b = i / (N * P * H);
  var g = 0.0;
  for (var r = params.n_chunks; r > 0u; r--) {
    let c = r - 1u;
    dstates[st(b, c, h, p, n)] = g;
    g = exp(step_terms[term(CUM, bth(b, chunk_end(c) - 1u, h))]) * g + dlocal[st(b, c, h, p, n)];
  }
}

// B4, one invocation per (b, c, h): <dstates, S at the chunk's end>, the decay gradient across
// the chunk's end.
@compute @workgroup_size(64)
fn m3_boundary(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
  let i = item(wid, nwg, lid);
  let H = params.n_heads;
  if (i >= params.batch * params.n_chunks * H) { return; }
  let h = i % H;
  let c = (i / H) % params.n_chunks;
  let b = i / (H * params.n_chunks);
  var acc = 0.0;
  if (c + 1u < params.n_chunks) {  // the last chunk's dstates are zero
    for (var p = 0u; p < params.d_head; p++) {
      for (var n = 0u; n < params.d_state; n++) {
        acc += dstates[st(b, c, h, p, n)] * states_in[st(b, c + 1u, h, p, n)];
      }
    }
  }
  boundary[i] = acc;
}

// B5, one invocation per (b, s, h, p): v_s = G_s k̂_s and dx_s = s_s v_s + (D + γ_s q·k) dy_s.
@compute @workgroup_size(64)
fn m3_dx(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
         @builtin(local_invocation_index) lid: u32) {
  let i = item(wid, nwg, lid);
  let P = params.d_head;
  if (i >= plane() * P) { return; }
  let p = i % P;
  let bs = i / P;
  let h = bs % params.n_heads;
  let s = (bs / params.n_heads) % params.seq_len;
  let b = bs / (params.n_heads * params.seq_len);
  let c = s / params.chunk_len;
  let t0 = chunk_start(c);
  var acc = 0.0;
  for (var t = s + 1u; t < chunk_end(c); t++) {
    acc += cb[qq(b, c, h, t - t0, s - t0)] * dy[xi(b, t, h, p)];
  }
  var off = 0.0;
  for (var n = 0u; n < params.d_state; n++) { off += dstates[st(b, c, h, p, n)] * k_rot(b, s, h, n); }
  acc += exp(step_terms[term(TO_END, bs)]) * off;
  v[i] = acc;
  let skip = D[h] + step_terms[term(GAMMA, bs)] * step_terms[term(QK, bs)];
  dx[i] = step_terms[term(SCALE, bs)] * acc + skip * dy[i];
}

// B6, one invocation per (b, t, h, n): dq̂_t[n] = S'_t^T dy_t and dk̂_t[n] = s_t (G_t^T x_t).
@compute @workgroup_size(64)
fn m3_dqk(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) lid: u32) {
  let i = item(wid, nwg, lid);
  let N = params.d_state;
  if (i >= plane() * N) { return; }
  let n = i % N;
  let bt = i / N;
  let h = bt % params.n_heads;
  let t = (bt / params.n_heads) % params.seq_len;
  let b = bt / (params.n_heads * params.seq_len);
  let c = t / params.chunk_len;
  let t0 = chunk_start(c);
  // dq̂: the chunk's own part (s < t) and the entering state's.
  var dq = 0.0;
  for (var s = t0; s < t; s++) {
    dq += dyx[qq(b, c, h, t - t0, s - t0)] * step_terms[term(SCALE, bth(b, s, h))] * k_rot(b, s, h, n);
  }
  var off = 0.0;
  for (var p = 0u; p < params.d_head; p++) { off += states_in[st(b, c, h, p, n)] * dy[xi(b, t, h, p)]; }
  dq += exp(step_terms[term(CUM, bt)]) * off;
  // dk̂: later outputs of the chunk (t' > t) and later chunks.
  var dk = 0.0;
  for (var r = t + 1u; r < chunk_end(c); r++) {
    dk += dyx[qq(b, c, h, r - t0, t - t0)] * q_rot(b, r, h, n);
  }
  var later = 0.0;
  for (var p = 0u; p < params.d_head; p++) { later += dstates[st(b, c, h, p, n)] * x[xi(b, t, h, p)]; }
  dk += exp(step_terms[term(TO_END, bt)]) * later;
  dqk[i] = dq;
  dqk[plane() * N + i] = step_terms[term(SCALE, bt)] * dk;
}

// B7, one invocation per (b, t, h): ds_t, dγ_t, dcum_t, dφ_t; dq̂, dk̂ turned into dq, dk
// (rotated back, plus the q·k term).
@compute @workgroup_size(64)
fn m3_step(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_index) lid: u32) {
  let i = item(wid, nwg, lid);
  if (i >= plane()) { return; }
  let h = i % params.n_heads;
  let t = (i / params.n_heads) % params.seq_len;
  let b = i / (params.n_heads * params.seq_len);
  var ds = 0.0;
  var dyx_t = 0.0;
  var row = 0.0;
  for (var p = 0u; p < params.d_head; p++) {
    let k = xi(b, t, h, p);
    ds += x[k] * v[k];
    dyx_t += dy[k] * x[k];
    row += dy[k] * y_ssm[k];
  }
  step_grads[term(DSCALE, i)] = ds;
  step_grads[term(DGAMMA, i)] = step_terms[term(QK, i)] * dyx_t;
  step_grads[term(DCUM, i)] = row - step_terms[term(SCALE, i)] * ds;
  let e = step_terms[term(GAMMA, i)] * dyx_t;  // the gradient of q·k
  let o = plane() * params.d_state;
  for (var j = 0u; j < params.d_state / 2u; j++) {
    let n = 2u * j;
    var cs = 1.0;
    var sn = 0.0;
    if (j < params.n_angles) {
      let a = phi(b, t, h, j);
      cs = cos(a);
      sn = sin(a);
    }
    let dqa = dqk[hn(b, t, h, n)];
    let dqb = dqk[hn(b, t, h, n + 1u)];
    let dka = dqk[o + hn(b, t, h, n)];
    let dkb = dqk[o + hn(b, t, h, n + 1u)];
    if (j < params.n_angles) {
      dphase[aj(b, t, h, j)] = dqb * q_rot(b, t, h, n) - dqa * q_rot(b, t, h, n + 1u)
                             + dkb * k_rot(b, t, h, n) - dka * k_rot(b, t, h, n + 1u);
    }
    let qa = q_of(b, t, h, n);
    let qb = q_of(b, t, h, n + 1u);
    let ka = k_of(b, t, h, n);
    let kb = k_of(b, t, h, n + 1u);
    dqk[hn(b, t, h, n)] = dqa * cs + dqb * sn + e * ka;
    dqk[hn(b, t, h, n + 1u)] = -dqa * sn + dqb * cs + e * kb;
    dqk[o + hn(b, t, h, n)] = dka * cs + dkb * sn + e * qa;
    dqk[o + hn(b, t, h, n + 1u)] = -dka * sn + dkb * cs + e * qb;
  }
}

// B8, one invocation per (b, c, h, j): Σ_t dφ_t[j] over the chunk.
@compute @workgroup_size(64)
fn m3_dangle_chunk(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                   @builtin(local_invocation_index) lid: u32) {
  let i = item(wid, nwg, lid);
  let J = params.n_angles;
  if (i >= params.batch * params.n_chunks * params.n_heads * J) { return; }
  let j = i % J;
  let h = (i / J) % params.n_heads;
  let c = (i / (J * params.n_heads)) % params.n_chunks;
  let b = i / (J * params.n_heads * params.n_chunks);
  var acc = 0.0;
  for (var t = chunk_start(c); t < chunk_end(c); t++) { acc += dphase[aj(b, t, h, j)]; }
  dangle_sums[i] = acc;
}

// B9, one invocation per (b, h, j): each chunk's sum replaced by the sum over later chunks.
@compute @workgroup_size(64)
fn m3_dangle_carry(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                   @builtin(local_invocation_index) lid: u32) {
  let i = item(wid, nwg, lid);
  let J = params.n_angles;
  if (i >= params.batch * params.n_heads * J) { return; }
  let j = i % J;
  let h = (i / J) % params.n_heads;
  let b = i / (J * params.n_heads);
  var later = 0.0;
  for (var r = params.n_chunks; r > 0u; r--) {
    let k = cj(b, r - 1u, h, j);
    let own = dangle_sums[k];
    dangle_sums[k] = later;
    later += own;
  }
}

// B10, one invocation per (b, c, h): dadt, dtrap, ddt and dangles of the chunk's steps.
@compute @workgroup_size(64)
fn m3_dt_chunk(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
  let i = item(wid, nwg, lid);
  let H = params.n_heads;
  if (i >= params.batch * params.n_chunks * H) { return; }
  let h = i % H;
  let c = (i / H) % params.n_chunks;
  let b = i / (H * params.n_chunks);
  let t0 = chunk_start(c);
  let t1 = chunk_end(c);
  // dadt_r = Σ_{t >= r in the chunk} dcum_t + the boundary term.
  var acc = boundary[(b * params.n_chunks + c) * H + h];
  for (var r = t1; r > t0; r--) {
    let k = bth(b, r - 1u, h);
    acc += step_grads[term(DCUM, k)];
    dadt[k] = acc;
  }
  // γ_t = λ_t dt_t enters s_t = γ_t + σ'_t and the diagonal; σ'_{t-1} = (1 - λ_t) dt_t.
  for (var t = t0; t < t1; t++) {
    let k = bth(b, t, h);
    let lam = sigmoid(trap[k]);
    var prev = 0.0;
    if (t > 0u) { prev = step_grads[term(DSCALE, bth(b, t - 1u, h))]; }
    let dgamma = step_grads[term(DGAMMA, k)] + step_grads[term(DSCALE, k)];
    dtrap[k] = dt[k] * (dgamma - prev) * lam * (1.0 - lam);
    ddt[k] = lam * dgamma + (1.0 - lam) * prev;
  }
  // φ_t = Σ_{r <= t} π tanh(angles_r) dt_r: the adjoint of φ summed from the sequence's end.
  for (var j = 0u; j < params.n_angles; j++) {
    var dphi = dangle_sums[cj(b, c, h, j)];
    for (var r = t1; r > t0; r--) {
      let t = r - 1u;
      let k = bth(b, t, h);
      dphi += dphase[aj(b, t, h, j)];
      let th = tanh(angles[aj(b, t, h, j)]);
      ddt[k] += dphi * PI * th;
      dangles[aj(b, t, h, j)] = dphi * dt[k] * PI * (1.0 - th * th);
    }
  }
}

// B11, one invocation per (b, t, g, n): dB, dC summed over the group's heads.
@compute @workgroup_size(64)
fn m3_dbc(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) lid: u32) {
  let i = item(wid, nwg, lid);
  let N = params.d_state;
  let G = params.n_groups;
  if (i >= params.batch * params.seq_len * G * N) { return; }
  let n = i % N;
  let g = (i / N) % G;
  let t = (i / (N * G)) % params.seq_len;
  let b = i / (N * G * params.seq_len);
  let per = params.n_heads / G;
  let o = plane() * N;
  var sb = 0.0;
  var sc = 0.0;
  for (var u = 0u; u < per; u++) {
    let h = g * per + u;
    sc += dqk[hn(b, t, h, n)];
    sb += dqk[o + hn(b, t, h, n)];
  }
  dB[i] = sb;
  dC[i] = sc;
}

// B12, one invocation per (b, c, h, e), e < 2N + 1: the chunk's sums of dk[e], dq[e - N] and
// (e = 2N) dy·x, for the bias and D gradients.
@compute @workgroup_size(64)
fn m3_partials(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
  let i = item(wid, nwg, lid);
  let N = params.d_state;
  let E = 2u * N + 1u;
  let H = params.n_heads;
  if (i >= params.batch * params.n_chunks * H * E) { return; }
  let e = i % E;
  let h = (i / E) % H;
  let c = (i / (E * H)) % params.n_chunks;
  let b = i / (E * H * params.n_chunks);
  let o = plane() * N;
  var acc = 0.0;
  for (var t = chunk_start(c); t < chunk_end(c); t++) {
    if (e < N) {
      acc += dqk[o + hn(b, t, h, e)];
    } else if (e < 2u * N) {
      acc += dqk[hn(b, t, h, e - N)];
    } else {
      for (var p = 0u; p < params.d_head; p++) { acc += dy[xi(b, t, h, p)] * x[xi(b, t, h, p)]; }
    }
  }
  partials[i] = acc;
}

// B13, one invocation per (h, e): dB_bias, dC_bias, dD summed over batch and chunks in order.
@compute @workgroup_size(64)
fn m3_param_reduce(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                   @builtin(local_invocation_index) lid: u32) {
  let i = item(wid, nwg, lid);
  let N = params.d_state;
  let E = 2u * N + 1u;
  let H = params.n_heads;
  if (i >= H * E) { return; }
  let e = i % E;
  let h = i / E;
  var acc = 0.0;
  for (var b = 0u; b < params.batch; b++) {
    for (var c = 0u; c < params.n_chunks; c++) {
      acc += partials[((b * params.n_chunks + c) * H + h) * E + e];
    }
  }
  if (e < N) {
    dB_bias[h * N + e] = acc;
  } else if (e < 2u * N) {
    dC_bias[h * N + e - N] = acc;
  } else {
    dD[h] = acc;
  }
}
