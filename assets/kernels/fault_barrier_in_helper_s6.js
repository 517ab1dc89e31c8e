// Planted fault: a barrier in non-uniform control flow, behind a helper. forward_reduce
// calls tile_barrier(t, L) in uniform control flow, but the helper skips the barrier for
// invocations past the end: t is per-invocation. naga accepts it and lavapipe runs it
// right, ssmviz's own uniformity lint misses it (the value comes in as a parameter);
// Tint, Chrome's compiler, rejects it.

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

fn tile_barrier(t: u32, L: u32) {
  if (t < L) { workgroupBarrier(); }  // planted fault: t differs per invocation
}

// y = sum over n of the second half of h_cache, plus D * u.
@compute @workgroup_size(64)
fn forward_reduce(@builtin(workgroup_id) wid: vec3<u32>,
                  @builtin(local_invocation_id) lid: vec3<u32>) {
  let t = wid.x * 64u + lid.x;
  let d = wid.y;
  let b = wid.z;
  let L = params.seq_len;
  tile_barrier(t, L);
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
