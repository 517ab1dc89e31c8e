// Planted fault: a race between workgroups. Each chunk's workgroup reads the carry that the
// previous chunk's workgroup writes in the same dispatch. Workgroups that run in order (as
// on lavapipe) hide it; any other order reads an unwritten slot.

const MATH = /* wgsl */ `
// lavapipe's log() has an absolute (not relative) error near 1, so the classic
// log1p/expm1 tricks lose digits there: small arguments use their series instead.
fn log1p_(z: f32) -> f32 {
  if (abs(z) < 0.25) {
    var term = z;
    var sum = 0.0;
    for (var k = 1u; k <= 12u; k = k + 1u) {
      sum = sum + term / f32(k);
      term = -term * z;
    }
    return sum;
  }
  return log(1.0 + z);
}
fn softplus(x: f32) -> f32 {
  if (x > 20.0) { return x; }
  return log1p_(exp(x));
}
fn expm1_(x: f32) -> f32 {
  if (abs(x) < 0.5) {
    var term = x;
    var sum = x;
    for (var k = 2u; k <= 10u; k = k + 1u) {
      term = term * x / f32(k);
      sum = sum + term;
    }
    return sum;
  }
  return exp(x) - 1.0;
}
fn sigmoid(z: f32) -> f32 { return 1.0 / (1.0 + exp(-z)); }
`;

const SSD_HEADER = /* wgsl */ `
struct Params {
  seq_len: u32, d_inner: u32, n_heads: u32, d_head: u32,
  n_groups: u32, d_state: u32, chunk_len: u32, n_chunks: u32, batch: u32,
}
@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> x_in: array<f32>;
@group(0) @binding(2) var<storage, read> B_proj: array<f32>;
@group(0) @binding(3) var<storage, read> C_proj: array<f32>;
@group(0) @binding(4) var<storage, read> dt_in: array<f32>;
@group(0) @binding(5) var<storage, read> A_log: array<f32>;
@group(0) @binding(6) var<storage, read> dt_bias: array<f32>;
`;

export const SSD_FORWARD_WGSL = /* wgsl */ `${SSD_HEADER}
@group(0) @binding(7) var<storage, read> D_vec: array<f32>;
@group(0) @binding(8) var<storage, read_write> out_buf: array<f32>;
@group(0) @binding(9) var<storage, read_write> state_carry: array<f32>;
${MATH}
fn decay(b: u32, t: u32, hh: u32, sA: f32) -> f32 {
  let j = (b * params.seq_len + t) * params.n_heads + hh;
  return exp(-sA * softplus(dt_in[j] + dt_bias[hh]));
}

// One workgroup per (chunk, head, batch), all in one dispatch.
@compute @workgroup_size(1)
fn ssd_chunk_forward(@builtin(workgroup_id) wid: vec3<u32>) {
  let c = wid.x;
  let hh = wid.y;
  let b = wid.z;
  if (c >= params.n_chunks || hh >= params.n_heads || b >= params.batch) {
    return;
  }
  let L = params.seq_len;
  let H = params.n_heads;
  let P = params.d_head;
  let N = params.d_state;
  let G = params.n_groups;
  let DI = params.d_inner;
  let gi = hh * G / H;
  let sA = softplus(A_log[hh]);
  let t0 = c * params.chunk_len;
  let t1 = min(t0 + params.chunk_len, L);
  for (var t = t0; t < t1; t = t + 1u) {
    for (var p = 0u; p < P; p = p + 1u) {
      let i = (b * L + t) * DI + hh * P + p;
      out_buf[i] = D_vec[hh] * x_in[i];
    }
  }
  for (var n = 0u; n < N; n = n + 1u) {
    for (var p = 0u; p < P; p = p + 1u) {
      let s = ((b * H + hh) * N + n) * P + p;
      // Start from the carry that chunk c - 1 leaves in slot c.
      var h = state_carry[c * params.batch * H * N * P + s];  // planted fault: race
      for (var t = t0; t < t1; t = t + 1u) {
        let bn = ((b * L + t) * G + gi) * N + n;
        let i = (b * L + t) * DI + hh * P + p;
        h = decay(b, t, hh, sA) * h + B_proj[bn] * x_in[i];
        out_buf[i] += C_proj[bn] * h;
      }
      state_carry[(c + 1u) * params.batch * H * N * P + s] = h;
    }
  }
}
`;
