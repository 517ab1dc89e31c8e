// Planted fault: a missing term in a gradient. dDelta leaves out the path through the
// zero-order-hold input coefficient, (dL/dcoef) * d coef / d dt = (dL/dcoef) * Abar.

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
      dDelta[i] += (dabar * abar * a) * sigmoid(z);  // planted fault: no dcoef term
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
