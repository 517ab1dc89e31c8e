// PLANTED FAULT: the line marked `planted fault` below differs from gated.wgsl.
// S6 forward with Mamba's output gate: out = (C h + D u) * silu(z), z an extra input
// shaped like y (convention.gate = "silu"); mamba's convention otherwise.
struct Params { batch: u32, seq_len: u32, d_inner: u32, d_state: u32, }
@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> u: array<f32>;       // (batch, seq_len, d_inner)
@group(0) @binding(2) var<storage, read> delta: array<f32>;   // (batch, seq_len, d_inner)
@group(0) @binding(3) var<storage, read> A_log: array<f32>;   // (d_inner, d_state)
@group(0) @binding(4) var<storage, read> B: array<f32>;       // (batch, seq_len, d_state)
@group(0) @binding(5) var<storage, read> C: array<f32>;       // (batch, seq_len, d_state)
@group(0) @binding(6) var<storage, read> D: array<f32>;       // (d_inner,)
@group(0) @binding(7) var<storage, read_write> y: array<f32>; // (batch, seq_len, d_inner)
@group(0) @binding(8) var<storage, read> z: array<f32>;       // (batch, seq_len, d_inner)
fn softplus(x: f32) -> f32 {
  if (x > 20.0) { return x; }
  let e = exp(x);
  if (e < 0.25) {  // log(1 + e) by its series: lavapipe's log is coarse near 1
    var term = e;
    var sum = 0.0;
    for (var k = 1u; k <= 10u; k = k + 1u) { sum = sum + term / f32(k); term = -term * e; }
    return sum;
  }
  return log(1.0 + e);
}

@compute @workgroup_size(64)
fn scan(@builtin(global_invocation_id) gid: vec3<u32>) {
  let d = gid.x;
  let b = gid.y;
  let L = params.seq_len;
  let DI = params.d_inner;
  let N = params.d_state;
  if (d >= DI || b >= params.batch) { return; }
  var h: array<f32, 16>;  // d_state <= 16
  for (var t = 0u; t < L; t = t + 1u) {
    let i = (b * L + t) * DI + d;            // (batch, seq_len, d_inner)
    let dt = softplus(delta[i]);
    var acc = 0.0;
    for (var n = 0u; n < N; n = n + 1u) {
      let bn = (b * L + t) * N + n;          // (batch, seq_len, d_state)
      let a = -exp(A_log[d * N + n]);
      h[n] = exp(dt * a) * h[n] + dt * B[bn] * u[i];
      acc = acc + C[bn] * h[n];
    }
    let g = 1.0 / (1.0 + exp(-z[i]));  // planted fault: sigmoid(z), not silu(z)
    y[i] = (acc + D[d] * u[i]) * g;
  }
}
