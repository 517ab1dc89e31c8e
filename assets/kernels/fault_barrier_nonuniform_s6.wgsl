// Planted fault: workgroupBarrier() in non-uniform control flow (under a condition that
// depends on local_invocation_id). naga accepts it and lavapipe runs it; Tint rejects it.

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

// y = sum over n of the second half of h_cache, plus D * u; staged through workgroup memory.
var<workgroup> tile: array<f32, 64>;

@compute @workgroup_size(64)
fn forward_reduce(@builtin(workgroup_id) wid: vec3<u32>,
                  @builtin(local_invocation_id) lid: vec3<u32>) {
  let t = wid.x * 64u + lid.x;
  let d = wid.y;
  let b = wid.z;
  let L = params.seq_len;
  let DI = params.d_inner;
  let N = params.d_state;
  let half = params.batch * L * DI * N;
  if (t < L) {
    let i = (b * L + t) * DI + d;
    var acc = 0.0;
    for (var n = 0u; n < N; n = n + 1u) {
      acc = acc + h_cache[half + i * N + n];
    }
    tile[lid.x] = acc;
    workgroupBarrier();  // planted fault: barrier inside `if (t < L)`
    y[i] = tile[lid.x] + D_vec[d] * u[i];
  }
}
