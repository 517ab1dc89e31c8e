// PLANTED FAULT: the line marked `planted fault` below differs from raw_A.wgsl.
// S6 forward taking dt and A RAW: no softplus on dt, A itself rather than A_log
// (convention: dt = "none", A = "raw"); Euler's B-bar = dt B.
struct Params { batch: u32, seq_len: u32, d_inner: u32, d_state: u32, }
@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> u: array<f32>;       // (batch, seq_len, d_inner)
@group(0) @binding(2) var<storage, read> delta: array<f32>;   // (batch, seq_len, d_inner), dt itself
@group(0) @binding(3) var<storage, read> A: array<f32>;       // (d_inner, d_state), A itself (< 0)
@group(0) @binding(4) var<storage, read> B: array<f32>;       // (batch, seq_len, d_state)
@group(0) @binding(5) var<storage, read> C: array<f32>;       // (batch, seq_len, d_state)
@group(0) @binding(6) var<storage, read> D: array<f32>;       // (d_inner,)
@group(0) @binding(7) var<storage, read_write> y: array<f32>; // (batch, seq_len, d_inner)

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
    let dt = log(1.0 + exp(delta[i]));  // planted fault: a softplus the convention does not have
    var acc = 0.0;
    for (var n = 0u; n < N; n = n + 1u) {
      let bn = (b * L + t) * N + n;          // (batch, seq_len, d_state)
      let a = A[d * N + n];
      h[n] = exp(dt * a) * h[n] + dt * B[bn] * u[i];
      acc = acc + C[bn] * h[n];
    }
    y[i] = acc + D[d] * u[i];
  }
}
