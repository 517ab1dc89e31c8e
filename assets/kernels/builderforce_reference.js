// Sample kernels in the builderforce-memory-engine layout (see kernel-abi.md), written for
// ssmviz to be correct rather than fast: plain sequential loops. Every output element is
// written by exactly one workgroup, so results do not depend on workgroup order.
// Check with:  ssmviz check --kernel assets/kernels/builderforce_reference.js

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

export const SELECTIVE_SCAN_FORWARD_WGSL = /* wgsl */ `
struct Params { seq_len: u32, d_state: u32, d_inner: u32, batch: u32, }
@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> u: array<f32>;
@group(0) @binding(2) var<storage, read> delta: array<f32>;
@group(0) @binding(3) var<storage, read> A: array<f32>;
@group(0) @binding(4) var<storage, read> B: array<f32>;
@group(0) @binding(5) var<storage, read> C: array<f32>;
@group(0) @binding(6) var<storage, read> D_vec: array<f32>;
@group(0) @binding(7) var<storage, read_write> y: array<f32>;
@group(0) @binding(8) var<storage, read_write> h_cache: array<f32>;

${MATH}
// One workgroup per (d, n, b); its first invocation runs the whole sequence.
@compute @workgroup_size(64)
fn forward_scan(@builtin(workgroup_id) wid: vec3<u32>,
                @builtin(local_invocation_id) lid: vec3<u32>) {
  let d = wid.x;
  let n = wid.y;
  let b = wid.z;
  if (lid.x != 0u || d >= params.d_inner || n >= params.d_state || b >= params.batch) {
    return;
  }
  let L = params.seq_len;
  let DI = params.d_inner;
  let N = params.d_state;
  let half = params.batch * L * DI * N;
  let a = -exp(A[d * N + n]);
  var h = 0.0;
  for (var t = 0u; t < L; t = t + 1u) {
    let i = (b * L + t) * DI + d;
    let bn = (b * L + t) * N + n;
    let dt = softplus(delta[i]);
    let abar = exp(dt * a);
    let coef = expm1_(dt * a) / a;
    h = abar * h + coef * B[bn] * u[i];
    let k = i * N + n;
    h_cache[k] = h;
    h_cache[half + k] = C[bn] * h;
  }
}

// y = sum over n of the second half of h_cache, plus D * u.
@compute @workgroup_size(64)
fn forward_reduce(@builtin(workgroup_id) wid: vec3<u32>,
                  @builtin(local_invocation_id) lid: vec3<u32>) {
  let t = wid.x * 64u + lid.x;
  let d = wid.y;
  let b = wid.z;
  let L = params.seq_len;
  if (t >= L || d >= params.d_inner || b >= params.batch) {
    return;
  }
  let DI = params.d_inner;
  let N = params.d_state;
  let half = params.batch * L * DI * N;
  let i = (b * L + t) * DI + d;
  var acc = 0.0;
  for (var n = 0u; n < N; n = n + 1u) {
    acc = acc + h_cache[half + i * N + n];
  }
  y[i] = acc + D_vec[d] * u[i];
}
`;

export const SELECTIVE_SCAN_BACKWARD_WGSL = /* wgsl */ `
struct Params { seq_len: u32, d_state: u32, d_inner: u32, batch: u32, }
@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> u: array<f32>;
@group(0) @binding(2) var<storage, read> delta: array<f32>;
@group(0) @binding(3) var<storage, read> A: array<f32>;
@group(0) @binding(4) var<storage, read> B: array<f32>;
@group(0) @binding(5) var<storage, read> C: array<f32>;
@group(0) @binding(6) var<storage, read> h_cache: array<f32>;
@group(0) @binding(7) var<storage, read> dy: array<f32>;
@group(0) @binding(8) var<storage, read_write> dA: array<f32>;
@group(0) @binding(9) var<storage, read_write> dB: array<f32>;
@group(0) @binding(10) var<storage, read_write> dC: array<f32>;
@group(0) @binding(11) var<storage, read_write> dDelta: array<f32>;
@group(0) @binding(12) var<storage, read_write> du: array<f32>;
${MATH}
// f'(x) for f(x) = expm1(x)/x: d coef / dA = dt^2 f'(dt A).
fn zoh_fprime(x: f32) -> f32 {
  if (abs(x) < 0.1) {
    return 0.5 + x * (1.0 / 3.0 + x * (1.0 / 8.0 + x * (1.0 / 30.0 + x * (1.0 / 144.0))));
  }
  return (x * exp(x) - expm1_(x)) / (x * x);
}

// Reverse scan of one (b, d, n). channel_part: du, dDelta and the returned dA_log term;
// otherwise dB and dC. Each output element has exactly one writer workgroup.
fn scan_back(b: u32, d: u32, n: u32, channel_part: bool) -> f32 {
  let L = params.seq_len;
  let DI = params.d_inner;
  let N = params.d_state;
  let a = -exp(A[d * N + n]);
  var g = 0.0;
  var dA_acc = 0.0;
  for (var tt = L; tt > 0u; tt = tt - 1u) {
    let t = tt - 1u;
    let i = (b * L + t) * DI + d;
    let bn = (b * L + t) * N + n;
    let k = i * N + n;
    let h_t = h_cache[k];
    var h_prev = 0.0;
    if (t > 0u) { h_prev = h_cache[k - DI * N]; }
    g = g + dy[i] * C[bn];
    let z = delta[i];
    let dt = softplus(z);
    let x = dt * a;
    let abar = exp(x);
    let coef = expm1_(x) / a;
    let dabar = g * h_prev;
    let dcoef = g * B[bn] * u[i];
    if (channel_part) {
      du[i] += g * coef * B[bn];
      dDelta[i] += (dabar * abar * a + dcoef * abar) * sigmoid(z);
      dA_acc = dA_acc + dabar * abar * dt + dcoef * dt * dt * zoh_fprime(x);
    } else {
      dB[bn] += g * coef * u[i];
      dC[bn] += dy[i] * h_t;
    }
    g = g * abar;
  }
  return dA_acc * a;
}

@compute @workgroup_size(1)
fn backward_scan(@builtin(workgroup_id) wid: vec3<u32>) {
  let d = wid.x;
  let n = wid.y;
  if (wid.z != 0u || d >= params.d_inner || n >= params.d_state) {
    return;
  }
  if (n == 0u) {
    for (var nn = 0u; nn < params.d_state; nn = nn + 1u) {
      var acc = 0.0;
      for (var b = 0u; b < params.batch; b = b + 1u) {
        acc = acc + scan_back(b, d, nn, true);
      }
      dA[d * params.d_state + nn] += acc;
    }
  }
  if (d == 0u) {
    for (var dd = 0u; dd < params.d_inner; dd = dd + 1u) {
      for (var b = 0u; b < params.batch; b = b + 1u) {
        _ = scan_back(b, dd, n, false);
      }
    }
  }
}
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

// One workgroup per (chunk, head, batch). It recomputes its entering state from slot 0
// (the initial state) instead of reading another workgroup's carry: no race.
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
      var h = state_carry[s];
      for (var t = 0u; t < t0; t = t + 1u) {
        let bn = ((b * L + t) * G + gi) * N + n;
        h = decay(b, t, hh, sA) * h + B_proj[bn] * x_in[(b * L + t) * DI + hh * P + p];
      }
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

export const SSD_BACKWARD_WGSL = /* wgsl */ `${SSD_HEADER}
@group(0) @binding(7) var<storage, read> state_carry: array<f32>;
@group(0) @binding(8) var<storage, read> dy: array<f32>;
@group(0) @binding(9) var<storage, read_write> dx: array<f32>;
@group(0) @binding(10) var<storage, read_write> dB: array<f32>;
@group(0) @binding(11) var<storage, read_write> dC: array<f32>;
@group(0) @binding(12) var<storage, read_write> ddt: array<f32>;
@group(0) @binding(13) var<storage, read_write> dA_log: array<f32>;
@group(0) @binding(14) var<storage, read_write> dD_vec: array<f32>;
${MATH}
fn decay(b: u32, t: u32, hh: u32, sA: f32) -> f32 {
  let j = (b * params.seq_len + t) * params.n_heads + hh;
  return exp(-sA * softplus(dt_in[j] + dt_bias[hh]));
}

// h[n, p] after step t, recomputed from the carry entering t's chunk.
fn state_after(b: u32, hh: u32, n: u32, p: u32, t: u32, sA: f32) -> f32 {
  let L = params.seq_len;
  let H = params.n_heads;
  let P = params.d_head;
  let N = params.d_state;
  let gi = hh * params.n_groups / H;
  let c = t / params.chunk_len;
  var h = state_carry[((c * params.batch + b) * H + hh) * N * P + n * P + p];
  for (var s = c * params.chunk_len; s <= t; s = s + 1u) {
    let bn = ((b * L + s) * params.n_groups + gi) * N + n;
    h = decay(b, s, hh, sA) * h + B_proj[bn] * x_in[(b * L + s) * params.d_inner + hh * P + p];
  }
  return h;
}

// A single workgroup runs the whole backward in a fixed order (deterministic, no atomics).
// The ABI binds no D_vec here, so dx leaves out the D·dy skip term (the profile compares
// it with ref dx − D·dy); dD_vec = sum over t, p of dy·x needs no D.
@compute @workgroup_size(1)
fn ssd_chunk_backward(@builtin(workgroup_id) wid: vec3<u32>) {
  if (wid.x != 0u || wid.y != 0u || wid.z != 0u) {
    return;
  }
  let L = params.seq_len;
  let H = params.n_heads;
  let P = params.d_head;
  let N = params.d_state;
  let G = params.n_groups;
  let DI = params.d_inner;
  for (var b = 0u; b < params.batch; b = b + 1u) {
    for (var hh = 0u; hh < H; hh = hh + 1u) {
      let gi = hh * G / H;
      let sA = softplus(A_log[hh]);
      var dD_acc = 0.0;
      for (var t = 0u; t < L; t = t + 1u) {
        for (var p = 0u; p < P; p = p + 1u) {
          let i = (b * L + t) * DI + hh * P + p;
          dD_acc = dD_acc + dy[i] * x_in[i];
        }
      }
      dD_vec[hh] += dD_acc;
      var dsA = 0.0;
      for (var n = 0u; n < N; n = n + 1u) {
        for (var p = 0u; p < P; p = p + 1u) {
          var g = 0.0;
          for (var tt = L; tt > 0u; tt = tt - 1u) {
            let t = tt - 1u;
            let i = (b * L + t) * DI + hh * P + p;
            let bn = ((b * L + t) * G + gi) * N + n;
            let j = (b * L + t) * H + hh;
            let z = dt_in[j] + dt_bias[hh];
            let dt = softplus(z);
            let a = exp(-sA * dt);
            let h_t = state_after(b, hh, n, p, t, sA);
            var h_prev = state_carry[((b * H + hh) * N + n) * P + p];
            if (t > 0u) { h_prev = state_after(b, hh, n, p, t - 1u, sA); }
            g = g + dy[i] * C_proj[bn];
            dC[bn] += dy[i] * h_t;
            dB[bn] += g * x_in[i];
            dx[i] += g * B_proj[bn];
            let da = g * h_prev;
            ddt[j] += da * (-sA * a) * sigmoid(z);
            dsA = dsA + da * (-dt * a);
            g = g * a;
          }
        }
      }
      dA_log[hh] += dsA * sigmoid(A_log[hh]);
    }
  }
}
`;
