// PLANTED FAULT: the line marked `planted fault` below differs from y_and_state.wgsl.
// S6 forward writing y AND the final state into ONE output buffer:
//   out = [ y (batch, seq_len, d_inner) | last_state (batch, d_inner, d_state) ].
// Its softplus is the stable form max(x, 0) + log(1 + exp(-|x|)) (convention.dt =
// "softplus_stable"), the zero-order hold B-bar = (exp(dt A) - 1) / A * B.
struct Params { batch: u32, seq_len: u32, d_inner: u32, d_state: u32, }
@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> u: array<f32>;       // (batch, seq_len, d_inner)
@group(0) @binding(2) var<storage, read> delta: array<f32>;   // (batch, seq_len, d_inner)
@group(0) @binding(3) var<storage, read> A_log: array<f32>;   // (d_inner, d_state)
@group(0) @binding(4) var<storage, read> B: array<f32>;       // (batch, seq_len, d_state)
@group(0) @binding(5) var<storage, read> C: array<f32>;       // (batch, seq_len, d_state)
@group(0) @binding(6) var<storage, read> D: array<f32>;       // (d_inner,)
@group(0) @binding(7) var<storage, read_write> out: array<f32>;

fn log1p_small(e: f32) -> f32 {  // log(1 + e), 0 <= e <= 1: series below 0.25
  if (e < 0.25) {
    var term = e;
    var sum = 0.0;
    for (var k = 1u; k <= 10u; k = k + 1u) { sum = sum + term / f32(k); term = -term * e; }
    return sum;
  }
  return log(1.0 + e);
}
fn softplus_stable(x: f32) -> f32 { return max(x, 0.0) + log1p_small(exp(-abs(x))); }
fn expm1_(x: f32) -> f32 {
  if (abs(x) < 0.5) {
    var term = x;
    var sum = x;
    for (var k = 2u; k <= 10u; k = k + 1u) { term = term * x / f32(k); sum = sum + term; }
    return sum;
  }
  return exp(x) - 1.0;
}

@compute @workgroup_size(64)
fn scan(@builtin(global_invocation_id) gid: vec3<u32>) {
  let d = gid.x;
  let b = gid.y;
  let L = params.seq_len;
  let DI = params.d_inner;
  let N = params.d_state;
  if (d >= DI || b >= params.batch) { return; }
  var h: array<f32, 16>;
  for (var t = 0u; t < L; t = t + 1u) {
    let i = (b * L + t) * DI + d;
    let dt = softplus_stable(delta[i]);
    var acc = 0.0;
    for (var n = 0u; n < N; n = n + 1u) {
      let a = -exp(A_log[d * N + n]);
      let bn = (b * L + t) * N + n;
      h[n] = exp(dt * a) * h[n] + expm1_(dt * a) / a * B[bn] * u[i];
      acc = acc + C[bn] * h[n];
    }
    out[i] = acc + D[d] * u[i];
  }
  let last = params.batch * L * DI;  // the state block starts after y
  for (var n = 0u; n < N; n = n + 1u) {
    out[last + (d * params.batch + b) * N + n] = h[n];  // planted fault: (d_inner, batch) order
  }
}
